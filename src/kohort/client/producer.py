"""The Kafka producer: `Producer(config).produce(topic, value, key=...) -> DeliveryFuture`.

What lives here:

* `Producer`: the public API (`produce`, `flush`, `close`, `partitions_for`), configured by Kafka's
  dotted names (`kohort.client.config`, role "producer"). Records are encoded into per-partition
  batches on the caller's thread (`accumulator.py`).
* `_Sender`: the I/O — metadata for the topics in use (refreshed when leaders move: NOT_LEADER,
  disconnects, unknown leaders), draining batches per leader, `max.in.flight.requests.per.connection`,
  retries with backoff within `delivery.timeout.ms` (KIP-91). Its sockets are those of a
  caller-driven `NetworkClient` (the client's one network layer: handshake, versions, timeouts,
  reconnect backoff): the thread calling produce() polls it when a batch fills and every TICK_MS
  while it produces, and flush() and the transactional waits poll it while they wait; a background
  thread polls it otherwise. Compressed batches are sealed off the producing thread
  (client/sealer.py): gzip/lz4/zstd on the compiled twin's native sealer thread, which never takes
  the GIL (submitted here, collected at every I/O step, requests sent in the order they were made:
  `_Sender.sealing`; outside a transaction SEAL_AHEAD requests beyond max.in.flight are compressed
  while the others are on the wire, numbered as they leave); snappy, or a codec whose library is
  missing, on the `Sealer`'s Python thread when a request is slow to compress.
* Idempotence (KIP-98, on by default as in Kafka 3.0+, KIP-679): InitProducerId, per-partition
  sequence numbers assigned once when a batch is first sent and kept on retry (the same bytes are
  re-sent); a partition with a batch to retry sends nothing else until the retries go out in sequence
  order. Up to 5 batches of a partition are in flight once it has acknowledged a batch of the current
  producer id/epoch; before that one (a broker with no state for the producer id appends any sequence,
  so a batch behind a failed first one would land ahead of it). OUT_OF_ORDER_SEQUENCE_NUMBER for a batch behind a failed one is retried; for the next expected
  batch, and UNKNOWN_PRODUCER_ID, the producer waits until nothing is in flight, takes a new producer
  id/epoch and renumbers every unacknowledged batch from 0 in order (KIP-360's epoch bump, simplified).
  DUPLICATE_SEQUENCE_NUMBER counts as success.
* Transactions (KIP-98, `transactional.id`): `init_transactions`, `begin_transaction`,
  `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`. The state machine is
  client/txn_manager.py (Java's TransactionManager); here `_Sender._txn_step` learns the broker's
  finalized transaction.version (transactions v2, KIP-890 part 2, at >= 2), sends the manager's
  requests, holds a partition's batches back until AddPartitionsToTxn added it (v1), seals them with
  the transactional flag, drops unsent batches of an aborted transaction, adopts the epoch each
  EndTxn v5 bumps, and the application's calls wait on `_txn_cond`. A batch answered
  CONCURRENT_TRANSACTIONS (v2: its partition could not be added while the previous transaction was
  completing) is retried after 20 ms, as Java retries AddPartitionsToTxn in that window.

Connection errors become one clear line naming the addresses tried and what to do
(`network.unreachable_message`, shared by every client).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from kohort.client import accumulator
from kohort.client.accumulator import DeliveryFuture, RecordAccumulator, RecordMetadata
from kohort.client.batch_produce import BatchDeliveryFuture, ProduceBatchError, produce_batch
from kohort.client.cluster import Cluster
from kohort.client.config import load_config, parse_bootstrap
from kohort.client.stats import ClientStats
from kohort.client.network import NetworkClient, unreachable_message
from kohort.protocol.framing import Versioned
from kohort.client.partitioner import DefaultPartitioner, murmur2
from kohort.client.sealer import Sealer, codec_level, native_sealer
from kohort.client.txn_manager import ADD_PARTITIONS_RETRY_BACKOFF_MS, TransactionManager
from kohort.errors import (
    ConfigError,
    ErrorCode,
    IncompatibleBrokerVersionError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    KohortError,
    RecordTooLargeError,
    TransactionAbortedError,
    for_code,
)
from kohort.protocol.compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest
from kohort.protocol.messages.produce import OnePartitionProduceResponse, ProduceRequest, produce_request
from kohort.protocol.records import ATTR_TRANSACTIONAL, producer_twin, set_batch_producer

_CODECS = {"none": COMPRESSION_NONE, "gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY,
           "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}
_PRODUCE_MIN_VERSION = 3            # the v2 record format (KIP-98)
_PRODUCE_MAX_VERSION = 12           # v13 addresses topics by id only (KIP-516)


_time_ns = time.time_ns
_monotonic_ns = time.monotonic_ns
# While a thread is producing, it takes a turn at the I/O (Sender.poke) at most this often, so that
# batches go out and answers are read without a hand-over of the GIL to the I/O thread (which waits
# up to sys.getswitchinterval(), 5 ms, each time while the producing thread runs Python code).
TICK_MS = 1.0
# Transactions v2 on a broker that answers EndTxn before it writes the markers (Apache Kafka): a next
# transaction whose first Produce reaches the partition leader meanwhile is held there, retried every
# 20 ms. Once that has been seen (a transaction's first batch on a partition answered after
# HELD_FIRST_PRODUCE_MS or more), the first batches of the next MARKER_GAP_TXNS transactions leave
# MARKER_GAP_MS after EndTxn's answer, the time the markers take there.
MARKER_GAP_MS = 1.0
HELD_FIRST_PRODUCE_MS = 15.0
MARKER_GAP_TXNS = 200
# The I/O thread ends its wait for a lingering batch this long before the batch is due, takes a turn
# that rehearses the batch's Produce request (`_Sender._rehearse`), then waits the rest: the send
# path's Python code runs warm at the deadline, and a short wait ends closer to its deadline than a
# wait of milliseconds (measured 30 µs late against 50). At 1,000 records/s (busy machine, medians of
# 3-5 runs) the deadline -> socket write was 185-212 µs with it, 222-270 without, on kohort broker
# and on Kafka 4.3.1, for about 7-10 ms/s more CPU.
REHEARSAL_MS = 0.2
_REHEARSAL_RECORDS = bytes(61)       # what a rehearsed request carries in place of a batch's bytes
_REHEARSAL_BATCHES = 4               # the code is what is warmed: a few partitions are enough
# When a poke holds io_lock as the I/O thread's wait ends, the I/O thread looks again after about one
# poke's turn; finding it held again (a producing thread turning at the I/O back to back, or waiting
# in flush()), it sleeps 2 ms. Queueing on the lock instead puts both threads on the GIL turn after
# turn (10-20% of records/s on the 100 B and 1 KiB rows); sleeping 2 ms at once leaves an answer
# arriving meanwhile to the producing thread's next poke (up to a TICK_MS later) or to the sleep's end.
_COLLIDED_SLEEP_S = 0.00025
_BUSY_SLEEP_S = 0.002


_NO_LOCK = contextlib.nullcontext()
# A request whose batches take longer than this to seal (compress) is sealed on the Sealer's thread:
# the hand-over of the GIL to it can take a switch interval while the producing thread runs Python.
_HANDOFF_S = sys.getswitchinterval()
# With the native sealer and no transaction, up to SEAL_AHEAD requests per connection beyond
# max.in.flight.requests.per.connection are drained and handed to the sealer while the others are on
# the wire, so a request answered makes room for one already compressed. Such a request counts
# against max.in.flight, and its batches take their producer id/epoch and sequence numbers (written
# into the sealed header, CRC again: `records.set_batch_producer`), only when it leaves the sealer:
# a partition never has more than 5 numbered batches unacknowledged, the broker's window of
# duplicate detection (Kafka's ProducerStateEntry keeps the last 5 batches' metadata). Measured on
# kohort broker (busy machine), 16 KiB lz4 rows: about 0.5 of the 5 slots were held by requests
# still being compressed.
SEAL_AHEAD = 2


def _always(_node) -> bool:
    return True


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


_INF = float("inf")


def _precise_timer_slack() -> None:
    """Linux: the calling thread's timed waits (select's timeout) end within a microsecond of their
    deadline instead of up to 50 µs after it (prctl PR_SET_TIMERSLACK, per thread): the producer's
    I/O thread wakes when a batch's linger.ms ends. Elsewhere, or if prctl is missing, nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_PR_SET_TIMERSLACK = 29


def _linger_clock_ms() -> float:
    """The accumulator's clock: milliseconds with a fraction, so that a batch is sent linger.ms after
    its first record, not up to a millisecond either side of it (whole milliseconds would round both
    the batch's creation and the moment it is looked at)."""
    return time.monotonic() * 1000.0


# -- cluster metadata (producer's view) ----------------------------------------------------------------
class _TopicInfo:
    __slots__ = ("name", "num_partitions", "leaders", "available", "error")

    def __init__(self, name, num_partitions, leaders, error=0):
        self.name = name
        self.num_partitions = num_partitions
        self.leaders = leaders                              # partition -> node id (or -1)
        self.available = [p for p, n in sorted(leaders.items()) if n >= 0]
        self.error = error


# -- the producer --------------------------------------------------------------------------------------
class Producer:
    """A Kafka producer. `produce()` is thread-safe and returns a DeliveryFuture per record."""

    def __init__(self, config: dict[str, Any] | None = None, **overrides: Any) -> None:
        cfg = dict(config or {})
        cfg.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.config = c = load_config("producer", cfg)
        self.bootstrap = parse_bootstrap(c["bootstrap.servers"])
        self.client_id = c["client.id"]
        self.acks = c["acks"]
        self.idempotent = bool(c["enable.idempotence"] and self.acks == -1
                               and c["max.in.flight.requests.per.connection"] <= 5)
        self._txn = None                       # the TransactionManager of a transactional producer
        if c["transactional.id"] is not None:
            self._txn = _transactional_setup(c)
            self.idempotent = True
        self._txn_cond = threading.Condition()
        self.compression = _CODECS[c["compression.type"]]
        self.compression_level = codec_level(self.compression, c)    # compression.<codec>.level, KIP-390
        self.max_request_size = c["max.request.size"]
        self._max_record = min(self.max_request_size, c["buffer.memory"]) - 200   # cheap pre-check bound
        self.max_block_ms = c["max.block.ms"]
        self.request_timeout_ms = c["request.timeout.ms"]
        self.delivery_timeout_ms = c["delivery.timeout.ms"]
        self.retries = c["retries"]
        self.max_in_flight = c["max.in.flight.requests.per.connection"]
        self._key_ser = c["key.serializer"]
        self._value_ser = c["value.serializer"]
        custom = c["partitioner.class"]
        self._custom_partitioner = custom
        self._ignore_keys = c["partitioner.ignore.keys"]
        self.partitioner = DefaultPartitioner()
        self._sticky_now = self.partitioner.sticky._sticky    # topic -> current sticky partition
        self._hash_cache: dict[bytes, int] = {}              # key -> positive murmur2 (bounded)
        self._has_serializers = self._key_ser is not None or self._value_ser is not None
        self._topics: dict[str, _TopicInfo] = {}
        self._meta_cond = threading.Condition()
        self._closed = False
        self._next_tick_ns = 0
        self.acc = RecordAccumulator(
            batch_size=max(c["batch.size"], 1), linger_ms=c["linger.ms"], buffer_memory=c["buffer.memory"],
            max_block_ms=c["max.block.ms"], delivery_timeout_ms=c["delivery.timeout.ms"],
            retry_backoff_ms=c["retry.backoff.ms"], clock_ms=_linger_clock_ms, on_new_batch=self._on_batch_closed)
        self.sender = _Sender(self)
        self.stats = ClientStats.from_config("producer", c, self.sender.net)    # stats_cb, or None
        self.acc.wakeup = self.sender.wakeup
        self.acc.linger_started = self.sender.linger_started
        twin = producer_twin() if accumulator.COMPILED else None
        self._compiled_runs = twin is not None     # produce_batch appends its runs in C (batch_produce.py)
        if twin is not None and type(self).produce is Producer.produce:
            # the common case of produce() in C (records.producer_twin); it hands every other case
            # to the Python produce below, which stays the reference. A transactional producer's
            # records go the C way only to partitions its transaction manager already holds
            # (TransactionManager.sendable); the Python produce asks it (maybe_add_partition). A batch
            # out of reserved room is grown by the accumulator's rule (acc._grow) from C as well, so
            # only the record opening a batch goes to Python, whatever the records' size. With the
            # native sealer it pokes as soon as sealed batches wait (not at the next TICK_MS): a
            # sealed request waiting for a tick would leave about a tick later, and in a transaction
            # (no SEAL_AHEAD) it holds one of the 5 slots from drain (16 KiB zstd: 1.6 ms median from
            # drain to the wire, 0.26 of it compressing).
            self.produce = self.send = twin.FastProduce(
                self, self.sender, self.sender.net, self.acc.batches, self.acc.lock, self._sticky_now,
                DeliveryFuture, types.MethodType(Producer.produce, self), self._batch_full,
                -1 if custom is not None else 0 if self._ignore_keys else 1, self._max_record,
                self.sender.tick, TICK_MS, None if self._txn is None else self._txn.sendable, self.acc._grow,
                self.sender.native)
        self.sender.thread.start()

    # -- public API -----------------------------------------------------------------------------------
    def produce(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                headers: Iterable[tuple[str, bytes | str | None]] | None = None, partition: int | None = None,
                timestamp: int | None = None,
                on_delivery: Callable[[Exception | None, Any], None] | None = None) -> DeliveryFuture:
        """Queue one record; returns its future (thread-safe).

        on_delivery(err, metadata) runs where the I/O happens: on the producer's I/O thread, or inside
        a produce()/flush() call of the producing thread (as librdkafka runs callbacks in poll())."""
        if self._closed:
            raise KohortError("produce() on a closed producer")
        fatal = self.sender.fatal or self.sender.net.fatal      # net: an authentication failure
        if fatal is not None:
            raise fatal
        key, value, partition, sticky = self._prepare(topic, value, key, headers, partition)
        if self._txn is not None:
            self._txn_add(topic, partition)
        fut, wake = self._enqueue(topic, partition, key, value, headers, timestamp)
        if on_delivery is not None:
            fut.add_done_callback(_delivery_adapter(on_delivery))
        if wake:
            self._batch_full(topic, partition, sticky)
        elif _monotonic_ns() >= self._next_tick_ns:
            self._next_tick_ns = _monotonic_ns() + int(TICK_MS * 1e6)
            self.sender.tick()
        if self.stats is not None:
            self.stats.maybe_emit(self._stats_extra)
        return fut

    def produce_batch(self, topic: str, values: Any, keys: Any = None, partition: Any = None,
                      timestamps: Any = None, headers: Any = None) -> BatchDeliveryFuture:
        """Queue many records for `topic` in one call; returns one BatchDeliveryFuture for all of them.

        values, keys: lists of bytes/str/None, or pyarrow arrays (binary, large_binary, string,
        large_string; nulls are null values/keys), keys None for no keys. partition: None (the
        partitioner: murmur2 of the key, sticky for null keys, as produce()), an int for every record,
        or a list/array of ints or None per record. timestamps: None (now), an int for all, or one per
        record. headers: None or one list of (key, value) pairs (or None) per record.

        Records go exactly as if produce() were called for each in order (same batches, partitions,
        sequence numbers, transaction partitions, buffer.memory back-pressure up to max.block.ms). A
        record produce() would refuse (bad type, too large, no such partition) is reported by the
        future's failures() and the others go on; if the producer cannot go on (closed, fatal, buffer
        full past max.block.ms) the rest are failed with that error -- raised instead when no record
        was queued yet. The future: wait(), done(), result() (raises ProduceBatchError naming the
        failed records), failures() -> {index: error}, metadata(i), add_done_callback(fn)."""
        return produce_batch(self, topic, values, keys, partition, timestamps, headers)

    def _prepare(self, topic, value, key, headers, partition):
        """produce()'s per-record checks and partitioner: -> (key, value, partition, chosen_by_sticky)."""
        if self._has_serializers:
            if self._key_ser is not None and key is not None:
                key = self._key_ser(key)
            if self._value_ser is not None and value is not None:
                value = self._value_ser(value)
        if value is not None and value.__class__ is not bytes:
            value = _as_bytes("value", value)
        if key is not None and key.__class__ is not bytes:
            key = _as_bytes("key", key)
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if size > self._max_record:
            self._check_record_size(size, headers)
        info = self._topics.get(topic)
        if info is None or info.error:
            info = self._wait_for_topic(topic)
        n = info.num_partitions
        sticky = False
        if partition is None:
            if self._custom_partitioner is not None:
                partition = self._custom_partitioner(topic, key, n)
            elif key is None or self._ignore_keys:
                partition = self._sticky_now.get(topic)
                if partition is None or partition >= n:
                    partition = self.partitioner.sticky.partition(topic, n, info.available)
                sticky = True
            else:
                h = self._hash_cache.get(key)
                if h is None:
                    h = murmur2(key) & 0x7FFFFFFF
                    if len(self._hash_cache) < 65536 and len(key) <= 256:
                        self._hash_cache[key] = h       # keys repeat: hash each once
                partition = h % n
        elif not 0 <= partition < n:
            raise KohortError(f"topic {topic!r} has partitions 0..{n - 1}; partition {partition} does not exist")
        return key, value, partition, sticky

    def _enqueue(self, topic, partition, key, value, headers, timestamp):
        """Append one record to its partition's batch (opening one, under buffer.memory): -> (future,
        the batch is full)."""
        if timestamp is None:
            timestamp = _time_ns() // 1_000_000
        acc = self.acc
        fut = None
        with acc.lock:     # the common case inline: the partition's open batch has room
            dq = acc.batches.get((topic, partition))
            if dq:
                last = dq[-1]
                if not last.closed:
                    fut = last.try_append(key, value, headers, timestamp)
                    wake = last.closed
        if fut is None:
            fut, wake = acc.append(topic, partition, key, value, headers, timestamp)
        return fut, wake

    send = produce

    def _batch_full(self, topic: str, partition: int, sticky: bool) -> None:
        """A record filled its batch: stick to another partition (KIP-480) and send it now."""
        self._next_tick_ns = _monotonic_ns() + int(TICK_MS * 1e6)
        if sticky:
            info = self._topics.get(topic)
            if info is not None:
                self.partitioner.sticky.on_new_batch(topic, info.num_partitions, info.available, partition)
        self.sender.poke()
        if self.stats is not None:      # produce()'s compiled common case comes here once per full batch
            self.stats.maybe_emit(self._stats_extra)

    def _check_record_size(self, size: int, headers) -> None:
        size += 90 + sum(len(k) + (len(v) if v is not None else 0) for k, v in (headers or ()))
        if size > self.max_request_size:
            raise RecordTooLargeError(f"a record of about {size} bytes is larger than max.request.size="
                                      f"{self.max_request_size}")
        if size > self.config["buffer.memory"]:
            raise RecordTooLargeError(f"a record of about {size} bytes is larger than buffer.memory="
                                      f"{self.config['buffer.memory']}")

    def emit_statistics(self) -> None:
        """Call stats_cb if statistics.interval.ms has passed (produce() and flush() do this too)."""
        if self.stats is not None:
            self.stats.maybe_emit(self._stats_extra)

    def _stats_extra(self) -> dict:
        with self.acc.lock:
            queued = sum(b.count for b in self.acc.incomplete)
        return {"addresses": dict(self.sender.nodes), "msg_cnt": queued}

    def add_disconnect_listener(self, fn: Callable[..., Any]) -> None:
        """fn(node_id, error) is called whenever a broker connection is lost."""
        self.sender.net.add_disconnect_listener(fn)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for the outcome; returns how many records are still pending."""
        self.emit_statistics()
        acc = self.acc
        deadline = None if timeout is None else time.monotonic() + timeout
        with acc.lock:
            acc.flushing += 1
        sender = self.sender
        try:
            sender.wakeup()
            while True:
                with acc.lock:
                    pending = next(iter(acc.incomplete), None)
                if pending is None:
                    return 0
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    with acc.lock:
                        return sum(x.count for x in acc.incomplete)
                wait = 0.05 if left is None else min(left, 0.05)
                if sender.io_lock.acquire(False):
                    # this thread drives the I/O while it waits (answers handled, batches sent at
                    # once, no hand-over of the GIL to the I/O thread)
                    try:
                        sender.step(wait)
                    finally:
                        sender.io_lock.release()
                else:
                    pending.event().wait(wait)
        finally:
            with acc.lock:
                acc.flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the I/O thread and close connections. A transactional producer with a
        transaction open aborts it first (as Java's producer does on close)."""
        if self._closed:
            return
        try:
            if self._txn is not None:
                self._txn_abort_on_close(timeout)
            self.flush(timeout)
        finally:
            self._closed = True
            if self._txn is not None:
                with self._txn_cond:
                    self._txn.fail_all(KohortError("the producer was closed"))
                    self._txn_cond.notify_all()
            self.sender.stop()

    # -- transactions (KIP-98): the state machine is client/txn_manager.py ---------------------------
    def init_transactions(self, timeout: float | None = None) -> None:
        """Get this transactional.id's producer id and epoch (fencing older producers with the same id and
        completing their transactions). Once per producer; a call that timed out may be repeated."""
        self._txn_run(lambda m: m.init_transactions(), timeout, "init_transactions")

    def begin_transaction(self) -> None:
        """Start a transaction (local only: the broker hears of it with the first record or offsets)."""
        m = self._txn_manager()
        with self._txn_cond:
            self._txn_call(m.begin_transaction)

    def send_offsets_to_transaction(self, offsets: dict[Any, Any], group_metadata: Any,
                                    timeout: float | None = None) -> None:
        """Commit the consumer's `offsets` ({TopicPartition: OffsetAndMetadata or int}: the next record to
        read) as part of the transaction, for the group of `group_metadata` (Consumer.group_metadata():
        the broker refuses a consumer that has been rebalanced out, KIP-447)."""
        norm = {}
        for tp, om in offsets.items():
            tp = tuple(tp)
            if isinstance(om, int):
                norm[tp] = (om, "", None)
            else:
                norm[tp] = (om.offset, om.metadata if om.metadata is not None else "", om.leader_epoch)
        self._txn_run(lambda m: m.send_offsets(norm, group_metadata), timeout, "send_offsets_to_transaction")

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send everything queued, then commit (EndTxn after every record is acknowledged). Raises
        AbortableTransactionError (abort and go on) or FatalTransactionError (close the producer);
        KafkaTimeoutError: the outcome is not known yet, call commit_transaction() again."""
        self._txn_run(lambda m: m.begin_commit(), timeout, "commit_transaction", flush=True)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent are dropped, sent ones are never read by
        read_committed consumers."""
        self._txn_run(lambda m: m.begin_abort(), timeout, "abort_transaction", flush=True)

    def _txn_manager(self):
        if self._txn is None:
            from kohort.errors import IllegalTransactionStateError
            raise IllegalTransactionStateError("a transactional method was called on a producer without "
                                               "transactional.id")
        if self._closed:
            raise KohortError("the producer is closed")
        return self._txn

    def _txn_call(self, fn):
        try:
            return fn()
        except KafkaError as e:           # a wire error met outside a result: classify it
            raise self._txn.wrap(e) from e

    def _txn_add(self, topic: str, partition: int) -> None:
        with self._txn_cond:
            self._txn.maybe_add_partition((topic, partition))

    def _txn_run(self, start, timeout, operation: str, flush: bool = False) -> None:
        m = self._txn_manager()
        with self._txn_cond:
            result = self._txn_call(lambda: start(m))
        self._txn_wait(result, timeout, operation, flush)

    def _txn_wait(self, result, timeout, operation: str, flush: bool) -> None:
        t = self.max_block_ms / 1000.0 if timeout is None else timeout
        deadline = time.monotonic() + t
        acc = self.acc
        if flush:                         # no linger: everything queued goes out now (Java's beginFlush)
            with acc.lock:
                acc.flushing += 1
        try:
            self.sender.wakeup()
            sender = self.sender
            while not result.done:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaTimeoutError(f"{operation}() did not complete within {t:g}s; its outcome is "
                                            f"not known yet: call {operation}() again to wait for it")
                if sender.io_lock.acquire(False):
                    # this thread drives the I/O while it waits: each answer is handled, and the next
                    # request (EndTxn once the batches are acknowledged) sent, without a hand-over of
                    # the GIL to the I/O thread
                    try:
                        if not result.done:
                            sender.step(min(left, 0.05))
                    finally:
                        sender.io_lock.release()
                    continue
                with self._txn_cond:
                    if not result.done:
                        self._txn_cond.wait(min(left, 0.2))
        finally:
            if flush:
                with acc.lock:
                    acc.flushing -= 1
        result.acked = True               # seen: the next operation may start (Java's isAcked)
        if result.error is not None:
            with self._txn_cond:
                raise self._txn.wrap(result.error) from result.error

    def _txn_abort_on_close(self, timeout) -> None:
        m = self._txn
        with self._txn_cond:
            if not m.has_ongoing_transaction() or m.is_completing() or m.has_fatal_error():
                return
            try:
                result = m.begin_abort()
            except KohortError:
                return
        try:
            self._txn_wait(result, 5.0 if timeout is None else timeout, "abort_transaction", True)
        except KohortError:
            pass

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._wait_for_topic(topic).num_partitions))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals ------------------------------------------------------------------------------------
    def _on_batch_closed(self, topic: str, partition: int) -> None:
        info = self._topics.get(topic)
        if info is not None:
            self.partitioner.sticky.on_new_batch(topic, info.num_partitions, info.available, partition)

    def _wait_for_topic(self, topic: str) -> _TopicInfo:
        if not isinstance(topic, str) or not topic:
            raise KohortError(f"topic must be a non-empty string, got {topic!r}")
        deadline = time.monotonic() + self.max_block_ms / 1000.0
        with self._meta_cond:
            while True:
                info = self._topics.get(topic)
                if info is not None and not info.error:
                    return info
                if info is not None and info.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    # fatal for this topic, as Java's Metadata.maybeThrowExceptionForTopic: no waiting
                    self.sender.forget_topic(topic)
                    raise for_code(info.error)(f"topic {topic!r}: the principal may not describe or write it")
                fatal = self.sender.fatal or self.sender.net.fatal
                if fatal is not None:
                    raise fatal
                self.sender.want_topic(topic)
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._meta_cond.wait(min(left, 0.2))
        self.sender.forget_topic(topic)
        if self.sender.connect_errors and not self.sender.ever_connected:
            raise KafkaConnectionError(unreachable_message(
                [f"{h}:{p}" for h, p in self.bootstrap], self.sender.connect_errors, self.max_block_ms / 1000))
        if info is not None and info.error:
            err = for_code(info.error)
            raise err(f"topic {topic!r}: {err.description} (waited max.block.ms={self.max_block_ms}); "
                      f"create it first (kohort topics create {topic}) or check the name")
        raise KafkaTimeoutError(f"topic {topic!r} not found in the cluster metadata within max.block.ms="
                                f"{self.max_block_ms}; create it first (kohort topics create {topic})")


def _transactional_setup(c):
    """A transactional producer's checks (Java's ProducerConfig) and its TransactionManager."""
    if "enable.idempotence" in c.given and not c["enable.idempotence"]:
        raise ConfigError("transactional.id needs enable.idempotence=true (transactions are idempotent)")
    if c["acks"] != -1:
        raise ConfigError("transactional.id needs acks=all (-1)")
    if c["max.in.flight.requests.per.connection"] > 5:
        raise ConfigError("transactional.id needs max.in.flight.requests.per.connection <= 5")
    return TransactionManager(c["transactional.id"], c["transaction.timeout.ms"], c["retry.backoff.ms"])


def _as_bytes(what: str, v):
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytes):
        return v
    raise KohortError(f"record {what} must be bytes or str (or set {what}.serializer), "
                      f"not {type(v).__name__}")


def _delivery_adapter(fn):
    def cb(fut: DeliveryFuture):
        b = fut.batch
        if b.error is not None:
            fn(b.error, None)
        else:
            fn(None, fut._metadata())
    return cb


# -- the I/O thread ------------------------------------------------------------------------------------
class _PartitionState:
    """Idempotence bookkeeping for one partition."""
    __slots__ = ("next_sequence", "in_flight", "last_acked", "sealing")

    def __init__(self):
        self.sealing = 0            # of those, batches waiting in the sealer without sequence numbers
        self.next_sequence = 0
        self.in_flight = 0          # batches of this partition in flight
        self.last_acked = -1        # last acknowledged sequence


class _Sender:
    """The producer's I/O: metadata, producer ids, draining batches to leaders, retries. It drives a
    caller-driven NetworkClient (the one network layer): whoever holds `io_lock` polls it -- the
    producing thread itself while it is busy (`poke`), else this object's thread."""

    def __init__(self, producer: Producer):
        self.p = producer
        self.acc = producer.acc
        self.txn = producer._txn                 # TransactionManager, or None
        self.net = NetworkClient(producer.config, role="producer", io_thread=False)
        self.net.add_disconnect_listener(self._on_disconnect)
        self.cluster = Cluster(self.net, producer.config, auto_create=True)   # the client's metadata view
        self.cluster.add_listener(self._on_snapshot)
        self.nodes: dict[int, tuple[str, int]] = {}     # broker id -> address, from Metadata
        self.running = True
        self.fatal: BaseException | None = None
        self.meta_needed = False                        # ask for fresh metadata at the next step
        self.connect_errors: list[str] = []
        self.producer_id = -1
        self.producer_epoch = -1
        self.pid_in_flight = False
        self.needs_bump = False
        self.parts: dict[tuple, _PartitionState] = {}
        self.node_requests: dict[int, int] = {}          # Produce requests sent and not answered, per node
        self.lock = threading.Lock()
        self.io_lock = threading.Lock()          # whoever holds it drives the network client
        self.stats = {"requests": 0, "retries": 0, "disconnects": 0, "epoch_bumps": 0}
        self.thread = threading.Thread(target=self.run, name="kohort-producer-io", daemon=True)
        # compressed batches are sealed on a thread of their own (client/sealer.py): the native
        # sealer's where the codec's library loads, else the Python Sealer's
        compressed = producer.compression != COMPRESSION_NONE
        self.native = native_sealer(producer.compression, producer.compression_level) if compressed else None
        self.sealer = Sealer() if compressed and self.native is None else None
        self.sealing: deque[_Sealing] = deque()   # requests waiting for the native sealer, in order
        # requests numbered as they leave the sealer (see SEAL_AHEAD); then `node_sealing` counts per
        # node the requests in `sealing`, and `node_requests` only those sent
        self.seal_ahead = SEAL_AHEAD if self.native is not None and self.txn is None else 0
        self.node_sealing: dict[int, int] = {}
        self._stale_seals = 0                     # results of jobs whose requests were dropped
        if self.native is not None:
            self.native.set_wake_fd(self.net.wakeup_fd())
        self.txn_features = None                 # a transactional producer's broker features: None, "asked", dict
        self._seal_s_per_byte = 0.0          # measured; 0 until a request was sealed
        self.wait_until_ms = 0.0             # until when the last prepare() allowed the wait (linger clock, ms)
        self.first_send_at_ms = 0.0          # no Produce before this (linger clock): the marker gap
        self.marker_gap_txns = 0             # transactions left that wait MARKER_GAP_MS after EndTxn
        # when the I/O thread's wait ends (the accumulator's clock, ms): inf from its turn until its
        # wait starts, 0 while it is not waiting (see linger_started)
        self.io_wait_until_ms = 0.0
        self.opened_due_ms = _INF       # the earliest linger end of batches opened during its turn
        self.last_send_ms = -_INF       # when prepare() last found batches to send (linger clock)
        # when prepare() last saw a queued batch become sendable next (its linger.ms or retry backoff
        # ends; the linger clock, ms): the I/O thread rehearses its request just before (REHEARSAL_MS)
        self.linger_due_ms = _INF
        # the earliest linger end of batches opened since prepare() last read the accumulator (see tick)
        self.next_due_ms = _INF

    @property
    def ever_connected(self) -> bool:
        return self.net.has_connected()

    # called from other threads
    def wakeup(self) -> None:
        self.net.wakeup()

    def want_topic(self, topic: str) -> None:
        if topic not in self.cluster.topics:
            self.cluster.add_topics([topic])
        self.meta_needed = True
        self.wakeup()

    def forget_topic(self, topic: str) -> None:
        """Stop asking for a topic nobody could find."""
        self.cluster.set_topics(self.cluster.topics - {topic})

    def stop(self) -> None:
        self.running = False
        self.wakeup()
        self.thread.join(10)
        if self.sealer is not None:
            self.sealer.stop()
        if self.native is not None:
            self.native.close()        # before the network client closes its wake-up socket
        with self.io_lock:
            self.sealing.clear()
            self.net.close()

    # -- loop ------------------------------------------------------------------------------------------
    def run(self) -> None:
        """The I/O thread. It never waits for sockets holding io_lock (a producing thread's poke
        would find it taken and have to hand its I/O over, a GIL hand-over away): it waits without
        the lock until an answer can be read, a wake-up arrives or the next batch's linger.ms ends
        (NetworkClient.wait, to the microsecond), then takes one turn if nobody else is doing the
        I/O. While a thread produces, its pokes do most of the I/O and this thread mostly waits;
        an acknowledgement or a lingering batch is never left to the producing thread's next call."""
        _precise_timer_slack()
        answered = False         # the last wait ended on a ready socket (an answer, most often)
        passed = False           # the last wait was skipped: its deadline had passed
        collided = False
        try:
            while self.running:
                # another thread doing the I/O holds io_lock for one short turn (a poke), or while it
                # waits in flush(): sleep rather than queue on the lock (see _COLLIDED_SLEEP_S)
                if not self.io_lock.acquire(False):
                    time.sleep(_BUSY_SLEEP_S if collided else _COLLIDED_SLEEP_S)
                    collided = True
                    continue
                collided = False
                # a batch opened from here on is seen by this turn's prepare, or (opened after it looked)
                # lowers `opened_due_ms`: the turn's own select may eat the wake-up byte it sends
                self.io_wait_until_ms = _INF
                self.opened_due_ms = _INF
                try:
                    # woken by an answer: its futures' callbacks first, then prepare's sending
                    self.net.poll(0.0, self.prepare, answers_first=answered)
                finally:
                    self.io_lock.release()
                until = min(self.wait_until_ms, self.opened_due_ms)
                linger_ms = self.acc.linger_ms
                if linger_ms > 0:
                    now = _linger_clock_ms()
                    if now - self.last_send_ms < 2 * linger_ms or any(self.node_requests.values()):
                        # producing: wait no longer than a linger.ms, so that a batch opened meanwhile
                        # (due a linger.ms after it opens) needs no wake-up from the producing
                        # thread -- the answer's turn, or this deadline's, sees it
                        until = min(until, now + linger_ms)
                due = min(self.linger_due_ms, self.opened_due_ms)
                if until >= due:
                    # the wait ends when a lingering batch is due: stop REHEARSAL_MS short of it and
                    # rehearse its request then (the next turn finds it not yet due and comes here again)
                    left = due - _linger_clock_ms()
                    if left > 2 * REHEARSAL_MS:
                        until = due - REHEARSAL_MS
                    elif left > REHEARSAL_MS / 2 and self.io_lock.acquire(False):
                        try:
                            self._rehearse()
                        finally:
                            self.io_lock.release()
                self.io_wait_until_ms = until
                until = min(until, self.opened_due_ms)     # one opened while the line above ran
                wait_s = (until - _linger_clock_ms()) / 1000.0
                if wait_s <= 0.0:
                    # due already (a batch's linger ended during the turn): one more turn at once,
                    # then a short wait if that turn found nothing to do either
                    wait_s, passed = (0.0001 if passed else 0.0), True
                else:
                    passed = False
                answered = self.net.wait(wait_s) if wait_s > 0.0 else False
                self.io_wait_until_ms = 0.0
        except BaseException as e:  # noqa: BLE001 - a bug here must fail futures, not hang them
            self.fatal = KohortError(f"producer I/O thread crashed: {e!r}")
            with self.io_lock:
                self._fail_everything(self.fatal)
            raise
        with self.io_lock:
            self._fail_everything(KohortError("the producer was closed before these records were sent"))

    def linger_started(self, due_ms: float) -> None:
        """A partition's new batch is sent at `due_ms` (its linger.ms ends): wake the I/O thread when
        its wait would end later, so the batch leaves on time even if the producing thread makes no
        further call (the accumulator calls this, holding its lock)."""
        if due_ms < self.next_due_ms:
            self.next_due_ms = due_ms
        if due_ms < self.io_wait_until_ms:
            if due_ms < self.opened_due_ms:
                self.opened_due_ms = due_ms
            self.wakeup()

    def tick(self) -> None:
        """Called by the producing thread every TICK_MS while it produces: a poke, unless the turn
        would find nothing to do -- no request in flight or queued on the network client (no answer
        to read), no connection being set up, and nothing due before the deadline the last prepare()
        set or a batch opened since then is due (`next_due_ms`). The I/O thread's own wait ends by
        then in any case: a skipped tick leaves nothing undone, it only keeps the producing thread
        from running an idle I/O turn per record at a low rate (and from holding io_lock as the I/O
        thread's wait for a lingering batch ends)."""
        if self.txn is None and self.native is None and not self.meta_needed and not self.sealing:
            now = _linger_clock_ms()
            if now < self.wait_until_ms and now < self.next_due_ms and self.net.idle():
                return
        self.poke()

    def poke(self) -> None:
        """Called by the producing thread when a batch filled and on a `tick`: do the I/O now if
        nobody else is, else wake whoever is."""
        if self.io_lock.acquire(False):
            try:
                self.step(0.0)
            finally:
                self.io_lock.release()
            if self.wait_until_ms + 0.05 < self.io_wait_until_ms:
                # something is due before the I/O thread's wait ends (its wake-up byte may have
                # been read by this turn's select): wake it
                self.wakeup()
        else:
            self.wakeup()

    def step(self, timeout_s: float) -> None:
        self.net.poll(timeout_s, self.prepare)

    def prepare(self) -> float:
        """Timers, metadata, producer id, expiry, sending; returns how long poll may wait (s), and
        sets `wait_until_ms`, the same as a deadline on the linger clock."""
        start = _linger_clock_ms()
        now = int(start)                     # _now_ms()'s whole milliseconds
        p = self.p
        timeout_ms = 100
        self.linger_due_ms = _INF
        self.next_due_ms = _INF      # before the accumulator is read: a batch opened after lowers it
        if self.sealing:
            self._pump_sealed()
        # metadata (the view refreshes when asked, when stale, and at metadata.max.age.ms)
        if self.meta_needed:
            self.meta_needed = False
            self.cluster.request_update()
        else:
            self.cluster.maybe_refresh()
        # producer id
        if self.txn is not None:
            timeout_ms = min(timeout_ms, self._txn_step(now))
        elif p.idempotent and not self.pid_in_flight and (self.producer_id < 0 or self.needs_bump) \
                and self._total_in_flight() == 0:
            self._init_producer_id()
        # expiry of queued batches
        for b in self.acc.expired(now):
            err = KafkaTimeoutError(
                f"{b.count} record(s) for {b.topic}[{b.partition}] expired after delivery.timeout.ms="
                f"{p.delivery_timeout_ms} without being sent (no leader or broker unreachable)")
            if b.base_sequence >= 0 and p.idempotent:
                self._sequence_gap(err)      # its sequence numbers leave a gap: renumber (KIP-360)
            elif self.txn is not None:
                self._txn_batch_failed(err)
            self._finish(b, -1, -1, err)
        # send
        if not p.idempotent or (self.producer_id >= 0 and not self.needs_bump):
            now = _linger_clock_ms()         # the batches' own clock (created_ms)
            if now < self.first_send_at_ms:  # the previous transaction's markers are being written
                wait_ms = min(timeout_ms, self.first_send_at_ms - now)
                self.wait_until_ms = now + wait_ms
                return wait_ms / 1000.0
            start = now
            nodes, next_ms, unknown = self.acc.ready(now, self._leader_of, _always)
            timeout_ms = min(timeout_ms, next_ms)
            ready = [n for n in nodes if self._node_ready(n)]
            if unknown or len(ready) < len(nodes):
                # batches wait for a leader or a connection: look again when a linger.ms has passed
                # (an answer or a connection made also ends the wait); with nothing queued the wait
                # lasts the full 100 ms, so an idle producer's thread turns 10 times a second
                timeout_ms = min(timeout_ms, self.acc.linger_ms if self.acc.linger_ms > 0 else 100)
            nodes = ready
            if unknown:
                self.cluster.add_topics(unknown)
                self.meta_needed = True
            if nodes:
                self.last_send_ms = now
                for node in nodes:
                    self._send_to(node, now)
                # what the requests left behind (a batch opened meanwhile) lingers from its own start
                next_ms = self.acc.ready(now, self._leader_of, _always)[1] if self.acc.queued() else _INF
                timeout_ms = min(timeout_ms, next_ms)
            self.linger_due_ms = now + next_ms     # when the next queued batch is sendable (inf: none)
        self.wait_until_ms = start + timeout_ms
        return timeout_ms / 1000.0

    # -- transactions ----------------------------------------------------------------------------------
    def _sequence_gap(self, err) -> None:
        """A batch with sequence numbers failed for good. Idempotent: renumber under a new epoch
        (KIP-360); transactional: the transaction manager decides (abortable, epoch bump on abort)."""
        if self.txn is None:
            self.needs_bump = True
        else:
            self._txn_batch_failed(err)

    def _txn_batch_failed(self, err) -> None:
        with self.p._txn_cond:
            self.txn.handle_failed_batch(err)
            self.p._txn_cond.notify_all()

    def _txn_step(self, now: int) -> int:
        """Drive the transaction manager: adopt a new producer id/epoch, drop the unsent batches of an
        aborted transaction, send its next request. Returns ms until it needs another look."""
        m = self.txn
        cond = self.p._txn_cond
        if self.txn_features is None:
            self._ask_txn_features()
        if self.txn_features in (None, "asked"):
            return 20                          # transactions v1 or v2: known before the first request
        with cond:
            if (m.producer_id, m.producer_epoch) != (self.producer_id, self.producer_epoch) \
                    and self._total_in_flight() == 0:
                self.producer_id, self.producer_epoch = m.producer_id, m.producer_epoch
                self.parts.clear()             # a new epoch: every partition's sequence starts at 0
            if m.has_abortable_error() or m.is_aborting() or m.has_fatal_error():
                dropped = self._take_unsent_batches()
                err = m.last_error
                cause = TransactionAbortedError("the transaction was aborted before this record was sent" +
                                                (f" ({err})" if err is not None else ""))
            else:
                dropped = ()
            req = m.next_request(now, bool(self.acc.incomplete) or bool(dropped))
            wait = m.next_wakeup_ms(now)
        for b in dropped:
            self._finish(b, -1, -1, cause)
        if req is not None:
            node = None
            if req.node is not None:
                node, host, port = req.node
                if self.nodes.get(node) != (host, port):
                    self.net.set_node_address(node, host, port)
            fut = self.net.send(node, Versioned(req.api_key, req.build, req.max_version))
            _on_done(fut, lambda resp, err, req=req, fut=fut: self._on_txn_answer(req, resp, err, fut))
        return wait

    def _ask_txn_features(self) -> None:
        """ApiVersions once more, for the broker's finalized features: transaction.version >= 2 lets
        the transaction manager speak transactions v2 (KIP-890 part 2), as Java 4.x's producer does."""
        self.txn_features = "asked"

        def done(resp, err):
            levels = {}
            if err is None and not resp.error_code:
                levels = {f.name: f.max_version_level for f in resp.finalized_features or ()}
            with self.p._txn_cond:
                self.txn.v2_available = levels.get("transaction.version", 0) >= 2
                self.txn_features = levels
                self.p._txn_cond.notify_all()
            self.wakeup()
        _on_done(self.net.send(None, ApiVersionsRequest(client_software_name="kohort",
                                                        client_software_version="0")), done)

    def _take_unsent_batches(self) -> list:
        """Queued batches never sent (no sequence numbers yet), removed from the accumulator."""
        acc = self.acc
        out = []
        with acc.lock:
            for dq in acc.batches.values():
                if any(b.wire is None for b in dq):
                    keep = [b for b in dq if b.wire is not None]
                    out.extend(b for b in dq if b.wire is None)
                    dq.clear()
                    dq.extend(keep)
        return out

    def _on_txn_answer(self, req, resp, err, fut) -> None:
        now = _now_ms()
        with self.p._txn_cond:
            try:
                if req.api == "InitProducerId" and err is None:
                    # KIP-360: a coordinator speaking InitProducerId v3+ can bump an epoch (Java's
                    # coordinatorSupportsBumpingEpoch); otherwise those errors are fatal
                    self.txn.coordinator_supports_bump = getattr(fut, "api_version", 3) >= 3
                if err is not None:
                    self.txn.handle_failure(req, err, now)
                else:
                    self.txn.handle_response(req, resp, now)
                    if req.api == "EndTxn" and req.v2 and self.marker_gap_txns > 0 and resp.error_code == 0:
                        self.marker_gap_txns -= 1
                        self.first_send_at_ms = _linger_clock_ms() + MARKER_GAP_MS
            finally:
                self.p._txn_cond.notify_all()
        self.wakeup()

    # -- connections -----------------------------------------------------------------------------------
    def _on_disconnect(self, node_id: int, err) -> None:
        self.connect_errors.append(str(err))
        del self.connect_errors[:-8]
        self.meta_needed = True
        self.stats["disconnects"] += 1

    def _node_ready(self, node: int) -> bool:
        # counted here, not by net.in_flight(): a request sent by this (polling) thread waits in the
        # network client's queue until the next poll
        return self.net.ready(node) and self._room(node)

    def _room(self, node: int) -> bool:
        """Another request may be drained for `node`."""
        return self.node_requests.get(node, 0) + self.node_sealing.get(node, 0) < \
            self.p.max_in_flight + self.seal_ahead

    def _total_in_flight(self) -> int:
        """Batches with sequence numbers sent and not answered (or waiting for the sealer)."""
        return sum(s.in_flight - s.sealing for s in self.parts.values())

    # -- metadata --------------------------------------------------------------------------------------
    def _leader_of(self, topic: str, partition: int):
        info = self.p._topics.get(topic)
        if info is None:
            return None
        n = info.leaders.get(partition, -1)
        return n if n >= 0 and n in self.nodes else None

    def _on_snapshot(self, snap) -> None:
        """A new metadata snapshot (on the polling thread): leaders and partitions for produce()."""
        self.nodes = {n: (h, port) for n, (h, port, _) in snap.brokers.items()}
        topics = dict(self.p._topics)
        lna = ErrorCode.LEADER_NOT_AVAILABLE
        for name, code in snap.topic_errors.items():
            if code == lna or for_code(code).retriable:
                self.meta_needed = True
            if name not in topics or code != lna:
                topics[name] = _TopicInfo(name, 0, {}, code)
        for name, parts in snap.topics.items():
            if name in snap.topic_errors:
                continue
            leaders = {}
            for part in parts:
                pi = snap.partitions[(name, part)]
                leaders[part] = pi.leader if not pi.error_code or pi.leader >= 0 else -1
            if any(n < 0 for n in leaders.values()):
                self.meta_needed = True
            topics[name] = _TopicInfo(name, len(parts), leaders)
        self.p._topics = topics
        with self.p._meta_cond:
            self.p._meta_cond.notify_all()

    # -- producer id -----------------------------------------------------------------------------------
    def _init_producer_id(self) -> None:
        bump = self.needs_bump and self.producer_id >= 0

        def build(v: int):
            b = bump and v >= 3            # KIP-360: v3+ bumps the epoch of an existing producer id
            return InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=2147483647,
                                         producer_id=self.producer_id if b else -1,
                                         producer_epoch=self.producer_epoch if b else -1)
        self.pid_in_flight = True
        _on_done(self.net.send(None, Versioned(InitProducerIdRequest.API_KEY, build)), self._on_producer_id)

    def _on_producer_id(self, resp, err) -> None:
        self.pid_in_flight = False
        if isinstance(err, IncompatibleBrokerVersionError):
            if "enable.idempotence" not in self.p.config.given:
                self.p.idempotent = False      # idempotence was only the default: go on without it
                return
            self.fatal = KohortError(f"enable.idempotence=true but the broker cannot give producer ids: {err}")
            self._fail_everything(self.fatal)
            return
        if err is not None:
            return
        if resp.error_code:
            if not for_code(resp.error_code).retriable and resp.error_code not in (
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
                self.fatal = for_code(resp.error_code)("InitProducerId failed")
                self._fail_everything(self.fatal)
            return
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        if self.needs_bump:
            self.stats["epoch_bumps"] += 1
            self._renumber()
        self.needs_bump = False

    def _renumber(self) -> None:
        """New producer id/epoch: every unacknowledged batch gets sequences from 0, in queue order."""
        acc = self.acc
        with acc.lock:
            for tp, dq in acc.batches.items():
                st = self.parts.setdefault(tp, _PartitionState())
                st.next_sequence = 0
                st.last_acked = -1
                for b in dq:
                    if b.base_sequence >= 0:
                        b.seal(self.producer_id, self.producer_epoch, st.next_sequence, self.p.compression,
                               level=self.p.compression_level)
                        st.next_sequence += b.count
            for tp, st in self.parts.items():
                if tp not in acc.batches:
                    st.next_sequence, st.last_acked = 0, -1

    # -- produce ---------------------------------------------------------------------------------------
    def _can_send(self, tp, batch) -> bool:
        if not self.p.idempotent:
            return True
        if self.txn is not None and not self.txn.is_send_to_partition_allowed(tp):
            return False                        # AddPartitionsToTxn first
        st = self.parts.get(tp)
        if st is None:
            return True
        if batch.base_sequence >= 0:            # a retry: only when nothing of this partition is in flight
            return st.in_flight == st.sealing    # (batches not numbered yet leave behind it)
        if st.last_acked < 0:
            # the partition has acknowledged nothing of this producer id/epoch: the broker may have no
            # state for it there, and then appends any sequence (Kafka's ProducerAppendInfo), so a
            # batch behind a failed first one would land ahead of it; one batch until the first answer
            return st.in_flight == 0
        return st.in_flight < 5 + self.seal_ahead

    def _send_to(self, node: int, now: int) -> None:
        """Send requests to `node` while it has sendable batches and room in flight (Java's Sender
        loops the same way: with one busy partition, one request per round trip would leave the
        connection idle while the broker works)."""
        queued = self.acc.batches
        tps = [tp for tp in self.acc.partitions() if self._leader_of(*tp) == node]
        first = True
        while self._room(node):
            batches = self.acc.drain(tps, self.p.max_request_size, now, self._can_send, sendable_only=not first)
            if not batches:
                return
            first = False
            self._send_batches(node, batches)
            # a further drain only if a batch is left queued (a look without the lock: a batch
            # opened meanwhile lingers from its own start and is seen by the next turn)
            if not any(queued.get(tp) for tp in tps):
                return

    def _send_batches(self, node: int, batches: list) -> None:
        """Number the batches (sequences are taken here, in drain order) and send them as one Produce
        request; batches to compress are sealed and sent by the Sealer thread, in order."""
        p = self.p
        seals = []                       # (batch, sequence) of batches to seal
        sent_ms = _linger_clock_ms()
        ahead = self.seal_ahead
        idempotent = p.idempotent
        parts = self.parts
        for b in batches:
            b.sent_ms = sent_ms
            if idempotent:
                tp = (b.topic, b.partition)
                st = parts.get(tp)
                if st is None:
                    st = parts[tp] = _PartitionState()
            if b.wire is None or (idempotent and (b.producer_id != self.producer_id
                                                   or b.producer_epoch != self.producer_epoch)):
                seq = -1
                if ahead:                    # numbered as it leaves the sealer (_send_sealed)
                    if idempotent:
                        st.sealing += 1
                elif idempotent:
                    seq = st.next_sequence
                    st.next_sequence = (seq + b.count) & 0x7FFFFFFF
                seals.append((b, seq))
            if idempotent:
                st.in_flight += 1
            b.in_flight = True
        if ahead:
            self.node_sealing[node] = self.node_sealing.get(node, 0) + 1
        elif p.acks != 0:
            self.node_requests[node] = self.node_requests.get(node, 0) + 1
        pid, epoch = self.producer_id, self.producer_epoch
        self.stats["requests"] += 1
        if self.native is not None and (seals or self.sealing or ahead):
            self._submit_seals(node, batches, seals, pid, epoch)
            return
        sealer = self.sealer
        if sealer is not None and (sealer.pending() or seals and self._seal_s_per_byte * sum(
                b.size for b, _ in seals) >= _HANDOFF_S):
            # compressing takes longer than handing the GIL over would: on the Sealer's thread (and
            # everything behind a request still being sealed waits its turn: order on the wire)
            sealer.submit(lambda: self._seal_and_send(node, batches, seals, pid, epoch, self.io_lock))
        else:
            self._seal_and_send(node, batches, seals, pid, epoch, _NO_LOCK)

    def _submit_seals(self, node: int, batches: list, seals: list, pid: int, epoch: int) -> None:
        """Hand a request's batches to the native sealer and queue the request behind those before it
        (a request with nothing to seal waits there too, so requests go out in the order made)."""
        native = self.native
        attrs = 0 if self.txn is None else ATTR_TRANSACTIONAL
        entry = _Sealing(node, batches)
        for b, seq in seals:
            b.producer_id = pid
            b.producer_epoch = epoch
            b.base_sequence = seq
            try:
                native.submit(b, b.records(), b.count, b.base_ts, b.max_ts, attrs, pid, epoch, seq)
            except Exception as e:  # noqa: BLE001 - this batch fails, the producer goes on
                entry.failed.append((b, repr(e)))
                continue
            entry.left += 1
        self.sealing.append(entry)
        if not entry.left:
            self._pump_sealed()

    def _pump_sealed(self) -> None:
        """Collect what the native sealer finished (in submission order) and send every request at
        the head of the queue whose batches are all sealed."""
        q = self.sealing
        done = self.native.collect()
        if done:
            if self._stale_seals:
                k = min(self._stale_seals, len(done))
                self._stale_seals -= k
                del done[:k]
            it = iter(q)
            e = None
            for b, wire, err in done:
                while e is None or not e.left:
                    e = next(it)
                e.left -= 1
                if err is None:
                    b.wire = wire
                else:
                    e.failed.append((b, err))
        if self.seal_ahead:
            self._release_sealed()
            return
        while q and not q[0].left:
            self._send_sealed(q.popleft())

    def _release_sealed(self) -> None:
        """SEAL_AHEAD: send the sealed requests that may leave now, in the order made per partition.
        A request waits while its node has max.in.flight requests out; a batch while its partition has
        5 numbered batches unacknowledged on the wire (1 before the partition acknowledged one of the
        producer id/epoch), a retry of it waits (numbered before, it leaves first), or an earlier
        request with a batch of the partition waits."""
        p = self.p
        idem = p.idempotent
        q = self.sealing
        retries: dict[tuple, int] = {}       # numbered batches per partition not on the wire yet
        if idem:
            tps = {(b.topic, b.partition) for e in q for b in e.batches}
            batches = self.acc.batches
            with self.acc.lock:          # only the partitions of waiting requests are asked about
                for tp in tps:
                    dq = batches.get(tp)
                    if dq and dq[0].base_sequence >= 0:
                        retries[tp] = 1
            for e in q:
                for b in e.batches:
                    if b.base_sequence >= 0:
                        tp = (b.topic, b.partition)
                        retries[tp] = retries.get(tp, 0) + 1
        held_new: set = set()                # partitions whose batches to number wait behind an earlier one
        held_old: set = set()                # partitions whose numbered batches wait behind an earlier one
        kept: deque[_Sealing] = deque()
        for e in q:
            ok = not e.left and (p.acks == 0 or self.node_requests.get(e.node, 0) < p.max_in_flight)
            if ok:
                for b in e.batches:
                    tp = (b.topic, b.partition)
                    if b.base_sequence >= 0:
                        # a retry (drained when nothing of its partition was on the wire)
                        if tp in held_old:
                            ok = False
                            break
                    elif tp in held_new or retries.get(tp):
                        ok = False
                        break
                    elif idem:
                        st = self.parts[tp]
                        if st.in_flight - st.sealing >= (5 if st.last_acked >= 0 else 1):
                            ok = False
                            break
            if not ok:
                for b in e.batches:
                    (held_old if b.base_sequence >= 0 else held_new).add((b.topic, b.partition))
                kept.append(e)
                continue
            for b in e.batches:
                if b.base_sequence >= 0:
                    retries[(b.topic, b.partition)] -= 1
            self._send_sealed(e)
        self.sealing = kept

    def _send_sealed(self, e: _Sealing) -> None:
        batches = e.batches
        if self.seal_ahead:
            self._number_sealed(e)
        if e.failed:
            failed = {id(b) for b, _ in e.failed}
            batches = [b for b in batches if id(b) not in failed]
            for b, why in e.failed:
                self._unsent(e.node, [b], KohortError(
                    f"could not compress the batch of {b.count} record(s) for {b.topic}[{b.partition}]: {why}"),
                    request=False)
            if not batches and self.p.acks != 0:
                self.node_requests[e.node] -= 1
        if batches:
            self._seal_and_send(e.node, batches, [], self.producer_id, self.producer_epoch, _NO_LOCK)

    def _number_sealed(self, e: _Sealing) -> None:
        """SEAL_AHEAD: a request leaving the sealer counts against max.in.flight; its batches sealed
        without sequence numbers take them now, in the order they leave (KIP-98)."""
        node = e.node
        self.node_sealing[node] -= 1
        if self.p.acks != 0:
            self.node_requests[node] = self.node_requests.get(node, 0) + 1
        if not self.p.idempotent:
            return
        failed = {id(b) for b, _ in e.failed}
        pid, epoch = self.producer_id, self.producer_epoch
        for b in e.batches:
            if b.base_sequence >= 0:
                continue                     # numbered before: a retry's same bytes
            st = self.parts[(b.topic, b.partition)]
            st.sealing -= 1
            if id(b) in failed:
                continue
            seq = st.next_sequence
            st.next_sequence = (seq + b.count) & 0x7FFFFFFF
            set_batch_producer(b.wire, pid, epoch, seq)
            b.producer_id, b.producer_epoch, b.base_sequence = pid, epoch, seq

    def _seal_and_send(self, node: int, batches: list, seals: list, pid: int, epoch: int,
                       lock: contextlib.AbstractContextManager) -> None:
        """Seal and send (on the Sealer thread, `lock` is io_lock: it guards what completes batches)."""
        p = self.p
        attrs = 0 if self.txn is None else ATTR_TRANSACTIONAL
        try:
            if seals:
                t = time.perf_counter()
                size = 0
                for b, seq in seals:
                    size += b.size
                    b.seal(pid, epoch, seq, p.compression, attrs, p.compression_level)
                if size >= 65536:      # seconds per byte, smoothed: where the next request is sealed
                    self._seal_s_per_byte = 0.7 * self._seal_s_per_byte + 0.3 * (time.perf_counter() - t) / size
        except Exception as e:  # noqa: BLE001 - this request's batches fail, the producer goes on
            with lock:
                self._unsent(node, batches, KohortError(f"could not encode a batch: {e!r}"))
            return
        txn = self.txn
        acks = p.acks != 0
        # the answer calls _on_produce straight from the network layer (a Completion, not a Future)
        self.net.send(node, self._produce_request(batches), expect_response=acks,
                      max_version=_PRODUCE_MAX_VERSION if txn is None else txn.produce_max_version,
                      min_version=_PRODUCE_MIN_VERSION, at_once=True,
                      response_class=OnePartitionProduceResponse,
                      on_done=functools.partial(self._on_produce, batches, node=node) if acks else None)
        if not acks:
            with lock:
                for b in batches:
                    b.in_flight = False
                    self._finish(b, -1, -1, None)

    def _produce_request(self, batches: list, rehearsal: bool = False) -> ProduceRequest:
        """The Produce request carrying `batches` (sealed), grouped by topic; for a rehearsal (see
        `_rehearse`) the same request around a stand-in for each batch's bytes."""
        by_topic: dict[str, list] = {}
        for b in batches:
            parts = by_topic.get(b.topic)
            if parts is None:
                parts = by_topic[b.topic] = []
            parts.append((b.partition, _REHEARSAL_RECORDS if rehearsal else b.wire))
        txn = self.txn
        return produce_request(None if txn is None else txn.transactional_id, self.p.acks,
                               self.p.request_timeout_ms, by_topic.items())

    def _rehearse(self) -> None:
        """Just before a lingering batch is due (see REHEARSAL_MS): build and encode the Produce
        request that will carry the first batches of up to _REHEARSAL_BATCHES partitions, sending
        nothing. After a wait of a few ms the send path's Python code runs cold, several times slower
        (measured 35-50 µs for the request's objects and 25-30 µs for its encoding, against 4.5 and
        2.5 warm); run a moment before the deadline, it runs faster at the deadline (by 10-15 µs
        each on a busy machine). A stand-in takes the place of the batches' bytes: the producing
        thread goes on appending to them. Uncompressed, non-transactional requests only (the others
        are built on other paths, after sealing)."""
        if self.txn is not None or self.native is not None or self.sealer is not None:
            return
        acc = self.acc
        with acc.lock:
            firsts = list(itertools.islice((dq[0] for dq in acc.batches.values() if dq), _REHEARSAL_BATCHES))
        by_node: dict[int, list] = {}
        for b in firsts:
            node = self._leader_of(b.topic, b.partition)
            if node is not None:
                by_node.setdefault(node, []).append(b)
        for node, batches in by_node.items():
            self.net.rehearse(node, self._produce_request(batches, rehearsal=True),
                              max_version=_PRODUCE_MAX_VERSION, min_version=_PRODUCE_MIN_VERSION)

    def _unsent(self, node: int, batches: list, err: BaseException, request: bool = True) -> None:
        """A request that could not be built: its batches fail (their sequence numbers leave a gap).
        `request=False`: batches dropped from a request that still goes out (or is counted apart)."""
        p = self.p
        if request and p.acks != 0:
            self.node_requests[node] -= 1
        for b in batches:
            b.in_flight = False
            st = self.parts.get((b.topic, b.partition))
            if st is not None:
                st.in_flight -= 1
            if b.base_sequence >= 0 and p.idempotent:
                self._sequence_gap(err)
            elif self.txn is not None:
                self._txn_batch_failed(err)
            self._finish(b, -1, -1, err)

    def _on_produce(self, batches, resp, err, node: int | None = None) -> None:
        if node is not None:
            self.node_requests[node] -= 1
        now = _now_ms()
        # (topic, partition) -> (error_code, base_offset, log_append_time_ms, error_message)
        if resp is None:
            results = {}
        elif type(resp) is tuple:       # one partition's answer, read by OnePartitionProduceResponse
            results = {(resp[0], resp[1]): (resp[2], resp[3], resp[4], None)}
        else:
            results = {(t.name, pr.index): (pr.error_code, pr.base_offset, pr.log_append_time_ms,
                                            pr.error_message)
                       for t in resp.responses for pr in t.partition_responses}
        for b in batches:
            b.in_flight = False
            tp = (b.topic, b.partition)
            st = self.parts.get(tp)
            if st is not None:
                st.in_flight -= 1
            if b.done:                   # failed meanwhile (the producer failed everything)
                continue
            if isinstance(err, IncompatibleBrokerVersionError):
                self._finish(b, -1, -1, err)
                continue
            if err is not None:
                self._retry_or_fail(b, err, now, leader_moved=True)
                continue
            pr = results.get(tp)
            if pr is None:
                self._retry_or_fail(b, KohortError(f"no response for {tp[0]}[{tp[1]}] in ProduceResponse"),
                                    now, False)
                continue
            code, base_offset, log_append_time, message = pr
            if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                if st is not None and b.base_sequence >= 0:
                    st.last_acked = b.base_sequence + b.count - 1
                if b.base_sequence == 0 and self.txn is not None and self.txn.v2 \
                        and _linger_clock_ms() - b.sent_ms >= HELD_FIRST_PRODUCE_MS:
                    self.marker_gap_txns = MARKER_GAP_TXNS      # held by the leader: see MARKER_GAP_MS
                self._finish(b, base_offset, log_append_time, None)
                continue
            cls = for_code(code)
            e = cls(f"{tp[0]}[{tp[1]}]" + (f": {message}" if message else ""))
            if code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID) and \
                    self.p.idempotent and self.txn is None:
                if code == ErrorCode.UNKNOWN_PRODUCER_ID or st is None or \
                        b.base_sequence == st.last_acked + 1 or st.last_acked < 0 and b.base_sequence == 0:
                    self.needs_bump = True   # the broker lost our state: new epoch, renumber
                self._retry_or_fail(b, e, now, False, force_retry=True)
                continue
            if code == ErrorCode.CONCURRENT_TRANSACTIONS and self.txn is not None:
                # transactions v2: the broker could not add the partition because the previous
                # transaction is still writing its markers; it completes within milliseconds
                self._retry_or_fail(b, e, now, False, backoff_ms=ADD_PARTITIONS_RETRY_BACKOFF_MS)
            elif cls.retriable:
                leader = code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
                                  ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_ENOUGH_REPLICAS,
                                  ErrorCode.KAFKA_STORAGE_ERROR)
                self._retry_or_fail(b, e, now, leader)
            else:
                if st is not None and b.base_sequence >= 0:
                    self._sequence_gap(e)    # a hole in the sequence: restart numbering (KIP-360)
                elif self.txn is not None:
                    self._txn_batch_failed(e)
                self._finish(b, -1, -1, e)

    def _retry_or_fail(self, b, err, now: int, leader_moved: bool, force_retry: bool = False,
                       backoff_ms: int | None = None) -> None:
        if leader_moved:
            self.meta_needed = True
        if now - b.created_ms >= self.p.delivery_timeout_ms or (b.attempts >= self.p.retries and not force_retry):
            e = err if isinstance(err, BaseException) else KohortError(str(err))
            if b.base_sequence >= 0 and self.p.idempotent:
                self._sequence_gap(e)
            elif self.txn is not None:
                self._txn_batch_failed(e)
            self._finish(b, -1, -1, e)
            return
        self.stats["retries"] += 1
        self.acc.reenqueue(b, now, backoff_ms)

    def _finish(self, b, base_offset: int, log_append_time: int, error) -> None:
        if self.p.stats is not None:
            self.p.stats.on_batch(b.topic, b.partition, b.count, len(b.buf or b.wire or b""), error)
        # the batch's buffer goes back to the accumulator's pool, but never an uncompressed one
        # under acks=0: finished as it is handed to the network, its bytes may not be written yet
        spare = [] if self.p.acks != 0 or self.p.compression != COMPRESSION_NONE else None
        cbs = b.complete(base_offset, log_append_time, error, spare)
        self.acc.release(b, spare)
        for fut in cbs:
            for fn in fut.callbacks:
                try:
                    fn(fut)
                except Exception:  # noqa: BLE001 - a user callback must not kill the I/O thread
                    pass

    def _fail_everything(self, err) -> None:
        if self.sealing:                 # requests not sent: their batches are failed below
            self._stale_seals = self.native.pending
            for e in self.sealing:
                if self.seal_ahead:
                    self.node_sealing[e.node] -= 1
                elif self.p.acks != 0:
                    self.node_requests[e.node] -= 1
                for b in e.batches:
                    b.in_flight = False
                    st = self.parts.get((b.topic, b.partition))
                    if st is not None:
                        st.in_flight -= 1
                        if self.seal_ahead and b.base_sequence < 0:
                            st.sealing -= 1
            self.sealing.clear()
        for b in self.acc.abort_all(err):
            self._finish(b, -1, -1, err)
        # answers to what was in flight can no longer be matched: close, failing their futures
        self.net.disconnect_all(err)
        for b in list(self.acc.incomplete):
            self._finish(b, -1, -1, err)
        with self.p._meta_cond:
            self.p._meta_cond.notify_all()


class _Sealing:
    """A Produce request waiting for the native sealer: `left` batches still being sealed,
    `failed` (batch, why) those it could not seal."""
    __slots__ = ("node", "batches", "left", "failed")

    def __init__(self, node: int, batches: list):
        self.node = node
        self.batches = batches
        self.left = 0
        self.failed: list[tuple[Any, str]] = []


def _on_done(fut, fn) -> None:
    """fn(response, None) or fn(None, error) when `fut` resolves (on the thread that polls)."""
    def cb(f):
        try:
            resp = f.result()
        except BaseException as e:  # noqa: BLE001 - handed to fn
            fn(None, e)
            return
        fn(resp, None)
    fut.add_done_callback(cb)


__all__ = ["BatchDeliveryFuture", "DeliveryFuture", "ProduceBatchError", "Producer", "RecordMetadata",
           "unreachable_message"]
