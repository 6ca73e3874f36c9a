"""Share groups (KIP-932) as one of the coordinator runtime's group machines: `ShareGroups` wraps the
pure `ShareGroupCoordinator` (kohort.broker.share.group) in the `GroupMachine` plumbing, so the
runtime loads, appends and fires its timers as it does for the classic and consumer machines.

* records: the coordinator's (key, value) pairs travel as `ShareGroupRecord`s; `ShareGroupRecordSerde`
  reads and writes `__consumer_offsets` record types 10-15 (`ShareRecordKind`) in Kafka's formats
  (kohort.protocol.share_group_records).
* timers: the coordinator's session timers ("share-session", group, member) are armed in the
  namespace "share"; one firing removes the member.
* a heartbeat's response is held until its records are stored. Share-state initializations
  (InitializeState) are handed to `on_initialize` once those records are stored (the share-state
  driver persists them); when it has none the partitions are initialized at once, start offset -1
  (the partition leader applies share.auto.offset.reset when it first reads it). Either way
  `state_initialized` records them initialized, which makes them assignable.
Pure: no I/O, no clock.
"""
from __future__ import annotations

import enum
import uuid as _uuid
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

from kohort.broker.coordinator import codes as C
from kohort.broker.coordinator.machine import AppendToken, GroupMachine, GroupType
from kohort.broker.coordinator.model import Outcome, Response
from kohort.broker.share.group import (
    CancelTimer as ShareCancelTimer, InitializeState, ShareGroup, ShareGroupConfig, ShareGroupCoordinator,
    ShareOutcome, TopicMetadata,
)
from kohort.protocol import share_group_records as R
from kohort.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse


class ShareRecordKind(enum.IntEnum):
    """The share-group record types of `__consumer_offsets` (Kafka's CoordinatorRecordType)."""
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
    SHARE_GROUP_STATE_PARTITION_METADATA = 15


@dataclass(frozen=True)
class ShareGroupRecord:
    """One share-group record: its key message and value message (None: a tombstone)."""
    key: Any
    value: Any

    @property
    def group(self) -> str:
        return self.key.group_id


@dataclass(frozen=True)
class ShareGroupRecordSerde:
    """Share-group records (types 10-15); topics are ids on disk and in the machine alike."""
    KINDS: ClassVar[frozenset[int]] = frozenset(ShareRecordKind)
    RECORD_CLASSES: ClassVar[tuple[type, ...]] = (ShareGroupRecord,)

    def encode(self, record: ShareGroupRecord, topics: Any) -> tuple[bytes, bytes | None]:
        return R.encode_key(record.key), R.encode_value(record.value)

    def decode(self, key: bytes, value: bytes | None, topics: Any) -> ShareGroupRecord:
        k, v = R.decode(key, value)
        return ShareGroupRecord(k, v)


@dataclass(frozen=True)
class _Held:
    reply_to: Any
    result: Any
    initialize: tuple[InitializeState, ...] = ()


class ShareGroups(GroupMachine):
    GROUP_TYPE = GroupType.SHARE
    TIMER_NAMESPACE = "share"
    SERDE = ShareGroupRecordSerde()

    def __init__(self, config: ShareGroupConfig | None = None,
                 on_initialize: Callable[[InitializeState], None] | None = None,
                 group_config: Callable[[str], ShareGroupConfig | None] | None = None) -> None:
        super().__init__()
        self.coordinator = ShareGroupCoordinator(config, group_config)
        # the share-state driver's hook: persist the initial state of these partitions, then call
        # `state_initialized`; None: they are initialized at once (memory only)
        self.on_initialize = on_initialize

    @property
    def groups(self):
        return self.coordinator.groups

    @property
    def config(self) -> ShareGroupConfig:
        return self.coordinator.config

    # -- operations (the runtime passes now_ms and reply_to last) -------------------------------------
    def heartbeat(self, req: ShareGroupHeartbeatRequest, topics: TopicMetadata, client_id: str,
                  client_host: str, now_ms: int, reply_to: Any) -> Outcome:
        so = self.coordinator.heartbeat(req, topics, now_ms, client_id=client_id, client_host=client_host)
        return self._outcome(so, reply_to, so.response)

    def describe(self, group_ids: Sequence[str], topic_names: Mapping[_uuid.UUID, str], now_ms: int,
                 reply_to: Any) -> Outcome:
        return Outcome(responses=[Response(reply_to, self.coordinator.describe(group_ids, topic_names))])

    def delete_group(self, group_id: str, now_ms: int, reply_to: Any) -> Outcome:
        """DeleteGroups of one share group: the error code once its tombstones are stored."""
        err, records = self.coordinator.delete_group(group_id)
        if err is not None:
            return Outcome(responses=[Response(reply_to, int(err))])
        out = Outcome()
        self._hold(out, [ShareGroupRecord(k, v) for k, v in records], _Held(reply_to, C.NONE))
        return out

    def alter_offsets(self, group_id: str, partitions: Mapping[_uuid.UUID, tuple[str, frozenset[int]]],
                      now_ms: int, reply_to: Any) -> Outcome:
        """AlterShareGroupOffsets: an Empty group (made when absent) has the share state of
        `partitions` (topic id -> (name, partitions)) set afresh, recorded initialized; answers an
        error code (NON_EMPTY_GROUP while it has members) once stored."""
        g = self.groups.get(group_id)
        if g is not None and g.members:
            return Outcome(responses=[Response(reply_to, C.NON_EMPTY_GROUP)])
        records = []
        if g is None:
            g = self.groups[group_id] = ShareGroup(group_id)
            records.append((R.ShareGroupMetadataKey(group_id=group_id),
                            R.ShareGroupMetadataValue(epoch=g.group_epoch, metadata_hash=g.metadata_hash)))
        for tid, (name, ps) in partitions.items():
            have = g.initialized.get(tid, (name, frozenset()))[1]
            g.initialized[tid] = (name, have | frozenset(ps))
            rest = g.initializing.get(tid, (name, frozenset()))[1] - frozenset(ps)
            if rest:
                g.initializing[tid] = (name, rest)
            else:
                g.initializing.pop(tid, None)
        records.append(self.coordinator._state_metadata_record(g))
        out = Outcome()
        self._hold(out, [ShareGroupRecord(k, v) for k, v in records], _Held(reply_to, C.NONE))
        return out

    def delete_offsets(self, group_id: str, topic_ids: Sequence[_uuid.UUID], now_ms: int,
                       reply_to: Any) -> Outcome:
        """DeleteShareGroupOffsets: the Empty group forgets the share state of whole topics. Answers
        (group error code, {topic id: error code}) once stored; a topic without state is
        UNKNOWN_TOPIC_OR_PARTITION."""
        g = self.groups.get(group_id)
        if g is None:
            return Outcome(responses=[Response(reply_to, (C.GROUP_ID_NOT_FOUND, {}))])
        if g.members:
            return Outcome(responses=[Response(reply_to, (C.NON_EMPTY_GROUP, {}))])
        errors = {}
        for tid in topic_ids:
            known = tid in g.initialized or tid in g.initializing
            errors[tid] = C.NONE if known else C.UNKNOWN_TOPIC_OR_PARTITION
            g.initialized.pop(tid, None)
            g.initializing.pop(tid, None)
        out = Outcome()
        if any(e == C.NONE for e in errors.values()):
            self._hold(out, [ShareGroupRecord(*self.coordinator._state_metadata_record(g))],
                       _Held(reply_to, (C.NONE, errors)))
        else:
            out.responses.append(Response(reply_to, (C.NONE, errors)))
        return out

    def state_initialized(self, group_id: str, partitions: Mapping[_uuid.UUID, frozenset[int]],
                          now_ms: int) -> Outcome:
        """The share state of `partitions` is persisted: record them initialized (assignable)."""
        return self._outcome(self.coordinator.state_initialized(group_id, partitions, {}, now_ms), None, None)

    # -- ShareOutcome -> Outcome ------------------------------------------------------------------------
    def _outcome(self, so: ShareOutcome, reply_to: Any, response: Any) -> Outcome:
        out = Outcome()
        for t in so.timers:
            if isinstance(t, ShareCancelTimer):
                self._disarm(out, t.key)
            else:
                self._arm(out, t.key, t.deadline_ms, t.key[1:])
        if so.records:
            self._hold(out, [ShareGroupRecord(k, v) for k, v in so.records],
                       _Held(reply_to, response, tuple(so.initialize)))
        else:
            if reply_to is not None:
                out.responses.append(Response(reply_to, response))
            self._initialize(out, so.initialize)
        return out

    def _initialize(self, out: Outcome, requests: Sequence[InitializeState]) -> None:
        for init in requests:
            if self.on_initialize is not None:
                self.on_initialize(init)
                continue
            more = self.state_initialized(init.group_id, init.partitions, 0)
            out.responses += more.responses
            out.appends += more.appends
            out.timers += more.timers

    # -- the runtime's calls ----------------------------------------------------------------------------
    def replay(self, record: ShareGroupRecord, producer_id: int = -1) -> None:
        self.coordinator.replay(record.key, record.value)

    def on_loaded(self, now_ms: int, topics: Mapping[str, int] | None = None) -> Outcome:
        out = Outcome()
        for t in self.coordinator.on_loaded(now_ms):
            self._arm(out, t.key, t.deadline_ms, t.key[1:])
        return out

    def on_append_done(self, token: AppendToken, error_code: int, now_ms: int) -> Outcome:
        out = Outcome()
        held = self._pending.pop(token, None)
        if held is None:
            return out
        if error_code:
            if held.reply_to is not None:
                out.responses.append(Response(held.reply_to, _failed(held.result, C.map_append_error(error_code))))
            return out
        if held.reply_to is not None:
            out.responses.append(Response(held.reply_to, held.result))
        self._initialize(out, held.initialize)
        return out

    def fire_timer(self, key: tuple, now_ms: int) -> Outcome:
        due = self._take_due(key, now_ms)
        if due is None:
            return Outcome()
        _, (group_id, member_id) = due
        return self._outcome(self.coordinator.session_expired(group_id, member_id, now_ms), None, None)

    def unload(self) -> Outcome:
        out = Outcome()
        for token in list(self._pending):
            held = self._pending.pop(token)
            if held.reply_to is not None:
                out.responses.append(Response(held.reply_to, _failed(held.result, C.NOT_COORDINATOR)))
        self._disarm_all(out)
        return out


def _failed(result: Any, code: int) -> Any:
    """`result` (a heartbeat response, an error code, or DeleteShareGroupOffsets' (code, errors))
    as failed with `code`."""
    if isinstance(result, ShareGroupHeartbeatResponse):
        return ShareGroupHeartbeatResponse(error_code=code, member_epoch=-1, heartbeat_interval_ms=0)
    if isinstance(result, tuple):
        return code, {}
    return code
