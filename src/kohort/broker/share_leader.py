"""The partition leader's share-group state (KIP-932): the thin driver of the pure share machines
of kohort.broker.share — the share sessions (`ShareSessionCache`) and one `SharePartition` per
(share group, topic id, partition) — with the log, the clock and the fetch waiters.

* A share partition is made at the first ShareFetch that names it, from the state persisted for it
  when there is one (`state`, kohort.broker.share_state_runtime), else at the offset the group's
  `share.auto.offset.reset` resolves: `earliest` the log start, `latest` (default) the high
  watermark, `by_duration:<ISO-8601 duration>` the first record at or after now minus that duration
  (the high watermark when there is none).
* Its settings (lock duration, delivery count limit, record-lock window, isolation level, renewal)
  are the group's configs over the broker's `group.share.*` defaults, read when it is made.
* Lock timers: after every change the partition's `next_deadline_ms()` is armed as one asyncio
  timer per partition; on expiry `expire_locks(now)` releases what passed and wakes the ShareFetch
  long polls waiting on that partition (kohort.broker.waiters), as an append does.
* A share session ends with the connection it was opened on: once a second the sessions whose
  connection is gone (no longer among the broker's open connections) are closed and their members'
  records released, as Kafka's ShareSessionCache does on a connection close.
* Applied acknowledgements are counted by type in the broker's metrics (`record_share_acknowledgements`);
  a partition's own counters (`SharePartition.counters`) run on across an offsets reset.
* Every `StateWrite` a change returns is written to `__share_group_state` through `state` (memory
  only when none is attached); a new partition's start offset is written first.

Public: `ShareLeader(broker)`, `open_share_leader(broker)` (kept as `broker.share_leader`), `leader_of`,
`partition(...)`, `after_change(...)`, `release_member(...)`, `acknowledge(...)`, the offsets
(`offset_and_lag`, `reset`, `forget`), `close()`.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid as _uuid
from typing import Any, Callable, Sequence

from kohort.broker.group_config_file import store_of
from kohort.broker.share.partition import AckBatch, SharePartition, SharePartitionConfig, StateWrite
from kohort.broker.share.sessions import ShareSessionCache
from kohort.errors import ErrorCode

log = logging.getLogger("kohort.broker.share")

PartitionKey = tuple[str, _uuid.UUID, int]      # (group id, topic id, partition)
SWEEP_S = 1.0                                   # how often sessions of closed connections are ended

# share.auto.offset.reset=by_duration:<ISO-8601 duration PnDTnHnMn.nS> (Java's Duration.parse subset)
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration such as PT1H or P1DT30M; ValueError when it is not one
    (or is negative, which Kafka refuses)."""
    m = _DURATION.match(text.strip())
    if not m or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    d, h, mi, s = m.groups()
    return int((int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0)) * 1000)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class ShareLeader:
    def __init__(self, broker: Any, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.broker = broker
        self.clock = clock
        cfg = broker.config
        self.sessions = ShareSessionCache(int(cfg.get("group.share.max.share.sessions", 2000)))
        self.partitions: dict[PartitionKey, SharePartition] = {}
        self._timers: dict[PartitionKey, tuple[int, asyncio.TimerHandle]] = {}
        self.state: Any = None        # kohort.broker.share_state_runtime.ShareStateRuntime, or None
        self._sweeper: asyncio.TimerHandle | None = None

    # -- configs -------------------------------------------------------------------------------------
    def group_config(self, group_id: str, name: str) -> str | None:
        """A group config's value (IncrementalAlterConfigs on the GROUP resource) or None."""
        return store_of(self.broker).get(group_id).get(name)

    def partition_config(self, group_id: str) -> SharePartitionConfig:
        b = self.broker.config

        def num(name: str, broker_name: str) -> int:
            v = self.group_config(group_id, name)
            return int(v) if v is not None else int(b.get(broker_name))
        renew = self.group_config(group_id, "share.renew.acknowledge.enable")
        return SharePartitionConfig(
            record_lock_duration_ms=num("share.record.lock.duration.ms", "group.share.record.lock.duration.ms"),
            delivery_count_limit=num("share.delivery.count.limit", "group.share.delivery.count.limit"),
            max_in_flight_records=num("share.partition.max.record.locks", "group.share.partition.max.record.locks"),
            read_committed=self.group_config(group_id, "share.isolation.level") == "read_committed",
            renew_enabled=renew is None or renew.lower() == "true")

    def lock_duration_ms(self, group_id: str) -> int:
        v = self.group_config(group_id, "share.record.lock.duration.ms")
        return int(v) if v is not None else int(self.broker.config.get("group.share.record.lock.duration.ms"))

    def reset_offset(self, group_id: str, topic: str, partition: int) -> int:
        """Where a share partition with no state starts (share.auto.offset.reset)."""
        lg = self.broker.storage.log(topic, partition)
        policy = (self.group_config(group_id, "share.auto.offset.reset") or "latest").strip()
        if policy.lower() == "earliest":
            return lg.log_start_offset
        if policy.lower().startswith("by_duration:"):
            found = lg.offset_for_timestamp(self.clock() - parse_duration_ms(policy.split(":", 1)[1]))
            return found[0] if found is not None else lg.high_watermark
        return lg.high_watermark

    # -- partitions ----------------------------------------------------------------------------------
    def partition(self, group_id: str, topic_id: _uuid.UUID, topic: str, index: int) -> SharePartition:
        """The share partition of (group, topic-partition), made on first use."""
        key = (group_id, topic_id, index)
        sp = self.partitions.get(key)
        if sp is None:
            cfg = self.partition_config(group_id)
            persisted = self.state.read(key) if self.state is not None else None
            if persisted is not None and persisted[0] >= 0:
                start, batches = persisted
                sp = SharePartition.from_state(start, batches, cfg)
            else:
                sp = SharePartition(self.reset_offset(group_id, topic, index), cfg)
                if self.state is not None:
                    self.state.initialize(key, sp.start_offset)
            lg = self.broker.storage.log(topic, index)
            if lg.log_start_offset > sp.start_offset:
                self._persist(key, sp.update_log_start_offset(lg.log_start_offset))
            self.partitions[key] = sp
        return sp

    def existing(self, group_id: str, topic_id: _uuid.UUID, index: int) -> SharePartition | None:
        return self.partitions.get((group_id, topic_id, index))

    def after_change(self, key: PartitionKey, write: StateWrite | None) -> None:
        """Persist `write`, re-arm the partition's lock timer; wake long polls when records may have
        become available again."""
        self._persist(key, write)
        self._arm(key)
        if write is not None:
            self._wake(key)

    def _persist(self, key: PartitionKey, write: StateWrite | None) -> None:
        if write is not None and self.state is not None:
            self.state.write(key, write)

    def acknowledge(self, member_id: str, key: PartitionKey, batches: Sequence[AckBatch]) -> tuple[int, str | None]:
        """Apply a partition's acknowledgement batches -> (error code, message)."""
        sp = self.partitions.get(key)
        if sp is None:
            return ErrorCode.INVALID_RECORD_STATE, "no records of this partition are acquired"
        res = sp.acknowledge(member_id, batches, self.clock())
        if res.error is not None:
            return int(res.error), res.message
        metrics = getattr(self.broker, "metrics", None)
        if metrics is not None:
            metrics.record_share_acknowledgements(batches)
        self.after_change(key, res.write)
        return ErrorCode.NONE, None

    def offset_and_lag(self, group_id: str, topic_id: _uuid.UUID, topic: str, index: int) -> tuple[int, int]:
        """(start offset, lag) of a share partition (KIP-1226: high watermark - SPSO - records
        delivered past SPSO); (-1, -1) while it has no state on this leader."""
        sp = self.partitions.get((group_id, topic_id, index))
        if sp is None:
            return -1, -1
        hwm = self.broker.storage.log(topic, index).high_watermark
        return sp.start_offset, max(0, hwm - sp.start_offset - sp.delivery_complete_count())

    def reset(self, group_id: str, topic_id: _uuid.UUID, index: int, start_offset: int) -> None:
        """AlterShareGroupOffsets: the partition starts afresh at `start_offset`, nothing in flight."""
        key = (group_id, topic_id, index)
        old = self.partitions.get(key)
        sp = self.partitions[key] = SharePartition(start_offset, self.partition_config(group_id))
        if old is not None:
            sp.counters = old.counters           # the metrics' counters run on across a reset
        if self.state is not None:
            self.state.initialize(key, start_offset)
        self._arm(key)

    def forget(self, group_id: str, topic_id: _uuid.UUID | None = None) -> None:
        """DeleteShareGroupOffsets / DeleteGroups: drop the group's share partitions (of one topic)."""
        for key in [k for k in self.partitions if k[0] == group_id and topic_id in (None, k[1])]:
            del self.partitions[key]
            old = self._timers.pop(key, None)
            if old is not None:
                old[1].cancel()
            if self.state is not None:
                self.state.delete(key)

    def release_member(self, group_id: str, member_id: str) -> None:
        """The member's share session closed: what it holds on every partition goes back."""
        for key, sp in list(self.partitions.items()):
            if key[0] == group_id:
                self.after_change(key, sp.release_member(member_id))

    def connection_closed(self, connection: Any) -> None:
        for group_id, member_id in self.sessions.connection_closed(connection):
            self.release_member(group_id, member_id)

    def sweep_closed_connections(self) -> None:
        """Close the sessions of connections that are gone, releasing their members' records."""
        open_ids = getattr(self.broker, "_conn_states", None)
        if open_ids is None:
            return
        for conn in {s.connection for s in self.sessions.sessions.values()} - set(open_ids):
            self.connection_closed(conn)

    def _sweep_every_second(self) -> None:
        try:
            self.sweep_closed_connections()
        except Exception:      # noqa: BLE001 - keep sweeping
            log.exception("share session sweep failed")
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep_every_second)

    # -- lock timers ---------------------------------------------------------------------------------
    def _arm(self, key: PartitionKey) -> None:
        sp = self.partitions.get(key)
        deadline = sp.next_deadline_ms() if sp is not None else None
        old = self._timers.get(key)
        if old is not None and old[0] == deadline:
            return
        if old is not None:
            old[1].cancel()
            del self._timers[key]
        if deadline is None:
            return
        delay = max(0.0, (deadline - self.clock()) / 1000)
        self._timers[key] = (deadline, asyncio.get_running_loop().call_later(delay, self._fire, key))

    def _fire(self, key: PartitionKey) -> None:
        self._timers.pop(key, None)
        sp = self.partitions.get(key)
        if sp is None:
            return
        try:
            self.after_change(key, sp.expire_locks(self.clock()))
        except Exception:      # noqa: BLE001 - a bug here must not kill the loop's callback
            log.exception("share lock expiry of %r failed", key)

    def _wake(self, key: PartitionKey) -> None:
        try:
            name = self.broker.storage.topic_name(key[1])
        except Exception:      # noqa: BLE001 - the topic is gone: nobody waits on it
            return
        self.broker.waiters.notify(name, key[2])

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for _, h in self._timers.values():
            h.cancel()
        self._timers.clear()


def open_share_leader(broker: Any) -> ShareLeader:
    """Attach the broker's ShareLeader (`broker.share_leader`) with its persisted share state
    loaded from `__share_group_state`; its timers stop when the broker stops."""
    from kohort.broker.share_state_runtime import ShareStateRuntime
    sl = ShareLeader(broker)
    sl.state = ShareStateRuntime(broker).open()
    broker.share_leader = sl
    sl._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, sl._sweep_every_second)

    async def close() -> None:
        sl.close()
    broker._closers.append(close)
    return sl


def leader_of(broker: Any) -> ShareLeader:
    """The broker's ShareLeader (opened with the group coordinator; made here, memory only, when the
    broker runs without one)."""
    sl = getattr(broker, "share_leader", None)
    if sl is None:
        sl = ShareLeader(broker)
        broker.share_leader = sl
    return sl
