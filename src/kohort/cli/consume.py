"""`kohort consume TOPIC`: print records of a topic, like `kcat -C` (built on kohort's Consumer).

Without `--group` every partition is assigned directly (from the end, or the beginning with
`--from-beginning`); with `--group G` the consumer joins the group and commits as it goes.
`--count N` stops after N records, `-e/--exit` at the end of every partition (no group), `--idle S` after
S seconds without a record. `--format` takes kcat's tokens (%t topic, %p partition, %o offset, %k key,
%s value, %T timestamp, %h headers, %K/%S key/value lengths, \\n \\t) or one of: value, kv, json.

Commits with `--group` (kcat -G semantics): a record counts as consumed once it has been written to
stdout and flushed. The committed offset of a partition is always the offset after the last record
written from it, never the consumer's fetch position: with `-c 3` the group's offsets cover exactly
3 records. Offsets are committed every auto.commit.interval.ms (-X, default 5000), before a partition
is revoked in a rebalance, and on every way out: the count or --idle reached, Ctrl-C / SIGTERM (the
first one stops after the records in hand are written; a second Ctrl-C aborts at once), and a reader
that goes away (`| head`), where records that could not be flushed are left uncommitted and come
again on the next run (at least once, never skipped).
"""
from __future__ import annotations

import base64
import json
import signal
import sys
import threading
import time

from kohort.cli.common import (
    Progress, add_connection_args, admin_client, client_config, non_negative_number, positive_int,
)
from kohort.errors import KohortError

FLUSH_CHARS = 8192          # output flushed (and its records counted as written) in chunks of this size
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


class _StopSignals:
    """SIGINT/SIGTERM set `requested` instead of interrupting: the loop stops between polls, after
    the records in hand are written, so committed offsets match the output. A second SIGINT raises
    KeyboardInterrupt as usual. Installed only on the main thread (signal's rule)."""

    def __init__(self):
        self.requested = False
        self._old = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


class _Committer:
    """The offsets of records written to the output, per partition, and their commits."""

    def __init__(self, consumer, interval_s: float):
        self.c = consumer
        self.written: dict = {}        # TopicPartition -> offset after the last record flushed
        self.committed: dict = {}
        self.interval = interval_s
        self.last = time.monotonic()

    def mark(self, records) -> None:
        for r in records:
            self.written[r.topic_partition] = r.offset + 1

    def commit(self, tps=None) -> None:
        from kohort.structs import OffsetAndMetadata
        offs = {tp: o for tp, o in self.written.items()
                if self.committed.get(tp) != o and (tps is None or tp in tps)}
        self.last = time.monotonic()
        if offs:
            self.c.commit({tp: OffsetAndMetadata(o) for tp, o in offs.items()})
            self.committed.update(offs)

    def maybe_commit(self) -> None:
        """The periodic commit: a failure (broker away, rebalance) is a warning and is retried at
        the next interval; the commit at exit reports failure as an error."""
        if time.monotonic() - self.last >= self.interval:
            try:
                self.commit()
            except KohortError as e:
                print(f"kohort consume: warning: commit failed (retried): {e}", file=sys.stderr)

    def on_revoke(self, consumer, tps) -> None:
        try:
            self.commit(set(tps))
        except KohortError as e:
            print(f"kohort consume: warning: commit before a rebalance failed: {e}", file=sys.stderr)
        for tp in tps:
            self.written.pop(tp, None)
            self.committed.pop(tp, None)


def cmd_consume(args) -> int:
    from kohort.client.consumer import Consumer
    fmt = formatter(args.format)
    if args.group and args.partition:
        raise KohortError("--partition cannot be combined with --group (the group assigns partitions)")
    # offsets are committed by this command (of records written), never the consumer's position
    extra = {"auto.offset.reset": "earliest" if args.from_beginning else "latest",
             "enable.auto.commit": False}
    if args.group:
        extra["group.id"] = args.group
    cfg = client_config(args, extra)
    if str(cfg["enable.auto.commit"]).lower() not in ("false", "0"):
        raise KohortError("-X enable.auto.commit: kohort consume commits the offsets of the records it has "
                          "written itself (the consumer's position may be ahead of the output); leave it unset")
    from kohort.client.config import load_config
    loaded = load_config("consumer", cfg)        # a wrong -X key is reported before any connection
    with admin_client(args, admin_keys_only=True) as a:   # one clear line if the cluster or topic is missing
        a.describe_topics([args.topic], timeout=args.timeout)
    c = Consumer(cfg)
    out = sys.stdout
    n = 0
    prog = Progress(args.count, args.topic, force=args.progress) if args.progress else None
    max_poll = loaded["max.poll.records"]
    committer = _Committer(c, loaded["auto.commit.interval.ms"] / 1000) if args.group else None
    failure = None
    try:
        with _StopSignals() as signals:
            ends = None
            if args.group:
                c.subscribe([args.topic], on_revoke=committer.on_revoke)
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
            while not signals.requested:
                if ends is not None:
                    for tp, end in ends.items():
                        if tp not in done and c.position(tp, timeout=args.timeout) >= end:
                            done.add(tp)
                    if len(done) == len(ends):
                        break
                # with --count, never take more records than will be printed
                recs = c.poll(0.5, max_records=min(args.count - n, max_poll) if args.count is not None else None)
                if recs:
                    last = time.monotonic()
                    if ends is not None:
                        recs = [r for r in recs if r.offset < ends.get(r.topic_partition, 1 << 62)]
                    # written = flushed: records count (and are committed) chunk by chunk as
                    # each flush succeeds, so a reader leaving mid-batch loses at most one chunk
                    i0 = size = 0
                    for i, r in enumerate(recs):
                        text = fmt(r)
                        out.write(text)
                        size += len(text)
                        if size >= FLUSH_CHARS:
                            out.flush()
                            if committer:
                                committer.mark(recs[i0:i + 1])
                            i0, size = i + 1, 0
                    out.flush()
                    if committer:
                        committer.mark(recs[i0:])
                    n += len(recs)
                    if prog:
                        prog.update(n)
                    if args.count is not None and n >= args.count:
                        break
                elif args.idle is not None and time.monotonic() - last >= args.idle:
                    break
                if committer:
                    committer.maybe_commit()
    except BrokenPipeError as e:
        failure = e                    # records of the batch that could not be flushed stay uncommitted
    finally:
        if prog:
            prog.close()
        try:
            if committer:
                committer.commit()
        finally:
            c.close(autocommit=False)
    if failure is not None:
        raise failure                  # kohort.cli.main ends quietly (status 141)
    return 0
