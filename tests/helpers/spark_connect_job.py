"""A Spark Connect client (SparkSession.builder.remote("local[2]"): an in-process Connect server, this
process talking to it over gRPC) using format("kohort") for a batch read, a streaming read and the sink
in both its batch and streaming forms. Run by tests/spark/test_spark_connect.py in its own process (one Connect
server per process); prints one JSON line with what it read and wrote.

    python tests/helpers/spark_connect_job.py BOOTSTRAP TOPIC OUT_TOPIC CHECKPOINT_DIR
"""
from __future__ import annotations

import json
import os
import sys


def main(bootstrap: str, topic: str, out_topic: str, checkpoint: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kohort.spark

    spark = (SparkSession.builder.remote("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    result: dict = {"connect": type(spark).__module__}
    try:
        kohort.spark.register(spark)
        src = spark.read.format("kohort").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        rows = src.option("startingOffsets", "earliest").load().selectExpr("cast(value as string) v").collect()
        result["batch_read"] = sorted(r.v for r in rows)

        q = (spark.readStream.format("kohort").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .selectExpr("cast(value as string) v").writeStream.format("memory").queryName("connect_stream")
             .option("checkpointLocation", os.path.join(checkpoint, "read")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        result["stream_read"] = sorted(r.v for r in spark.sql("select v from connect_stream").collect())

        (spark.range(50).selectExpr("cast(id as string) as key", "concat('batch-', id) as value")
         .write.format("kohort").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", out_topic).save())
        q = (spark.readStream.format("kohort").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .selectExpr("key", "concat('stream-', cast(value as string)) as value")
             .writeStream.format("kohort").option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
             .option("checkpointLocation", os.path.join(checkpoint, "write")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        result["stream_exception"] = None if q.exception() is None else str(q.exception())
    finally:
        spark.stop()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
