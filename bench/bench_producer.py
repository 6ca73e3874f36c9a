"""Producer throughput: kohort vs confluent-kafka, kafka-python, aiokafka and Apache Kafka's Java
KafkaProducer, same broker, one run.

Each client produces N records of S bytes (null keys) to its own fresh single-partition topic and
flushes; the time from the first produce call to the end of flush gives records/s. Same settings for
all: acks=all, linger.ms=5, no compression, each client's default batch size (1,000,000 for kohort and
librdkafka, Kafka's 16384 for kafka-python, aiokafka and Java) unless --batch-size sets one for all;
--defaults gives kohort and confluent-kafka only bootstrap.servers (+ compression.type). Each client
runs in its own process, --rounds N interleaved (medians and the ratio to confluent-kafka at the end).

    .venv/bin/python bench/bench_producer.py                      # 1,000,000 x 100 B on a kohort broker
    .venv/bin/python bench/bench_producer.py --broker tansu       # on Tansu
    .venv/bin/python bench/bench_producer.py --broker 127.0.0.1:9092 --records 200000 --clients kohort
    .venv/bin/python bench/bench_producer.py --clients "kohort,kohort produce_batch"   # the columnar API
    .venv/bin/python bench/bench_producer.py --defaults --clients kohort,confluent-kafka --rounds 3 \
        --size 1024 --records 50000 --compression lz4 [--profile 20]   # side by side at defaults

"kohort produce_batch" is Producer.produce_batch in calls of 10,000 records (its own column).

--broker-stats (a kohort broker the bench starts) prints after each run what the broker did for it,
counts a busy machine disturbs little: Produce requests, group-commit fsync rounds
(log.flush.policy=fsync-before-ack) and requests per round, the share of the run a round was
running, the mean number of Produce requests inside the broker (handled and not yet answered:
the sum of their handling times over the run's time), and the broker process's user/system CPU.
-C KEY=VALUE gives confluent-kafka a setting beyond the defaults (enable.idempotence=true: the
same delivery guarantees as kohort's defaults).

    .venv/bin/python bench/bench_producer.py --defaults --clients kohort,confluent-kafka --rounds 3 \
        --size 16384 --records 20000 --broker-stats [-C enable.idempotence=true]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))


def _kohort_config(addr, opts) -> dict:
    """kohort's producer settings for a run: only bootstrap.servers (+ compression.type) with
    opts.defaults, else the shared settings (acks=all, linger.ms=5); batch.size only when given."""
    extra = {"batch.size": opts.batch_size} if opts.batch_size else {}
    if getattr(opts, "defaults", False):
        base = {"bootstrap.servers": addr}
        if opts.compression != "none":
            base["compression.type"] = opts.compression
    else:
        base = {"bootstrap.servers": addr, "acks": "all", "linger.ms": 5, "compression.type": opts.compression}
    return {**base, **extra, **opts.kohort_extra}


# CPU of the timed part of a run (kohort and confluent-kafka): (process: every thread, calling thread)
_cpu_used: list[tuple[float, float]] = []


def _cpu() -> tuple[float, float]:
    return time.process_time(), time.thread_time()


def _cpu_since(c0: tuple[float, float]) -> None:
    c1 = _cpu()
    _cpu_used.append((c1[0] - c0[0], c1[1] - c0[1]))


def run_kohort(addr, topic, n, value, opts):
    from kohort.client.producer import Producer
    p = Producer(_kohort_config(addr, opts))
    p.partitions_for(topic)            # metadata before timing, as every client below does
    produce = p.produce
    c0 = _cpu()
    t = time.perf_counter()
    for _ in range(n):
        produce(topic, value)
    left = p.flush()
    dt = time.perf_counter() - t
    _cpu_since(c0)
    p.close()
    assert left == 0
    return dt


def run_kohort_batch(addr, topic, n, value, opts, chunk=10_000):
    """kohort's columnar Producer.produce_batch: the same records in calls of `chunk` (a list built
    before timing, as an Arrow batch or a DataFrame partition would hand them over)."""
    from kohort.client.producer import Producer
    p = Producer(_kohort_config(addr, opts))
    p.partitions_for(topic)
    values = [value] * chunk
    futs = []
    t = time.perf_counter()
    for start in range(0, n, chunk):
        futs.append(p.produce_batch(topic, values if start + chunk <= n else values[:n - start]))
    left = p.flush()
    for f in futs:
        f.result(60)
    dt = time.perf_counter() - t
    p.close()
    assert left == 0
    return dt


def run_confluent(addr, topic, n, value, opts):
    from confluent_kafka import Producer
    extra = {"batch.size": opts.batch_size} if opts.batch_size else {}
    if getattr(opts, "defaults", False):
        conf = {"bootstrap.servers": addr}
        if opts.compression != "none":
            conf["compression.type"] = opts.compression
    else:
        conf = {"bootstrap.servers": addr, "acks": "all", "linger.ms": 5, "compression.type": opts.compression,
                "queue.buffering.max.messages": 1000000}
    p = Producer({**conf, **extra, **getattr(opts, "confluent_extra", {})})
    p.list_topics(topic, timeout=10)
    produce, poll = p.produce, p.poll
    c0 = _cpu()
    t = time.perf_counter()
    for i in range(n):
        try:
            produce(topic, value)
        except BufferError:
            poll(0.05)
            produce(topic, value)
        if i & 1023 == 0:
            poll(0)
    left = p.flush(120)
    dt = time.perf_counter() - t
    _cpu_since(c0)
    assert left == 0
    return dt


def run_kafka_python(addr, topic, n, value, opts):
    from kafka import KafkaProducer
    extra = {"batch_size": opts.batch_size} if opts.batch_size else {}
    p = KafkaProducer(bootstrap_servers=addr, acks="all", linger_ms=5,
                      compression_type=None if opts.compression == "none" else opts.compression, **extra)
    p.partitions_for(topic)
    send = p.send
    t = time.perf_counter()
    for _ in range(n):
        send(topic, value)
    p.flush()
    dt = time.perf_counter() - t
    p.close()
    return dt


def run_aiokafka(addr, topic, n, value, opts):
    from aiokafka import AIOKafkaProducer

    async def main():
        extra = {"max_batch_size": opts.batch_size} if opts.batch_size else {}
        p = AIOKafkaProducer(bootstrap_servers=addr, acks="all", linger_ms=5,
                             compression_type=None if opts.compression == "none" else opts.compression,
                             **extra)
        await p.start()
        await p.partitions_for(topic)
        send = p.send
        t = time.perf_counter()
        for _ in range(n):
            await send(topic, value)
        await p.flush()
        dt = time.perf_counter() - t
        await p.stop()
        return dt
    return asyncio.run(main())


def run_java(addr, topic, n, value, opts):
    """Apache Kafka's Java KafkaProducer (bench/java/ProduceBench.java, null keys, values of the same
    size and shape); the JVM starts and fetches metadata before its clock does."""
    from bench_consumer import java_classes
    lib, out = java_classes("ProduceBench")
    p = subprocess.run(["java", "-Xmx1g", "-cp", f"{lib}/*:{out}", "ProduceBench", addr, topic, str(n),
                        str(len(value)), "1", str(opts.batch_size or 0), opts.compression, "null"],
                       capture_output=True, text=True, timeout=300)
    line = [x for x in p.stdout.splitlines() if x.startswith("PRODUCE_S ")]
    if p.returncode != 0 or not line:
        raise RuntimeError(f"ProduceBench failed: {(p.stderr or p.stdout).strip()[-300:]}")
    return float(line[0].split()[1])


def _confluent_config(addr, opts) -> dict:
    conf = {"bootstrap.servers": addr}
    if opts.compression != "none":
        conf["compression.type"] = opts.compression
    return conf


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def latency_kohort(addr, topic, n, value, rate, opts) -> list[float]:
    """produce -> acknowledgement times (s) of n records produced at `rate` records/s, kohort at its
    defaults; a record's time ends when its future's callback runs."""
    from kohort.client.producer import Producer
    p = Producer(_kohort_config(addr, opts))
    p.partitions_for(topic)
    p.produce(topic, value).result(30)          # connection and producer id before the clock
    sent = [0.0] * n
    acked = [0.0] * n
    clock = time.perf_counter

    def done(i):
        def cb(_fut):
            acked[i] = clock()
        return cb
    t0 = clock()
    for i in range(n):
        due = t0 + i / rate
        while (d := due - clock()) > 0:
            time.sleep(min(d, 0.0005))
        sent[i] = clock()
        p.produce(topic, value).add_done_callback(done(i))
    assert p.flush(60) == 0
    p.close()
    return [a - s for s, a in zip(sent, acked)]


def latency_confluent(addr, topic, n, value, rate, opts) -> list[float]:
    """The same with confluent-kafka at its defaults. Its delivery reports are served by a thread
    blocked in poll(0.1) (the pattern of Confluent's asyncio example), which returns as soon as a
    report is ready, while this thread paces the records as latency_kohort does: both clients' callbacks
    run on a thread woken by the answer. (poll() counts whole milliseconds -- poll(0.0005) is poll(0),
    so polling between records at sub-millisecond waits spins a core instead of waiting.)"""
    from confluent_kafka import Producer
    p = Producer(_confluent_config(addr, opts))
    p.list_topics(topic, timeout=10)
    p.produce(topic, value)
    p.flush(30)
    sent = [0.0] * n
    acked = [0.0] * n
    clock = time.perf_counter

    def done(i):
        def cb(err, _msg):
            acked[i] = clock() if err is None else float("nan")
        return cb
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            p.poll(0.1)
    poller = threading.Thread(target=serve, name="delivery-reports", daemon=True)
    poller.start()
    t0 = clock()
    for i in range(n):
        due = t0 + i / rate
        while (d := due - clock()) > 0:
            time.sleep(min(d, 0.0005))
        sent[i] = clock()
        p.produce(topic, value, on_delivery=done(i))
    stop.set()
    poller.join()
    assert p.flush(60) == 0
    return [a - s for s, a in zip(sent, acked)]


def memory_kohort(addr, topic, n, value, partitions, opts) -> dict:
    """RSS growth (KiB) while n records go round-robin to `partitions` partitions at once (kohort at
    its defaults), peak sampled every 10 ms by a thread; and the time taken."""
    from kohort.client.producer import Producer
    p = Producer(_kohort_config(addr, opts))
    p.partitions_for(topic)
    return _memory_run(lambda i: p.produce(topic, value, partition=i % partitions), p.flush, n,
                       after=p.close)


def memory_confluent(addr, topic, n, value, partitions, opts) -> dict:
    from confluent_kafka import Producer
    p = Producer(_confluent_config(addr, opts))
    p.list_topics(topic, timeout=10)

    def one(i):
        try:
            p.produce(topic, value, partition=i % partitions)
        except BufferError:
            p.poll(0.05)
            p.produce(topic, value, partition=i % partitions)
        if i & 1023 == 0:
            p.poll(0)
    return _memory_run(one, lambda: p.flush(120), n)


def _memory_run(one, flush, n, after=None) -> dict:
    base = _rss_kb()
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.01):
            peak[0] = max(peak[0], _rss_kb())
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t = time.perf_counter()
    for i in range(n):
        one(i)
    left = flush()
    dt = time.perf_counter() - t
    stop.set()
    th.join()
    peak[0] = max(peak[0], _rss_kb())
    if after is not None:
        after()
    assert left == 0
    return {"rss_growth_kb": peak[0] - base, "seconds": dt}


CLIENTS = {"kohort": run_kohort, "kohort produce_batch": run_kohort_batch, "confluent-kafka": run_confluent,
           "kafka-python": run_kafka_python, "aiokafka": run_aiokafka, "java": run_java}


def start_broker(kind, metrics_port=None):
    """-> (bootstrap address, stop(), the broker's pid or None); a kohort broker serves its metrics
    on `metrics_port` when given."""
    if kind == "kohort":
        from tests.helpers.brokers import KohortBroker
        b = KohortBroker(metrics_port=metrics_port).start()
        return b.bootstrap, b.stop, b.proc.pid
    if kind == "tansu":
        from tests.conftest import start_tansu
        proc, addr = start_tansu()

        def stop():
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        return addr, stop, None
    return kind, lambda: None, None


# What --broker-stats reads from the broker's /metrics (Prometheus text) before and after a run
_BROKER_COUNTERS = ('kohort_requests_total{api="Produce"}', 'kohort_request_seconds_sum{api="Produce"}',
                    "kohort_fsync_rounds_total", "kohort_fsync_seconds_total")


def _broker_counters(metrics_port: int, pid: int) -> dict[str, float]:
    """The counters of _BROKER_COUNTERS and the broker process's CPU seconds (user, sys)."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in _BROKER_COUNTERS:
            out[name] = float(value)
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    out["user"], out["sys"] = int(fields[11]) / tick, int(fields[12]) / tick
    return out


def _broker_note(before: dict, after: dict, dt: float) -> str:
    """One line on what the broker did during a run of `dt` seconds (see --broker-stats)."""
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    reqs = d.get(_BROKER_COUNTERS[0], 0.0)
    rounds = d.get("kohort_fsync_rounds_total", 0.0)
    per_round = f"{reqs / rounds:.2f}" if rounds else "-"
    return (f"    broker: {reqs:.0f} Produce requests, {rounds:.0f} fsync rounds ({per_round} requests/round, "
            f"rounds running {d.get('kohort_fsync_seconds_total', 0.0) / dt:.0%} of the run), "
            f"{d.get(_BROKER_COUNTERS[1], 0.0) / dt:.2f} requests inside on average, "
            f"cpu user {d['user']:.2f}s sys {d['sys']:.2f}s")


def _child(opts) -> int:
    """One client, one run, in this process: prints "SECONDS <s>" (bench runs each client apart)."""
    from cases.common import values
    value = values(opts.size, 1)[0]
    if opts.profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        dt = prof.runcall(CLIENTS[opts.child], opts.broker, opts.topic, opts.records, value, opts)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(opts.profile)
    else:
        dt = CLIENTS[opts.child](opts.broker, opts.topic, opts.records, value, opts)
    if _cpu_used:
        print(f"CPU {_cpu_used[0][0]} {_cpu_used[0][1]}", flush=True)
    print(f"SECONDS {dt}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--broker", default="kohort", help="kohort | tansu | HOST:PORT")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--compression", default="none")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="the same batch size (bytes) for every client (default: each client's own default)")
    ap.add_argument("--defaults", action="store_true",
                    help="every client at its own defaults: only bootstrap.servers (+ compression.type)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds, each client in its own process")
    ap.add_argument("--profile", type=int, default=0, help="cProfile each run, print the top N functions")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("-X", action="append", default=[], help="extra kohort producer setting KEY=VALUE")
    ap.add_argument("-C", action="append", default=[], help="extra confluent-kafka setting KEY=VALUE")
    ap.add_argument("--broker-stats", action="store_true",
                    help="after each run, the kohort broker's Produce requests, fsync rounds and CPU for it")
    opts = ap.parse_args(argv)
    opts.kohort_extra = dict(x.split("=", 1) for x in opts.X)
    opts.confluent_extra = dict(x.split("=", 1) for x in opts.C)
    if opts.child:
        return _child(opts)
    if opts.broker_stats and opts.broker != "kohort":
        ap.error("--broker-stats needs the kohort broker the bench starts (--broker kohort)")
    metrics_port = None
    if opts.broker_stats:
        from tests.helpers.brokers import free_port
        metrics_port = free_port()
    addr, stop, broker_pid = start_broker(opts.broker, metrics_port)
    results: dict[str, list[float]] = {}
    names = opts.clients.split(",")
    try:
        from kohort.client.admin import Admin
        admin = Admin({"bootstrap.servers": addr})
        for rnd in range(opts.rounds):
            for name in names:
                topic = f"bench-{name.replace(' ', '-')}-{os.getpid()}-{rnd}"
                admin.create_topics({topic: 1})
                cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--broker", addr,
                       "--topic", topic, "--records", str(opts.records), "--size", str(opts.size),
                       "--compression", opts.compression, "--profile", str(opts.profile)]
                cmd += (["--batch-size", str(opts.batch_size)] if opts.batch_size else [])
                cmd += (["--defaults"] if opts.defaults else []) + [f"-X{x}" for x in opts.X]
                cmd += [f"-C{x}" for x in opts.C]
                before = _broker_counters(metrics_port, broker_pid) if metrics_port else None
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                line = [x for x in r.stdout.splitlines() if x.startswith("SECONDS ")]
                if r.returncode or not line:
                    raise RuntimeError(f"{name} failed: {r.stderr[-2000:]}")
                if opts.profile:
                    print(r.stderr, file=sys.stderr)
                dt = float(line[0].split()[1])
                cpu = [x.split()[1:] for x in r.stdout.splitlines() if x.startswith("CPU ")]
                ends = admin.list_offsets({(topic, 0): -1})
                rate = opts.records / dt
                results.setdefault(name, []).append(rate)
                cpu_note = ""
                if cpu:     # CPU per record: the whole process (every thread), and the producing thread
                    proc_us, thread_us = (float(x) * 1e6 / opts.records for x in cpu[0])
                    cpu_note = f"  cpu/record {proc_us:.2f} µs (calling thread {thread_us:.2f} µs)"
                print(f"round {rnd} {name:20s} {opts.records:>9,} records in {dt:7.2f}s  {rate:>10,.0f} "
                      f"records/s  (log end offset {ends[(topic, 0)]:,}){cpu_note}", flush=True)
                if before is not None:
                    # the child's whole life (setup, close): its run's Produce requests and rounds
                    # all fall inside it; the broker's CPU also counts that client's setup
                    print(_broker_note(before, _broker_counters(metrics_port, broker_pid), dt), flush=True)
        admin.close()
    finally:
        stop()
    med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    ref = med.get("confluent-kafka")
    for k, v in med.items():
        ratio = f"  x{v / ref:.2f} vs confluent-kafka" if ref and k != "confluent-kafka" else ""
        print(f"median {k:20s} {v:>10,.0f} records/s{ratio}")
    print(f"{opts.records:,} x {opts.size} B, compression {opts.compression}, batch size "
          f"{opts.batch_size or 'client default'}, {'defaults' if opts.defaults else 'acks=all linger.ms=5'}, "
          f"{opts.rounds} round(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
