"""`kohort groups list|describe|lag|reset-offsets|delete`: consumer groups, like kafka-consumer-groups.sh.

`describe` prints the --describe table (offsets, lag and owner per partition) and, with `--members`, the
members with their assignments; `lag` prints per-partition lag and a total; `reset-offsets` plans a reset
(earliest, latest, a timestamp or datetime, an offset, shift-by) and applies it only with `--execute`
(dry run by default, as kafka-consumer-groups.sh), and only while the group is inactive.
"""
from __future__ import annotations

import sys
from datetime import datetime, timezone

from kohort.cli.common import Progress, add_connection_args, admin_client, print_json, table
from kohort.errors import KohortError


def register(subparsers) -> None:
    p = subparsers.add_parser("groups", help="list, describe, lag, reset-offsets, delete consumer groups",
                              description="Consumer group administration (like kafka-consumer-groups.sh).")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    s = sub.add_parser("list", help="list groups with their state")
    add_connection_args(s)
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("describe", help="offsets, lag and owners per partition; --members for members")
    s.add_argument("groups", nargs="+", metavar="GROUP")
    s.add_argument("--members", action="store_true", help="show members and their assignments instead")
    s.add_argument("--state", action="store_true", help="show the group state and coordinator instead")
    add_connection_args(s)
    s.set_defaults(func=cmd_describe)

    s = sub.add_parser("lag", help="lag per partition and in total")
    s.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_args(s)
    s.set_defaults(func=cmd_lag)

    s = sub.add_parser("reset-offsets", help="move a group's committed offsets (inactive groups only)")
    s.add_argument("group", metavar="GROUP")
    where = s.add_mutually_exclusive_group(required=True)
    where.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P..]",
                       help="topic (optionally some partitions) to reset (repeatable)")
    where.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    to = s.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    to.add_argument("--shift-by", type=int, metavar="N", help="move by N (negative: back)")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:MM:SS[.mmm][+HH:MM]",
                    help="the first offset at or after this time (UTC unless an offset is given)")
    to.add_argument("--to-timestamp", type=int, metavar="MS", help="like --to-datetime, in epoch ms")
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="apply the reset (default: dry run)")
    mode.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    add_connection_args(s)
    s.set_defaults(func=cmd_reset)

    s = sub.add_parser("delete", help="delete groups (they must be empty)")
    s.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_args(s)
    s.set_defaults(func=cmd_delete)


def cmd_list(args) -> int:
    with admin_client(args) as a:
        groups = a.list_groups(timeout=args.timeout)
    if args.json:
        print_json([{"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type} for g in groups])
    elif groups:
        print(table(["GROUP", "STATE", "PROTOCOL-TYPE"],
                    [(g.group_id, g.state or "-", g.protocol_type or "-") for g in groups]))
    return 0


def cmd_describe(args) -> int:
    out = []
    with admin_client(args) as a:
        for g in args.groups:
            if args.members or args.state:
                out.append(a.describe_groups([g], timeout=args.timeout)[0])
            else:
                out.append((a.describe_groups([g], timeout=args.timeout)[0], a.group_lag(g, timeout=args.timeout)))
    if args.members or args.state:
        if args.json:
            print_json([{"group": d.group_id, "state": d.state, "protocol_type": d.protocol_type,
                         "protocol": d.protocol, "coordinator": d.coordinator,
                         "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                      "client_id": m.client_id, "host": m.client_host,
                                      "assignment": [[tp.topic, tp.partition] for tp in m.assignment]}
                                     for m in d.members]} for d in out])
            return 0
        for i, d in enumerate(out):
            if i:
                print()
            if args.state:
                print(table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                            [(d.group_id, d.coordinator, d.protocol or "-", d.state, len(d.members))]))
            else:
                if not d.members:
                    print(f"Consumer group '{d.group_id}' has no active members.")
                    continue
                print(table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
                            [(d.group_id, m.member_id, m.client_host, m.client_id, len(m.assignment),
                              _assignment_text(m.assignment)) for m in d.members]))
        return 0
    if args.json:
        print_json([{"group": d.group_id, "state": d.state, "partitions": [r._asdict() for r in rows]}
                    for d, rows in out])
        return 0
    for i, (d, rows) in enumerate(out):
        if i:
            print()
        if not d.members:
            print(f"Consumer group '{d.group_id}' has no active members.")
        if rows:
            print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                         "CONSUMER-ID", "HOST", "CLIENT-ID"],
                        [(r.group, r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag,
                          r.member_id, r.host, r.client_id) for r in rows]))
    return 0


def _assignment_text(tps) -> str:
    by = {}
    for tp in tps:
        by.setdefault(tp.topic, []).append(tp.partition)
    return " ".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(by.items())) or "-"


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


def parse_datetime_ms(text: str) -> int:
    """ISO-8601 date-time to epoch ms; naive times are UTC."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise KohortError(f"--to-datetime: {text!r} is not YYYY-MM-DDTHH:MM:SS[.mmm][+HH:MM]") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


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
    return "timestamp", parse_datetime_ms(args.to_datetime)


def _partitions(a, args):
    if args.all_topics:
        tps = sorted(a.list_group_offsets(args.group, timeout=args.timeout))
        if not tps:
            raise KohortError(f"group {args.group!r} has no committed offsets; name topics with --topic")
        return tps
    out = []
    named = [t.partition(":") for t in args.topic]
    descs = {d.name: d for d in a.describe_topics([n for n, _, _ in named], timeout=args.timeout)}
    for name, sep, parts in named:
        if sep and parts:
            try:
                ps = [int(x) for x in parts.split(",") if x.strip()]
            except ValueError:
                raise KohortError(f"--topic {name}:{parts}: partitions must be integers") from None
            have = {p.partition for p in descs[name].partitions}
            bad = [p for p in ps if p not in have]
            if bad:
                raise KohortError(f"topic {name!r} has no partition(s) {bad}")
        else:
            ps = [p.partition for p in descs[name].partitions]
        out.extend((name, p) for p in ps)
    return out


def cmd_reset(args) -> int:
    to, value = _target(args)
    with admin_client(args) as a:
        tps = _partitions(a, args)
        plan = a.reset_group_offsets(args.group, tps, to=to, value=value, dry_run=not args.execute,
                                     timeout=args.timeout)
    if args.json:
        print_json({"group": args.group, "executed": bool(args.execute),
                    "partitions": [{"topic": tp.topic, "partition": tp.partition, "old_offset": old,
                                    "new_offset": new} for tp, (old, new) in sorted(plan.items())]})
        return 0
    print(table(["GROUP", "TOPIC", "PARTITION", "OLD-OFFSET", "NEW-OFFSET"],
                [(args.group, tp.topic, tp.partition, old, new) for tp, (old, new) in sorted(plan.items())]))
    if not args.execute:
        print("(dry run: nothing changed; add --execute to apply)", file=sys.stderr)
    return 0


def cmd_delete(args) -> int:
    with admin_client(args) as a:
        res = a.delete_groups(args.groups, timeout=args.timeout)
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
