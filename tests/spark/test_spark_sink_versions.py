"""The kohort sink through a streaming query on whichever PySpark runs the suite (make spark-matrix runs it
on 4.0, 4.1, 4.2 and 4.3): PySpark 4.0 hands stream writers Rows, 4.1+ Arrow batches
(`kohort.spark.compat`), and both must write every row with its key, value, partition and headers, in the
default and the exactly-once mode. Against a real kohort broker; data produced with confluent-kafka."""
from __future__ import annotations

import itertools

import confluent_kafka as ck
import pytest
from pyspark.sql import Row
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from kohort.spark import compat
from kohort.spark.wire import Cluster
from tests.helpers.brokers import KohortBroker

_n = itertools.count()


@pytest.fixture(scope="module")
def addr():
    with KohortBroker() as b:
        yield b.bootstrap


def _topic(addr: str, partitions: int) -> str:
    name = f"sv{next(_n)}"
    with Cluster({"bootstrap.servers": addr}) as c:
        c.create_topics({name: partitions})
    return name


def _read_back(spark, addr: str, topic: str, **opts: str) -> list[tuple]:
    df = (spark.read.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", topic)
          .option("includeHeaders", "true").options(**opts).load())
    return sorted(((r.partition, bytes(r.key) if r.key is not None else None, bytes(r.value),
                   [(h.key, bytes(h.value)) for h in (r.headers or [])]) for r in df.collect()), key=repr)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("semantic", ["at_least_once", "exactly_once"])
def test_stream_sink_writes_every_row_with_headers(spark, addr, tmp_path, semantic):
    src, out = _topic(addr, 2), _topic(addr, 3)
    p = ck.Producer({"bootstrap.servers": addr, "linger.ms": 2, "log_level": 0})
    expected = []
    for i in range(300):
        key = None if i % 10 == 0 else b"k%d" % (i % 7)
        headers = [("h", b"%d" % i)] if i % 3 else []
        p.produce(src, b"v%04d" % i, key=key, partition=i % 2, headers=headers or None)
        expected.append((key, b"v%04d" % i, headers))
    assert p.flush(30) == 0
    q = (spark.readStream.format("kohort").option("kafka.bootstrap.servers", addr).option("subscribe", src)
         .option("startingOffsets", "earliest").option("includeHeaders", "true").option("maxOffsetsPerTrigger", "120")
         .load()
         .selectExpr("key", "value", "headers", "cast(substring(cast(value as string), 2, 4) as int) % 3 as partition")
         .writeStream.format("kohort").option("kafka.bootstrap.servers", addr).option("topic", out)
         .option("kohort.sink.semantic", semantic)
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert q.awaitTermination(120), "the streaming query did not finish"
    assert q.exception() is None
    # several micro-batches where Spark passes read limits to Python sources (4.2+), else one
    assert len(q.recentProgress) >= (3 if compat.READ_LIMITS_FROM_SPARK else 1)
    got = _read_back(spark, addr, out, **({"kafka.isolation.level": "read_committed"}
                                          if semantic == "exactly_once" else {}))
    want = sorted(((int(v[1:]) % 3, k, v, h) for k, v, h in expected), key=repr)   # the query's partition column
    assert got == want


def test_rows_become_arrow_batches_of_the_spark_types():
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())]))),
    ])
    rows = [Row(key=None if i == 3 else f"k{i}", value=bytearray(b"v%d" % i), partition=i % 2,
                headers=[Row(key="h", value=bytearray(b"x"))] if i % 2 else None) for i in range(7)]
    batches = list(compat.arrow_batches_from_rows(iter(rows), schema, rows_per_batch=3))
    assert [b.num_rows for b in batches] == [3, 3, 1]
    assert str(batches[0].schema.field("value").type) == "binary"
    assert str(batches[0].schema.field("partition").type) == "int32"
    flat = [r for b in batches for r in b.to_pylist()]
    assert flat[3]["key"] is None and flat[1]["value"] == b"v1"
    assert flat[1]["headers"] == [{"key": "h", "value": b"x"}] and flat[2]["headers"] is None
    assert list(compat.arrow_batches_from_rows(iter([]), schema)) == []


def test_compat_matches_the_running_pyspark():
    import pyspark
    major_minor = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
    assert compat.PYSPARK_VERSION == major_minor
    assert compat.READ_LIMITS_FROM_SPARK == (major_minor >= (4, 2))
    assert compat.STREAM_WRITER_TAKES_ARROW == (major_minor >= (4, 1))
    assert compat.ReadMaxRows(5) == compat.ReadMaxRows(5) != compat.ReadMaxRows(6)
