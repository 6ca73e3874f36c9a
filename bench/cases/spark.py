"""Spark: a streaming query (kohort source -> Parquet files, trigger availableNow) vs the raw consumer
on the same records, with bench/bench_spark.py's functions.

Worker `stream_to_parquet(addr, topic, n, warm_topic, warm_n)`: bench_spark.spark_session() (local[2])
in its own process, a warm-up query on a small topic, then bench_spark.spark_stream() on the topic:
readStream.format("kohort") from earliest -> Parquet with a checkpoint, trigger(availableNow=True),
timed from start() to awaitTermination(); rows read back must be n. Session start-up and the
warm-up are reported apart, not timed. Other columns on the same topic: bench_spark.lean_reader
(the fetch -> Arrow path a Spark task runs, without Spark), and bench_consumer's raw kohort and
confluent-kafka consumers (cases.consumer.consume).
"""
from __future__ import annotations

import shutil
import tempfile
import time

from cases.common import KOHORT_BROKER, seed

SPARK = "Spark stream → Parquet"
LEAN = "lean reader (fetch → Arrow)"
RAW_KOHORT = "kohort consumer (raw)"
RAW_CONFLUENT = "confluent-kafka consumer (raw)"


def stream_to_parquet(addr: str, topic: str, n: int, warm_topic: str, warm_n: int) -> dict:
    import bench_spark
    t = time.perf_counter()
    spark = bench_spark.spark_session()
    session_s = time.perf_counter() - t
    work = tempfile.mkdtemp(prefix="kohort-bench-spark-")
    try:
        t = time.perf_counter()
        bench_spark.spark_stream(spark, addr, warm_topic, warm_n, work, "warm")
        warm_s = time.perf_counter() - t
        rate, batches = bench_spark.spark_stream(spark, addr, topic, n, work, "out")
        return {"value": rate, "session_start_s": session_s, "warm_up_query_s": warm_s,
                "micro_batches": batches}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def lean(addr: str, topic: str, n: int, size: int) -> dict:
    import bench_spark
    return {"value": bench_spark.lean_reader(addr, topic, {0: n}, size)}


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    n = 100_000 if quick else 300_000
    size = 100
    warm_n = 5_000
    sec = Section("spark", "Spark vs raw consumer (100 B, 1 partition)", "rows/s", ours=SPARK, peers=[RAW_KOHORT],
                  notes=[f"bench_spark.py: local[2] SparkSession (start-up and a {warm_n:,}-row warm-up query "
                         f"not timed), kohort source from earliest -> Parquet, trigger(availableNow), rows "
                         f"read back; lean reader = bench_spark.lean_reader; raw consumers = bench_consumer's. "
                         f"Ratio: Spark vs the raw kohort consumer."])
    jobs = []
    brokers = [KOHORT_BROKER]         # one broker: the question is Spark vs the raw consumer
    for broker in brokers:
        addr = env.brokers.addr.get(broker)
        codec = "none"
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
        row = f"{broker} · {n:,} × {size} B"
        jobs.append(Job("spark", row, SPARK, "cases.spark:stream_to_parquet",
                        {"addr": addr, "topic": topic, "n": n, "warm_topic": topic + "-warm", "warm_n": warm_n},
                        timeout=300, before=before))
        jobs.append(Job("spark", row, LEAN, "cases.spark:lean",
                        {"addr": addr, "topic": topic, "n": n, "size": size}, timeout=200, before=before,
                        profile="kohort" in profile))
        for col, client in ((RAW_KOHORT, "kohort"), (RAW_CONFLUENT, "confluent-kafka")):
            jobs.append(Job("spark", row, col, "cases.consumer:consume",
                            {"client": client, "addr": addr, "topic": topic, "partitions": 1, "n": n,
                             "size": size}, timeout=200, before=before, profile=client in profile))
    return [sec], jobs
