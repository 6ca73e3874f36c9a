"""`kohort transactions list|describe|describe-producers|find-hanging|abort`: the transactional state
of producers, like kafka-transactions.sh (KIP-664), on kohort broker or Apache Kafka.

* `list` (ListTransactions on every broker; `--state`, `--producer-id`, `--pattern` filters);
* `describe --transactional-id ID` (DescribeTransactions at the id's transaction coordinator);
* `describe-producers --topic T --partition P` (DescribeProducers at the partition's leader);
* `find-hanging --topic T [--partition P] [--max-transaction-timeout MINUTES]`: open transactions older
  than the maximum transaction timeout (default 15, Kafka's transaction.max.timeout.ms) whose
  producer id no transaction coordinator knows, or whose transaction does not hold the partition --
  nothing will ever write their marker, so the partition's last stable offset is stuck;
* `abort --topic T --partition P (--start-offset N | --producer-id N --producer-epoch N
  --coordinator-epoch N)`: writes an ABORT marker for that producer on the partition (WriteTxnMarkers,
  as Kafka's Admin.abortTransaction). With --start-offset the producer is the one whose open
  transaction starts there (from DescribeProducers).
"""
from __future__ import annotations

import time

from kohort.cli.common import add_connection_args, admin_client, positive_int, print_json, table
from kohort.errors import KohortError

DEFAULT_MAX_TXN_TIMEOUT_MINUTES = 15


def register(subparsers) -> None:
    p = subparsers.add_parser("transactions", help="list, describe, find hanging and abort transactions",
                              description="Transactions administration (like kafka-transactions.sh).")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    s = sub.add_parser("list", help="transactional ids with their producer id and state")
    s.add_argument("--state", action="append", default=[], metavar="STATE",
                   help="only these states (Kafka's names: Ongoing, CompleteCommit, ...; repeatable)")
    s.add_argument("--producer-id", action="append", default=[], type=int, metavar="ID",
                   help="only these producer ids (repeatable)")
    s.add_argument("--pattern", metavar="REGEX", help="only ids the regular expression matches whole")
    add_connection_args(s)
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("describe", help="a transactional id's state, epoch, timeout and partitions")
    s.add_argument("--transactional-id", required=True, metavar="ID")
    add_connection_args(s)
    s.set_defaults(func=cmd_describe)

    s = sub.add_parser("describe-producers", help="the active producers of a partition")
    s.add_argument("--topic", required=True)
    s.add_argument("--partition", required=True, type=int)
    add_connection_args(s)
    s.set_defaults(func=cmd_describe_producers)

    s = sub.add_parser("find-hanging", help="open transactions no coordinator will ever complete")
    s.add_argument("--topic", required=True)
    s.add_argument("--partition", type=int, action="append", default=None,
                   help="only this partition (repeatable; default: all of the topic)")
    s.add_argument("--max-transaction-timeout", type=positive_int, default=DEFAULT_MAX_TXN_TIMEOUT_MINUTES,
                   metavar="MINUTES", help="transactions open longer than this are candidates (default 15)")
    add_connection_args(s)
    s.set_defaults(func=cmd_find_hanging)

    s = sub.add_parser("abort", help="write an ABORT marker for a hanging transaction on a partition")
    s.add_argument("--topic", required=True)
    s.add_argument("--partition", required=True, type=int)
    s.add_argument("--start-offset", type=int, metavar="OFFSET",
                   help="the first offset of the open transaction (see describe-producers)")
    s.add_argument("--producer-id", type=int)
    s.add_argument("--producer-epoch", type=int)
    s.add_argument("--coordinator-epoch", type=int)
    add_connection_args(s)
    s.set_defaults(func=cmd_abort)


def cmd_list(args) -> int:
    with admin_client(args) as a:
        rows = a.list_transactions(args.state, args.producer_id, args.pattern, timeout=args.timeout)
    if args.json:
        print_json(rows)
    elif rows:
        print(table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
                    [(t.transactional_id, t.node, t.producer_id, t.state) for t in rows]))
    return 0


def cmd_describe(args) -> int:
    with admin_client(args) as a:
        d = a.describe_transactions([args.transactional_id], timeout=args.timeout)[0]
    now = int(time.time() * 1000)
    duration = now - d.start_time_ms if d.start_time_ms >= 0 else None
    if args.json:
        print_json({**d._asdict(), "duration_ms": duration,
                    "partitions": [f"{tp.topic}-{tp.partition}" for tp in d.partitions]})
    else:
        print(table(["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
                     "START-TIME-MS", "DURATION-MS", "PARTITIONS"],
                    [(d.coordinator, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
                      d.start_time_ms if d.start_time_ms >= 0 else None, duration,
                      [f"{tp.topic}-{tp.partition}" for tp in d.partitions] or None)]))
    return 0


def _producer_rows(states):
    return [(s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence, s.last_timestamp,
             s.txn_start_offset if s.txn_start_offset >= 0 else None) for s in states]


def cmd_describe_producers(args) -> int:
    with admin_client(args) as a:
        states = a.describe_producers(args.topic, args.partition, timeout=args.timeout)
    if args.json:
        print_json(states)
    elif states:
        print(table(["PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
                     "TXN-START-OFFSET"], _producer_rows(states)))
    return 0


def find_hanging(a, topic: str, partitions, max_timeout_ms: int, now_ms: int, timeout=None) -> list[dict]:
    """Open transactions of `topic` (its `partitions`, or all) older than `max_timeout_ms` that no
    transaction coordinator will complete (Kafka's FindHangingTransactionsCommand)."""
    if partitions is None:
        desc = a.describe_topics([topic], timeout)[0]
        partitions = [p.partition for p in desc.partitions]
    candidates = []
    for p in partitions:
        for s in a.describe_producers(topic, p, timeout):
            if s.txn_start_offset >= 0 and now_ms - s.last_timestamp > max_timeout_ms:
                candidates.append((p, s))
    if not candidates:
        return []
    known = {t.producer_id: t.transactional_id
             for t in a.list_transactions(producer_ids=sorted({s.producer_id for _, s in candidates}),
                                          timeout=timeout)}
    descriptions = {d.transactional_id: d for d in a.describe_transactions(sorted(set(known.values())), timeout)}
    hanging = []
    for p, s in candidates:
        d = descriptions.get(known.get(s.producer_id))
        if d is None or (topic, p) not in {(tp.topic, tp.partition) for tp in d.partitions}:
            hanging.append({"topic": topic, "partition": p, "producer_id": s.producer_id,
                            "producer_epoch": s.producer_epoch, "coordinator_epoch": s.coordinator_epoch,
                            "start_offset": s.txn_start_offset, "last_timestamp": s.last_timestamp,
                            "duration_minutes": (now_ms - s.last_timestamp) // 60_000})
    return hanging


def cmd_find_hanging(args) -> int:
    with admin_client(args) as a:
        rows = find_hanging(a, args.topic, args.partition, args.max_transaction_timeout * 60_000,
                            int(time.time() * 1000), args.timeout)
    if args.json:
        print_json(rows)
    elif rows:
        print(table(["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "START-OFFSET",
                     "LAST-TIMESTAMP", "DURATION-MIN"],
                    [(r["topic"], r["partition"], r["producer_id"], r["producer_epoch"], r["coordinator_epoch"],
                      r["start_offset"], r["last_timestamp"], r["duration_minutes"]) for r in rows]))
    return 0


def cmd_abort(args) -> int:
    explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if (args.start_offset is None) == all(x is None for x in explicit):
        raise KohortError("abort needs either --start-offset, or --producer-id, --producer-epoch and "
                          "--coordinator-epoch")
    if args.start_offset is None and any(x is None for x in explicit):
        raise KohortError("--producer-id, --producer-epoch and --coordinator-epoch go together")
    with admin_client(args) as a:
        if args.start_offset is not None:
            match = [s for s in a.describe_producers(args.topic, args.partition, args.timeout)
                     if s.txn_start_offset == args.start_offset]
            if not match:
                raise KohortError(f"no open transaction starts at offset {args.start_offset} of "
                                  f"{args.topic}[{args.partition}] (see: kohort transactions describe-producers)")
            s = match[0]
            pid, epoch, cepoch = s.producer_id, s.producer_epoch, max(0, s.coordinator_epoch)
        else:
            pid, epoch, cepoch = explicit
        a.abort_transaction(args.topic, args.partition, pid, epoch, cepoch, timeout=args.timeout)
    result = {"topic": args.topic, "partition": args.partition, "producer_id": pid, "producer_epoch": epoch,
              "coordinator_epoch": cepoch, "aborted": True}
    if args.json:
        print_json(result)
    else:
        print(f"aborted the transaction of producer {pid} (epoch {epoch}) on {args.topic}[{args.partition}]")
    return 0
