"""Share groups (KIP-932) on the group coordinator, as a PURE state machine: no I/O, no clock; every
entry point takes `now_ms` and returns a `ShareOutcome` (the response, the `__consumer_offsets`
records to append, timer actions, share-state initializations to request). A driver persists the
records (kohort.protocol.share_group_records has their formats) and answers after they are stored.

Model (Kafka 4.3's GroupMetadataManager for share groups):
* states Empty (no members) and Stable; no reconciliation: a member jumps straight to its target.
* group epoch: bumped when a member joins, leaves or is fenced, a subscription changes, the
  subscribed topics' metadata changes (a hash of ids, names and partition counts), or share state
  of subscribed partitions becomes initialized. The target assignment is recomputed with the simple
  assignor when the group epoch is past the assignment epoch, at most once per
  group.share.assignment.interval.ms (Kafka 4.3, KIP-1263; 0 = at once, as before 4.3; the time is
  written as the target metadata's AssignmentTimestamp); members then take the assignment epoch as
  their member epoch.
* heartbeat checks: member id empty or longer than 36, group id or rack id "", epoch < -1, or epoch
  0 without subscribed topics -> INVALID_REQUEST; a non-zero epoch for an unknown group ->
  GROUP_ID_NOT_FOUND; unknown member -> UNKNOWN_MEMBER_ID; an epoch past the member's, or older and
  not its previous one -> FENCED_MEMBER_EPOCH; a new member past group.share.max.size ->
  GROUP_MAX_SIZE_REACHED. Epoch 0 is always accepted (a member rejoining keeps its id); -1 leaves.
* share-state initialization: subscribed partitions without share state are recorded as
  initializing (record 15) and returned as `InitializeState` requests (state epoch = group epoch,
  start offset -1); `state_initialized` records them initialized. Only initialized partitions are
  assignable, so a new group's first heartbeat gets an empty assignment.
* timers: a session timer per member (`SetTimer`/`CancelTimer`, key ("share-session", group,
  member)); `session_expired` removes the member.
* records, in Kafka's order: member metadata (10), group epoch (11), state partition metadata (15),
  member targets (13), target metadata (12), current member assignments (14); a departed member's
  14/13/10 tombstones first. `replay` rebuilds the groups from them.

Settings: `ShareGroupConfig` (the broker's group.share.*), or a group's own (its group configs
share.session.timeout.ms, share.heartbeat.interval.ms, share.assignment.interval.ms) through the
`group_config` hook.

Topics: the caller passes the topic metadata (name -> (topic id, partition count)) into each
heartbeat; assignments are kept by topic id, as on the wire.
"""
from __future__ import annotations

import dataclasses
import hashlib
import uuid as _uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from kohort.broker.share import assignor
from kohort.errors import ErrorCode
from kohort.protocol import share_group_records as R
from kohort.protocol.messages.share_group_describe import ShareGroupDescribeResponse
from kohort.protocol.messages.share_group_heartbeat import (
    JOIN_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
)

Assignment = dict[_uuid.UUID, frozenset[int]]
TopicMetadata = Mapping[str, tuple[_uuid.UUID, int]]        # name -> (topic id, partition count)

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
MAX_MEMBER_ID_LENGTH = 36


@dataclass(frozen=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45000          # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5000        # group.share.heartbeat.interval.ms
    max_size: int = 200                      # group.share.max.size
    assignment_interval_ms: int = 1000       # group.share.assignment.interval.ms (Kafka 4.3, KIP-1263)

    def __post_init__(self):
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be below session_timeout_ms")
        if self.max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {self.max_size}")
        if self.assignment_interval_ms < 0:
            raise ValueError(f"assignment_interval_ms must not be negative, got {self.assignment_interval_ms}")


@dataclass(frozen=True)
class SetTimer:
    key: tuple
    deadline_ms: int


@dataclass(frozen=True)
class CancelTimer:
    key: tuple


@dataclass(frozen=True)
class InitializeState:
    """InitializeShareGroupState for these partitions (start offset -1: the leader applies
    share.auto.offset.reset when it first loads them)."""
    group_id: str
    state_epoch: int
    partitions: dict[_uuid.UUID, frozenset[int]]


@dataclass
class ShareOutcome:
    response: Any = None
    records: list[tuple[Any, Any]] = field(default_factory=list)    # (key, value or None)
    timers: list[SetTimer | CancelTimer] = field(default_factory=list)
    initialize: list[InitializeState] = field(default_factory=list)


@dataclass
class ShareMember:
    member_id: str
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp_ms: int = -1        # when the target was last computed (-1: never)
    members: dict[str, ShareMember] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    # share-state partitions: topic id -> (name, partitions)
    initializing: dict[_uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    initialized: dict[_uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting: dict[_uuid.UUID, str] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY


def session_timer_key(group_id: str, member_id: str) -> tuple:
    return ("share-session", group_id, member_id)


def _error_response(code: ErrorCode, message: str | None = None) -> ShareGroupHeartbeatResponse:
    return ShareGroupHeartbeatResponse(error_code=int(code), error_message=message)


def _tp_list(cls, a: Assignment):
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(a.items(), key=lambda kv: str(kv[0])) if ps]


def _clean(a: Assignment) -> Assignment:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


class ShareGroupCoordinator:
    """Every share group this coordinator owns."""

    def __init__(self, config: ShareGroupConfig | None = None,
                 group_config: Callable[[str], ShareGroupConfig | None] | None = None):
        self.config = config or ShareGroupConfig()
        # a group's own settings (its group configs over the broker's), or None for the broker's
        self.group_config = group_config
        self.groups: dict[str, ShareGroup] = {}

    def config_for(self, group_id: str) -> ShareGroupConfig:
        """The settings that apply to `group_id`: its group configs over the broker's."""
        own = self.group_config(group_id) if self.group_config is not None else None
        return own if own is not None else self.config

    # -- heartbeat ------------------------------------------------------------------------------------
    def heartbeat(self, req: ShareGroupHeartbeatRequest, topics: TopicMetadata, now_ms: int, *,
                  client_id: str = "", client_host: str = "") -> ShareOutcome:
        bad = self._validate(req)
        if bad:
            return ShareOutcome(_error_response(ErrorCode.INVALID_REQUEST, bad))
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return self._leave(req.group_id, req.member_id)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                return ShareOutcome(_error_response(ErrorCode.GROUP_ID_NOT_FOUND,
                                                    f"share group {req.group_id} does not exist"))
            group = ShareGroup(req.group_id)
        member = group.members.get(req.member_id)
        if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if member is None and len(group.members) >= self.config.max_size:
                return ShareOutcome(_error_response(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                                    f"share group {req.group_id} is at its maximum size"))
        elif member is None:
            return ShareOutcome(_error_response(ErrorCode.UNKNOWN_MEMBER_ID,
                                                f"member {req.member_id} is not in share group {req.group_id}"))
        elif req.member_epoch > member.member_epoch or (
                req.member_epoch < member.member_epoch and req.member_epoch != member.previous_member_epoch):
            return ShareOutcome(_error_response(ErrorCode.FENCED_MEMBER_EPOCH,
                                                f"epoch {req.member_epoch} is not the member's {member.member_epoch}"))
        self.groups[group.group_id] = group
        out = ShareOutcome()
        joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        new_member = member is None
        if new_member:
            member = ShareMember(req.member_id)
        updated = dataclasses.replace(member, assigned=dict(member.assigned))
        if req.rack_id is not None:
            updated.rack_id = req.rack_id
        if req.subscribed_topic_names is not None:
            updated.subscribed_topic_names = tuple(sorted(set(req.subscribed_topic_names)))
        if client_id or new_member:
            updated.client_id = client_id
        if client_host or new_member:
            updated.client_host = client_host
        bump = False
        meta_changed = (new_member or updated.rack_id != member.rack_id or updated.client_id != member.client_id
                        or updated.client_host != member.client_host
                        or updated.subscribed_topic_names != member.subscribed_topic_names)
        if new_member or updated.subscribed_topic_names != member.subscribed_topic_names:
            bump = True
        group.members[updated.member_id] = updated
        if meta_changed:
            out.records.append((R.ShareGroupMemberMetadataKey(group_id=group.group_id, member_id=updated.member_id),
                                R.ShareGroupMemberMetadataValue(rack_id=updated.rack_id, client_id=updated.client_id,
                                                                client_host=updated.client_host,
                                                                subscribed_topic_names=list(
                                                                    updated.subscribed_topic_names))))
        subscribed = self._subscribed_topics(group, topics)
        h = _metadata_hash(subscribed)
        if h != group.metadata_hash:
            bump = True
        if bump:
            group.group_epoch += 1
            group.metadata_hash = h
            out.records.append((R.ShareGroupMetadataKey(group_id=group.group_id),
                                R.ShareGroupMetadataValue(epoch=group.group_epoch, metadata_hash=h)))
        self._initialize_new_partitions(group, subscribed, out)
        if group.group_epoch > group.assignment_epoch and self._assignment_due(group, now_ms):
            self._compute_target(group, topics, out, now_ms)
        # the member takes its target at once (share groups have no revocation)
        target = _clean(group.targets.get(updated.member_id, {}))
        changed = target != _clean(updated.assigned)
        if joining or updated.member_epoch != group.assignment_epoch or changed:
            updated.previous_member_epoch = updated.member_epoch
            updated.member_epoch = group.assignment_epoch
            updated.assigned = target
            out.records.append(self._current_record(group.group_id, updated))
        resp = ShareGroupHeartbeatResponse(member_id=updated.member_id, member_epoch=updated.member_epoch,
                                           heartbeat_interval_ms=self.config_for(group.group_id).heartbeat_interval_ms)
        if joining or changed or req.subscribed_topic_names is not None:
            A = ShareGroupHeartbeatResponse.Assignment
            resp.assignment = A(topic_partitions=_tp_list(A.TopicPartitions, updated.assigned))
        out.response = resp
        out.timers.append(SetTimer(session_timer_key(group.group_id, updated.member_id),
                                   now_ms + self.config_for(group.group_id).session_timeout_ms))
        return out

    @staticmethod
    def _validate(req: ShareGroupHeartbeatRequest) -> str | None:
        if not req.group_id:
            return "GroupId can't be empty."
        if not req.member_id:
            return "MemberId can't be empty."
        if len(req.member_id) > MAX_MEMBER_ID_LENGTH:
            return f"MemberId can't be longer than {MAX_MEMBER_ID_LENGTH} characters."
        if req.rack_id is not None and req.rack_id == "":
            return "RackId can't be empty."
        if req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
            return f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -1."
        if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH and not req.subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
        return None

    def _subscribed_topics(self, group: ShareGroup, topics: TopicMetadata) -> dict[str, tuple[_uuid.UUID, int]]:
        names = {n for m in group.members.values() for n in m.subscribed_topic_names}
        return {n: topics[n] for n in sorted(names) if n in topics}

    def _initialize_new_partitions(self, group: ShareGroup, subscribed: Mapping[str, tuple[_uuid.UUID, int]],
                                   out: ShareOutcome) -> None:
        todo: dict[_uuid.UUID, frozenset[int]] = {}
        for name, (tid, count) in subscribed.items():
            have = set(group.initialized.get(tid, ("", frozenset()))[1]) | set(
                group.initializing.get(tid, ("", frozenset()))[1])
            missing = frozenset(range(count)) - have
            if missing:
                todo[tid] = missing
                prev = group.initializing.get(tid, (name, frozenset()))[1]
                group.initializing[tid] = (name, prev | missing)
        if todo:
            out.records.append(self._state_metadata_record(group))
            out.initialize.append(InitializeState(group.group_id, group.group_epoch, todo))

    def state_initialized(self, group_id: str, partitions: Mapping[_uuid.UUID, frozenset[int]],
                          topics: TopicMetadata, now_ms: int) -> ShareOutcome:
        """InitializeShareGroupState succeeded for `partitions`: they become assignable."""
        out = ShareOutcome()
        group = self.groups.get(group_id)
        if group is None:
            return out
        names = {tid: n for n, (tid, _) in topics.items()}
        moved = False
        for tid, ps in partitions.items():
            name, pending = group.initializing.get(tid, (names.get(tid, ""), frozenset()))
            done = frozenset(ps) & pending if pending else frozenset()
            if not done:
                continue
            moved = True
            rest = pending - done
            if rest:
                group.initializing[tid] = (name, rest)
            else:
                group.initializing.pop(tid, None)
            have = group.initialized.get(tid, (name, frozenset()))[1]
            group.initialized[tid] = (name, have | done)
        if not moved:
            return out
        out.records.append(self._state_metadata_record(group))
        group.group_epoch += 1
        out.records.append((R.ShareGroupMetadataKey(group_id=group_id),
                            R.ShareGroupMetadataValue(epoch=group.group_epoch, metadata_hash=group.metadata_hash)))
        return out

    def _state_metadata_record(self, group: ShareGroup):
        V = R.ShareGroupStatePartitionMetadataValue

        def info(d):
            return [V.TopicPartitionsInfo(topic_id=t, topic_name=n, partitions=sorted(ps))
                    for t, (n, ps) in sorted(d.items(), key=lambda kv: str(kv[0]))]
        return (R.ShareGroupStatePartitionMetadataKey(group_id=group.group_id),
                V(initializing_topics=info(group.initializing), initialized_topics=info(group.initialized),
                  deleting_topics=[V.TopicInfo(topic_id=t, topic_name=n) for t, n in sorted(
                      group.deleting.items(), key=lambda kv: str(kv[0]))]))

    def _assignment_due(self, group: ShareGroup, now_ms: int) -> bool:
        """The target is recomputed at most once per assignment interval; a group's first target
        (assignment epoch 0) at once."""
        if group.assignment_epoch == 0 or group.assignment_timestamp_ms < 0:
            return True
        return now_ms - group.assignment_timestamp_ms >= self.config_for(group.group_id).assignment_interval_ms

    def _compute_target(self, group: ShareGroup, topics: TopicMetadata, out: ShareOutcome, now_ms: int) -> None:
        ids = {n: tid for n, (tid, _) in topics.items()}
        subs = {m.member_id: frozenset(ids[n] for n in m.subscribed_topic_names if n in ids)
                for m in group.members.values()}
        assignable = {tid: ps for tid, (_, ps) in group.initialized.items()}
        # a topic deleted or shrunk: only partitions that still exist are assignable
        counts = {tid: c for tid, c in topics.values()}
        assignable = {tid: frozenset(p for p in ps if p < counts[tid]) for tid, ps in assignable.items()
                      if tid in counts}
        new = assignor.assign(subs, assignable, group.targets)
        group.assignment_epoch = group.group_epoch
        group.assignment_timestamp_ms = now_ms
        for mid in sorted(new):
            a = _clean(new[mid])
            if a != _clean(group.targets.get(mid, {})) or mid not in group.targets:
                V = R.ShareGroupTargetAssignmentMemberValue
                out.records.append((R.ShareGroupTargetAssignmentMemberKey(group_id=group.group_id, member_id=mid),
                                    V(topic_partitions=_tp_list(V.TopicPartition, a))))
            group.targets[mid] = a
        out.records.append((R.ShareGroupTargetAssignmentMetadataKey(group_id=group.group_id),
                            R.ShareGroupTargetAssignmentMetadataValue(assignment_epoch=group.assignment_epoch,
                                                                      assignment_timestamp=now_ms)))

    @staticmethod
    def _current_record(group_id: str, m: ShareMember):
        V = R.ShareGroupCurrentMemberAssignmentValue
        return (R.ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=m.member_id),
                V(member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch,
                  state=R.MEMBER_STATE_STABLE, assigned_partitions=_tp_list(V.TopicPartitions, m.assigned)))

    # -- leaving ----------------------------------------------------------------------------------------
    def _leave(self, group_id: str, member_id: str) -> ShareOutcome:
        group = self.groups.get(group_id)
        if group is None:
            return ShareOutcome(_error_response(ErrorCode.GROUP_ID_NOT_FOUND, f"share group {group_id} does not exist"))
        if member_id not in group.members:
            return ShareOutcome(_error_response(ErrorCode.UNKNOWN_MEMBER_ID,
                                                f"member {member_id} is not in share group {group_id}"))
        out = self._remove_member(group, member_id)
        out.response = ShareGroupHeartbeatResponse(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                   heartbeat_interval_ms=0)
        return out

    def session_expired(self, group_id: str, member_id: str, now_ms: int) -> ShareOutcome:
        """The member's session timer fired: it is removed (fenced) from the group."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ShareOutcome()
        return self._remove_member(group, member_id)

    def _remove_member(self, group: ShareGroup, member_id: str) -> ShareOutcome:
        out = ShareOutcome()
        g = group.group_id
        out.records += [
            (R.ShareGroupCurrentMemberAssignmentKey(group_id=g, member_id=member_id), None),
            (R.ShareGroupTargetAssignmentMemberKey(group_id=g, member_id=member_id), None),
            (R.ShareGroupMemberMetadataKey(group_id=g, member_id=member_id), None),
        ]
        del group.members[member_id]
        group.targets.pop(member_id, None)
        group.group_epoch += 1
        out.records.append((R.ShareGroupMetadataKey(group_id=g),
                            R.ShareGroupMetadataValue(epoch=group.group_epoch, metadata_hash=group.metadata_hash)))
        out.timers.append(CancelTimer(session_timer_key(g, member_id)))
        return out

    def delete_group(self, group_id: str) -> tuple[ErrorCode | None, list[tuple[Any, Any]]]:
        """DeleteGroups for a share group: NON_EMPTY_GROUP unless Empty; else its records' tombstones."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, []
        del self.groups[group_id]
        return None, [(R.ShareGroupStatePartitionMetadataKey(group_id=group_id), None),
                      (R.ShareGroupTargetAssignmentMetadataKey(group_id=group_id), None),
                      (R.ShareGroupMetadataKey(group_id=group_id), None)]

    # -- describe ---------------------------------------------------------------------------------------
    def describe(self, group_ids: Sequence[str], topic_names: Mapping[_uuid.UUID, str]) -> list:
        G = ShareGroupDescribeResponse.DescribedGroup
        M = G.Member
        out = []
        for gid in group_ids:
            group = self.groups.get(gid)
            if group is None:
                out.append(G(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), error_message=f"Group {gid} not found.",
                             group_id=gid, group_state=DEAD))
                continue
            members = []
            for m in sorted(group.members.values(), key=lambda m: m.member_id):
                tps = [M.Assignment.TopicPartitions(topic_id=t, topic_name=topic_names.get(t, ""),
                                                    partitions=sorted(ps))
                       for t, ps in sorted(m.assigned.items(), key=lambda kv: str(kv[0])) if ps]
                members.append(M(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                                 client_id=m.client_id, client_host=m.client_host,
                                 subscribed_topic_names=list(m.subscribed_topic_names),
                                 assignment=M.Assignment(topic_partitions=tps)))
            out.append(G(group_id=gid, group_state=group.state, group_epoch=group.group_epoch,
                         assignment_epoch=group.assignment_epoch, assignor_name=assignor.NAME, members=members))
        return out

    # -- replay -----------------------------------------------------------------------------------------
    def replay(self, key, value) -> None:
        """Apply one share-group record read back from `__consumer_offsets`."""
        gid = key.group_id
        if isinstance(key, R.ShareGroupMetadataKey):
            if value is None:
                self.groups.pop(gid, None)
                return
            g = self.groups.setdefault(gid, ShareGroup(gid))
            g.group_epoch, g.metadata_hash = value.epoch, value.metadata_hash
            return
        g = self.groups.get(gid)
        if g is None:
            if value is None:
                return
            g = self.groups.setdefault(gid, ShareGroup(gid))
        if isinstance(key, R.ShareGroupMemberMetadataKey):
            if value is None:
                g.members.pop(key.member_id, None)
                return
            m = g.members.setdefault(key.member_id, ShareMember(key.member_id))
            m.rack_id, m.client_id, m.client_host = value.rack_id, value.client_id, value.client_host
            m.subscribed_topic_names = tuple(value.subscribed_topic_names)
        elif isinstance(key, R.ShareGroupTargetAssignmentMemberKey):
            if value is None:
                g.targets.pop(key.member_id, None)
            else:
                g.targets[key.member_id] = {tp.topic_id: frozenset(tp.partitions) for tp in value.topic_partitions}
        elif isinstance(key, R.ShareGroupTargetAssignmentMetadataKey):
            g.assignment_epoch = value.assignment_epoch if value is not None else 0
            g.assignment_timestamp_ms = value.assignment_timestamp if value is not None else -1
        elif isinstance(key, R.ShareGroupCurrentMemberAssignmentKey):
            if value is None:
                m = g.members.get(key.member_id)
                if m is not None:
                    m.assigned = {}
                return
            m = g.members.setdefault(key.member_id, ShareMember(key.member_id))
            m.member_epoch, m.previous_member_epoch = value.member_epoch, value.previous_member_epoch
            m.assigned = {tp.topic_id: frozenset(tp.partitions) for tp in value.assigned_partitions}
        elif isinstance(key, R.ShareGroupStatePartitionMetadataKey):
            if value is None:
                g.initializing, g.initialized, g.deleting = {}, {}, {}
                return
            g.initializing = {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in value.initializing_topics}
            g.initialized = {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in value.initialized_topics}
            g.deleting = {t.topic_id: t.topic_name for t in value.deleting_topics}

    def on_loaded(self, now_ms: int) -> list[SetTimer]:
        """After replay: a fresh session timer for every member (Kafka does the same at load)."""
        return [SetTimer(session_timer_key(g.group_id, m), now_ms + self.config_for(g.group_id).session_timeout_ms)
                for g in self.groups.values() for m in g.members]


def _metadata_hash(subscribed: Mapping[str, tuple[_uuid.UUID, int]]) -> int:
    """A 64-bit hash of the subscribed topics' ids, names and partition counts (0 when none): a change
    of it bumps the group epoch. kohort's own digest (Kafka's differs; only changes matter)."""
    if not subscribed:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(subscribed):
        tid, count = subscribed[name]
        h.update(f"{name}\0{tid}\0{count}\0".encode())
    return int.from_bytes(h.digest(), "big", signed=True)
