"""Members speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) inside a KIP-848
consumer group, and the online upgrade of a classic group -- Kafka 4.x's interoperability
(GroupMetadataManager classicGroup*ToConsumerGroup, ConsumerGroup.fromClassicGroup). A mixin of
kohort.broker.coordinator.consumer_group.ConsumerGroups; pure like it. The data it shares with that
machine (groups, members, snapshots, timer keys) lives in consumer_group_model.

* JoinGroup acts as a heartbeat: the subscription (topics, owned partitions, rack) comes from the
  member's embedded ConsumerProtocolSubscription (first protocol); an unknown dynamic member on v4+
  gets MEMBER_ID_REQUIRED; the answer carries generation = member epoch, the member's first protocol,
  no leader and no member list (every classic member is a follower: the broker assigns).
* SyncGroup: generation must equal the member epoch (ILLEGAL_GENERATION); REBALANCE_IN_PROGRESS when
  the group epoch moved on and the member is not revoking; else its current assignment as a
  ConsumerProtocolAssignment (in the version of its first protocol's metadata).
* Heartbeat: REBALANCE_IN_PROGRESS when the member must rejoin (epoch behind the group, partitions to
  revoke, or withheld partitions now free), arming a join timer (rebalance timeout).
* LeaveGroup removes the member (epoch bump). Timers: the member's own session timeout; after a
  JoinGroup a sync timer, after a REBALANCE_IN_PROGRESS a join timer (both its rebalance timeout).
* Upgrade: the first consumer-protocol join (epoch 0) to a non-empty classic group whose protocol type
  is "consumer" and size fits `group.consumer.max.size` converts it: group epoch = assignment epoch =
  its generation, every member STABLE at that epoch with its last assignment as current and target.
  Parked JoinGroup/SyncGroup get REBALANCE_IN_PROGRESS (done by the classic coordinator).
* Downgrade: when a consumer-protocol member leaves or is fenced and only classic members (at least
  one, at most `group.max.size`) remain, the consumer group is tombstoned and the classic coordinator
  adopts them as a classic group (Stable at the group epoch with their target assignments, then a
  rebalance). Not done: the downgrade by a classic static member replacing the last consumer one.
"""
from __future__ import annotations

from typing import Any, Mapping

from kohort.errors import DecodeError
from kohort.protocol.consumer_protocol import (
    ConsumerProtocolAssignment, decode_assignment, decode_subscription, encode_assignment, payload_version,
)
import kohort.broker.coordinator.codes as C
from .consumer_group_model import (
    ClassicGroupSnapshot, ClassicMeta, ClassicSnapshotMember, ConsumerGroup, ConsumerMember,
    MemberState, join_key, session_key, snapshot, sync_key,
)
from .model import (
    HeartbeatParams, HeartbeatResult, JoinParams, JoinResult, LeaveMemberResult, LeaveParams, LeaveResult,
    Outcome, Response, SyncParams, SyncResult,
)


def _owned(sub) -> dict:
    return {tp.topic: frozenset(tp.partitions) for tp in (sub.owned_partitions or []) if tp.partitions}


def _assigned(data: bytes) -> dict:
    if not data:
        return {}
    a = decode_assignment(data)
    out: dict[str, frozenset[int]] = {}
    for tp in a.assigned_partitions:
        if tp.partitions:
            out[tp.topic] = out.get(tp.topic, frozenset()) | frozenset(tp.partitions)
    return out


class ClassicMembersMixin:
    # ------------------------------------------------------------------ upgrade
    def _upgrade(self, group_id: str, now: int, out: Outcome):
        """Convert the live classic group `group_id` into a consumer group (None if it cannot be)."""
        if self._classic_upgrade is None:
            return None
        released = self._classic_upgrade(group_id, now)
        if released is None:
            return None
        classic_out, snap = released
        out.extend(classic_out)
        g = ConsumerGroup(group_id, group_epoch=snap.generation, assignment_epoch=snap.generation)
        for sm in snap.members:
            try:
                sub = decode_subscription(sm.metadata)
                assigned = _assigned(sm.assignment)
            except DecodeError:
                sub, assigned = None, {}
            m = ConsumerMember(sm.member_id, instance_id=sm.instance_id,
                               rack_id=getattr(sub, "rack_id", None) or None,
                               client_id=sm.client_id, client_host=sm.client_host,
                               subscribed_topic_names=tuple(sorted(set(sub.topics))) if sub else (),
                               rebalance_timeout_ms=sm.rebalance_timeout_ms,
                               member_epoch=snap.generation, previous_member_epoch=snap.generation,
                               state=MemberState.STABLE, assigned=assigned,
                               classic=ClassicMeta(sm.session_timeout_ms, sm.protocols))
            g.members[m.member_id] = m
            g.target[m.member_id] = dict(assigned)
            self._arm(out, session_key(group_id, m.member_id), now + sm.session_timeout_ms)
        return g

    # ------------------------------------------------------------------ downgrade
    def _maybe_downgrade(self, group, leaving, now: int, out: Outcome) -> bool:
        """If `leaving` (leaving or fenced) is the last consumer-protocol member and classic members
        remain, hand them to the classic coordinator; True if it did (the consumer group is gone)."""
        if self._classic_downgrade is None or leaving.classic is not None:
            return False
        rest = [m for m in group.members.values() if m.member_id != leaving.member_id]
        if not rest or any(m.classic is None for m in rest) or len(rest) > self._classic_max_size:
            return False
        A = ConsumerProtocolAssignment
        members = []
        for m in rest:
            try:
                version = payload_version(m.classic.protocols[0][1])
            except DecodeError:
                version = 0
            target = group.target.get(m.member_id, {})
            assignment = encode_assignment(A(assigned_partitions=[
                A.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(target.items())],
                user_data=None), max(0, min(version, A.MAX_VERSION)))
            members.append(ClassicSnapshotMember(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.classic.session_timeout_ms, m.classic.protocols, m.classic.protocols[0][1], assignment))
            self._cancel_member_timers(out, group.group_id, m.member_id)
        self._cancel_member_timers(out, group.group_id, leaving.member_id)
        snap = ClassicGroupSnapshot(group.group_id, group.group_epoch, tuple(members))
        del self.groups[group.group_id]         # the caller's _persist tombstones every record
        classic_out = self._classic_downgrade(snap, now)
        # the consumer group's tombstones must be stored before the classic record: the caller's
        # append comes first, so the classic outcome is added after it (see _persist's deferral)
        self._deferred.append(classic_out)
        return True

    # ------------------------------------------------------------------ JoinGroup
    def classic_join(self, p: JoinParams, topics: Mapping[str, int], now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        group = self.groups.get(p.group_id)

        def fail(code: int, member_id: str = "") -> Outcome:
            out.responses.append(Response(reply_to, JoinResult(code, member_id or p.member_id)))
            return out
        if group is None:
            return fail(C.UNKNOWN_MEMBER_ID)
        names = {n for n, _ in p.protocols}
        if p.protocol_type != "consumer" or not names or any(
                m.classic is not None and not names & {n for n, _ in m.classic.protocols}
                for m in group.members.values()):
            return fail(C.INCONSISTENT_GROUP_PROTOCOL)
        member_id = p.member_id or self._new_id()
        unknown = not p.member_id
        if unknown and p.group_instance_id is None and p.api_version >= 4:
            return fail(C.MEMBER_ID_REQUIRED, member_id)
        before = snapshot(group)
        try:
            sub = decode_subscription(p.protocols[0][1])
        except DecodeError:
            return fail(C.INCONSISTENT_GROUP_PROTOCOL)
        # get or create the member
        member = None
        if p.group_instance_id is None:
            member = group.members.get(member_id)
        else:
            old = group.static_member(p.group_instance_id)
            if old is not None:
                if old.member_id == member_id:
                    member = old
                elif not unknown:
                    return fail(C.FENCED_INSTANCE_ID)
                else:                     # a new process for the instance: takes over its assignment
                    member = ConsumerMember(member_id, instance_id=p.group_instance_id,
                                            assigned=dict(old.assigned),
                                            pending_revocation=dict(old.pending_revocation))
                    del group.members[old.member_id]
                    group.holders_changed()
                    if old.member_id in group.target:
                        group.target[member_id] = group.target.pop(old.member_id)
                    self._cancel_member_timers(out, group.group_id, old.member_id)
                    group.members[member_id] = member
        new = member is None
        if new:
            if len(group.members) >= self.config.max_size:
                return fail(C.GROUP_MAX_SIZE_REACHED)
            member = ConsumerMember(member_id, instance_id=p.group_instance_id)
            group.members[member_id] = member
        old_names = member.subscribed_topic_names
        member.rack_id = sub.rack_id or member.rack_id
        member.rebalance_timeout_ms = p.rebalance_timeout_ms if p.rebalance_timeout_ms >= 0 else p.session_timeout_ms
        member.server_assignor = None
        member.subscribed_topic_names = tuple(sorted(set(sub.topics)))
        member.subscribed_topic_regex = None
        member.client_id, member.client_host = p.client_id, p.client_host
        member.classic = ClassicMeta(p.session_timeout_ms, tuple(p.protocols))
        bump = new or member.subscribed_topic_names != old_names
        metadata = self._subscribed_metadata(group, topics)
        if metadata != group.subscribed_metadata:
            group.subscribed_metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)
        self._reconcile(group, member, _owned(sub))
        self._disarm(out, join_key(group.group_id, member_id))
        self._arm(out, session_key(group.group_id, member_id), now_ms + p.session_timeout_ms)
        self._arm(out, sync_key(group.group_id, member_id), now_ms + member.rebalance_timeout_ms)
        res = JoinResult(C.NONE, member_id, member.member_epoch, "consumer", p.protocols[0][0], "", False, ())
        self._persist(out, group.group_id, before, reply_to, res)
        return out

    # ------------------------------------------------------------------ common checks
    def _classic_member(self, group, member_id: str, instance_id: str | None):
        """(member, error): Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            m = group.members.get(member_id)
            if m is None:
                return None, C.UNKNOWN_MEMBER_ID
        else:
            m = group.static_member(instance_id)
            if m is None:
                return None, C.UNKNOWN_MEMBER_ID
            if m.member_id != member_id:
                return None, C.FENCED_INSTANCE_ID
        if m.classic is None:
            return None, C.UNKNOWN_MEMBER_ID
        return m, C.NONE

    def _must_rejoin(self, group, m) -> bool:
        if m.member_epoch < group.group_epoch or m.state == MemberState.UNREVOKED_PARTITIONS:
            return True
        if m.state == MemberState.UNRELEASED_PARTITIONS:
            owners = group.owners()
            target = group.target.get(m.member_id, {})
            waiting = any(owners.get((t, p), m.member_id) != m.member_id for t, ps in target.items() for p in ps
                          if p not in m.assigned.get(t, ()))
            return not waiting
        return False

    # ------------------------------------------------------------------ SyncGroup
    def classic_sync(self, p: SyncParams, now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        group = self.groups.get(p.group_id)
        if group is None:
            out.responses.append(Response(reply_to, SyncResult(C.UNKNOWN_MEMBER_ID)))
            return out
        m, err = self._classic_member(group, p.member_id, p.group_instance_id)
        if not err and p.generation_id != m.member_epoch:
            err = C.ILLEGAL_GENERATION
        if not err and ((p.protocol_type is not None and p.protocol_type != "consumer") or
                        (p.protocol_name is not None and p.protocol_name != m.classic.protocols[0][0])):
            err = C.INCONSISTENT_GROUP_PROTOCOL
        if not err and group.group_epoch > m.member_epoch and m.state != MemberState.UNREVOKED_PARTITIONS:
            err = C.REBALANCE_IN_PROGRESS
            self._arm_join_timer(out, group, m, now_ms)
        if err:
            out.responses.append(Response(reply_to, SyncResult(err)))
            return out
        self._disarm(out, sync_key(group.group_id, m.member_id))
        self._arm(out, session_key(group.group_id, m.member_id), now_ms + m.classic.session_timeout_ms)
        try:
            version = payload_version(m.classic.protocols[0][1])
        except DecodeError:
            version = 0
        A = ConsumerProtocolAssignment
        assignment = encode_assignment(A(assigned_partitions=[
            A.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(m.assigned.items())],
            user_data=None), max(0, min(version, A.MAX_VERSION)))
        out.responses.append(Response(reply_to, SyncResult(C.NONE, "consumer", m.classic.protocols[0][0],
                                                           assignment)))
        return out

    def _arm_join_timer(self, out: Outcome, group, m, now_ms: int) -> None:
        key = join_key(group.group_id, m.member_id)
        if key not in self._timers:
            self._arm(out, key, now_ms + m.rebalance_timeout_ms)

    # ------------------------------------------------------------------ Heartbeat
    def classic_heartbeat(self, p: HeartbeatParams, now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        group = self.groups.get(p.group_id)
        if group is None:
            out.responses.append(Response(reply_to, HeartbeatResult(C.UNKNOWN_MEMBER_ID)))
            return out
        m, err = self._classic_member(group, p.member_id, p.group_instance_id)
        if not err and p.generation_id != m.member_epoch:
            err = C.ILLEGAL_GENERATION
        if not err:
            self._arm(out, session_key(group.group_id, m.member_id), now_ms + m.classic.session_timeout_ms)
            if self._must_rejoin(group, m):
                err = C.REBALANCE_IN_PROGRESS
                self._arm_join_timer(out, group, m, now_ms)
        out.responses.append(Response(reply_to, HeartbeatResult(err)))
        return out

    # ------------------------------------------------------------------ LeaveGroup
    def classic_leave(self, p: LeaveParams, now_ms: int, reply_to: Any) -> Outcome:
        out = Outcome()
        group = self.groups.get(p.group_id)
        if group is None:
            out.responses.append(Response(reply_to, LeaveResult(C.UNKNOWN_MEMBER_ID)))
            return out
        before = snapshot(group)
        results = []
        for lm in p.members:
            if lm.group_instance_id is not None and not lm.member_id:
                m = group.static_member(lm.group_instance_id)      # administrative removal
                err = C.NONE if m is not None and m.classic is not None else C.UNKNOWN_MEMBER_ID
            else:
                m, err = self._classic_member(group, lm.member_id, lm.group_instance_id)
            if err:
                results.append(LeaveMemberResult(lm.member_id, lm.group_instance_id, err))
                continue
            self._remove(group, m, out)
            results.append(LeaveMemberResult(m.member_id, lm.group_instance_id, C.NONE))
        self._persist(out, group.group_id, before, reply_to, LeaveResult(C.NONE, tuple(results)))
        return out
