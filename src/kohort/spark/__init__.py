"""kohort's PySpark data source: `import kohort.spark; kohort.spark.register(spark)` makes
`format("kohort")` available to spark.read, spark.readStream, df.write and df.writeStream, with
spark-sql-kafka's options and schema (see `kohort.spark.options` and `kohort.spark.arrow`).

Modules: options (parsing/validation), planning (pure offset-range planning, admission control,
data-loss classification), arrow (schema, Arrow batches from fetched record batches), wire (the small
blocking client the source uses), source (DataSource, batch/stream readers), sink (writers),
pipeline (the ready JSON-events -> windowed aggregates -> Parquet job).
"""
from __future__ import annotations

FORMAT = "kohort"


def register(spark) -> None:
    """Register the `kohort` format with a SparkSession."""
    from kohort.spark.source import KohortDataSource
    spark.dataSource.register(KohortDataSource)


__all__ = ["FORMAT", "register"]
