"""The broker's Produce request path in one process: CPU per request, without sockets or clients.

A real `Broker` is opened on a temporary data directory (storage, producer state, the group-commit
fsync pump; no listening socket), and one broker `Connection` is fed pre-encoded Produce frames
through asyncio's BufferedProtocol calls with an in-memory transport that only counts the bytes
written. So every request goes the broker's whole way: frame cut, request decode, the handler
(validation, idempotence check, append to the segment file, index upkeep), the answer's encoding
and the connection's write -- everything but the socket system calls.

Each request carries one batch of about `--batch-bytes` (16 KiB: Java's batch.size) of records of
`--size` bytes from an idempotent producer (sequence numbers following on), optionally compressed.
Frames are handed over `--pipeline` at a time (as a client with that many requests in flight would
deliver them), each group in a loop iteration of its own once the previous group's answers are
written; with log.flush.policy=fsync-before-ack the answers wait for the shared fsync round,
whose thread's CPU counts too (process time covers every thread of the process).

Reported per request: CPU µs (time.process_time; split into user and kernel time by getrusage), wall µs,
context switches of all the process's threads (getrusage: voluntary + involuntary; a figure that a
busy machine disturbs less than time: each fsync round costs the loop thread and the fsync thread
their sleeps and wake-ups), and with `--profile` the top functions
by own time (cProfile). For instruction counts that a busy machine does not disturb:
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
        .venv/bin/python bench/bench_produce_path.py --requests 300 --only "100 B none os"
    callgrind_annotate /tmp/cg.out | head -40
Under fsync-before-ack the loop's thread idles during every round (the disk's time) and then runs
the next requests cold: `--idle-us N` makes it idle N µs after each group under policy os, with
no fsync and no round, which shows what the idle gap alone costs (100 B records, a busy
2-core machine, rounds of ~4 ms: os 44-58 µs/request, os idling 300 µs 66-101, 4000 µs 78-95,
fsync-before-ack 91-120; while the loop thread's instructions per request, callgrind, are 228k,
237k with 300 µs idle, 265k under fsync-before-ack: the idle gap costs time, not instructions).
Run:
    .venv/bin/python bench/bench_produce_path.py [--requests 2000] [--profile] [--only LABEL] [--idle-us N]
        [--size 100,1024] [--compression none,lz4] [--policy os,fsync-before-ack] [--batch-bytes 16384]
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import random
import resource
import shutil
import sys
import tempfile
import time

from kohort.broker.config import BrokerConfig
from kohort.broker.connection import Connection
from kohort.broker.security import Listener
from kohort.broker.server import Broker
from kohort.protocol.compression import CODEC_IDS
from kohort.protocol.framing import decode_response, encode_request
from kohort.protocol.messages.produce import ProduceRequest
from kohort.protocol.records import build_batch

TOPIC = "bench"
PRODUCER_ID = 4000


class CountingTransport:
    """What the connection writes to: keeps the written buffers (their answers are checked after
    the timing) and whether the connection was closed."""

    def __init__(self) -> None:
        self.writes: list = []
        self.closed = False
        self._reading = True

    def write(self, data) -> None:
        self.writes.append(data)

    def answers(self) -> list[bytes]:
        """Every answer frame's payload, in order."""
        data = b"".join(bytes(w) for w in self.writes)
        out, pos = [], 0
        while pos < len(data):
            n = int.from_bytes(data[pos:pos + 4], "big")
            out.append(data[pos + 4:pos + 4 + n])
            pos += 4 + n
        return out

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 1)}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        self._reading = True

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    abort = close


def make_frames(n: int, size: int, codec: str, batch_bytes: int, version: int, distinct: bool = False) -> list[bytes]:
    """n Produce frames, each one idempotent batch of records of `size` bytes filling about
    `batch_bytes` before compression, sequence numbers following on. Every record carries the same
    value (as bench_producer.py sends), or with `distinct` a value of its own (compressed batches
    then keep about half their size)."""
    per = max(1, batch_bytes // (size + 12))
    # half random (compressible, not trivially); seeded, so --callgrind's two runs build the same frames
    # and compress the same bytes (their difference is then the requests' work alone)
    rnd = random.Random(size)
    pool = [rnd.randbytes(size // 2) + b"x" * (size - size // 2) for _ in range(per if distinct else 1)]
    PT = ProduceRequest.TopicProduceData
    frames = []
    seq = 0
    ts = 1_700_000_000_000
    for i in range(n):
        batch = build_batch([(b"%08d" % (seq + j), pool[j % len(pool)], [], ts + j) for j in range(per)],
                            compression=CODEC_IDS[codec], producer_id=PRODUCER_ID, producer_epoch=0,
                            base_sequence=seq)
        seq += per
        req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
            PT(name=TOPIC, partition_data=[PT.PartitionProduceData(index=0, records=batch)])])
        frames.append(encode_request(req, version, i + 1, client_id="bench"))
    return frames


async def drive(frames: list[bytes], policy: str, pipeline: int, profile: bool, version: int,
                idle_s: float = 0.0) -> dict:
    d = tempfile.mkdtemp(prefix="kohort-produce-path-")
    broker = Broker(BrokerConfig.from_properties({"log.flush.policy": policy}), "127.0.0.1", 0,
                    os.path.join(d, "data"))
    await broker.open()
    try:
        broker.storage.create_topic(TOPIC, 1)
        conn = Connection(broker, Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0))
        t = CountingTransport()
        conn.connection_made(t)

        def feed(frame: bytes) -> None:
            # in the pieces the connection's buffers take, as a socket's reads would deliver them
            mv = memoryview(frame)
            off = 0
            while off < len(frame):
                view = conn.get_buffer(len(frame) - off)
                n = min(len(view), len(frame) - off)
                view[:n] = mv[off:off + n]
                conn.buffer_updated(n)
                off += n

        async def settle() -> None:
            # the answers waiting on the fsync round: sleep until the last is done (no busy wait,
            # whose CPU would count), then let the connection write them. The answer's future is
            # awaited itself (asyncio.wait would add a waiter future, callbacks and a loop
            # iteration per round, the harness's CPU, not the broker's): its first callback is the
            # connection's, which writes the answers before this task resumes.
            while conn._pending:
                last = conn._pending[-1][0]
                if isinstance(last, asyncio.Future) and not last.done():
                    await last
                else:
                    await asyncio.sleep(0)

        # warm-up (first-use work: producer state recovery, imports, caches)
        t.writes.clear()
        warm = frames[:pipeline]
        for f in warm:
            feed(f)
        await settle()
        work = frames[len(warm):]
        # CPU time of the loop's thread, so a busy machine's preemptions are not charged to whatever ran
        prof = cProfile.Profile(time.thread_time) if profile else None
        c0, w0 = time.process_time(), time.perf_counter()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        loop = asyncio.get_running_loop()
        finished = loop.create_future()
        starts = iter(range(0, len(work), pipeline))

        def step() -> None:
            # the next `pipeline` frames arrive in a loop iteration of their own once the answers
            # of the previous ones are written (as a client's next requests would, after a socket
            # read); answers ready at once (policy os) go on without waiting
            for i in starts:
                for f in work[i:i + pipeline]:
                    feed(f)
                last = conn._pending[-1][0] if conn._pending else None
                if isinstance(last, asyncio.Future) and not last.done():
                    last.add_done_callback(lambda _: loop.call_soon(step))
                    return
                if idle_s:              # --idle-us: the loop sleeps between groups, as a round's wait makes it
                    loop.call_later(idle_s, step)
                    return
            finished.set_result(None)

        if prof:
            prof.enable()
        step()
        await finished
        if prof:
            prof.disable()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        n = len(work)
        answers = t.answers()
        if t.closed or len(answers) != len(frames):
            raise RuntimeError(f"{len(answers)} answers to {len(frames)} requests (closed: {t.closed})")
        for a in answers:
            _, resp = decode_response(a, 0, version)
            p = resp.responses[0].partition_responses[0]
            if p.error_code:
                raise RuntimeError(f"an answer is error {p.error_code}: {p.error_message}")
        out = {"requests": n, "cpu_us": cpu / n * 1e6, "wall_us": wall / n * 1e6,
               "user_us": (r1.ru_utime - r0.ru_utime) / n * 1e6, "sys_us": (r1.ru_stime - r0.ru_stime) / n * 1e6,
               "csw": (r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / n,
               "log_end": broker.storage.log(TOPIC, 0).log_end_offset, "fsyncs": broker.storage.fsyncs}
        if prof:
            s = io.StringIO()
            st = pstats.Stats(prof, stream=s)
            st.sort_stats("tottime").print_stats(25)
            st.sort_stats("cumulative").print_stats(40)
            st.sort_stats("ncalls").print_stats(60)
            out["profile"] = s.getvalue()
        conn.connection_lost(None)
        return out
    finally:
        await broker.stop()
        shutil.rmtree(d, ignore_errors=True)


def callgrind(a) -> None:
    """Two runs of this script under valgrind's callgrind, both building the same frames and
    feeding `small` and `large` of them: what differs is only the requests worked on."""
    import re
    import subprocess
    if not a.only:
        raise SystemExit("--callgrind needs --only CASE")
    small, large = max(a.pipeline, a.requests // 5), a.requests
    counts = []
    for feed in (small, large):
        out = tempfile.mktemp(prefix="kohort-cg-")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
               "--requests", str(a.requests), "--feed", str(feed), "--only", a.only,
               "--pipeline", str(a.pipeline), "--version", str(a.version), "--batch-bytes", str(a.batch_bytes),
               "--size", a.size, "--compression", a.compression, "--policy", a.policy]
        cmd += ["--distinct"] if a.distinct else []
        p = subprocess.run(cmd, capture_output=True, text=True)
        m = re.search(r"Collected : (\d+)", p.stderr)
        if p.returncode != 0 or not m:
            raise SystemExit(f"callgrind run failed: {p.stderr[-2000:]}")
        counts.append(int(m.group(1)))
        os.remove(out)
    per = (counts[1] - counts[0]) / (large - small)
    print(f"{a.only}: {per:,.0f} instructions per request (callgrind, {large} - {small} requests)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--batch-bytes", type=int, default=16384)
    ap.add_argument("--size", default="100,1024", help="record sizes in bytes, comma-separated")
    ap.add_argument("--compression", default="none,lz4", help="codecs, comma-separated (none, gzip, snappy, lz4, zstd)")
    ap.add_argument("--policy", default="os,fsync-before-ack", help="log.flush.policy values, comma-separated")
    ap.add_argument("--distinct", action="store_true",
                    help="a value of its own per record (default: one value for all, as bench_producer.py)")
    ap.add_argument("--pipeline", type=int, default=5, help="frames handed over at once (requests in flight)")
    ap.add_argument("--version", type=int, default=9, help="Produce version (librdkafka 2.x sends 9-10, Java 4.x 11-12)")
    ap.add_argument("--profile", action="store_true", help="cProfile the measured requests (slower)")
    ap.add_argument("--idle-us", type=float, default=0.0,
                    help="the loop idles this long after each group whose answers are ready at once "
                         "(policy os): a group-commit round's wait without its fsync, to tell the "
                         "idle gap's CPU cost from the round's own")
    ap.add_argument("--only", default=None, help='one case, e.g. "100 B none os"')
    ap.add_argument("--feed", type=int, default=None,
                    help="measure only the first FEED of the --requests frames (--callgrind's two runs)")
    ap.add_argument("--callgrind", action="store_true",
                    help="instructions per request of the --only case: two runs under callgrind feeding "
                         "--requests/5 and --requests frames, their difference divided by the difference")
    a = ap.parse_args()
    if a.callgrind:
        return callgrind(a)
    cases = [(int(size), codec, policy) for size in a.size.split(",") for codec in a.compression.split(",")
             for policy in a.policy.split(",")]
    print(f"Produce v{a.version}, one {a.batch_bytes} B batch per request, idempotent, acks=all, "
          f"{a.pipeline} in flight, {a.requests} requests, {'distinct values' if a.distinct else 'one value'}; "
          f"python {sys.version.split()[0]}")
    print(f"{'case':<34}{'CPU us/req':>12}{'user':>8}{'kernel':>8}{'wall us/req':>13}{'csw/req':>9}{'fsync rounds':>14}{'frame B':>10}")
    for size, codec, policy in cases:
        label = f"{size} B {codec} {policy}"
        if a.only and a.only != label:
            continue
        frames = make_frames(a.requests + a.pipeline, size, codec, a.batch_bytes, a.version, a.distinct)
        if a.feed is not None:
            frames = frames[:a.feed + a.pipeline]
        r = asyncio.run(drive(frames, policy, a.pipeline, a.profile, a.version, a.idle_us / 1e6))
        print(f"{label:<34}{r['cpu_us']:>12.1f}{r['user_us']:>8.1f}{r['sys_us']:>8.1f}{r['wall_us']:>13.1f}"
              f"{r['csw']:>9.2f}{r['fsyncs']:>14}{sum(map(len, frames)) // len(frames):>10}", flush=True)
        if a.profile:
            print(r["profile"])


if __name__ == "__main__":
    main()
