"""The source's output schema and Arrow record batches built straight from fetched Kafka record batches.

`spark_schema(include_headers)` is spark-sql-kafka's schema (key, value, topic, partition, offset,
timestamp, timestampType[, headers]); `arrow_schema` is its Arrow twin. `ColumnBuilder` turns fetch
payloads into those columns, keeping records in [from_offset, until_offset):

* read_uncommitted (the default): `kohort.protocol.records.decode_columns` (C when built) gives the
  Arrow buffers of offsets, timestamps, keys and values directly; no per-record Python objects.
* read_committed: a Python walk batch by batch that also drops aborted transactional data with
  `records.AbortedTransactions` (KIP-98; the consumer's fetcher uses the same filter).

`next_fetch_offset(payload)` is the offset after the last complete batch (from batch headers only).
"""
from __future__ import annotations

import struct
import sys

import pyarrow as pa

from kohort.protocol import records as R

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_TS = pa.timestamp("us", tz="UTC")


def schema_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL + (", " + HEADERS_DDL if include_headers else "")


def spark_schema(include_headers: bool = False):
    from pyspark.sql.types import StructType
    return StructType.fromDDL(schema_ddl(include_headers))


def arrow_schema(include_headers: bool = False) -> pa.Schema:
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", _TS),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", _HEADER_TYPE))
    return pa.schema(fields)


class ColumnBuilder:
    """Accumulates the records of one topic-partition into Arrow columns."""

    def __init__(self, topic: str, partition: int, include_headers: bool = False,
                 read_committed: bool = False):
        self.topic, self.partition = topic, partition
        self.include_headers = include_headers
        self.read_committed = read_committed
        self.schema = arrow_schema(include_headers)
        self._aborted = R.AbortedTransactions()    # read_committed state across fetches (KIP-98)
        self._reset()

    def _reset(self):
        self._pieces: list[pa.RecordBatch] = []
        self._count = 0
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list = []
        self.values: list = []
        self.ts_types: list[int] = []
        self.headers: list = []

    def __len__(self) -> int:
        return self._count + len(self.offsets)

    def add_payload(self, payload, from_offset: int, until_offset: int,
                    aborted_transactions=()) -> int | None:
        """Append the records of `payload` within [from_offset, until_offset).

        Returns the offset to fetch next (after the last complete batch), or None when the payload
        held no complete batch. `aborted_transactions`: (producer_id, first_offset) pairs."""
        d = payload if type(payload) is bytes else bytes(payload)
        if self.read_committed:
            return self._add_python(d, from_offset, until_offset, aborted_transactions)
        nxt, legacy = next_fetch_offset(d)
        if legacy:
            return self._add_python(d, from_offset, until_offset, ())
        if nxt is None:
            return None
        cols = R.decode_columns(d, min_offset=from_offset, max_offset=until_offset)
        if cols.count:
            self._pieces.append(self._from_columns(cols))
            self._count += cols.count
        return nxt

    def _from_columns(self, c) -> pa.RecordBatch:
        import pyarrow.compute as pc      # here: the driver's planner imports this module and never decodes
        n = c.count
        buf = pa.py_buffer
        ts = pa.Array.from_buffers(pa.int64(), n, [None, buf(c.timestamps)])
        ts_us = pc.multiply(ts, 1000)
        if c.timestamp_types.find(b"\xff") >= 0:       # legacy v0: no timestamp -> null
            ts_us = pc.if_else(pc.less(ts, 0), pa.scalar(None, pa.int64()), ts_us)
        cols = [
            pa.Array.from_buffers(pa.binary(), n, [buf(c.key_validity), buf(c.key_offsets), buf(c.key_data)]),
            pa.Array.from_buffers(pa.binary(), n, [buf(c.value_validity), buf(c.value_offsets),
                                                   buf(c.value_data)]),
            _topic_column(self.topic, n),
            pa.Array.from_buffers(pa.int32(), n, [None, buf(_repeat_i32(self.partition, n))]),
            pa.Array.from_buffers(pa.int64(), n, [None, buf(c.offsets)]),
            ts_us.cast(_TS),
            pa.Array.from_buffers(pa.int8(), n, [None, buf(c.timestamp_types)]).cast(pa.int32()),
        ]
        if self.include_headers:
            hs = c.headers
            cols.append(pa.array([[]] * n, _HEADER_TYPE) if hs is None else
                        pa.array([[{"key": hk, "value": hv} for hk, hv in h] for h in hs], _HEADER_TYPE))
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _add_python(self, d: bytes, from_offset: int, until_offset: int, aborted_transactions) -> int | None:
        n = len(d)
        pos = 0
        nxt = None
        keep = None
        if self.read_committed:
            self._aborted.add(aborted_transactions)
            keep = self._aborted.keep
        offsets, tss, keys, values, tst, hdrs = (self.offsets, self.timestamps, self.keys, self.values,
                                                 self.ts_types, self.headers)
        want_headers = self.include_headers
        while n - pos >= R.LOG_OVERHEAD:
            length = int.from_bytes(d[pos + 8:pos + 12], "big", signed=True)
            end = pos + R.LOG_OVERHEAD + length
            if length >= 0 and end > n:
                break
            if d[pos + R.MAGIC_OFFSET] < R.MAGIC_V2:
                for rec in R.iter_legacy_messages(d[pos:end], check_crc=False):
                    nxt = rec.offset + 1
                    if from_offset <= rec.offset < until_offset:
                        offsets.append(rec.offset)
                        tss.append(rec.timestamp)
                        keys.append(rec.key)
                        values.append(rec.value)
                        tst.append(rec.timestamp_type)
                        if want_headers:
                            hdrs.append([])
                pos = end
                continue
            h = R.read_batch_header(d, pos)
            nxt = h.next_offset
            pos_here, pos = pos, end
            if h.next_offset <= from_offset or h.base_offset >= until_offset:
                continue
            if keep is not None:
                if not keep(d, pos_here, h):
                    continue
            elif h.is_control:
                continue
            ts_type = h.timestamp_type
            for o, t, k, v, hs in R.iter_batch_records(d, pos_here, h):
                if o < from_offset or o >= until_offset:
                    continue
                offsets.append(o)
                tss.append(t)
                keys.append(k)
                values.append(v)
                tst.append(ts_type)
                if want_headers:
                    hdrs.append(hs)
        return nxt

    def has_batches(self, min_rows: int) -> bool:
        """Whether `take_batches` has something worth sending: a decoded payload, or at least
        `min_rows` rows gathered by the Python walk."""
        return bool(self._pieces) or len(self.offsets) >= min_rows

    def take_batches(self) -> list[pa.RecordBatch]:
        """The accumulated rows as RecordBatches, one per decoded payload (no concatenation, no
        copy); the builder starts empty again."""
        pieces = self._pieces
        if self.offsets:
            pieces.append(self._python_batch())
        self._reset()
        return pieces

    def to_record_batch(self) -> pa.RecordBatch:
        """The accumulated rows as one RecordBatch; the builder starts empty again."""
        pieces = self._pieces
        if self.offsets:
            pieces.append(self._python_batch())
        self._reset()
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        return pa.Table.from_batches(pieces, schema=self.schema).combine_chunks().to_batches()[0]

    def _python_batch(self) -> pa.RecordBatch:
        n = len(self.offsets)
        cols = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            _topic_column(self.topic, n),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array([t * 1000 if t >= 0 else None for t in self.timestamps], pa.int64()).cast(_TS),
            pa.array(self.ts_types, pa.int32()),
        ]
        if self.include_headers:
            cols.append(pa.array([[{"key": hk, "value": hv} for hk, hv in hs] for hs in self.headers],
                                 _HEADER_TYPE))
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)


def _topic_column(topic: str, n: int) -> pa.Array:
    """`topic` repeated n times as a plain string column (built by Arrow, no Python per row)."""
    return pa.repeat(pa.scalar(topic, pa.string()), n)


def _repeat_i32(v: int, n: int) -> bytes:
    return struct.pack("<i", v) * n if sys.byteorder == "little" else struct.pack(">i", v) * n


def next_fetch_offset(d: bytes) -> tuple[int | None, bool]:
    """(offset after the last complete batch or None, whether a legacy v0/v1 entry was seen)."""
    nxt, _, legacy = R.scan_batches(d)
    return (None if nxt < 0 else nxt), legacy
