"""The source's output schema and Arrow record batches built straight from fetched Kafka record batches.

`spark_schema(include_headers)` is spark-sql-kafka's schema (key, value, topic, partition, offset,
timestamp, timestampType[, headers]); `arrow_schema` is its Arrow twin. `ColumnBuilder` walks a fetch
payload batch by batch (RecordBatch v2; legacy v0/v1 message sets through the legacy decoder),
keeps records in [from_offset, until_offset), drops aborted transactional data under read_committed
(KIP-98: the fetch response's AbortedTransactions list plus the ABORT control markers), and appends
plain Python values into per-column lists that `to_record_batch()` turns into one pyarrow.RecordBatch.
"""
from __future__ import annotations

import heapq

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
        self._aborted_active: set[int] = set()
        self.gaps = 0            # offsets inside the range with no data record (compaction, markers)
        self._reset()

    def _reset(self):
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list = []
        self.values: list = []
        self.ts_types: list[int] = []
        self.headers: list = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add_payload(self, payload, from_offset: int, until_offset: int,
                    aborted_transactions=()) -> int | None:
        """Append the records of `payload` within [from_offset, until_offset).

        Returns the offset to fetch next (after the last complete batch), or None when the payload
        held no complete batch. `aborted_transactions`: (producer_id, first_offset) pairs."""
        d = payload if type(payload) is bytes else bytes(payload)
        n = len(d)
        pos = 0
        nxt = None
        aborted = [(first, pid) for pid, first in aborted_transactions] if self.read_committed else []
        heapq.heapify(aborted)
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
            if self.read_committed:
                while aborted and aborted[0][0] <= h.last_offset:
                    self._aborted_active.add(heapq.heappop(aborted)[1])
                if h.is_control:
                    if h.producer_id in self._aborted_active:
                        for _o, _t, k, v, _h in R.iter_batch_records(d, pos_here, h):
                            if k is not None and R.parse_control_record(k, v)[1] == R.CONTROL_ABORT:
                                self._aborted_active.discard(h.producer_id)
                    continue
                if h.is_transactional and h.producer_id in self._aborted_active:
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

    def to_record_batch(self) -> pa.RecordBatch:
        """The accumulated rows as one RecordBatch; the builder starts empty again."""
        n = len(self.offsets)
        cols = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([self.topic]))
            .cast(pa.string()) if n else pa.array([], pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array([t * 1000 if t >= 0 else None for t in self.timestamps], pa.int64()).cast(_TS),
            pa.array(self.ts_types, pa.int32()),
        ]
        if self.include_headers:
            cols.append(pa.array([[{"key": hk, "value": hv} for hk, hv in hs] for hs in self.headers],
                                 _HEADER_TYPE))
        self._reset()
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)
