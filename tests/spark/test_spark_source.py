"""format("kohort") on a real SparkSession (local[2]) against real brokers: kohort's own broker and Tansu.

One SparkSession for the module (Spark start-up is the expensive part). Test data is produced with
confluent-kafka (librdkafka), a peer nobody here wrote. Fast tests: a batch read split by minPartitions
/ maxRecordsPerPartition returns exactly the records of its offset range; option errors surface through
Spark; the sink writes what a batch read gives back; a streaming query with kafka.group.id commits each
finished batch so the group's offsets follow the query up to the end offsets. Slow: the pipeline's
driver process group is SIGKILLed mid-run and restarted from its checkpoint, and the Parquet output
holds every input record exactly once (by value).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import confluent_kafka as ck
import pytest
from pyspark.errors import AnalysisException

from kohort.spark.wire import Cluster
from tests.helpers.brokers import KohortBroker
from tests.conftest import start_tansu


@pytest.fixture(scope="module", params=["kohort", "kafka", pytest.param("tansu", marks=pytest.mark.slow)])
def broker(request):
    """bootstrap address of a running broker of each kind (module-scoped: started once): kohort broker,
    Apache Kafka 4.x (the session's `kafka1`); the Tansu runs are in the slow suite to keep the default
    one short."""
    if request.param == "kafka":
        yield "kafka", request.getfixturevalue("kafka1").bootstrap
    elif request.param == "kohort":
        with KohortBroker() as b:
            yield "kohort", b.bootstrap
    else:
        proc, addr = start_tansu()
        yield "tansu", addr
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


_seq = iter(range(1_000_000))


def new_topic(addr: str, partitions: int) -> str:
    name = f"t{next(_seq)}-{os.getpid()}"
    with Cluster({"bootstrap.servers": addr}) as c:
        c.create_topics({name: partitions})
    return name


def produce(addr: str, topic: str, values_by_partition: dict, batch: int = 37) -> None:
    """confluent-kafka produces each partition's values in order, flushing every `batch` records so the
    log holds many record batches."""
    p = ck.Producer({"bootstrap.servers": addr, "linger.ms": 5, "enable.idempotence": True,
                     "log_level": 0})
    n = 0
    for part, values in values_by_partition.items():
        for v in values:
            p.produce(topic, v, key=b"k", partition=part, headers=[("seq", str(n).encode())])
            n += 1
            if n % batch == 0:
                p.flush(30)
    assert p.flush(30) == 0


def test_register_ships_nothing_when_the_workers_run_this_interpreter(spark):
    # the fixture's workers run sys.executable (PYSPARK_PYTHON): they import the installed kohort,
    # compiled record decoder included, so no zip shadows it (test_spark_cluster.py: the other case)
    assert not [n for n in spark.sparkContext._python_includes if n.startswith("kohort-")]


# -- batch ----------------------------------------------------------------------------------------------
def test_batch_read_split_by_min_partitions_returns_exactly_the_range(spark, broker):
    kind, addr = broker
    topic = new_topic(addr, 2)
    values = {0: [b"p0-%04d" % i for i in range(300)], 1: [b"p1-%04d" % i for i in range(90)]}
    produce(addr, topic, values)
    df = (spark.read.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", topic)
          .option("startingOffsets", json.dumps({topic: {"0": 25, "1": -2}}))
          .option("endingOffsets", json.dumps({topic: {"0": 275, "1": 80}}))
          .option("minPartitions", "6").option("includeHeaders", "true").load())
    # sizes 250 and 80 of 330: shares round(4.5)=5 and round(1.45)=1 -> 5 pieces of p0 + p1 whole
    assert df.rdd.getNumPartitions() == 6
    rows = df.select("partition", "offset", "value", "topic", "headers").collect()
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    want = sorted([(0, o, values[0][o]) for o in range(25, 275)] + [(1, o, values[1][o]) for o in range(0, 80)])
    assert got == want
    assert {r.topic for r in rows} == {topic}
    assert all(r.headers[0]["key"] == "seq" for r in rows)

    split = (spark.read.format("kohort").option("kafka.bootstrap.servers", addr)
             .option("assign", json.dumps({topic: [0]})).option("maxRecordsPerPartition", "64").load())
    assert split.rdd.getNumPartitions() == 5                      # ceil(300 / 64)
    assert sorted(bytes(r.value) for r in split.select("value").collect()) == values[0]


def test_one_kafka_partition_is_split_over_the_default_parallelism(spark, broker):
    # neither minPartitions nor maxRecordsPerPartition: a single Kafka partition big enough is read
    # by as many Spark tasks as local[2] has cores; each task's rows come in offset order and the
    # tasks tile the range exactly once
    from pyspark.sql import functions as F
    from kohort.spark.planning import MIN_OFFSETS_PER_SPLIT
    kind, addr = broker
    topic = new_topic(addr, 1)
    n = 2 * MIN_OFFSETS_PER_SPLIT + 7
    p = ck.Producer({"bootstrap.servers": addr, "linger.ms": 5, "log_level": 0,
                     "queue.buffering.max.messages": 1_000_000})
    for i in range(n):
        p.produce(topic, b"%07d" % i, partition=0)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    df = (spark.read.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", topic)
          .load())
    assert spark.sparkContext.defaultParallelism == 2 and df.rdd.getNumPartitions() == 2
    rows = (df.select("offset", "value", F.spark_partition_id().alias("task"),
                      F.monotonically_increasing_id().alias("mid"))
            .withColumn("index", F.col("mid") - F.shiftleft(F.col("task").cast("long"), 33)))
    stats = {r.task: (r.lo, r.hi, r.rows) for r in rows.groupBy("task").agg(
        F.min("offset").alias("lo"), F.max("offset").alias("hi"), F.count(F.lit(1)).alias("rows")).collect()}
    tiles = sorted(stats.values())
    assert tiles[0][0] == 0 and tiles[-1][1] == n - 1
    assert all(a[1] + 1 == b[0] for a, b in zip(tiles, tiles[1:]))
    assert sum(t[2] for t in tiles) == n and all(hi - lo + 1 == k for lo, hi, k in tiles)
    lows = {task: lo for task, (lo, _, _) in stats.items()}
    misplaced = (rows.withColumn("lo", F.create_map(*[x for kv in lows.items() for x in (F.lit(kv[0]), F.lit(kv[1]))])
                                 [F.col("task")])
                 .where((F.col("offset") != F.col("lo") + F.col("index"))
                        | (F.col("value").cast("string") != F.lpad(F.col("offset").cast("string"), 7, "0")))
                 .count())
    assert misplaced == 0


def test_option_errors_surface_through_spark(spark, broker):
    _, addr = broker
    with pytest.raises(Exception, match="did you mean 'startingOffsets'"):
        (spark.read.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", "x")
         .option("startingOffset", "earliest").load().collect())
    with pytest.raises(Exception, match="exactly one of 'assign', 'subscribe' or 'subscribePattern'"):
        spark.read.format("kohort").option("kafka.bootstrap.servers", addr).load().collect()


def test_option_errors_of_streams_at_load_and_not_as_unbound_local_error(spark, broker, tmp_path):
    _, addr = broker
    def stream():
        return spark.readStream.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", "x")
    with pytest.raises(AnalysisException, match="'maxOffsetsPerTrigger' must be a positive integer"):
        stream().option("maxOffsetsPerTrigger", "many").load()               # load(), not start()
    with pytest.raises(AnalysisException, match="'groupIdPrefix' is not supported"):
        stream().option("groupIdPrefix", "app").load()
    # a batch-only option on a stream: load() cannot tell the query type; the query fails at its
    # first call with kohort's message (pyspark 4.2 turned an error of streamReader() into
    # "UnboundLocalError: cannot access local variable 'reader'")
    q = (stream().option("endingOffsets", "latest").load().writeStream.format("memory").queryName("bad_ending")
         .option("checkpointLocation", str(tmp_path / "cp")).start())
    try:
        with pytest.raises(Exception) as ei:
            q.awaitTermination(60)
    finally:
        q.stop()
    assert "are for batch queries only" in str(ei.value) and "UnboundLocalError" not in str(ei.value)


def test_sink_writes_what_a_read_returns(spark, broker):
    kind, addr = broker
    topic = new_topic(addr, 2)
    from pyspark.sql import functions as F
    src = spark.range(0, 500).select(F.format_string("key-%d", F.col("id") % 7).alias("key"),
                                     F.format_string("val-%05d", "id").alias("value"),
                                     (F.col("id") % 2).cast("int").alias("partition"))
    # Python data sources accept the append (or overwrite) save mode only
    src.write.format("kohort").mode("append").option("kafka.bootstrap.servers", addr).option("topic", topic).save()
    back = (spark.read.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", topic)
            .load().selectExpr("cast(value as string) v", "cast(key as string) k", "partition").collect())
    assert sorted(r.v for r in back) == [f"val-{i:05d}" for i in range(500)]
    assert all(int(r.v[4:]) % 2 == r.partition and r.k == f"key-{int(r.v[4:]) % 7}" for r in back)


# -- streaming + group commits ---------------------------------------------------------------------------------
def test_group_offsets_follow_the_query_to_the_end(spark, broker):
    kind, addr = broker
    topic = new_topic(addr, 2)
    values = {0: [b"a-%04d" % i for i in range(240)], 1: [b"b-%04d" % i for i in range(120)]}
    produce(addr, topic, values)
    group = f"g-{topic}"
    out = tempfile.mkdtemp(prefix="kohort-spark-")
    q = (spark.readStream.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", topic)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "90")
         .option("kafka.group.id", group).load()
         .writeStream.format("parquet").option("path", out + "/data")
         .option("checkpointLocation", out + "/cp").trigger(processingTime="200 milliseconds").start())
    seen = []
    tps = [(topic, 0), (topic, 1)]
    try:
        with Cluster({"bootstrap.servers": addr}) as c:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                committed = c.committed_offsets(group, tps)
                if not seen or committed != seen[-1]:
                    seen.append(committed)
                if committed == {(topic, 0): 240, (topic, 1): 120}:
                    break
                time.sleep(0.2)
    finally:
        q.stop()
    assert seen[-1] == {(topic, 0): 240, (topic, 1): 120}, seen
    # the commits moved forward with the batches: several steps, never backwards, each admitting <= 90
    steps = [s for s in seen if s]
    from kohort.spark.compat import READ_LIMITS_FROM_SPARK
    assert len(steps) >= (3 if READ_LIMITS_FROM_SPARK else 1)   # PySpark 4.0/4.1: no admission control
    for a, b in zip(steps, steps[1:]):
        assert all(b.get(tp, 0) >= a.get(tp, 0) for tp in tps)
    assert sorted(bytes(r.value) for r in spark.read.parquet(out + "/data").select("value").collect()) == \
        sorted(values[0] + values[1])

    # a new query with startingOffsets=group starts where the group is: nothing left to read
    p2 = {0: [b"a-new-%d" % i for i in range(5)]}
    produce(addr, topic, p2)
    got = (spark.readStream.format("kohort").option("kafka.bootstrap.servers", addr)
           .option("subscribe", topic).option("startingOffsets", "group").option("kafka.group.id", group)
           .load().writeStream.format("memory").queryName("from_group").trigger(availableNow=True).start())
    got.awaitTermination(60)
    assert sorted(bytes(r.value) for r in spark.sql("select value from from_group").collect()) == p2[0]


# -- exactly once across driver kills (slow) -------------------------------------------------------------------
PIPELINE_TOML = """
[source]
bootstrap_servers = "{addr}"
topic = "{topic}"
starting_offsets = "earliest"
group_id = "eo-{topic}"
max_offsets_per_trigger = 400
[aggregate]
mode = "raw"
[sink]
path = "{out}/data"
checkpoint = "{out}/cp"
trigger = "500 milliseconds"
[spark]
master = "local[2]"
"""


def _start_pipeline(config: str, log):
    return subprocess.Popen([sys.executable, "-m", "kohort.cli.main", "pipeline", "--config", config],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable})


def _committed_batches(out: str) -> int:
    d = os.path.join(out, "cp", "parquet", "commits")
    return len([f for f in os.listdir(d) if f.isdigit()]) if os.path.isdir(d) else 0


@pytest.mark.slow
def test_sigkilled_pipeline_restarts_exactly_once(spark, broker):
    kind, addr = broker
    topic = new_topic(addr, 3)
    out = tempfile.mkdtemp(prefix="kohort-eo-")
    config = os.path.join(out, "pipeline.toml")
    with open(config, "w") as fh:
        fh.write(PIPELINE_TOML.format(addr=addr, topic=topic, out=out))
    total = 6000
    values = [b"rec-%06d" % i for i in range(total)]
    stop_feed = threading.Event()

    def feed():          # keeps producing while the pipeline is killed and restarted
        p = ck.Producer({"bootstrap.servers": addr, "linger.ms": 5, "log_level": 0})
        for i, v in enumerate(values):
            p.produce(topic, v, partition=i % 3)
            if i % 200 == 199:
                p.flush(30)
                time.sleep(0.15)
            if stop_feed.is_set():
                break
        p.flush(30)
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    log = open(os.path.join(out, "pipeline.log"), "ab")
    kills = 0
    try:
        for round_ in range(3):
            proc = _start_pipeline(config, log)
            try:
                if round_ < 2:
                    # kill the whole driver (Python, its JVM, its workers) mid-run, after a few batches
                    target = _committed_batches(out) + 2
                    deadline = time.monotonic() + 120
                    while _committed_batches(out) < target and time.monotonic() < deadline:
                        assert proc.poll() is None, open(os.path.join(out, "pipeline.log")).read()[-3000:]
                        time.sleep(0.2)
                    time.sleep(0.3)          # land somewhere inside the next batch
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
                    kills += 1
                else:
                    feeder.join(120)
                    with Cluster({"bootstrap.servers": addr}) as c:
                        ends = {tp: b[1] for tp, b in c.offset_bounds([(topic, p) for p in range(3)]).items()}
                    assert sum(ends.values()) == total
                    deadline = time.monotonic() + 180
                    while time.monotonic() < deadline:
                        n = spark.read.parquet(out + "/data").count() if _committed_batches(out) else 0
                        if n >= total:
                            break
                        assert proc.poll() is None, open(os.path.join(out, "pipeline.log")).read()[-3000:]
                        time.sleep(1)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait(10)
    finally:
        stop_feed.set()
        log.close()
    assert kills == 2
    df = spark.read.parquet(out + "/data")
    got = [bytes(r.value) for r in df.select("value").collect()]
    assert len(got) == total, f"{len(got)} rows for {total} records"
    assert sorted(got) == values                      # every record exactly once, by value


# -- the ready pipeline (windowed aggregates with a watermark) ------------------------------------------------
@pytest.mark.slow
def test_pipeline_windows_per_key_to_parquet_and_results_topic(spark, broker):
    kind, addr = broker
    from kohort.spark.pipeline import PipelineConfig, start_queries
    topic, results = new_topic(addr, 2), new_topic(addr, 1)
    events = []
    for sec in range(30):                               # 3 windows of 10 s, two users
        for user, amount in (("ada", 1.0), ("ken", 2.5)):
            events.append({"user": user, "amount": amount, "ts": f"2026-01-01T00:00:{sec:02d}Z"})
    events.append({"user": "ada", "amount": 0.0, "ts": "2026-01-01T00:01:40Z"})   # moves the watermark
    events.append({"user": "bad json"})                                             # ts null: dropped
    produce(addr, topic, {0: [json.dumps(e).encode() for e in events[:40]],
                          1: [json.dumps(e).encode() for e in events[40:]]})
    out = tempfile.mkdtemp(prefix="kohort-pipe-")
    cfg = PipelineConfig(bootstrap_servers=addr, topic=topic,
                         fields={"user": "string", "amount": "double", "ts": "timestamp"},
                         event_time="ts", key="user", window="10 seconds", watermark="5 seconds",
                         metrics=["count", "sum(amount)"], group_id=None, path=out + "/agg",
                         checkpoint=out + "/cp", trigger="500 milliseconds", results_topic=results)
    cfg.validate()
    qs = start_queries(spark, cfg)
    want = {(f"2026-01-01 00:00:{w}0", u): (10, 10 * a) for w in range(3) for u, a in (("ada", 1.0), ("ken", 2.5))}
    got = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(got) < len(want):
            time.sleep(1)
            for q in qs:
                assert q.isActive, f"{q.name} stopped: {q.exception()}"
            try:                                        # no file until the first window closes
                got = {(r.window_start.strftime("%Y-%m-%d %H:%M:%S"), r.user): (r["count"], r.sum_amount)
                       for r in spark.read.parquet(out + "/agg").collect()}
            except AnalysisException:                   # no Parquet file (or schema) yet
                continue
        time.sleep(2)
    finally:
        for q in qs:
            q.stop()
    assert got == want
    msgs = (spark.read.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", results)
            .load().selectExpr("cast(key as string) k", "cast(value as string) v").collect())
    rows = {(json.loads(m.v)["window_start"][:19].replace("T", " "), m.k): (json.loads(m.v)["count"],
                                                                           json.loads(m.v)["sum_amount"])
            for m in msgs}
    assert rows == want


def test_pipeline_counts_malformed_events_and_writes_them_to_the_dead_letter_topic(spark, broker):
    kind, addr = broker
    from kohort.spark.pipeline import PipelineConfig, start_queries, watch
    topic, dlq = new_topic(addr, 2), new_topic(addr, 1)
    good = [json.dumps({"user": u, "amount": 1.0, "ts": f"2026-01-01T00:00:{s:02d}Z"}).encode()
            for s in range(10) for u in ("ada", "ken")]
    bad = [b"garbage", b'{"user": "ada", "amount": "lots", "ts": "2026-01-01T00:00:01Z"}',
           b'{"user": "ken", "amount": 2.0}', b"[1, 2]"]
    produce(addr, topic, {0: good[:10] + bad[:2], 1: good[10:] + bad[2:]})
    out = tempfile.mkdtemp(prefix="kohort-dlq-")
    cfg = PipelineConfig(bootstrap_servers=addr, topic=topic,
                         fields={"user": "string", "amount": "double", "ts": "timestamp"},
                         event_time="ts", key="user", window="10 seconds", watermark="5 seconds",
                         metrics=["count", "sum(amount)"], group_id=None, path=out + "/agg",
                         checkpoint=out + "/cp", trigger="500 milliseconds", dead_letter_topic=dlq)
    cfg.validate()
    qs = start_queries(spark, cfg)
    lines = []
    try:
        for q in qs:
            q.processAllAvailable()
        totals = watch(qs, duration_s=0, out=lines.append)
    finally:
        for q in qs:
            q.stop()
    assert totals == {"events": len(good) + len(bad), "malformed": len(bad)}
    assert lines and "malformed" in lines[-1]
    rows = (spark.read.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", dlq)
            .option("includeHeaders", "true").load().collect())
    assert sorted(bytes(r.value) for r in rows) == sorted(bad)
    for r in rows:
        h = {x["key"]: bytes(x["value"]).decode() for x in r.headers}
        assert h["kohort.source"].startswith(topic + "-")
        want = "no event time" if bytes(r.value) == bad[2] else "not a JSON object of the declared"
        assert want in h["kohort.error"]
