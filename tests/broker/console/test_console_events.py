"""The console's group event history (kohort.broker.group_events) fed by the real pure coordinators
(classic and KIP-848) on a fake clock, exactly as the runtime feeds it: one `observe` after each
operation, timer and stored append. Joins, leaves, expiries and rebalances carry Kafka's reason
strings; KIP-848 epoch bumps name their cause; the history is bounded."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

from kohort.broker.coordinator import ClassicGroupCoordinator, LeaveMember
from kohort.broker.coordinator.registry import GroupRegistry
from kohort.broker.coordinator.consumer_group import (
    ConsumerGroupConfig, ConsumerGroups, ConsumerHeartbeatParams,
)
from kohort.broker.group_events import GroupEvents

from tests.helpers.coordinator_harness import Harness


class _Observed:
    """The classic coordinator as the runtime drives it: each entry point's Outcome observed."""
    OPS = {"join_group", "sync_group", "leave_group", "heartbeat", "offset_commit", "delete_groups"}

    def __init__(self, c, events, rt):
        self._c, self._events, self._rt = c, events, rt

    def __getattr__(self, name):
        f = getattr(self._c, name)
        if name not in self.OPS | {"fire_timer", "on_append_done"}:
            return f

        def call(*a, **kw):
            out = f(*a, **kw)
            if name == "fire_timer":
                self._events.observe(self._rt, "timer", (a[0],), out)
            elif name == "on_append_done":
                self._events.observe(self._rt, "stored", (a[0],), out)
            else:
                self._events.observe(self._rt, name, a[:-2], out)      # without now_ms, reply_to
            return out
        return call


def classic_harness(**kw):
    h = Harness(**kw)
    rt = SimpleNamespace(groups=GroupRegistry(h.c), clock=lambda: h.now)
    ev = GroupEvents()
    h.c = _Observed(h.c, ev, rt)
    return h, ev


def kinds(ev, group="g"):
    return [e.kind for e in ev.history(group)]


def two_stable_members(h):
    ra, a = h.join_single("g", client_id="a", reason="initial join")
    rb, b = h.join_single("g", client_id="b")
    h.advance(200)
    h.sync("g", 1, b)
    h.sync("g", 1, a, [(a, b"A"), (b, b"B")])
    return a, b


def test_classic_join_sync_leave_with_kafkas_reasons():
    h, ev = classic_harness()
    a, b = two_stable_members(h)
    hist = ev.history("g")
    assert kinds(ev)[:3] == ["GroupCreated", "MemberJoined", "RebalanceStarted"]
    joined = [e for e in hist if e.kind == "MemberJoined"]
    assert [e.member_id for e in joined] == [a, b]
    assert joined[0].reason == f"Adding new member {a} with group instance id null; client reason: initial join"
    assert joined[1].reason.endswith("client reason: not provided")
    started = [e for e in hist if e.kind == "RebalanceStarted"][0]
    assert started.reason == (f"Preparing to rebalance group g in state PreparingRebalance with old generation 0 "
                              f"(reason: {joined[0].reason})")
    gen = [e for e in hist if e.kind == "GenerationStarted"]
    assert len(gen) == 1 and gen[0].generation == 1 and "2 member(s)" in gen[0].reason
    assert hist[-1].kind == "StateChanged" and hist[-1].reason == "CompletingRebalance -> Stable"
    assert hist[-1].state == "Stable"

    n = len(hist)
    h.leave("g", LeaveMember(b, reason="the consumer is being closed"))
    new = ev.history("g")[n:]
    assert [e.kind for e in new] == ["MemberLeft", "RebalanceStarted"]
    assert new[0].member_id == b
    assert new[0].reason == (f"Member {b} has left group through explicit `LeaveGroup` request; client reason: "
                             f"the consumer is being closed")
    assert new[1].reason.endswith(f"(reason: explicit `LeaveGroup` request for ({b}) members.)")
    assert new[1].generation == 1 and new[1].state == "PreparingRebalance"


def test_classic_heartbeat_expiry_and_leader_rejoin():
    h, ev = classic_harness()
    a, b = two_stable_members(h)
    n = len(ev.history("g"))
    h.advance(10_001)                         # both sessions (10 s) end: a is removed first, then b
    new = ev.history("g")[n:]
    expired = [e for e in new if e.kind == "MemberExpired"]
    assert {e.member_id for e in expired} == {a, b}
    assert all(e.reason == f"removing member {e.member_id} on heartbeat expiration." for e in expired)
    assert any(e.kind == "RebalanceStarted" and "on heartbeat expiration" in e.reason for e in new)
    assert ev.history("g")[-1].state == "Empty"

    h2, ev2 = classic_harness()
    a, b = two_stable_members(h2)
    n = len(ev2.history("g"))
    h2.join("g", member_id=a, client_id="a", reason="cached metadata has changed since the assignment",
            protocols=(("range", b"other"),))
    new = ev2.history("g")[n:]
    assert [e.kind for e in new] == ["RebalanceStarted"]
    assert new[0].reason.endswith(f"(reason: Leader {a} re-joining group during Stable; client reason: "
                                  f"cached metadata has changed since the assignment)")


def test_classic_group_deleted_and_offsets_only_group():
    h, ev = classic_harness()
    r = h.commit("simple", {("t", 0): 5})
    assert h.commit_errors(r) == {("t", 0): 0}
    assert kinds(ev, "simple") == ["GroupCreated"]
    assert ev.history("simple")[0].reason == "classic group created by OffsetCommit"
    r = h.reply()
    h.apply(h.c.delete_groups(["simple"], h.now, r))
    assert kinds(ev, "simple") == ["GroupCreated", "GroupDeleted"]
    assert ev.history("simple")[-1].reason == "deleted by DeleteGroups"


def test_consumer_group_join_leave_fence_and_epoch_bumps():
    cfg = ConsumerGroupConfig(session_timeout_ms=6000, heartbeat_interval_ms=1000)
    ids = (f"m{i}" for i in itertools.count())
    c = ConsumerGroups(cfg, id_factory=lambda: next(ids))
    now = [0]
    rt = SimpleNamespace(groups=GroupRegistry(ClassicGroupCoordinator(), c), clock=lambda: now[0])
    ev = GroupEvents()
    topics = {"t": 4}

    def hb(mid, epoch, **kw):
        p = ConsumerHeartbeatParams("g", mid, epoch, **kw)
        out = c.heartbeat(p, topics, now[0], "r")
        ev.observe(rt, "heartbeat", (p, topics), out, consumer=True)
        for a in out.appends:
            o2 = c.on_append_done(a.token, 0, now[0])
            ev.observe(rt, "stored", (a.token,), o2, consumer=True)
        return out

    hb("A", 0, subscribed_topic_names=("t",), owned={}, rebalance_timeout_ms=10000, client_id="ca")
    hist = ev.history("g")
    assert [e.kind for e in hist][:3] == ["GroupCreated", "MemberJoined", "GroupEpochBumped"]
    assert hist[1].reason == "Member A joined the consumer group (client id ca, subscribed to t)"
    assert hist[2].reason == f"group epoch 0 -> 1: {hist[1].reason}"
    assert "TargetAssignmentComputed" in kinds(ev)

    hb("B", 0, subscribed_topic_names=("t",), owned={}, rebalance_timeout_ms=10000, client_id="cb")
    n = len(ev.history("g"))
    hb("B", -1)                                        # B leaves
    new = ev.history("g")[n:]
    assert new[0].kind == "MemberLeft" and new[0].reason == "Member B left the consumer group"
    assert any(e.kind == "GroupEpochBumped" and "Member B left" in e.reason for e in new)

    n = len(ev.history("g"))
    now[0] += 6001                                     # A's session ends
    for key, deadline in sorted(c.timer_deadlines().items(), key=lambda kv: kv[1]):
        if deadline <= now[0]:
            out = c.fire_timer(key, now[0])
            ev.observe(rt, "timer", (key,), out, consumer=True)
    new = ev.history("g")[n:]
    assert new[0].kind == "MemberExpired" and new[0].member_id == "A"
    assert new[0].reason == "Member A fenced from the group because the member session expired"
    assert ev.history("g")[-1].state == "Empty"


def test_history_is_bounded_and_a_failing_subscriber_changes_nothing():
    h = Harness()
    rt = SimpleNamespace(groups=GroupRegistry(h.c), clock=lambda: h.now)
    ev = GroupEvents(per_group=4, max_groups=2)
    seen = []
    ev.subscribe(lambda e: (_ for _ in ()).throw(RuntimeError("reader bug")))
    ev.subscribe(seen.append)
    h.c = _Observed(h.c, ev, rt)
    two_stable_members(h)
    assert len(ev.history("g")) == 4 and len(seen) > 4
    assert ev.history("g") == seen[-4:]
    for g in ("x", "y"):
        h.commit(g, {("t", 0): 1})
    assert ev.groups() == ["x", "y"]                   # "g", changed least recently, dropped


def test_the_steady_heartbeat_shortcut_agrees_with_a_full_snapshot():
    """group_events._unchanged skips the snapshot of a Stable KIP-848 group whose epochs and members
    stay; on every step of joins, reconciliation, steady heartbeats and a leave, the shortcut must
    never call a group unchanged whose snapshot changed."""
    from kohort.broker.group_events import _unchanged, snapshot
    cfg = ConsumerGroupConfig(session_timeout_ms=6000, heartbeat_interval_ms=1000)
    ids = (f"m{i}" for i in itertools.count())
    c = ConsumerGroups(cfg, id_factory=lambda: next(ids))
    now = [0]
    rt = SimpleNamespace(groups=GroupRegistry(ClassicGroupCoordinator(), c), clock=lambda: now[0])
    topics = {"t": 6}
    epochs: dict[str, int] = {}
    owned: dict[str, dict] = {}
    checked = stable_skips = 0

    def hb(mid, **kw):
        nonlocal checked, stable_skips
        before = snapshot(rt, "g")
        p = ConsumerHeartbeatParams("g", mid, epochs.get(mid, 0), owned=owned.get(mid, {}), client_id="c" + mid,
                                    **kw)
        out = c.heartbeat(p, topics, now[0], "r")
        answers = list(out.responses)
        for a in out.appends:
            answers += c.on_append_done(a.token, 0, now[0]).responses
        resp = answers[0].result if answers else None
        if resp is not None and resp.error_code == 0 and resp.member_epoch >= 0:
            epochs[mid] = resp.member_epoch
            if resp.assignment is not None:
                owned[mid] = dict(resp.assignment)
        if before is not None:
            checked += 1
            if _unchanged(rt, "g", before):
                assert snapshot(rt, "g") == before
                stable_skips += before.state == "Stable"

    for m in ("A", "B", "C"):
        hb(m, subscribed_topic_names=("t",), rebalance_timeout_ms=10000)
        now[0] += 10
    for _ in range(8):                                 # reconcile, then steady heartbeats
        for m in ("A", "B", "C"):
            hb(m)
            now[0] += 100
    epochs["C"] = -1
    hb("C")                                            # C leaves; A and B reconcile again
    for _ in range(6):
        for m in ("A", "B"):
            hb(m)
            now[0] += 100
    assert checked > 30 and stable_skips > 5
