"""`kohort groups ...`: consumer groups, like kafka-consumer-groups.sh (same option names and meanings).

Actions (subcommands): `list` (`--type [T,..]`, `--state [S,..]`: show and filter), `describe` (groups or
`--all-groups`; `--offsets` (default: offsets, log-end offsets, lag and owner per partition), `--members`,
`--state`, each with `--verbose`: leader epochs; member epochs, current and target assignments (KIP-848
consumer groups, read by ConsumerGroupDescribe); group and target-assignment epochs), `lag` (kohort's:
per-partition lag and a total), `reset-offsets` (`--to-earliest|--to-latest|--to-current|--to-offset|
--shift-by|--to-datetime|--to-timestamp|--by-duration|--from-file`, scope `--topic T[:P,..]`/`--all-topics`,
dry run unless `--execute`, `--export` prints Kafka's CSV that `--from-file` reads back; inactive groups
only), `delete` (groups or `--all-groups`), `delete-offsets` (KIP-496, `--topic T[:P,..]`), `validate-regex`.

Kafka's own spelling is accepted too: `kohort groups --describe --group G --members --verbose`
(`kafka_style()` turns the action flag into the subcommand, `--group` into positionals and `--timeout`
milliseconds into seconds), so a kafka-consumer-groups.sh command line runs by changing its name.
"""
from __future__ import annotations

import re
import sys
import time

from kohort.cli.common import Progress, add_connection_args, admin_client, print_json, table
from kohort.cli.group_common import (MISSING, add_describe_args, add_group_args, add_reset_mode, add_reset_scope,
                                     add_to_datetime, assignment_text, describe_views, group_names, parse_datetime_ms,
                                     parse_filter, print_views, show_view, topic_partitions)
from kohort.errors import KohortError

# kafka-consumer-groups.sh --list --state: the states of classic and consumer groups (GroupState)
STATES = {s.lower(): s for s in ("Unknown", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead",
                                 "Empty", "Assigning", "Reconciling")}
TYPES = ("classic", "consumer")
ACTIONS = {"--list": "list", "--describe": "describe", "--delete": "delete", "--reset-offsets": "reset-offsets",
           "--delete-offsets": "delete-offsets", "--validate-regex": "validate-regex"}


def register(subparsers) -> None:
    p = subparsers.add_parser("groups", help="list, describe, lag, reset-offsets, delete consumer groups",
                              description="Consumer group administration (like kafka-consumer-groups.sh; its "
                                          "--describe --group G ... spelling works too).")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    s = sub.add_parser("list", help="list groups with their type and state")
    s.add_argument("--type", nargs="?", const="", default=None, metavar="TYPE[,TYPE]",
                   help="only groups of these types (classic, consumer)")
    s.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE]",
                   help="only groups in these states (e.g. stable,empty)")
    add_connection_args(s)
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("describe", help="offsets, lag and owners per partition; --members, --state")
    add_group_args(s)
    add_describe_args(s, offsets="partitions with offsets and lag (the default)",
                      state="state, coordinator, assignor and member count",
                      verbose="also leader epochs (--offsets), epochs and target assignments (--members, --state)")
    add_connection_args(s)
    s.set_defaults(func=cmd_describe)

    s = sub.add_parser("lag", help="lag per partition and in total")
    s.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_args(s)
    s.set_defaults(func=cmd_lag)

    s = sub.add_parser("reset-offsets", help="move groups' committed offsets (inactive groups only)")
    add_group_args(s)
    to = add_reset_scope(s, all_topics="every topic the group has offsets for")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    to.add_argument("--shift-by", type=int, metavar="N", help="move by N (negative: back)")
    add_to_datetime(to)
    to.add_argument("--to-timestamp", type=int, metavar="MS", help="like --to-datetime, in epoch ms")
    to.add_argument("--by-duration", metavar="PnDTnHnMnS",
                    help="the first offset at or after now minus this ISO-8601 duration, e.g. PT1H30M")
    to.add_argument("--from-file", metavar="CSV",
                    help="the offsets of a CSV file (topic,partition,offset or group,topic,partition,offset; "
                         "what --export prints)")
    s.add_argument("--export", action="store_true", help="print the plan as Kafka's CSV instead of a table")
    add_reset_mode(s, execute="apply the reset (default: dry run)", dry_run="only show the plan (the default)")
    add_connection_args(s)
    s.set_defaults(func=cmd_reset)

    s = sub.add_parser("delete", help="delete groups (they must be empty)")
    add_group_args(s)
    add_connection_args(s)
    s.set_defaults(func=cmd_delete)

    s = sub.add_parser("delete-offsets", help="delete a group's committed offsets of some topics (KIP-496)")
    s.add_argument("group", metavar="GROUP")
    s.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P..]",
                   help="topic (optionally some partitions) whose offsets to delete (repeatable)")
    add_connection_args(s)
    s.set_defaults(func=cmd_delete_offsets)

    s = sub.add_parser("validate-regex", help="check a regular expression for regex subscriptions (KIP-848)")
    s.add_argument("regex", metavar="REGEX")
    s.set_defaults(func=cmd_validate_regex)


def kafka_style(argv: list[str], actions: dict[str, str] = ACTIONS) -> list[str]:
    """kafka-consumer-groups.sh's spelling → kohort's: `--describe --group G [--group H] --members` →
    `describe G H --members`; `--timeout MS` → `--timeout S`. Anything else is left as it is.
    `actions` maps the tool's action flags to kohort's subcommands (kafka-share-groups.sh has its own)."""
    if not argv or not argv[0].startswith("--") or argv[0] in ("--help", "-h"):
        return argv
    found = [a for a in argv if a.split("=", 1)[0] in actions]
    if len(found) != 1:
        if not found:
            return argv
        raise KohortError(f"give exactly one action of {', '.join(actions)}; got {' '.join(found)}")
    action = actions[found[0].split("=", 1)[0]]
    groups: list[str] = []
    rest: list[str] = []
    it = iter(argv)
    for a in it:
        name, eq, val = a.partition("=")
        if name in actions:
            if name == "--validate-regex":
                groups.append(val if eq else next(it, ""))
            continue
        if name == "--group":
            groups.append(val if eq else next(it, ""))
        elif name == "--timeout":
            ms = val if eq else next(it, "")
            try:
                rest += ["--timeout", f"{int(ms) / 1000:g}"]
            except ValueError:
                raise KohortError(f"--timeout: milliseconds expected, got {ms!r}") from None
        else:
            rest.append(a)
    return [action, *groups, *rest]


# -- list -----------------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    states = parse_filter(args.state, STATES, "state")
    types = parse_filter(args.type, {t: t for t in TYPES}, "type")
    with admin_client(args) as a:
        groups = a.list_groups(timeout=args.timeout, states=states, types=types)
    # the broker filters; filtering again keeps the answer right on a broker that ignores the filters
    groups = [g for g in groups if (not states or g.state in states) and (not types or _type(g) in types)]
    if args.json:
        print_json([{"group": g.group_id, "type": _type(g), "state": g.state, "protocol_type": g.protocol_type}
                    for g in groups])
    elif groups:
        print(table(["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"],
                    [(g.group_id, _type_text(g), g.state or MISSING, g.protocol_type or MISSING) for g in groups]))
    return 0


def _type(g) -> str:
    return g.group_type or MISSING        # ListGroups < v5 does not tell


def _type_text(g) -> str:
    """As Kafka's GroupType prints: Classic, Consumer."""
    return _type(g).capitalize()


def _group_names(a, args) -> list[str]:
    return group_names(args, lambda: [g.group_id for g in a.list_groups(timeout=args.timeout)])


# -- describe -------------------------------------------------------------------------------------------
def group_view(a, g: str, timeout) -> dict:
    """One group as kafka-consumer-groups.sh --describe sees it: a KIP-848 consumer group from
    ConsumerGroupDescribe (epochs, target assignments), a classic group from DescribeGroups."""
    cg = a.describe_consumer_groups([g], timeout)[g]
    if cg is not None:
        return {"group": g, "type": "consumer", "state": cg.state, "protocol_type": "consumer",
                "assignment_strategy": cg.assignor, "coordinator": cg.coordinator,
                "group_epoch": cg.group_epoch, "target_assignment_epoch": cg.assignment_epoch,
                "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                             "client_id": m.client_id, "host": m.client_host,
                             "assignment": [[tp.topic, tp.partition] for tp in m.assignment],
                             "member_epoch": m.member_epoch,
                             "target_assignment": [[tp.topic, tp.partition] for tp in m.target_assignment],
                             "member_type": {0: "classic", 1: "consumer"}.get(m.member_type, "unknown"),
                             "upgraded": {0: False, 1: True}.get(m.member_type)}
                            for m in cg.members]}
    d = a.describe_groups([g], timeout=timeout)[0]
    return {"group": g, "type": "classic", "state": d.state, "protocol_type": d.protocol_type,
            "assignment_strategy": d.protocol, "coordinator": d.coordinator,
            "group_epoch": None, "target_assignment_epoch": None,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "host": m.client_host,
                         "assignment": [[tp.topic, tp.partition] for tp in m.assignment],
                         "member_epoch": None, "target_assignment": [], "member_type": "classic",
                         "upgraded": None} for m in d.members]}


def offset_rows(a, view: dict, timeout) -> list[dict]:
    """Per partition (committed or assigned): committed offset and its leader epoch, log-end offset, lag
    (None without a committed offset, as Kafka prints "-") and the owner."""
    from kohort.client.admin import LATEST
    from kohort.structs import TopicPartition
    owner = {}
    for m in view["members"]:
        for t, p in m["assignment"]:
            owner[TopicPartition(t, p)] = m
    committed = a.list_group_offsets(view["group"], None, timeout)
    tps = sorted(set(committed) | set(owner))
    ends = a.list_offsets({tp: LATEST for tp in tps}, timeout) if tps else {}
    rows = []
    for tp in tps:
        c = committed.get(tp)
        end = ends.get(tp)
        m = owner.get(tp, {})
        cur = c.offset if c is not None else None
        rows.append({"group": view["group"], "topic": tp.topic, "partition": tp.partition,
                     "leader_epoch": c.leader_epoch if c is not None and c.leader_epoch not in (None, -1) else None,
                     "current_offset": cur, "log_end_offset": end,
                     "lag": None if cur is None or end is None else end - cur,
                     "member_id": m.get("member_id"), "host": m.get("host"), "client_id": m.get("client_id")})
    return rows


def cmd_describe(args) -> int:
    def complete(v: dict) -> None:
        if not args.members:
            v["partitions"] = offset_rows(a, v, args.timeout)

    def failure(g: str, e: KohortError) -> None:
        print(f"kohort groups: group {g}: {e}", file=sys.stderr)

    with admin_client(args) as a:
        views, failed = describe_views(a, args, lambda: _group_names(a, args),
                                       lambda g: group_view(a, g, args.timeout), failure, complete)
    return print_views(args, views, failed, lambda v: _show(v, args))


def _show(v: dict, args) -> None:
    if v["state"] == "Empty":
        print(f"Consumer group '{v['group']}' has no active members.", file=sys.stderr)
    elif v["state"] == "Dead":
        print(f"Consumer group '{v['group']}' does not exist.", file=sys.stderr)
        return
    elif v["state"] != "Stable":
        print(f"Warning: Consumer group '{v['group']}' is rebalancing.", file=sys.stderr)
    show_view(v, args, state=_print_state, members=_print_members, offsets=_print_offsets)


def _print_state(v: dict, verbose: bool) -> None:
    head = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row = [v["group"], v["coordinator_address"], v["assignment_strategy"] or MISSING, v["state"]]
    if verbose:
        head += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [v["group_epoch"], v["target_assignment_epoch"]]
    print(table(head + ["#MEMBERS"], [row + [len(v["members"])]]))


def _print_members(v: dict, verbose: bool) -> None:
    members = v["members"]
    with_instance = any(m["group_instance_id"] for m in members)
    mixed = {m["upgraded"] for m in members} >= {True, False}
    head = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]
    if verbose:
        head += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"] + \
            (["UPGRADED"] if mixed else [])
    else:
        head += ["ASSIGNMENT"]
    rows = []
    for m in members:
        r = [v["group"], m["member_id"]] + ([m["group_instance_id"] or ""] if with_instance else []) + \
            [m["host"], m["client_id"], len(m["assignment"])]
        if verbose:
            r += [m["member_epoch"], assignment_text(m["assignment"]), v["target_assignment_epoch"],
                  assignment_text(m["target_assignment"])]
            if mixed:
                r.append(str(m["upgraded"]).lower() if m["upgraded"] is not None else MISSING)
        else:
            r.append(assignment_text(m["assignment"]))
        rows.append(r)
    print(table(head, rows))


def _print_offsets(v: dict, verbose: bool) -> None:
    rows = v["partitions"]
    if not rows:
        return
    head = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + \
        ["CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    print(table(head, [[r["group"], r["topic"], r["partition"]] + ([r["leader_epoch"]] if verbose else []) +
                       [r["current_offset"], r["log_end_offset"], r["lag"], r["member_id"], r["host"],
                        r["client_id"]] for r in rows]))


def cmd_lag(args) -> int:
    results = []
    with admin_client(args) as a:
        prog = Progress(len(args.groups), "lag", unit="groups") if len(args.groups) > 1 else None
        for i, g in enumerate(args.groups):
            results.append((g, a.group_lag(g, timeout=args.timeout)))
            if prog:
                prog.update(i + 1)
        if prog:
            prog.close()
    if args.json:
        print_json([{"group": g, "total_lag": sum(r.lag or 0 for r in rows),
                     "partitions": [{"topic": r.topic, "partition": r.partition,
                                     "current_offset": r.current_offset, "log_end_offset": r.log_end_offset,
                                     "lag": r.lag, "member_id": r.member_id} for r in rows]}
                    for g, rows in results])
        return 0
    for i, (g, rows) in enumerate(results):
        if i:
            print()
        print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"],
                    [(r.group, r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag) for r in rows]))
        print(f"TOTAL LAG {g}: {sum(r.lag or 0 for r in rows)}")
    return 0


# -- reset-offsets --------------------------------------------------------------------------------------
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse reads it (PnDTnHnMn.nS, e.g. PT1H30M, P2D, -PT5M) → ms."""
    m = _DURATION.fullmatch(text.strip())
    if not m or not any(m.group(i) for i in range(2, 6)) or text.strip().upper().endswith("T"):
        raise KohortError(f"--by-duration: {text!r} is not an ISO-8601 duration PnDTnHnMnS (e.g. PT1H30M)")
    sign, d, h, mi, s, frac = m.groups()
    secs = int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + int(s or 0)
    ms = secs * 1000
    if frac:
        ms += (-1 if (s or "").startswith("-") else 1) * int((frac + "000")[:3])
    return -ms if sign == "-" else ms


def read_reset_csv(path: str, groups: list[str]) -> dict:
    """Kafka's reset plan CSV → {group: {TopicPartition: offset}}: `topic,partition,offset` lines for one
    group, `group,topic,partition,offset` lines otherwise (what --export prints)."""
    from kohort.structs import TopicPartition
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [ln.strip() for ln in fh if ln.strip()]
    except OSError as e:
        raise KohortError(f"--from-file {path}: {e.strerror}") from None
    out: dict = {}
    for n, line in enumerate(lines, 1):
        cols = [c.strip() for c in line.split(",")]
        try:
            if len(cols) == 3 and len(groups) == 1:
                g, (t, p, o) = groups[0], cols
            elif len(cols) == 4:
                g, t, p, o = cols
            else:
                raise ValueError
            out.setdefault(g, {})[TopicPartition(t, int(p))] = int(o)
        except ValueError:
            want = "topic,partition,offset" if len(groups) == 1 else "group,topic,partition,offset"
            raise KohortError(f"--from-file {path} line {n}: expected {want}, got {line!r}") from None
    return out


def _target(args):
    if args.to_earliest:
        return "earliest", None
    if args.to_latest:
        return "latest", None
    if args.to_current:
        return "current", None
    if args.to_offset is not None:
        return "offset", args.to_offset
    if args.shift_by is not None:
        return "shift-by", args.shift_by
    if args.to_timestamp is not None:
        return "timestamp", args.to_timestamp
    if args.by_duration is not None:
        return "timestamp", int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    return "timestamp", parse_datetime_ms(args.to_datetime)


def _partitions(a, args, group: str):
    if args.all_topics:
        tps = sorted(a.list_group_offsets(group, timeout=args.timeout))
        if not tps:
            from kohort.client.admin import INACTIVE_STATES
            try:
                state = a.describe_groups([group], timeout=args.timeout)[0].state
            except KohortError:
                state = "Dead"
            if state not in INACTIVE_STATES and args.execute:     # as Kafka's tool: the state comes first
                raise KohortError(f"group {group!r} is {state}: offsets can only be reset while the group is "
                                  f"inactive (no members); stop its consumers first")
            raise KohortError(f"group {group!r} has no committed offsets; name topics with --topic")
        return tps
    return topic_partitions(a, args.topic, args.timeout)


def cmd_reset(args) -> int:
    if args.from_file is None and not args.topic and not args.all_topics:
        raise KohortError("one of the reset scopes should be defined: --all-topics, --topic")
    plans, failed = {}, 0
    with admin_client(args) as a:
        groups = _group_names(a, args)
        from_file = read_reset_csv(args.from_file, groups) if args.from_file else None
        target = None if from_file is not None else _target(args)      # one "now" for --by-duration
        for g in groups:
            if from_file is not None and g not in from_file:
                print(f"kohort groups: no reset plan for group {g} found in {args.from_file}", file=sys.stderr)
                failed += 1
                continue
            try:
                if from_file is not None:
                    to, value, tps = "offsets", from_file[g], sorted(from_file[g])
                else:
                    (to, value), tps = target, _partitions(a, args, g)
                plans[g] = a.reset_group_offsets(g, tps, to=to, value=value, dry_run=not args.execute,
                                                 timeout=args.timeout)
            except KohortError as e:
                if len(groups) == 1:
                    raise
                print(f"kohort groups: group {g}: {e}", file=sys.stderr)
                failed += 1
    if args.export:
        print(export_csv(plans, single=len(groups) == 1), end="")
    elif args.json:
        out = [{"group": g, "executed": bool(args.execute),
                "partitions": [{"topic": tp.topic, "partition": tp.partition, "old_offset": old, "new_offset": new}
                               for tp, (old, new) in sorted(plan.items())]} for g, plan in plans.items()]
        print_json(out[0] if len(groups) == 1 and out else out)     # one group: one object, as before
    else:
        print(table(["GROUP", "TOPIC", "PARTITION", "OLD-OFFSET", "NEW-OFFSET"],
                    [(g, tp.topic, tp.partition, old, new) for g, plan in plans.items()
                     for tp, (old, new) in sorted(plan.items())]))
    if not args.execute:
        print("(dry run: nothing changed; add --execute to apply)", file=sys.stderr)
    return 1 if failed else 0


def export_csv(plans: dict, single: bool) -> str:
    """kafka-consumer-groups.sh --export: `topic,partition,offset` per line for one group,
    `group,topic,partition,offset` for several."""
    lines = []
    for g, plan in plans.items():
        for tp, (_, new) in sorted(plan.items()):
            lines.append(f"{tp.topic},{tp.partition},{new}" if single else f"{g},{tp.topic},{tp.partition},{new}")
    return "".join(ln + "\n" for ln in lines)


# -- delete, delete-offsets, validate-regex --------------------------------------------------------------
def cmd_delete(args) -> int:
    with admin_client(args) as a:
        res = a.delete_groups(_group_names(a, args), timeout=args.timeout)
    if args.json:
        print_json([{"group": g, "error": None if e is None else str(e)} for g, e in res.items()])
    failed = 0
    for g, e in res.items():
        if e is None:
            if not args.json:
                print(f"group {g} deleted")
        else:
            failed += 1
            print(f"kohort groups: group {g}: {e}", file=sys.stderr)
    return 1 if failed else 0


def cmd_delete_offsets(args) -> int:
    with admin_client(args) as a:
        tps = topic_partitions(a, args.topic, args.timeout)
        res = a.delete_group_offsets(args.group, tps, timeout=args.timeout)
    failed = {tp: e for tp, e in res.items() if e is not None}
    if args.json:
        print_json({"group": args.group, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "error": None if e is None else str(e)}
            for tp, e in sorted(res.items())]})
    else:
        if not failed:
            print(f"Request succeeded for deleting offsets from group {args.group}.")
        print(table(["TOPIC", "PARTITION", "STATUS"],
                    [(tp.topic, tp.partition, "Successful" if e is None else f"Error: {e}")
                     for tp, e in sorted(res.items())]))
    for tp, e in sorted(failed.items()):
        print(f"kohort groups: {tp.topic}[{tp.partition}]: {e}", file=sys.stderr)
    return 1 if failed else 0


def cmd_validate_regex(args) -> int:
    """kohort's broker matches regex subscriptions with Python's `re` (full match), so that is the check."""
    try:
        re.compile(args.regex)
    except re.error as e:
        print(f"The regular expression `{args.regex}` is invalid: {e}.")
        return 1
    print(f"The regular expression `{args.regex}` is valid.")
    return 0
