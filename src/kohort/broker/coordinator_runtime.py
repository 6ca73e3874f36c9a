"""The broker-side runtime of the group coordinator: drives the pure GroupCoordinator
(kohort.broker.coordinator.coordinator) with real storage, timers and request futures.

* `__consumer_offsets` is created at start if missing (offsets.topic.num.partitions partitions,
  cleanup.policy=compact, segment.bytes=offsets.topic.segment.bytes). An existing topic keeps its
  partition count (a group's records must stay in one partition).
* Loading: the coordinator starts in its loading phase (operations answer
  COORDINATOR_LOAD_IN_PROGRESS); every partition is read from its log start to its end, compacted in
  memory (the last record of each key, in log order), each survivor decoded
  (`kohort.protocol.consumer_offsets.decode_record`; unknown kinds such as KIP-848 records are
  skipped with a warning) and replayed in log order, then `on_loaded`. Transactional batches
  (TxnOffsetCommit) are held per producer id until that producer's marker: COMMIT makes its records
  the key's last record if they come after the current one (Kafka compares record offsets), ABORT
  drops them, and those with no marker yet are replayed as pending offsets of their producer; a
  tombstone drops the pending records of its key -- the same results as the live path.
* Transactions: a TxnOffsetCommit's Append carries the producer (id, epoch) and is written as that
  producer's transactional batch; `write_txn_marker` (called by the transaction coordinator's
  runtime for a `__consumer_offsets` partition in the transaction) goes through the coordinator's
  append order, writes the COMMIT/ABORT control batch, and completes once it is fsynced and the
  pending offsets are materialised or dropped. The partition's producer state (open transactions,
  LSO) is kept like any partition's.
  `open_coordinator` awaits the load, so a broker normally accepts connections only once loaded.
* Appends: each Append's records are encoded (Kafka's key/value versions) and written as one v2 batch
  per `__consumer_offsets` partition (group_partition(group_id)), in token order, at once. Each token
  then waits for the broker's group-commit fsync (`broker.sync.wait_synced()`, the same durability as
  acks=all produce under log.flush.policy) and is reported with `on_append_done` strictly in token
  order; the coordinator applies the held state/responses only then.
* Timers: one asyncio TimerHandle per armed key (re-arming replaces it); on expiry
  `fire_timer(key, now)`; a timer that fires early by the wall clock is re-scheduled.
* KIP-848 consumer-protocol groups: `consumer` is the pure ConsumerGroupCoordinator
  (kohort.broker.coordinator.consumer_group; None when `group.coordinator.rebalance.protocols` lacks
  "consumer"), driven through `call_consumer`; its timers ("cg-*" keys) share the timer table, its
  append tokens are ("cg", n) tuples. Its records (types 3/5/6/7/8, Kafka's formats, topic ids mapped
  from/to names through storage) are written and loaded like the classic ones; their committed
  offsets are stored by the classic coordinator as those of a simple (memberless) group of the same id.
* Responses: `reply_to` is an asyncio Future the handler awaits; a future whose request was
  abandoned (client gone) is skipped.

Public: `CoordinatorRuntime(broker, clock=...)` with `start()`, `close()`, `call(op, *args)` ->
Future, `partition_for(group_id)`, `coordinator`; `open_coordinator(broker)`, also exported as
`open(broker)`, the hook kohort.broker.components calls. It lives outside the coordinator package,
which stays pure (no asyncio/time imports; checked by test_coordinator_state).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Callable

from kohort.errors import DecodeError
from kohort.protocol.consumer_offsets import (
    OFFSETS_TOPIC, GroupMetadataKey, GroupMember, OffsetCommitKey, decode_record, group_metadata_record,
    group_metadata_tombstone, group_partition, offset_commit_record, offset_commit_tombstone,
)
from kohort.protocol.consumer_protocol import decode_subscription
from kohort.protocol.records import build_batch, decode_batch, iter_batch_records, iter_batches
from kohort.storage import StorageError, TopicAlreadyExistsError

from kohort.broker.coordinator import codes as C
from kohort.broker.coordinator.config import CoordinatorConfig
from kohort.broker.coordinator.consumer_group import (
    ClassicMeta, ConsumerGroupConfig, ConsumerGroupCoordinator, ConsumerGroupRecord, CurrentAssignment,
    MemberMeta,
)
from kohort.protocol import consumer_group_records as CGR
from kohort.protocol.consumer_offsets import key_version
from kohort.broker.coordinator.coordinator import GroupCoordinator
from kohort.broker.coordinator.group import GroupState
from kohort.broker.group_events import GroupEvents, log_event
from kohort.broker.coordinator.model import (
    CancelTimer, GroupRecord, MemberRecord, OffsetRecord, Outcome, SetTimer, TxnMarkerRecord,
)
from kohort.broker.producer_state import marker_key, marker_value, parse_marker, CONTROL_COMMIT

log = logging.getLogger("kohort.broker.coordinator")

READ_CHUNK = 1 << 20


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _subscription_topics(data: bytes):
    return decode_subscription(data).topics


# -- record mapping ----------------------------------------------------------------------------------
def encode_coordinator_record(r) -> tuple[bytes, bytes | None]:
    """(key, value) bytes of a coordinator record (value None = tombstone)."""
    if isinstance(r, OffsetRecord):
        if r.tombstone:
            return offset_commit_tombstone(r.group, r.topic, r.partition)
        return offset_commit_record(r.group, r.topic, r.partition, r.offset, r.leader_epoch,
                                    r.metadata or "", r.commit_timestamp, r.expire_timestamp)
    if isinstance(r, GroupRecord):
        if r.tombstone:
            return group_metadata_tombstone(r.group)
        members = [GroupMember(m.member_id, m.client_id, m.client_host, m.session_timeout,
                               m.rebalance_timeout, m.subscription, m.assignment, m.group_instance_id)
                   for m in r.members]
        return group_metadata_record(r.group, r.protocol_type, r.generation, r.protocol, r.leader,
                                     r.current_state_timestamp, members)
    raise TypeError(f"not a coordinator record: {r!r}")


def decode_coordinator_record(key: bytes, value: bytes | None):
    """The coordinator record stored as (key, value); raises DecodeError for what it cannot read
    (e.g. KIP-848 consumer-group records, key versions 3+)."""
    k, v = decode_record(key, value)
    if isinstance(k, OffsetCommitKey):
        if v is None:
            return OffsetRecord(k.group, k.topic, k.partition, tombstone=True)
        expire = v.expire_timestamp if v.expire_timestamp is not None and v.expire_timestamp >= 0 else None
        return OffsetRecord(k.group, k.topic, k.partition, v.offset, v.leader_epoch, v.metadata or "",
                            v.commit_timestamp, expire)
    if isinstance(k, GroupMetadataKey):
        if v is None:
            return GroupRecord(k.group, tombstone=True)
        members = tuple(MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.rebalance_timeout, m.session_timeout, bytes(m.subscription),
                                     bytes(m.assignment)) for m in v.members)
        return GroupRecord(k.group, v.protocol_type or "", v.generation, v.protocol, v.leader,
                           v.current_state_timestamp, members)
    raise DecodeError(f"not a classic-group record key: {type(k).__name__}")


# KIP-848 consumer-group records: names <-> topic ids
def encode_consumer_group_record(r: ConsumerGroupRecord, topic_id) -> tuple[bytes, bytes | None]:
    """(key, value) bytes of a consumer-group record; `topic_id(name)` gives a topic's id (None for a
    topic that no longer exists: its partitions are left out)."""
    kcls = CGR.KEYS[r.kind]
    key = kcls(group_id=r.group) if r.kind in (3, 6) else kcls(group_id=r.group, member_id=r.member_id)
    if r.value is None:
        return CGR.encode_key(key), None

    def tps(cls, frozen):
        out = []
        for name, parts in frozen:
            tid = topic_id(name)
            if tid is not None:
                out.append(cls(topic_id=tid, partitions=list(parts)))
        return out
    v = r.value
    if r.kind == 3:
        value = CGR.ConsumerGroupMetadataValue(epoch=v)
    elif r.kind == 6:
        value = CGR.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=v)
    elif r.kind == 5:
        value = CGR.ConsumerGroupMemberMetadataValue(
            instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
            subscribed_topic_names=list(v.subscribed_topic_names), subscribed_topic_regex=v.subscribed_topic_regex,
            rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor)
        if v.classic is not None:
            CM = CGR.ConsumerGroupMemberMetadataValue.ClassicMemberMetadata
            value.classic_member_metadata = CM(
                session_timeout_ms=v.classic.session_timeout_ms,
                supported_protocols=[CM.ClassicProtocol(name=n, metadata=md) for n, md in v.classic.protocols])
    elif r.kind == 7:
        V = CGR.ConsumerGroupTargetAssignmentMemberValue
        value = V(topic_partitions=tps(V.TopicPartition, v))
    else:
        V = CGR.ConsumerGroupCurrentMemberAssignmentValue
        value = V(member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch, state=v.state,
                  assigned_partitions=tps(V.TopicPartitions, v.assigned),
                  partitions_pending_revocation=tps(V.TopicPartitions, v.pending_revocation))
    return CGR.encode_key(key), CGR.encode_value(value)


def decode_consumer_group_record(key: bytes, value: bytes | None, topic_name) -> ConsumerGroupRecord:
    """The ConsumerGroupRecord stored as (key, value); `topic_name(id)` gives a topic's name (None for
    an unknown id: those partitions are dropped). DecodeError for what it cannot read."""
    k, v = CGR.decode(key, value)
    kind = type(k).TYPE
    mid = getattr(k, "member_id", None)
    if v is None:
        return ConsumerGroupRecord(kind, k.group_id, mid)

    def frozen(tps):
        out = {}
        for tp in tps:
            name = topic_name(tp.topic_id)
            if name is not None:
                out[name] = tuple(sorted(set(out.get(name, ())) | set(tp.partitions)))
        return tuple(sorted(out.items()))
    if kind == 3:
        val = v.epoch
    elif kind == 6:
        val = v.assignment_epoch
    elif kind == 5:
        cm = v.classic_member_metadata
        classic = None if cm is None else ClassicMeta(
            cm.session_timeout_ms, tuple((sp.name, bytes(sp.metadata)) for sp in cm.supported_protocols))
        val = MemberMeta(v.instance_id, v.rack_id, v.client_id, v.client_host,
                         tuple(v.subscribed_topic_names), v.subscribed_topic_regex, v.rebalance_timeout_ms,
                         v.server_assignor, classic)
    elif kind == 7:
        val = frozen(v.topic_partitions)
    else:
        val = CurrentAssignment(v.member_epoch, v.previous_member_epoch, v.state,
                                frozen(v.assigned_partitions), frozen(v.partitions_pending_revocation))
    return ConsumerGroupRecord(kind, k.group_id, mid, val)


CONSUMER_GROUP_RECORD_TYPES = frozenset(CGR.KEYS)


def _record_group(r) -> str:
    return r.group


# -- runtime -----------------------------------------------------------------------------------------
class CoordinatorRuntime:
    def __init__(self, broker, clock: Callable[[], int] = wall_clock_ms,
                 config: CoordinatorConfig | None = None) -> None:
        self.broker = broker
        self.clock = clock
        self.config = config or CoordinatorConfig.from_properties(broker.config.values)
        self.coordinator = GroupCoordinator(self.config, subscription_decoder=_subscription_topics,
                                            loading=True)
        protocols = {x.strip() for x in str(broker.config.values.get(
            "group.coordinator.rebalance.protocols", "classic,consumer")).split(",")}
        self.consumer: ConsumerGroupCoordinator | None = None
        if "consumer" in protocols:
            cfg = ConsumerGroupConfig.from_properties(broker.config.values)
            self.consumer = ConsumerGroupCoordinator(
                cfg, classic_group_active=self._classic_group_active,
                classic_upgrade=lambda gid, now: self.coordinator.release_for_upgrade(gid, now, cfg.max_size),
                classic_downgrade=lambda snap, now: self.coordinator.adopt_from_consumer(snap, now),
                classic_max_size=self.config.group_max_size)
            consumer = self.consumer
            self.coordinator.offsets_in_use = lambda gid: bool(
                consumer.groups.get(gid) is not None and consumer.groups[gid].members)
        self.num_partitions = broker.config["offsets.topic.num.partitions"]
        self._timers: dict[tuple, asyncio.TimerHandle] = {}
        # tokens appended to the log, waiting for their fsync: (token, error_code, sync future)
        self._syncing: collections.deque = collections.deque()
        self._completer: asyncio.Task | None = None
        self._closed = False
        self.loaded_records = 0       # records replayed (the last one of each key)
        # kohort.broker.group_events: the group event history (the console shows it), one log line per
        # event (Kafka's wording) and the rebalance counts of the metrics
        self.events = GroupEvents()
        self.events.subscribe(log_event)
        self.load_ms = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------
    def ensure_topic(self) -> None:
        storage = self.broker.storage
        if storage.has_topic(OFFSETS_TOPIC):
            self.num_partitions = storage.topic(OFFSETS_TOPIC).num_partitions
            return
        configs = {"cleanup.policy": "compact",
                   "segment.bytes": self.broker.config["offsets.topic.segment.bytes"]}
        try:
            storage.create_topic(OFFSETS_TOPIC, self.num_partitions, configs, now_ms=self.clock())
            log.info("created %s with %d partitions", OFFSETS_TOPIC, self.num_partitions)
        except TopicAlreadyExistsError:
            self.num_partitions = storage.topic(OFFSETS_TOPIC).num_partitions

    async def start(self) -> None:
        """Create the topic if missing, load every partition, then serve."""
        self.ensure_topic()
        await self.load()

    async def load(self) -> None:
        t0 = time.perf_counter()
        storage = self.broker.storage
        c = self.coordinator
        n = 0
        for p in range(self.num_partitions):
            lg = storage.log(OFFSETS_TOPIC, p)
            offset, end = lg.log_start_offset, lg.log_end_offset
            # Compact in memory first: only the last record of each key matters, replayed in the
            # order of those last records -- exactly what log compaction would leave, which replay
            # accepts -- so superseded commits are never decoded. Transactional records wait for
            # their producer's marker (see the header).
            latest: dict[bytes, tuple[int, bytes | None]] = {}
            pending: dict[int, dict[bytes, tuple[int, bytes | None]]] = {}
            markers: list[tuple[int, int, bool]] = []     # (offset, producer id, commit) in log order
            while offset < end:
                data = lg.read(offset, READ_CHUNK, max_offset=end)
                if not data:
                    break
                start = offset
                for pos, h in iter_batches(data):
                    if h.last_offset < start:
                        continue
                    offset = max(offset, h.last_offset + 1)
                    txn = h.is_transactional and h.producer_id >= 0
                    if h.is_control:
                        _, recs = decode_batch(data, pos, check_crc=False)
                        t = parse_marker(recs[0].key) if txn and recs else None
                        if t is not None:
                            commit = t == CONTROL_COMMIT
                            for key, (off, value) in pending.pop(h.producer_id, {}).items():
                                cur = latest.get(key)
                                if commit and (cur is None or cur[0] < off):
                                    latest.pop(key, None)
                                    latest[key] = (off, value)
                        continue
                    for rec in iter_batch_records(data, pos, h):
                        off, key, value = rec[0], rec[2], rec[3]
                        if off < start or key is None:
                            continue
                        key = bytes(key)
                        if txn:
                            pending.setdefault(h.producer_id, {})[key] = (off, value)
                            continue
                        latest.pop(key, None)
                        latest[key] = (off, value)
                        if value is None:
                            for held in pending.values():
                                held.pop(key, None)
                if offset <= start:      # no progress
                    break
                await asyncio.sleep(0)   # let the loop breathe on big logs
            entries = sorted([(off, key, value, -1) for key, (off, value) in latest.items()]
                             + [(off, key, value, pid) for pid, held in pending.items()
                                for key, (off, value) in held.items()], key=lambda e: e[0])
            for off, key, value, pid in entries:
                try:
                    if key_version(key) in CONSUMER_GROUP_RECORD_TYPES:
                        if self.consumer is None:
                            continue     # consumer protocol disabled: its groups are not served
                        self.consumer.replay(decode_consumer_group_record(key, value, self._topic_name))
                        n += 1
                        continue
                    r = decode_coordinator_record(key, value)
                except DecodeError as e:
                    log.warning("%s-%d offset %d: skipping record: %s", OFFSETS_TOPIC, p, off, e)
                    continue
                c.replay(r, pid)
                n += 1
        self.loaded_records = n
        self.load_ms = (time.perf_counter() - t0) * 1000
        self.apply(c.on_loaded(self.clock()))
        if self.consumer is not None:
            self.apply(self.consumer.on_loaded(
                self.clock(), {t.name: t.num_partitions for t in storage.topics()}))
        self.events.baseline(self)        # the loaded groups are known: no events for them
        log.info("group coordinator loaded %d records (%d groups) in %.1f ms", n, len(c.groups),
                 self.load_ms)

    async def close(self) -> None:
        """Stop serving: let pending appends finish, answer parked requests, drop timers."""
        if self._completer is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._completer), 5)
            except (Exception, asyncio.CancelledError):   # noqa: BLE001
                pass
        self._closed = True
        out = self.coordinator.unload()
        self._deliver(out)
        if self.consumer is not None:
            self._deliver(self.consumer.unload())
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()

    # -- operations --------------------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return group_partition(group_id, self.num_partitions)

    def call(self, op: str, *args, **kwargs) -> asyncio.Future:
        """Run coordinator operation `op` (e.g. "join_group") with (*args, now_ms, reply_to); the
        returned future gets its result."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._closed:
            fut.set_exception(RuntimeError("group coordinator closed"))
            return fut
        out = getattr(self.coordinator, op)(*args, self.clock(), fut, **kwargs)
        self.apply(out)
        self.events.observe(self, op, args, out)
        return fut

    def _topic_name(self, topic_id):
        try:
            return self.broker.storage.topic_name(topic_id)
        except StorageError:
            return None

    def _topic_id(self, name: str):
        storage = self.broker.storage
        return storage.topic(name).topic_id if storage.has_topic(name) else None

    def _encode(self, r):
        if isinstance(r, ConsumerGroupRecord):
            return encode_consumer_group_record(r, self._topic_id)
        return encode_coordinator_record(r)

    def _classic_group_active(self, group_id: str) -> bool:
        g = self.coordinator.groups.get(group_id)
        return g is not None and not g.is_(GroupState.EMPTY, GroupState.DEAD)

    def call_consumer(self, op: str, *args):
        """Run consumer-group operation `op` ("heartbeat") with (*args, now_ms, reply_to); returns
        the future of its result (answered at once: nothing is appended)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._closed or self.consumer is None:
            fut.set_exception(RuntimeError("consumer group coordinator not available"))
            return fut
        out = getattr(self.consumer, op)(*args, self.clock(), fut)
        self.apply(out)
        self.events.observe(self, op, args, out, consumer=True)
        return fut

    # -- outcome -----------------------------------------------------------------------------------
    def apply(self, out: Outcome) -> None:
        self._deliver(out)
        for t in out.timers:
            if isinstance(t, SetTimer):
                self._set_timer(t.key, t.deadline_ms)
            elif isinstance(t, CancelTimer):
                h = self._timers.pop(t.key, None)
                if h is not None:
                    h.cancel()
        for a in out.appends:
            self._append(a.token, a.records, a.producer)

    @staticmethod
    def _deliver(out: Outcome) -> None:
        for r in out.responses:
            fut = r.reply_to
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.set_result(r.result)

    # timers
    def _set_timer(self, key: tuple, deadline_ms: int) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline_ms - self.clock()) / 1000)
        self._timers[key] = loop.call_later(delay, self._fire, key, deadline_ms)

    def _fire(self, key: tuple, deadline_ms: int) -> None:
        if self._timers.get(key) is None:
            return
        now = self.clock()
        if now < deadline_ms:              # the wall clock lags the loop's clock: wait the rest
            self._timers[key] = asyncio.get_running_loop().call_later(
                (deadline_ms - now) / 1000, self._fire, key, deadline_ms)
            return
        del self._timers[key]
        try:
            if key and isinstance(key[0], str) and key[0].startswith("cg-") and self.consumer is not None:
                out = self.consumer.fire_timer(key, now)
            else:
                out = self.coordinator.fire_timer(key, now)
        except Exception:      # noqa: BLE001 - a bug here must not kill the loop's callback
            log.exception("coordinator timer %r failed", key)
            return
        self.apply(out)
        self.events.observe(self, "timer", (key,), out)

    # appends
    def _append(self, token: int, records, producer: tuple[int, int] | None = None) -> None:
        error = C.NONE
        now = self.clock()
        by_partition: dict[int, list] = {}
        for r in records:
            p = r.partition if isinstance(r, TxnMarkerRecord) else self.partition_for(_record_group(r))
            by_partition.setdefault(p, []).append(r)
        storage = self.broker.storage
        for p, recs in by_partition.items():
            try:
                if producer is None:
                    batch = build_batch([(*self._encode(r), [], now) for r in recs])
                    storage.log(OFFSETS_TOPIC, p).append(batch, leader_epoch=self.broker.leader_epoch,
                                                         now_ms=now)
                else:
                    error = self._append_transactional(p, recs, producer, now)
                    if error:
                        break
            except StorageError as e:
                log.warning("append to %s-%d failed: %s", OFFSETS_TOPIC, p, e)
                error = e.error_code or C.UNKNOWN_SERVER_ERROR
                break
            except Exception as e:   # noqa: BLE001 - encoding bug or I/O: report, do not wedge
                log.exception("append to %s-%d failed", OFFSETS_TOPIC, p)
                error = C.UNKNOWN_SERVER_ERROR
                break
        sync = None
        if error == C.NONE:
            sync = asyncio.ensure_future(self.broker.sync.wait_synced())
        self._syncing.append((token, error, sync))
        if self._completer is None:
            self._completer = asyncio.get_running_loop().create_task(self._complete())

    def _append_transactional(self, p: int, recs, producer: tuple[int, int], now: int) -> int:
        """A batch of the producer on partition `p`: its TxnOffsetCommit records (transactional) or
        one TxnMarkerRecord (a control batch), with the partition's producer state kept as a
        produce / marker write keeps it. -> error code (the marker's epoch checks)."""
        pid, epoch = producer
        lg = self.broker.storage.log(OFFSETS_TOPIC, p)
        pstate = self.broker.producers.partition(OFFSETS_TOPIC, p, lg)
        if isinstance(recs[0], TxnMarkerRecord):
            m = recs[0]
            err = pstate.check_marker(pid, epoch, m.coordinator_epoch)
            if err:
                return err
            batch = build_batch([(marker_key(m.commit), marker_value(m.coordinator_epoch), [], now)],
                                producer_id=pid, producer_epoch=epoch, transactional=True, is_control=True)
            res = lg.append(batch, leader_epoch=self.broker.leader_epoch, now_ms=now)
            pstate.complete(pid, epoch, m.commit, res.base_offset, m.coordinator_epoch, now)
        else:
            batch = build_batch([(*self._encode(r), [], now) for r in recs], producer_id=pid,
                                producer_epoch=epoch, transactional=True)
            res = lg.append(batch, leader_epoch=self.broker.leader_epoch, now_ms=now)
            pstate.update(pid, epoch, -1, len(recs) - 1, res.base_offset, now, append_ms=now, transactional=True)
        self.broker.waiters.notify(OFFSETS_TOPIC, p)
        return C.NONE

    async def write_txn_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        """Write the transaction coordinator's marker on `__consumer_offsets`-`partition` through
        the group coordinator; -> error code once it is durable and the offsets are applied."""
        while self.coordinator.phase == "loading":
            await asyncio.sleep(0.05)
        marker = TxnMarkerRecord(partition, producer_id, producer_epoch, commit, coordinator_epoch)
        return await self.call("write_txn_marker", marker, lambda gid: self.partition_for(gid) == partition)

    async def _complete(self) -> None:
        try:
            while self._syncing:
                token, error, sync = self._syncing[0]
                if sync is not None:
                    try:
                        await sync
                    except StorageError as e:
                        error = e.error_code or C.KAFKA_STORAGE_ERROR
                    except Exception:   # noqa: BLE001
                        log.exception("fsync of %s failed", OFFSETS_TOPIC)
                        error = C.KAFKA_STORAGE_ERROR
                self._syncing.popleft()
                if isinstance(token, tuple) and self.consumer is not None:
                    out = self.consumer.on_append_done(token, error, self.clock())
                else:
                    out = self.coordinator.on_append_done(token, error, self.clock())
                self.apply(out)
                self.events.observe(self, "stored", (token,), out)
        finally:
            self._completer = None


async def open_coordinator(broker, clock: Callable[[], int] = wall_clock_ms) -> CoordinatorRuntime:
    """Attach the group coordinator to `broker` (as `broker.coordinator`), loaded and serving."""
    rt = CoordinatorRuntime(broker, clock)
    broker.coordinator = rt
    broker._closers.append(rt.close)
    await rt.start()
    return rt


open = open_coordinator   # noqa: A001 - the name kohort.broker.components looks up

__all__ = ["CoordinatorRuntime", "open_coordinator", "encode_coordinator_record",
           "decode_coordinator_record", "wall_clock_ms"]
