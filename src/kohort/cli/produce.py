"""`kohort produce TOPIC`: send lines from stdin or a file as records, like `kcat -P`.

Each line is one record (the newline is dropped); `-K SEP` splits key and value at the first SEP (a line
without SEP gets a null key); `-k KEY` gives every record that key (kcat -k); `-Z`
sends an empty value or empty `-K` key as null (kcat -Z; an empty line becomes a tombstone); `-H key=value` adds
headers to every record; `--rate N` caps records per
second; `-p N` forces a partition; `-z` picks the codec. A progress bar runs on a terminal; the summary
goes to stderr, or stdout as JSON with `--json` (always printed, also when the run fails).

The summary separates three outcomes per record (see `outcome()`): acknowledged (stored), failed
(certainly not stored: never sent, or refused by the broker) and unknown (sent, never answered, e.g. the
broker died or the request timed out: it may be stored; resending it may duplicate it). A record over
the producer's limit (max.request.size) is refused before sending, reported with its line number, and
the run goes on with the next line, as kcat does; a record the broker refuses (its max.message.bytes)
fails with its batch and the broker's limit named. Any other error at produce() ends the run (the
summary says where). The exit status is 0 only when every record was acknowledged; with --acks 0 the
broker confirms nothing, so every record sent is unknown and the status is 0 when none failed.
"""
from __future__ import annotations

import os
import sys
import time

from kohort.cli.common import (
    Progress, add_connection_args, client_config, parse_kv, positive_number, print_json,
)
from kohort.errors import KafkaError, KohortError, RecordTooLargeError


def register(subparsers) -> None:
    p = subparsers.add_parser("produce", help="produce lines from stdin or a file to a topic",
                              description="Produce one record per input line (like kcat -P).")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-f", "--file", metavar="PATH", help="read lines from this file (default: stdin)")
    p.add_argument("-K", "--key-separator", metavar="SEP", help="split each line into KEY<SEP>VALUE")
    p.add_argument("-H", "--header", action="append", default=[], metavar="KEY=VALUE",
                   help="header on every record (repeatable)")
    p.add_argument("-k", "--key", default=None, metavar="KEY", help="use this key for every record (kcat -k)")
    p.add_argument("-Z", "--null-empty", action="store_true",
                   help="send an empty value (and an empty -K key) as null: a tombstone (kcat -Z)")
    p.add_argument("-p", "--partition", type=int, default=None, help="send every record to this partition")
    p.add_argument("-z", "--compression", "--compression-codec", default=None,
                   choices=("none", "gzip", "snappy", "lz4", "zstd"))
    p.add_argument("--acks", "--request-required-acks", default=None, choices=("all", "-1", "0", "1"))
    p.add_argument("--rate", type=positive_number, default=None, metavar="N", help="at most N records per second")
    p.add_argument("--progress", action="store_true", help="draw the progress bar even when not a terminal")
    add_connection_args(p)
    # kafka-console-producer's names for the same things
    p.add_argument("--producer-property", dest="config", action="append", metavar="KEY=VALUE",
                   help="same as -X")
    p.add_argument("--producer.config", dest="command_config", metavar="FILE", help="same as --command-config")
    p.set_defaults(func=cmd_produce)


def _lines(args):
    if args.file:
        try:
            f = open(args.file, "rb")
        except OSError as e:
            raise KohortError(f"cannot read {args.file}: {e.strerror}") from None
        return f, os.path.getsize(args.file)
    return sys.stdin.buffer, None


def _count_lines(path: str) -> int:
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (0 if last == b"\n" else 1)


def outcome(batch, fatal=None, acks: int = -1) -> str:
    """What is known about a finished (or abandoned) batch's records:

    * "acknowledged": the broker stored them and said so;
    * "failed": certainly not stored: never sent (expired or abandoned in this process), or the
      broker answered with a non-retriable error (MESSAGE_TOO_LARGE, INVALID_RECORD, ...);
    * "unknown": sent at least once and never answered (connection lost, request timed out, or
      retried until delivery.timeout.ms): the broker may have stored them. Resending those can
      duplicate them; checking the topic tells.
    """
    if batch.done and batch.error is None:
        return "acknowledged" if acks != 0 else "unknown"   # acks=0: sent, the broker never answers
    if batch.attempts == 0:
        return "failed"
    e = batch.error
    if batch.done and fatal is None and isinstance(e, KafkaError) and not e.retriable:
        return "failed"       # the broker's answer (a fatal producer error fails in-flight batches unanswered)
    return "unknown"


def cmd_produce(args) -> int:
    from kohort.client.producer import Producer
    t_ms = int(args.timeout * 1000)
    # --timeout bounds the whole wait for an outcome: delivery.timeout.ms (Kafka's default 120 s)
    # follows it, so a dead broker turns into a report within about --timeout, not minutes
    extra = {"max.block.ms": t_ms, "delivery.timeout.ms": t_ms + 1000}
    if args.compression:
        extra["compression.type"] = args.compression
    if args.acks:
        extra["acks"] = args.acks
    cfg = client_config(args, extra)
    cfg.pop("default.api.timeout.ms", None)
    headers = list(parse_kv(args.header, "-H/--header").items()) or None
    headers = [(k, v.encode()) for k, v in headers] if headers else None
    sep = args.key_separator.encode() if args.key_separator else None
    if sep is not None and args.key is not None:
        raise KohortError("-k/--key and -K/--key-separator both set the key: use one")
    fixed_key = args.key.encode() if args.key is not None else None
    null_empty = args.null_empty
    src, _ = _lines(args)
    total = _count_lines(args.file) if args.file else None
    prog = Progress(total, args.topic, force=args.progress)
    batches = set()       # one entry per batch: its outcome covers all its records
    refused: list[str] = []   # records the producer refused before sending (over its size limit)
    stopped = None            # the error that ended the run early

    start = time.monotonic()
    n = 0
    p = Producer(cfg)
    try:
        produce = p.produce
        topic, part = args.topic, args.partition
        rate = args.rate
        add = batches.add
        for line in src:
            if line.endswith(b"\n"):
                line = line[:-1]
                if line.endswith(b"\r"):
                    line = line[:-1]
            key = fixed_key
            if sep is not None:
                k, s, v = line.partition(sep)
                if s:
                    key, line = k, v
            if null_empty:
                if not line:
                    line = None
                if key == b"":
                    key = None
            n += 1
            try:
                add(produce(topic, line, key=key, headers=headers, partition=part).batch)
            except RecordTooLargeError as e:
                # as kcat: report the record and go on with the next line
                refused.append(f"line {n}: {e}")
            except KohortError as e:
                stopped = e
                refused.append(f"line {n}: {e}")
                break
            if rate:
                ahead = n / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
            if n & 1023 == 0:
                prog.update(n)
        p.flush(args.timeout + 5)
    finally:
        p.close(5)
        if src is not sys.stdin.buffer:
            src.close()
    prog.update(n, force=True)
    prog.close()
    if stopped is not None and not batches and not args.json:
        raise stopped             # nothing was sent (no cluster, no such partition): one line
    elapsed = time.monotonic() - start
    counts = {"acknowledged": 0, "failed": len(refused), "unknown": 0}
    last_error = {}
    fatal = getattr(p.sender, "fatal", None)
    acks = p.config["acks"]
    for b in batches:
        o = outcome(b, fatal, acks)
        counts[o] += b.count
        if o != "acknowledged" and not (acks == 0 and b.done and b.error is None):
            last_error[o] = b.error or KohortError("no outcome before the producer was closed")
    summary = {"topic": args.topic, "records": n, **counts, "seconds": round(elapsed, 3),
               "records_per_second": round(n / elapsed) if elapsed > 0 else None}
    if stopped is not None:
        summary["stopped"] = refused[-1]
    errors = {"refused": refused[:10]} if refused else {}
    errors.update({k: str(v) for k, v in last_error.items()})
    if errors:
        summary["errors"] = errors
    if args.json:
        print_json(summary)
    else:
        extra = "".join(f", {counts[k]} {k}" for k in ("failed", "unknown") if counts[k])
        of = "" if counts["acknowledged"] == n else f" of {n}"
        if acks == 0:
            print("kohort produce: acks=0: the broker confirms nothing; records sent count as unknown",
                  file=sys.stderr)
        print(f"produced {counts['acknowledged']}{of} record(s) to {args.topic} in {elapsed:.2f}s "
              f"({summary['records_per_second'] or 0:,}/s){extra}", file=sys.stderr)
    if not args.json:
        for msg in refused[:10]:
            print(f"kohort produce: not sent: {msg}", file=sys.stderr)
        if len(refused) > 10:
            print(f"kohort produce: ... and {len(refused) - 10} more not sent", file=sys.stderr)
        if "failed" in last_error:
            print(f"kohort produce: failed (not stored): {last_error['failed']}", file=sys.stderr)
        if "unknown" in last_error:
            print(f"kohort produce: outcome unknown for {counts['unknown']} record(s) (sent, no answer; "
                  f"they may be stored, resending may duplicate them): {last_error['unknown']}",
                  file=sys.stderr)
    if acks == 0:      # nothing is ever confirmed: success means nothing certainly failed
        return 0 if counts["failed"] == 0 and not last_error else 1
    return 0 if counts["acknowledged"] == n else 1
