"""`kohort produce TOPIC`: send lines from stdin or a file as records, like `kcat -P`.

Each line is one record (the newline is dropped); `-K SEP` splits key and value at the first SEP (a line
without SEP gets a null key); `-H key=value` adds headers to every record; `--rate N` caps records per
second; `-p N` forces a partition; `-z` picks the codec. A progress bar runs on a terminal; the summary
(records, failures, rate) goes to stderr, or stdout as JSON with `--json`.
"""
from __future__ import annotations

import os
import sys
import time

from kohort.cli.common import (
    Progress, add_connection_args, client_config, parse_kv, positive_number, print_json,
)
from kohort.errors import KohortError


def register(subparsers) -> None:
    p = subparsers.add_parser("produce", help="produce lines from stdin or a file to a topic",
                              description="Produce one record per input line (like kcat -P).")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-f", "--file", metavar="PATH", help="read lines from this file (default: stdin)")
    p.add_argument("-K", "--key-separator", metavar="SEP", help="split each line into KEY<SEP>VALUE")
    p.add_argument("-H", "--header", action="append", default=[], metavar="KEY=VALUE",
                   help="header on every record (repeatable)")
    p.add_argument("-p", "--partition", type=int, default=None, help="send every record to this partition")
    p.add_argument("-z", "--compression", default=None, choices=("none", "gzip", "snappy", "lz4", "zstd"))
    p.add_argument("--acks", default=None, choices=("all", "-1", "0", "1"))
    p.add_argument("--rate", type=positive_number, default=None, metavar="N", help="at most N records per second")
    p.add_argument("--progress", action="store_true", help="draw the progress bar even when not a terminal")
    add_connection_args(p)
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


def cmd_produce(args) -> int:
    from kohort.client.producer import Producer
    extra = {"max.block.ms": int(args.timeout * 1000)}
    if args.compression:
        extra["compression.type"] = args.compression
    if args.acks:
        extra["acks"] = args.acks
    cfg = client_config(args, extra)
    cfg.pop("default.api.timeout.ms", None)
    headers = list(parse_kv(args.header, "-H/--header").items()) or None
    headers = [(k, v.encode()) for k, v in headers] if headers else None
    sep = args.key_separator.encode() if args.key_separator else None
    src, _ = _lines(args)
    total = _count_lines(args.file) if args.file else None
    prog = Progress(total, args.topic, force=args.progress)
    batches = set()       # one entry per batch: its outcome covers all its records

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
            key = None
            if sep is not None:
                k, s, v = line.partition(sep)
                if s:
                    key, line = k, v
            add(produce(topic, line, key=key, headers=headers, partition=part).batch)
            n += 1
            if rate:
                ahead = n / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
            if n & 1023 == 0:
                prog.update(n)
        left = p.flush(args.timeout + 5)
    finally:
        p.close(5)
        if src is not sys.stdin.buffer:
            src.close()
    prog.update(n, force=True)
    prog.close()
    elapsed = time.monotonic() - start
    failed_batches = [b for b in batches if b.done and b.error is not None]
    errors = sum(b.count for b in failed_batches) + (left if left else 0)
    last_error = failed_batches[-1].error if failed_batches else None
    summary = {"topic": args.topic, "records": n, "failed": errors, "seconds": round(elapsed, 3),
               "records_per_second": round(n / elapsed) if elapsed > 0 else None}
    if args.json:
        print_json(summary)
    else:
        print(f"produced {n - errors} record(s) to {args.topic} in {elapsed:.2f}s "
              f"({summary['records_per_second'] or 0:,}/s)" + (f", {errors} failed" if errors else ""),
              file=sys.stderr)
    if errors:
        if last_error is not None:
            print(f"kohort produce: delivery error: {last_error}", file=sys.stderr)
        return 1
    return 0
