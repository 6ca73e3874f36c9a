"""The classic group coordinator (Kafka's classic group protocol: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups, ListGroups, DeleteGroups) and the offset operations of every group
(OffsetCommit/Fetch/Delete, TxnOffsetCommit, expiration) as a PURE state
machine: no I/O, no threads, no clock. Every entry point takes `now_ms` and returns an Outcome
(responses to send now, records to append with their completion tokens, timers to arm/cancel); see
kohort.broker.coordinator.model for the contract.

Behaviour follows Kafka's GroupMetadataManager / ClassicGroup (the KIP-848-era Java coordinator,
classic path), including its validation orders and error codes. Points where kohort chooses:

* Adaptive initial rebalance delay (replaces Kafka's fixed 3 s `group.initial.rebalance.delay.ms`
  of KIP-134). When a group goes Empty -> PreparingRebalance, the join phase completes once no new
  member has joined for `group.initial.rebalance.quiet.ms` (default 200 ms), or at the latest
  `group.initial.rebalance.delay.ms` (default 3000) after the rebalance started. Every member that
  joins meanwhile re-opens the quiet window; members that were told MEMBER_ID_REQUIRED (KIP-394) and
  have not rejoined yet hold the phase open until the cap, since they are known to be coming. So a
  lone consumer is served ~quiet ms after its join, and members starting together (each join within
  the quiet window of the previous one) land in one generation. Setting quiet >= delay gives Kafka's
  fixed delay; delay = 0 disables it. Unlike Kafka the total never exceeds the delay cap (Kafka may
  stretch it up to the rebalance timeout while members keep arriving).
* Responses that depend on stored state wait for the append: the SyncGroup leader's assignment
  (state moves to Stable, everyone is answered, only once the GroupMetadata record is stored), a new
  group's empty GroupMetadata record (failure removes the group, like Kafka's snapshot revert), a
  static member's replacement in a Stable group (failure restores the old member id), offset
  commits (offsets become visible to OffsetFetch only once stored, i.e. "read committed"), and
  group/offset deletions (the group is Dead meanwhile; failure restores it).
* A parked JoinGroup/SyncGroup superseded by another request for the same member is answered
  REBALANCE_IN_PROGRESS (Kafka drops the old future), and a removed member's parked SyncGroup is
  answered UNKNOWN_MEMBER_ID, so the runtime never holds an unanswered reply.
* OffsetFetch of a missing or Dead group answers every partition with offset -1 and no error, as
  Kafka's coordinator does (the enum javadoc's GROUP_ID_NOT_FOUND is not what the code returns).
  With `require_stable` (KIP-447) a partition with a pending *transactional* offset answers
  UNSTABLE_OFFSET_COMMIT; non-transactional commits are invisible until stored.
* TxnOffsetCommit (`txn_offset_commit`) stores offsets in a transactional batch of the producer
  (Append.producer) and, once stored, holds them pending (kohort.broker.coordinator.txn_offsets)
  until `write_txn_marker` -- the transaction coordinator's COMMIT/ABORT for a `__consumer_offsets`
  partition, appended through this machine so it completes after every earlier append --
  materialises or drops them. Checks as Kafka's ClassicGroup.validateOffsetCommit for transactional
  commits: generation < 0 on an Empty (or unknown: a simple group is made) group is accepted; else the
  member (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) and generation (ILLEGAL_GENERATION; an unknown group
  with generation >= 0 too); no REBALANCE_IN_PROGRESS check.
* Offsets of every group type go through this machine (it owns the offset records, as Kafka's shard
  does): each commit, fetch and delete is validated by the group of its id whatever its type
  (`other_group`: a KIP-848 consumer group or a share group, else a classic group; the rules are in
  kohort.broker.coordinator.offsets), and expiration visits every group (`other_group_ids` too) and
  asks each when its offsets expire; an Empty consumer group whose offsets all expired (or that has
  none) is deleted by its own machine (`delete_other_group`), as Kafka's cleanupGroupMetadata. No
  classic group stands in for a group of another type.
* OffsetCommit v0/v1 per-partition commit timestamps are not modelled (Kafka 4 dropped v0/v1).
* Protocol vote ties (HashMap order in Kafka) go to the leader's preference.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, Iterable, Mapping

import kohort.broker.coordinator.codes as C
from .config import CoordinatorConfig
from .consumer_group_model import ClassicGroupSnapshot, ClassicSnapshotMember
from .group import _NO_REPLY as NO_REPLY, ClassicGroup, CommittedOffset, GroupState, Member
from .model import (
    DeleteGroupsResult, DescribedGroup, DescribedMember, DescribeGroupsResult,
    GroupRecord, HeartbeatParams, HeartbeatResult, JoinParams, JoinResult,
    LeaveMemberResult, LeaveParams, LeaveResult, ListedGroup, ListGroupsResult, MemberRecord,
    OffsetCommitParams, OffsetCommitResult, OffsetDeleteParams, OffsetDeleteResult,
    OffsetFetchParams, OffsetFetchResult, OffsetRecord, Outcome, PartitionResult, Record, Response,
    SyncParams, SyncResult, TxnMarkerRecord, TxnOffsetCommitParams,
)
from .machine import GroupMachine, GroupType
from .serde import ClassicRecordSerde
from .offsets import OffsetMetadataManager, OffsetsGroup, validate_offset_commit, validate_offset_fetch

S = GroupState
EXPIRATION_KEY = ("offsets-expiration",)

_OnDone = Callable[[Outcome, int, int], None]     # (out, error_code, now_ms)


def heartbeat_key(group_id: str, member_id: str) -> tuple:
    return ("heartbeat", group_id, member_id)


def join_key(group_id: str) -> tuple:
    return ("join", group_id)


def initial_delay_key(group_id: str) -> tuple:
    return ("initial-delay", group_id)


def sync_key(group_id: str) -> tuple:
    return ("sync", group_id)


class ClassicGroupCoordinator(GroupMachine):
    """All classic groups of one coordinator (one `__consumer_offsets` shard, or all of them)."""

    GROUP_TYPE = GroupType.CLASSIC
    TIMER_NAMESPACE = "classic"
    SERDE = ClassicRecordSerde()

    def __init__(self, config: CoordinatorConfig | None = None, *,
                 id_factory: Callable[[], str] | None = None,
                 subscription_decoder: Callable[[bytes], Iterable[str]] | None = None,
                 loading: bool = False) -> None:
        self.config = config or CoordinatorConfig()
        self._new_id = id_factory or (lambda: str(uuid.uuid4()))
        self._decoder = subscription_decoder
        super().__init__()
        self.groups: dict[str, ClassicGroup] = {}
        self.phase = "loading" if loading else "active"     # loading | active | inactive
        # the group of another type (a KIP-848 consumer group, a share group) with this id, asked
        # by the offset operations; the registry connects it to the other machines
        self.other_group: Callable[[str], OffsetsGroup | None] = lambda group_id: None
        # deletes another machine's Empty group whose offsets all expired -> that machine's Outcome
        self.delete_other_group: Callable[[str, int], Outcome] | None = None
        self.other_group_ids: Callable[[], Iterable[str]] = lambda: ()     # expiration visits them too
        # every group's committed and pending transactional offsets, by group id
        self.offsets = OffsetMetadataManager(self.config)
        self.pending_txn = self.offsets.pending_txn

    # ================================================================ plumbing
    def _append(self, out: Outcome, records: list[Record], on_done: _OnDone,
                producer: tuple[int, int] | None = None) -> None:
        self._hold(out, records, on_done, producer)

    @staticmethod
    def _respond(out: Outcome, reply_to: Any, result: Any) -> None:
        out.responses.append(Response(reply_to, result))

    def _addressed(self, group_id: str) -> tuple[int, ClassicGroup | None]:
        """(error, group) for a request naming `group_id`: the coordinator's availability, then
        INVALID_GROUP_ID for an empty id; the group (None if unknown) only without an error."""
        err = self._availability()
        if not err and not group_id:
            err = C.INVALID_GROUP_ID
        return err, self.groups.get(group_id) if not err else None

    def _availability(self) -> int:
        if self.phase == "loading":
            return C.COORDINATOR_LOAD_IN_PROGRESS
        if self.phase == "inactive":
            return C.NOT_COORDINATOR
        return C.NONE

    # ================================================================ lifecycle
    def replay(self, record: Record, producer_id: int = -1) -> None:
        """Rebuild state from one stored record (start-up load; compaction-safe in any order, except
        that offset records must come in log order for transactional offsets to compare right).
        `producer_id` >= 0: the record came in a transactional batch of that producer whose
        transaction has no marker yet -- a pending offset."""
        if isinstance(record, OffsetRecord):
            self.offsets.replay(record, producer_id)       # simple groups are made in on_loaded
        elif isinstance(record, GroupRecord):
            if record.tombstone:
                self.groups.pop(record.group, None)
                return
            g = self.groups.get(record.group)
            if g is None:
                g = self.groups[record.group] = ClassicGroup(record.group)
            g.protocol_type = record.protocol_type or None
            g.generation_id = record.generation
            g.protocol_name = record.protocol
            g.state_timestamp = record.current_state_timestamp
            g.members = {}
            g.static_members = {}
            g.pending_members = set()
            g.pending_sync = set()
            for mr in record.members:
                g.members[mr.member_id] = Member(
                    mr.member_id, mr.group_instance_id, mr.client_id, mr.client_host,
                    mr.rebalance_timeout if mr.rebalance_timeout >= 0 else mr.session_timeout,
                    mr.session_timeout, record.protocol_type,
                    [(record.protocol or "", bytes(mr.subscription))], assignment=bytes(mr.assignment))
                if mr.group_instance_id is not None:
                    g.static_members[mr.group_instance_id] = mr.member_id
            g.leader_id = record.leader if record.leader in g.members else next(iter(g.members), None)
            g.state = g.previous_state = S.STABLE if g.members else S.EMPTY
            g.compute_subscribed_topics(self._decoder)
        else:
            raise TypeError(f"not a coordinator record: {record!r}")

    def replay_marker(self, producer_id: int, commit: bool, group_filter: Callable[[str], bool]) -> None:
        """A COMMIT/ABORT marker of `producer_id` on the `__consumer_offsets` partition holding the
        groups `group_filter` accepts (load, and live through `write_txn_marker`)."""
        for gid in self.offsets.replay_marker(producer_id, commit, group_filter):
            if self.phase != "loading":
                self._ensure_offsets_group(gid)

    def _ensure_offsets_group(self, group_id: str) -> None:
        """Offsets of `group_id` were stored: with no group of any type by that id, Kafka's simple
        classic group (Empty, no protocol type) holds them."""
        if group_id not in self.groups and self.other_group(group_id) is None:
            self.groups[group_id] = ClassicGroup(group_id)

    def on_loaded(self, now_ms: int, topics: Mapping[str, int] | None = None) -> Outcome:
        """Loading finished: become active, arm every member's session timer, rebalance groups over
        group.max.size (KIP-389), and arm the periodic offsets-expiration timer."""
        out = Outcome()
        self.phase = "active"
        # what replay left: a simple group where offsets have no group of any type (Kafka makes it at
        # the offset record), none where another machine's group has the id (Kafka replaces it)
        for gid in [gid for gid, g in self.groups.items() if g.is_simple() and self.other_group(gid) is not None]:
            del self.groups[gid]
        for gid, _ in self.offsets.groups():
            self._ensure_offsets_group(gid)
        for gid in self.pending_txn.group_ids():
            self._ensure_offsets_group(gid)
        for g in self.groups.values():
            for m in g.members.values():
                self._arm(out, heartbeat_key(g.group_id, m.member_id), now_ms + m.session_timeout_ms)
            if g.is_(S.STABLE) and len(g.members) > self.config.group_max_size:
                self._prepare_rebalance(g, now_ms, out)
        self._arm(out, EXPIRATION_KEY, now_ms + self.config.offsets_retention_check_interval_ms)
        return out

    def unload(self) -> Outcome:
        """This coordinator stops serving (e.g. shutdown): parked requests get NOT_COORDINATOR,
        timers are cancelled, state is dropped, and later calls answer NOT_COORDINATOR."""
        out = Outcome()
        for g in self.groups.values():
            for m in g.members.values():
                if m.awaiting_join:
                    self._respond(out, m.take_join_reply(), JoinResult(C.NOT_COORDINATOR, m.member_id))
                if m.awaiting_sync:
                    self._respond(out, m.take_sync_reply(), SyncResult(C.NOT_COORDINATOR))
        self._disarm_all(out)
        self.groups.clear()
        self.offsets.clear()
        self._pending.clear()
        self.phase = "inactive"
        return out

    def on_append_done(self, token: int, error_code: int, now_ms: int) -> Outcome:
        """The records of Append `token` were stored (error_code 0) or not (a storage error code)."""
        out = Outcome()
        on_done = self._pending.pop(token, None)
        if on_done is not None:
            on_done(out, error_code, now_ms)
        return out

    def fire_timer(self, key: tuple, now_ms: int) -> Outcome:
        out = Outcome()
        armed = self._take_due(key, now_ms)
        if armed is None:
            return out
        kind = key[0]
        if kind == "heartbeat":
            self._expire_heartbeat(key[1], key[2], now_ms, out)
        elif kind == "join":
            g = self.groups.get(key[1])
            if g is not None and g.is_(S.PREPARING_REBALANCE):
                self._complete_join(g, now_ms, out)
        elif kind == "initial-delay":
            self._initial_delay_expired(key[1], now_ms, out)
        elif kind == "sync":
            self._expire_pending_sync(key[1], armed[1], now_ms, out)
        elif kind == EXPIRATION_KEY[0]:
            self._expire_offsets(now_ms, out)
            self._arm(out, EXPIRATION_KEY, now_ms + self.config.offsets_retention_check_interval_ms)
        return out

    # ================================================================ JoinGroup
    def join_group(self, p: JoinParams, now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        err = self._availability()
        if err:
            self._respond(out, reply_to, JoinResult(err, p.member_id))
            return out
        if not p.group_id:
            self._respond(out, reply_to, JoinResult(C.INVALID_GROUP_ID, p.member_id))
            return out
        cfg = self.config
        if not (cfg.group_min_session_timeout_ms <= p.session_timeout_ms
                <= cfg.group_max_session_timeout_ms):
            self._respond(out, reply_to, JoinResult(C.INVALID_SESSION_TIMEOUT, p.member_id))
            return out
        group = self.groups.get(p.group_id)
        is_unknown = p.member_id == ""
        is_new = group is None
        if group is None:
            if not is_unknown:
                self._respond(out, reply_to, JoinResult(C.UNKNOWN_MEMBER_ID, p.member_id))
                return out
            group = self.groups[p.group_id] = ClassicGroup(p.group_id, state_timestamp=now_ms)

        inner = Outcome()
        if not self._accept_joining_member(group, p.member_id):
            if group.has_member(p.member_id):
                self._drop_member(group, p.member_id, inner)
            elif group.is_pending_member(p.member_id):
                group.remove(p.member_id)
                self._disarm(inner, heartbeat_key(group.group_id, p.member_id))
            self._respond(inner, reply_to, JoinResult(C.GROUP_MAX_SIZE_REACHED, ""))
        elif is_unknown:
            self._join_new_member(group, p, now_ms, reply_to, inner)
        else:
            self._join_existing_member(group, p, now_ms, reply_to, inner)

        if is_new and not inner.appends:
            # Persist the new group before answering (Kafka writes an empty GroupMetadata record).
            out.timers.extend(inner.timers)
            held = inner.responses
            record = self._group_record(group, {})

            def done(o: Outcome, error: int, now: int, group=group, held=held) -> None:
                if not error:
                    o.responses.extend(held)
                    return
                mapped = C.map_append_error(error)
                for r in held:
                    res = r.result
                    if isinstance(res, JoinResult):
                        res = JoinResult(mapped, "")
                    o.responses.append(Response(r.reply_to, res))
                if self.groups.get(group.group_id) is group:
                    self._revert_new_group(group, mapped, o)

            self._append(out, [record], done)
            return out
        out.extend(inner)
        return out

    def _revert_new_group(self, group: ClassicGroup, mapped: int, out: Outcome) -> None:
        for m in list(group.members.values()):
            if m.awaiting_join:
                self._respond(out, m.take_join_reply(), JoinResult(mapped, ""))
            if m.awaiting_sync:
                self._respond(out, m.take_sync_reply(), SyncResult(mapped))
        self._cancel_group_timers(group, out)
        del self.groups[group.group_id]

    def release_for_upgrade(self, group_id: str, now_ms: int, max_size: int):
        """KIP-848 online upgrade: hand the live classic group `group_id` over to the consumer-group
        coordinator. None if it cannot be (missing, Empty/Dead, not protocol type "consumer", no
        protocol chosen yet, more than `max_size` members); else (Outcome, ClassicGroupSnapshot):
        parked JoinGroup/SyncGroup answered REBALANCE_IN_PROGRESS, member timers cancelled, the
        GroupMetadata record tombstoned, the group gone (its offsets stay the group id's)."""
        g = self.groups.get(group_id)
        if (g is None or g.is_(S.EMPTY, S.DEAD) or g.protocol_type != "consumer" or not g.protocol_name
                or len(g.members) > max_size):
            return None
        out = Outcome()
        members = []
        for m in g.members.values():
            members.append(ClassicSnapshotMember(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, tuple(m.protocols), m.metadata(g.protocol_name), m.assignment))
            if m.awaiting_join:
                self._respond(out, m.take_join_reply(), JoinResult(C.REBALANCE_IN_PROGRESS, m.member_id))
            if m.awaiting_sync:
                self._respond(out, m.take_sync_reply(), SyncResult(C.REBALANCE_IN_PROGRESS))
        self._cancel_group_timers(g, out)
        snap = ClassicGroupSnapshot(group_id, g.generation_id, tuple(members))
        del self.groups[group_id]
        self._append(out, [GroupRecord(group_id, tombstone=True)], lambda o, e, n: None)
        return out, snap

    def release_empty(self, group_id: str, now_ms: int) -> Outcome | None:
        """A KIP-848 consumer group is made with the id of an Empty classic group (a simple group
        too): that group is deleted, its GroupMetadata record tombstoned, its offsets stay the group
        id's (Kafka's maybeDeleteEmptyClassicGroup). None when there is no Empty classic group."""
        g = self.groups.get(group_id)
        if g is None or not g.is_(S.EMPTY):
            return None
        out = Outcome()
        self._cancel_group_timers(g, out)
        del self.groups[group_id]
        self._append(out, [GroupRecord(group_id, tombstone=True)], lambda o, e, n: None)
        return out

    def adopt_from_consumer(self, snap, now_ms: int) -> Outcome:
        """KIP-848 online downgrade: take over `snap` (a ClassicGroupSnapshot of the classic members
        left in a consumer group) as a classic group: Stable at generation `snap.generation` with their
        assignments, its GroupMetadata record written, heartbeats armed, then a rebalance prepared so
        every member rejoins (Kafka's ClassicGroup.fromConsumerGroup + prepareRebalance)."""
        out = Outcome()
        g = ClassicGroup(snap.group_id, state=S.STABLE, previous_state=S.EMPTY, state_timestamp=now_ms,
                         generation_id=snap.generation)
        for sm in snap.members:
            g.add(Member(sm.member_id, sm.instance_id, sm.client_id, sm.client_host, sm.rebalance_timeout_ms,
                         sm.session_timeout_ms, "consumer", list(sm.protocols), assignment=sm.assignment),
                  NO_REPLY)                       # nothing parked: they are told to rejoin by heartbeat
        for m in g.members.values():
            self._arm(out, heartbeat_key(g.group_id, m.member_id), now_ms + m.session_timeout_ms)
        g.protocol_name = g.select_protocol()
        g.compute_subscribed_topics(self._decoder)
        self.groups[g.group_id] = g
        self._append(out, [self._group_record(g, {m.member_id: m.assignment for m in g.members.values()})],
                     lambda o, e, n: None)
        self._prepare_rebalance(g, now_ms, out)
        return out

    def _cancel_group_timers(self, group: ClassicGroup, out: Outcome) -> None:
        gid = group.group_id
        for key in [k for k in self._timers if len(k) >= 2 and k[1] == gid and k[0] != EXPIRATION_KEY[0]]:
            self._disarm(out, key)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.group_max_size
        if group.is_(S.EMPTY, S.DEAD):
            return True
        if group.is_(S.PREPARING_REBALANCE):
            m = group.members.get(member_id)
            return ((m is not None and m.awaiting_join) or len(group.members) < max_size
                    or group.num_awaiting_join() < max_size)
        return group.has_member(member_id) or len(group.members) < max_size

    @staticmethod
    def _rebalance_timeout(p: JoinParams) -> int:
        return p.rebalance_timeout_ms if p.rebalance_timeout_ms >= 0 else p.session_timeout_ms

    def _join_new_member(self, group: ClassicGroup, p: JoinParams, now: int, reply: Any,
                         out: Outcome) -> None:
        if group.is_(S.DEAD):
            self._respond(out, reply, JoinResult(C.COORDINATOR_NOT_AVAILABLE, ""))
            return
        if not group.supports_protocols(p.protocol_type, {n for n, _ in p.protocols}):
            self._respond(out, reply, JoinResult(C.INCONSISTENT_GROUP_PROTOCOL, ""))
            return
        prefix = p.group_instance_id if p.group_instance_id is not None else p.client_id
        new_id = f"{prefix}-{self._new_id()}"
        if p.group_instance_id is not None:
            existing = group.static_members.get(p.group_instance_id)
            if existing is not None:
                self._update_static_member(group, p, existing, new_id, now, reply, out)
            else:
                self._add_member_then_rebalance(group, new_id, p, now, reply, out)
        elif p.api_version >= 4:      # KIP-394
            group.pending_members.add(new_id)
            self._arm(out, heartbeat_key(group.group_id, new_id), now + p.session_timeout_ms)
            self._respond(out, reply, JoinResult(C.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_then_rebalance(group, new_id, p, now, reply, out)

    def _join_existing_member(self, group: ClassicGroup, p: JoinParams, now: int, reply: Any,
                              out: Outcome) -> None:
        mid = p.member_id
        if group.is_(S.DEAD):
            self._respond(out, reply, JoinResult(C.COORDINATOR_NOT_AVAILABLE, mid))
            return
        if not group.supports_protocols(p.protocol_type, {n for n, _ in p.protocols}):
            self._respond(out, reply, JoinResult(C.INCONSISTENT_GROUP_PROTOCOL, mid))
            return
        if group.is_pending_member(mid):
            if p.group_instance_id is not None:   # Kafka: IllegalStateException
                self._respond(out, reply, JoinResult(C.UNKNOWN_SERVER_ERROR, mid))
                return
            self._add_member_then_rebalance(group, mid, p, now, reply, out)
            return
        err = group.validate_member(mid, p.group_instance_id)
        if err:
            self._respond(out, reply, JoinResult(err, mid))
            return
        member = group.members[mid]
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member(group, member, p, reply, out)
            self._maybe_prepare_rebalance_or_complete_join(group, now, out)
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.matches(p.protocols):
                self._respond(out, reply, self._current_generation_result(
                    group, mid, with_members=group.is_leader(mid)))
            else:
                self._update_member(group, member, p, reply, out)
                self._maybe_prepare_rebalance_or_complete_join(group, now, out)
        elif group.is_(S.STABLE):
            if group.is_leader(mid) or not member.matches(p.protocols):
                self._update_member(group, member, p, reply, out)
                self._maybe_prepare_rebalance_or_complete_join(group, now, out)
            else:
                self._respond(out, reply, self._current_generation_result(group, mid, False))
        else:   # Empty: "unexpected state", let the member reset and rejoin
            self._respond(out, reply, JoinResult(C.UNKNOWN_MEMBER_ID, mid))

    def _current_generation_result(self, group: ClassicGroup, member_id: str, with_members: bool,
                                   leader: str | None = None, skip: bool = False) -> JoinResult:
        return JoinResult(
            C.NONE, member_id, group.generation_id, group.protocol_type, group.protocol_name,
            (leader if leader is not None else group.leader_id) or "", skip,
            group.current_members_for_leader() if with_members else ())

    def _update_member(self, group: ClassicGroup, member: Member, p: JoinParams, reply: Any,
                       out: Outcome) -> None:
        group.set_protocols(member, [(n, bytes(m)) for n, m in p.protocols])
        member.protocol_type = p.protocol_type
        member.rebalance_timeout_ms = self._rebalance_timeout(p)
        member.session_timeout_ms = p.session_timeout_ms
        if member.awaiting_join:       # superseded parked JoinGroup (kohort: answer it)
            self._respond(out, member.take_join_reply(), JoinResult(C.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_reply = reply

    def _add_member_then_rebalance(self, group: ClassicGroup, member_id: str, p: JoinParams,
                                   now: int, reply: Any, out: Outcome) -> None:
        member = Member(member_id, p.group_instance_id, p.client_id, p.client_host,
                        self._rebalance_timeout(p), p.session_timeout_ms, p.protocol_type,
                        [(n, bytes(m)) for n, m in p.protocols], is_new=True)
        group.add(member, reply)
        # Parked JoinGroup sockets are muted, so a new member is timed out after a fixed long timeout.
        self._arm(out, heartbeat_key(group.group_id, member_id),
                  now + self.config.group_new_member_join_timeout_ms)
        if group.is_(S.PREPARING_REBALANCE) and group.previous_state == S.EMPTY:
            group.initial_last_join_ms = now          # re-open the initial quiet window
            self._arm_initial_delay(group, out)
        self._maybe_prepare_rebalance_or_complete_join(group, now, out)

    def _update_static_member(self, group: ClassicGroup, p: JoinParams, old_id: str, new_id: str,
                              now: int, reply: Any, out: Outcome) -> None:
        """KIP-345: a known group.instance.id joins with an unknown member id."""
        current_leader = group.leader_id
        member = self._replace_static_member(group, p.group_instance_id, old_id, new_id, out)
        self._disarm(out, heartbeat_key(group.group_id, old_id))
        self._arm(out, heartbeat_key(group.group_id, new_id), now + member.session_timeout_ms)
        old = (list(member.protocols), member.protocol_type, member.rebalance_timeout_ms,
               member.session_timeout_ms)
        self._update_member(group, member, p, reply, out)
        if group.is_(S.STABLE):
            if group.protocol_name == group.select_protocol():
                record = self._group_record(group, {m.member_id: m.assignment
                                                    for m in group.members.values()})
                api_version = p.api_version
                instance = p.group_instance_id

                def done(o: Outcome, error: int, now2: int) -> None:
                    if self.groups.get(group.group_id) is not group:
                        return
                    m = group.members.get(new_id)
                    if m is None:
                        return
                    if error:
                        r = m.take_join_reply() if m.awaiting_join else None
                        group.set_protocols(m, old[0])
                        m.protocol_type, m.rebalance_timeout_ms, m.session_timeout_ms = old[1:]
                        back = self._replace_static_member(group, instance, new_id, old_id, o)
                        self._disarm(o, heartbeat_key(group.group_id, new_id))
                        self._arm(o, heartbeat_key(group.group_id, old_id), now2 + back.session_timeout_ms)
                        if r is not None:
                            self._respond(o, r, JoinResult(
                                C.map_append_error(error), "", group.generation_id, group.protocol_type,
                                group.protocol_name, current_leader or ""))
                    elif m.awaiting_join:
                        if api_version >= 9:
                            is_leader = group.is_leader(new_id)
                            res = self._current_generation_result(group, new_id, is_leader, skip=is_leader)
                        else:
                            # the old leader id, so a pre-v9 leader does not recompute an assignment
                            # a Stable group would not broadcast
                            res = self._current_generation_result(group, new_id, False,
                                                                  leader=current_leader or "")
                        self._respond(o, m.take_join_reply(), res)

                self._append(out, [record], done)
            else:
                self._maybe_prepare_rebalance_or_complete_join(group, now, out)
        elif group.is_(S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, out)         # KAFKA-9801
        else:
            self._maybe_complete_join_phase(group, now, out)

    def _replace_static_member(self, group: ClassicGroup, instance: str, old_id: str, new_id: str,
                               out: Outcome) -> Member:
        old = group.members.pop(old_id)
        if old.awaiting_join:
            self._respond(out, old.take_join_reply(), JoinResult(C.FENCED_INSTANCE_ID, old_id))
        if old.awaiting_sync:
            self._respond(out, old.take_sync_reply(), SyncResult(C.FENCED_INSTANCE_ID))
        new = Member(new_id, instance, old.client_id, old.client_host, old.rebalance_timeout_ms,
                     old.session_timeout_ms, old.protocol_type, list(old.protocols),
                     assignment=old.assignment)
        group.members[new_id] = new
        if group.leader_id == old_id:
            group.leader_id = new_id
        group.static_members[instance] = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        return new

    # ================================================================ rebalance machinery
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now: int,
                                                  out: Outcome) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now, out)
        else:
            self._maybe_complete_join_phase(group, now, out)

    def _maybe_complete_join_phase(self, group: ClassicGroup, now: int, out: Outcome) -> None:
        if (group.is_(S.PREPARING_REBALANCE) and group.has_all_members_joined()
                and group.previous_state != S.EMPTY):
            self._complete_join(group, now, out)

    def _prepare_rebalance(self, group: ClassicGroup, now: int, out: Outcome) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_with_error(group, C.REBALANCE_IN_PROGRESS, now, out)
        group.pending_sync.clear()
        self._disarm(out, sync_key(group.group_id))
        initial = group.is_(S.EMPTY)
        group.transition(S.PREPARING_REBALANCE, now)
        if initial:
            group.initial_started_ms = group.initial_last_join_ms = now
            self._arm_initial_delay(group, out)
        elif group.has_all_members_joined():
            self._complete_join(group, now, out)
        else:
            self._arm(out, join_key(group.group_id), now + self._group_rebalance_timeout(group))

    @staticmethod
    def _group_rebalance_timeout(group: ClassicGroup) -> int:
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0)

    def _initial_deadline(self, group: ClassicGroup) -> int:
        cap = self.config.group_initial_rebalance_delay_ms
        quiet = min(self.config.group_initial_rebalance_quiet_ms, cap)
        return min(group.initial_last_join_ms + quiet, group.initial_started_ms + cap)

    def _arm_initial_delay(self, group: ClassicGroup, out: Outcome) -> None:
        self._arm(out, initial_delay_key(group.group_id), self._initial_deadline(group))

    def _initial_delay_expired(self, group_id: str, now: int, out: Outcome) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_(S.PREPARING_REBALANCE) or group.previous_state != S.EMPTY:
            return
        cap_at = group.initial_started_ms + self.config.group_initial_rebalance_delay_ms
        if group.pending_members and now < cap_at:
            self._arm(out, initial_delay_key(group_id), cap_at)   # MEMBER_ID_REQUIRED members are coming
            return
        self._complete_join(group, now, out)

    def _complete_join(self, group: ClassicGroup, now: int, out: Outcome) -> None:
        gid = group.group_id
        self._disarm(out, join_key(gid))
        self._disarm(out, initial_delay_key(gid))
        for m in list(group.members.values()):
            if not m.awaiting_join and m.group_instance_id is None:
                self._drop_member(group, m.member_id, out)
        if group.is_(S.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # nobody rejoined (only static members left): wait until sessions expire them
            self._arm(out, join_key(gid), now + self._group_rebalance_timeout(group))
            return
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.compute_subscribed_topics(self._decoder)
            group.transition(S.COMPLETING_REBALANCE, now)
        else:
            group.protocol_name = None
            group.compute_subscribed_topics(self._decoder)
            group.transition(S.EMPTY, now)
        group.pending_sync.clear()
        if group.is_(S.EMPTY):
            self._append(out, [self._group_record(group, {})], lambda o, e, n: None)
            return
        leader_members = group.current_members_for_leader()
        for m in group.members.values():
            if m.awaiting_join:
                self._respond(out, m.take_join_reply(), JoinResult(
                    C.NONE, m.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                    group.leader_id or "", False,
                    leader_members if group.is_leader(m.member_id) else ()))
            self._arm(out, heartbeat_key(gid, m.member_id), now + m.session_timeout_ms)
            m.is_new = False
            group.pending_sync.add(m.member_id)
        self._arm(out, sync_key(gid), now + self._group_rebalance_timeout(group), group.generation_id)

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup, error: int, now: int,
                                                   out: Outcome) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error, now, out)

    def _propagate_assignment(self, group: ClassicGroup, error: int, now: int, out: Outcome) -> None:
        for m in group.members.values():
            if m.awaiting_sync:
                ok = error == C.NONE
                self._respond(out, m.take_sync_reply(), SyncResult(
                    error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                    m.assignment))
                self._arm(out, heartbeat_key(group.group_id, m.member_id), now + m.session_timeout_ms)

    def _drop_member(self, group: ClassicGroup, member_id: str, out: Outcome) -> None:
        """Remove a member, answering its parked requests UNKNOWN_MEMBER_ID; no rebalance here."""
        self._disarm(out, heartbeat_key(group.group_id, member_id))
        m = group.members.get(member_id)
        if m is not None:
            if m.awaiting_join:
                self._respond(out, m.take_join_reply(), JoinResult(C.UNKNOWN_MEMBER_ID, ""))
            if m.awaiting_sync:
                self._respond(out, m.take_sync_reply(), SyncResult(C.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    def _expire_heartbeat(self, group_id: str, member_id: str, now: int, out: Outcome) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_(S.DEAD):
            return
        if group.is_pending_member(member_id):
            group.remove(member_id)
            if group.is_(S.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group, now, out)
            return
        m = group.members.get(member_id)
        if m is None or m.has_satisfied_heartbeat():
            return
        self._drop_member(group, member_id, out)
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, now, out)
        elif group.is_(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group, now, out)

    def _expire_pending_sync(self, group_id: str, generation: int, now: int, out: Outcome) -> None:
        group = self.groups.get(group_id)
        if group is None or generation != group.generation_id:
            return
        if group.is_(S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
            for mid in list(group.pending_sync):
                self._drop_member(group, mid, out)
            self._prepare_rebalance(group, now, out)

    # ================================================================ SyncGroup
    def sync_group(self, p: SyncParams, now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        err = self._availability()
        if err:
            self._respond(out, reply_to, SyncResult(err))
            return out
        if not p.group_id:
            self._respond(out, reply_to, SyncResult(C.INVALID_GROUP_ID))
            return out
        group = self.groups.get(p.group_id)
        if group is None:
            self._respond(out, reply_to, SyncResult(C.UNKNOWN_MEMBER_ID))
            return out
        if group.is_(S.DEAD):
            err = C.COORDINATOR_NOT_AVAILABLE
        else:
            err = group.validate_member(p.member_id, p.group_instance_id)
            if not err and p.generation_id != group.generation_id:
                err = C.ILLEGAL_GENERATION
            elif not err and ((p.protocol_type is not None and p.protocol_type != group.protocol_type)
                              or (p.protocol_name is not None and p.protocol_name != group.protocol_name)):
                err = C.INCONSISTENT_GROUP_PROTOCOL
            elif not err and group.is_(S.EMPTY):
                err = C.UNKNOWN_MEMBER_ID
            elif not err and group.is_(S.PREPARING_REBALANCE):
                err = C.REBALANCE_IN_PROGRESS
        if err:
            self._respond(out, reply_to, SyncResult(err))
            return out
        member = group.members[p.member_id]
        group.pending_sync.discard(p.member_id)
        if group.is_(S.STABLE):
            self._respond(out, reply_to, SyncResult(C.NONE, group.protocol_type, group.protocol_name,
                                                    member.assignment))
            return out
        # CompletingRebalance: park; the leader's assignment completes everyone once stored
        if member.awaiting_sync:
            self._respond(out, member.take_sync_reply(), SyncResult(C.REBALANCE_IN_PROGRESS))
        member.sync_reply = reply_to
        if group.is_leader(p.member_id):
            given = {mid: bytes(a) for mid, a in p.assignments}
            assignment = {mid: given.get(mid, b"") for mid in group.members}
            generation = group.generation_id

            def done(o: Outcome, error: int, now: int) -> None:
                if (self.groups.get(group.group_id) is not group
                        or not group.is_(S.COMPLETING_REBALANCE) or group.generation_id != generation):
                    return
                if error:
                    self._reset_and_propagate_assignment_with_error(
                        group, C.map_append_error(error), now, o)
                    self._maybe_prepare_rebalance_or_complete_join(group, now, o)
                else:
                    for m in group.members.values():
                        m.assignment = assignment.get(m.member_id, b"")
                    self._propagate_assignment(group, C.NONE, now, o)
                    group.transition(S.STABLE, now)

            self._append(out, [self._group_record(group, assignment)], done)
        return out

    # ================================================================ Heartbeat
    def heartbeat(self, p: HeartbeatParams, now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        if self.phase == "loading":          # Kafka answers heartbeats blindly while loading
            self._respond(out, reply_to, HeartbeatResult(C.NONE))
            return out
        err = self._availability()
        group = self.groups.get(p.group_id) if not err else None
        if err:
            pass
        elif not p.group_id:
            err = C.INVALID_GROUP_ID
        elif group is None:
            err = C.UNKNOWN_MEMBER_ID
        elif group.is_(S.DEAD):
            err = C.COORDINATOR_NOT_AVAILABLE
        else:
            err = group.validate_member(p.member_id, p.group_instance_id)
            if not err and p.generation_id != group.generation_id:
                err = C.ILLEGAL_GENERATION
            elif not err and group.is_(S.EMPTY):
                err = C.UNKNOWN_MEMBER_ID
            elif not err:
                m = group.members[p.member_id]
                self._arm(out, heartbeat_key(group.group_id, m.member_id), now_ms + m.session_timeout_ms)
                if group.is_(S.PREPARING_REBALANCE):
                    err = C.REBALANCE_IN_PROGRESS
        self._respond(out, reply_to, HeartbeatResult(err))
        return out

    # ================================================================ LeaveGroup
    def leave_group(self, p: LeaveParams, now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        err, group = self._addressed(p.group_id)
        if not err and group is None:
            err = C.UNKNOWN_MEMBER_ID
        if not err and group.is_(S.DEAD):
            err = C.COORDINATOR_NOT_AVAILABLE
        if err:
            self._respond(out, reply_to, LeaveResult(err))
            return out
        results = []
        for lm in p.members:
            if lm.member_id == "":
                mid = group.static_members.get(lm.group_instance_id) if lm.group_instance_id else None
                if mid is not None:             # admin removal of a static member
                    self._drop_member(group, mid, out)
                    results.append(LeaveMemberResult(lm.member_id, lm.group_instance_id, C.NONE))
                else:
                    results.append(LeaveMemberResult(lm.member_id, lm.group_instance_id,
                                                     C.UNKNOWN_MEMBER_ID))
            elif group.is_pending_member(lm.member_id):
                group.remove(lm.member_id)
                self._disarm(out, heartbeat_key(group.group_id, lm.member_id))
                results.append(LeaveMemberResult(lm.member_id, lm.group_instance_id, C.NONE))
            else:
                e = group.validate_member(lm.member_id, lm.group_instance_id)
                if not e:
                    self._drop_member(group, lm.member_id, out)
                results.append(LeaveMemberResult(lm.member_id, lm.group_instance_id, e))
        if any(r.error_code == C.NONE for r in results):
            if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, now_ms, out)
            elif group.is_(S.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group, now_ms, out)
        self._respond(out, reply_to, LeaveResult(C.NONE, tuple(results)))
        return out

    # ================================================================ offsets
    def _offsets_group(self, group_id: str) -> OffsetsGroup | None:
        """The group an offset operation asks, of any type: another machine's group (a consumer or
        share group) first, then a classic group (a Dead one too, while its tombstone is stored)."""
        return self.other_group(group_id) or self.groups.get(group_id)

    def offset_commit(self, p: OffsetCommitParams, now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        err, created = self._commit_target(p, False, now_ms)
        if err:
            self._respond(out, reply_to, OffsetCommitResult.failed(p.topics, err))
            return out
        group = self.groups.get(p.group_id)
        if (group is not None and group.is_(S.STABLE, S.PREPARING_REBALANCE) and p.member_id in group.members
                and self.other_group(p.group_id) is None):
            m = group.members[p.member_id]      # a classic member's commit keeps its session
            self._arm(out, heartbeat_key(group.group_id, m.member_id), now_ms + m.session_timeout_ms)
        expire = now_ms + p.retention_time_ms if p.retention_time_ms != -1 else None
        self._store_offsets(out, p.group_id, created, p.topics, now_ms, expire, reply_to)
        return out

    def txn_offset_commit(self, p: TxnOffsetCommitParams, now_ms: int, reply_to: Any) -> Outcome:
        """TxnOffsetCommit: validate (Kafka's order), append the offsets in a transactional batch of
        the producer, hold them pending once stored. The transaction coordinator's verification
        (the group's partition is in the producer's Ongoing transaction) is the caller's."""
        out = Outcome()
        err, created = self._commit_target(p, True, now_ms)
        if err:
            self._respond(out, reply_to, OffsetCommitResult.failed(p.topics, err))
            return out
        self._store_offsets(out, p.group_id, created, p.topics, now_ms, None, reply_to,
                            (p.producer_id, p.producer_epoch))
        return out

    def _commit_target(self, p: OffsetCommitParams | TxnOffsetCommitParams, transactional: bool,
                       now_ms: int) -> tuple[int, bool]:
        """(error, created) of a commit, validated by the group of its id whatever its type; a commit
        without a generation to an id no group has makes a simple classic group (`created`)."""
        err, _ = self._addressed(p.group_id)
        if err:
            return err, False
        api_version = p.api_version if isinstance(p, OffsetCommitParams) else 9
        err, simple = validate_offset_commit(self._offsets_group(p.group_id), p.member_id, p.group_instance_id,
                                             p.generation_id, transactional, api_version)
        if simple:
            self.groups[p.group_id] = ClassicGroup(p.group_id, state_timestamp=now_ms)
        return err, simple

    def _store_offsets(self, out: Outcome, group_id: str, created: bool, topics, now_ms: int,
                       expire: int | None, reply_to: Any, producer: tuple[int, int] | None = None) -> None:
        """Append a validated commit's records (as `producer`'s transactional batch when given) and
        answer once stored: committed offsets, or pending ones of the producer until its marker. A
        simple group made for this commit is dropped again when nothing could be stored."""
        results, records = self.offsets.commit_records(group_id, topics, now_ms, expire)
        made = self.groups.get(group_id) if created else None
        if not records:
            self._respond(out, reply_to, OffsetCommitResult(tuple((t, tuple(rs)) for t, rs in results)))
            return

        def done(o: Outcome, error: int, now: int) -> None:
            if error:
                mapped = C.map_append_error(error)
                final = tuple((t, tuple(PartitionResult(r.partition_index, mapped)
                                        if r.error_code == C.NONE else r for r in rs))
                              for t, rs in results)
                if (made is not None and self.groups.get(group_id) is made and made.is_simple()
                        and not self.offsets.has(group_id)
                        and (producer is None or not self.pending_txn.has_group(group_id))):
                    del self.groups[group_id]
            else:
                if producer is None:
                    self.offsets.stored(records)
                else:
                    self.offsets.stored_pending(producer[0], records)
                self._ensure_offsets_group(group_id)
                final = tuple((t, tuple(rs)) for t, rs in results)
            self._respond(o, reply_to, OffsetCommitResult(final))

        self._append(out, records, done, producer)

    def write_txn_marker(self, marker: TxnMarkerRecord, group_filter: Callable[[str], bool], now_ms: int,
                         reply_to: Any) -> Outcome:
        """The transaction coordinator's marker for one `__consumer_offsets` partition: appended after
        everything appended before it; once stored the producer's pending offsets of the groups there
        (`group_filter`) are materialised (COMMIT) or dropped (ABORT). Answers the append's error
        code (0 when stored)."""
        out = Outcome()

        def done(o: Outcome, error: int, now: int) -> None:
            if not error:
                self.replay_marker(marker.producer_id, marker.commit, group_filter)
            self._respond(o, reply_to, error)

        self._append(out, [marker], done, producer=(marker.producer_id, marker.producer_epoch))
        return out

    def offset_fetch(self, p: OffsetFetchParams, now_ms: int, reply_to: Any, member_id: str | None = None,
                     member_epoch: int = -1) -> Outcome:
        """OffsetFetch, validated by the group of its id (`member_id`/`member_epoch`: v9+)."""
        out = Outcome()
        err = self._availability()
        if err:
            self._respond(out, reply_to, OffsetFetchResult(err))
            return out
        err, visible = validate_offset_fetch(self._offsets_group(p.group_id), member_id, member_epoch)
        if err:
            self._respond(out, reply_to, OffsetFetchResult(err))
            return out
        topics = self.offsets.fetch(p.group_id, p.topics, p.require_stable, visible=visible)
        self._respond(out, reply_to, OffsetFetchResult(C.NONE, topics))
        return out

    def offset_delete(self, p: OffsetDeleteParams, now_ms: int, reply_to: Any) -> Outcome:
        """OffsetDelete: the group of its id, whatever its type, says whether offsets may go and which
        topics it still subscribes to (GROUP_SUBSCRIBED_TO_TOPIC)."""
        out = Outcome()
        err, _ = self._addressed(p.group_id)
        group = None if err else self._offsets_group(p.group_id)
        if not err:
            err = C.GROUP_ID_NOT_FOUND if group is None else group.validate_offset_delete()
        if err:
            self._respond(out, reply_to, OffsetDeleteResult(err))
            return out
        gid = p.group_id
        results = []
        doomed: list[tuple[tuple[str, int], CommittedOffset | None]] = []
        for topic, parts in p.topics:
            if group.is_subscribed_to_topic(topic):
                results.append((topic, tuple(PartitionResult(part, C.GROUP_SUBSCRIBED_TO_TOPIC) for part in parts)))
                continue
            for part in parts:
                co = self.offsets.of(gid).get((topic, part))
                if co is not None or self.pending_txn.has(gid, topic, part):
                    doomed.append(((topic, part), co))
            results.append((topic, tuple(PartitionResult(part, C.NONE) for part in parts)))
        result = OffsetDeleteResult(C.NONE, tuple(results))
        if not doomed:
            self._respond(out, reply_to, result)
            return out

        def done(o: Outcome, error: int, now: int) -> None:
            if error:
                self._respond(o, reply_to, OffsetDeleteResult(C.map_append_error(error)))
                return
            self.offsets.deleted(gid, doomed)
            self._respond(o, reply_to, result)

        self._append(out, [OffsetRecord(gid, t, pt, tombstone=True) for (t, pt), _ in doomed], done)
        return out

    def expire_offsets(self, now_ms: int) -> Outcome:
        """Drop offsets past offsets.retention.minutes (Kafka's cleanupGroupMetadata), and delete
        Empty groups left with no offsets. Also runs on the ("offsets-expiration",) timer. KIP-211:
        a group's offsets of topics it still subscribes to never expire, and an Empty classic group's
        retention runs from when it became Empty."""
        out = Outcome()
        if self.phase == "active":
            self._expire_offsets(now_ms, out)
        return out

    def _expire_offsets(self, now: int, out: Outcome) -> None:
        ids = {gid for gid, _ in self.offsets.groups()}
        ids.update(gid for gid, g in self.groups.items() if not g.is_(S.DEAD))
        ids.update(self.other_group_ids())
        for gid in sorted(ids):
            other = self.other_group(gid)
            group: OffsetsGroup | None = other or self.groups.get(gid)
            if group is None or (other is None and self.groups[gid].is_(S.DEAD)):
                continue
            base = group.offset_expiration_base()
            if base is None:
                continue
            expired = self.offsets.expired(gid, now, base, group.is_subscribed_to_topic)
            all_gone = len(expired) == len(self.offsets.of(gid)) and not self.pending_txn.has_group(gid)
            delete_group = all_gone and group.is_empty()
            if not expired and not delete_group:
                continue
            records: list[Record] = [OffsetRecord(gid, t, pt, tombstone=True) for (t, pt), _ in expired]
            if other is not None:
                if records:
                    self._append(out, records, self._deletion_done(gid, None, expired))
                if delete_group and self.delete_other_group is not None:
                    out.extend(self.delete_other_group(gid, now))
                continue
            classic = self.groups[gid]
            if delete_group:
                records.append(GroupRecord(gid, tombstone=True))
                self._mark_dead(classic, now, out)
            self._append(out, records, self._deletion_done(gid, classic if delete_group else None, expired))

    def _mark_dead(self, group: ClassicGroup, now: int, out: Outcome) -> None:
        group.dead_rollback = (group.state, group.previous_state, group.state_timestamp)
        for mid in list(group.pending_members):
            self._disarm(out, heartbeat_key(group.group_id, mid))
        group.pending_members.clear()
        group.transition(S.DEAD, now)

    def _deletion_done(self, group_id: str, dead: ClassicGroup | None, expired: list) -> _OnDone:
        """Once the tombstones of `expired` (and of the classic group `dead`, marked Dead) are stored:
        the offsets go, and the group; if they were not, a Dead group lives on as it was."""
        def done(o: Outcome, error: int, now: int) -> None:
            if error:
                if dead is not None and dead.is_(S.DEAD) and dead.dead_rollback is not None:
                    dead.state, dead.previous_state, dead.state_timestamp = dead.dead_rollback
                    dead.dead_rollback = None
            else:
                for tp, co in expired:
                    self.offsets.remove(group_id, tp, co)
                if dead is not None and self.groups.get(group_id) is dead:
                    self._cancel_group_timers(dead, o)
                    del self.groups[group_id]
        return done

    # ================================================================ admin
    def describe_groups(self, group_ids: Iterable[str], now_ms: int, reply_to: Any,
                        api_version: int = 5) -> Outcome:
        out = Outcome()
        err = self._availability()
        described = []
        for gid in group_ids:
            group = self.groups.get(gid)
            if err:
                described.append(DescribedGroup(err, gid))
            elif group is None or group.is_(S.DEAD):
                described.append(DescribedGroup(C.GROUP_ID_NOT_FOUND, gid, S.DEAD.value) if api_version >= 6
                                 else DescribedGroup(C.NONE, gid, S.DEAD.value))
            elif group.is_(S.STABLE):
                described.append(DescribedGroup(
                    C.NONE, gid, group.state.value, group.protocol_type or "", group.protocol_name or "",
                    tuple(DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                          m.metadata(group.protocol_name), m.assignment)
                          for m in group.members.values())))
            else:
                described.append(DescribedGroup(
                    C.NONE, gid, group.state.value, group.protocol_type or "", "",
                    tuple(DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                          b"", b"") for m in group.members.values())))
        self._respond(out, reply_to, DescribeGroupsResult(tuple(described)))
        return out

    def list_groups(self, now_ms: int, reply_to: Any, states_filter: Iterable[str] = (),
                    types_filter: Iterable[str] = ()) -> Outcome:
        out = Outcome()
        err = self._availability()
        if err:
            self._respond(out, reply_to, ListGroupsResult(err))
            return out
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        listed = []
        if not types or "classic" in types:
            for g in self.groups.values():
                if g.is_(S.DEAD) or (states and g.state.value.lower() not in states):
                    continue
                listed.append(ListedGroup(g.group_id, g.protocol_type or "", g.state.value))
        self._respond(out, reply_to, ListGroupsResult(C.NONE, tuple(listed)))
        return out

    def delete_groups(self, group_ids: Iterable[str], now_ms: int, reply_to: Any,
                      deleted_elsewhere: Iterable[str] = ()) -> Outcome:
        """DeleteGroups of classic groups (Empty ones: NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND
        without one), their offsets tombstoned with the GroupMetadata record; `deleted_elsewhere`:
        ids whose group another machine has deleted, only their offsets tombstoned here."""
        out = Outcome()
        err = self._availability()
        others = list(dict.fromkeys(deleted_elsewhere))
        ids = [g for g in dict.fromkeys(group_ids) if g not in others]
        if err:
            self._respond(out, reply_to, DeleteGroupsResult(tuple((g, err) for g in ids + others)))
            return out
        results: dict[str, int] = {}
        records: list[Record] = []
        doomed: list[tuple[str, ClassicGroup | None, list]] = []
        for gid in ids:
            group = self.groups.get(gid)
            if group is None or group.is_(S.DEAD):
                results[gid] = C.GROUP_ID_NOT_FOUND
            elif not group.is_(S.EMPTY):
                results[gid] = C.NON_EMPTY_GROUP
            else:
                doomed.append((gid, group, list(self.offsets.of(gid).items())))
                records.extend(self.offsets.tombstones(gid))
                records.append(GroupRecord(gid, tombstone=True))
                self._mark_dead(group, now_ms, out)
                results[gid] = C.NONE
        for gid in others:
            results[gid] = C.NONE
            tombstones = self.offsets.tombstones(gid)
            if tombstones:
                doomed.append((gid, None, list(self.offsets.of(gid).items())))
                records.extend(tombstones)
        if not doomed:
            self._respond(out, reply_to, DeleteGroupsResult(tuple(results.items())))
            return out
        handlers = [self._deletion_done(gid, g, exp) for gid, g, exp in doomed]

        def done(o: Outcome, error: int, now: int) -> None:
            for h in handlers:
                h(o, error, now)
            if not error:
                for gid, _, _ in doomed:
                    self.offsets.discard_pending_group(gid)
            if error:
                mapped = C.map_append_error(error)
                for gid, _, _ in doomed:
                    results[gid] = mapped
            self._respond(o, reply_to, DeleteGroupsResult(tuple(results.items())))

        self._append(out, records, done)
        return out

    # ================================================================ records
    @staticmethod
    def _group_record(group: ClassicGroup, assignment: dict[str, bytes]) -> GroupRecord:
        return GroupRecord(
            group.group_id, group.protocol_type or "", group.generation_id, group.protocol_name,
            group.leader_id if group.members else None, group.state_timestamp,
            tuple(MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata(group.protocol_name), assignment.get(m.member_id, b""))
                  for m in group.members.values()))
