"""Spark's own Kafka connector (spark-sql-kafka-0-10 at the pinned pyspark's version, from Maven Central
via `make peers`) reading from and writing to kohort broker (issue 11), and format("kohort") giving the
same rows as format("kafka") for the same topic and options."""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
import pytest

from kohort import Consumer
from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import SPARK_LIB
from tests.helpers.peers import create_topic

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def test_connector_version_matches_pyspark():
    import pyspark
    assert "spark-sql-kafka" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""), "run `make peers` first"
    jars = [j.name for j in Path(SPARK_LIB).glob("spark-sql-kafka-0-10_2.13-*.jar")]
    assert jars == [f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar"], \
        f"{jars} in {SPARK_LIB}: run `make peers` after changing the pyspark pin (tests/interop/peers/spark/pom.xml)"


@pytest.fixture(scope="module")
def kb():
    with KohortBroker() as b:
        yield b


def _produce(bs: str, topic: str, n: int, partitions: int) -> None:
    p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5, "log_level": 0})
    for i in range(n):
        p.produce(topic, f"value-{i}".encode(), key=f"k{i % 5}".encode(), partition=i % partitions,
                  headers=[("i", str(i).encode())], timestamp=1_700_000_000_000 + i)
        if i % 97 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def _rows(df, cols):
    return sorted(tuple(bytes(v) if isinstance(v, (bytes, bytearray)) else v for v in r) for r in
                  df.select(*cols).collect())


def test_spark_kafka_batch_read_from_kohort_broker_matches_kohort_format(spark, kb):
    topic = f"sk-{uuid.uuid4().hex[:8]}"
    assert create_topic(kb.bootstrap, topic, 3) == 3
    _produce(kb.bootstrap, topic, 900, 3)
    opts = {"kafka.bootstrap.servers": kb.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "endingOffsets": "latest", "includeHeaders": "true"}
    theirs = spark.read.format("kafka").options(**opts).load()
    ours = spark.read.format("kohort").options(**opts).load()
    assert theirs.columns == ours.columns == COLUMNS + ["headers"]
    a, b = _rows(theirs, COLUMNS), _rows(ours, COLUMNS)
    assert len(a) == 900 and a == b
    ha = sorted((r.offset, r.partition, [(h.key, bytes(h.value)) for h in r.headers]) for r in theirs.collect())
    hb = sorted((r.offset, r.partition, [(h.key, bytes(h.value)) for h in r.headers]) for r in ours.collect())
    assert ha == hb


def test_spark_kafka_stream_from_kohort_broker(spark, kb, tmp_path):
    topic = f"sks-{uuid.uuid4().hex[:8]}"
    assert create_topic(kb.bootstrap, topic, 2) == 2
    _produce(kb.bootstrap, topic, 600, 2)
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kb.bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "250").load())
    q = (df.selectExpr("CAST(value AS STRING) AS v", "partition", "offset").writeStream.format("parquet")
         .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(120)
    finally:
        q.stop()
    got = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.v for r in got) == sorted(f"value-{i}" for i in range(600))
    assert len({(r.partition, r.offset) for r in got}) == 600


def test_spark_kafka_sink_writes_to_kohort_broker(spark, kb):
    topic = f"skw-{uuid.uuid4().hex[:8]}"
    assert create_topic(kb.bootstrap, topic, 2) == 2
    from pyspark.sql import functions as F
    src = spark.range(0, 1000).select(F.format_string("k%d", F.col("id") % 10).alias("key"),
                                      F.format_string("row-%d", F.col("id")).alias("value"))
    (src.write.format("kafka").option("kafka.bootstrap.servers", kb.bootstrap).option("topic", topic).save())
    got = []
    with Consumer({"bootstrap.servers": kb.bootstrap}) as c:
        c.assign([(topic, 0), (topic, 1)])
        c.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(got) < 1000 and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
    assert sorted(r.value for r in got) == sorted(f"row-{i}".encode() for i in range(1000))
    # Spark's sink partitions by key with Kafka's murmur2, as kohort's producer does
    by_key = {}
    for r in got:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(ps) == 1 for ps in by_key.values())
