"""What `kohort groups` (kafka-consumer-groups.sh) and `kohort share-groups` (kafka-share-groups.sh) share:
the GROUP / --all-groups arguments and their resolution, the describe options and loop, the reset-offsets
scope and mode options, list filters, and the texts both tools print (assignments, coordinators)."""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from kohort.cli.common import print_json
from kohort.errors import KohortError

MISSING = "-"


# -- arguments ------------------------------------------------------------------------------------------
def add_group_args(s, every: str = "every group") -> None:
    """GROUP positionals (Kafka's `--group`, repeatable) or `--all-groups`."""
    s.add_argument("groups", nargs="*", metavar="GROUP")
    s.add_argument("--all-groups", action="store_true", help=f"{every} (instead of naming them)")


def add_describe_args(s, *, offsets: str, state: str, verbose: str) -> None:
    """describe's views (`--offsets`, the default; `--members`; `--state`) and `--verbose`."""
    what = s.add_mutually_exclusive_group()
    what.add_argument("--offsets", action="store_true", help=offsets)
    what.add_argument("--members", action="store_true", help="members and their assignments")
    what.add_argument("--state", action="store_true", help=state)
    s.add_argument("--verbose", action="store_true", help=verbose)


def add_reset_scope(s, all_topics: str):
    """reset-offsets' `--topic T[:P,..]` (repeatable) or `--all-topics`; returns the group of the reset
    targets (`--to-...`, one required) for the caller to fill."""
    where = s.add_mutually_exclusive_group()
    where.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P..]",
                       help="topic (optionally some partitions) to reset (repeatable)")
    where.add_argument("--all-topics", action="store_true", help=all_topics)
    to = s.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    return to


def add_to_datetime(to) -> None:
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:MM:SS[.mmm][+HH:MM]",
                    help="the first offset at or after this time (UTC unless an offset is given)")


def add_reset_mode(s, *, execute: str, dry_run: str) -> None:
    mode = s.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help=execute)
    mode.add_argument("--dry-run", action="store_true", help=dry_run)


def parse_filter(text, valid: dict, what: str) -> list[str]:
    """`a,b` of a list filter (`--state`, `--type`) → the canonical spellings in `valid` ({lower: name})."""
    if not text:
        return []
    out = []
    for x in text.split(","):
        x = x.strip()
        if x.lower() not in valid:
            raise KohortError(f"invalid {what} list {text!r}; valid {what}s are: {', '.join(valid.values())}")
        out.append(valid[x.lower()])
    return out


def group_names(args, every: Callable[[], list[str]]) -> list[str]:
    """The named groups, or `every()` with --all-groups; naming none, or both, is an error."""
    if args.all_groups:
        if args.groups:
            raise KohortError("give GROUP names or --all-groups, not both")
        return every()
    if not args.groups:
        raise KohortError("name at least one GROUP (--group) or --all-groups")
    return list(args.groups)


def parse_datetime_ms(text: str) -> int:
    """ISO-8601 date-time to epoch ms; naive times are UTC."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise KohortError(f"--to-datetime: {text!r} is not YYYY-MM-DDTHH:MM:SS[.mmm][+HH:MM]") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def topic_partitions(a, specs, timeout) -> list:
    """`TOPIC` (every partition) or `TOPIC:P,P` arguments → [(topic, partition)], checked against the
    cluster."""
    out = []
    named = [t.partition(":") for t in specs]
    descs = {d.name: d for d in a.describe_topics([n for n, _, _ in named], timeout=timeout)}
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


# -- describe -------------------------------------------------------------------------------------------
def describe_views(a, args, names: Callable[[], list[str]], view: Callable[[str], dict],
                   failure: Callable[[str, KohortError], None],
                   complete: Callable[[dict], None] | None = None) -> tuple[list[dict], int]:
    """`view(g)` of every group `names()` gives, and how many failed (`failure` reports each). With
    `--state` each view also gets `coordinator_address` (`host:port  (id)`); otherwise `complete(view)`
    adds what the other views show (its errors are not a group's failure: they end the command)."""
    addresses = {b.node_id: f"{b.host}:{b.port}" for b in a.describe_cluster(args.timeout).brokers} \
        if args.state else {}
    views, failed = [], 0
    for g in names():
        try:
            v = view(g)
        except KohortError as e:
            failure(g, e)
            failed += 1
            continue
        if args.state:
            v["coordinator_address"] = coordinator_text(addresses, v["coordinator"])
        elif complete is not None:
            complete(v)
        views.append(v)
    return views, failed


def print_views(args, views: list[dict], failed: int, show: Callable[[dict], None]) -> int:
    """The views as JSON (--json) or each shown by `show`, a blank line between; exit code 1 if any failed."""
    if args.json:
        print_json(views)
    else:
        for i, v in enumerate(views):
            if i:
                print()
            show(v)
    return 1 if failed else 0


def show_view(v: dict, args, *, state: Callable[[dict, bool], None], members: Callable[[dict, bool], None],
              offsets: Callable[[dict, bool], None]) -> None:
    """One view printed as describe's --state, --members or (the default) --offsets asks, --verbose or not."""
    (state if args.state else members if args.members else offsets)(v, args.verbose)


def assignment_text(pairs) -> str:
    """Kafka's assignment string: `topic:0,1;other:2` (topics sorted, partitions sorted)."""
    by: dict = {}
    for t, p in pairs:
        by.setdefault(t, []).append(p)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by.items())) or MISSING


def coordinator_text(addresses: dict, node) -> str:
    """`host:port  (id)`, as kafka-consumer-groups.sh --state prints the coordinator."""
    addr = addresses.get(node)
    return f"{addr}  ({node})" if addr else str(node)

