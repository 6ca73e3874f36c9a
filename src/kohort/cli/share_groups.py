"""`kohort share-groups ...`: share groups (KIP-932), like kafka-share-groups.sh (same option names, columns
and messages).

Actions (subcommands): `list` (group names; `--state [S,..]`: GROUP STATE, filtered), `describe` (groups or
`--all-groups`; `--offsets` (the default): GROUP TOPIC PARTITION START-OFFSET LAG per share-partition, "-"
where the group has no state yet (KIP-1226 lag); `--members`: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS
ASSIGNMENT; `--state`: GROUP COORDINATOR (ID) STATE #MEMBERS; `--verbose` adds LEADER-EPOCH, MEMBER-EPOCH,
GROUP-EPOCH and ASSIGNMENT-EPOCH), `reset-offsets` (one group, Empty or not existing yet;
`--to-earliest|--to-latest|--to-datetime|--to-offset`, `--topic T[:P,..]`/`--all-topics`, `--dry-run` or
`--execute`, one of them required as Kafka's tool requires it; GROUP TOPIC PARTITION NEW-OFFSET),
`delete-offsets` (one Empty group, whole topics: TOPIC STATUS), `delete` (Empty share groups or
`--all-groups`).

Kafka's own spelling is accepted too (`kohort share-groups --describe --group G --members`), turned into
the subcommand by cli/groups.py's `kafka_style` with this tool's action flags. Kafka's tool writes its
"Error: ..." lines on stdout and mostly exits 0; kohort writes the same texts on stderr and exits 1 when
something failed.
"""
from __future__ import annotations

import sys

from kohort.cli.common import add_connection_args, admin_client, print_json, table
from kohort.cli.group_common import (add_describe_args, add_group_args, add_reset_mode, add_reset_scope,
                                     add_to_datetime, assignment_text, describe_views, group_names, parse_datetime_ms,
                                     parse_filter, print_views, show_view, topic_partitions)
from kohort.errors import KohortError

# GroupState.groupStatesForType(SHARE), in the order Kafka's tool names them
STATES = {s.lower(): s for s in ("Dead", "Stable", "Empty")}
ACTIONS = {"--list": "list", "--describe": "describe", "--delete": "delete", "--reset-offsets": "reset-offsets",
           "--delete-offsets": "delete-offsets"}
PROG = "kohort share-groups"
EVERY = "every share group"


def register(subparsers) -> None:
    p = subparsers.add_parser("share-groups", help="list, describe, reset-offsets, delete share groups (KIP-932)",
                              description="Share group administration (like kafka-share-groups.sh; its "
                                          "--describe --group G ... spelling works too).")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    s = sub.add_parser("list", help="list share groups (with --state: and their states)")
    s.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE]",
                   help="show states; only groups in these states (Empty, Stable, Dead) when given")
    add_connection_args(s)
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("describe", help="start offsets and lag per partition; --members, --state")
    add_group_args(s, EVERY)
    add_describe_args(s, offsets="share-partitions with start offset and lag (default)",
                      state="coordinator, state and member count",
                      verbose="also leader epochs (--offsets), member epochs (--members), group and assignment "
                              "epochs (--state)")
    add_connection_args(s)
    s.set_defaults(func=cmd_describe)

    s = sub.add_parser("reset-offsets", help="move a share group's start offsets (Empty groups only)")
    s.add_argument("groups", nargs="*", metavar="GROUP")
    to = add_reset_scope(s, all_topics="every partition the group has state for")
    add_to_datetime(to)
    to.add_argument("--to-offset", type=int, metavar="OFFSET", help="this offset (kept within the log)")
    add_reset_mode(s, execute="apply the reset", dry_run="only show the plan")
    add_connection_args(s)
    s.set_defaults(func=cmd_reset)

    s = sub.add_parser("delete-offsets", help="delete an Empty share group's state of whole topics")
    s.add_argument("groups", nargs="*", metavar="GROUP")
    s.add_argument("--topic", action="append", required=True, metavar="TOPIC",
                   help="topic whose share state to delete (repeatable)")
    add_connection_args(s)
    s.set_defaults(func=cmd_delete_offsets)

    s = sub.add_parser("delete", help="delete share groups (they must be Empty)")
    add_group_args(s, EVERY)
    add_connection_args(s)
    s.set_defaults(func=cmd_delete)


def _one_group(args, action: str) -> str:
    """reset-offsets and delete-offsets act on one group at a time, as in Kafka's tool."""
    if len(args.groups) != 1:
        raise KohortError(f"{action} takes exactly one GROUP (--group), got {len(args.groups)}")
    return args.groups[0]


def _error(text: str) -> None:
    print(f"Error: {text}", file=sys.stderr)


# -- list -----------------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    states = parse_filter(args.state, STATES, "state")
    with admin_client(args) as a:
        groups = a.list_groups(timeout=args.timeout, states=states, types=("share",))
    groups = sorted((g for g in groups if not states or g.state in states), key=lambda g: g.group_id)
    if args.json:
        print_json([{"group": g.group_id, "state": g.state or "Unknown"} for g in groups])
    elif args.state is None:
        for g in groups:
            print(g.group_id)
    else:
        print(table(["GROUP", "STATE"], [(g.group_id, g.state or "Unknown") for g in groups]))
    return 0


def _group_names(args, every) -> list[str]:
    """The groups asked for, sorted, each once; `every()` lists the share groups for --all-groups."""
    return sorted(set(group_names(args, every)))


# -- describe -------------------------------------------------------------------------------------------
def share_group_view(a, g: str, timeout, *, offsets: bool) -> dict:
    """One share group as kafka-share-groups.sh --describe sees it (ShareGroupDescribe; with `offsets`,
    DescribeShareGroupOffsets for every share-partition, None where the group has no state yet)."""
    d = a.describe_share_groups([g], timeout)[g]
    view = {"group": g, "state": d.state, "coordinator": d.coordinator, "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch, "assignor": d.assignor,
            "members": [{"member_id": m.member_id, "host": m.client_host, "client_id": m.client_id,
                         "member_epoch": m.member_epoch, "rack_id": m.rack_id,
                         "subscribed_topics": list(m.subscribed_topics),
                         "assignment": [[tp.topic, tp.partition] for tp in m.assignment]}
                        for m in sorted(d.members, key=lambda m: m.member_id)]}
    if offsets:
        infos = a.list_share_group_offsets(g, timeout=timeout, uninitialized=True)
        view["partitions"] = [
            {"group": g, "topic": tp.topic, "partition": tp.partition,
             "leader_epoch": None if i is None else i.leader_epoch,
             "start_offset": None if i is None else i.start_offset,
             "lag": None if i is None else i.lag}
            for tp, i in sorted(infos.items())]
    return view


def cmd_describe(args) -> int:
    def failure(g: str, e: KohortError) -> None:
        _error(f"Executing share group command failed due to {e}")

    with admin_client(args) as a:
        def every() -> list[str]:
            return [g.group_id for g in a.list_share_groups(timeout=args.timeout)]

        views, failed = describe_views(
            a, args, lambda: _group_names(args, every),
            lambda g: share_group_view(a, g, args.timeout, offsets=not (args.state or args.members)), failure)
    return print_views(args, views, failed, lambda v: show_view(v, args, state=_print_state, members=_print_members,
                                                                 offsets=_print_offsets))


def _empty_notice(v: dict) -> None:
    """Kafka's maybePrintEmptyGroupState: an Empty group is said so on stderr."""
    if v["state"] == "Empty":
        print(f"Share group '{v['group']}' has no active members.", file=sys.stderr)
    elif v["state"] == "Dead":
        _error(f"Share group '{v['group']}' does not exist.")


def _print_offsets(v: dict, verbose: bool) -> None:
    rows = v["partitions"]
    if not rows:
        print(f"Share group '{v['group']}' has no offset information.")
        return
    head = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if verbose else []) + ["START-OFFSET", "LAG"]
    print(table(head, [[r["group"], r["topic"], r["partition"]] + ([r["leader_epoch"]] if verbose else []) +
                       [r["start_offset"], r["lag"]] for r in rows]))


def _print_members(v: dict, verbose: bool) -> None:
    _empty_notice(v)
    if v["state"] == "Dead" or not v["members"]:
        return
    head = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["MEMBER-EPOCH"] if verbose else []) + \
        ["ASSIGNMENT"]
    print(table(head, [[v["group"], m["member_id"], m["host"], m["client_id"], len(m["assignment"])] +
                       ([m["member_epoch"]] if verbose else []) + [assignment_text(m["assignment"])]
                       for m in v["members"]]))


def _print_state(v: dict, verbose: bool) -> None:
    _empty_notice(v)
    head = ["GROUP", "COORDINATOR (ID)", "STATE"] + (["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if verbose else []) + \
        ["#MEMBERS"]
    row = [v["group"], v["coordinator_address"], v["state"]] + \
        ([v["group_epoch"], v["assignment_epoch"]] if verbose else []) + [len(v["members"])]
    print(table(head, [row]))


# -- reset-offsets --------------------------------------------------------------------------------------
def _check_inactive(a, group: str, timeout) -> None:
    """Kafka's tool resets only a group that is Empty or does not exist yet (AlterShareGroupOffsets
    creates it)."""
    from kohort.errors import ErrorCode, for_code
    try:
        state = a.describe_share_groups([group], timeout)[group].state
    except for_code(ErrorCode.GROUP_ID_NOT_FOUND):
        return
    if state not in ("Empty", "Dead"):
        raise KohortError(f"Share group '{group}' is not empty.")


def plan_share_reset(a, group: str, args) -> dict:
    """{TopicPartition: new start offset} for the reset the arguments ask for."""
    from kohort.client.admin import EARLIEST, LATEST
    from kohort.structs import TopicPartition
    if args.all_topics:
        tps = sorted(a.list_share_group_offsets(group, timeout=args.timeout, uninitialized=True))
        if not tps:
            raise KohortError(f"share group {group!r} has no share-partitions; name topics with --topic")
    else:
        tps = sorted(TopicPartition(t, p) for t, p in topic_partitions(a, args.topic, args.timeout))
    earliest = a.list_offsets({tp: EARLIEST for tp in tps}, args.timeout)
    latest = a.list_offsets({tp: LATEST for tp in tps}, args.timeout)
    if args.to_earliest:
        return {tp: earliest[tp] for tp in tps}
    if args.to_latest:
        return {tp: latest[tp] for tp in tps}
    if args.to_offset is not None:
        return {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in tps}
    by_ts = a.list_offsets({tp: parse_datetime_ms(args.to_datetime) for tp in tps}, args.timeout)
    # no record at or after the time: the log end, as Kafka's OffsetsUtils.resetToDateTime
    return {tp: by_ts[tp] if by_ts[tp] >= 0 else latest[tp] for tp in tps}


def cmd_reset(args) -> int:
    if not args.topic and not args.all_topics:
        raise KohortError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
    if not (args.execute or args.dry_run):
        raise KohortError("Option [reset-offsets] takes the option: [execute] or [dry-run]")
    group = _one_group(args, "--reset-offsets")
    if args.to_datetime is not None:
        parse_datetime_ms(args.to_datetime)           # a bad time is refused before anything is asked
    with admin_client(args) as a:
        _check_inactive(a, group, args.timeout)
        plan = plan_share_reset(a, group, args)
        failed = {}
        if args.execute:
            failed = {tp: e for tp, e in a.alter_share_group_offsets(group, plan, args.timeout).items()
                      if e is not None}
    if args.json:
        print_json({"group": group, "executed": bool(args.execute), "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "new_offset": new,
             "error": None if tp not in failed else str(failed[tp])} for tp, new in sorted(plan.items())]})
    else:
        print(table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                    [(group, tp.topic, tp.partition, new) for tp, new in sorted(plan.items())]))
    for tp, e in sorted(failed.items()):
        _error(f"{tp.topic}[{tp.partition}]: {e}")
    return 1 if failed else 0


# -- delete-offsets, delete -----------------------------------------------------------------------------
def cmd_delete_offsets(args) -> int:
    """Kafka's deleteOffsets: a group-level error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND...) is printed and
    then stands in every topic's STATUS; topic errors are each topic's own."""
    group = _one_group(args, "--delete-offsets")
    topics = sorted(set(args.topic))
    with admin_client(args) as a:
        try:
            res = a.delete_share_group_offsets(group, topics, timeout=args.timeout)
        except KohortError as e:
            _error(str(e))
            res = {t: e for t in topics}
    failed = {t: e for t, e in res.items() if e is not None}
    if args.json:
        print_json({"group": group, "topics": [{"topic": t, "error": None if e is None else str(e)}
                                               for t, e in sorted(res.items())]})
    else:
        print(table(["TOPIC", "STATUS"], [(t, "Successful" if e is None else f"Error: {e}")
                                          for t, e in sorted(res.items())]))
    return 1 if failed else 0


def cmd_delete(args) -> int:
    """Kafka's deleteShareGroups: groups that are not share groups, or not Empty, are refused before any
    DeleteGroups is sent; the others are deleted."""
    from kohort.errors import ErrorCode, for_code
    with admin_client(args) as a:
        if args.all_groups and args.groups:
            raise KohortError("give GROUP names or --all-groups, not both")
        listed = {g.group_id: g.state for g in a.list_share_groups(timeout=args.timeout)}
        names = _group_names(args, lambda: list(listed))
        errors: dict[str, str] = {}
        for g in names:
            if g not in listed:
                errors[g] = f"Group '{g}' is not a share group."
            elif listed[g] == "Dead":
                errors[g] = f"Share group '{g}' group state is DEAD."
            elif listed[g] not in ("Empty", ""):
                errors[g] = f"{for_code(ErrorCode.NON_EMPTY_GROUP).__name__}: Share group '{g}' is not EMPTY."
        todo = [g for g in names if g not in errors]
        res = a.delete_share_groups(todo, timeout=args.timeout) if todo else {}
    for g, e in res.items():
        if e is not None:
            errors[g] = f"{type(e).__name__}: {e}"
    deleted = [g for g in names if g in res and res[g] is None]
    if args.json:
        print_json([{"group": g, "error": errors.get(g)} for g in names])
        return 1 if errors else 0
    quoted = ", ".join(f"'{g}'" for g in deleted)
    if not errors:
        print(f"Deletion of requested share groups ({quoted}) was successful.")
        return 0
    _error("Deletion of some share groups failed:")
    for g in names:
        if g in errors:
            print(f"* Group '{g}' could not be deleted due to: {errors[g]}", file=sys.stderr)
    if deleted:
        print(f"These share groups were deleted successfully: {quoted}")
    return 1
