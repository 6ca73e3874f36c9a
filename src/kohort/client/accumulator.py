"""The producer's record accumulator: per-partition queues of open record batches.

What lives here:

* `DeliveryFuture`: what `Producer.produce` returns — a light future for one record, resolved when its
  batch is acknowledged (`result(timeout)` → `RecordMetadata`, or raises the delivery error).
* `ProducerBatch`: one RecordBatch v2 being filled (records encoded straight into a bytearray by
  protocol/records.py's encoder, behind BATCH_HEADER_SIZE bytes of room for the header; only the
  commonest shape -- no key, no headers, same millisecond -- is inlined here for speed), then sealed
  into wire bytes carrying the producer id, epoch and base sequence (KIP-98): uncompressed in place
  (records.seal_batch_in_place: the header written into the room, no copy of the batch and no
  fresh allocation of its size), compressed into a new buffer (records.write_batch_buffer or the
  native sealer). A retried batch is re-sent with the very same bytes, so its sequence numbers
  never change on retry.
* The compiled twin: with the C extension enabled (`records.producer_twin()`), the
  fields a batch fills (`_BatchRecords`) and a future's fields (`_FutureFields`) live in C types of
  `_crecords`, so that its `FastProduce` (Producer.produce's common case) appends records in C;
  ProducerBatch.try_append below stays the reference encoder it must match byte for byte.
* `RecordAccumulator`: batching by `batch.size` and `linger.ms`, `buffer.memory` back-pressure
  (blocking up to `max.block.ms`, then a clear KafkaTimeoutError), readiness per partition, draining
  one batch per partition into a request per leader, re-enqueueing retries in sequence order, expiry at
  `delivery.timeout.ms` (KIP-91); a small pool of finished batches' bytearrays that new batches are
  encoded into (`release`), so a filling batch is neither reallocated nor page-faulted in afresh.

Time is always an argument (`now_ms`); the only blocking is on the buffer-memory condition.
"""
from __future__ import annotations

import sys
import threading
from collections import deque, namedtuple

from kohort.errors import EncodeError, KafkaTimeoutError
from kohort.protocol.compression import COMPRESSION_NONE
from kohort.protocol.records import (
    BATCH_HEADER_SIZE, ZZ, ZZ_TABLE_SIZE, append_record, producer_twin, seal_batch_in_place, write_batch_buffer,
)

RecordMetadata = namedtuple("RecordMetadata", "topic partition offset timestamp")
RecordMetadata.__doc__ = "Where an acknowledged record landed (offset -1 when acks=0)."

_BATCH_HEADER_SIZE = BATCH_HEADER_SIZE
# Every batch's bytearray starts with this much room, where an uncompressed batch's header is
# written when it is sealed. `size_limit` and `cap` count it (the compiled append compares them with
# BATCH_HEADER_SIZE + len(buf), and len(buf) + 64): both are the batch's own bytes plus _ROOM.
_ROOM = BATCH_HEADER_SIZE
# What a new batch reserves of buffer.memory at first (or batch.size, if smaller); it grows by
# doubling as records arrive (RecordAccumulator._grow), so a large batch.size costs memory only
# where records are: 1,000 partitions written at once reserve 16 MiB, not 1,000 x batch.size.
FIRST_RESERVATION = 16384
# Finished batches' buffers kept for new batches (RecordAccumulator.release): a batch filled into a
# recycled buffer is neither reallocated as it grows nor page-faulted in afresh. At most this many,
# counted by their allocations: a buffer is kept while the pool fits the part of buffer.memory no
# batch has reserved at that moment, or stays within an eighth of buffer.memory (new batches take
# pooled buffers before fresh ones, so the pool shrinks as reservations grow). Answers come in
# bursts while the producing thread waits for
# buffer.memory, and then it opens batches faster than answers come: on 16 KiB zstd records, a pool
# of 4 buffers within the eighth alone was empty for a third of the new 1 MB batches.
POOL_BUFFERS = 16
_ZZN = ZZ_TABLE_SIZE
_ZZ = ZZ


class _PyFutureFields:
    __slots__ = ("batch", "delta", "callbacks")

    def __init__(self, batch, delta):
        self.batch = batch
        self.delta = delta
        self.callbacks = None


class _PyBatchRecords:
    __slots__ = ("buf", "count", "base_ts", "max_ts", "size_limit", "cap", "closed", "ts_list")


_twin = producer_twin()          # decided once, at import (KOHORT_NO_EXT=1: the Python classes)
COMPILED = _twin is not None     # batches and futures have the C fields FastProduce needs
_FutureFields = _twin.RecordFuture if COMPILED else _PyFutureFields
_BatchRecords = _twin.RecordBuffer if COMPILED else _PyBatchRecords
_recycle = getattr(_twin, "recycle_buffer", None) if COMPILED else None    # no pool without it


class DeliveryFuture(_FutureFields):
    """The outcome of one produced record. Resolved by the producer's I/O thread.
    Fields (from its base): batch, delta (offset delta in the batch), callbacks."""

    __slots__ = ()

    def done(self) -> bool:
        return self.batch.done

    def _metadata(self):
        b = self.batch
        off = b.base_offset + self.delta if b.base_offset >= 0 else -1
        ts = b.log_append_time if b.log_append_time >= 0 else b.timestamps_at(self.delta)
        return RecordMetadata(b.topic, b.partition, off, ts)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        b = self.batch
        if not b.done and not b.event().wait(timeout):
            raise KafkaTimeoutError(f"record to {b.topic}[{b.partition}] not acknowledged within {timeout}s")
        if b.error is not None:
            raise b.error
        return self._metadata()

    def exception(self, timeout: float | None = None):
        """The delivery error (None on success); KafkaTimeoutError if not done within `timeout`."""
        b = self.batch
        if not b.done and not b.event().wait(timeout):
            raise KafkaTimeoutError(f"record to {b.topic}[{b.partition}] not acknowledged within {timeout}s")
        return b.error

    def add_done_callback(self, fn) -> None:
        """fn(future) runs on the I/O thread when the record is acknowledged or fails (at once if done)."""
        b = self.batch
        with b.lock:
            if not b.done:
                if self.callbacks is None:
                    self.callbacks = [fn]
                    b.callback_futures.append(self)
                else:
                    self.callbacks.append(fn)
                return
        fn(self)


class ProducerBatch(_BatchRecords):
    """Records for one partition, encoded as they arrive; sealed once into the wire bytes.
    Fields filled by appends (from its base): buf, count, base_ts, max_ts, size_limit, cap, closed,
    ts_list. `buf` is _ROOM bytes for the header, then the records. `size_limit` is the room
    reserved in buffer.memory so far (plus _ROOM): a record that does not fit it is not appended
    (the accumulator may grow the reservation, `RecordAccumulator._grow`); `cap` is batch.size (plus
    _ROOM): the batch closes once it is nearly that large. `reserved` is the reservation alone."""

    __slots__ = ("topic", "partition", "created_ms", "callback_futures", "on_delivery", "attempts",
                 "base_sequence", "producer_id", "producer_epoch", "wire", "done", "error", "base_offset",
                 "log_append_time", "lock", "_event", "last_attempt_ms", "reserved", "in_flight", "sent_ms")

    def __init__(self, topic: str, partition: int, now_ms: int, size_limit: int, reserved: int,
                 cap: int | None = None):
        self.topic = topic
        self.partition = partition
        self.buf = bytearray(_ROOM)
        self.count = 0
        self.base_ts = -1
        self.max_ts = -1
        self.created_ms = now_ms
        self.size_limit = size_limit + _ROOM
        self.cap = (size_limit if cap is None else max(cap, size_limit)) + _ROOM
        self.callback_futures = []
        self.on_delivery = None          # list of (future, fn) for per-record on_delivery callbacks
        self.attempts = 0
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.wire = None
        self.done = False
        self.error = None
        self.base_offset = -1
        self.log_append_time = -1
        self.lock = threading.Lock()
        self._event = None
        self.last_attempt_ms = 0
        self.reserved = reserved
        self.ts_list = None              # timestamps when they differ from base_ts (rare)
        self.closed = False
        self.in_flight = False
        self.sent_ms = 0.0               # when its last Produce request went out (the linger clock)

    def timestamps_at(self, delta: int) -> int:
        if self.ts_list is not None:
            return self.ts_list[delta]
        return self.base_ts

    def event(self) -> threading.Event:
        with self.lock:
            if self._event is None:
                self._event = threading.Event()
                if self.done:
                    self._event.set()
            return self._event

    @property
    def size(self) -> int:
        """The batch's size uncompressed, header included."""
        return len(self.buf)

    def try_append(self, key, value, headers, ts: int):
        """Encode one record if it fits (a first record always fits); returns its future or None."""
        buf = self.buf
        n = self.count
        if n == 0:
            self.base_ts = self.max_ts = ts
            tsd = 0
        else:
            tsd = ts - self.base_ts
        zz = _ZZ
        if key is None and not headers and value is not None and tsd == 0 and n < _ZZN:
            # the common case: no key, no headers, same millisecond as the batch's first record
            vl = len(value)
            if vl < 8000:
                offv = zz[n]
                blen = 6 + len(offv) + vl - (vl < 64)      # attrs, ts, key, hdrs + offset, vlen, value
                if n and _BATCH_HEADER_SIZE + len(buf) + len(zz[blen]) + blen > self.size_limit:
                    return None
                buf += b"".join((zz[blen], b"\x00\x00", offv, b"\x01", zz[vl], value, b"\x00"))
                if self.ts_list is not None:
                    self.ts_list.append(ts)
                self.count = n + 1
                if len(buf) + 64 >= self.cap:
                    self.closed = True
                return DeliveryFuture(self, n)
        # every other shape: the one record encoder (records.append_record); undone if it does not fit
        mark = len(buf)
        blen = append_record(buf, n, tsd, key, value, headers)
        if n and _BATCH_HEADER_SIZE + mark + blen > self.size_limit:
            del buf[mark:]
            return None
        if ts > self.max_ts:
            self.max_ts = ts
        if tsd:
            tl = self.ts_list
            if tl is None:
                tl = self.ts_list = [self.base_ts] * n
            tl.append(ts)
        elif self.ts_list is not None:
            self.ts_list.append(ts)
        self.count = n + 1
        if len(buf) + 64 >= self.cap:
            self.closed = True
        return DeliveryFuture(self, n)

    def seal(self, producer_id: int, producer_epoch: int, base_sequence: int, compression: int,
             attributes: int = 0, level: int | None = None) -> bytearray:
        """Build the wire bytes once (producer id/epoch/sequence in the header; `attributes` adds the
        transactional flag of a transactional producer; `level` the codec library's level); reused on
        retry, never changed (requests refer to them rather than copy them)."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        if compression == COMPRESSION_NONE:
            self.wire = seal_batch_in_place(self.buf, self.count, self.base_ts, self.max_ts,
                                            attributes=attributes, producer_id=producer_id,
                                            producer_epoch=producer_epoch, base_sequence=base_sequence)
        else:
            self.wire = write_batch_buffer(self.records(), self.count, self.base_ts, self.max_ts,
                                           compression=compression, attributes=attributes,
                                           producer_id=producer_id, producer_epoch=producer_epoch,
                                           base_sequence=base_sequence, level=level)
        return self.wire

    def records(self) -> memoryview:
        """The records section of `buf` (behind the header's room), where it lies."""
        return memoryview(self.buf)[_ROOM:]

    def complete(self, base_offset: int, log_append_time: int, error: BaseException | None,
                 spare: list | None = None):
        """Resolve every record's future (called once, on the I/O thread); returns callbacks to run.
        `spare`: a list the batch's records buffer is put on for the accumulator to recycle
        (`RecordAccumulator.release`), where no bytes on their way to a socket can still be in it: a
        compressed batch's (the wire is another buffer), or an uncompressed one acknowledged
        without error (its request was written whole before the answer came)."""
        with self.lock:
            if self.done:
                return ()
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self.done = True
            if spare is not None and self.buf is not None and (self.buf is not self.wire or error is None):
                spare.append(self.buf)
            self.buf = self.wire = None      # futures keep the batch alive: let its bytes go
            if self._event is not None:
                self._event.set()
            cbs = self.callback_futures
        return cbs


_INF = float("inf")


class RecordAccumulator:
    """Open batches per (topic, partition), readiness and draining. Thread-safe (one lock)."""

    def __init__(self, *, batch_size: int, linger_ms: int, buffer_memory: int, max_block_ms: int,
                 delivery_timeout_ms: int, retry_backoff_ms: int, clock_ms, on_new_batch=None):
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._clock_ms = clock_ms
        self.on_new_batch = on_new_batch      # fn(topic, partition) when a batch for it fills/closes
        self.batches: dict[tuple[str, int], deque] = {}     # a deque once made stays (never replaced)
        self.lock = threading.Lock()
        self._mem_cond = threading.Condition(self.lock)
        self._mem_waiters = 0          # threads waiting in _reserve for buffer.memory to be freed
        self.used = 0
        self.closed = False
        self.flushing = 0
        self.wakeup = None                    # fn() to wake the I/O thread when a batch becomes ready
        self.linger_started = None            # fn(due_ms) told when a partition's first open batch starts lingering
        self.incomplete: set = set()          # batches not yet resolved (for flush)
        self._pool: list[bytearray] = []       # emptied buffers of finished batches (_ROOM bytes long)
        self._pool_bytes = 0                   # their allocations, together

    # -- producer side ---------------------------------------------------------------------------------
    def append(self, topic, partition, key, value, headers, ts):
        """Append a record; returns (future, batch_was_full). Blocks on buffer.memory up to max.block.ms."""
        tp = (topic, partition)
        with self.lock:
            if self.closed:
                raise EncodeError("the producer is closed")
            dq = self.batches.get(tp)
            rec = 64 + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
            if dq:
                last = dq[-1]
                if not last.closed:
                    fut = last.try_append(key, value, headers, ts)
                    if fut is None and self._grow(last, rec):
                        fut = last.try_append(key, value, headers, ts)
                    if fut is not None:
                        return fut, last.closed      # closed now: the batch is full
                    last.closed = True
            elif dq is None:                 # a partition's deque, once made, stays (FastProduce keeps it)
                dq = self.batches[tp] = deque()
            size = max(min(self.batch_size, FIRST_RESERVATION), rec + 61)
            self._reserve(size)
            b = ProducerBatch(topic, partition, self._clock_ms(), size, size, self.batch_size)
            fut = None
            if self._pool:
                buf = self._pool.pop()
                self._pool_bytes -= sys.getsizeof(buf)
                b.buf = buf
                if not headers:         # Python's += would give back most of the buffer's allocation
                    delta = b.append_raw(key, value, ts)
                    if delta is not None:
                        fut = DeliveryFuture(b, delta)
            if fut is None:
                fut = b.try_append(key, value, headers, ts)
            dq.append(b)
            self.incomplete.add(b)
            if len(dq) == 1 and self.linger_started is not None:
                self.linger_started(b.created_ms + self.linger_ms)
            return fut, b.closed or len(dq) > 1

    def _grow(self, b: ProducerBatch, rec: int) -> bool:
        """Reserve more of buffer.memory for an open batch whose reserved room is used up: double it
        (at least room for a record of about `rec` bytes), up to its cap (batch.size). Never waits:
        when buffer.memory has no room, or the record would pass the cap, the batch is closed instead
        (and a new batch waits for its own first reservation). Holding self.lock."""
        if b.size_limit >= b.cap:
            return False
        need = _BATCH_HEADER_SIZE + len(b.buf) + rec          # in size_limit's terms (_ROOM counted)
        if need > b.cap:
            return False
        target = min(b.cap, max(2 * b.size_limit - _ROOM, need))    # the reservation doubles
        extra = target - b.size_limit
        if self.used + extra > self.buffer_memory:
            return False
        self.used += extra
        b.reserved += extra
        b.size_limit = target
        return True

    def _reserve(self, size: int) -> None:
        if self.used + size <= self.buffer_memory or self.used == 0:
            self.used += size
            return
        deadline = self._clock_ms() + self.max_block_ms
        wake = self.wakeup
        while self.used + size > self.buffer_memory and self.used:
            left = deadline - self._clock_ms()
            if left <= 0:
                raise KafkaTimeoutError(
                    f"buffer.memory ({self.buffer_memory} bytes) is full and no room was freed within "
                    f"max.block.ms ({self.max_block_ms} ms): the broker is slower than the producer or "
                    f"unreachable; call flush(), raise buffer.memory or max.block.ms")
            if wake:
                wake()
            self._mem_waiters += 1
            try:
                self._mem_cond.wait(min(left, 100) / 1000.0)
            finally:
                self._mem_waiters -= 1
            if self.closed:
                raise EncodeError("the producer is closed")
        self.used += size

    def release(self, batch: ProducerBatch, spare: list | None = None) -> None:
        """Give back a finished batch's reservation; `spare` (from ProducerBatch.complete): buffers
        to keep for new batches, as far as the pool has room and nothing still views them."""
        with self.lock:
            self.used -= batch.reserved
            batch.reserved = 0
            if spare and _recycle is not None:
                for buf in spare:
                    n = sys.getsizeof(buf)
                    pooled = self._pool_bytes + n
                    if (len(self._pool) < POOL_BUFFERS
                            and (self.used + pooled <= self.buffer_memory or pooled <= self.buffer_memory // 8)
                            and _recycle(buf, _ROOM)):
                        self._pool.append(buf)
                        self._pool_bytes = pooled
            self.incomplete.discard(batch)
            if self._mem_waiters:
                self._mem_cond.notify_all()

    # -- I/O side ----------------------------------------------------------------------------------------
    def ready(self, now_ms: int, leader_of, node_ready) -> tuple[set, int, set]:
        """Nodes with sendable batches, ms until the next batch may become ready (inf when no queued
        batch is waiting for its linger.ms or retry backoff), and unknown-leader topics.

        `leader_of(topic, partition)` -> node id or None; `node_ready(node)` -> bool (can send now)."""
        nodes = set()
        unknown = set()
        next_ms = _INF
        with self.lock:
            exhausted = self.used > self.buffer_memory * 0.9 or self.flushing or self.closed
            for tp, dq in self.batches.items():
                if not dq:
                    continue
                b = dq[0]
                node = leader_of(tp[0], tp[1])
                if node is None:
                    unknown.add(tp[0])
                    continue
                if node in nodes:
                    continue
                backoff = b.attempts > 0 and now_ms < b.last_attempt_ms + self.retry_backoff_ms
                if backoff:
                    next_ms = min(next_ms, b.last_attempt_ms + self.retry_backoff_ms - now_ms)
                    continue
                waited = now_ms - (b.last_attempt_ms if b.attempts else b.created_ms)
                sendable = len(dq) > 1 or b.closed or waited >= self.linger_ms or exhausted
                if sendable:
                    if node_ready(node):
                        nodes.add(node)
                    else:       # look again when its linger.ms would have passed (the connection's turn)
                        next_ms = min(next_ms, self.linger_ms if self.linger_ms > 0 else 100)
                else:
                    next_ms = min(next_ms, self.linger_ms - waited)
        return nodes, max(0, next_ms), unknown

    def drain(self, node_partitions, max_request_size: int, now_ms: int, can_send_partition,
              sendable_only: bool = False) -> list:
        """Take up to one ready batch per partition led by the node; returns the batches (closed).

        `can_send_partition(tp, batch)` lets the idempotence logic hold a partition back (ordering).
        The first request to a ready node takes every partition's first batch, as Java's drain does;
        `sendable_only` (a further request in the same round) takes only batches that are full,
        lingered long enough, or flushed, so a just-opened batch is not sent with one record."""
        out = []
        size = 0
        with self.lock:
            hurry = self.flushing or self.closed or self.used > self.buffer_memory * 0.9
            for tp in node_partitions:
                dq = self.batches.get(tp)
                if not dq:
                    continue
                b = dq[0]
                if b.attempts and now_ms < b.last_attempt_ms + self.retry_backoff_ms:
                    continue
                if sendable_only and not (b.closed or len(dq) > 1 or hurry or b.attempts
                                          or now_ms - b.created_ms >= self.linger_ms):
                    continue
                if not can_send_partition(tp, b):
                    continue
                if out and size + b.size > max_request_size:
                    break
                dq.popleft()
                if not b.closed:
                    b.closed = True
                    if self.on_new_batch is not None:
                        self.on_new_batch(tp[0], tp[1])
                size += b.size
                out.append(b)
        return out

    def reenqueue(self, batch: ProducerBatch, now_ms: int, backoff_ms: int | None = None) -> None:
        """Put a batch to retry back at the front of its partition's queue, in base-sequence order.
        It waits retry.backoff.ms, or `backoff_ms` when shorter (its attempt is dated back so that
        ready() and drain() see the backoff end `backoff_ms` from now)."""
        batch.attempts += 1
        batch.last_attempt_ms = now_ms
        if backoff_ms is not None and backoff_ms < self.retry_backoff_ms:
            batch.last_attempt_ms = now_ms - (self.retry_backoff_ms - backoff_ms)
        tp = (batch.topic, batch.partition)
        with self.lock:
            dq = self.batches.setdefault(tp, deque())
            if batch.base_sequence < 0:
                dq.appendleft(batch)
                return
            i = 0
            for i, other in enumerate(dq):  # noqa: B007
                if other.base_sequence < 0 or other.base_sequence > batch.base_sequence:
                    break
            else:
                i = len(dq)
            dq.insert(i, batch)

    def expired(self, now_ms: int) -> list:
        """Remove and return queued (not in-flight) batches past delivery.timeout.ms (KIP-91)."""
        out = []
        limit = self.delivery_timeout_ms
        with self.lock:
            for dq in self.batches.values():
                while dq and now_ms - dq[0].created_ms >= limit:
                    out.append(dq.popleft())
        return out

    def partitions(self):
        with self.lock:
            return [tp for tp, dq in self.batches.items() if dq]

    def queued(self) -> bool:
        """Whether any batch is queued (open, or waiting to be sent or retried)."""
        with self.lock:
            return any(self.batches.values())

    def pending(self) -> bool:
        with self.lock:
            return bool(self.incomplete)

    def abort_all(self, error: BaseException) -> list:
        with self.lock:
            out = [b for dq in self.batches.values() for b in dq]
            for dq in self.batches.values():
                dq.clear()
        return out


__all__ = ["DeliveryFuture", "ProducerBatch", "RecordAccumulator", "RecordMetadata"]
