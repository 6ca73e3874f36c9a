"""AIOProducer: Kafka's producer on the running asyncio loop, no thread per call.

`send(...)` encodes the record into its partition's open batch (`protocol.records.append_record`) at
the call and returns an already completed future of a `RecordFuture` (`fut = await send(...)`; `await fut`
gives its `RecordMetadata`; record_future.py: a handle on the batch's one shared future, so no per-record
object stays alive in the producer): no coroutine per record. It returns a waiting coroutine instead
while `buffer_memory` bytes or `max_queued_records` records are queued or a new topic's metadata is
needed; every `YIELD_EVERY` records its future completes on the loop's next turn, so a tight loop of
`await send()` does not hold the loop. With the C extension built, send()'s common case (a known topic,
an explicit partition or the default partitioner, bytes or None key and value, no headers, no
transaction, an open batch with room) is one call of the compiled twin (`_crecords.AIOSend`, installed
by start()); the Python send below stays the reference and takes every other case. One sender task seals ready batches (full, or
older than `linger_ms`, or flushed) and sends Produce requests per leader, one batch per partition in
each. An idempotent producer outside transactions keeps up to `MAX_IN_FLIGHT` batches of a partition in
flight (uncompressed ones: sealed on the loop, so their requests go out in sequence order) once the
partition has acknowledged one batch of its producer id (before that the broker has no state for the
producer there and would append a later batch ahead of a failed first one); a failed
batch is sent again alone, before anything newer of its partition, and OUT_OF_ORDER_SEQUENCE_NUMBER for
a batch behind it sends that one again after it, so records stay in order across retries. Otherwise
one batch of a partition is in flight at a time.

Defaults by Kafka's names where they depart from Java's: `batch_size` 1,000,000 (the sync Producer's
`batch.size`, librdkafka's; Java's is 16384): a Python caller and the broker pay per request, and
against 256 KiB batches 1 MB ones cost this producer about 20% and the broker about 30% less CPU for
200k x 1 KiB (measured with bench_aio.py's workload); a batch's buffer grows with its records, so
nothing is reserved up front, and a batch not full goes after `linger_ms` (5) as before. Null-key
records stick to one partition until its batch closes (full, lingered or flushed), then move to
another partition with a leader (KIP-480, `client.partitioner.StickyPartitioner`, as the sync
Producer).

Idempotence (KIP-98, on by default as in Kafka 3.0+): InitProducerId, per-partition sequence numbers
fixed when a batch is sealed, retries resend the same bytes. Transactions: the pure
`client.txn_manager.TransactionManager` decides; the sender task sends what it asks
(`next_request`) and hands back the answers. Compression of a batch over `OFF_LOOP_BYTES` runs in a
worker thread (gzip/lz4/zstd release the GIL while they compress), smaller ones on the loop.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
import types
from collections import deque
from collections.abc import Awaitable

from kohort.aio.client import AIOClient, ClientSettings
from kohort.protocol.framing import Versioned
from kohort.client.partitioner import DefaultPartitioner
from kohort.aio.record_future import COMPILED as _COMPILED_RECORD_FUTURE, BatchResult, RecordFuture, RecordMetadata
from kohort.client.txn_manager import TransactionManager
from kohort.errors import (
    ErrorCode, KafkaConnectionError, KafkaError, KafkaTimeoutError, KohortError, TransactionAbortedError, for_code,
)
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest
from kohort.protocol.messages.produce import produce_request
from kohort.protocol.records import (
    ATTR_TRANSACTIONAL, BATCH_HEADER_SIZE, ZZ, ZZ_TABLE_SIZE, _check_bytes, append_record, producer_twin,
    seal_batch_in_place, write_batch_buffer,
)

log = logging.getLogger("kohort.aio.producer")

CODECS = {None: 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
OFF_LOOP_BYTES = 64 * 1024          # compressed batches at least this big are built in a worker thread
YIELD_EVERY = 64                    # send() gives the loop a turn after this many records
MAX_IN_FLIGHT = 5                   # batches of one partition in flight (idempotent, as Kafka's max.in.flight)
PRODUCE_MAX_VERSION = 11            # transactions v1 (see DESIGN: Produce v12 switches a 4.x broker to v2)
_RETRIABLE_PRODUCE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
                                ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
                                ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.CORRUPT_MESSAGE,
                                ErrorCode.NETWORK_EXCEPTION})


_time = time.time


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _complete(f: asyncio.Future, rf: RecordFuture) -> None:
    if not f.done():
        f.set_result(rf)


# what a record's key, value and header values may be
Buffer = bytes | bytearray | memoryview


class _PyBatchFields:
    """The fields of a batch being filled, as the compiled `_crecords.RecordBuffer` holds them."""
    __slots__ = ("buf", "count", "base_ts", "max_ts", "size_limit", "cap", "closed", "ts_list")


_twin = producer_twin()
# compiled: batches are RecordBuffers and send()'s common case is one C call (`_crecords.AIOSend`,
# installed by start()); needs the compiled RecordFuture fields too
_COMPILED_SEND = _twin is not None and hasattr(_twin, "AIOSend") and _COMPILED_RECORD_FUTURE
_BatchFields = _twin.RecordBuffer if _COMPILED_SEND else _PyBatchFields


class _Batch(_BatchFields):
    """One partition's records, encoded as they arrive (`records.append_record`, or the compiled
    twin's `rb_append`, which writes the same bytes) into `buf` behind BATCH_HEADER_SIZE bytes of
    room, sealed once into wire bytes with the producer id, epoch and base sequence: uncompressed in
    place (`records.seal_batch_in_place`: no copy, no fresh allocation of the batch's size, whose
    page faults cost more than the copy), compressed by `records.write_batch_buffer`; a retry resends
    the same bytes, never changed (requests refer to them rather than copy them). `size_limit` and
    `cap` tell the compiled append when the batch is full, as send() decides it (both count the
    header room in `buf`): a record that would take it past `batch_size` does not go in (unless it is
    the first), and it is full once it reaches `batch_size` (`closed`: the compiled append hands it
    to `_close_batch`)."""

    __slots__ = ("tp", "result", "created", "wire", "sequence", "attempts", "deadline", "producer_id")

    def __init__(self, tp, base_ts: int, now: int, deadline: int, result: asyncio.Future, batch_size: int):
        self.tp = tp
        self.buf = bytearray(BATCH_HEADER_SIZE)     # the header's room, then the records
        self.base_ts = self.max_ts = base_ts
        # rb_append refuses a record taking BATCH_HEADER_SIZE + len(buf) past size_limit, and closes
        # the batch at len(buf) + 64 >= cap: both mean len(buf) against batch_size
        self.size_limit = batch_size + BATCH_HEADER_SIZE
        self.cap = batch_size + 64
        self.closed = False
        self.ts_list = None
        self.result = result                        # BatchResult, shared by the records' RecordFutures
        self.created, self.wire, self.sequence, self.count, self.attempts = now, None, -1, 0, 0
        self.deadline = deadline
        self.producer_id = -1                       # the producer id it was sealed with


def _size(b: _Batch) -> int:
    return len(b.buf)


class AIOProducer:
    """See the module docstring. Use `async with AIOProducer(...) as p:` or start()/stop()."""

    def __init__(self, bootstrap_servers="localhost:9092", *, acks=-1, linger_ms: int = 5,
                 batch_size: int = 1000000, max_request_size: int = 1048576, compression_type: str | None = None,
                 enable_idempotence: bool | None = None, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60000, delivery_timeout_ms: int = 120000,
                 buffer_memory: int = 33554432, max_queued_records: int = 32768, partitioner: DefaultPartitioner | None = None, **conn):
        if acks == "all":
            acks = -1
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1, -1 or 'all', not {acks!r}")
        if compression_type not in CODECS:
            raise ValueError(f"compression_type must be one of gzip, snappy, lz4, zstd or None, not {compression_type!r}")
        if transactional_id is not None:
            if enable_idempotence is False:
                raise ValueError("transactional_id needs enable_idempotence")
            enable_idempotence = True
        if enable_idempotence is None:
            enable_idempotence = acks == -1
        if enable_idempotence and acks != -1:
            raise ValueError("enable_idempotence needs acks=-1 ('all')")
        self.settings = ClientSettings.make(bootstrap_servers, **conn)
        self.acks, self.linger_ms, self.batch_size = acks, linger_ms, batch_size
        self.max_request_size, self.compression = max_request_size, CODECS[compression_type]
        self.idempotent = enable_idempotence
        self.delivery_timeout_ms, self.buffer_memory = delivery_timeout_ms, buffer_memory
        self.partitioner = partitioner or DefaultPartitioner()
        # topic -> its sticky partition for null keys, when the partitioner is the default one
        self._sticky: dict | None = self.partitioner.sticky._sticky \
            if isinstance(self.partitioner, DefaultPartitioner) else None
        self.txn = TransactionManager(transactional_id, transaction_timeout_ms,
                                      self.settings.retry_backoff_ms) if transactional_id else None
        self.client: AIOClient | None = None
        self._open: dict = {}                      # tp -> open _Batch
        self._ready: dict = {}                     # tp -> deque of sealed-to-be batches, oldest first
        self._in_flight: dict = {}                 # tp -> batches of it in flight (no key: none)
        self._next_ack: dict = {}                  # tp -> the sequence its next acknowledged batch starts at
        self._unwritten: dict = {}                 # tp -> its requests in flight still waiting for a connection
        self._buffered = 0
        self._space = asyncio.Event()
        self._wake = asyncio.Event()
        self._flushing = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._pending_batches = 0
        self._sender: asyncio.Task | None = None
        self._requests: set = set()
        self.producer_id, self.producer_epoch = -1, -1
        self._seq: dict = {}
        self._pid_future: asyncio.Future | None = None
        self._txn_changed = asyncio.Event()
        self._txn_in_flight = False
        self._closed = False
        self._fatal: BaseException | None = None
        self._sends = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queued = 0                           # records whose batches have no answer yet
        self.max_queued_records = max_queued_records

    # -- lifecycle -----------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.client is not None:
            return
        self._loop = asyncio.get_running_loop()
        self.client = AIOClient(self.settings)
        self.client.auto_create = True
        await self.client.refresh_metadata()
        self._sender = asyncio.create_task(self._run(), name="kohort-aio-sender")
        if _COMPILED_SEND and self.txn is None and type(self).send is AIOProducer.send:
            # send()'s common case in one C call; every other case goes to the Python send below,
            # which stays the reference (the same checks, the same bytes, the same counters)
            part = self.partitioner
            sticky = part.sticky._sticky if type(part) is DefaultPartitioner and part.kind == "murmur2_random" \
                else None
            self.send = _twin.AIOSend(                                   # type: ignore[method-assign]
                self, self.client, self._open, _Batch, RecordFuture, sticky, asyncio.Future, self._loop,
                _complete, self._close_batch, types.MethodType(AIOProducer.send, self), self.buffer_memory,
                self.max_queued_records, YIELD_EVERY)
        if self.txn is not None:
            await self._txn_wait(self.txn.init_transactions(), "init_transactions")

    async def __aenter__(self) -> "AIOProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def stop(self, timeout: float | None = None) -> None:
        """Flush (bounded by `timeout`), then close every connection."""
        if self._closed:
            return
        try:
            if self.client is not None:
                try:
                    await asyncio.wait_for(self.flush(), timeout)
                except (asyncio.TimeoutError, KohortError) as e:
                    log.warning("producer closing with undelivered records: %s", e)
        finally:
            self._closed = True
            self.__dict__.pop("send", None)          # the compiled send refers back to the producer
            self._fail_all(KohortError("the producer was closed"))
            if self._sender is not None:
                self._sender.cancel()
                await asyncio.gather(self._sender, return_exceptions=True)
            for t in list(self._requests):
                t.cancel()
            await asyncio.gather(*self._requests, return_exceptions=True)
            if self.client is not None:
                await self.client.close()

    close = stop

    # -- sending -------------------------------------------------------------------------------------
    async def partitions_for(self, topic: str) -> list[int]:
        self._check()
        return list(await self.client.metadata_for(topic))

    def send(self, topic: str, value: Buffer | None = None, key: Buffer | None = None,
             partition: int | None = None, timestamp_ms: int | None = None,
             headers: list[tuple[str, Buffer | None]] | None = None) -> Awaitable[RecordFuture]:
        """Queue one record; awaiting what send() returns gives the record's RecordFuture (`fut = await
        send(...)`, then `await fut` for its RecordMetadata), as aiokafka's send.

        When the producer is running, the topic's partitions are known and there is room, the record
        goes into its batch here, at the call, and an already completed future is returned: no
        coroutine per record. Otherwise (a new topic's metadata to fetch, more than buffer_memory
        bytes or max_queued_records records queued, the producer not started, closed or failed) a
        coroutine is returned that waits, then appends the record, or raises. Every YIELD_EVERY records
        the returned future completes on the loop's next turn instead, so that a tight loop of
        `await send()` lets the sender task and the application's other tasks run."""
        if self.client is None or self._closed or self._fatal is not None \
                or self._buffered > self.buffer_memory or self._queued >= self.max_queued_records:
            return self._send_waiting(topic, value, key, partition, timestamp_ms, headers)
        parts = self.client.snapshot.topics.get(topic)
        if not parts:
            return self._send_waiting(topic, value, key, partition, timestamp_ms, headers)
        rf = None
        given = partition
        if key is None and headers is None and type(value) is bytes and self.txn is None:
            # _append's commonest case inlined: no key, no headers, no transaction, an open batch of
            # the partition with room, a one-byte timestamp delta (the same bytes append_record writes)
            if partition is None:
                partition = self.partitioner.partition(topic, None, len(parts))
            elif partition not in parts:
                raise for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)(f"{topic}[{partition}] does not exist")
            ts = int(_time() * 1000) if timestamp_ms is None else timestamp_ms
            tp = (topic, partition)
            b = self._open.get(tp)
            if b is not None:
                count = b.count
                tsd = ts - b.base_ts
                vl = len(value)
                if 0 <= tsd < 64 and count < ZZ_TABLE_SIZE and vl < 8000:
                    buf = b.buf
                    offv = ZZ[count]
                    blen = 6 + len(offv) + vl - (vl < 64)
                    added = blen + (1 if blen < 64 else 2)
                    end = len(buf) + added
                    if end <= self.batch_size:
                        buf += b"".join((ZZ[blen], b"\x00", ZZ[tsd], offv, b"\x01", ZZ[vl], value, b"\x00"))
                        b.count = count + 1
                        if ts > b.max_ts:
                            b.max_ts = ts
                        self._buffered += added
                        self._queued += 1
                        if end >= self.batch_size:
                            self._close_batch(tp, b)
                        rf = RecordFuture(b.result, tp, count, ts)
            timestamp_ms = ts
        if rf is None:
            rf = self._append(topic, value, key, given, timestamp_ms, headers, parts)
        f = self._loop.create_future()
        self._sends += 1
        if self._sends % YIELD_EVERY:
            f.set_result(rf)
        else:
            self._loop.call_soon(_complete, f, rf)
        return f

    async def _send_waiting(self, topic: str, value: Buffer | None, key: Buffer | None, partition: int | None,
                            timestamp_ms: int | None, headers: list[tuple[str, Buffer | None]] | None) -> RecordFuture:
        """send()'s path that may wait: for the producer to be usable (else its error), for the topic's
        metadata, for room in the buffer."""
        self._check()
        self._check_txn_open()
        parts = self.client.snapshot.topics.get(topic) or await self.client.metadata_for(topic)
        while self._buffered > self.buffer_memory or self._queued >= self.max_queued_records:
            self._space.clear()
            await self._space.wait()
            self._check()
        rf = self._append(topic, value, key, partition, timestamp_ms, headers, parts)
        self._sends += 1
        if self._sends % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        return rf

    def _check_txn_open(self) -> None:
        txn = self.txn
        if txn is not None and (not txn.has_ongoing_transaction() or txn.is_completing()):
            if txn.has_error():
                raise txn.wrap(txn.last_error)
            raise KohortError("send() outside a transaction: call begin_transaction() first")

    def _append(self, topic: str, value: Buffer | None, key: Buffer | None, partition: int | None,
                timestamp_ms: int | None, headers: list[tuple[str, Buffer | None]] | None, parts) -> RecordFuture:
        """Encode one record into its partition's open batch (a new one when it does not fit)."""
        txn = self.txn
        if txn is not None:
            self._check_txn_open()
        chosen = partition is None
        if chosen:
            partition = self.partitioner.partition(topic, key, len(parts))
        elif partition not in parts:
            raise for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)(f"{topic}[{partition}] does not exist")
        ts = timestamp_ms if timestamp_ms is not None else int(_time() * 1000)
        if value is not None and type(value) is not bytes:
            _check_bytes("value", value)
        if key is not None and type(key) is not bytes:
            _check_bytes("key", key)
        hs = None
        if headers:
            hs = list(headers)
            for _hk, hv in hs:
                _check_bytes("header value", hv)
        tp = (topic, partition)
        if txn is not None:
            txn.maybe_add_partition(tp)
        b = self._open.get(tp)
        if b is None:
            b = self._new_batch(tp, ts)
        buf = b.buf
        n0 = len(buf)
        count = b.count
        tsd = ts - b.base_ts
        if key is None and hs is None and value is not None and 0 <= tsd < 64 and count < ZZ_TABLE_SIZE \
                and len(value) < 8000:
            # the common shape, encoded as records.append_record encodes it: no key, no headers, a
            # timestamp delta of one varint byte, a value length of one or two
            vl = len(value)
            offv = ZZ[count]
            blen = 6 + len(offv) + vl - (vl < 64)      # attributes, ts, key, headers + offset, vlen, value
            buf += b"".join((ZZ[blen], b"\x00", ZZ[tsd], offv, b"\x01", ZZ[vl], value, b"\x00"))
            added = len(buf) - n0
        else:
            added = append_record(buf, count, tsd, key, value, hs)
        if count and len(buf) > self.batch_size:
            del buf[n0:]                   # does not fit: it opens the next batch
            self._close_batch(tp, b)
            if chosen and key is None and self._sticky is not None \
                    and self._sticky.get(topic, partition) != partition:
                # the closed batch moved the sticky partition: the record goes to the new one (KIP-480)
                return self._append(topic, value, key, None, ts, headers, parts)
            b = self._new_batch(tp, ts)
            buf = b.buf
            added = append_record(buf, 0, 0, key, value, hs)
        if ts > b.max_ts:
            b.max_ts = ts
        self._buffered += added
        count = b.count
        b.count = count + 1
        self._queued += 1
        if len(buf) >= self.batch_size:
            self._close_batch(tp, b)
        elif count == 0 and len(self._open) == 1:
            self._wake.set()
        return RecordFuture(b.result, tp, count, ts)

    async def send_and_wait(self, topic: str, value: Buffer | None = None, key: Buffer | None = None,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: list[tuple[str, Buffer | None]] | None = None) -> RecordMetadata:
        return await (await self.send(topic, value, key, partition, timestamp_ms, headers))

    def _new_batch(self, tp, ts: int) -> _Batch:
        now = _now_ms()
        b = _Batch(tp, ts, now, now + self.delivery_timeout_ms, self._loop.create_future(), self.batch_size)
        self._open[tp] = b
        self._pending_batches += 1
        self._idle.clear()
        return b

    def _close_batch(self, tp, b: _Batch) -> None:
        if self._open.get(tp) is b:
            del self._open[tp]
        self._ready.setdefault(tp, deque()).append(b)
        self._wake.set()
        sticky = self._sticky
        if sticky is not None and sticky.get(tp[0]) == tp[1]:
            self._move_sticky(tp)

    def _move_sticky(self, tp) -> None:
        """The sticky partition's batch closed (full, lingered or flushed): null-key records of the
        topic move to another partition with a leader (KIP-480, as the sync producer)."""
        parts = self.client.snapshot.topics.get(tp[0])
        if parts and len(parts) > 1:
            available = [p for p in parts if self.client.leader_for((tp[0], p)) is not None]
            self.partitioner.sticky.on_new_batch(tp[0], len(parts), available, tp[1])

    async def flush(self) -> None:
        """Send everything queued now (no linger) and wait until every batch has its answer."""
        self._check_started()
        self._flushing += 1
        try:
            self._wake.set()
            await self._idle.wait()
        finally:
            self._flushing -= 1

    def _check_started(self) -> None:
        if self.client is None:
            raise KohortError("the producer is not started: await start() first")

    def _check(self) -> None:
        self._check_started()
        if self._closed:
            raise KohortError("the producer is closed")
        if self._fatal is not None:
            raise self._fatal

    # -- the sender task -----------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._closed:
            try:
                wait = await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("producer sender step failed")
                wait = 0.1
            if wait is None or wait > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass

    async def _step(self) -> float | None:
        now = _now_ms()
        wait: float | None = None
        if self.txn is not None:
            wait = self._txn_step(now)
            if (self.txn.producer_id, self.txn.producer_epoch) != (self.producer_id, self.producer_epoch) \
                    and not self._in_flight:
                self.producer_id, self.producer_epoch = self.txn.producer_id, self.txn.producer_epoch
                self._seq.clear()
                self._next_ack.clear()
            if self.producer_id < 0:
                return wait
        elif self.idempotent and self.producer_id < 0:
            if self._pid_future is None or self._pid_future.done():
                self._pid_future = asyncio.ensure_future(self._init_producer_id())
            return 0.05
        # age out open batches whose linger passed (all of them while flushing)
        linger_due = None
        for tp, b in list(self._open.items()):
            if self._flushing or now - b.created >= self.linger_ms:
                self._close_batch(tp, b)
            else:
                due = (b.created + self.linger_ms - now) / 1000
                linger_due = due if linger_due is None else min(linger_due, due)
        # batches of a partition in flight at once: up to MAX_IN_FLIGHT for an idempotent producer
        # outside transactions whose batches are sealed on the loop, once the leader's connection is
        # ready (then each request is sealed and written without waiting, in sequence order) and the
        # partition has acknowledged a batch of the producer id, else one at a time; a batch to retry
        # goes out alone, once nothing of its partition is in flight
        limit = MAX_IN_FLIGHT if self.idempotent and self.txn is None and not self.compression else 1
        in_flight = self._in_flight
        unknown = set()
        while True:
            by_node: dict[int, list[_Batch]] = {}
            for tp, dq in self._ready.items():
                n = in_flight.get(tp, 0)
                if not dq or n >= limit or (n and dq[0].wire is not None):
                    continue
                if self.txn is not None and not self.txn.is_send_to_partition_allowed(tp):
                    continue
                leader = self.client.leader_for(tp)
                if leader is None:
                    unknown.add(tp[0])
                    continue
                if n and (self._unwritten.get(tp) or not self.client.connected(leader)):
                    continue                # an earlier batch's request is not written yet
                if n and tp not in self._next_ack:
                    # the partition has acknowledged nothing of this producer id yet: the broker has no
                    # state for it there and appends any sequence, so a batch behind a failed first one
                    # would land ahead of it; one batch until the first answer
                    continue
                by_node.setdefault(leader, []).append(dq[0])
            if not by_node:
                break
            for node, batches in by_node.items():
                chosen, size = [], 0
                for b in batches:
                    if chosen and size + _size(b) > self.max_request_size:
                        continue
                    chosen.append(b)
                    size += _size(b)
                for b in chosen:
                    self._ready[b.tp].popleft()
                    in_flight[b.tp] = in_flight.get(b.tp, 0) + 1
                    self._unwritten[b.tp] = self._unwritten.get(b.tp, 0) + 1
                    if self.idempotent and b.wire is None:
                        # numbered here, in the partition's order, whatever order the requests find
                        # their connection in (one written early is refused out of order, sent again)
                        seq = self._seq.get(b.tp, 0)
                        self._seq[b.tp] = (seq + b.count) & 0x7FFFFFFF
                        b.sequence, b.producer_id = seq, self.producer_id
                self._requests_add(self._produce(node, chosen))
        if unknown:
            self._requests_add(self.client.refresh_metadata(unknown))
        waits = [w for w in (wait, linger_due) if w is not None]
        if unknown:
            waits.append(self.settings.retry_backoff_ms / 1000)
        return min(waits) if waits else None

    def _requests_add(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._requests.add(t)
        t.add_done_callback(self._request_done)

    def _request_done(self, t: asyncio.Future) -> None:
        self._requests.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.warning("producer request failed: %r", t.exception())
        self._wake.set()

    async def _init_producer_id(self) -> None:
        def build(v: int):
            return InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=2147483647,
                                         producer_id=-1, producer_epoch=-1)
        try:
            resp = await self.client.request(None, Versioned(InitProducerIdRequest.API_KEY, build))
        except KafkaConnectionError as e:
            log.debug("InitProducerId failed: %s", e)
            await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
            return
        if resp.error_code:
            err = for_code(resp.error_code)
            if not err.retriable:
                self._fatal = err("InitProducerId failed")
                self._fail_all(self._fatal)
            return
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        self._seq.clear()
        self._next_ack.clear()
        self._wake.set()

    async def _seal(self, b: _Batch) -> None:
        if b.wire is not None:
            return
        pid, epoch, seq = -1, -1, -1
        if self.idempotent:            # numbered when chosen (_step)
            pid, epoch, seq = b.producer_id, self.producer_epoch, b.sequence
        attrs = ATTR_TRANSACTIONAL if self.txn is not None else 0
        if not self.compression:
            b.wire = seal_batch_in_place(b.buf, b.count, b.base_ts, b.max_ts, attributes=attrs,
                                         producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            return
        build = functools.partial(write_batch_buffer, b.buf[BATCH_HEADER_SIZE:], b.count, b.base_ts, b.max_ts,
                                  compression=self.compression, attributes=attrs,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        if len(b.buf) >= OFF_LOOP_BYTES:
            b.wire = await asyncio.to_thread(build)
        else:
            b.wire = build()

    async def _produce(self, node: int, batches: list[_Batch]) -> None:
        try:
            for b in batches:
                await self._seal(b)
        except BaseException as e:
            for b in batches:
                self._unwritten[b.tp] -= 1
                self._landed(b.tp)
                self._finish(b, -1, -1, e if isinstance(e, Exception) else KohortError("sealing cancelled"))
            raise
        by_topic: dict[str, list] = {}
        for b in batches:
            b.attempts += 1
            by_topic.setdefault(b.tp[0], []).append((b.tp[1], b.wire))
        req = produce_request(self.txn.transactional_id if self.txn else None, self.acks,
                              self.settings.request_timeout_ms, by_topic.items())
        results: dict = {}
        err: BaseException | None = None
        try:
            try:
                conn = await self.client.connection(node)
            finally:
                more = False
                for b in batches:            # written below without waiting, or failed
                    self._unwritten[b.tp] -= 1
                    more = more or bool(self._ready.get(b.tp))
                if more:                     # the sender may put the next batch of a partition in flight
                    self._wake.set()
            if self.acks == 0:
                conn.send(req, max_version=PRODUCE_MAX_VERSION, expect_response=False)
            else:
                resp = await conn.request(req, timeout_ms=self.settings.request_timeout_ms,
                                          max_version=PRODUCE_MAX_VERSION, min_version=3)
                for t in resp.responses:
                    for pr in t.partition_responses:
                        results[(t.name, pr.index)] = pr
        except (KafkaConnectionError, KafkaTimeoutError) as e:
            err = e
        except asyncio.CancelledError:
            for b in batches:
                self._landed(b.tp)
            raise
        refresh = False
        for b in batches:
            self._landed(b.tp)
            if self.acks == 0:
                self._finish(b, -1, -1, None)
                continue
            if err is not None:
                self._retry_or_fail(b, err)
                refresh = True
                continue
            pr = results.get(b.tp)
            if pr is None:
                self._retry_or_fail(b, KafkaConnectionError("the broker did not answer for this partition"))
                continue
            code = pr.error_code
            if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                if b.sequence >= 0 and b.producer_id == self.producer_id:
                    nxt = (b.sequence + b.count) & 0x7FFFFFFF
                    if nxt > self._next_ack.get(b.tp, 0) or nxt < b.sequence:
                        self._next_ack[b.tp] = nxt
                self._finish(b, pr.base_offset, pr.log_append_time_ms, None, pr.log_start_offset)
            elif code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and b.sequence >= 0 \
                    and b.producer_id == self.producer_id \
                    and 0 < (b.sequence - self._next_ack.get(b.tp, 0)) & 0x7FFFFFFF < 1 << 30:
                # behind a batch of its partition not acknowledged yet (failed, going out again first):
                # sent again after it
                self._retry_or_fail(b, for_code(code)(pr.error_message or ""))
            elif code in _RETRIABLE_PRODUCE:
                refresh = True
                self._retry_or_fail(b, for_code(code)(pr.error_message or ""))
            else:
                e = for_code(code)(f"{b.tp[0]}[{b.tp[1]}]: {pr.error_message or ''}")
                if self.txn is not None:
                    self.txn.handle_failed_batch(e)
                elif self.idempotent and code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                                  ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_EPOCH):
                    self.producer_id = -1        # a new producer id restarts every sequence (KIP-360)
                self._finish(b, -1, -1, e)
        if refresh:
            await self.client.refresh_metadata()

    def _landed(self, tp) -> None:
        """A batch of `tp` is no longer in flight."""
        n = self._in_flight.get(tp, 0) - 1
        if n > 0:
            self._in_flight[tp] = n
        else:
            self._in_flight.pop(tp, None)

    def _retry_or_fail(self, b: _Batch, err: BaseException) -> None:
        if _now_ms() < b.deadline and not self._closed:
            # back in front of the partition's queue, among the other batches to retry by sequence
            dq = self._ready.setdefault(b.tp, deque())
            i = 0
            while i < len(dq) and dq[i].wire is not None and dq[i].sequence < b.sequence:
                i += 1
            dq.insert(i, b)
            return
        if self.txn is not None:
            self.txn.handle_failed_batch(err)
        elif self.idempotent:
            self.producer_id = -1
        self._finish(b, -1, -1, KafkaTimeoutError(f"{b.count} record(s) for {b.tp[0]}[{b.tp[1]}] expired after "
                                                  f"delivery_timeout_ms={self.delivery_timeout_ms}: {err}"))

    def _finish(self, b: _Batch, base_offset: int, append_time: int, err: BaseException | None,
                log_start: int = -1) -> None:
        """Complete the batch's shared future: every record's RecordFuture reads its result from it."""
        self._buffered -= len(b.buf) - BATCH_HEADER_SIZE
        self._space.set()
        self._queued -= b.count
        if not b.result.done():
            if err is not None:
                b.result.set_exception(err)
            else:
                b.result.set_result(BatchResult(base_offset, append_time if append_time is not None else -1,
                                                log_start))
        self._pending_batches -= 1
        if self._pending_batches == 0:
            self._idle.set()
        self._txn_changed.set()

    def _fail_all(self, err: BaseException) -> None:
        for tp, b in list(self._open.items()):
            self._finish(b, -1, -1, err)
        self._open.clear()
        for dq in self._ready.values():
            while dq:
                self._finish(dq.popleft(), -1, -1, err)
        if self.txn is not None:
            self.txn.fail_all(err)
        self._txn_changed.set()

    # -- transactions --------------------------------------------------------------------------------
    def _txn_step(self, now: int) -> float:
        m = self.txn
        if m.has_abortable_error() or m.is_aborting() or m.has_fatal_error():
            cause = TransactionAbortedError("the transaction was aborted before this record was sent" +
                                            (f" ({m.last_error})" if m.last_error is not None else ""))
            for tp, b in list(self._open.items()):
                del self._open[tp]
                self._finish(b, -1, -1, cause)
            for dq in self._ready.values():
                keep = [b for b in dq if b.wire is not None]
                for b in dq:
                    if b.wire is None:
                        self._finish(b, -1, -1, cause)
                dq.clear()
                dq.extend(keep)
        if self._txn_in_flight:
            return m.next_wakeup_ms(now) / 1000
        incomplete = self._pending_batches > 0
        req = m.next_request(now, incomplete)
        if req is not None:
            self._txn_in_flight = True
            self._requests_add(self._txn_send(req))
        return m.next_wakeup_ms(now) / 1000

    async def _txn_send(self, req) -> None:
        node = None
        if req.node is not None:
            node_id, host, port = req.node
            node = 0x7FFFFFFF - node_id
            self.client.set_node_address(node, host, port)
        try:
            conn = await self.client.connection(node)
            version, fut = conn.send(Versioned(req.api_key, req.build, req.max_version))
            resp = await asyncio.wait_for(asyncio.shield(fut), self.settings.request_timeout_ms / 1000)
        except asyncio.CancelledError:
            self._txn_in_flight = False
            raise
        except Exception as e:
            self.txn.handle_failure(req, e, _now_ms())
        else:
            if req.api == "InitProducerId":
                self.txn.coordinator_supports_bump = version >= 3
            self.txn.handle_response(req, resp, _now_ms())
        finally:
            self._txn_in_flight = False
            self._txn_changed.set()
            self._wake.set()

    async def _txn_wait(self, result, operation: str, flush: bool = False) -> None:
        if flush:
            self._flushing += 1
        try:
            self._wake.set()
            while not result.done:
                self._txn_changed.clear()
                await self._txn_changed.wait()
        finally:
            if flush:
                self._flushing -= 1
        result.acked = True
        if result.error is not None:
            raise self.txn.wrap(result.error) from result.error

    def _txn_manager(self) -> TransactionManager:
        if self.txn is None:
            raise KohortError("transactions need a transactional_id")
        self._check()
        return self.txn

    async def begin_transaction(self) -> None:
        m = self._txn_manager()
        try:
            m.begin_transaction()
        except KafkaError as e:
            raise m.wrap(e) from e

    async def send_offsets_to_transaction(self, offsets: dict, group) -> None:
        """`offsets` {TopicPartition: OffsetAndMetadata or next offset}; `group` a group id or the
        consumer's group metadata (AIOConsumer.group_metadata())."""
        from kohort.structs import ConsumerGroupMetadata, OffsetAndMetadata
        m = self._txn_manager()
        offs = {}
        for tp, o in offsets.items():
            om = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o), "", None)
            offs[(tp[0], tp[1])] = (om.offset, om.metadata, om.leader_epoch)
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group, -1, "", None)
        await self._txn_wait(m.send_offsets(offs, group), "send_offsets_to_transaction")

    async def commit_transaction(self) -> None:
        m = self._txn_manager()
        await self._txn_wait(m.begin_commit(), "commit_transaction", flush=True)

    async def abort_transaction(self) -> None:
        m = self._txn_manager()
        await self._txn_wait(m.begin_abort(), "abort_transaction", flush=True)


__all__ = ["AIOProducer", "OFF_LOOP_BYTES", "RecordMetadata"]
