"""The data of KIP-848 consumer groups, shared by the consumer-group machine
(kohort.broker.coordinator.consumer_group) and its classic members (classic_members): groups, members,
their records of `__consumer_offsets` (`ConsumerRecordKind`, Kafka's CoordinatorRecordType numbers),
the snapshots a step is diffed over to know which records to write, the heartbeat's params and result,
the timer keys, and the classic group handed over in an online upgrade or downgrade; what a consumer
group answers the offsets (kohort.broker.coordinator.offsets.OffsetsGroup). Pure data and
pure functions: no clock, no I/O.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import kohort.broker.coordinator.codes as C
from .group import CommittedOffset, from_commit
from .model import JoinResult, LeaveResult

Assignment = dict[str, frozenset[int]]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# KIP-848 error codes (Kafka's Errors.java), beside the classic ones in codes.py
INVALID_REQUEST = 42
UNSUPPORTED_ASSIGNOR = 112
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
STALE_MEMBER_EPOCH = C.STALE_MEMBER_EPOCH
INVALID_REGULAR_EXPRESSION = 128
UNSUPPORTED_VERSION = C.UNSUPPORTED_VERSION


class MemberState(enum.IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(str, enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"




class ConsumerRecordKind(enum.IntEnum):
    """The consumer-group record types of `__consumer_offsets` (Kafka's CoordinatorRecordType; the
    key version on the wire)."""
    CONSUMER_GROUP_METADATA = 3                      # the group epoch
    CONSUMER_GROUP_MEMBER_METADATA = 5               # a member's subscription and client
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6    # the target assignment's epoch
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7      # a member's target partitions
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8     # a member's epoch, state and partitions


K = ConsumerRecordKind


@dataclass(frozen=True)
class ConsumerHeartbeatParams:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[str, frozenset[int]] | None = None   # TopicPartitions; None = unchanged
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True)
class ConsumerHeartbeatResult:
    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


@dataclass(frozen=True)
class ClassicMeta:
    """What a member using the classic protocol (JoinGroup/SyncGroup) in a consumer group keeps:
    Kafka's ClassicMemberMetadata (session timeout, supported protocols in preference order)."""
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = 300000
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMeta | None = None          # set for members using the classic protocol


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscribed_metadata: dict[str, int] = field(default_factory=dict)   # topic -> partitions
    # the members' subscriptions as of (group epoch, member count): (epoch, count, names, regexes);
    # a subscription changes only with a group epoch bump, so a steady heartbeat reads this instead
    # of walking every member (ConsumerGroups._subscribed_metadata)
    subscriptions: tuple | None = field(default=None, compare=False, repr=False)
    # (topic, partition) -> ids of the members holding it (assigned or pending revocation), built on
    # first use; reconciliation keeps it current, every other change of a member's holdings (replay,
    # removal, static replacement or leave) drops it (`holders_changed`)
    holders: dict | None = field(default=None, compare=False, repr=False)

    def holders_index(self) -> dict[tuple[str, int], set[str]]:
        if self.holders is None:
            idx: dict[tuple[str, int], set[str]] = {}
            for mid, m in self.members.items():
                for a in (m.assigned, m.pending_revocation):
                    for t, ps in a.items():
                        for p in ps:
                            idx.setdefault((t, p), set()).add(mid)
            self.holders = idx
        return self.holders

    def holders_changed(self) -> None:
        """A member's holdings changed outside reconciliation, or a member left: rebuild on next use."""
        self.holders = None

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        # newest members first: while a group fills up they are the ones still reconciling, so the
        # walk ends early instead of passing every settled member on each step
        for m in reversed(self.members.values()):
            if m.state != MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def owners(self) -> dict[tuple[str, int], str]:
        """(topic, partition) -> member id holding it (assigned or pending revocation)."""
        own: dict[tuple[str, int], str] = {}
        for m in self.members.values():
            for a in (m.assigned, m.pending_revocation):
                for t, ps in a.items():
                    for p in ps:
                        own[(t, p)] = m.member_id
        return own

    # -- what the offsets ask (Kafka's ConsumerGroup.validateOffsetCommit/Fetch/Delete, ...) ----------
    def validate_offset_commit(self, member_id: str, instance_id: str | None, member_epoch: int,
                               transactional: bool, api_version: int) -> int:
        """A commit without an epoch only to an empty group; else a member, committing with
        OffsetCommit v9+ (a consumer-protocol member, unless transactional) at its epoch."""
        if member_epoch < 0 and not self.members:
            return C.NONE
        m = self.members.get(member_id)
        if m is None:
            return C.UNKNOWN_MEMBER_ID
        if not transactional and m.classic is None and api_version < 9:
            return C.UNSUPPORTED_VERSION
        return _member_epoch_error(m, member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        """Without member id and epoch (admin, old clients) always; else the member at its epoch."""
        if member_id is None and member_epoch < 0:
            return C.NONE
        m = self.members.get(member_id or "")
        if m is None:
            return C.UNKNOWN_MEMBER_ID
        return _member_epoch_error(m, member_epoch)

    def validate_offset_delete(self) -> int:
        return C.NONE          # members or not; the subscribed topics are refused per topic

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """A member subscribes to `topic` (by name, or by a regex it resolved to)."""
        if not self.members:
            return False
        return topic in self.subscribed_metadata or any(topic in m.subscribed_topic_names
                                                        for m in self.members.values())

    def offset_expiration_base(self) -> Callable[[CommittedOffset], int] | None:
        return from_commit                 # members or not: from the commit

    def is_empty(self) -> bool:
        return not self.members


def _member_epoch_error(m: "ConsumerMember", epoch: int) -> int:
    """Kafka's validateMemberEpoch: a classic-protocol member commits with its generation (its member
    epoch; ILLEGAL_GENERATION otherwise), a consumer-protocol member with its exact epoch
    (STALE_MEMBER_EPOCH otherwise)."""
    if epoch == m.member_epoch:
        return C.NONE
    return C.ILLEGAL_GENERATION if m.classic is not None else C.STALE_MEMBER_EPOCH


@dataclass(frozen=True)
class ConsumerGroupRecord:
    """One consumer-group record; `value` None is a tombstone. Values by kind: group metadata the
    group epoch; member metadata a MemberMeta; target assignment metadata the assignment epoch;
    target assignment member a frozen assignment; current member assignment a CurrentAssignment.
    Topics by name (the runtime's serde maps them to topic ids)."""
    kind: ConsumerRecordKind
    group: str
    member_id: str | None = None
    value: Any = None

    @property
    def tombstone(self) -> bool:
        return self.value is None


@dataclass(frozen=True)
class MemberMeta:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMeta | None = None


@dataclass(frozen=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: tuple            # ((topic, (partitions...)), ...) sorted
    pending_revocation: tuple


def frozen(a: Mapping[str, frozenset[int]]) -> tuple:
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(a.items()) if ps)


def thawed(a) -> Assignment:
    return {t: frozenset(ps) for t, ps in a if ps}


def snapshot(group: "ConsumerGroup | None", mids=None) -> dict:
    """The group's records as {(kind, member id or None): value}: every member's, or (`mids` given)
    only the group epochs and the records of the members in `mids` (a heartbeat's scope)."""
    if group is None:
        return {}
    snap: dict = {(K.CONSUMER_GROUP_METADATA, None): group.group_epoch,
                  (K.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, None): group.assignment_epoch}
    members = group.members
    for mid in (members if mids is None else mids):
        m = members.get(mid)
        if m is None:
            continue
        snap[(K.CONSUMER_GROUP_MEMBER_METADATA, mid)] = MemberMeta(
            m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names,
            m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic)
        snap[(K.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, mid)] = CurrentAssignment(
            m.member_epoch, m.previous_member_epoch, int(m.state), frozen(m.assigned), frozen(m.pending_revocation))
    for mid in (group.target if mids is None else mids):
        t = group.target.get(mid)
        if t is not None:
            snap[(K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, mid)] = frozen(t)
    return snap


@dataclass
class Scope:
    """What one heartbeat can change besides the group epochs: the records of the members in `mids`
    (its own, a static member it replaces) and, only if the target is recomputed (a new dict
    replaces `target`), every member's target. Everything else keeps its records, so the before /
    after snapshots skip it: a steady heartbeat costs O(its own assignment), not O(group)."""
    mids: set
    target: dict


def scoped_after(group: "ConsumerGroup", scope: Scope, before: dict) -> tuple[dict, dict]:
    """(before, after) for `scope` once the heartbeat ran; with every member's target on both sides
    when the target was recomputed (the others' entries of the old target dict are untouched)."""
    after = snapshot(group, scope.mids)
    if group.target is not scope.target:
        # only the targets that differ (a target's dict compares equal iff its record would)
        old, new = scope.target, group.target
        before = dict(before)
        for mid, t in old.items():
            if mid not in scope.mids and new.get(mid) != t:
                before[(K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, mid)] = frozen(t)
        after = {k: v for k, v in after.items() if k[0] != K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER}
        for mid, t in new.items():
            if mid in scope.mids or old.get(mid) != t:
                after[(K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, mid)] = frozen(t)
    return before, after


def diff(group_id: str, before: dict, after: dict) -> list[ConsumerGroupRecord]:
    """The records that turn `before` into `after`, in Kafka's order."""
    out: list[ConsumerGroupRecord] = []
    for kind in (K.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                 K.CONSUMER_GROUP_MEMBER_METADATA):
        for (k, mid) in before:
            if k == kind and mid is not None and (k, mid) not in after:
                out.append(ConsumerGroupRecord(kind, group_id, mid))
    for kind in (K.CONSUMER_GROUP_MEMBER_METADATA, K.CONSUMER_GROUP_METADATA,
                 K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, K.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                 K.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT):
        for key, v in after.items():
            if key[0] == kind and before.get(key) != v:
                out.append(ConsumerGroupRecord(kind, group_id, key[1], v))
    for kind in (K.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, K.CONSUMER_GROUP_METADATA):
        if (kind, None) in before and (kind, None) not in after:
            out.append(ConsumerGroupRecord(kind, group_id))
    return out


def error_result(result: Any, code: int) -> Any:
    """`result` (held for an append) turned into an answer with error `code`."""
    if isinstance(result, ConsumerHeartbeatResult):
        return ConsumerHeartbeatResult(code, f"The coordinator could not store the change ({code}).",
                                       result.member_id, -1, 0)
    if isinstance(result, JoinResult):
        return JoinResult(code, result.member_id)
    if isinstance(result, LeaveResult):
        return LeaveResult(code)
    return code


class HeartbeatError(Exception):
    def __init__(self, code: int, message: str | None = None):
        super().__init__(message or str(code))
        self.code = code
        self.message = message


def session_key(group_id: str, member_id: str) -> tuple:
    return ("cg-session", group_id, member_id)


def rebalance_key(group_id: str, member_id: str) -> tuple:
    return ("cg-rebalance", group_id, member_id)




@dataclass(frozen=True)
class ClassicSnapshotMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    metadata: bytes          # its subscription in the group's chosen protocol
    assignment: bytes


@dataclass(frozen=True)
class ClassicGroupSnapshot:
    group_id: str
    generation: int
    members: tuple[ClassicSnapshotMember, ...]


def join_key(group_id: str, member_id: str) -> tuple:
    return ("cg-join", group_id, member_id)


def sync_key(group_id: str, member_id: str) -> tuple:
    return ("cg-sync", group_id, member_id)
