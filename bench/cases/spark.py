"""Spark: format("kohort") vs Spark's own format("kafka") (spark-sql-kafka, from .peers/spark-lib) on
the same kohort broker, records and trigger, next to the raw consumer, with bench/bench_spark.py's
functions.

Worker `formats(addr, topic, n, size, warm_topic, warm_n, fmt)`: bench_spark.spark_session() (local[2],
spark-sql-kafka on the classpath) in its own process, a warm-up stream query on a small topic, then
for `fmt`:
* stream → Parquet: readStream from earliest -> Parquet with a checkpoint, trigger(availableNow=True),
  timed from start() to awaitTermination(); rows read back must be n;
* batch read → Parquet: spark.read earliest..latest -> write.parquet, rows read back;
* stream → noop / batch read → noop: the same reads into Spark's noop sink (rows dropped), so only the
  source is timed; rows checked by numInputRows (stream) or an Observation (batch). These rows also
  carry the raw kohort and confluent-kafka consumers on the same topic (measured once per round, one
  cell per noop row), so the source stands next to the raw consumer it must reach half of;
* sink (df.write): n generated 100 B values (cached first) written to a fresh topic, end offsets checked,
  after an untimed warm-up write of warm_n rows (Python workers of a Python data source start there);
  each format with its own producer defaults (kohort's sink: batch.size 1,000,000, linger.ms 5;
  spark-sql-kafka: Java's 16 KiB, 0 ms), then again with kafka.batch.size=1000000, kafka.linger.ms=5
  for both (sub-row "sink1mb").
Session start-up and the warm-up are reported apart, not timed. Other columns of the stream row, on the
same topic: bench_spark.lean_reader (the fetch -> Arrow path a Spark task runs, without Spark), and
bench_consumer's raw kohort and confluent-kafka consumers (cases.consumer.consume).

Record count: KOHORT_BENCH_SPARK_RECORDS, else 3,000,000 (full; fixed costs must not hide the rate)
or 200,000 (quick). KOHORT_BENCH_SPARK_ONLY=sink,sink1mb (comma list of stream, batch, noopstream,
noopbatch, sink, sink1mb) runs only those sub-rows: sinks alone skip seeding, the warm-up query and
the raw-consumer columns.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid

from cases.common import KOHORT_BROKER, seed

KOHORT = 'format("kohort")'
KAFKA = 'format("kafka") (spark-sql-kafka)'
LEAN = "lean reader (fetch → Arrow)"
RAW_KOHORT = "kohort consumer (raw)"
RAW_CONFLUENT = "confluent-kafka consumer (raw)"
STREAM, BATCH, SINK = "stream → Parquet", "batch read → Parquet", "sink (df.write)"
NOOP_STREAM, NOOP_BATCH = "stream → noop", "batch read → noop"
SINK_1MB = "sink (df.write), batch.size 1 MB for both"
SINK_1MB_OPTIONS = {"kafka.batch.size": "1000000", "kafka.linger.ms": "5"}
FORMATS = {KOHORT: "kohort", KAFKA: "kafka"}
PARTS = {"stream": STREAM, "batch": BATCH, "noopstream": NOOP_STREAM, "noopbatch": NOOP_BATCH, "sink": SINK,
         "sink1mb": SINK_1MB}
READS = ("stream", "batch", "noopstream", "noopbatch")
NOOPS = ("noopstream", "noopbatch")


def _parts() -> list[str]:
    want = [p.strip() for p in (os.environ.get("KOHORT_BENCH_SPARK_ONLY") or ",".join(PARTS)).split(",")
            if p.strip()]
    bad = [p for p in want if p not in PARTS]
    if bad or not want:
        raise SystemExit(f"KOHORT_BENCH_SPARK_ONLY: {', '.join(bad) or '(empty)'} unknown; use a comma list of "
                         f"{', '.join(PARTS)}")
    return want


def formats(addr: str, topic: str, n: int, size: int, warm_topic: str, warm_n: int, fmt: str,
            parts: tuple = tuple(PARTS)) -> dict:
    import bench_spark
    if fmt == "kafka" and bench_spark.kafka_connector_jars() is None:
        raise RuntimeError("spark-sql-kafka is not in .peers/spark-lib (make peers)")
    t = time.perf_counter()
    spark = bench_spark.spark_session()
    session_s = time.perf_counter() - t
    work = tempfile.mkdtemp(prefix="kohort-bench-spark-")
    try:
        rows, out = {}, {"session_start_s": session_s}
        if any(p in parts for p in READS):
            t = time.perf_counter()
            bench_spark.spark_stream(spark, addr, warm_topic, warm_n, work, "warm", fmt)
            out["warm_up_query_s"] = time.perf_counter() - t
        if "stream" in parts:
            rows[STREAM], out["micro_batches"] = bench_spark.spark_stream(spark, addr, topic, n, work, "out", fmt)
            out["stream_phases_s"] = bench_spark.STREAM_DURATIONS.get("out")
        if "batch" in parts:
            rows[BATCH] = bench_spark.spark_batch_parquet(spark, addr, topic, n, work, "batch", fmt)
        if "noopstream" in parts:
            rows[NOOP_STREAM], out["noop_micro_batches"] = bench_spark.spark_stream_noop(
                spark, addr, topic, n, work, "noop", fmt)
            out["noop_stream_phases_s"] = bench_spark.STREAM_DURATIONS.get("noop")
        if "noopbatch" in parts:
            rows[NOOP_BATCH] = bench_spark.spark_batch_noop(spark, addr, topic, n, fmt)
        if "sink" in parts or "sink1mb" in parts:  # untimed warm-up write: the Python workers (kohort)
            t = time.perf_counter()         # or the JVM producer path (kafka) start here, not when timed
            bench_spark.spark_sink(spark, addr, f"{topic}-sinkwarm-{fmt}-{uuid.uuid4().hex[:8]}", warm_n, size, fmt)
            out["sink_warm_up_s"] = time.perf_counter() - t
        if "sink" in parts:                 # each format's own producer defaults (kohort's sink: 1 MB)
            rows[SINK] = bench_spark.spark_sink(spark, addr, f"{topic}-sink-{fmt}-{uuid.uuid4().hex[:8]}", n,
                                                size, fmt)
        if "sink1mb" in parts:              # the same batch size for both
            rows[SINK_1MB] = bench_spark.spark_sink(spark, addr, f"{topic}-sink1mb-{fmt}-{uuid.uuid4().hex[:8]}",
                                                    n, size, fmt, options=SINK_1MB_OPTIONS)
        return {"value": rows[PARTS[parts[0]]], "rows": rows, **out}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def lean(addr: str, topic: str, n: int, size: int) -> dict:
    import bench_spark
    return {"value": bench_spark.lean_reader(addr, topic, {0: n}, size)}


def raw(client: str, addr: str, topic: str, n: int, size: int, parts: tuple) -> dict:
    """One raw-consumer run on the Spark topic, reported as a cell of each noop row in `parts`."""
    from cases.consumer import consume
    got = consume(client, addr, topic, 1, n, size)
    return {**got, "rows": {PARTS[p]: got["value"] for p in parts}}


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    parts = _parts()
    reads = any(p in parts for p in READS)
    n = int(os.environ.get("KOHORT_BENCH_SPARK_RECORDS") or (200_000 if quick else 3_000_000))
    size = 100
    warm_n = 5_000
    sec = Section("spark", "Spark: format(\"kohort\") vs spark-sql-kafka, and the raw consumer (100 B, 1 partition)",
                  "rows/s", ours=KOHORT, peers=[KAFKA],
                  notes=[f"bench_spark.py: local[2] SparkSession (start-up and a {warm_n:,}-row warm-up query "
                         f"not timed); both formats on the same kohort broker and topic: stream from earliest "
                         f"-> Parquet with trigger(availableNow), batch read -> Parquet, the same two "
                         f"reads into Spark's noop sink (only the source timed; the raw consumers in those "
                         f"rows too), sink = df.write of "
                         f"{n:,} generated values to a fresh topic after an untimed {warm_n:,}-row write, each "
                         f"format with its own producer defaults (kohort's sink: batch.size 1 MB, linger.ms 5; "
                         f"spark-sql-kafka: Java's 16 KiB, 0 ms), then with batch.size 1 MB, linger.ms 5 for "
                         f"both; rows read back / end offsets checked. "
                         f"Lean reader = bench_spark.lean_reader; raw consumers = bench_consumer's. Ratio: "
                         f"format(\"kohort\") vs format(\"kafka\"); the goal asks format(\"kohort\") → noop "
                         f"≥ 0.5× the raw kohort consumer (same row)."])
    jobs = []
    brokers = [KOHORT_BROKER]         # one broker: the question is the Spark source, not the broker
    for broker in brokers:
        addr = env.brokers.addr.get(broker)
        codec = "none"
        topic = f"spark-{codec}-{n}"
        err = env.brokers.errors.get(broker)
        if addr is not None and reads:
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
        for col, fmt in FORMATS.items():
            jobs.append(Job("spark", row, col, "cases.spark:formats",
                            {"addr": addr, "topic": topic, "n": n, "size": size, "warm_topic": topic + "-warm",
                             "warm_n": warm_n, "fmt": fmt, "parts": tuple(parts)},
                            timeout=300 + n / 2000, before=before, subrows=[PARTS[p] for p in parts],
                            profile=fmt in profile))
        noops = tuple(p for p in parts if p in NOOPS)
        if noops:
            for col, client in ((RAW_KOHORT, "kohort"), (RAW_CONFLUENT, "confluent-kafka")):
                jobs.append(Job("spark", row, col, "cases.spark:raw",
                                {"client": client, "addr": addr, "topic": topic, "n": n, "size": size,
                                 "parts": noops}, timeout=200, before=before,
                                subrows=[PARTS[p] for p in noops], profile=client in profile))
        if "stream" not in parts:
            continue
        srow = f"{row} · {STREAM}"
        jobs.append(Job("spark", srow, LEAN, "cases.spark:lean",
                        {"addr": addr, "topic": topic, "n": n, "size": size}, timeout=200, before=before,
                        profile="kohort" in profile))
        for col, client in ((RAW_KOHORT, "kohort"), (RAW_CONFLUENT, "confluent-kafka")):
            jobs.append(Job("spark", srow, col, "cases.consumer:consume",
                            {"client": client, "addr": addr, "topic": topic, "partitions": 1, "n": n,
                             "size": size}, timeout=200, before=before, profile=client in profile))
    return [sec], jobs
