"""The `kohort` sink: DataFrame rows to Kafka records through kohort's idempotent producer.

Column contract (spark-sql-kafka's): `value` (string or binary) required; `key` (string or binary),
`partition` (int; null = the producer's partitioner: murmur2 of the key, sticky for null keys),
`headers` (array<struct<key:string,value:binary>>) optional; `topic` (string) required unless the
`topic` option is set, which overrides the column. Writers receive Arrow batches
(`DataSourceArrowWriter` / `DataSourceStreamArrowWriter`) and hand their columns to
`Producer.produce_batch` (one call per Arrow batch and topic; records go as produce() per row would
send them); PySpark 4.0 hands a streaming writer Rows, which `kohort.spark.compat` gathers into Arrow
batches first. The producer takes batch.size=1000000 and linger.ms=5 (librdkafka's defaults) unless
`kafka.batch.size` / `kafka.linger.ms` say otherwise. Each task flushes its producer before it reports
success, so a finished batch is acknowledged by the brokers (acks=all). Like every Kafka sink
this is at-least-once across task retries; the idempotent producer removes duplicates of a retried
send within one task.

`kohort.sink.semantic=exactly_once` (streaming queries; KIP-98 transactions; read the output with
isolation.level=read_committed): each write task of micro-batch B of query Q, Spark partition P,
  1. uses transactional.id `<prefix>Q-P` (`kohort.sink.transactionalIdPrefix`, default "kohort-sink-"):
     the same for every attempt and every replay of that task, so init_transactions() fences a zombie
     attempt still running (its writes can no longer commit) and aborts its open transaction;
  2. reads the marker of (Q, P): the offset committed by consumer group `<prefix>Q-P` on partition 0 of
     the output topic (read as stable, so a transaction still completing is waited for), holding the
     next batch id this task has to write; if it is past B, batch B was already written and committed
     (a replay after the driver died between the tasks' commits and Spark's commit log): nothing is
     written again;
  3. otherwise writes its rows and the marker B+1 (send_offsets_to_transaction) in one transaction and
     commits it. Rows and marker become visible together, or not at all.
Query id (`sql.streaming.queryId`, kept in the checkpoint) and batch id (`streaming.sql.batchId`) come
from the task's local properties. It relies on Spark replaying a batch with the same rows in the same
partitions (true for a deterministic query over a replayable source such as Kafka). The markers are
ordinary committed offsets, so the groups `<prefix>Q-P` show up in group listings.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from kohort.spark.compat import STREAM_WRITER_TAKES_ARROW, StreamWriterBase, arrow_batches_from_rows

from kohort.errors import ConfigError, KohortError
from kohort.spark.options import SinkOptions

_ALLOWED = {"key", "value", "topic", "partition", "headers"}
# the sink's producer defaults where the options do not set them: a bulk writer wants librdkafka's
# batch size (1,000,000 bytes; with Java's 16 KiB the broker's per-request cost is the limit)
PRODUCER_DEFAULTS = {"batch.size": 1_000_000, "linger.ms": 5}


def producer_config(opts: SinkOptions) -> dict:
    """The sink producer's configuration: PRODUCER_DEFAULTS under the `kafka.*` options given."""
    return {**PRODUCER_DEFAULTS, **opts.client_config}


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


def _headers(col):
    """The headers column as produce_batch's per-record lists of (key, value bytes), or None if empty."""
    if col is None or col.null_count == len(col):
        return None
    return [[(h["key"], _as_bytes(h["value"])) for h in hs] if hs else None for hs in col.to_pylist()]


def _by_topic(opts: SinkOptions, rb, first_row: int):
    """[(topic, row indices or None for all rows)] of an Arrow batch, topics in first-seen order."""
    if opts.topic:
        return [(opts.topic, None)]
    topics = rb.column(rb.schema.names.index("topic")).to_pylist()
    for i, t in enumerate(topics):
        if not t:
            raise KohortError(f"row {first_row + i} has a null topic and no 'topic' option is set")
    if topics.count(topics[0]) == len(topics):
        return [(topics[0], None)]
    groups: dict = {}
    for i, t in enumerate(topics):
        groups.setdefault(t, []).append(i)
    return list(groups.items())


def write_batches(opts: SinkOptions, batches, producer=None) -> int:
    """Produce every row of an iterator of pyarrow.RecordBatch (Producer.produce_batch per batch and
    topic, rows of a topic in order); returns the number of records. With `producer` (a transactional
    one, in a transaction) the caller owns it: it is flushed, not closed."""
    import pyarrow as pa

    from kohort.client.producer import Producer
    own = producer is None
    if own:
        producer = Producer(producer_config(opts))
    n = 0
    pending = []                              # (first row, BatchDeliveryFuture, row indices or None)
    try:
        for rb in batches:
            if not rb.num_rows:
                continue
            names = rb.schema.names

            def col(name, rb=rb, names=names):
                c = rb.column(names.index(name)) if name in names else None
                return None if c is None or c.null_count == len(c) else c
            values, keys, parts = col("value"), col("key"), col("partition")
            headers = _headers(col("headers"))
            if values is None:               # every value null: produce_batch takes a list
                values = [None] * rb.num_rows
            for topic, rows in _by_topic(opts, rb, n):
                if rows is None:
                    fut = producer.produce_batch(topic, values, keys, parts, None, headers)
                else:
                    idx = pa.array(rows, pa.int64())

                    def take(c, idx=idx, rows=rows):
                        if c is None:
                            return None
                        return c.take(idx) if not isinstance(c, list) else [c[i] for i in rows]
                    fut = producer.produce_batch(topic, take(values), take(keys), take(parts), None,
                                                 take(headers))
                pending.append((n, fut, rows))
            n += rb.num_rows
            done = [x[1].done() for x in pending]
            _raise_failed([x for x, d in zip(pending, done) if d])      # fail fast, without waiting
            pending = [x for x, d in zip(pending, done) if not d]
        producer.flush()
        _raise_failed(pending)
    finally:
        if own:
            producer.close()
    return n


# Spark's local properties of a micro-batch's tasks (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY)
QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"
MARKER_METADATA = "kohort exactly-once sink: next batch id"


def task_identity():
    """(query id, batch id, partition id) of the running micro-batch write task."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    qid = ctx.getLocalProperty(QUERY_ID_KEY) if ctx is not None else None
    batch = ctx.getLocalProperty(BATCH_ID_KEY) if ctx is not None else None
    if qid is None or batch is None:
        raise KohortError("kohort.sink.semantic=exactly_once needs a micro-batch streaming query: this task "
                          f"has no {QUERY_ID_KEY}/{BATCH_ID_KEY} (continuous processing is not supported)")
    return qid, int(batch), ctx.partitionId()


def write_exactly_once(opts: SinkOptions, batches, identity=None) -> int:
    """One transaction per (query, batch, partition) task; see the module docstring. Returns the number
    of records written (0 when the batch had already been written by this task before)."""
    from kohort.client.consumer.consumer import Consumer
    from kohort.client.producer import Producer
    from kohort.errors import AbortableTransactionError
    from kohort.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
    qid, batch, part = identity or task_identity()
    it = iter(batches)
    first = None
    for rb in it:                          # the first non-empty Arrow batch names the marker's topic
        if rb.num_rows:
            first = rb
            break
    if first is None:
        return 0                           # no rows: nothing to write, nothing to mark
    topic = opts.topic
    if topic is None:
        topic = first.column(first.schema.names.index("topic"))[0].as_py()
        if not topic:
            raise KohortError("row 0 has a null topic and no 'topic' option is set")
    name = f"{opts.transactional_id_prefix}{qid}-{part}"
    marker = TopicPartition(topic, 0)
    cfg = producer_config(opts)
    cfg["transactional.id"] = name
    producer = Producer(cfg)
    try:
        producer.init_transactions()       # fences earlier attempts of this task, aborts their transaction
        reader = Consumer({"bootstrap.servers": cfg["bootstrap.servers"], "group.id": name,
                           "enable.auto.commit": False,
                           **{k: v for k, v in cfg.items() if k.startswith(("security.", "sasl.", "ssl."))}})
        try:
            done = reader.committed([marker]).get(marker)
        finally:
            reader.close(autocommit=False)
        if done is not None and done.offset > batch:
            return 0                       # batch already written and committed by this task: skip
        producer.begin_transaction()
        try:
            n = write_batches(opts, _chain(first, it), producer)
            producer.send_offsets_to_transaction({marker: OffsetAndMetadata(batch + 1, MARKER_METADATA)},
                                                 ConsumerGroupMetadata(name))
            producer.commit_transaction()
        except AbortableTransactionError:
            producer.abort_transaction()
            raise                          # the task fails; Spark's retry starts a new transaction
        return n
    finally:
        producer.close()


def _chain(first, rest):
    yield first
    yield from rest


def _raise_failed(pending) -> None:
    """Raise the first failed row of produce_batch futures (as KohortError, its cause chained); waits for
    each to resolve (the caller has flushed, or passes resolved ones)."""
    for first, fut, rows in pending:
        failed = fut.failures()
        if failed:
            i = min(failed)
            err = failed[i]
            row = first + (i if rows is None else rows[i])
            raise KohortError(f"producing to Kafka failed (row {row}, {len(failed)} failed in its batch): "
                              f"{err}") from err


class KohortBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema):
        check_columns(schema, opts)
        if opts.semantic == "exactly_once":
            raise ConfigError("kohort.sink.semantic=exactly_once is for streaming queries (writeStream); a batch "
                              "write has no batch id to make its replay detectable")
        self.opts = opts

    def write(self, iterator):
        return ProducedMessage(write_batches(self.opts, iterator))


class KohortStreamWriter(StreamWriterBase):
    def __init__(self, opts: SinkOptions, schema):
        check_columns(schema, opts)
        self.opts = opts
        self.schema = schema

    def write(self, iterator):
        if not STREAM_WRITER_TAKES_ARROW:
            iterator = arrow_batches_from_rows(iterator, self.schema)
        if self.opts.semantic == "exactly_once":
            return ProducedMessage(write_exactly_once(self.opts, iterator))
        return ProducedMessage(write_batches(self.opts, iterator))

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass
