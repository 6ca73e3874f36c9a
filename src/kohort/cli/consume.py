"""`kohort consume TOPIC`: print records of a topic, like `kcat -C` (built on kohort's Consumer).

Without `--group` every partition is assigned directly (from the end, or the beginning with
`--from-beginning`); with `--group G` the consumer joins the group and commits as it goes.
`--count N` stops after N records, `-e/--exit` at the end of every partition (no group), `--idle S` after
S seconds without a record. `--format` takes kcat's tokens (%t topic, %p partition, %o offset, %k key,
%s value, %T timestamp, %h headers, %K/%S key/value lengths, \\n \\t) or one of: value, kv, json.
"""
from __future__ import annotations

import base64
import json
import sys
import time

from kohort.cli.common import (
    Progress, add_connection_args, admin_client, client_config, non_negative_number, positive_int,
)
from kohort.errors import KohortError

PRESETS = {"value": "%s\\n", "kv": "%k\\t%s\\n"}


def register(subparsers) -> None:
    p = subparsers.add_parser("consume", help="print records of a topic",
                              description="Consume records and print them (like kcat -C).")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("-g", "--group", default=None, help="join this consumer group (commits offsets)")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    p.add_argument("-c", "--count", type=positive_int, default=None, metavar="N", help="stop after N records")
    p.add_argument("-p", "--partition", type=int, action="append", default=None,
                   help="only these partitions (repeatable; not with --group)")
    p.add_argument("-e", "--exit", action="store_true", help="exit at the end of every partition (no group)")
    p.add_argument("--idle", type=non_negative_number, default=None, metavar="SECONDS",
                   help="exit after this long without a record")
    p.add_argument("-f", "--format", default="value", metavar="FMT",
                   help="value (default), kv, json, or a kcat-style format such as '%%k=%%s\\n'")
    p.add_argument("--progress", action="store_true", help="draw a progress line on stderr")
    add_connection_args(p)
    p.set_defaults(func=cmd_consume)


def _text(b) -> str:
    if b is None:
        return ""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("utf-8", "backslashreplace")


def _json_bytes(b):
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


def formatter(fmt: str):
    """A function record -> str for a preset name or a kcat-style format string."""
    if fmt == "json":
        def as_json(r) -> str:
            return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                               "timestamp": r.timestamp, "key": _json_bytes(r.key),
                               "value": _json_bytes(r.value),
                               "headers": [[k, _json_bytes(v)] for k, v in r.headers]}) + "\n"
        return as_json
    fmt = PRESETS.get(fmt, fmt)
    tokens = {
        "t": lambda r: r.topic, "p": lambda r: str(r.partition), "o": lambda r: str(r.offset),
        "k": lambda r: _text(r.key), "s": lambda r: _text(r.value), "T": lambda r: str(r.timestamp),
        "K": lambda r: str(-1 if r.key is None else len(r.key)),
        "S": lambda r: str(-1 if r.value is None else len(r.value)),
        "h": lambda r: ",".join(f"{k}={_text(v)}" for k, v in r.headers),
    }
    escapes = {"n": "\n", "t": "\t", "\\": "\\", "r": "\r", "0": "\0"}
    compiled: list = []          # literal strings and token functions, in order
    lit: list[str] = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
        if ch == "\\" and nxt:
            lit.append(escapes.get(nxt, "\\" + nxt))
            i += 2
        elif ch == "%" and nxt == "%":
            lit.append("%")
            i += 2
        elif ch == "%" and nxt:
            if nxt not in tokens:
                raise KohortError(f"--format: unknown token %{nxt} (known: %t %p %o %k %K %s %S %T %h)")
            if lit:
                compiled.append("".join(lit))
                lit = []
            compiled.append(tokens[nxt])
            i += 2
        else:
            lit.append(ch)
            i += 1
    if lit:
        compiled.append("".join(lit))

    def fmt_record(r) -> str:
        return "".join(c if c.__class__ is str else c(r) for c in compiled)
    return fmt_record


def cmd_consume(args) -> int:
    from kohort.client.consumer import Consumer
    fmt = formatter(args.format)
    if args.group and args.partition:
        raise KohortError("--partition cannot be combined with --group (the group assigns partitions)")
    extra = {"auto.offset.reset": "earliest" if args.from_beginning else "latest",
             "enable.auto.commit": bool(args.group)}
    if args.group:
        extra["group.id"] = args.group
    cfg = client_config(args, extra)
    from kohort.client.config import load_config
    load_config("consumer", cfg)                 # a wrong -X key is reported before any connection
    with admin_client(args, admin_keys_only=True) as a:   # one clear line if the cluster or topic is missing
        a.describe_topics([args.topic], timeout=args.timeout)
    c = Consumer(cfg)
    out = sys.stdout
    n = 0
    prog = Progress(args.count, args.topic, force=args.progress) if args.progress else None
    try:
        ends = None
        if args.group:
            c.subscribe([args.topic])
        else:
            parts = c.partitions_for_topic(args.topic, timeout=args.timeout)
            if not parts:
                raise KohortError(f"topic {args.topic!r} does not exist (see: kohort topics list -b ...)")
            if args.partition:
                bad = [p for p in args.partition if p not in parts]
                if bad:
                    raise KohortError(f"topic {args.topic!r} has no partition(s) {bad}")
                parts = args.partition
            from kohort.structs import TopicPartition
            tps = [TopicPartition(args.topic, p) for p in parts]
            c.assign(tps)
            if args.from_beginning:
                c.seek_to_beginning(tps)
            else:
                c.seek_to_end(tps)
            if args.exit:
                ends = {tp: off for tp, off in c.end_offsets(tps, timeout=args.timeout).items()}
        last = time.monotonic()
        done = set()
        while True:
            if ends is not None:
                for tp, end in ends.items():
                    if tp not in done and c.position(tp, timeout=args.timeout) >= end:
                        done.add(tp)
                if len(done) == len(ends):
                    break
            recs = c.poll(0.5)
            if recs:
                last = time.monotonic()
                for r in recs:
                    if ends is not None and r.offset >= ends.get(r.topic_partition, 1 << 62):
                        continue
                    out.write(fmt(r))
                    n += 1
                    if args.count is not None and n >= args.count:
                        break
                out.flush()
                if prog:
                    prog.update(n)
                if args.count is not None and n >= args.count:
                    break
            elif args.idle is not None and time.monotonic() - last >= args.idle:
                break
    except BrokenPipeError:
        pass
    finally:
        if prog:
            prog.close()
        c.close()
    return 0
