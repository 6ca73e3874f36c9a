"""The broker-side coordinator runtime: drives the pure group machines of kohort.broker.coordinator
with real storage, timers and request futures. It holds a LIST of machines (`machines`: the classic
coordinator, KIP-848's ConsumerGroups unless `group.coordinator.rebalance.protocols` lacks
"consumer", and KIP-932's ShareGroups while the `share.version` feature is 1); each declares its GROUP_TYPE, its TIMER_NAMESPACE and its SERDE (the record types it
reads and writes), and the runtime treats them alike. `groups` (GroupRegistry) knows which machine
owns a group; handlers call the typed operations below and never choose a machine themselves.

* `__consumer_offsets` is created at start if missing (offsets.topic.num.partitions partitions,
  cleanup.policy=compact, segment.bytes=offsets.topic.segment.bytes). An existing topic keeps its
  partition count (a group's records must stay in one partition).
* Loading: the machines start in their loading phase (operations answer
  COORDINATOR_LOAD_IN_PROGRESS); every partition is read from its log start to its end, compacted in
  memory (the last record of each key, in log order), each survivor decoded by the serde of the
  machine whose SERDE.KINDS has its record type (the kinds of a machine not enabled are skipped
  silently; kinds no machine reads are skipped with a warning) and replayed in log order, then
  `on_loaded` on every machine. Transactional batches (TxnOffsetCommit) are held per producer id until
  that producer's marker: COMMIT makes its records the key's last record if they come after the
  current one (Kafka compares record offsets), ABORT drops them, and those with no marker yet are
  replayed as pending offsets of their producer; a tombstone drops the pending records of its key --
  the same results as the live path. `open_coordinator` awaits the load, so a broker normally accepts
  connections only once loaded.
* Transactions: a TxnOffsetCommit's Append carries the producer (id, epoch) and is written as that
  producer's transactional batch; `write_txn_marker` (called by the transaction coordinator's
  runtime for a `__consumer_offsets` partition in the transaction) goes through the classic
  machine's append order, writes the COMMIT/ABORT control batch, and completes once it is fsynced
  and the pending offsets are materialised or dropped. The partition's producer state (open
  transactions, LSO) is kept like any partition's.
* Appends: each Append's records are encoded by the serde owning their class and written as one v2
  batch per `__consumer_offsets` partition (group_partition(group_id)), in token order, at once. Each
  token then waits for a datasync of the segments it wrote (kohort.broker.coordinator_sync: the same
  durability as acks=all produce under log.flush.policy, without waiting for the broker's shared round
  over every dirty partition) and is reported strictly in token order with `on_append_done` to the
  machine of `token.namespace`; the machine applies the held state/responses only then.
* Timers: one asyncio TimerHandle per armed (namespace, key) (re-arming replaces it); on expiry
  `fire_timer(key, now)` on the machine of that namespace; a timer that fires early by the wall clock
  is re-scheduled.
* Committed offsets of every group type are kept by group id (kohort.broker.coordinator.offsets)
  and their operations run on the classic machine, which owns the offset records; each commit,
  fetch or delete is validated by the group of its id, whatever machine owns it.
* Responses: `reply_to` is an asyncio Future the operation awaits; a future whose request was
  abandoned (client gone) is skipped.

Public: `CoordinatorRuntime(broker, clock=...)` with `start()`, `close()`, `groups`, `machines`,
`partition_for(group_id)`, the typed operations (`join_group` ... `consumer_group_heartbeat`,
`write_txn_marker`); `open_coordinator(broker)`, also exported as `open(broker)`, the hook
kohort.broker.components calls. It lives outside the coordinator package, which stays pure (no
asyncio/time imports; checked by test_coordinator_state).
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from typing import Callable

from kohort.errors import DecodeError
from kohort.protocol.consumer_offsets import OFFSETS_TOPIC, group_partition, key_version
from kohort.protocol.consumer_protocol import decode_subscription
from kohort.protocol.records import build_batch, decode_batch, iter_batch_records, iter_batches
from kohort.storage import StorageError, TopicAlreadyExistsError

from kohort.broker.coordinator import codes as C
from kohort.broker.coordinator.config import CoordinatorConfig
from kohort.broker.coordinator.consumer_group import (
    ConsumerGroupConfig, ConsumerGroups, ConsumerHeartbeatParams, ConsumerHeartbeatResult,
)
from kohort.broker.coordinator.coordinator import ClassicGroupCoordinator
from kohort.broker.coordinator.machine import AppendToken, GroupMachine, GroupType
from kohort.broker.coordinator.model import (
    CancelTimer, DeleteGroupsResult, DescribeGroupsResult, HeartbeatParams, HeartbeatResult, JoinParams,
    JoinResult, LeaveParams, LeaveResult, ListedGroup, ListGroupsResult, OffsetCommitParams,
    OffsetCommitResult, OffsetDeleteParams, OffsetDeleteResult, OffsetFetchParams, OffsetFetchResult,
    Outcome, SetTimer, SyncParams, SyncResult, TxnMarkerRecord, TxnOffsetCommitParams,
)
from kohort.broker.coordinator.registry import GroupRegistry
from kohort.broker.share.group import ShareGroupConfig
from kohort.broker.share.machine import ShareGroups
from kohort.broker.share_leader import open_share_leader
from kohort.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from kohort.broker.group_config_file import store_of
from kohort.broker.coordinator_sync import OffsetsLogSync
from kohort.broker.group_events import GroupEvents, log_event
from kohort.broker.producer_state import marker_key, marker_value, parse_marker, CONTROL_COMMIT

log = logging.getLogger("kohort.broker.coordinator")

READ_CHUNK = 1 << 20


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _subscription_topics(data: bytes):
    return decode_subscription(data).topics


# -- runtime -----------------------------------------------------------------------------------------
class CoordinatorRuntime:
    def __init__(self, broker, clock: Callable[[], int] = wall_clock_ms,
                 config: CoordinatorConfig | None = None) -> None:
        self.broker = broker
        self.clock = clock
        self.config = config or CoordinatorConfig.from_properties(broker.config.values)
        classic = ClassicGroupCoordinator(self.config, subscription_decoder=_subscription_topics, loading=True)
        protocols = {x.strip() for x in str(broker.config.values.get(
            "group.coordinator.rebalance.protocols", "classic,consumer")).split(",")}
        consumer: ConsumerGroups | None = None
        if "consumer" in protocols:
            cfg = ConsumerGroupConfig.from_properties(broker.config.values)
            consumer = ConsumerGroups(
                cfg, classic_group_active=lambda gid: self.groups.classic_group_active(gid),
                classic_upgrade=lambda gid, now: classic.release_for_upgrade(gid, now, cfg.max_size),
                classic_downgrade=lambda snap, now: classic.adopt_from_consumer(snap, now),
                classic_release_empty=classic.release_empty,
                classic_max_size=self.config.group_max_size)
        share: ShareGroups | None = None
        values = broker.config.values
        if int(values.get("share.version", 1)) >= 1:
            share = ShareGroups(ShareGroupConfig(
                session_timeout_ms=int(values.get("group.share.session.timeout.ms", 45000)),
                heartbeat_interval_ms=int(values.get("group.share.heartbeat.interval.ms", 5000)),
                max_size=int(values.get("group.share.max.size", 200)),
                assignment_interval_ms=int(values.get("group.share.assignment.interval.ms", 1000))),
                group_config=self._share_group_config)
        self.groups = GroupRegistry(classic, consumer, share)
        self.machines: tuple[GroupMachine, ...] = self.groups.machines
        self._by_namespace = {m.TIMER_NAMESPACE: m for m in self.machines}
        self._by_kind = {k: m for m in self.machines for k in m.SERDE.KINDS}
        self._serde_by_class = {cls: m.SERDE for m in self.machines for cls in m.SERDE.RECORD_CLASSES}
        # record types of a machine this broker does not run (its groups are not served)
        self._unserved_kinds = ((ConsumerGroups.SERDE.KINDS if consumer is None else frozenset())
                                | (ShareGroups.SERDE.KINDS if share is None else frozenset()))
        self._classic = classic
        self._consumer = consumer
        self._share = share
        self.num_partitions = broker.config["offsets.topic.num.partitions"]
        self._timers: dict[tuple[str, tuple], asyncio.TimerHandle] = {}     # (namespace, key) -> handle
        # tokens appended to the log, waiting for their fsync: (token, error_code, sync future)
        self._syncing: collections.deque = collections.deque()
        self._completer: asyncio.Task | None = None
        self._closed = False
        # the coordinator's appends wait for a datasync of their own segments only
        self.offsets_sync = OffsetsLogSync(broker.sync.enabled)
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
                    kind = key_version(key)
                    machine = self._by_kind.get(kind)
                    if machine is None:
                        if kind in self._unserved_kinds:
                            continue
                        raise DecodeError(f"record type {kind} is not read by this coordinator")
                    record = machine.SERDE.decode(key, value, self)
                except DecodeError as e:
                    log.warning("%s-%d offset %d: skipping record: %s", OFFSETS_TOPIC, p, off, e)
                    continue
                machine.replay(record, pid)
                n += 1
        self.loaded_records = n
        self.load_ms = (time.perf_counter() - t0) * 1000
        topics = self._topic_partition_counts()
        for machine in self.machines:
            self.apply(machine.on_loaded(self.clock(), topics))
        self.events.baseline(self)        # the loaded groups are known: no events for them
        log.info("group coordinator loaded %d records (%d groups) in %.1f ms", n,
                 len(self.groups.group_ids(include_dead=True)), self.load_ms)

    async def close(self) -> None:
        """Stop serving: let pending appends finish, answer parked requests, drop timers."""
        if self._completer is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._completer), 5)
            except (Exception, asyncio.CancelledError):   # noqa: BLE001
                pass
        self._closed = True
        self.offsets_sync.close()
        for machine in self.machines:
            self._deliver(machine.unload())
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()

    # -- storage lookups (the serdes' TopicIds) ----------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return group_partition(group_id, self.num_partitions)

    def topic_name(self, topic_id):
        try:
            return self.broker.storage.topic_name(topic_id)
        except StorageError:
            return None

    def topic_id(self, name: str):
        storage = self.broker.storage
        return storage.topic(name).topic_id if storage.has_topic(name) else None

    def _topic_partition_counts(self) -> dict[str, int]:
        return {t.name: t.num_partitions for t in self.broker.storage.topics()}

    def _encode(self, r) -> tuple[bytes, bytes | None]:
        return self._serde_by_class[type(r)].encode(r, self)

    # -- running a machine's step ------------------------------------------------------------------
    def _run(self, machine: GroupMachine, op: str, step: Callable, *args, **kwargs) -> asyncio.Future:
        """Run `step`, an operation of `machine`, with (*args, now_ms, reply_to, **kwargs); apply its
        Outcome and show it to the group events (`op` names the step for them). The returned future
        gets the operation's result."""
        fut = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_exception(RuntimeError("group coordinator closed"))
            return fut
        out = step(*args, self.clock(), fut, **kwargs)
        self.apply(out)
        self.events.observe(self, op, args, out, consumer=machine is self._consumer)
        return fut

    def _consumer_groups(self) -> ConsumerGroups:
        if self._consumer is None:
            raise RuntimeError("consumer group coordinator not available")
        return self._consumer

    # -- classic-protocol membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup ---------------------
    async def join_group(self, p: JoinParams) -> JoinResult:
        """JoinGroup, answered by the group's owner: a consumer group's machine for its classic
        members; an empty consumer group is deleted first and the join makes a classic group."""
        owner = self.groups.owner(p.group_id)
        cg = self.groups.consumer_group(p.group_id)
        if owner is self._consumer and cg is not None and not cg.members:
            err = await self._run(owner, "delete_group", owner.delete_group, p.group_id)
            if err not in (None, C.NONE):
                return JoinResult(C.COORDINATOR_NOT_AVAILABLE, p.member_id)
        return await self._classic_protocol(p, ClassicGroupCoordinator.join_group, ConsumerGroups.classic_join,
                                            self._topic_partition_counts())

    async def sync_group(self, p: SyncParams) -> SyncResult:
        return await self._classic_protocol(p, ClassicGroupCoordinator.sync_group, ConsumerGroups.classic_sync)

    async def heartbeat(self, p: HeartbeatParams) -> HeartbeatResult:
        return await self._classic_protocol(p, ClassicGroupCoordinator.heartbeat, ConsumerGroups.classic_heartbeat)

    async def leave_group(self, p: LeaveParams) -> LeaveResult:
        return await self._classic_protocol(p, ClassicGroupCoordinator.leave_group, ConsumerGroups.classic_leave)

    def _classic_protocol(self, p: JoinParams | SyncParams | HeartbeatParams | LeaveParams,
                          classic_step: Callable, consumer_step: Callable, *consumer_args) -> asyncio.Future:
        """A classic-protocol request to the owner of `p.group_id`: `consumer_step` (with
        `consumer_args`) of the consumer-group machine for its groups' classic members, else the classic
        machine's `classic_step`. The step's name labels it for the group events."""
        if self.groups.active and self.groups.share_group(p.group_id) is not None:
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(_not_this_type(classic_step, p))
            return fut
        owner = self.groups.owner(p.group_id)
        if owner is self._consumer:
            return self._run(owner, consumer_step.__name__, functools.partial(consumer_step, owner), p, *consumer_args)
        return self._run(owner, classic_step.__name__, functools.partial(classic_step, owner), p)

    # -- KIP-848 ---------------------------------------------------------------------------------------
    async def consumer_group_heartbeat(self, p: ConsumerHeartbeatParams) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat, with the broker's topics as of now."""
        machine = self._consumer_groups()
        if self.groups.active and self.groups.share_group(p.group_id) is not None:
            return ConsumerHeartbeatResult(C.GROUP_ID_NOT_FOUND, f"Group {p.group_id} is not a consumer group.",
                                           p.member_id, -1, 0)
        return await self._run(machine, "heartbeat", machine.heartbeat, p, self._topic_partition_counts())

    # -- KIP-932 share groups ------------------------------------------------------------------------
    def _share_group_config(self, group_id: str) -> ShareGroupConfig | None:
        """A share group's membership settings from its group configs (kohort.broker.group_configs:
        share.session.timeout.ms, share.heartbeat.interval.ms, share.assignment.interval.ms), None
        when it has none of them."""
        own = store_of(self.broker).get(group_id)
        names = ("share.session.timeout.ms", "share.heartbeat.interval.ms", "share.assignment.interval.ms")
        if not any(n in own for n in names):
            return None
        base = self._share_groups().config
        return ShareGroupConfig(
            session_timeout_ms=int(own.get(names[0], base.session_timeout_ms)),
            heartbeat_interval_ms=int(own.get(names[1], base.heartbeat_interval_ms)),
            max_size=base.max_size,
            assignment_interval_ms=int(own.get(names[2], base.assignment_interval_ms)))

    def _share_groups(self) -> ShareGroups:
        if self._share is None:
            raise RuntimeError("share groups are not enabled (share.version 0)")
        return self._share

    def share_topic_metadata(self) -> dict:
        """name -> (topic id, partition count) of every topic, as the share machine keys them."""
        return {t.name: (t.topic_id, t.num_partitions) for t in self.broker.storage.topics()}

    async def share_group_heartbeat(self, req: ShareGroupHeartbeatRequest, client_id: str = "",
                                    client_host: str = "") -> ShareGroupHeartbeatResponse:
        """ShareGroupHeartbeat; a group id used by a classic or consumer group is GROUP_ID_NOT_FOUND
        ("Group X is not a share group.", as Kafka)."""
        machine = self._share_groups()
        if self.groups.type_of(req.group_id) not in (None, GroupType.SHARE):
            return ShareGroupHeartbeatResponse(error_code=C.GROUP_ID_NOT_FOUND, member_epoch=-1,
                                               heartbeat_interval_ms=0,
                                               error_message=f"Group {req.group_id} is not a share group.")
        return await self._run(machine, "share_heartbeat", machine.heartbeat, req, self.share_topic_metadata(),
                               client_id, client_host)

    async def share_group_describe(self, group_ids: list[str]) -> list:
        """ShareGroupDescribe's DescribedGroup entries; other group types: "Group X is not a share group."."""
        machine = self._share_groups()
        names = {t.topic_id: t.name for t in self.broker.storage.topics()}
        described = await self._run(machine, "share_describe", machine.describe, group_ids, names)
        for d in described:
            if d.error_code == C.GROUP_ID_NOT_FOUND and self.groups.type_of(d.group_id) is not None:
                d.error_message = f"Group {d.group_id} is not a share group."
        return described

    async def share_alter_offsets(self, group_id: str, partitions: dict) -> int:
        """AlterShareGroupOffsets in the group: (topic id -> (name, partitions)) -> error code."""
        machine = self._share_groups()
        if self.groups.type_of(group_id) not in (None, GroupType.SHARE):
            return C.GROUP_ID_NOT_FOUND
        return await self._run(machine, "share_alter_offsets", machine.alter_offsets, group_id, partitions)

    async def share_delete_offsets(self, group_id: str, topic_ids: list) -> tuple[int, dict]:
        """DeleteShareGroupOffsets in the group -> (error code, {topic id: error code})."""
        machine = self._share_groups()
        if self.groups.type_of(group_id) not in (None, GroupType.SHARE):
            return C.GROUP_ID_NOT_FOUND, {}
        return await self._run(machine, "share_delete_offsets", machine.delete_offsets, group_id, topic_ids)

    # -- committed offsets: kept by group id, each validated by the group of its id ----------------
    async def offset_commit(self, p: OffsetCommitParams) -> OffsetCommitResult:
        return await self._run(self._classic, "offset_commit", self._classic.offset_commit, p)

    async def txn_offset_commit(self, p: TxnOffsetCommitParams) -> OffsetCommitResult:
        """TxnOffsetCommit once the transaction coordinator verified the producer (a consumer
        group's stale member epoch is ILLEGAL_GENERATION here, as Kafka answers it)."""
        return await self._run(self._classic, "txn_offset_commit", self._classic.txn_offset_commit, p)

    async def offset_fetch(self, p: OffsetFetchParams, member_id: str | None = None,
                           member_epoch: int = -1) -> OffsetFetchResult:
        """OffsetFetch; `member_id`/`member_epoch` (v9+) are checked by a consumer group."""
        return await self._run(self._classic, "offset_fetch", self._classic.offset_fetch, p,
                               member_id=member_id, member_epoch=member_epoch)

    async def offset_delete(self, p: OffsetDeleteParams) -> OffsetDeleteResult:
        """OffsetDelete; a group keeps the offsets of topics it subscribes to (GROUP_SUBSCRIBED_TO_TOPIC)."""
        return await self._run(self._classic, "offset_delete", self._classic.offset_delete, p)

    # -- administration ----------------------------------------------------------------------------
    async def describe_groups(self, group_ids: list[str], api_version: int) -> DescribeGroupsResult:
        """DescribeGroups of the classic machine (a consumer group is answered there as unknown; the
        handler words it as Kafka does, asking `groups.type_of`)."""
        return await self._run(self._classic, "describe_groups", self._classic.describe_groups, group_ids,
                               api_version=api_version)

    async def list_groups(self, states_filter: tuple[str, ...] = (),
                          types_filter: tuple[str, ...] = ()) -> ListGroupsResult:
        """ListGroups over every machine: classic groups (simple ones too), share groups, consumer
        groups with type and protocol type "consumer" (an Empty one too, offsets or not)."""
        res = await self._run(self._classic, "list_groups", self._classic.list_groups,
                              states_filter=list(states_filter), types_filter=list(types_filter))
        if res.error_code:
            return res
        consumer = self.groups.consumer_groups()
        listed = list(res.groups)
        states = {x.lower() for x in states_filter}
        types = {x.lower() for x in types_filter}
        if not types or GroupType.SHARE.value in types:
            for gid, sg in self.groups.share_groups().items():
                if not states or sg.state.lower() in states:
                    listed.append(ListedGroup(gid, "share", sg.state, GroupType.SHARE.value))
        if not types or GroupType.CONSUMER.value in types:
            for gid, cg in consumer.items():
                state = cg.state.value
                if not states or state.lower() in states:
                    listed.append(ListedGroup(gid, "consumer", state, GroupType.CONSUMER.value))
        return ListGroupsResult(res.error_code, tuple(listed))

    async def delete_groups(self, group_ids: list[str]) -> DeleteGroupsResult:
        """DeleteGroups: an empty consumer group's records are tombstoned by its machine (a
        non-empty one answers NON_EMPTY_GROUP), then the classic machine deletes classic groups and
        the offsets of every deleted group."""
        consumer_errors: dict[str, int] = {}
        if self._share is not None and self.groups.active:
            for gid in group_ids:
                if self.groups.share_group(gid) is not None:
                    consumer_errors[gid] = await self._run(self._share, "share_delete_group",
                                                           self._share.delete_group, gid)
                    leader = getattr(self.broker, "share_leader", None)
                    if consumer_errors[gid] == C.NONE and leader is not None:
                        leader.forget(gid)       # its share state goes with it
        if self._consumer is not None and self.groups.active:
            for gid in group_ids:
                if gid in consumer_errors:
                    continue
                e = await self._run(self._consumer, "delete_group", self._consumer.delete_group, gid)
                if e is not None:
                    consumer_errors[gid] = e
        classic = [g for g in group_ids if g not in consumer_errors]
        deleted = [g for g, e in consumer_errors.items() if e == C.NONE]
        res = await self._run(self._classic, "delete_groups", self._classic.delete_groups, classic,
                              deleted_elsewhere=deleted)
        results = dict(res.results)
        results.update((gid, e) for gid, e in consumer_errors.items() if e)
        return DeleteGroupsResult(tuple((g, results[g]) for g in dict.fromkeys(group_ids)))

    # -- outcome -----------------------------------------------------------------------------------
    def apply(self, out: Outcome) -> None:
        self._deliver(out)
        for t in out.timers:
            if isinstance(t, SetTimer):
                self._set_timer((t.namespace, t.key), t.deadline_ms)
            elif isinstance(t, CancelTimer):
                h = self._timers.pop((t.namespace, t.key), None)
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
    def _set_timer(self, key: tuple[str, tuple], deadline_ms: int) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline_ms - self.clock()) / 1000)
        self._timers[key] = loop.call_later(delay, self._fire, key, deadline_ms)

    def _fire(self, key: tuple[str, tuple], deadline_ms: int) -> None:
        if self._timers.get(key) is None:
            return
        now = self.clock()
        if now < deadline_ms:              # the wall clock lags the loop's clock: wait the rest
            self._timers[key] = asyncio.get_running_loop().call_later(
                (deadline_ms - now) / 1000, self._fire, key, deadline_ms)
            return
        del self._timers[key]
        namespace, machine_key = key
        machine = self._by_namespace[namespace]
        try:
            out = machine.fire_timer(machine_key, now)
        except Exception:      # noqa: BLE001 - a bug here must not kill the loop's callback
            log.exception("coordinator timer %r failed", key)
            return
        self.apply(out)
        self.events.observe(self, "timer", (machine_key,), out, consumer=machine is self._consumer)

    # appends
    def _append(self, token: AppendToken, records, producer: tuple[int, int] | None = None) -> None:
        error = C.NONE
        now = self.clock()
        by_partition: dict[int, list] = {}
        for r in records:
            p = r.partition if isinstance(r, TxnMarkerRecord) else self.partition_for(r.group)
            by_partition.setdefault(p, []).append(r)
        storage = self.broker.storage
        written = []        # a duplicated handle of each segment appended to, datasynced below
        for p, recs in by_partition.items():
            try:
                lg = storage.log(OFFSETS_TOPIC, p)
                if producer is None:
                    batch = build_batch([(*self._encode(r), [], now) for r in recs])
                    lg.append(batch, leader_epoch=self.broker.leader_epoch, now_ms=now)
                else:
                    error = self._append_transactional(p, recs, producer, now)
                    if error:
                        break
                if self.offsets_sync.enabled:
                    written.append(lg.active_segment.log.dup())
            except StorageError as e:
                log.warning("append to %s-%d failed: %s", OFFSETS_TOPIC, p, e)
                error = e.error_code or C.UNKNOWN_SERVER_ERROR
                break
            except Exception:   # noqa: BLE001 - encoding bug or I/O: report, do not wedge
                log.exception("append to %s-%d failed", OFFSETS_TOPIC, p)
                error = C.UNKNOWN_SERVER_ERROR
                break
        sync = None
        if error == C.NONE:
            sync = self.offsets_sync.synced_future(written)
        else:
            for h in written:
                h.close()
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
        while self.groups.phase == "loading":
            await asyncio.sleep(0.05)
        marker = TxnMarkerRecord(partition, producer_id, producer_epoch, commit, coordinator_epoch)
        return await self._run(self._classic, "write_txn_marker", self._classic.write_txn_marker, marker,
                               lambda gid: self.partition_for(gid) == partition)

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
                out = self._by_namespace[token.namespace].on_append_done(token, error, self.clock())
                self.apply(out)
                self.events.observe(self, "stored", (token,), out)
        finally:
            self._completer = None


def _not_this_type(classic_step: Callable, p) -> object:
    """The answer of a classic-protocol request for a share group's id (GROUP_ID_NOT_FOUND, Kafka's
    "Group X is not a classic group.")."""
    name = classic_step.__name__
    if name == "join_group":
        return JoinResult(C.GROUP_ID_NOT_FOUND, p.member_id)
    if name == "sync_group":
        return SyncResult(C.GROUP_ID_NOT_FOUND)
    if name == "leave_group":
        return LeaveResult(C.GROUP_ID_NOT_FOUND)
    return HeartbeatResult(C.GROUP_ID_NOT_FOUND)


async def open_coordinator(broker, clock: Callable[[], int] = wall_clock_ms) -> CoordinatorRuntime:
    """Attach the group coordinator to `broker` (as `broker.coordinator`), loaded and serving."""
    rt = CoordinatorRuntime(broker, clock)
    broker.coordinator = rt
    broker._closers.append(rt.close)
    await rt.start()
    if rt.groups.share is not None:      # the share partitions' leader state, from __share_group_state
        open_share_leader(broker)
    return rt


open = open_coordinator   # noqa: A001 - the name kohort.broker.components looks up

__all__ = ["CoordinatorRuntime", "open_coordinator", "wall_clock_ms"]
