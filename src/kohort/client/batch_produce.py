"""`Producer.produce_batch`: many records in one call, from Python lists or Arrow arrays.

What lives here:

* `produce_batch(producer, topic, values, ...)`: the body of `Producer.produce_batch`. It behaves as if
  `produce()` had been called for each record in order -- the same batches, bytes, partitioner (murmur2
  of the key, sticky for null keys, KIP-480), idempotence sequence numbers, transaction partitions and
  `buffer.memory`/`max.block.ms` back-pressure -- because every record that opens a batch, blocks, has
  headers or needs a conversion goes through `_one`, which is produce()'s body. Between those, a *run*
  of following records bound for the same open batch is appended under the accumulator's lock by
  `append_run_for(p)`: `_crecords.append_run` (C, the same encoder as FastProduce) when the extension is on,
  else `_py_append_run` below (ProducerBatch.try_append per record), the reference it must match.
* `BatchDeliveryFuture`: the one result of a call. It completes when every record is acknowledged or
  failed; `failures()` maps record index -> error (records refused before they were queued, such as a
  record too large, and records of batches that failed); `result()` raises `ProduceBatchError` naming
  them. Records are kept as spans (first index, count, batch, first offset delta), not one future each.
* `columns(...)`: input normalisation. Arrow arrays (binary, large_binary, string, large_string; nulls
  are null keys/values) become `ArrowBytes` (with the extension: the C run reads their buffers in place)
  or lists of bytes (chunked arrays of several chunks, no extension); lists are taken as they are.
"""
from __future__ import annotations

import bisect
import threading
import time

from kohort.client.accumulator import RecordMetadata
from kohort.errors import KohortError
from kohort.protocol import records as _records

_c_append_run = getattr(_records._ext, "append_run", None)     # None: not built (or a stale build)


class ProduceBatchError(KohortError):
    """Some records of a produce_batch() call failed; `failures` maps record index -> error."""

    def __init__(self, failures: dict, total: int):
        self.failures = failures
        first = min(failures)
        super().__init__(f"{len(failures)} of {total} records failed; record {first}: "
                         f"{type(failures[first]).__name__}: {failures[first]}")


class BatchDeliveryFuture:
    """The outcome of one produce_batch() call (thread-safe). Resolved by the producer's I/O thread."""

    def __init__(self, topic: str, count: int):
        self.topic = topic
        self.count = count
        self._spans: list = []          # (first index, count, batch, first offset delta), index order
        self._starts: list = []
        self._failed: dict = {}         # index -> error, for records never queued
        self._lock = threading.Lock()
        self._pending = 0
        self._event = threading.Event()
        self._done_fns: list = []
        self.callbacks = [self._batch_done]      # what a ProducerBatch calls for each registered future

    # -- filled by produce_batch ---------------------------------------------------------------------
    def _add(self, start: int, n: int, batch, delta: int) -> None:
        sp = self._spans
        if sp:
            s0, n0, b0, d0 = sp[-1]
            if b0 is batch and s0 + n0 == start and d0 + n0 == delta:
                sp[-1] = (s0, n0 + n, b0, d0)
                return
        sp.append((start, n, batch, delta))
        self._starts.append(start)

    def _arm(self) -> None:
        """Register with every batch holding a record; done at once when none is pending."""
        seen = set()
        pending = 0
        for _, _, b, _ in self._spans:
            if id(b) in seen:
                continue
            seen.add(id(b))
            with b.lock:
                if not b.done:
                    b.callback_futures.append(self)
                    pending += 1
        with self._lock:
            self._pending += pending
            finished = self._pending == 0
        if finished:
            self._finish()

    def _batch_done(self, _self) -> None:
        with self._lock:
            self._pending -= 1
            finished = self._pending == 0
        if finished:
            self._finish()

    def _finish(self) -> None:
        self._event.set()
        with self._lock:
            fns, self._done_fns = self._done_fns, None
        for fn in fns:
            try:
                fn(self)
            except Exception:  # noqa: BLE001 - one callback's error must not skip the others
                pass

    # -- public --------------------------------------------------------------------------------------
    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once every record is acknowledged or failed (False if `timeout` passed first)."""
        return self._event.wait(timeout)

    def add_done_callback(self, fn) -> None:
        """fn(this future) runs once every record is resolved (on the I/O thread, or at once if done)."""
        with self._lock:
            if self._done_fns is not None:
                self._done_fns.append(fn)
                return
        fn(self)

    def failures(self, timeout: float | None = None) -> dict:
        """{record index: error} of the records that failed (empty when all were acknowledged)."""
        self._wait(timeout)
        out = dict(self._failed)
        for start, n, b, _ in self._spans:
            if b.error is not None:
                for i in range(start, start + n):
                    out[i] = b.error
        return out

    def result(self, timeout: float | None = None) -> int:
        """The number of records acknowledged (all of them); raises ProduceBatchError if any failed."""
        f = self.failures(timeout)
        if f:
            raise ProduceBatchError(f, self.count)
        return self.count

    def metadata(self, index: int, timeout: float | None = None) -> RecordMetadata:
        """Where record `index` landed; raises its error if it failed."""
        self._wait(timeout)
        if index in self._failed:
            raise self._failed[index]
        j = bisect.bisect_right(self._starts, index) - 1
        if j < 0 or not 0 <= index - self._spans[j][0] < self._spans[j][1]:
            raise IndexError(f"no record {index} in this produce_batch() call of {self.count}")
        start, _, b, d0 = self._spans[j]
        if b.error is not None:
            raise b.error
        delta = d0 + index - start
        off = b.base_offset + delta if b.base_offset >= 0 else -1
        ts = b.log_append_time if b.log_append_time >= 0 else b.timestamps_at(delta)
        return RecordMetadata(b.topic, b.partition, off, ts)

    def _wait(self, timeout) -> None:
        if not self._event.wait(timeout):
            from kohort.errors import KafkaTimeoutError
            raise KafkaTimeoutError(f"produce_batch() to {self.topic!r}: records not all acknowledged "
                                    f"within {timeout}s")


# -- input columns ---------------------------------------------------------------------------------------
class ArrowBytes:
    """An Arrow binary / large_binary array as a column: `[i]` -> bytes or None (Python's view, for the
    records produce()'s body handles), `view` -> its buffers for _crecords.append_run (offsets, data,
    validity or None, array offset, 64-bit offsets, length), read in place without a bytes object per
    record."""

    __slots__ = ("arr", "view")

    def __init__(self, arr):
        import pyarrow as pa
        self.arr = arr
        validity, offsets, data = arr.buffers()[:3]
        self.view = (offsets, data if data is not None else b"", validity, arr.offset,
                     pa.types.is_large_binary(arr.type), len(arr))

    def __len__(self):
        return len(self.arr)

    def __getitem__(self, i):
        return self.arr[i].as_py()


def _arrow_bytes(col, what: str):
    import pyarrow as pa
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        col = col.cast(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())
    elif not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        raise KohortError(f"produce_batch: {what} must be an Arrow binary or string array, not {t}")
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks != 1:
            return col.to_pylist()
        col = col.chunk(0)
    if _c_append_run is None:
        return col.to_pylist()
    return ArrowBytes(col)


def _column(col, what: str, n: int | None):
    if col is None:
        return None
    mod = type(col).__module__
    if mod.startswith("pyarrow"):
        if what in ("partition", "timestamps"):
            col = col.to_pylist()
        else:
            col = _arrow_bytes(col, what)
    elif not isinstance(col, list):
        col = list(col)
    if n is not None and len(col) != n:
        raise KohortError(f"produce_batch: {what} has {len(col)} entries, values has {n}")
    return col


def columns(values, keys, partition, timestamps, headers):
    values = _column(values, "values", None)
    n = len(values)
    keys = _column(keys, "keys", n)
    if partition is None or isinstance(partition, int):
        parts = None
    else:
        parts, partition = _column(partition, "partition", n), None
    if timestamps is None or isinstance(timestamps, int):
        ts_list = None
    else:
        ts_list, timestamps = _column(timestamps, "timestamps", n), None
    headers = _column(headers, "headers", n)
    return values, keys, partition, parts, timestamps, ts_list, headers


# -- the run appender: the reference for _crecords.append_run ---------------------------------------------
def _py_append_run(b, values, keys, parts, headers, start, stop, ts, max_record, hash_mode, n, p, sticky):
    """Append records start.. to batch `b` (open, last of partition p's queue) while each one would go to
    partition p (`parts`: None, one int for all, or a list with an int or None per record), is plain (bytes/None key and value, no headers, not over max_record) and fits; stops
    after the record that closes the batch. Returns how many were appended. hash_mode: 1 keyed records
    go by murmur2 % n, 0 every record without a partition is sticky; `sticky` the topic's sticky
    partition (-1: none)."""
    from kohort.client.partitioner import murmur2
    i = start
    while i < stop:
        v = values[i]
        k = keys[i] if keys is not None else None
        if (v is not None and v.__class__ is not bytes) or (k is not None and k.__class__ is not bytes):
            break
        if headers is not None and headers[i]:
            break
        if (len(v) if v is not None else 0) + (len(k) if k is not None else 0) > max_record:
            break
        q = parts if parts is None or parts.__class__ is int else parts[i]
        if q is None:
            if k is not None and hash_mode:
                q = (murmur2(k) & 0x7FFFFFFF) % n
            else:
                q = sticky
        if q.__class__ is not int or q != p:
            break
        t = ts[i] if ts.__class__ is list else ts
        if t is None:
            t = time.time_ns() // 1_000_000
        elif t.__class__ is not int:
            break
        if b.try_append(k, v, None, t) is None:
            break
        i += 1
        if b.closed:
            break
    return i - start


def append_run_for(p):
    """The run appender for producer `p`: C when it was built with the compiled twin, else Python."""
    return _c_append_run if p._compiled_runs and _c_append_run is not None else _py_append_run


def _record_error(e: BaseException) -> bool:
    """An error of one record (produce() refuses it alone: bad type, too large, no such partition, a
    serializer's or partitioner's own exception), not of the topic or the producer."""
    from kohort.errors import RecordTooLargeError
    return isinstance(e, RecordTooLargeError) or type(e) is KohortError or not isinstance(e, KohortError)


# -- produce_batch --------------------------------------------------------------------------------------
def produce_batch(p, topic, values, keys=None, partition=None, timestamps=None, headers=None,
                  run=None) -> BatchDeliveryFuture:
    """Producer.produce_batch's body (see its docstring); `run` replaces append_run_for(p) (tests)."""
    values, keys, partition, parts, timestamp, ts_list, headers = columns(values, keys, partition,
                                                                         timestamps, headers)
    n = len(values)
    if p._closed:
        raise KohortError("produce_batch() on a closed producer")
    fatal = p.sender.fatal or p.sender.net.fatal
    if fatal is not None:
        raise fatal
    info = p._topics.get(topic)
    if info is None or info.error:
        info = p._wait_for_topic(topic)
    fut = BatchDeliveryFuture(topic, n)
    run = run or append_run_for(p)
    # runs cover produce()'s plain case: no serializers, no custom partitioner
    runs_ok = not p._has_serializers and p._custom_partitioner is None
    hash_mode = 0 if p._ignore_keys else 1
    ts_arg = ts_list if ts_list is not None else timestamp
    acc = p.acc
    txn = p._txn
    added = set()
    if run is _c_append_run:                 # Arrow columns are read in place by the C run
        cvalues, ckeys = (c.view if isinstance(c, ArrowBytes) else c for c in (values, keys))
    else:
        cvalues, ckeys = values, keys
    i = 0
    queued = False
    while i < n:
        key = keys[i] if keys is not None else None
        hs = headers[i] if headers is not None else None
        try:                                # what produce() refuses for this record alone
            key, value, part, sticky = p._prepare(topic, values[i], key, hs,
                                                 partition if parts is None else parts[i])
        except Exception as e:  # noqa: BLE001 - reported as this record's failure
            if not _record_error(e):        # the topic went away or the like: as below
                if not queued:
                    raise
                for j in range(i, n):
                    fut._failed[j] = e
                break
            fut._failed[i] = e
            i += 1
            continue
        try:                                # the producer cannot go on: the rest fail with it
            if txn is not None and part not in added:
                p._txn_add(topic, part)
                added.add(part)
            if p._closed:
                raise KohortError("produce_batch() on a closed producer")
            fatal = p.sender.fatal or p.sender.net.fatal
            if fatal is not None:
                raise fatal
            rf, wake = p._enqueue(topic, part, key, value, hs, timestamp if ts_list is None else ts_list[i])
        except Exception as e:
            if not queued:
                raise
            for j in range(i, n):
                fut._failed[j] = e
            break
        queued = True
        b, delta = rf.batch, rf.delta
        fut._add(i, 1, b, delta)
        i += 1
        if wake:
            p._batch_full(topic, part, sticky)
            continue
        if not runs_ok or i >= n:
            continue
        with acc.lock:                      # a run of the next records into the same open batch
            dq = acc.batches.get((topic, part))
            if not dq or dq[-1] is not b or b.closed:
                continue
            info = p._topics.get(topic) or info
            st = p._sticky_now.get(topic)
            k = run(b, cvalues, ckeys, parts if parts is not None else partition, headers, i, n, ts_arg,
                    p._max_record, hash_mode, info.num_partitions, part, -1 if st is None else st)
            full = b.closed
        if k:
            fut._add(i, k, b, delta + 1)
            i += k
            if full:
                j = i - 1                   # the record that filled the batch: was it placed by sticky?
                pj = parts[j] if parts is not None else partition
                by_sticky = pj is None and (keys is None or keys[j] is None or not hash_mode)
                p._batch_full(topic, part, by_sticky)
    fut._arm()
    p.emit_statistics()
    return fut
