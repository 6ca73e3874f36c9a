"""The broker-side driver of the transaction coordinator (kohort.broker.txn.coordinator): storage,
the abort timer and the marker writes. `open_txn(broker)` attaches `broker.txn` (a TxnRuntime).

* `__transaction_state` is created with the first record to write (as Kafka creates it on first use;
  transaction.state.log.num.partitions, cleanup.policy=compact); an existing one keeps its partition
  count. Each transactional id lives in partition txn_partition(id, n).
* Loading at start: every partition is read from its log start to its end, the last record per key
  wins (tombstones delete, undecodable records are skipped with a warning), then every Prepare*
  transaction has its markers re-written and is completed (Kafka's loading does the same); an Ongoing
  one waits for the abort scan, which (the start time being persisted) aborts it at once if it is
  past its timeout.
* `run(result)` does what the coordinator asked, in order: append its records (one uncompressed batch
  per record, on its partition) and wait for the group-commit fsync; then for each WriteMarkers append
  a COMMIT/ABORT control batch (attributes transactional|control, the marker's pid/epoch, key
  int16 0 + int16 type, value int16 0 + int32 coordinator epoch) to each partition, updating its
  producer state (LSO, aborted index) as a replicated append would, wait for the fsync, and only
  then persist Complete*. The EndTxn answer is sent after Prepare* is durable and the markers are
  written (Kafka answers before the markers; a request arriving meanwhile sees Prepare* and gets
  CONCURRENT_TRANSACTIONS either way).
* A `__consumer_offsets` partition (added by AddOffsetsToTxn) gets its marker through the group
  coordinator (`CoordinatorRuntime.write_txn_marker`), which materialises or drops the producer's
  pending transactional offsets there before the marker counts as written (Kafka: KAFKA-17507).
  Before the group coordinator is attached (the recovery at start runs first) the marker is appended
  to the log directly and the group coordinator's load replays it.
* Every transaction.abort.timed.out.transaction.cleanup.interval.ms, `expire_timed_out(now)`, the
  expiry of ids idle past transactional.id.expiration.ms (a tombstone each), and
  every Prepare* transaction not being driven right now (its marker writes failed) is driven again;
  `driving` keeps one transaction's markers from being written by two tasks at once.
"""
from __future__ import annotations

import asyncio
import logging
import time

from kohort.broker.txn.coordinator import PREPARE, Result, TxnCoordinator, WriteMarkers
from kohort.broker.txn.log_format import (
    TRANSACTION_STATE_TOPIC, decode_key, decode_value, encode_key, encode_value, txn_partition,
)
from kohort.errors import DecodeError, ErrorCode
from kohort.protocol.records import build_batch, build_control_batch, iter_batches, iter_records
from kohort.storage import StorageError, TopicAlreadyExistsError

log = logging.getLogger("kohort.broker.txn")
OFFSETS_TOPIC = "__consumer_offsets"
READ_CHUNK = 1 << 20


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class TxnRuntime:
    def __init__(self, broker, clock=wall_clock_ms) -> None:
        self.broker = broker
        self.clock = clock
        cfg = broker.config
        self.num_partitions = cfg["transaction.state.log.num.partitions"]
        self.coordinator_epoch = broker.leader_epoch
        self.coordinator = TxnCoordinator(broker.producer_ids.allocate, cfg["transaction.max.timeout.ms"])
        self.driving: set[str] = set()      # transactional ids whose markers are being written now
        # transactions v2: implicit adds being persisted, by (producer id, topic, partition); a later
        # produce to that partition waits for it, so batches are appended in the order they came
        self.adding: dict[tuple[int, str, int], asyncio.Future] = {}
        # transactions v2: the last Produce request under way (adding, or waiting for an earlier one)
        # by (producer id, topic, partition), done once its batches are appended
        # (kohort.broker.handlers.produce `_produce_in_order`)
        self.producing: dict[tuple[int, str, int], asyncio.Future] = {}

    # -- start ---------------------------------------------------------------------------------------
    def ensure_topic(self) -> None:
        storage = self.broker.storage
        if storage.has_topic(TRANSACTION_STATE_TOPIC):
            self.num_partitions = storage.topic(TRANSACTION_STATE_TOPIC).num_partitions
            return
        configs = {"cleanup.policy": "compact",
                   "segment.bytes": self.broker.config["transaction.state.log.segment.bytes"]}
        try:
            storage.create_topic(TRANSACTION_STATE_TOPIC, self.num_partitions, configs, now_ms=self.clock())
        except TopicAlreadyExistsError:
            self.num_partitions = storage.topic(TRANSACTION_STATE_TOPIC).num_partitions

    def load(self) -> None:
        storage = self.broker.storage
        latest: dict[str, bytes | None] = {}
        for p in range(self.num_partitions):
            lg = storage.log(TRANSACTION_STATE_TOPIC, p)
            off = lg.log_start_offset
            while off < lg.log_end_offset:
                data = lg.read(off, READ_CHUNK)
                if not data:
                    break
                for _, h in iter_batches(data):
                    off = h.base_offset + h.last_offset_delta + 1
                for r in iter_records(data):      # (offset, timestamp, key, value, ...)
                    try:
                        latest[decode_key(r[2])] = r[3]
                    except DecodeError as e:
                        log.warning("skipping %s-%d record at %d: %s", TRANSACTION_STATE_TOPIC, p, r[0], e)
        for tid, value in latest.items():
            try:
                self.coordinator.load(tid, decode_value(value))
            except (DecodeError, ValueError) as e:
                log.warning("skipping transaction state of %r: %s", tid, e)
        log.info("loaded %d transactional ids", len(self.coordinator.txns))

    async def start(self) -> None:
        if self.broker.storage.has_topic(TRANSACTION_STATE_TOPIC):
            self.ensure_topic()
            self.load()
        await self.run(self.coordinator.recover())
        self.broker.spawn(self._abort_scan())

    # -- doing what the coordinator asks -------------------------------------------------------------
    def _persist(self, records) -> None:
        storage, now = self.broker.storage, self.clock()
        if records and not storage.has_topic(TRANSACTION_STATE_TOPIC):
            self.ensure_topic()
        for tid, value in records:
            batch = build_batch([(encode_key(tid), encode_value(value), [], now)])
            storage.log(TRANSACTION_STATE_TOPIC, txn_partition(tid, self.num_partitions)).append(
                batch, leader_epoch=self.broker.leader_epoch, now_ms=now)

    async def write_marker_async(self, topic: str, partition: int, w: WriteMarkers,
                                 coordinator_epoch: int | None = None) -> int:
        """`write_marker`, through the group coordinator for `__consumer_offsets`. A group coordinator
        that cannot take it (closing; storage failure) raises StorageError: the transaction stays
        Prepare* and is driven again (by the abort scan, or at the next start)."""
        gc = self.broker.coordinator
        cepoch = self.coordinator_epoch if coordinator_epoch is None else coordinator_epoch
        if topic != OFFSETS_TOPIC or gc is None:
            return self.write_marker(topic, partition, w, cepoch)
        try:
            err = await gc.write_txn_marker(partition, w.producer_id, w.producer_epoch, w.commit, cepoch)
        except RuntimeError as e:           # the group coordinator is closed
            raise StorageError(str(e)) from e
        if err not in (ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_EPOCH,
                       ErrorCode.TRANSACTION_COORDINATOR_FENCED):
            raise StorageError(f"marker on {topic}-{partition}: {ErrorCode(err).name}")
        return err

    def write_marker(self, topic: str, partition: int, w: WriteMarkers, coordinator_epoch: int | None = None) -> int:
        """Append one marker to a partition like a replicated append; -> error code."""
        broker, now = self.broker, self.clock()
        cepoch = self.coordinator_epoch if coordinator_epoch is None else coordinator_epoch
        try:
            lg = broker.storage.log(topic, partition)
        except StorageError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        pstate = broker.producers.partition(topic, partition, lg)
        err = pstate.check_marker(w.producer_id, w.producer_epoch, cepoch)
        if err:
            return err
        batch = build_control_batch(w.commit, w.producer_id, w.producer_epoch, timestamp=now, coordinator_epoch=cepoch)
        res = lg.append(batch, leader_epoch=broker.leader_epoch, now_ms=now)
        pstate.complete(w.producer_id, w.producer_epoch, w.commit, res.base_offset, cepoch, now)
        broker.waiters.notify(topic, partition)
        return ErrorCode.NONE

    async def run(self, result: Result) -> Result:
        """Persist `result`'s records, write its markers and complete those transactions. A transaction
        is claimed (`driving`) before its Prepare* record is even written, so the abort scan's re-drive
        of Prepare* transactions never writes the markers of one a request is completing (which would
        write them twice and could close the producer's next transaction early)."""
        sync = self.broker.sync
        mine = [w for w in result.markers if w.transactional_id not in self.driving]
        claimed = {w.transactional_id for w in mine}
        self.driving |= claimed
        try:
            if result.records:
                self._persist(result.records)
                if sync.enabled:
                    await sync.wait_synced()
            for w in mine:
                m = self.coordinator.txns.get(w.transactional_id)
                if m is None or m.state not in PREPARE or m.producer_epoch != w.producer_epoch:
                    continue                    # completed meanwhile
                for topic, p in w.partitions:
                    err = await self.write_marker_async(topic, p, w)
                    if err:
                        # Kafka drops the marker on IPE / coordinator fenced / a deleted partition
                        log.warning("marker for %s (pid %d epoch %d) on %s-%d not written: %s",
                                    w.transactional_id, w.producer_id, w.producer_epoch, topic, p,
                                    ErrorCode(err).name)
                if sync.enabled:
                    await sync.wait_synced()
                done = self.coordinator.markers_written(w.transactional_id, self.clock())
                self._persist(done.records)
                if sync.enabled:
                    await sync.wait_synced()
        finally:
            self.driving -= claimed
        return result

    async def call(self, op: str, *args, **kwargs) -> Result:
        """Run a coordinator operation with the clock's time and carry out its result."""
        result = getattr(self.coordinator, op)(*args, self.clock(), **kwargs)
        try:
            return await self.run(result)
        except StorageError as e:
            log.error("transaction state write failed: %s", e)
            result.error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            return result

    async def implicit_add(self, tid: str | None, pid: int, epoch: int, partitions) -> int:
        """Transactions v2 (Produce v12, TxnOffsetCommit v5): add `partitions` to the producer's
        transaction (persisted and fsynced) -> the error for the request: NONE,
        CONCURRENT_TRANSACTIONS (the previous transaction is still completing), INVALID_PRODUCER_EPOCH
        (fenced) or INVALID_TXN_STATE (no such transaction: the caller maps it by version)."""
        if not tid:
            return ErrorCode.INVALID_TXN_STATE
        keys = [(pid, t, p) for t, p in partitions]
        earlier = [self.adding[k] for k in keys if k in self.adding]
        new = [k for k in keys if k not in self.adding]
        fut = asyncio.get_running_loop().create_future()
        for k in new:
            self.adding[k] = fut
        code = ErrorCode.NONE
        try:
            if new:
                r = await self.call("add_partitions", tid, pid, epoch, [(t, p) for _, t, p in new], tv2=True)
                code = r.error
                if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                    code = ErrorCode.INVALID_PRODUCER_EPOCH
                elif code not in (ErrorCode.NONE, ErrorCode.CONCURRENT_TRANSACTIONS,
                                  ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    code = ErrorCode.INVALID_TXN_STATE
            for f in earlier:
                code = code or await asyncio.shield(f)
        finally:
            for k in new:
                if self.adding.get(k) is fut:
                    del self.adding[k]
            if not fut.done():
                fut.set_result(code)
        return code

    async def _abort_scan(self) -> None:
        interval = self.broker.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                r = self.coordinator.expire_timed_out(self.clock())
                if r.markers:
                    log.info("aborting timed-out transactions: %s", [w.transactional_id for w in r.markers])
                await self.run(r)
                await self.run(self.coordinator.expire_ids(
                    self.clock(), self.broker.config["transactional.id.expiration.ms"]))
                # a Prepare* whose markers failed to be written (storage error) is driven again
                await self.run(self.coordinator.recover())
            except Exception:   # noqa: BLE001 - keep the scan alive, report it
                log.exception("transaction abort scan failed")


async def open_txn(broker) -> TxnRuntime:
    rt = TxnRuntime(broker)
    broker.txn = rt
    await rt.start()
    return rt
