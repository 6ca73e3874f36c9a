"""`kohort consume TOPIC...`: print records of topics, like `kcat -C` / `kcat -G` (built on kohort's Consumer).

Without `--group` every partition of the topics is assigned directly; with `--group G` the consumer joins
the group (topics may then include regexes, `^prefix.*`, as kcat -G) and commits as it goes.
`-o` picks the start as kcat does: beginning | end | stored (the group's committed offsets; the default
with --group) | N (absolute) | -N (N records before the end) | s@TS (first record at or after timestamp
TS ms); `-o e@TS` (may be given with a start) stops each partition at its first record at or after TS.
With a group, the start applies the first time this process is assigned a partition.
`--count N` stops after N records, `-e/--exit` when every (assigned) partition is at its end — with a
group, once partitions are assigned and all of them have been read to their end (as kcat -G -e) —,
`--idle S` after S seconds without a record. Output is bytes: `%s`/`%k` write keys and values as they
are (binary stays binary). `--format` takes kcat's tokens (%t topic, %p partition, %o offset, %k key,
%s value, %T timestamp, %h headers, %K/%S key/value lengths, %R value length as a big-endian int32,
\\n \\t) or one of: value, kv, json; `-J` prints kcat's JSON envelope and `-K DELIM` / `-D DELIM` kcat's
key and record delimiters.

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
import re
import signal
import struct
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
    p.add_argument("topic", metavar="TOPIC", nargs="+",
                   help="topic names; with --group also regexes starting with ^ (as kcat -G)")
    p.add_argument("-g", "-G", "--group", default=None, help="join this consumer group (commits offsets; kcat -G)")
    p.add_argument("-o", "--offset", action="append", default=[], metavar="OFFSET", type=parse_offset,
                   help="start: beginning | end | stored | N | -N | s@TS_MS; stop: e@TS_MS (kcat -o)")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset (-o beginning)")
    p.add_argument("-c", "--count", "--max-messages", type=positive_int, default=None, metavar="N",
                   help="stop after N records")
    p.add_argument("-p", "--partition", type=int, action="append", default=None,
                   help="only these partitions (repeatable; not with --group)")
    p.add_argument("-e", "--exit", action="store_true",
                   help="exit when every (assigned) partition has been read to its end")
    p.add_argument("--idle", type=non_negative_number, default=None, metavar="SECONDS",
                   help="exit after this long without a record")
    p.add_argument("-f", "--format", default="value", metavar="FMT",
                   help="value (default), kv, json, or a kcat-style format such as '%%k=%%s\\n'")
    p.add_argument("-K", dest="key_delim", metavar="DELIM", default=None,
                   help="print each key then DELIM before the value (kcat -K; -f takes precedence)")
    p.add_argument("-D", dest="msg_delim", metavar="DELIM", default=None,
                   help="write DELIM after each record instead of a newline (kcat -D: a-z, \\n, \\t, \\xNN...)")
    p.add_argument("-J", dest="kcat_json", action="store_true",
                   help="kcat's JSON envelope (topic, partition, offset, tstype, ts, broker, headers, key, payload)")
    p.add_argument("--progress", action="store_true", help="draw a progress line on stderr")
    add_connection_args(p)
    # kafka-console-consumer's names for the same things
    p.add_argument("--consumer-property", dest="config", action="append", metavar="KEY=VALUE",
                   help="same as -X")
    p.add_argument("--consumer.config", dest="command_config", metavar="FILE", help="same as --command-config")
    p.set_defaults(func=cmd_consume)


def parse_offset(text: str):
    """kcat's -o values (and kafka-console-consumer's earliest/latest) -> ("beginning"|"end"|"stored", None)
    | ("abs"|"rel"|"ts"|"until", int)."""
    import argparse
    t = text.strip()
    t = {"earliest": "beginning", "latest": "end"}.get(t, t)       # kafka-console-consumer --offset
    if t in ("beginning", "end", "stored"):
        return (t, None)
    kind, num = ("ts", t[2:]) if t.startswith("s@") else ("until", t[2:]) if t.startswith("e@") else (
        ("rel", t[1:]) if t.startswith("-") else ("abs", t))
    if not num.isdigit():
        raise argparse.ArgumentTypeError(f"expected beginning, end, stored, N, -N, s@TIMESTAMP_MS or "
                                         f"e@TIMESTAMP_MS, got {text!r}")
    return (kind, int(num))


def _b(v) -> bytes:
    return b"" if v is None else v


def _json_bytes(b):
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode()}


_JSON_ESC = {0x22: b'\\"', 0x5C: b"\\\\", 0x08: b"\\b", 0x0C: b"\\f", 0x0A: b"\\n", 0x0D: b"\\r",
             0x09: b"\\t"}
_JSON_BYTE = [_JSON_ESC.get(c, b"\\u%04X" % c if c < 0x20 else bytes([c])) for c in range(256)]


def _jstr(b) -> bytes:
    """A JSON string of raw bytes as kcat writes it: quotes, backslashes and control characters escaped,
    every other byte (also bytes that are not UTF-8) as it is."""
    if b is None:
        return b"null"
    if isinstance(b, str):
        b = b.encode("utf-8")
    return b'"' + b"".join(_JSON_BYTE[c] for c in b) + b'"'


def kcat_json(leaders: dict):
    """kcat -J's envelope: topic, partition, offset, tstype, ts, broker (the partition's leader),
    headers (a flat [key, value, ...] list, only when there are some), key, payload."""
    tstypes = {0: b"create", 1: b"logappend"}

    def as_json(r) -> bytes:
        out = [b'{"topic":', _jstr(r.topic), b',"partition":%d,"offset":%d,"tstype":"%s","ts":%d,"broker":%d'
               % (r.partition, r.offset, tstypes.get(r.timestamp_type, b"unknown"), r.timestamp,
                  leaders.get((r.topic, r.partition), -1))]
        if r.headers:
            out.append(b',"headers":[' + b",".join(_jstr(k) + b"," + _jstr(v) for k, v in r.headers) + b"]")
        out.append(b',"key":' + _jstr(r.key) + b',"payload":' + _jstr(r.value) + b"}\n")
        return b"".join(out)
    return as_json


def parse_delim(text: str) -> bytes:
    """A kcat delimiter (-D, -K): text with \\n \\r \\t \\0 \\\\ and \\xNN escapes."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[i + 2:i + 4]):
                out.append(int(text[i + 2:i + 4], 16))
                i += 4
                continue
            out += {"n": b"\n", "r": b"\r", "t": b"\t", "0": b"\0", "\\": b"\\"}.get(nxt, ("\\" + nxt).encode())
            i += 2
        else:
            out += ch.encode()
            i += 1
    return bytes(out)


def delimited(key_delim: bytes | None, msg_delim: bytes):
    """kcat's output without -f: [key KEY_DELIM] value MSG_DELIM (nulls print as nothing)."""
    if key_delim is None:
        return lambda r: _b(r.value) + msg_delim
    return lambda r: _b(r.key) + key_delim + _b(r.value) + msg_delim


def formatter(fmt: str):
    """A function record -> bytes for a preset name or a kcat-style format string. Keys and values
    are written as they are (no decoding, no escaping), as kcat does."""
    if fmt == "json":
        def as_json(r) -> bytes:
            return (json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                                "timestamp": r.timestamp, "key": _json_bytes(r.key),
                                "value": _json_bytes(r.value),
                                "headers": [[k, _json_bytes(v)] for k, v in r.headers]}) + "\n").encode()
        return as_json
    fmt = PRESETS.get(fmt, fmt)
    tokens = {
        "t": lambda r: r.topic.encode(), "p": lambda r: b"%d" % r.partition, "o": lambda r: b"%d" % r.offset,
        "k": lambda r: _b(r.key), "s": lambda r: _b(r.value), "T": lambda r: b"%d" % r.timestamp,
        "K": lambda r: b"%d" % (-1 if r.key is None else len(r.key)),
        "S": lambda r: b"%d" % (-1 if r.value is None else len(r.value)),
        "R": lambda r: struct.pack(">i", -1 if r.value is None else len(r.value)),
        "h": lambda r: b",".join(k.encode() + b"=" + _b(v) for k, v in r.headers),
    }
    escapes = {"n": "\n", "t": "\t", "\\": "\\", "r": "\r", "0": "\0"}
    compiled: list = []          # literal bytes and token functions, in order
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
                raise KohortError(f"--format: unknown token %{nxt} (known: %t %p %o %k %K %s %S %R %T %h)")
            if lit:
                compiled.append("".join(lit).encode())
                lit = []
            compiled.append(tokens[nxt])
            i += 2
        else:
            lit.append(ch)
            i += 1
    if lit:
        compiled.append("".join(lit).encode())

    def fmt_record(r) -> bytes:
        return b"".join(c if c.__class__ is bytes else c(r) for c in compiled)
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


def _start_spec(args):
    """(start, until_ts) from -o / --from-beginning; start None = the default."""
    start, until = None, None
    for kind, v in args.offset:
        if kind == "until":
            until = v
        elif start is not None:
            raise KohortError("-o: one start offset only (and optionally e@TIMESTAMP)")
        else:
            start = (kind, v)
    if args.from_beginning:
        if start is not None and start[0] != "beginning":
            raise KohortError("--from-beginning and -o both set the start")
        start = ("beginning", None)
    return start, until


def _apply_start(c, tps, start, timeout) -> None:
    """Position `tps` per a -o start (kcat's meanings)."""
    kind, v = start
    if kind == "beginning":
        c.seek_to_beginning(tps)
    elif kind == "end":
        c.seek_to_end(tps)
    elif kind == "abs":
        for tp in tps:
            c.seek(tp, v)
    elif kind == "rel":
        ends = c.end_offsets(tps, timeout=timeout)
        begins = c.beginning_offsets(tps, timeout=timeout)
        for tp in tps:
            c.seek(tp, max(begins[tp], ends[tp] - v))
    elif kind == "ts":
        found = c.offsets_for_times({tp: v for tp in tps}, timeout=timeout)
        late = [tp for tp in tps if found[tp] is None]
        for tp in tps:
            if found[tp] is not None:
                c.seek(tp, found[tp].offset)
        if late:
            c.seek_to_end(late)


def cmd_consume(args) -> int:
    from kohort.client.consumer import Consumer
    from kohort.structs import TopicPartition
    fmt = formatter(args.format)
    if args.format == "value" and (args.key_delim is not None or args.msg_delim is not None):
        fmt = delimited(None if args.key_delim is None else parse_delim(args.key_delim),
                        b"\n" if args.msg_delim is None else parse_delim(args.msg_delim))
    if args.group and args.partition:
        raise KohortError("--partition cannot be combined with --group (the group assigns partitions)")
    topics = list(dict.fromkeys(args.topic))
    patterns = [t for t in topics if t.startswith("^")]
    if patterns and not args.group:
        raise KohortError(f"topic pattern {patterns[0]!r} needs --group (as kcat -G): without a group, name the topics")
    start, until = _start_spec(args)
    if start is not None and start[0] == "stored" and not args.group:
        raise KohortError("-o stored needs --group (the offsets stored are a group's)")
    if start is not None and start[0] == "stored":
        start = None
    # offsets are committed by this command (of records written), never the consumer's position
    extra = {"auto.offset.reset": "earliest" if start is not None and start[0] == "beginning" else "latest",
             "enable.auto.commit": False}
    if args.group:
        extra["group.id"] = args.group
    cfg = client_config(args, extra)
    if str(cfg["enable.auto.commit"]).lower() not in ("false", "0"):
        raise KohortError("-X enable.auto.commit: kohort consume commits the offsets of the records it has "
                          "written itself (the consumer's position may be ahead of the output); leave it unset")
    from kohort.client.config import load_config
    loaded = load_config("consumer", cfg)        # a wrong -X key is reported before any connection
    named = [t for t in topics if not t.startswith("^")]
    if named or args.kcat_json:
        with admin_client(args, admin_keys_only=True) as a:   # one clear line if the cluster or a topic is missing
            descs = a.describe_topics(named, timeout=args.timeout) if named else []
            if args.kcat_json:           # -J names each partition's leader
                if patterns:
                    descs = a.describe_topics(None, timeout=args.timeout)
                fmt = kcat_json({(d.name, p.partition): p.leader for d in descs for p in d.partitions})
    c = Consumer(cfg)
    out = sys.stdout.buffer
    n = 0
    prog = Progress(args.count, ",".join(topics), force=args.progress) if args.progress else None
    max_poll = loaded["max.poll.records"]
    committer = _Committer(c, loaded["auto.commit.interval.ms"] / 1000) if args.group else None
    failure = None
    started: set = set()          # partitions this process has positioned per -o (group mode)
    stopped: set = set()          # partitions past e@TS
    assigned_once = [False]
    try:
        with _StopSignals() as signals:
            ends = None
            if args.group:
                def on_assign(consumer, tps):
                    assigned_once[0] = True
                    new = [tp for tp in tps if tp not in started]
                    started.update(new)
                    if start is not None and new:
                        _apply_start(consumer, new, start, args.timeout)

                def on_revoke(consumer, tps):
                    committer.on_revoke(consumer, tps)
                    stopped.difference_update(tps)

                spec = topics
                if patterns:
                    alts = [t[1:] if t.startswith("^") else re.escape(t) + "$" for t in topics]
                    spec = "^" + (alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")")
                c.subscribe(spec, on_assign=on_assign, on_revoke=on_revoke)
            else:
                tps = []
                for topic in topics:
                    parts = c.partitions_for_topic(topic, timeout=args.timeout)
                    if not parts:
                        raise KohortError(f"topic {topic!r} does not exist (see: kohort topics list -b ...)")
                    if args.partition:
                        bad = [p for p in args.partition if p not in parts]
                        if bad:
                            raise KohortError(f"topic {topic!r} has no partition(s) {bad}")
                        parts = args.partition
                    tps += [TopicPartition(topic, p) for p in parts]
                c.assign(tps)
                _apply_start(c, tps, start or ("end", None), args.timeout)
                if args.exit:
                    ends = {tp: off for tp, off in c.end_offsets(tps, timeout=args.timeout).items()}
            last = time.monotonic()
            done = set()
            while not signals.requested:
                if ends is not None:
                    for tp, end in ends.items():
                        if tp not in done and c.position(tp, timeout=args.timeout) >= end:
                            done.add(tp)
                    if len(done | stopped) >= len(ends):
                        break
                elif args.group and (args.exit or until is not None) and assigned_once[0]:
                    assigned = c.assignment()
                    lag = c.lag()
                    if assigned and all(tp in stopped or (args.exit and lag.get(tp) == 0) for tp in assigned):
                        break
                elif until is not None and not args.group and len(stopped) >= len(c.assignment()):
                    break
                # with --count, never take more records than will be printed
                recs = c.poll(0.5, max_records=min(args.count - n, max_poll) if args.count is not None else None)
                if recs:
                    last = time.monotonic()
                    if ends is not None:
                        recs = [r for r in recs if r.offset < ends.get(r.topic_partition, 1 << 62)]
                    if until is not None:
                        keep = []
                        for r in recs:
                            tp = r.topic_partition
                            if tp in stopped:
                                continue
                            if r.timestamp >= until:
                                stopped.add(tp)
                                c.pause([tp])
                                continue
                            keep.append(r)
                        recs = keep
                    # written = flushed: records count (and are committed) chunk by chunk as
                    # each flush succeeds, so a reader leaving mid-batch loses at most one chunk
                    i0 = size = 0
                    for i, r in enumerate(recs):
                        data = fmt(r)
                        out.write(data)
                        size += len(data)
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
