"""A Spark streaming query for tests/spark/test_spark_eos.py, run as its own process so it can be SIGKILLed:
Kafka topic IN (format "kohort", maxOffsetsPerTrigger 200, Trigger.AvailableNow) -> upper-cased values ->
topic OUT through the kohort sink with kohort.sink.semantic SEMANTIC.

usage: spark_eos_query.py BOOTSTRAP IN OUT CHECKPOINT SEMANTIC PAUSE_DIR PAUSE_S

The sink is kohort's own, wrapped only to widen the window the test aims at: its driver-side commit()
(after every task of the batch has written and committed, before Spark records the batch in its
commit log) first creates PAUSE_DIR/committing-<batch> and then sleeps PAUSE_S seconds.
"""
import os
import sys
import time

from pyspark.sql import SparkSession

import kohort.spark
from kohort.spark.options import parse_sink_options
from kohort.spark.sink import KohortStreamWriter
from kohort.spark.source import KohortDataSource


class PausingWriter(KohortStreamWriter):
    def __init__(self, opts, schema, pause_dir, pause_s):
        super().__init__(opts, schema)
        self.pause_dir, self.pause_s = pause_dir, pause_s

    def commit(self, messages, batchId):
        open(os.path.join(self.pause_dir, f"committing-{batchId}"), "w").close()
        time.sleep(self.pause_s)


class PausingKohort(KohortDataSource):
    @classmethod
    def name(cls):
        return "kohort_pausing"

    def streamWriter(self, schema, overwrite):
        opts = {k: v for k, v in self.options.items()}
        pause_dir = opts.pop("test.pausedir")
        pause_s = float(opts.pop("test.pauses"))
        return PausingWriter(parse_sink_options(opts), schema, pause_dir, pause_s)


def main():
    bootstrap, inp, out, checkpoint, semantic, pause_dir, pause_s = sys.argv[1:8]
    spark = (SparkSession.builder.master("local[2]").appName("kohort-eos-test")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kohort.spark.register(spark)
    spark.dataSource.register(PausingKohort)
    df = (spark.readStream.format("kohort").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", inp).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200")
          .load())
    q = (df.selectExpr("key", "upper(cast(value as string)) as value").writeStream.format("kohort_pausing")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
         .option("kohort.sink.semantic", semantic).option("test.pausedir", pause_dir).option("test.pauses", pause_s)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
