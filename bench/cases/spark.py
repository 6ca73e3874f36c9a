"""Spark: a streaming query (kohort source -> Parquet files, trigger availableNow) vs the raw consumer
on the same records.

Worker `stream_to_parquet(addr, topic, n, partitions)`: a local[2] SparkSession in its own process
(start-up reported apart, not timed), `readStream.format("kohort")` from earliest, `writeStream`
Parquet with a checkpoint, `trigger(availableNow=True)`; after a small warm-up query on another topic
(JVM and Python workers warm), the measured query is timed from start() to the end of
awaitTermination(); the rows written are counted back with pyarrow and must be n. The raw columns run
bench_consumer's kohort / confluent-kafka consumers (cases.consumer.consume) on the same topic.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from cases.common import KOHORT_BROKER, TANSU, seed

SPARK = "Spark stream → Parquet"
RAW_KOHORT = "kohort consumer (raw)"
RAW_CONFLUENT = "confluent-kafka consumer (raw)"


def _run_query(spark, addr, topic, work, name):
    out, ckpt = os.path.join(work, name), os.path.join(work, name + "-ckpt")
    df = (spark.readStream.format("kohort").option("kafka.bootstrap.servers", addr)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    t = time.perf_counter()
    q = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t
    if q.exception() is not None:
        raise RuntimeError(str(q.exception())[:300])
    import pyarrow.parquet as pq
    files = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".parquet")]
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return dt, rows, len(q.recentProgress), len(files)


def stream_to_parquet(addr: str, topic: str, n: int, partitions: int, warm_topic: str, warm_n: int) -> dict:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    t_session = time.perf_counter()
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("kohort-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import kohort.spark
    kohort.spark.register(spark)
    session_s = time.perf_counter() - t_session
    work = tempfile.mkdtemp(prefix="kohort-bench-spark-")
    try:
        # a small query first: JVM warm-up, Python worker start, source/sink class loading
        warm_s, warm_rows, _, _ = _run_query(spark, addr, warm_topic, work, "warm")
        if warm_rows != warm_n:
            raise RuntimeError(f"warm-up query wrote {warm_rows:,} rows, expected {warm_n:,}")
        dt, rows, batches, files = _run_query(spark, addr, topic, work, "out")
        if rows != n:
            raise RuntimeError(f"Parquet holds {rows:,} rows, expected {n:,}")
        return {"value": n / dt, "seconds": dt, "session_start_s": session_s, "warm_up_query_s": warm_s,
                "micro_batches": batches, "files": files}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    n = 100_000 if quick else 1_000_000
    size = 100
    sec = Section("spark", "Spark vs raw consumer (100 B)", "rows/s", ours=SPARK, peers=[RAW_KOHORT],
                  notes=[f"local[2] SparkSession (start-up and a {5000:,}-row warm-up query not timed), kohort source from earliest, Parquet "
                         f"sink, trigger(availableNow); rows counted back. Raw: bench_consumer's clients "
                         f"on the same topic. Ratio: Spark vs the raw kohort consumer."])
    jobs = []
    brokers = [KOHORT_BROKER] if quick else [KOHORT_BROKER, TANSU]
    codecs = ["none"] if quick else ["none", "lz4"]
    warm_n = 5_000
    for broker in brokers:
        addr = env.brokers.addr.get(broker)
        for codec in codecs:
            topic = f"spark-{codec}"
            err = env.brokers.errors.get(broker)
            if addr is not None:
                try:
                    seed(addr, topic, n, size, codec)
                    seed(addr, topic + "-warm", warm_n, size, codec)
                except Exception as e:
                    err = f"seeding: {type(e).__name__}: {e}"
            before = None
            if err is not None:
                def before(job, round_no, err=err):
                    raise RuntimeError(err)
            row = f"{broker} · {n:,} × {size} B · {codec}"
            jobs.append(Job("spark", row, SPARK, "cases.spark:stream_to_parquet",
                            {"addr": addr, "topic": topic, "n": n, "partitions": 1, "warm_topic": topic + "-warm",
                             "warm_n": warm_n}, timeout=300, before=before))
            for col, client in ((RAW_KOHORT, "kohort"), (RAW_CONFLUENT, "confluent-kafka")):
                jobs.append(Job("spark", row, col, "cases.consumer:consume",
                                {"client": client, "addr": addr, "topic": topic, "partitions": 1, "n": n,
                                 "size": size}, timeout=200, before=before, profile=client in profile))
    return [sec], jobs
