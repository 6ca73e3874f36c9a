"""KIP-848 consumer-protocol group state machine (kohort.broker.coordinator.consumer_group) and the
server assignors (kohort.assignors.uniform / server_range), with a fake clock: every transition and
error, and a hypothesis rule-based machine checking one owner per partition, convergence to the
target, and refusal of fenced epochs."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kohort.assignors.server import MemberSpec
from kohort.assignors import server_range, uniform
from kohort.broker.coordinator import codes as C
from kohort.broker.coordinator.consumer_group import (
    FENCED_MEMBER_EPOCH, INVALID_REGULAR_EXPRESSION, INVALID_REQUEST, UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR, STALE_MEMBER_EPOCH, ConsumerGroupConfig, ConsumerGroups,
    ConsumerGroupState, ConsumerHeartbeatParams, MemberState, rebalance_key, session_key,
)
from kohort.broker.coordinator.consumer_group_model import ConsumerGroupRecord, diff, snapshot
from kohort.broker.coordinator.model import SetTimer

G = "g"
TOPICS = {"t": 6}


class Harness:
    def __init__(self, topics=None, **cfg):
        self.topics = dict(topics or TOPICS)
        ids = (f"gen-{i}" for i in itertools.count())
        self.cfg = ConsumerGroupConfig(**cfg)
        self.c = ConsumerGroups(self.cfg, id_factory=lambda: next(ids))
        self.now = 0
        self.log = []          # every record appended, in order

    def store(self, out):
        """Store every append at once (as the runtime does after the fsync); the held responses."""
        responses = list(out.responses)
        for a in out.appends:
            self.log.extend(a.records)
            responses += self.c.on_append_done(a.token, 0, self.now).responses
        return responses

    def hb(self, member_id, epoch, owned=None, **kw):
        p = ConsumerHeartbeatParams(G, member_id, epoch, owned=owned, **kw)
        before = snapshot(self.c.groups.get(G))
        out = self.c.heartbeat(p, self.topics, self.now, "r")
        # the heartbeat's records (diffed over the members it can touch) must be the diff of the
        # whole group's snapshots
        written = [r for a in out.appends for r in a.records if isinstance(r, ConsumerGroupRecord)]
        assert written == diff(G, before, snapshot(self.c.groups.get(G))), written
        self.last_out = out
        responses = self.store(out)
        assert len(responses) == 1
        return responses[0].result

    def replayed(self):
        """A fresh coordinator rebuilt from the log (last record per key, as compaction keeps)."""
        c = ConsumerGroups(self.cfg)
        last = {}
        for r in self.log:
            last.pop((r.kind, r.group, r.member_id), None)
            last[(r.kind, r.group, r.member_id)] = r
        for r in last.values():
            c.replay(r)
        c.on_loaded(self.now, self.topics)
        return c

    def join(self, member_id, names=("t",), **kw):
        kw.setdefault("rebalance_timeout_ms", 10000)
        return self.hb(member_id, 0, owned={}, subscribed_topic_names=tuple(names), **kw)

    def advance(self, ms):
        self.now += ms
        for key, deadline in sorted(self.c.timer_deadlines().items(), key=lambda kv: kv[1]):
            if deadline <= self.now:
                self.store(self.c.fire_timer(key, self.now))

    @property
    def group(self):
        return self.c.groups[G]


def parts(a):
    return {(t, p) for t, ps in (a or {}).items() for p in ps}


def test_first_member_gets_everything_at_epoch_1():
    h = Harness()
    r = h.join("a")
    assert r.error_code == 0 and r.member_id == "a" and r.member_epoch == 1
    assert parts(r.assignment) == {("t", p) for p in range(6)}
    assert r.heartbeat_interval_ms == 5000
    assert h.group.group_epoch == 1 and h.group.assignment_epoch == 1
    assert h.group.state == ConsumerGroupState.STABLE
    assert SetTimer(session_key(G, "a"), 45000) in h.last_out.timers


def test_v0_join_gets_a_server_generated_member_id():
    h = Harness()
    r = h.join("", api_version=0)
    assert r.error_code == 0 and r.member_id == "gen-0"
    assert h.join("", api_version=1).error_code == INVALID_REQUEST


def test_revoke_before_assign_handover():
    h = Harness()
    a = h.join("a")
    b = h.join("b")
    # b joins at epoch 2 but gets nothing yet: a still owns all six partitions
    assert b.member_epoch == 2 and parts(b.assignment) == set()
    assert h.group.members["b"].state == MemberState.UNRELEASED_PARTITIONS
    assert h.group.state == ConsumerGroupState.RECONCILING
    # a's heartbeat (still owning all) -> told its smaller assignment, epoch unchanged, must revoke
    ra = h.hb("a", 1, owned={"t": frozenset(range(6))})
    assert ra.member_epoch == 1 and len(parts(ra.assignment)) == 3
    assert h.group.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    assert SetTimer(rebalance_key(G, "a"), 10000) in h.last_out.timers
    # b still gets nothing while a has not acknowledged
    assert parts(h.hb("b", 2).assignment) == set()
    # a heartbeat without TopicPartitions does not count as an acknowledgement
    assert h.hb("a", 1).member_epoch == 1
    # a acknowledges: now at epoch 2, stable
    ra2 = h.hb("a", 1, owned=ra.assignment)
    assert ra2.member_epoch == 2 and h.group.members["a"].state == MemberState.STABLE
    rb = h.hb("b", 2)
    assert len(parts(rb.assignment)) == 3 and not parts(rb.assignment) & parts(ra.assignment)
    assert h.group.state == ConsumerGroupState.STABLE


def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    h = Harness()
    h.join("a")
    h.join("b")
    h.hb("a", 1, owned={"t": frozenset(range(6))})
    h.advance(5000)
    h.hb("b", 2)                      # keeps b's session alive
    h.hb("a", 1, owned={"t": frozenset(range(6))})   # still not revoked
    h.advance(5001)                   # rebalance timeout 10 s since a had to revoke
    assert "a" not in h.group.members
    assert h.group.group_epoch == 3
    rb = h.hb("b", 2)
    assert rb.member_epoch == 3 and len(parts(rb.assignment)) == 6
    assert h.hb("a", 1).error_code == C.UNKNOWN_MEMBER_ID


def test_session_timeout_fences_and_frees_partitions():
    h = Harness()
    h.join("a")
    h.join("b")
    h.advance(44999)
    h.hb("b", 2)
    assert "a" in h.group.members
    h.advance(1)
    assert "a" not in h.group.members and h.group.group_epoch == 3
    assert len(parts(h.hb("b", 2).assignment)) == 6


def test_leave_bumps_epoch_and_frees_partitions():
    h = Harness()
    h.join("a")
    h.join("b")
    r = h.hb("a", -1)
    assert r.error_code == 0 and r.member_epoch == -1
    assert h.group.group_epoch == 3
    assert len(parts(h.hb("b", 2).assignment)) == 6
    assert h.hb("a", -1).error_code == C.UNKNOWN_MEMBER_ID


def test_epoch_checks():
    h = Harness()
    h.join("a")
    assert h.hb("a", 2).error_code == FENCED_MEMBER_EPOCH           # newer than known
    h.join("b")
    r = h.hb("a", 1, owned={"t": frozenset(range(6))})
    h.hb("a", 1, owned=r.assignment)                                 # a now at 2, previous 1
    assert h.group.members["a"].member_epoch == 2
    # a lost response: retry at the previous epoch with owned within the assignment is accepted
    ok = h.hb("a", 1, owned=r.assignment)
    assert ok.error_code == 0 and ok.member_epoch == 2
    assert ok.assignment is None                  # what it owns is its assignment: nothing to resend
    # ... but not with TopicPartitions null, nor owning partitions it no longer has
    assert h.hb("a", 1).error_code == FENCED_MEMBER_EPOCH
    assert h.hb("a", 1, owned={"t": frozenset(range(6))}).error_code == FENCED_MEMBER_EPOCH
    assert h.hb("a", 0, owned={}, rebalance_timeout_ms=1,
                subscribed_topic_names=("t",)).error_code == 0     # epoch 0 rejoin of a known id
    assert h.hb("zz", 3).error_code == C.UNKNOWN_MEMBER_ID
    # errors do not remove the member or change epochs
    assert h.group.members["a"].member_epoch == 2


def test_unknown_group_and_validation_errors():
    h = Harness()
    assert h.hb("a", 1).error_code == C.GROUP_ID_NOT_FOUND
    assert G not in h.c.groups
    assert h.hb("a", 0, owned={}, subscribed_topic_names=("t",)).error_code == INVALID_REQUEST   # no timeout
    assert h.hb("a", 0, owned=None, rebalance_timeout_ms=1, subscribed_topic_names=("t",)).error_code == INVALID_REQUEST
    assert h.hb("a", 0, owned={"t": frozenset({1})}, rebalance_timeout_ms=1,
                subscribed_topic_names=("t",)).error_code == INVALID_REQUEST
    assert h.hb("a", 0, owned={"t": frozenset()}, rebalance_timeout_ms=1,        # a topic, no partitions
                subscribed_topic_names=("t",)).error_code == INVALID_REQUEST
    assert h.hb("a", 0, owned={}, rebalance_timeout_ms=1).error_code == INVALID_REQUEST     # no subscription
    assert h.hb("a", -2).error_code == INVALID_REQUEST                                         # -2 w/o instance
    assert h.hb("a", -3).error_code == INVALID_REQUEST
    assert h.hb("", 1).error_code == INVALID_REQUEST
    assert h.join("a", instance_id="").error_code == INVALID_REQUEST
    assert h.join("a", server_assignor="sticky").error_code == UNSUPPORTED_ASSIGNOR
    assert h.hb("a", 0, owned={}, rebalance_timeout_ms=1,
                subscribed_topic_regex="t(").error_code == INVALID_REGULAR_EXPRESSION
    assert G not in h.c.groups


def test_group_max_size():
    h = Harness(max_size=1)
    h.join("a")
    r = h.join("b")
    assert r.error_code == C.GROUP_MAX_SIZE_REACHED and "b" not in h.group.members


def test_static_member_temporary_leave_and_rejoin_gets_same_partitions():
    h = Harness()
    ra = h.join("a", instance_id="i1")
    h.join("b", instance_id="i2")
    ra = h.hb("a", 1, owned=ra.assignment, instance_id="i1")
    h.hb("a", 1, owned=ra.assignment, instance_id="i1")
    rb = h.hb("b", 2, instance_id="i2")
    a_parts = parts(h.group.members["a"].assigned)
    assert len(a_parts) == 3 and h.group.members["a"].member_epoch == 2
    epoch_before = h.group.group_epoch
    r = h.hb("a", -2, instance_id="i1")
    assert r.error_code == 0 and r.member_epoch == -2
    assert h.group.group_epoch == epoch_before                        # no bump on -2
    # a duplicate of a live instance is refused
    assert h.join("c", instance_id="i2").error_code == UNRELEASED_INSTANCE_ID
    # a new process with i1 takes over a's partitions at once, no rebalance
    r2 = h.join("a2", instance_id="i1")
    assert r2.error_code == 0 and parts(r2.assignment) == a_parts
    assert r2.member_epoch == h.group.group_epoch == epoch_before and "a" not in h.group.members
    assert h.hb("b", 2, instance_id="i2", owned=rb.assignment).error_code == 0
    assert parts(h.group.members["b"].assigned) == parts(rb.assignment)
    assert h.group.state == ConsumerGroupState.STABLE
    # the old member id of that instance is fenced
    assert h.hb("a", 2, instance_id="i1").error_code == C.FENCED_INSTANCE_ID
    assert h.hb("x", 2, instance_id="i9").error_code == C.UNKNOWN_MEMBER_ID


def test_static_member_blocks_partitions_until_session_expiry():
    h = Harness()
    h.join("a", instance_id="i1")
    h.hb("a", -2, instance_id="i1")
    rb = h.join("b")
    assert parts(rb.assignment) == set()                               # a still holds t-0..5
    h.advance(44999)
    assert parts(h.hb("b", rb.member_epoch).assignment or {}) == set()
    h.advance(1)
    assert "a" not in h.group.members
    assert len(parts(h.hb("b", h.group.members["b"].member_epoch).assignment)) == 6


def test_subscription_change_and_new_topic_bump():
    h = Harness(topics={"t": 2, "u": 2})
    h.join("a")
    e = h.group.group_epoch
    r = h.hb("a", 1, subscribed_topic_names=("t", "u"))
    assert h.group.group_epoch == e + 1 and len(parts(r.assignment)) == 4
    h.topics["u"] = 4                                                   # partitions added
    r = h.hb("a", r.member_epoch)
    assert len(parts(r.assignment)) == 6 and h.group.group_epoch == e + 2


def test_regex_subscription():
    h = Harness(topics={"orders-1": 2, "orders-2": 1, "other": 3})
    r = h.hb("a", 0, owned={}, rebalance_timeout_ms=1000, subscribed_topic_regex="orders-.*")
    assert parts(r.assignment) == {("orders-1", 0), ("orders-1", 1), ("orders-2", 0)}
    h.topics["orders-3"] = 1
    r = h.hb("a", r.member_epoch)
    assert ("orders-3", 0) in parts(r.assignment)
    r = h.hb("a", r.member_epoch, subscribed_topic_regex="")             # regex removed
    assert parts(r.assignment) == set()


def test_revocation_not_blocked_by_partitions_outside_the_revoke_set():
    h = Harness()
    ra = h.join("a")
    h.join("b")
    ra = h.hb("a", 1, owned={"t": frozenset(range(6))})
    keep = ra.assignment
    r = h.hb("a", 1, owned=keep)                                          # only kept ones reported
    assert r.member_epoch == 2


def test_offset_commit_and_fetch_fencing():
    h = Harness()
    h.join("a")
    c = h.c
    assert c.validate_offset_commit("nope", "a", 1, 9) is None
    assert c.validate_offset_commit(G, "a", 1, 9) == 0
    assert c.validate_offset_commit(G, "a", 0, 9) == STALE_MEMBER_EPOCH
    assert c.validate_offset_commit(G, "zz", 1, 9) == C.UNKNOWN_MEMBER_ID
    assert c.validate_offset_commit(G, "a", 1, 8) == 35
    assert c.validate_offset_commit(G, "", -1, 9) == C.UNKNOWN_MEMBER_ID   # members present
    assert c.validate_offset_fetch(G, None, -1) == 0
    assert c.validate_offset_fetch(G, "a", 2) == STALE_MEMBER_EPOCH
    h.hb("a", -1)
    assert c.validate_offset_commit(G, "", -1, 9) == 0                     # admin commit to empty group


def test_range_assignor_selected_by_member():
    h = Harness(topics={"t": 4, "u": 4})
    h.join("a", names=("t", "u"), server_assignor="range")
    h.join("b", names=("t", "u"), server_assignor="range")
    assert h.group.target["a"] == {"t": frozenset({0, 1}), "u": frozenset({0, 1})}
    assert h.group.target["b"] == {"t": frozenset({2, 3}), "u": frozenset({2, 3})}


# -- assignors -------------------------------------------------------------------------------------
def test_uniform_is_sticky_and_balanced():
    subs = frozenset({"t"})
    first = uniform.assign({m: MemberSpec(subs) for m in "abc"}, {"t": 7})
    sizes = sorted(len(v.get("t", ())) for v in first.values())
    assert sizes == [2, 2, 3]
    again = uniform.assign({m: MemberSpec(subs, previous=first[m]) for m in "abc"}, {"t": 7})
    assert again == first                                                  # balanced target never moves
    more = uniform.assign({**{m: MemberSpec(subs, previous=first[m]) for m in "abc"}, "d": MemberSpec(subs)},
                          {"t": 7})
    for m in "abc":
        assert more[m].get("t", frozenset()) <= first[m]["t"]              # only moves to the newcomer
    assert sorted(len(v.get("t", ())) for v in more.values()) == [1, 2, 2, 2]


def test_uniform_heterogeneous_each_partition_once():
    members = {"a": MemberSpec(frozenset({"t"})), "b": MemberSpec(frozenset({"t", "u"})),
               "c": MemberSpec(frozenset({"u"}))}
    res = uniform.assign(members, {"t": 4, "u": 6})
    got = [(t, p) for v in res.values() for t, ps in v.items() for p in ps]
    assert sorted(got) == sorted([("t", p) for p in range(4)] + [("u", p) for p in range(6)])
    assert not res["a"].get("u") and not res["c"].get("t")


def test_range_static_members_first():
    members = {"m1": MemberSpec(frozenset({"t"})), "m2": MemberSpec(frozenset({"t"}), instance_id="z")}
    res = server_range.assign(members, {"t": 3})
    assert res["m2"] == {"t": frozenset({0, 1})} and res["m1"] == {"t": frozenset({2})}


# -- hypothesis machine -------------------------------------------------------------------------
class Client:
    def __init__(self, mid, instance=None):
        self.mid, self.instance = mid, instance
        self.epoch = 0
        self.owned: dict = {}      # partitions it is consuming right now
        self.to_revoke: set = set()  # told to give up, not yet done (its revocation callback runs)
        self.joined = False
        self.classic = False         # a cooperative classic member (JoinGroup/SyncGroup/Heartbeat)
        self.needs_join = False

    def finish_revocation(self):
        left = parts(self.owned) - self.to_revoke
        self.owned = {t: frozenset(p for tt, p in left if tt == t) for t, _ in left}
        self.to_revoke = set()


class ConsumerGroupMachine(RuleBasedStateMachine):
    @initialize(topics=st.dictionaries(st.sampled_from(["t", "u", "v"]), st.integers(1, 5), min_size=1),
                assignor=st.sampled_from(["uniform", "range"]))
    def setup(self, topics, assignor):
        self.h = Harness(topics=topics)
        self.assignor = assignor
        self.clients: dict[str, Client] = {}
        self.n = 0

    def _lost(self, cl: Client):
        cl.owned, cl.epoch, cl.joined, cl.to_revoke, cl.needs_join = {}, 0, False, set(), False

    def _take(self, cl: Client, assignment):
        # new partitions are consumed at once; revoked ones only after the callback finishes
        new = parts(assignment)
        cl.to_revoke = parts(cl.owned) - new
        both = new | parts(cl.owned)
        cl.owned = {t: frozenset(p for tt, p in both if tt == t) for t, _ in both}

    def _classic_step(self, cl: Client):
        h = self.h
        if cl.joined and not cl.needs_join:
            code = h.store(h.c.classic_heartbeat(HeartbeatParams(G, cl.epoch, cl.mid), h.now, "r"))[0].result.error_code
            if code == C.REBALANCE_IN_PROGRESS:
                cl.needs_join = True
            elif code:
                assert code in (C.UNKNOWN_MEMBER_ID, C.ILLEGAL_GENERATION), code
                self._lost(cl)
            return
        if G not in h.c.groups:
            return                                   # (a classic group: not modelled here)
        topics = sorted(h.topics)
        owned = parts(cl.owned)
        sub = encode_subscription(Sub(topics=topics, user_data=None, owned_partitions=[
            Sub.TopicPartition(topic=t, partitions=sorted(p for tt, p in owned if tt == t))
            for t in sorted({t for t, _ in owned})]))
        jp = JoinParams(G, cl.mid, None, "cli", "/h", 60000, 60000, "consumer", (("cooperative-sticky", sub),))
        r = h.store(h.c.classic_join(jp, h.topics, h.now, "r"))[0].result
        if r.error_code:
            assert r.error_code == C.UNKNOWN_MEMBER_ID, r
            self._lost(cl)
            return
        cl.joined, cl.epoch = True, r.generation_id
        res = h.store(h.c.classic_sync(SyncParams(G, cl.epoch, cl.mid), h.now, "r"))[0].result
        if res.error_code == C.REBALANCE_IN_PROGRESS:
            cl.needs_join = True
            return
        if res.error_code:
            assert res.error_code in (C.UNKNOWN_MEMBER_ID, C.ILLEGAL_GENERATION), res
            self._lost(cl)
            return
        got = {}
        for tp in decode_assignment(res.assignment).assigned_partitions:
            got[tp.topic] = frozenset(tp.partitions)
        self._take(cl, got)
        cl.needs_join = bool(cl.to_revoke)           # cooperative: rejoin once the revocation is done

    def _hb(self, cl: Client, full=False):
        if cl.classic:
            return self._classic_step(cl)
        kw = dict(instance_id=cl.instance)
        if not cl.joined:
            r = self.h.hb(cl.mid, 0, owned={}, rebalance_timeout_ms=60000,
                          subscribed_topic_names=tuple(sorted(self.h.topics)),
                          server_assignor=self.assignor, **kw)
        else:
            r = self.h.hb(cl.mid, cl.epoch, owned=dict(cl.owned), **kw)
        if r.error_code in (FENCED_MEMBER_EPOCH, C.UNKNOWN_MEMBER_ID):
            self._lost(cl)                                 # partitions lost, rejoin
            return r
        assert r.error_code == 0, r
        cl.joined = True
        cl.epoch = r.member_epoch
        if r.assignment is not None:
            self._take(cl, r.assignment)
        return r

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def finish_revocation(self, data):
        self.clients[data.draw(st.sampled_from(sorted(self.clients)))].finish_revocation()

    @rule(kind=st.sampled_from(["dynamic", "static", "classic"]))
    def add_member(self, kind):
        if len(self.clients) >= 5:
            return
        if kind == "classic" and not (G in self.h.c.groups and self.h.group.members):
            return                                   # classic members join an existing consumer group
        self.n += 1
        cl = Client(f"m{self.n}", f"i{self.n}" if kind == "static" else None)
        cl.classic = kind == "classic"
        self.clients[cl.mid] = cl
        self._hb(cl)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def heartbeat(self, data):
        cl = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        self._hb(cl)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data):
        cl = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        if cl.joined and cl.classic:
            res = self.h.store(self.h.c.classic_leave(LeaveParams(G, (LeaveMember(cl.mid),)), self.h.now, "r"))
            assert res[0].result.members[0].error_code == 0
        elif cl.joined:
            assert self.h.hb(cl.mid, -1, instance_id=cl.instance).error_code == 0

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def crash_and_expire(self, data):
        """A member stops heartbeating; its session expires (others heartbeat meanwhile)."""
        cl = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        if not cl.joined:
            return
        for other in list(self.clients.values()):
            self._hb(other)
        key = session_key(G, cl.mid)
        deadline = self.h.c.timer_deadlines()[key]
        self.h.store(self.h.c.fire_timer(key, deadline))
        assert cl.mid not in self.h.group.members

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), delta=st.sampled_from([1, 2]))
    def fenced_epoch_refused(self, data, delta):
        cl = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        if not cl.joined or cl.classic:
            return
        m = self.h.group.members[cl.mid]
        before = (m.member_epoch, dict(m.assigned), self.h.group.group_epoch)
        r = self.h.hb(cl.mid, m.member_epoch + delta, owned=dict(cl.owned), instance_id=cl.instance)
        assert r.error_code == FENCED_MEMBER_EPOCH
        if m.previous_member_epoch - delta >= 1:          # older than the tolerated previous epoch
            r = self.h.hb(cl.mid, m.previous_member_epoch - delta, owned={}, instance_id=cl.instance)
            assert r.error_code == FENCED_MEMBER_EPOCH
        if 1 <= m.previous_member_epoch < m.member_epoch:  # previous epoch without TopicPartitions
            r = self.h.hb(cl.mid, m.previous_member_epoch, instance_id=cl.instance)
            assert r.error_code == FENCED_MEMBER_EPOCH
        assert before == (m.member_epoch, dict(m.assigned), self.h.group.group_epoch)

    @rule(topic=st.sampled_from(["t", "u", "v"]), more=st.integers(1, 3))
    def add_partitions(self, topic, more):
        self.h.topics[topic] = self.h.topics.get(topic, 0) + more

    @invariant()
    def one_owner_per_partition(self):
        if not hasattr(self, "h"):
            return
        seen = {}
        for cl in self.clients.values():
            for tp in parts(cl.owned):
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {cl.mid}"
                seen[tp] = cl.mid
        if G in self.h.c.groups:
            held = {}
            for m in self.h.group.members.values():
                for tp in parts(m.assigned) | parts(m.pending_revocation):
                    assert tp not in held
                    held[tp] = m.member_id
            # what a client is consuming, the coordinator holds for it
            for cl in self.clients.values():
                for tp in parts(cl.owned):
                    assert held.get(tp) == cl.mid, (tp, cl.mid, held.get(tp))

    @invariant()
    def replay_rebuilds_the_same_groups(self):
        if not hasattr(self, "h"):
            return
        c = self.h.replayed()
        assert set(c.groups) == set(self.h.c.groups)
        for gid, g in self.h.c.groups.items():
            assert snapshot(c.groups[gid]) == snapshot(g)

    @precondition(lambda self: self.clients)
    @rule()
    def converge(self):
        for _ in range(4 * len(self.clients) + 4):
            for cl in list(self.clients.values()):
                cl.finish_revocation()
                self._hb(cl)
        g = self.h.group
        assert g.state == ConsumerGroupState.STABLE, g.state
        total = set()
        for cl in self.clients.values():
            m = g.members[cl.mid]
            assert cl.epoch == m.member_epoch == g.group_epoch == g.assignment_epoch
            assert parts(cl.owned) == parts(g.target[cl.mid]) == parts(m.assigned)
            total |= parts(cl.owned)
        subscribed = {(t, p) for t in g.subscribed_metadata for p in range(g.subscribed_metadata[t])}
        assert total == subscribed


TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
TestConsumerGroupMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# -- persistence ---------------------------------------------------------------------------------
def test_join_writes_kafkas_records_in_order_and_waits_for_them():
    h = Harness()
    out = h.c.heartbeat(ConsumerHeartbeatParams(G, "a", 0, owned={}, rebalance_timeout_ms=5000,
                                                subscribed_topic_names=("t",)), h.topics, 0, "r")
    assert out.responses == [] and len(out.appends) == 1             # held until stored
    kinds = [(r.kind, r.member_id) for r in out.appends[0].records]
    assert kinds == [(5, "a"), (3, None), (7, "a"), (6, None), (8, "a")]
    recs = {r.kind: r for r in out.appends[0].records}
    assert recs[3].value == 1 and recs[6].value == 1
    assert recs[8].value.member_epoch == 1 and recs[8].value.assigned == (("t", (0, 1, 2, 3, 4, 5)),)
    assert recs[5].value.subscribed_topic_names == ("t",) and recs[5].value.rebalance_timeout_ms == 5000
    done = h.c.on_append_done(out.appends[0].token, 0, 1)
    assert done.responses[0].result.member_epoch == 1


def test_leave_writes_tombstones_then_the_bumped_epoch():
    h = Harness()
    h.join("a")
    h.join("b")
    n = len(h.log)
    h.hb("b", -1)
    recs = h.log[n:]
    assert [(r.kind, r.member_id, r.tombstone) for r in recs[:3]] == \
        [(8, "b", True), (7, "b", True), (5, "b", True)]
    assert (3, None, False) in [(r.kind, r.member_id, r.tombstone) for r in recs]


def test_failed_append_answers_the_mapped_error():
    h = Harness()
    out = h.c.heartbeat(ConsumerHeartbeatParams(G, "a", 0, owned={}, rebalance_timeout_ms=5000,
                                                subscribed_topic_names=("t",)), h.topics, 0, "r")
    res = h.c.on_append_done(out.appends[0].token, C.NOT_LEADER_OR_FOLLOWER, 1).responses[0].result
    assert res.error_code == C.NOT_COORDINATOR


def test_restart_replays_groups_and_members_continue_at_their_epochs():
    h = Harness()
    ra = h.join("a")
    h.join("b")
    h.hb("a", 1, owned=ra.assignment)                                 # a must revoke: UNREVOKED
    c2 = h.replayed()
    g = c2.groups[G]
    assert g.group_epoch == 2 and g.assignment_epoch == 2
    assert g.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    assert rebalance_key(G, "a") in c2.timer_deadlines() and session_key(G, "b") in c2.timer_deadlines()
    h.c = c2
    a_keep = {t: ps for t, ps in g.members["a"].assigned.items()}
    r = h.hb("a", 1, owned=a_keep)
    assert r.error_code == 0 and r.member_epoch == 2
    rb = h.hb("b", 2)
    assert rb.error_code == 0 and len(parts(rb.assignment)) == 3
    assert h.c.groups[G].group_epoch == 2                             # no spurious bump after load


def test_delete_group_writes_tombstones():
    h = Harness()
    h.join("a")
    h.hb("a", -1)
    out = h.c.delete_group(G, 0, "r")
    assert [(r.kind, r.tombstone) for r in out.appends[0].records] == [(6, True), (3, True)]
    assert h.c.on_append_done(out.appends[0].token, 0, 0).responses[0].result == 0
    assert G not in h.c.groups
    h.log.extend(out.appends[0].records)
    assert G not in h.replayed().groups


# -- classic members in a consumer group, online upgrade --------------------------------------------
from kohort.broker.coordinator.classic_members import (  # noqa: E402
    ClassicGroupSnapshot, ClassicSnapshotMember, join_key, sync_key,
)
from kohort.broker.coordinator.model import (  # noqa: E402
    HeartbeatParams, JoinParams, LeaveMember, LeaveParams, Outcome, SyncParams,
)
from kohort.protocol.consumer_protocol import (  # noqa: E402
    ConsumerProtocolAssignment as Asg, ConsumerProtocolSubscription as Sub, decode_assignment,
    encode_assignment, encode_subscription,
)


def _sub(owned=()):
    return encode_subscription(Sub(topics=["t"], user_data=None, owned_partitions=[
        Sub.TopicPartition(topic="t", partitions=list(owned))] if owned else []))


def cjoin(h, mid, owned=(), instance=None, protocols=None, ptype="consumer", version=9):
    p = JoinParams(G, mid, instance, "cli", "/h", 10000, 20000, ptype,
                   protocols or (("range", _sub(owned)),), api_version=version)
    return h.store(h.c.classic_join(p, h.topics, h.now, "r"))[0].result


def csync(h, mid, gen):
    r = h.store(h.c.classic_sync(SyncParams(G, gen, mid), h.now, "r"))[0].result
    parts = set() if r.error_code else {p for tp in decode_assignment(r.assignment).assigned_partitions
                                        for p in tp.partitions}
    return r.error_code, parts


def chb(h, mid, gen):
    return h.store(h.c.classic_heartbeat(HeartbeatParams(G, gen, mid), h.now, "r"))[0].result.error_code


def test_classic_member_joins_syncs_and_waits_for_revocation():
    h = Harness()
    ra = h.join("a")
    r = cjoin(h, "")
    assert r.error_code == C.MEMBER_ID_REQUIRED and r.member_id == "gen-0"
    r = cjoin(h, "gen-0")
    assert (r.error_code, r.generation_id, r.leader, r.protocol_name) == (0, 2, "", "range")
    assert csync(h, "gen-0", 2) == (0, set())
    assert csync(h, "gen-0", 1)[0] == C.ILLEGAL_GENERATION
    assert chb(h, "gen-0", 2) == 0                        # still waiting on a's partitions
    ra = h.hb("a", 1, owned=ra.assignment)
    h.hb("a", 1, owned=ra.assignment)
    assert chb(h, "gen-0", 2) == C.REBALANCE_IN_PROGRESS  # withheld partitions are free now
    assert join_key(G, "gen-0") in h.c.timer_deadlines()
    r = cjoin(h, "gen-0")
    assert r.generation_id == 2
    code, mine = csync(h, "gen-0", 2)
    assert code == 0 and len(mine) == 3 and not {("t", p) for p in mine} & parts(ra.assignment)
    assert chb(h, "gen-0", 2) == 0
    assert h.group.state == ConsumerGroupState.STABLE
    assert h.c.validate_offset_commit(G, "gen-0", 2, 2) == 0
    assert h.c.validate_offset_commit(G, "gen-0", 1, 9) == C.ILLEGAL_GENERATION
    # a consumer-protocol request for a classic member's id and vice versa
    assert chb(h, "a", 2) == C.UNKNOWN_MEMBER_ID
    res = h.store(h.c.classic_leave(LeaveParams(G, (LeaveMember("gen-0"),)), h.now, "r"))[0].result
    assert res.members[0].error_code == 0 and "gen-0" not in h.group.members


def test_classic_member_errors_and_timers():
    h = Harness()
    h.join("a")
    assert cjoin(h, "x", ptype="connect").error_code == C.INCONSISTENT_GROUP_PROTOCOL
    assert cjoin(h, "x").error_code == 0
    assert cjoin(h, "y", protocols=(("roundrobin", _sub()),)).error_code == C.INCONSISTENT_GROUP_PROTOCOL
    assert cjoin(h, "s1", instance="i").error_code == 0
    assert cjoin(h, "s2", instance="i").error_code == C.FENCED_INSTANCE_ID   # known id, other instance owner
    assert SetTimer(sync_key(G, "x"), 20000) in h.last_out.timers or sync_key(G, "x") in h.c.timer_deadlines()
    h.advance(20000)                                       # neither synced within the rebalance timeout
    assert "x" not in h.group.members and "s1" not in h.group.members
    assert cjoin(h, "z").error_code == 0
    csync(h, "z", h.group.members["z"].member_epoch)
    h.advance(9999)
    h.hb("a", h.group.members["a"].member_epoch)
    assert "z" in h.group.members
    h.advance(1)                                           # its own 10 s session timeout
    assert "z" not in h.group.members


def test_online_upgrade_of_a_classic_group():
    released = []

    def upgrade(gid, now):
        released.append(gid)
        a1 = encode_assignment(Asg(assigned_partitions=[Asg.TopicPartition(topic="t", partitions=[0, 1, 2])],
                                   user_data=None))
        a2 = encode_assignment(Asg(assigned_partitions=[Asg.TopicPartition(topic="t", partitions=[3, 4, 5])],
                                   user_data=None))
        snap = ClassicGroupSnapshot(gid, 7, (
            ClassicSnapshotMember("c1", None, "cli", "/h", 20000, 10000, (("range", _sub()),), _sub(), a1),
            ClassicSnapshotMember("c2", None, "cli", "/h", 20000, 10000, (("range", _sub()),), _sub(), a2)))
        return Outcome(), snap
    h = Harness()
    h.c = ConsumerGroups(h.cfg, classic_group_active=lambda gid: True, classic_upgrade=upgrade)
    r = h.join("n")
    assert released == [G] and r.error_code == 0 and r.member_epoch == 8 and parts(r.assignment) == set()
    g = h.group
    assert g.members["c1"].member_epoch == 7 and g.members["c1"].classic.session_timeout_ms == 10000
    assert parts(g.members["c2"].assigned) == {("t", 3), ("t", 4), ("t", 5)}
    assert chb(h, "c1", 7) == C.REBALANCE_IN_PROGRESS
    r1 = cjoin(h, "c1", owned=(0, 1, 2))                   # cooperative rejoin still owning its three
    assert r1.generation_id == 7 and g.members["c1"].state == MemberState.UNREVOKED_PARTITIONS
    code, kept = csync(h, "c1", 7)
    assert code == 0 and len(kept) == 2                    # told to give one up
    r1 = cjoin(h, "c1", owned=tuple(kept))
    assert r1.generation_id == 8
    r = h.hb("n", 8)
    assert len(parts(r.assignment)) == 1                   # c1's freed partition
    assert len(h.replayed().groups[G].members) == 3        # all of it was written as records


def test_online_downgrade_when_the_last_consumer_member_leaves():
    adopted = []

    def downgrade(snap, now):
        adopted.append(snap)
        return Outcome()
    h = Harness()
    h.c = ConsumerGroups(h.cfg, classic_downgrade=downgrade)
    ra = h.join("a")
    cjoin(h, "c1")
    h.hb("a", 1, owned=ra.assignment)
    epoch = h.group.group_epoch
    r = h.hb("a", -1)
    assert r.error_code == 0 and G not in h.c.groups
    snap = adopted[0]
    assert snap.generation == epoch and [m.member_id for m in snap.members] == ["c1"]
    got = {p for tp in decode_assignment(snap.members[0].assignment).assigned_partitions for p in tp.partitions}
    assert len(got) == 3                                   # its target
    tomb = [(r.kind, r.member_id) for r in h.log[-8:] if r.tombstone]
    assert tomb == [(8, "a"), (8, "c1"), (7, "a"), (7, "c1"), (5, "a"), (5, "c1"), (6, None), (3, None)]
    assert G not in h.replayed().groups


def test_no_downgrade_while_a_consumer_member_remains_or_nobody_is_left():
    adopted = []
    h = Harness()
    h.c = ConsumerGroups(h.cfg, classic_downgrade=lambda s, n: adopted.append(s) or Outcome())
    h.join("a")
    h.join("b")
    cjoin(h, "c1")
    h.hb("a", -1)
    assert not adopted and G in h.c.groups                 # b still uses the consumer protocol
    h.store(h.c.classic_leave(LeaveParams(G, (LeaveMember("c1"),)), h.now, "r"))
    h.hb("b", -1)
    assert not adopted and G in h.c.groups and not h.group.members


def test_upgrade_stays_done_when_the_joining_request_fails():
    """The classic group is released before the joining member is checked: if the join then fails
    (here: the group is full), the converted group and its records must still be kept."""
    def upgrade(gid, now):
        snap = ClassicGroupSnapshot(gid, 3, (
            ClassicSnapshotMember("c1", None, "cli", "/h", 20000, 10000, (("range", _sub()),), _sub(), b""),))
        return Outcome(), snap
    h = Harness(max_size=1)
    h.c = ConsumerGroups(h.cfg, classic_group_active=lambda gid: True, classic_upgrade=upgrade)
    r = h.join("n")
    assert r.error_code == C.GROUP_MAX_SIZE_REACHED
    assert list(h.group.members) == ["c1"] and h.group.group_epoch == 3
    assert list(h.replayed().groups[G].members) == ["c1"]


def test_topic_deletion_bumps_and_reassigns():
    h = Harness(topics={"t": 2, "u": 2})
    r = h.join("a", names=("t", "u"))
    assert len(parts(r.assignment)) == 4
    e = h.group.group_epoch
    del h.topics["u"]
    r = h.hb("a", r.member_epoch, owned={"t": frozenset({0, 1})})      # the client dropped u's partitions
    assert h.group.group_epoch == e + 1 and parts(r.assignment) == {("t", 0), ("t", 1)}
    assert h.group.state == ConsumerGroupState.STABLE


# -- arbitrary requests --------------------------------------------------------------------------
_owned_st = st.one_of(st.none(), st.just({}), st.dictionaries(
    st.sampled_from(["t", "u", "gone"]), st.frozensets(st.integers(0, 6), max_size=4), max_size=2))
_hb_st = st.builds(
    ConsumerHeartbeatParams,
    group_id=st.sampled_from([G, G, " "]),
    member_id=st.sampled_from(["a", "b", "c", ""]),
    member_epoch=st.integers(-3, 6),
    instance_id=st.sampled_from([None, None, "i1", "i2", ""]),
    rack_id=st.sampled_from([None, "r", ""]),
    rebalance_timeout_ms=st.sampled_from([-1, 0, 1000]),
    subscribed_topic_names=st.sampled_from([None, (), ("t",), ("t", "u", "nope")]),
    subscribed_topic_regex=st.sampled_from([None, "", "t|u", "("]),
    server_assignor=st.sampled_from([None, "uniform", "range", "sticky"]),
    owned=_owned_st,
    api_version=st.sampled_from([0, 1]),
)


_step_st = st.one_of(
    _hb_st,                                                        # anything at all
    st.integers(0, 50_000),                                        # the clock jumps
    st.tuples(st.sampled_from(["join", "ack", "noack", "newer", "leave", "static-leave"]),
              st.sampled_from(["a", "b", "c"]), st.sampled_from([None, "i1"])),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_step_st, max_size=40))
def test_arbitrary_heartbeats_keep_the_group_consistent(steps):
    """Any sequence of heartbeats (well-formed ones mixed with arbitrary ones) and clock jumps: every
    one is answered with a known code, no partition is ever held by two members, and replaying the
    records rebuilds the state."""
    known = {0, INVALID_REQUEST, FENCED_MEMBER_EPOCH, C.UNKNOWN_MEMBER_ID, UNRELEASED_INSTANCE_ID,
             C.FENCED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, C.GROUP_ID_NOT_FOUND,
             C.GROUP_MAX_SIZE_REACHED}
    h = Harness(topics={"t": 3, "u": 2}, max_size=3)
    for step in steps:
        if isinstance(step, int):
            h.advance(step)
            continue
        if isinstance(step, tuple):
            kind, mid, inst = step
            g = h.c.groups.get(G)
            m = g.members.get(mid) if g is not None else None
            epoch = m.member_epoch if m is not None else 1
            if kind == "join":
                step = ConsumerHeartbeatParams(G, mid, 0, instance_id=inst, rebalance_timeout_ms=5000,
                                               subscribed_topic_names=("t", "u"), owned={})
            elif kind in ("ack", "noack"):
                step = ConsumerHeartbeatParams(G, mid, epoch, instance_id=inst,
                                               owned=dict(m.assigned) if m is not None and kind == "ack" else None)
            elif kind == "newer":
                step = ConsumerHeartbeatParams(G, mid, epoch + 1, instance_id=inst, owned={})
            else:
                step = ConsumerHeartbeatParams(G, mid, -1 if kind == "leave" else -2, instance_id=inst)
        out = h.c.heartbeat(step, h.topics, h.now, "r")
        res = h.store(out)
        assert len(res) == 1 and res[0].result.error_code in known, res
        for g in h.c.groups.values():
            held = [tp for m in g.members.values() for tp in parts(m.assigned) | parts(m.pending_revocation)]
            assert len(held) == len(set(held)), held
            assert len(g.members) <= 3
    c = h.replayed()
    assert {gid: snapshot(g) for gid, g in c.groups.items()} == \
        {gid: snapshot(g) for gid, g in h.c.groups.items()}
