"""One classic group's in-memory state: its members, the state machine of Kafka's ClassicGroupState
(Empty, PreparingRebalance, CompletingRebalance, Stable, Dead), protocol selection by vote, member
validation (KIP-345 static members), what a classic group answers the offsets (Kafka's
ClassicGroup.validateOffsetCommit/Fetch/Delete, offsetExpirationCondition: the
kohort.broker.coordinator.offsets.OffsetsGroup protocol); `CommittedOffset`, the value the offsets
store keeps per partition.

Pure data plus small queries; the operations that move a group between states, answer parked
requests and emit records live in kohort.broker.coordinator.coordinator.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kohort.errors import DecodeError

import kohort.broker.coordinator.codes as C
from .model import JoinMember


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
VALID_PREVIOUS_STATES = {
    S.EMPTY: {S.PREPARING_REBALANCE},
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.DEAD: set(S),
}


class IllegalStateTransition(AssertionError):
    """A bug: the coordinator tried a transition Kafka's state machine forbids."""


_NO_REPLY = object()


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    is_new: bool = False
    join_reply: Any = _NO_REPLY      # parked JoinGroup
    sync_reply: Any = _NO_REPLY      # parked SyncGroup
    # the names of `protocols`, cached while the same list is in place (a change assigns a new one)
    _names: frozenset = field(default=frozenset(), repr=False, compare=False)
    _names_of: Any = field(default=None, repr=False, compare=False)

    def protocol_names(self) -> frozenset:
        if self._names_of is not self.protocols:
            self._names, self._names_of = frozenset(n for n, _ in self.protocols), self.protocols
        return self._names

    @property
    def awaiting_join(self) -> bool:
        return self.join_reply is not _NO_REPLY

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_reply is not _NO_REPLY

    def take_join_reply(self) -> Any:
        r, self.join_reply = self.join_reply, _NO_REPLY
        return r

    def take_sync_reply(self) -> Any:
        r, self.sync_reply = self.sync_reply, _NO_REPLY
        return r

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka: new members can expire while awaiting join; members parked in a rebalance cannot."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync

    def matches(self, protocols: Iterable[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol_name:
                return meta
        return b""

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError("member supports none of the candidate protocols")


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None
    # the order in which offset records were written (Kafka compares their log offsets): a committed
    # transactional offset replaces the current one only if written after it
    record_seq: int = -1


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1          # current_state_timestamp: when the state last changed
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)      # KIP-394: MEMBER_ID_REQUIRED issued
    static_members: dict[str, str] = field(default_factory=dict)  # group_instance_id -> member_id
    pending_sync: set[str] = field(default_factory=set)
    subscribed_topics: frozenset[str] | None = None
    # adaptive initial rebalance (see coordinator header)
    initial_started_ms: int = 0
    initial_last_join_ms: int = 0
    # Dead while a deletion/expiry tombstone is being stored; the state to restore if that fails
    dead_rollback: tuple | None = None
    # protocol name -> how many members support it (Kafka's supportedProtocols), kept by add/remove
    # for the `members` dict and size it was counted on; None: count again at the next question
    _supported: dict | None = field(default=None, repr=False, compare=False)
    _supported_of: Any = field(default=None, repr=False, compare=False)
    _supported_n: int = field(default=0, repr=False, compare=False)

    # -- state -----------------------------------------------------------------------------------
    def transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {target.value} is not allowed")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[S.PREPARING_REBALANCE]

    # -- membership ------------------------------------------------------------------------------
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        # stops at the first member not rejoined yet (a JoinGroup storm calls this once per join)
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def _supported_counts(self) -> dict:
        """Kafka's supportedProtocols: kept up to date by add/remove; counted again when the members
        dict was replaced or changed size behind their back; a member's protocols change through
        `set_protocols`."""
        if (self._supported is None or self._supported_of is not self.members
                or self._supported_n != len(self.members)):
            counts: dict[str, int] = {}
            for m in self.members.values():
                for name in m.protocol_names():
                    counts[name] = counts.get(name, 0) + 1
            self._supported, self._supported_of, self._supported_n = counts, self.members, len(self.members)
        return self._supported

    def set_protocols(self, member: Member, protocols: list[tuple[str, bytes]]) -> None:
        """Replace a member's protocols, keeping the supported-protocol counts."""
        if member.protocol_names() == frozenset(n for n, _ in protocols):
            member.protocols = protocols           # same names (a rejoin): the counts stand
            return
        known = self.members.get(member.member_id) is member
        if known:
            self._count_member(member, -1, resize=False)
        member.protocols = protocols
        if known:
            self._count_member(member, +1, resize=False)

    def _count_member(self, member: Member, delta: int, resize: bool = True) -> None:
        """Add (+1) or take away (-1) `member`'s protocol names in the counts, and with `resize` in
        the member count they were made for (`add`/`remove` change the dict next to this call)."""
        counts = self._supported
        if counts is None or self._supported_of is not self.members or self._supported_n != len(self.members):
            self._supported = None
            return
        for name in member.protocol_names():
            counts[name] = counts.get(name, 0) + delta
        if resize:
            self._supported_n += delta

    def add(self, member: Member, join_reply: Any) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.member_id in self.members:
            self._supported = None
        else:
            self._count_member(member, +1)
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)
        member.join_reply = join_reply
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        if member_id in self.members:
            self._count_member(self.members[member_id], -1)
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's ClassicGroup.validateMember: 0 or UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return C.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return C.FENCED_INSTANCE_ID
            return C.NONE
        return C.NONE if member_id in self.members else C.UNKNOWN_MEMBER_ID

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols -------------------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in {n for n, _ in m.protocols}:
                counts[name] = counts.get(name, 0) + 1
        return {n for n, c in counts.items() if c == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        if self.state == S.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        if self.protocol_type != protocol_type:
            return False
        # a name every member supports
        counts, n = self._supported_counts(), len(self.members)
        return any(counts.get(name, 0) == n for name in protocol_names)

    def select_protocol(self) -> str:
        """Vote among protocols every member supports: each member votes for its most preferred
        candidate; most votes wins. Ties (a HashMap order in Kafka) go to the protocol the leader
        (else the first member) prefers most, so the choice is deterministic."""
        if not self.members:
            raise AssertionError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            v = m.vote(candidates)
            votes[v] = votes.get(v, 0) + 1
        best = max(votes.values())
        tied = {n for n, c in votes.items() if c == best}
        first = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name, _ in first.protocols:
            if name in tied:
                return name
        return sorted(tied)[0]

    def current_members_for_leader(self) -> tuple:
        return tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())

    def compute_subscribed_topics(self, decoder: Callable[[bytes], Iterable[str]] | None) -> None:
        """The union of the members' subscribed topics, when the group speaks the "consumer"
        protocol and a decoder for its metadata is available; otherwise unknown (None)."""
        if self.protocol_type != "consumer" or decoder is None:
            self.subscribed_topics = None if self.members else frozenset()
            return
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(decoder(m.metadata(self.protocol_name)))
        except DecodeError:    # undecodable metadata: Kafka treats the subscription as unknown
            self.subscribed_topics = None
            return
        self.subscribed_topics = frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == "consumer"

    # -- what the offsets ask ----------------------------------------------------------------------
    def is_simple(self) -> bool:
        """Made by a commit without a generation (no protocol type, nobody joined): no GroupMetadata
        record backs it."""
        return (self.protocol_type is None and self.state == S.EMPTY and not self.members
                and not self.pending_members)

    def is_empty(self) -> bool:
        return self.state == S.EMPTY

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_id: int,
                               transactional: bool, api_version: int) -> int:
        """Kafka's order: Dead; no generation on an Empty group; the member and generation; no member
        named only while Empty (not checked for a transactional commit); CompletingRebalance
        answers REBALANCE_IN_PROGRESS (not to a transactional commit)."""
        if self.state == S.DEAD:
            return C.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state == S.EMPTY:
            return C.NONE
        if generation_id >= 0 or member_id or instance_id is not None:
            err = self.validate_member(member_id, instance_id)
            if err:
                return err
            if generation_id != self.generation_id:
                return C.ILLEGAL_GENERATION
        elif not transactional and self.state != S.EMPTY:
            return C.UNKNOWN_MEMBER_ID
        if not transactional and self.state == S.COMPLETING_REBALANCE:
            return C.REBALANCE_IN_PROGRESS
        return C.NONE

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        return C.GROUP_ID_NOT_FOUND if self.state == S.DEAD else C.NONE

    def validate_offset_delete(self) -> int:
        if self.state == S.DEAD:
            return C.GROUP_ID_NOT_FOUND
        if self.state != S.EMPTY and not self.uses_consumer_protocol():
            return C.NON_EMPTY_GROUP
        return C.NONE

    def offset_expiration_base(self) -> Callable[[CommittedOffset], int] | None:
        """A simple group's offsets expire from their commit; an Empty group's from when it became
        Empty (KIP-211; from the commit without a state timestamp); a Stable "consumer" group with
        known subscriptions from the commit; otherwise not now."""
        if self.protocol_type is None:
            return from_commit
        if self.state == S.EMPTY:
            ts = self.state_timestamp
            return (lambda co: ts) if ts >= 0 else from_commit
        if self.uses_consumer_protocol() and self.subscribed_topics is not None and self.state == S.STABLE:
            return from_commit
        return None


def from_commit(co: CommittedOffset) -> int:
    """An offset's retention runs from its commit."""
    return co.commit_timestamp
