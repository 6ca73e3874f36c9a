"""The `kohort` sink: DataFrame rows to Kafka records through kohort's idempotent producer.

Column contract (spark-sql-kafka's): `value` (string or binary) required; `key` (string or binary),
`partition` (int; null = the producer's partitioner: murmur2 of the key, sticky for null keys),
`headers` (array<struct<key:string,value:binary>>) optional; `topic` (string) required unless the
`topic` option is set, which overrides the column. Writers receive Arrow batches
(`DataSourceArrowWriter` / `DataSourceStreamArrowWriter`), each task flushes its producer before it
reports success, so a finished batch is acknowledged by the brokers (acks=all). Like every Kafka sink
this is at-least-once across task retries; the idempotent producer removes duplicates of a retried
send within one task.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from kohort.errors import ConfigError, KohortError
from kohort.spark.options import SinkOptions

_ALLOWED = {"key", "value", "topic", "partition", "headers"}


@dataclass
class ProducedMessage(WriterCommitMessage):
    records: int


def check_columns(schema, opts: SinkOptions) -> None:
    """Validate the DataFrame's columns against the sink's contract (on the driver, before any task)."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ConfigError("the kohort sink needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise ConfigError(f"column '{name}' must be string or binary, got {fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise ConfigError(f"column 'topic' must be string, got {fields['topic'].simpleString()}")
    if opts.topic is None and "topic" not in fields:
        raise ConfigError("no topic: set the 'topic' option or give the DataFrame a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ConfigError(f"column 'partition' must be int, got {fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"])
        if not ok:
            raise ConfigError("column 'headers' must be array<struct<key:string,value:binary>>, got "
                              + h.simpleString())
    extra = sorted(set(fields) - _ALLOWED)
    if extra:
        raise ConfigError(f"the kohort sink does not know column(s) {', '.join(extra)}; "
                          "select key, value, topic, partition, headers")


def _as_bytes(v):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


def write_batches(opts: SinkOptions, batches) -> int:
    """Produce every row of an iterator of pyarrow.RecordBatch; returns the number of records."""
    from kohort.client.producer import Producer
    cfg = dict(opts.client_config)
    n = 0
    producer = Producer(cfg)
    failures = []
    try:
        for rb in batches:
            cols = {name: rb.column(i).to_pylist() for i, name in enumerate(rb.schema.names)}
            values = cols["value"]
            keys = cols.get("key")
            topics = cols.get("topic")
            parts = cols.get("partition")
            headers = cols.get("headers")
            for i in range(rb.num_rows):
                topic = opts.topic or (topics[i] if topics else None)
                if not topic:
                    raise KohortError(f"row {n + i} has a null topic and no 'topic' option is set")
                hs = None
                if headers and headers[i]:
                    hs = [(h["key"], _as_bytes(h["value"])) for h in headers[i]]
                fut = producer.produce(topic, _as_bytes(values[i]),
                                       key=_as_bytes(keys[i]) if keys else None, headers=hs,
                                       partition=parts[i] if parts else None)
                failures.append(fut)
            n += rb.num_rows
            if len(failures) > 50000:
                producer.flush()
                _raise_first(failures)
                failures = []
        producer.flush()
        _raise_first(failures)
    finally:
        producer.close()
    return n


def _raise_first(futures) -> None:
    seen = set()
    for f in futures:
        b = getattr(f, "batch", f)          # records of one producer batch share its outcome
        if id(b) in seen:
            continue
        seen.add(id(b))
        err = f.exception()
        if err is not None:
            raise KohortError(f"producing to Kafka failed: {err}") from err


class KohortBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema):
        check_columns(schema, opts)
        self.opts = opts

    def write(self, iterator):
        return ProducedMessage(write_batches(self.opts, iterator))


class KohortStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema):
        check_columns(schema, opts)
        self.opts = opts

    def write(self, iterator):
        return ProducedMessage(write_batches(self.opts, iterator))

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass
