"""What differs between the PySpark releases kohort supports (4.0, 4.1, 4.2, 4.3), in one place.

* Streaming read limits (`pyspark.sql.streaming.datasource`, new in 4.2): `ReadAllAvailable`,
  `ReadMaxRows`, `ReadMinRows` and `SupportsTriggerAvailableNow`. On 4.0/4.1 stand-ins of the same
  names are defined here; Spark never hands them to the reader there, the reader builds them itself.
* `latestOffset`: 4.2 inspects the reader's signature and calls `latestOffset(start, limit)` when the
  method takes parameters, 4.0/4.1 always call `latestOffset()`. The reader declares
  `latestOffset(self, start=None, limit=None)` and treats a call without `start` as the legacy one.
* Streaming Arrow writers (`DataSourceStreamArrowWriter`, new in 4.1): on 4.0 the stream writer is a
  `DataSourceStreamWriter` that receives Rows; `arrow_batches_from_rows` turns them into Arrow
  record batches so the sink's one Arrow path serves both.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyspark
from pyspark.sql.datasource import DataSourceStreamWriter

PYSPARK_VERSION: tuple[int, int] = tuple(int(p) for p in pyspark.__version__.split(".")[:2])  # type: ignore[assignment]

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
    READ_LIMITS_FROM_SPARK = True
except ImportError:                     # PySpark 4.0 / 4.1
    READ_LIMITS_FROM_SPARK = False

    class ReadLimit:                    # type: ignore[no-redef]
        """A read limit as 4.2's `pyspark.sql.streaming.datasource` names it."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclass
    class ReadMinRows(ReadLimit):       # type: ignore[no-redef]
        min_rows: int

    @dataclass
    class ReadMaxRows(ReadLimit):       # type: ignore[no-redef]
        max_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """4.0/4.1 wrap a source without it for Trigger.AvailableNow themselves (a fixed end offset
        taken when the query starts); the method is then never called."""

        def prepareForTriggerAvailableNow(self) -> None:
            pass

try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase
    STREAM_WRITER_TAKES_ARROW = True
except ImportError:                     # PySpark 4.0: stream writers receive Rows
    StreamWriterBase = DataSourceStreamWriter       # type: ignore[misc,assignment]
    STREAM_WRITER_TAKES_ARROW = False

ROWS_PER_BATCH = 16384


def arrow_batches_from_rows(rows: Iterable[Any], schema: Any,
                            rows_per_batch: int = ROWS_PER_BATCH) -> Iterator[Any]:
    """Spark Rows of `schema` (a StructType) as pyarrow RecordBatches of at most `rows_per_batch` rows,
    with the Arrow types Spark itself would give them (string, binary, int32, list<struct>)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    arrow_schema = to_arrow_schema(schema)
    names = [f.name for f in schema.fields]
    nested = {f.name for f in schema.fields if f.dataType.typeName() == "array"}
    chunk: list[Any] = []

    def batch() -> Any:
        cols: dict[str, list[Any]] = {n: [] for n in names}
        for row in chunk:
            for n in names:
                v = row[n]
                if n in nested and v is not None:
                    v = [h.asDict() if hasattr(h, "asDict") else h for h in v]
                elif isinstance(v, bytearray):
                    v = bytes(v)
                cols[n].append(v)
        return pa.RecordBatch.from_pydict(cols, schema=arrow_schema)

    for row in rows:
        chunk.append(row)
        if len(chunk) >= rows_per_batch:
            yield batch()
            chunk = []
    if chunk:
        yield batch()


__all__ = ["PYSPARK_VERSION", "READ_LIMITS_FROM_SPARK", "ROWS_PER_BATCH", "ReadAllAvailable",
           "ReadLimit", "ReadMaxRows", "ReadMinRows", "STREAM_WRITER_TAKES_ARROW", "StreamWriterBase",
           "SupportsTriggerAvailableNow", "arrow_batches_from_rows"]
