"""Group event history: per group, a bounded list of what happened to it -- members joining,
leaving, expiring or being fenced, rebalances with Kafka's reason strings, classic generations, KIP-848
and KIP-932 (share) group-epoch bumps and target assignments, a share member's new assignment, state
changes, creation, conversion and deletion.

Read-only towards the coordinators: the runtime (broker/coordinator_runtime.py) calls
`events.observe(rt, op, args, out)` once after each step it drives (an operation, a timer, a stored
append); `observe` snapshots the groups that step touched and derives events from the difference with
the previous snapshot and from the step's cause (the request's params, the timer's key). The
coordinators stay pure and unaware of it. The runtime always keeps one (the broker's log and metrics read
it, the console shows it); a steady KIP-848 heartbeat is recognised without a snapshot. `NO_EVENTS`
observes nothing (for a runtime built without events, e.g. in tests).

Reason strings follow Kafka 4.x's GroupMetadataManager where it has one ("Adding new member M with group
instance id I; client reason: R" (I "null" for none, as Java prints it), "explicit `LeaveGroup` request
for (M) members." (a rebalance's reason; the member's own: "Member M has left group through explicit
`LeaveGroup` request; client reason: R"), "removing member M on heartbeat expiration.", "Updating
metadata for member M during S; client reason: R", "Leader M re-joining group during Stable; client
reason: R") and its KIP-848 messages ("Member M fenced from the group because the member session
expired", ...) and its share-group messages ("Member M joins the share group using the share protocol",
"Member M left the share group", "Member M fenced from the group because the member session expired",
"Member M new assignment state: epoch=E, ..."); the classic ones are checked against Apache Kafka
4.3.1's own log.

Bounds: `per_group` events per group (oldest dropped), `max_groups` histories (the least recently
changed dropped). `subscribe(fn)` lets other readers receive each event as it is made: the runtime
subscribes `log_event` (one line per event on `kohort.broker.groups`, in Kafka 4.x's words where Kafka
has a line); `rebalances` counts RebalanceStarted and GroupEpochBumped per group for the metrics.
"""
from __future__ import annotations

import collections
import logging
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, NamedTuple

from kohort.broker.coordinator.consumer_group import ConsumerGroupState
from kohort.broker.coordinator.group import GroupState

log = logging.getLogger("kohort.broker.coordinator")

_STABLE = ConsumerGroupState.STABLE.value
DEFAULT_PER_GROUP = 200
DEFAULT_MAX_GROUPS = 1000

# classic operations whose params carry the group (args[0].group_id); reads are not observed
_CLASSIC_PARAM_OPS = frozenset({"join_group", "sync_group", "leave_group", "heartbeat", "offset_commit",
                                "offset_delete"})
_CONSUMER_PARAM_OPS = frozenset({"heartbeat", "classic_join", "classic_sync", "classic_leave",
                                 "classic_heartbeat"})
# share-group operations whose first argument is the group id (the heartbeat's is its request)
_SHARE_GROUP_ID_OPS = frozenset({"share_delete_group", "share_alter_offsets", "share_delete_offsets"})
_DELETE_OPS = frozenset({"delete_groups", "delete_group", "share_delete_group"})


@dataclass(frozen=True)
class GroupEvent:
    ts_ms: int
    group: str
    kind: str               # GroupCreated, MemberJoined, MemberLeft, MemberExpired, MemberFenced,
                            # MemberReplaced, RebalanceStarted, GenerationStarted, GroupEpochBumped,
                            # TargetAssignmentComputed, MemberAssignmentChanged (share), StateChanged,
                            # GroupConverted, GroupDeleted
    reason: str
    member_id: str | None = None
    generation: int = -1    # classic generation, or KIP-848 / share group epoch, after the event
    state: str = ""         # the group's state after the event
    type: str = ""          # "classic" | "consumer" | "share"
    members: int = -1       # members after the event

    def as_dict(self) -> dict:
        return asdict(self)


class _Member(NamedTuple):
    """One member as the events see it (a tuple: a snapshot makes one per member, cheaply)."""
    client_id: str
    client_host: str
    instance_id: str | None
    subscription: Any = None      # KIP-848: (topic names, regex)


@dataclass(frozen=True)
class _Snap:
    type: str                     # "classic" | "consumer" | "share"
    state: str
    generation: int               # classic generation / consumer or share group epoch
    assignment_epoch: int
    leader: str | None
    protocol: str | None
    members: dict
    assignments: dict | None = None   # share: member id -> (member epoch, previous epoch, assignment text)


def snapshot(rt, group_id: str, old: _Snap | None = None) -> _Snap | None:
    """What the events are derived from: the group as the runtime serves it now (a KIP-848 group
    first; the classic coordinator's simple group holding its offsets is not a group of its own).
    `old`, the group's previous snapshot: a classic member keeps its entry (its client id, host and
    instance id never change under one member id), so a join storm's snapshots copy the previous
    members and make entries only for the ids that came (O(members) in C per step, not a tuple per
    member in Python)."""
    sg = rt.groups.share_group(group_id)
    if sg is not None:
        names = _topic_names(rt)
        members = {mid: _Member(m.client_id, m.client_host, None, (tuple(m.subscribed_topic_names), None))
                   for mid, m in sg.members.items()}
        assignments = {mid: (m.member_epoch, m.previous_member_epoch, _assignment_text(m.assigned, names))
                       for mid, m in sg.members.items()}
        return _Snap("share", sg.state, sg.group_epoch, sg.assignment_epoch, None, None, members, assignments)
    cg = rt.groups.consumer_group(group_id)
    if cg is not None:
        members = {mid: _Member(m.client_id, m.client_host, m.instance_id,
                                (tuple(m.subscribed_topic_names), m.subscribed_topic_regex))
                   for mid, m in cg.members.items()}
        return _Snap("consumer", cg.state.value, cg.group_epoch, cg.assignment_epoch, None, None, members)
    g = rt.groups.classic_group(group_id)
    if g is None or g.is_(GroupState.DEAD):
        return None
    gm = g.members
    if old is not None and old.type == "classic":
        members = dict(old.members)
        if members.keys() != gm.keys():
            for mid in members.keys() - gm.keys():
                del members[mid]
            for mid in gm.keys() - members.keys():
                m = gm[mid]
                members[mid] = _Member(m.client_id, m.client_host, m.group_instance_id)
            if list(members) != list(gm):          # the group's member order (the leader's list)
                members = {mid: members[mid] for mid in gm}
    else:
        members = {mid: _Member(m.client_id, m.client_host, m.group_instance_id) for mid, m in gm.items()}
    return _Snap("classic", g.state.value, g.generation_id, g.generation_id, g.leader_id, g.protocol_name,
                 members)


def _topic_names(rt) -> dict:
    storage = getattr(getattr(rt, "broker", None), "storage", None)
    return {t.topic_id: t.name for t in storage.topics()} if storage is not None else {}


def _assignment_text(assigned: dict, names: dict) -> str:
    """A share member's assignment as Kafka's log prints one: topic-partition list by topic name."""
    parts = [f"{names.get(tid, tid)}-{p}" for tid, ps in assigned.items() for p in sorted(ps)]
    return ", ".join(sorted(parts))


def _unchanged(rt, group_id: str, old: _Snap) -> bool:
    """A cheap check that the group is as `old` saw it, without building a snapshot: steady heartbeats
    (the most frequent steps) change nothing events are made of. A member's metadata changes only with a
    join (a new id, or a rebalance: a new state and generation) or, KIP-848, an epoch bump
    (subscription), so ids, epochs or generation, state and leader suffice. A KIP-848 group that was
    Stable stays Stable while its epochs and members stay (a member leaves its target epoch only for a
    new target, which bumps the assignment epoch), so its state -- a walk over every member -- is not
    recomputed for each of its steady heartbeats (O(members) per heartbeat made a 500-member group's
    heartbeats cost O(members^2) per interval). A share member's assignment changes only with its member
    epoch, so a share group is unchanged while its epochs, members and member epochs are."""
    if old.type == "share":
        sg = rt.groups.share_group(group_id)
        return (sg is not None and sg.group_epoch == old.generation and sg.assignment_epoch == old.assignment_epoch
                and sg.members.keys() == old.members.keys()
                and all(m.member_epoch == old.assignments[mid][0] for mid, m in sg.members.items()))
    if old.type == "consumer":
        cg = rt.groups.consumer_group(group_id)
        return (cg is not None and cg.group_epoch == old.generation and cg.assignment_epoch == old.assignment_epoch
                and cg.members.keys() == old.members.keys()
                and (old.state == _STABLE or cg.state.value == old.state))
    if rt.groups.consumer_group(group_id) is not None:
        return False                       # converted to a consumer group
    g = rt.groups.classic_group(group_id)
    return (g is not None and g.generation_id == old.generation and g.state.value == old.state
            and g.leader_id == old.leader and g.protocol_name == old.protocol and g.members.keys() == old.members.keys())


def _all_group_ids(rt) -> set[str]:
    return rt.groups.group_ids(include_dead=True)


class _NoEvents:
    """The runtime's default: observes nothing."""

    def observe(self, rt, op: str, args: tuple, out: Any, consumer: bool = False) -> None:
        return None


NO_EVENTS = _NoEvents()


class GroupEvents:
    def __init__(self, per_group: int = DEFAULT_PER_GROUP, max_groups: int = DEFAULT_MAX_GROUPS,
                 clock: Callable[[], int] | None = None) -> None:
        self.per_group = per_group
        self.max_groups = max_groups
        self._clock = clock
        self._last: dict[str, _Snap] = {}
        self._history: collections.OrderedDict[str, collections.deque] = collections.OrderedDict()
        self._tokens: dict[Any, set[str]] = {}     # append token -> groups its records belong to
        self._subscribers: list[Callable[[GroupEvent], None]] = []
        self.rebalances: dict[str, int] = {}      # per group: RebalanceStarted + GroupEpochBumped (metrics)

    # -- reading ---------------------------------------------------------------------------------
    def history(self, group_id: str) -> list[GroupEvent]:
        return list(self._history.get(group_id, ()))

    def groups(self) -> list[str]:
        return list(self._history)

    def subscribe(self, fn: Callable[[GroupEvent], None]) -> None:
        self._subscribers.append(fn)

    # -- feeding ---------------------------------------------------------------------------------
    def baseline(self, rt) -> None:
        """Take the current groups as known (no events): called when the recorder is attached."""
        for gid in _all_group_ids(rt):
            s = snapshot(rt, gid)
            if s is not None:
                self._last[gid] = s

    def observe(self, rt, op: str, args: tuple, out: Any, consumer: bool = False) -> None:
        """After the runtime applied the Outcome `out` of step `op` (a coordinator operation with its
        args; "timer" with (key,); "stored" with (token,)); `consumer` for the KIP-848 coordinator's
        operations. Never raises: a bug here is logged, the coordinator's step stands."""
        try:
            self._observe(rt, op, args, out, consumer)
        except Exception:   # noqa: BLE001
            log.exception("group events: observing %s failed", op)

    def _observe(self, rt, op: str, args: tuple, out: Any, consumer: bool) -> None:
        if out is not None:
            for a in getattr(out, "appends", ()):
                self._tokens[a.token] = {r.group for r in a.records if hasattr(r, "group")}   # not markers
        gids = self._touched(rt, op, args, consumer)
        if not gids:
            return
        now = rt.clock() if self._clock is None else self._clock()
        for gid in sorted(gids):
            old = self._last.get(gid)
            if old is not None and _unchanged(rt, gid, old):
                continue
            new = snapshot(rt, gid, old)
            if new is None:
                self._last.pop(gid, None)
            else:
                self._last[gid] = new
            if old == new:
                continue
            for ev in derive(gid, old, new, op, args, consumer, now):
                self._add(ev)

    def _touched(self, rt, op: str, args: tuple, consumer: bool) -> set[str]:
        if op == "stored":
            return self._tokens.pop(args[0], set())
        if op == "share_heartbeat":
            return {args[0].group_id}
        if op in _SHARE_GROUP_ID_OPS:
            return {args[0]}
        if op == "timer":
            key = args[0]
            if len(key) > 1 and isinstance(key[1], str):
                return {key[1]}
            return _all_group_ids(rt) | set(self._last)      # offsets expiration: any group
        if consumer:
            if op in _CONSUMER_PARAM_OPS:
                return {args[0].group_id}
            if op == "delete_group":
                return {args[0]}
            return set()
        if op in _CLASSIC_PARAM_OPS:
            return {args[0].group_id}
        if op == "delete_groups":
            return set(args[0])
        return set()

    def _add(self, ev: GroupEvent) -> None:
        h = self._history.get(ev.group)
        if h is None:
            h = self._history[ev.group] = collections.deque(maxlen=self.per_group)
            while len(self._history) > self.max_groups:
                self._history.popitem(last=False)
        else:
            self._history.move_to_end(ev.group)
        h.append(ev)
        if ev.kind in ("RebalanceStarted", "GroupEpochBumped"):
            self.rebalances[ev.group] = self.rebalances.get(ev.group, 0) + 1
        for fn in self._subscribers:
            try:
                fn(ev)
            except Exception:   # noqa: BLE001 - a reader's bug must not break the coordinator's step
                pass


# -- deriving events ---------------------------------------------------------------------------------
def _reason_or_default(reason: str | None) -> str:
    return reason if reason else "not provided"


def _leave_reason(args: tuple, member_id: str) -> str | None:
    p = args[0] if args else None
    for lm in getattr(p, "members", ()):
        if lm.member_id == member_id:
            return _reason_or_default(lm.reason)
    return None


def _removed(gid: str, mid: str, old: _Snap, new: _Snap | None, op: str, args: tuple,
             consumer: bool) -> tuple[str, str]:
    """(kind, reason) of member `mid` no longer in the group."""
    if op == "share_heartbeat" and args and args[0].member_id == mid:
        return "MemberLeft", f"Member {mid} left the share group"
    if op in ("leave_group", "classic_leave"):
        r = _leave_reason(args, mid)
        if r is not None:
            return "MemberLeft", f"Member {mid} has left group through explicit `LeaveGroup` request; client reason: {r}"
    if op == "timer":
        kind = args[0][0]
        if kind == "heartbeat":
            return "MemberExpired", f"removing member {mid} on heartbeat expiration."
        if kind == "join":
            return "MemberExpired", f"removing member {mid}: it did not rejoin before the rebalance timeout"
        if kind == "sync":
            return "MemberExpired", f"removing member {mid} on pending sync request expiration"
        if kind == "share-session":
            return "MemberExpired", f"Member {mid} fenced from the group because the member session expired"
        if kind == "cg-session":
            return "MemberExpired", f"Member {mid} fenced from the group because the member session expired"
        if kind == "cg-rebalance":
            return "MemberFenced", (f"Member {mid} fenced from the group because it did not revoke its "
                                    f"partitions within the rebalance timeout")
        if kind in ("cg-join", "cg-sync"):
            return "MemberExpired", (f"Member {mid} (classic protocol) fenced from the group: its "
                                     f"{'JoinGroup' if kind == 'cg-join' else 'SyncGroup'} did not arrive in time")
    old_m = old.members[mid]
    if old_m.instance_id is not None and new is not None:
        for nid, m in new.members.items():
            if m.instance_id == old_m.instance_id and nid not in old.members:
                return "MemberReplaced", (f"Static member with group instance id {old_m.instance_id} "
                                          f"rejoined as {nid}; member {mid} replaced")
    if consumer and op == "heartbeat" and args and args[0].member_id == mid:
        return "MemberLeft", f"Member {mid} left the consumer group"
    if op in _DELETE_OPS:
        return "MemberLeft", f"member {mid} removed: group deleted"
    return "MemberLeft", f"member {mid} removed by {op}"


def _added(mid: str, m: _Member, op: str, args: tuple, consumer: bool) -> str:
    if op in ("join_group", "classic_join"):
        p = args[0]
        inst = m.instance_id if m.instance_id is not None else "null"      # Java's string of null
        return (f"Adding new member {mid} with group instance id {inst}; client reason: "
                f"{_reason_or_default(getattr(p, 'reason', None))}")
    if consumer and op == "heartbeat":
        names, regex = m.subscription or ((), None)
        sub = f"regex {regex!r}" if regex else ", ".join(names) or "nothing"
        inst = f" with instance id {m.instance_id}" if m.instance_id else ""
        return f"Member {mid} joined the consumer group{inst} (client id {m.client_id}, subscribed to {sub})"
    if op == "share_heartbeat":
        names, _ = m.subscription or ((), None)
        return (f"Member {mid} joins the share group using the share protocol (client id {m.client_id}, "
                f"subscribed to {', '.join(names) or 'nothing'})")
    return f"member {mid} added by {op}"


def derive(gid: str, old: _Snap | None, new: _Snap | None, op: str, args: tuple, consumer: bool,
           now: int) -> list[GroupEvent]:
    """The events that take group `gid` from snapshot `old` to `new` in step `op`."""
    evs: list[GroupEvent] = []

    def ev(kind: str, reason: str, member: str | None = None) -> None:
        s = new or old
        evs.append(GroupEvent(now, gid, kind, reason, member, s.generation, s.state if new else "Dead", s.type,
                              len(s.members) if new else 0))

    if new is None:
        if op in _DELETE_OPS:
            why = "deleted by DeleteGroups"
        elif op == "timer" and args[0] and args[0][0] == "offsets-expiration":
            why = "empty group removed: its last committed offsets expired (offsets.retention.minutes)"
        else:
            why = f"removed by {op}"
        for mid in old.members:
            kind, reason = _removed(gid, mid, old, None, op, args, consumer)
            ev(kind, reason, mid)
        ev("GroupDeleted", why)
        return evs
    if old is None:
        ev("GroupCreated", f"{new.type} group created by {_op_name(op, consumer)}")
        old = _Snap(new.type, GroupState.EMPTY.value, 0, 0, None, None, {})
    elif old.type != new.type:
        ev("GroupConverted", "online upgrade to a consumer group: a member joined with the consumer "
                             "protocol (KIP-848)" if new.type == "consumer" else
                             "downgrade to a classic group: no consumer-protocol member left (KIP-848)")
    member_reasons: list[str] = []
    left_by_request: list[str] = []
    for mid in old.members:
        if mid not in new.members:
            kind, reason = _removed(gid, mid, old, new, op, args, consumer)
            ev(kind, reason, mid)
            if "explicit `LeaveGroup` request" in reason:
                left_by_request.append(mid)
            else:
                member_reasons.append(reason)
    for mid, m in new.members.items():
        if mid not in old.members:
            reason = _added(mid, m, op, args, consumer)
            ev("MemberJoined", reason, mid)
            member_reasons.append(reason)
    if new.type == "classic":
        prep = GroupState.PREPARING_REBALANCE.value
        # Kafka 4.x's GroupMetadataManager: leaves give one reason naming every member that left
        if left_by_request:
            member_reasons.insert(0, f"explicit `LeaveGroup` request for ({', '.join(left_by_request)}) members.")
        entered = new.state != old.state and new.state == prep
        # a rebalance gone through PreparingRebalance within this one step (the last member left)
        passed = new.generation > old.generation and prep not in (old.state, new.state)
        if entered or passed:
            reason = member_reasons[0] if member_reasons else _rejoin_reason(old, op, args)
            ev("RebalanceStarted", f"Preparing to rebalance group {gid} in state PreparingRebalance with old "
                                   f"generation {old.generation} (reason: {reason})")
        if new.state != old.state and not entered:
            ev("StateChanged", f"{old.state} -> {new.state}")
        if new.generation != old.generation and new.generation > 0:
            ev("GenerationStarted", f"generation {new.generation} with {len(new.members)} member(s), "
                                    f"protocol {new.protocol}, leader {new.leader}")
    else:
        if new.generation != old.generation:
            reason = "; ".join(member_reasons) or _epoch_reason(old, new, op, args)
            ev("GroupEpochBumped", f"group epoch {old.generation} -> {new.generation}: {reason}")
        if new.assignment_epoch != old.assignment_epoch:
            ev("TargetAssignmentComputed", f"target assignment computed for group epoch {new.assignment_epoch}")
        if new.type == "share":
            before = old.assignments or {}
            for mid, (epoch, prev, text) in (new.assignments or {}).items():
                if mid in before and before[mid] == (epoch, prev, text) or (mid not in before and epoch == 0):
                    continue
                ev("MemberAssignmentChanged", f"Member {mid} new assignment state: epoch={epoch}, previousEpoch="
                                              f"{prev}, assignedPartitions=[{text}]", mid)
        if new.state != old.state:
            ev("StateChanged", f"{old.state} -> {new.state}")
    return evs


def _op_name(op: str, consumer: bool) -> str:
    names = {"join_group": "JoinGroup", "offset_commit": "OffsetCommit", "classic_join": "JoinGroup",
             "share_heartbeat": "ShareGroupHeartbeat", "share_alter_offsets": "AlterShareGroupOffsets",
             "heartbeat": "ConsumerGroupHeartbeat" if consumer else "Heartbeat", "stored": "a stored record"}
    return names.get(op, op)


def _rejoin_reason(old: _Snap, op: str, args: tuple) -> str:
    if op == "join_group":
        p = args[0]
        r = _reason_or_default(getattr(p, "reason", None))
        if old.leader == p.member_id and old.state == GroupState.STABLE.value:
            return f"Leader {p.member_id} re-joining group during Stable; client reason: {r}"
        return f"Updating metadata for member {p.member_id} during {old.state}; client reason: {r}"
    if op == "timer" and args[0][0] == "sync":
        return "pending sync request expired"
    if op == "timer" and args[0][0] == "heartbeat":
        return "a member's heartbeat expired"
    if op == "stored":
        return "a stored change (e.g. a static member's replacement)"
    return f"{op}"


def _epoch_reason(old: _Snap, new: _Snap, op: str, args: tuple) -> str:
    changed = [mid for mid, m in new.members.items()
               if mid in old.members and old.members[mid].subscription != m.subscription]
    if changed:
        return "; ".join(f"Member {mid} updated its subscription" for mid in changed)
    return "the subscribed topics' metadata changed"


def events_as_dicts(events: Iterable[GroupEvent]) -> list[dict]:
    return [e.as_dict() for e in events]


# -- the broker's log ---------------------------------------------------------------------------------
event_log = logging.getLogger("kohort.broker.groups")


def log_message(ev: GroupEvent) -> tuple[int, str]:
    """(level, text) of one event in the words of Kafka 4.x's group coordinator log where it has a line
    for it (checked against Apache Kafka 4.3.1's log by tests/broker/test_broker_logging.py)."""
    g, m = ev.group, ev.member_id
    if ev.kind == "RebalanceStarted":
        return logging.INFO, ev.reason + "."
    if ev.kind == "GenerationStarted":
        if ev.state == GroupState.EMPTY.value:
            return logging.INFO, f"Group {g} with generation {ev.generation} is now empty."
        return logging.INFO, f"Stabilized group {g} generation {ev.generation} with {ev.members} members."
    if ev.kind == "StateChanged":
        return logging.DEBUG, f"[Group {g}] {ev.reason}."
    if ev.type == "share":
        if ev.kind == "MemberJoined":
            return logging.INFO, f"[GroupId {g}] Member {m} joins the share group using the share protocol."
        if ev.kind == "GroupEpochBumped":
            return logging.INFO, f"[GroupId {g}] Bumped group epoch to {ev.generation}."
        return logging.INFO, f"[GroupId {g}] {ev.reason}."
    if ev.type == "consumer":
        if ev.kind == "MemberJoined":
            return logging.INFO, f"[GroupId {g}] Member {m} joins the consumer group using the consumer protocol."
        if ev.kind == "GroupEpochBumped":
            return logging.INFO, f"[GroupId {g}] Bumped group epoch to {ev.generation}."
        if ev.kind == "MemberLeft" and ev.reason == f"Member {m} left the consumer group":
            return logging.INFO, f"[GroupId {g}] Member {m} left the consumer group."
        return logging.INFO, f"[GroupId {g}] {ev.reason}."
    if ev.kind == "MemberExpired" and ev.reason == f"removing member {m} on heartbeat expiration.":
        return logging.INFO, f"Member {m} in group {g} has failed, removing it from the group."
    return logging.INFO, f"[Group {g}] {ev.reason}"


def log_event(ev: GroupEvent) -> None:
    """A subscriber: one log record per event on `kohort.broker.groups`, its fields under `event` (the
    JSON-lines log format prints them: event = the kind, group, member_id, reason, generation, state)."""
    level, msg = log_message(ev)
    if event_log.isEnabledFor(level):
        fields = ev.as_dict()
        fields["event"] = fields.pop("kind")
        event_log.log(level, msg, extra={"event": fields})
