"""KIP-848 consumer-protocol groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe) as a PURE state
machine beside the classic coordinator: no I/O, no clock; every entry point takes `now_ms` and
returns an Outcome (kohort.broker.coordinator.model: responses, appends, timers).

Persistence: every change is written to `__consumer_offsets` as Kafka's consumer-group records
(ConsumerGroupRecord: types 3 group epoch, 5 member metadata, 6 target assignment epoch, 7 member
target, 8 member current assignment; kohort.protocol.consumer_group_records has the wire formats), in
Kafka's order (removed members' 8/7/5 tombstones, then 5, 3, 7, 6, 8). The state changes in memory at
once (later heartbeats see it, as Kafka's uncommitted timeline state) and the heartbeat's response is
held until the append is stored; a failed append answers the mapped error but does NOT roll the
state back (Kafka reverts to its last committed snapshot). `replay` + `on_loaded` rebuild the groups
at start, with session timers for every member and rebalance timers for members still revoking.

Model (Kafka's GroupMetadataManager / ConsumerGroup / CurrentAssignmentBuilder, 4.2+ behaviour):
* group epoch: bumped when the assignment inputs change (member joins, leaves or is fenced, a
  subscription changes, the subscribed topics' partition counts change, a regex resolves to other
  topics). Target assignment epoch: the group epoch the target was computed for; a heartbeat that
  finds group epoch > assignment epoch recomputes the whole target with the group's assignor.
* member epoch + previous member epoch; member state STABLE, UNREVOKED_PARTITIONS,
  UNRELEASED_PARTITIONS. Reconciliation on the member's own heartbeat (revoke before assign):
  partitions leaving the member are first moved to "pending revocation" (the member is told its
  assignment without them, epoch unchanged) and only once a heartbeat no longer lists them does
  the member advance to the target epoch; a partition still held (assigned or pending revocation)
  by another member is withheld, and handed over only after that member released it.
* timers: a session timer per member (group.consumer.session.timeout.ms), re-armed by each
  heartbeat, fences (removes) the member on expiry; a rebalance timer (the member's
  RebalanceTimeoutMs) armed when a member must revoke, fences it if it has not by then.
* static members (instance id): epoch -2 keeps the member and its partitions until its session
  expires; a new member with the same instance id then takes over its assignment at once. A join
  with an instance id held by a live member gets UNRELEASED_INSTANCE_ID.
* member ids: v1 clients generate theirs (KIP-1082), v0 joins with "" get a server-generated one.
* regex subscriptions (v1) are resolved synchronously at each heartbeat with Python `re`
  (fullmatch) over the broker's topic names -- Kafka uses RE2J asynchronously (every >= 10 s); the
  syntaxes differ on backreferences/lookarounds (RE2 has none).

Topics are keyed by name here (the runtime maps topic ids); the caller passes the current topic
metadata (name -> partition count) into each heartbeat.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kohort.assignors.server import SERVER_ASSIGNOR_NAMES, MemberSpec, server_assignor
from kohort.errors import ConfigError
import kohort.broker.coordinator.codes as C
from .classic_members import ClassicMembersMixin
from .consumer_group_model import (  # noqa: F401 - the consumer-group names, importable from the machine
    FENCED_MEMBER_EPOCH, INVALID_REGULAR_EXPRESSION, INVALID_REQUEST, JOIN_EPOCH, LEAVE_EPOCH,
    STALE_MEMBER_EPOCH, STATIC_LEAVE_EPOCH, UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, UNSUPPORTED_VERSION,
    Assignment, ClassicMeta, ConsumerGroup, ConsumerGroupRecord, ConsumerGroupState, ConsumerHeartbeatParams,
    ConsumerHeartbeatResult, ConsumerMember, ConsumerRecordKind, CurrentAssignment, HeartbeatError,
    MemberMeta, MemberState, Scope, diff, error_result, rebalance_key, scoped_after, session_key, snapshot,
    thawed,
)
from .machine import AppendToken, GroupMachine, GroupType
from .serde import ConsumerGroupRecordSerde
from .model import Outcome, Response

K = ConsumerRecordKind


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = ("uniform", "range")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> "ConsumerGroupConfig":
        """From broker properties by Kafka's names; raises ConfigError (a ValueError) naming the
        property when a value is out of its min/max bounds or names an unknown assignor."""
        def get(name: str, default: Any) -> Any:
            return props.get(name, default)
        session = int(get("group.consumer.session.timeout.ms", 45000))
        interval = int(get("group.consumer.heartbeat.interval.ms", 5000))
        for prop, v, lo_default, hi_default in (
                ("group.consumer.session.timeout.ms", session, 45000, 60000),
                ("group.consumer.heartbeat.interval.ms", interval, 5000, 15000)):
            stem = prop[len("group.consumer."):]
            lo = int(get(f"group.consumer.min.{stem}", lo_default))
            hi = int(get(f"group.consumer.max.{stem}", hi_default))
            if not lo <= v <= hi:
                raise ConfigError(f"{prop} ({v}) must be between group.consumer.min.{stem} ({lo}) "
                                  f"and group.consumer.max.{stem} ({hi})")
        if interval >= session:
            raise ConfigError(f"group.consumer.heartbeat.interval.ms ({interval}) must be less than "
                              f"group.consumer.session.timeout.ms ({session})")
        assignors = tuple(a.strip() for a in str(get("group.consumer.assignors", "uniform,range")).split(",")
                          if a.strip())
        unknown = [a for a in assignors if a not in SERVER_ASSIGNOR_NAMES]
        if not assignors or unknown:
            raise ConfigError(f"group.consumer.assignors: unknown assignor(s) {unknown or assignors}; "
                              f"kohort has {', '.join(SERVER_ASSIGNOR_NAMES)}")
        max_size = int(get("group.consumer.max.size", 2**31 - 1))
        if max_size < 1:
            raise ConfigError(f"group.consumer.max.size must be >= 1, got {max_size}")
        return cls(session, interval, max_size, assignors)




def _norm(a: Mapping[str, Any] | None) -> Assignment | None:
    if a is None:
        return None
    return {t: frozenset(ps) for t, ps in a.items() if ps}


def _flat(a: Mapping[str, frozenset[int]]) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def _unflat(tps) -> Assignment:
    out: dict[str, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def _frozen_target(t: Mapping[str, Any]) -> Assignment:
    """An assignor's answer for one member as a target: empty topics dropped, partitions frozen
    (the assignors' own frozensets kept as they are)."""
    return {tp: ps if isinstance(ps, frozenset) else frozenset(ps) for tp, ps in t.items() if ps}


def _held_by_others(group: ConsumerGroup, m: ConsumerMember, want: set) -> set:
    """The partitions of `want` another member still holds (assigned or pending revocation), looked
    up in the group's holders index: O(|want|), not a walk over the group's members."""
    if not want:
        return set()
    idx = group.holders_index()
    mid = m.member_id
    held = set()
    for tp in want:
        h = idx.get(tp)
        if h and (len(h) > 1 or mid not in h):
            held.add(tp)
    return held


class ConsumerGroups(GroupMachine, ClassicMembersMixin):
    """Every KIP-848 consumer-protocol group of one coordinator."""

    GROUP_TYPE = GroupType.CONSUMER
    TIMER_NAMESPACE = "consumer"
    SERDE = ConsumerGroupRecordSerde()

    def __init__(self, config: ConsumerGroupConfig | None = None, *,
                 id_factory: Callable[[], str] | None = None,
                 classic_group_active: Callable[[str], bool] | None = None,
                 classic_upgrade: Callable[[str, int], Any] | None = None,
                 classic_downgrade: Callable[[Any, int], Outcome] | None = None,
                 classic_release_empty: Callable[[str, int], Outcome | None] | None = None,
                 classic_max_size: int = 2**31 - 1) -> None:
        super().__init__()      # timers: key -> (deadline, the member epoch a rebalance timer was armed at)
        self.config = config or ConsumerGroupConfig()
        self._new_id = id_factory or (lambda: str(uuid.uuid4()))
        self._classic_active = classic_group_active or (lambda gid: False)
        # (group_id, now) -> None (cannot upgrade) or (Outcome, ClassicGroupSnapshot): releases the
        # classic group (its parked requests answered, its record tombstoned) for an online upgrade
        self._classic_upgrade = classic_upgrade
        # (ClassicGroupSnapshot, now) -> Outcome: the classic coordinator adopts the classic members
        # left when the last consumer-protocol member leaves (online downgrade)
        self._classic_downgrade = classic_downgrade
        # (group_id, now) -> the classic coordinator's Outcome deleting its Empty group of that id (a
        # simple group too) when a consumer group is made with it, or None when it has none
        self._classic_release_empty = classic_release_empty
        self._classic_max_size = classic_max_size
        self.groups: dict[str, ConsumerGroup] = {}
        self._regex_cache: dict[str, re.Pattern] = {}
        self._deferred: list[Outcome] = []     # another machine's outcome, after our append

    # ------------------------------------------------------------------ plumbing

    def _persist(self, out: Outcome, group_id: str, before: dict, reply_to: Any = None,
                 result: Any = None, scope: Scope | None = None) -> None:
        """Append what changed in `group_id` since `before` (a whole-group snapshot, or one limited to
        `scope`); the response waits for the append."""
        group = self.groups.get(group_id)
        if scope is None:
            records = diff(group_id, before, snapshot(group))
        else:
            records = diff(group_id, *scoped_after(group, scope, before))
        if not records:
            if reply_to is not None:
                out.responses.append(Response(reply_to, result))
        else:
            self._hold(out, records, (reply_to, result))
        for other in self._deferred:
            out.extend(other)
        self._deferred.clear()

    def on_append_done(self, token: AppendToken, error_code: int, now_ms: int) -> Outcome:
        out = Outcome()
        reply_to, result = self._pending.pop(token, (None, None))
        if reply_to is None:
            return out
        if error_code:
            result = error_result(result, C.map_append_error(error_code))
        out.responses.append(Response(reply_to, result))
        return out

    def unload(self) -> Outcome:
        """Stop serving: answer every held response NOT_COORDINATOR, drop the timers."""
        out = Outcome()
        for token in list(self._pending):
            reply_to, result = self._pending.pop(token)
            if reply_to is not None:
                out.responses.append(Response(reply_to, error_result(result, C.NOT_COORDINATOR)))
        self._disarm_all(out)
        return out

    # ------------------------------------------------------------------ replay
    def replay(self, r: ConsumerGroupRecord, producer_id: int = -1) -> None:
        """Apply one record read back from `__consumer_offsets` (log order, compaction tolerated);
        consumer-group records are never transactional (`producer_id` is always -1)."""
        g = self.groups.get(r.group)
        if r.kind == K.CONSUMER_GROUP_METADATA:
            if r.value is None:
                if g is not None and not g.members:
                    del self.groups[r.group]
                return
            g = self.groups.setdefault(r.group, ConsumerGroup(r.group))
            g.group_epoch = r.value
            return
        if g is None:
            if r.value is None:
                return
            g = self.groups[r.group] = ConsumerGroup(r.group)
        g.holders_changed()
        if r.kind == K.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            g.assignment_epoch = 0 if r.value is None else r.value
        elif r.kind == K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if r.value is None:
                g.target.pop(r.member_id, None)
            else:
                g.target[r.member_id] = thawed(r.value)
        elif r.kind == K.CONSUMER_GROUP_MEMBER_METADATA:
            if r.value is None:
                g.members.pop(r.member_id, None)
                return
            m = g.members.setdefault(r.member_id, ConsumerMember(r.member_id))
            v: MemberMeta = r.value
            m.instance_id, m.rack_id, m.client_id, m.client_host = (v.instance_id, v.rack_id, v.client_id,
                                                                    v.client_host)
            m.subscribed_topic_names, m.subscribed_topic_regex = v.subscribed_topic_names, v.subscribed_topic_regex
            m.rebalance_timeout_ms, m.server_assignor = v.rebalance_timeout_ms, v.server_assignor
            m.classic = v.classic
        elif r.kind == K.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            m = g.members.get(r.member_id)
            if r.value is None:
                if m is not None:
                    m.member_epoch, m.assigned, m.pending_revocation = -1, {}, {}
                return
            if m is None:
                m = g.members[r.member_id] = ConsumerMember(r.member_id)
            c: CurrentAssignment = r.value
            m.member_epoch, m.previous_member_epoch = c.member_epoch, c.previous_member_epoch
            m.state = MemberState(c.state) if c.state in MemberState._value2member_map_ else MemberState.UNKNOWN
            m.assigned, m.pending_revocation = thawed(c.assigned), thawed(c.pending_revocation)

    def on_loaded(self, now_ms: int, topics: Mapping[str, int]) -> Outcome:
        """After replay: topic metadata as of now (no spurious epoch bump), a session timer for every
        member, a rebalance timer for those still revoking."""
        out = Outcome()
        for g in self.groups.values():
            g.subscribed_metadata = self._subscribed_metadata(g, topics)
            for m in g.members.values():
                session = m.classic.session_timeout_ms if m.classic is not None else self.config.session_timeout_ms
                self._arm(out, session_key(g.group_id, m.member_id), now_ms + session)
                if m.state == MemberState.UNREVOKED_PARTITIONS:
                    self._arm(out, rebalance_key(g.group_id, m.member_id), now_ms + m.rebalance_timeout_ms,
                              m.member_epoch)
        return out

    def _compile(self, regex: str) -> re.Pattern:
        pat = self._regex_cache.get(regex)
        if pat is None:
            pat = self._regex_cache[regex] = re.compile(regex)
        return pat

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(self, p: ConsumerHeartbeatParams, topics: Mapping[str, int], now_ms: int,
                  reply_to: Any) -> Outcome:
        """ConsumerGroupHeartbeat. `topics`: the broker's topics (name -> partition count)."""
        out = Outcome()
        group = self.groups.get(p.group_id)
        scope = None
        if group is not None and (p.member_epoch != LEAVE_EPOCH
                                  or not any(m.classic is not None for m in group.members.values())):
            # the members this heartbeat can touch: its own and a static member it replaces (a
            # leave from a group with classic members may hand the whole group to the classic
            # coordinator: that snapshot stays whole)
            scope = Scope({p.member_id}, group.target)
            if p.instance_id is not None:
                old = group.static_member(p.instance_id)
                if old is not None:
                    scope.mids.add(old.member_id)
        before = snapshot(group, None if scope is None else scope.mids)
        try:
            self._validate(p)
            if p.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                res = self._leave(p, now_ms, out)
            else:
                res = self._heartbeat(p, topics, now_ms, out)
        except HeartbeatError as e:
            res = ConsumerHeartbeatResult(e.code, e.message, p.member_id or None, p.member_epoch, 0)
            out.responses.append(Response(reply_to, res))
            # nothing, unless an upgrade happened before the error (only when there was no group)
            self._persist(out, p.group_id, before, scope=scope)
            return out
        if scope is not None and res.member_id:
            scope.mids.add(res.member_id)          # a new member's server-generated id
        self._persist(out, p.group_id, before, reply_to, res, scope=scope)
        return out

    def _validate(self, p: ConsumerHeartbeatParams) -> None:
        def bad(msg: str):
            raise HeartbeatError(INVALID_REQUEST, msg)
        if not p.group_id.strip():
            bad("GroupId can't be empty.")
        if p.instance_id is not None and not p.instance_id.strip():
            bad("InstanceId can't be empty.")
        if p.rack_id is not None and not p.rack_id.strip():
            bad("RackId can't be empty.")
        if not p.member_id.strip() and (p.api_version >= 1 or p.member_epoch > 0
                                        or p.member_epoch == LEAVE_EPOCH):
            bad("MemberId can't be empty.")
        if p.member_epoch == JOIN_EPOCH:
            if p.rebalance_timeout_ms == -1:
                bad("RebalanceTimeoutMs must be provided in first request.")
            if p.owned is None or len(p.owned) > 0:      # Kafka: the list itself must be empty
                bad("TopicPartitions must be empty when (re-)joining.")
            if p.subscribed_topic_names is None and p.subscribed_topic_regex is None:
                bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif p.member_epoch == STATIC_LEAVE_EPOCH:
            if p.instance_id is None:
                bad("InstanceId can't be null.")
        elif p.member_epoch < STATIC_LEAVE_EPOCH:
            bad(f"MemberEpoch is {p.member_epoch}, but must be greater than or equal to -2.")
        if p.server_assignor is not None and p.server_assignor not in self.config.assignors:
            raise HeartbeatError(UNSUPPORTED_ASSIGNOR,
                                 f"ServerAssignor {p.server_assignor} is not supported. "
                                 f"Supported assignors: {', '.join(self.config.assignors)}.")
        if p.subscribed_topic_regex:
            try:
                self._compile(p.subscribed_topic_regex)
            except re.error as e:
                raise HeartbeatError(INVALID_REGULAR_EXPRESSION,
                                     f"SubscribedTopicRegex `{p.subscribed_topic_regex}` is not a valid "
                                     f"regular expression: {e}.") from None

    def _heartbeat(self, p: ConsumerHeartbeatParams, topics: Mapping[str, int], now: int,
                   out: Outcome) -> ConsumerHeartbeatResult:
        group = self.groups.get(p.group_id)
        if group is None:
            if p.member_epoch != JOIN_EPOCH:
                raise HeartbeatError(C.GROUP_ID_NOT_FOUND, f"Group {p.group_id} not found.")
            group = None
            if self._classic_active(p.group_id):
                group = self._upgrade(p.group_id, now, out)
                if group is None:
                    raise HeartbeatError(C.GROUP_ID_NOT_FOUND, f"Group {p.group_id} is not a consumer group.")
                self.groups[group.group_id] = group    # converted, whatever happens to this request
            else:
                group = ConsumerGroup(p.group_id)
        fresh = p.group_id not in self.groups
        member, new_member, replaced = self._member(group, p)
        if new_member and len(group.members) >= self.config.max_size:
            raise HeartbeatError(C.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of "
                                 f"{self.config.max_size} members.")
        owned = _norm(p.owned)
        if not new_member and p.member_epoch != JOIN_EPOCH:
            self._check_epoch(member, p.member_epoch, owned)
        # the group exists from here on (a join that failed validation created nothing)
        if fresh and self._classic_release_empty is not None:
            released = self._classic_release_empty(group.group_id, now)
            if released is not None:            # its tombstone is stored before this group's records
                out.extend(released)
        self.groups[group.group_id] = group
        if replaced is not None:
            self._replace_static(group, replaced, member, out)
        elif new_member:
            group.members[member.member_id] = member
        old_assigned = dict(member.assigned)
        bump = new_member and replaced is None
        # merge the fields (None / -1 = unchanged)
        if p.instance_id is not None:
            member.instance_id = p.instance_id
        if p.rack_id is not None:
            member.rack_id = p.rack_id
        if p.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = p.rebalance_timeout_ms
        if p.server_assignor is not None:
            member.server_assignor = p.server_assignor
        member.client_id, member.client_host = p.client_id, p.client_host
        if p.subscribed_topic_names is not None:
            names = tuple(sorted(set(p.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                bump = True
        if p.subscribed_topic_regex is not None:
            regex = p.subscribed_topic_regex or None
            if regex != member.subscribed_topic_regex:
                member.subscribed_topic_regex = regex
                bump = True
        metadata = self._subscribed_metadata(group, topics, changed=bump or replaced is not None)
        if metadata != group.subscribed_metadata:
            group.subscribed_metadata = metadata
            bump = True
        if bump or group.group_epoch == 0:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)
        was_unrevoked = (member.state, member.member_epoch)
        self._reconcile(group, member, owned)
        # timers
        self._arm(out, session_key(group.group_id, member.member_id), now + self.config.session_timeout_ms)
        rk = rebalance_key(group.group_id, member.member_id)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if was_unrevoked != (MemberState.UNREVOKED_PARTITIONS, member.member_epoch) or rk not in self._timers:
                self._arm(out, rk, now + member.rebalance_timeout_ms, member.member_epoch)
        else:
            self._disarm(out, rk)
        full = (p.rebalance_timeout_ms != -1 and owned is not None
                and (p.subscribed_topic_names is not None or p.subscribed_topic_regex is not None))
        send = (p.member_epoch == JOIN_EPOCH or full or member.assigned != old_assigned
                or (owned is not None and owned != member.assigned))
        return ConsumerHeartbeatResult(C.NONE, None, member.member_id, member.member_epoch,
                                       self.config.heartbeat_interval_ms,
                                       dict(member.assigned) if send else None)

    def _member(self, group: ConsumerGroup, p: ConsumerHeartbeatParams):
        """(member, is_new, replaced static member or None); raises the lookup errors."""
        if p.instance_id is None:
            m = group.members.get(p.member_id) if p.member_id else None
            if m is not None:
                return m, False, None
            if p.member_epoch != JOIN_EPOCH:
                raise HeartbeatError(C.UNKNOWN_MEMBER_ID,
                                     f"Member {p.member_id} is not a member of group {group.group_id}.")
            mid = p.member_id or self._new_id()
            return ConsumerMember(mid), True, None
        old = group.static_member(p.instance_id)
        if p.member_epoch == JOIN_EPOCH:
            if old is None:
                m = group.members.get(p.member_id) if p.member_id else None
                if m is not None:
                    return m, False, None
                return ConsumerMember(p.member_id or self._new_id(), instance_id=p.instance_id), True, None
            if old.member_epoch != STATIC_LEAVE_EPOCH:
                raise HeartbeatError(UNRELEASED_INSTANCE_ID,
                                     f"Static member {old.member_id} with instance id {p.instance_id} "
                                     f"is not released yet.")
            new = ConsumerMember(p.member_id or self._new_id(), instance_id=p.instance_id)
            for f in ("rack_id", "client_id", "client_host", "subscribed_topic_names",
                      "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor", "state"):
                setattr(new, f, getattr(old, f))
            new.assigned, new.pending_revocation = dict(old.assigned), dict(old.pending_revocation)
            return new, False, old
        return self._static_member_of(group, p, old), False, None

    @staticmethod
    def _static_member_of(group: ConsumerGroup, p: ConsumerHeartbeatParams,
                          m: ConsumerMember | None) -> ConsumerMember:
        """`m`, the member holding `p.instance_id`, if it is `p.member_id`; else the lookup error."""
        if m is None:
            raise HeartbeatError(C.UNKNOWN_MEMBER_ID,
                                 f"Instance id {p.instance_id} is unknown in group {group.group_id}.")
        if m.member_id != p.member_id:
            raise HeartbeatError(C.FENCED_INSTANCE_ID,
                                 f"Static member {p.member_id} with instance id {p.instance_id} was "
                                 f"fenced by member {m.member_id}.")
        return m

    def _replace_static(self, group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember,
                        out: Outcome) -> None:
        del group.members[old.member_id]
        group.holders_changed()
        group.members[new.member_id] = new
        if old.member_id in group.target:
            group.target[new.member_id] = group.target.pop(old.member_id)
        new.member_epoch = new.previous_member_epoch = 0
        self._cancel_member_timers(out, group.group_id, old.member_id)

    @staticmethod
    def _check_epoch(m: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
        if epoch > m.member_epoch:
            raise HeartbeatError(FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a greater member epoch ({epoch}) than "
                                 f"the one known by the group coordinator ({m.member_epoch}). The member "
                                 f"must abandon all its partitions and rejoin.")
        if epoch < m.member_epoch:
            if (epoch != m.previous_member_epoch or owned is None
                    or not _flat(owned) <= _flat(m.assigned)):
                raise HeartbeatError(FENCED_MEMBER_EPOCH,
                                     f"The consumer group member has a smaller member epoch ({epoch}) "
                                     f"than the one known by the group coordinator ({m.member_epoch}). "
                                     f"The member must abandon all its partitions and rejoin.")

    # ------------------------------------------------------------------ subscriptions and target
    def _member_topics(self, m: ConsumerMember, topics: Mapping[str, int]) -> set[str]:
        subs = {t for t in m.subscribed_topic_names if t in topics}
        if m.subscribed_topic_regex:
            pat = self._compile(m.subscribed_topic_regex)
            subs.update(t for t in topics if pat.fullmatch(t))
        return subs

    def _subscribed_metadata(self, group: ConsumerGroup, topics: Mapping[str, int],
                             changed: bool = True) -> dict[str, int]:
        """The subscribed topics' partition counts. `changed`: a member's subscription may differ
        from the group's last look at them without a group epoch bump yet (a joining member, a new
        subscription in this request); else the union of subscriptions kept on the group for its
        epoch and member count stands (a subscription changes only with an epoch bump, a member
        leaves only with one), so a steady heartbeat costs O(subscribed topics), not O(members)."""
        cached = group.subscriptions
        key = (group.group_epoch, len(group.members))
        if changed or cached is None or cached[:2] != key:
            # one pass in C over the members' names, the (few distinct) regexes matched once each
            members = group.members.values()
            cached = group.subscriptions = (
                *key, frozenset().union(*[m.subscribed_topic_names for m in members]),
                frozenset(m.subscribed_topic_regex for m in members if m.subscribed_topic_regex))
        names, regexes = cached[2], cached[3]
        subs = {t for t in names if t in topics}
        for regex in regexes:
            pat = self._compile(regex)
            subs.update(t for t in topics if pat.fullmatch(t))
        return {t: topics[t] for t in sorted(subs)}

    def assignor_name(self, group: ConsumerGroup) -> str:
        """The server assignor `group` uses: the one most of its members ask for (ties by name), else
        the first of group.consumer.assignors."""
        votes: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if votes:
            return max(sorted(votes), key=lambda n: votes[n])
        return self.config.assignors[0]

    def _compute_target(self, group: ConsumerGroup) -> None:
        topics = group.subscribed_metadata
        specs = {}
        # members mostly share a subscription: each distinct one is resolved against the topics
        # once, and members with the same one share its frozenset
        resolved: dict[tuple, frozenset[str]] = {}
        empty: dict = {}
        target = group.target
        for mid, m in group.members.items():
            key = (m.subscribed_topic_names, m.subscribed_topic_regex)
            subs = resolved.get(key)
            if subs is None:
                subs = resolved[key] = frozenset(self._member_topics(m, topics))
            specs[mid] = MemberSpec(subs, m.instance_id, target.get(mid, empty))
        assign = server_assignor(self.assignor_name(group))
        result = assign(specs, topics)
        group.target = {mid: _frozen_target(result.get(mid, empty)) for mid in group.members}
        group.assignment_epoch = group.group_epoch

    # ------------------------------------------------------------------ reconciliation
    def _reconcile(self, group: ConsumerGroup, m: ConsumerMember, owned: Assignment | None) -> None:
        target_epoch = group.assignment_epoch
        if m.state == MemberState.UNREVOKED_PARTITIONS:
            still = owned is None or bool(_flat(owned) & _flat(m.pending_revocation))
            if still:
                return
            self._next(group, m, owned)
        elif m.state == MemberState.UNRELEASED_PARTITIONS:
            self._next(group, m, owned)
        elif m.member_epoch != target_epoch or m.state != MemberState.STABLE:
            self._next(group, m, owned)

    def _next(self, group: ConsumerGroup, m: ConsumerMember, owned: Assignment | None) -> None:
        target = group.target.get(m.member_id, {})
        cur, tgt = _flat(m.assigned), _flat(target)
        keep = cur & tgt
        revoke = cur - keep
        want = tgt - keep
        withheld = _held_by_others(group, m, want)
        add = want - withheld
        old_epoch = m.member_epoch
        held_before = cur | _flat(m.pending_revocation)
        if revoke and (owned is None or _flat(owned) & revoke):
            m.state = MemberState.UNREVOKED_PARTITIONS
            m.assigned, m.pending_revocation = _unflat(keep), _unflat(revoke)
            held_after = keep | revoke
            new_epoch = old_epoch
        else:
            m.assigned, m.pending_revocation = _unflat(keep | add), {}
            held_after = keep | add
            m.state = MemberState.UNRELEASED_PARTITIONS if withheld else MemberState.STABLE
            new_epoch = group.assignment_epoch
        idx = group.holders
        if idx is not None and held_after != held_before:
            mid = m.member_id
            for tp in held_before - held_after:
                h = idx.get(tp)
                if h is None or mid not in h:       # never expected: rebuilt on next use
                    group.holders_changed()
                    break
                h.discard(mid)
                if not h:
                    del idx[tp]
            else:
                for tp in held_after - held_before:
                    idx.setdefault(tp, set()).add(mid)
        if new_epoch != old_epoch:
            m.previous_member_epoch, m.member_epoch = old_epoch, new_epoch

    # ------------------------------------------------------------------ leaving and fencing
    def _leave(self, p: ConsumerHeartbeatParams, now: int, out: Outcome) -> ConsumerHeartbeatResult:
        group = self.groups.get(p.group_id)
        if group is None:
            raise HeartbeatError(C.GROUP_ID_NOT_FOUND, f"Group {p.group_id} not found.")
        if p.instance_id is not None:
            m = self._static_member_of(group, p, group.static_member(p.instance_id))
        else:
            m = group.members.get(p.member_id)
            if m is None:
                raise HeartbeatError(C.UNKNOWN_MEMBER_ID,
                                     f"Member {p.member_id} is not a member of group {group.group_id}.")
        if p.member_epoch == STATIC_LEAVE_EPOCH:
            # temporary leave: keep the member and its partitions until its session expires
            m.previous_member_epoch, m.member_epoch = m.member_epoch, STATIC_LEAVE_EPOCH
            m.pending_revocation = {}
            group.holders_changed()
            m.state = MemberState.STABLE
            self._disarm(out, rebalance_key(group.group_id, m.member_id))
            self._arm(out, session_key(group.group_id, m.member_id), now + self.config.session_timeout_ms)
        elif not self._maybe_downgrade(group, m, now, out):
            self._remove(group, m, out)
        return ConsumerHeartbeatResult(C.NONE, None, m.member_id, p.member_epoch,
                                       self.config.heartbeat_interval_ms)

    def _remove(self, group: ConsumerGroup, m: ConsumerMember, out: Outcome) -> None:
        del group.members[m.member_id]
        group.holders_changed()
        group.target.pop(m.member_id, None)
        group.group_epoch += 1
        self._cancel_member_timers(out, group.group_id, m.member_id)

    def _cancel_member_timers(self, out: Outcome, group_id: str, member_id: str) -> None:
        for kind in ("cg-session", "cg-rebalance", "cg-join", "cg-sync"):
            self._disarm(out, (kind, group_id, member_id))

    def fire_timer(self, key: tuple, now_ms: int) -> Outcome:
        out = Outcome()
        armed = self._take_due(key, now_ms)
        if armed is None:
            return out
        kind, gid, mid = key
        group = self.groups.get(gid)
        m = group.members.get(mid) if group is not None else None
        if m is None:
            return out
        before = snapshot(group)
        if kind in ("cg-session", "cg-join", "cg-sync") or (
                kind == "cg-rebalance" and m.state == MemberState.UNREVOKED_PARTITIONS
                and m.member_epoch == armed[1]):
            if not self._maybe_downgrade(group, m, now_ms, out):
                self._remove(group, m, out)
        self._persist(out, gid, before)
        return out

    # ------------------------------------------------------------------ offsets and admin
    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int,
                               api_version: int) -> int | None:
        """None if `group_id` is not a consumer group, else the group's error code for a commit with
        this member id/epoch (ConsumerGroup.validate_offset_commit)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return group.validate_offset_commit(member_id, None, member_epoch, False, api_version)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int | None:
        group = self.groups.get(group_id)
        return None if group is None else group.validate_offset_fetch(member_id, member_epoch)

    def delete_group(self, group_id: str, now_ms: int, reply_to: Any = None) -> Outcome:
        """DeleteGroups for one consumer group (also an Empty group whose offsets all expired); the
        result (answered once the 6 and 3 tombstones are stored) is None if it is not a consumer
        group, NON_EMPTY_GROUP if members remain, else NONE. Its offsets are the offsets' to delete."""
        out = Outcome()
        group = self.groups.get(group_id)
        if group is None or group.members:
            out.responses.append(Response(reply_to, None if group is None else C.NON_EMPTY_GROUP))
            return out
        before = snapshot(group)
        del self.groups[group_id]
        self._persist(out, group_id, before, reply_to, C.NONE)
        return out
