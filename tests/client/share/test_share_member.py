"""kohort's share member (client/share/membership.py) and its acknowledgement batching
(client/share/acknowledgements.py), pure, with a fake clock; and the client members paired in memory
with the broker's share group coordinator (broker/share/group.py) and share partitions
(broker/share/partition.py) by a hypothesis rule machine: members join, heartbeat, lose answers,
leave, crash (their session expires), fetch and acknowledge. Only the wire shapes travel between
them (ShareGroupHeartbeat requests and responses, topics by id).

Invariants: no record is held by two members at once, members only fetch partitions they are
assigned, and in the end every member is STABLE at the assignment epoch with the coordinator's
target, and every produced record is acknowledged."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kohort.broker.share.group import ShareGroupConfig, ShareGroupCoordinator
from kohort.broker.share.partition import AckBatch as BrokerAck, LogBatch, SharePartition, SharePartitionConfig
from kohort.client.consumer.membership import Raise, Send
from kohort.client.share.acknowledgements import (
    ACCEPT, EXPLICIT, GAP, IMPLICIT, REJECT, RELEASE, RENEW, AckBatch, Acknowledgements, IllegalStateError,
    batches_of,
)
from kohort.client.share.membership import (
    FATAL_STATE, HEARTBEAT_ERROR_ACTIONS, JOINING, LEAVING, STABLE, UNSUBSCRIBED, AssignmentChanged, Close,
    CoordinatorFound, CoordinatorLost, Left, LookupCoordinator, Poll, RequestFailed, Response, ShareMemberConfig,
    ShareMembership, Subscribe, Tick, new_member_id,
)
from kohort.errors import ErrorCode
from kohort.protocol import share_group_records as SGR
from kohort.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatResponse as HBResp

TID = uuid.UUID(int=5)


def resp(code=0, epoch=1, interval=1000, assignment=None, member="m"):
    r = HBResp(error_code=int(code), member_id=member, member_epoch=epoch, heartbeat_interval_ms=interval)
    if assignment is not None:
        A = HBResp.Assignment
        r.assignment = A(topic_partitions=[A.TopicPartitions(topic_id=t, partitions=sorted(ps))
                                           for t, ps in assignment.items()])
    return r


def sends(actions):
    return [a for a in actions if isinstance(a, Send)]


def started(now=0):
    m = ShareMembership(ShareMemberConfig(group_id="g", rack_id="r"), "m")
    acts = m.handle(Subscribe(("t",)), now)
    assert acts == [LookupCoordinator()]
    acts = m.handle(CoordinatorFound(1), now)
    (s,) = sends(acts)
    return m, s


# -- the member ------------------------------------------------------------------------------------
def test_join_sends_a_full_heartbeat_then_unchanged_fields():
    m, s = started()
    r = s.request
    assert (r.group_id, r.member_id, r.member_epoch, r.rack_id, r.subscribed_topic_names) == ("g", "m", 0, "r", ["t"])
    assert s.to == 1 and m.state == JOINING
    acts = m.handle(Response(s.tag, resp(epoch=3, assignment={TID: {0, 1}})), 10)
    assert acts == [AssignmentChanged({TID: frozenset({0, 1})})]
    assert (m.state, m.member_epoch, m.next_deadline_ms()) == (STABLE, 3, 1010)
    assert m.handle(Tick(), 500) == []
    (s,) = sends(m.handle(Tick(), 1010))
    assert (s.request.member_epoch, s.request.rack_id, s.request.subscribed_topic_names) == (3, None, None)
    assert m.next_deadline_ms() is None                        # one heartbeat at a time
    assert sends(m.handle(Tick(), 5000)) == []
    m.handle(Response(s.tag, resp(epoch=3)), 1020)            # no assignment in the answer: unchanged
    assert m.assignment == {TID: frozenset({0, 1})}
    (s,) = sends(m.handle(Subscribe(("t", "u")), 1030))        # a new subscription goes out at once
    assert s.request.subscribed_topic_names == ["t", "u"]


def test_fenced_and_unknown_member_rejoin_with_epoch_zero_and_the_same_id():
    for code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
        m, s = started()
        m.handle(Response(s.tag, resp(epoch=2, assignment={TID: {0}})), 0)
        (s,) = sends(m.handle(Tick(), 1000))
        acts = m.handle(Response(s.tag, resp(code)), 1000)
        assert AssignmentChanged({}) in acts
        (s,) = sends(acts)
        assert (s.request.member_id, s.request.member_epoch, s.request.subscribed_topic_names) == ("m", 0, ["t"])
        assert m.state == JOINING


def test_coordinator_errors_rediscover_and_retry():
    m, s = started()
    acts = m.handle(Response(s.tag, resp(ErrorCode.NOT_COORDINATOR)), 0)
    assert acts == [LookupCoordinator()] and m.coordinator is None
    (s,) = sends(m.handle(CoordinatorFound(2), 5))
    assert s.to == 2 and s.request.subscribed_topic_names == ["t"]
    acts = m.handle(Response(s.tag, resp(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)), 10)
    assert sends(acts) == [] and m.next_deadline_ms() == 110
    (s,) = sends(m.handle(Tick(), 110))
    acts = m.handle(RequestFailed(s.tag, "timed out"), 200)
    assert acts == [LookupCoordinator()]
    assert m.handle(Response(s.tag, resp()), 200) == []        # a late answer to a forgotten heartbeat
    (s,) = sends(m.handle(CoordinatorFound(1), 300))
    assert m.handle(CoordinatorLost(), 300) == [] and m.coordinator is None       # the heartbeat is in flight
    assert m.handle(Response(s.tag, resp()), 310) == [LookupCoordinator()]
    assert m.handle(Tick(), 400) == []                                            # looked up once


def test_surfaced_and_fatal_errors_raise_from_poll():
    m, s = started()
    m.handle(Response(s.tag, resp(ErrorCode.TOPIC_AUTHORIZATION_FAILED)), 0)
    (r,) = m.handle(Poll(), 1)
    assert isinstance(r, Raise) and r.error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert m.handle(Poll(), 2) == []                            # surfaced once
    assert m.state != FATAL_STATE
    for code in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.GROUP_MAX_SIZE_REACHED, ErrorCode.INVALID_REQUEST,
                 ErrorCode.UNSUPPORTED_VERSION, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNKNOWN_SERVER_ERROR):
        m, s = started()
        m.handle(Response(s.tag, resp(code)), 0)
        assert m.state == FATAL_STATE
        assert isinstance(m.handle(Poll(), 1)[0], Raise) and isinstance(m.handle(Poll(), 2)[0], Raise)
        assert sends(m.handle(Tick(), 10 ** 6)) == []
    m, s = started()
    m.handle(RequestFailed(s.tag, "no API", unsupported=True), 0)
    assert m.state == FATAL_STATE


def test_error_table_names_kafkas_codes():
    assert HEARTBEAT_ERROR_ACTIONS[ErrorCode.FENCED_MEMBER_EPOCH] == "fence"
    assert set(HEARTBEAT_ERROR_ACTIONS) <= set(ErrorCode)


def test_close_leaves_with_epoch_minus_one():
    m, s = started()
    m.handle(Response(s.tag, resp(epoch=4, assignment={TID: {0}})), 0)
    acts = m.handle(Close(), 10)
    assert AssignmentChanged({}) in acts and m.state == LEAVING
    (s,) = sends(acts)
    assert s.request.member_epoch == -1
    assert m.handle(Response(s.tag, resp(epoch=-1)), 20) == [Left()]
    assert m.state == UNSUBSCRIBED
    fresh = ShareMembership(ShareMemberConfig(group_id="g"))
    assert fresh.handle(Close(), 0) == [Left()]
    assert len(fresh.member_id) == 22 and new_member_id() != fresh.member_id
    with pytest.raises(ValueError):
        ShareMembership(ShareMemberConfig(group_id=""))


# -- acknowledgements ---------------------------------------------------------------------------------
def test_implicit_mode_accepts_on_the_next_poll_and_gaps_missing_offsets():
    a = Acknowledgements(IMPLICIT)
    a.delivered("tp", [(0, 4)], [0, 1, 3, 4])
    a.acknowledge("tp", 1, RELEASE)
    a.before_poll()
    assert a.take("tp") == [AckBatch(0, 0, (ACCEPT,)), AckBatch(1, 1, (RELEASE,)), AckBatch(2, 2, (GAP,)),
                            AckBatch(3, 4, (ACCEPT,))]
    assert a.take("tp") == [] and not a.has_pending()


def test_implicit_mode_accepts_runs_handed_out_with_per_offset_entries_winning():
    a = Acknowledgements(IMPLICIT)
    a.handed_out_range("tp", 10, 14)
    a.handed_out_range("tp", 15, 19)                        # continues the run
    assert a.holding() and a.unacknowledged("tp") == set(range(10, 20))
    assert not a.has_pending()                              # accepted only by the next poll
    a.before_poll()
    assert not a.holding() and a.pending_partitions() == ["tp"]
    assert a.take("tp") == [AckBatch(10, 19, (ACCEPT,))]
    a.handed_out_range("tp", 20, 21)
    a.delivered("tp", [(22, 22)], [])                       # an acquired offset without a record: GAP
    a.handed_out_range("tp", 23, 24)
    a.before_poll()
    assert a.take_all() == {"tp": [AckBatch(20, 21, (ACCEPT,)), AckBatch(22, 22, (GAP,)),
                                   AckBatch(23, 24, (ACCEPT,))]}
    assert not a.has_pending() and a.take_all() == {}
    a.handed_out_range("tp", 30, 31)
    a.drop_partition("tp")
    a.before_poll()
    assert not a.has_pending()
    e = Acknowledgements(EXPLICIT)                          # explicit mode keeps offsets one by one
    e.handed_out_range("tp", 0, 1)
    e.acknowledge("tp", 1, REJECT)
    with pytest.raises(IllegalStateError):
        e.before_poll()


def test_explicit_mode_refuses_poll_with_unacknowledged_records():
    a = Acknowledgements(EXPLICIT)
    a.delivered("tp", [(0, 2)], [0, 1, 2])
    with pytest.raises(IllegalStateError):
        a.before_poll()
    for o, t in ((0, ACCEPT), (1, REJECT), (2, RENEW)):
        a.acknowledge("tp", o, t)
    a.before_poll()
    assert a.contains_renew()
    assert a.take_all() == {"tp": [AckBatch(0, 0, (ACCEPT,)), AckBatch(1, 1, (REJECT,)), AckBatch(2, 2, (RENEW,))]}
    with pytest.raises(IllegalStateError):
        a.acknowledge("tp", 0, ACCEPT)                       # already acknowledged
    with pytest.raises(ValueError):
        a.acknowledge("tp", 0, GAP)
    v1 = Acknowledgements(EXPLICIT, renew_supported=False)
    v1.delivered("tp", [(0, 0)], [0])
    with pytest.raises(IllegalStateError):
        v1.acknowledge("tp", 0, RENEW)
    v1.drop_partition("tp")
    v1.before_poll()
    with pytest.raises(ValueError):
        Acknowledgements("sometimes")
    assert batches_of({}) == []


# -- paired with the broker's share group and partitions ----------------------------------------------------
TOPICS = {"t": (TID, 2)}
SESSION_MS, INTERVAL_MS, LOCK_MS = 6000, 1000, 3000
MEMBERS = ("m1", "m2", "m3")


class Node:
    def __init__(self, mid):
        self.m = ShareMembership(ShareMemberConfig(group_id="g", retry_backoff_ms=100), mid)
        self.mid = mid
        self.inflight: list[Send] = []
        self.acks = Acknowledgements(IMPLICIT)
        self.alive = True


class SharePairing(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.now = 0
        self.coord = ShareGroupCoordinator(ShareGroupConfig(session_timeout_ms=SESSION_MS,
                                                            heartbeat_interval_ms=INTERVAL_MS))
        self.timers: dict = {}
        self.nodes = {mid: Node(mid) for mid in MEMBERS}
        self.parts = {p: SharePartition(0, SharePartitionConfig(record_lock_duration_ms=LOCK_MS,
                                                                delivery_count_limit=5)) for p in range(2)}
        self.logs = {p: [] for p in range(2)}
        self.holding: dict[tuple[int, int], str] = {}
        self.fatal = []
        self.records: list = []

    # plumbing
    def _apply(self, node, actions):
        for a in actions:
            if isinstance(a, Send):
                node.inflight.append(a)
            elif isinstance(a, LookupCoordinator):
                self._apply(node, node.m.handle(CoordinatorFound(0), self.now))
            elif isinstance(a, AssignmentChanged):
                for (p, o), who in list(self.holding.items()):
                    if who == node.mid and (TID not in a.assignment or p not in a.assignment[TID]):
                        pass        # records stay locked until acknowledged, released or expired
            elif isinstance(a, Raise):
                self.fatal.append(a.error)

    def _coordinator_outcome(self, out):
        self.records.extend(out.records)
        for t in out.timers:
            if hasattr(t, "deadline_ms"):
                self.timers[t.key] = t.deadline_ms
            else:
                self.timers.pop(t.key, None)
        for init in out.initialize:
            self._coordinator_outcome(self.coord.state_initialized(init.group_id, init.partitions, TOPICS, self.now))

    @rule(mid=st.sampled_from(MEMBERS))
    def subscribe(self, mid):
        n = self.nodes[mid]
        if n.alive and n.m.state == UNSUBSCRIBED:
            self._apply(n, n.m.handle(Subscribe(("t",)), self.now))

    @rule(mid=st.sampled_from(MEMBERS), lose=st.booleans())
    def deliver(self, mid, lose):
        n = self.nodes[mid]
        if not n.inflight:
            return
        s = n.inflight.pop(0)
        out = self.coord.heartbeat(s.request, TOPICS, self.now)
        self._coordinator_outcome(out)
        if lose:
            self._apply(n, n.m.handle(RequestFailed(s.tag, "lost"), self.now))
        else:
            self._apply(n, n.m.handle(Response(s.tag, out.response), self.now))

    @rule(ms=st.integers(1, 2500))
    def tick(self, ms):
        self.now += ms
        for key, deadline in sorted(self.timers.items()):
            if deadline <= self.now:
                del self.timers[key]
                self._coordinator_outcome(self.coord.session_expired(key[1], key[2], self.now))
        for p, sp in self.parts.items():
            sp.expire_locks(self.now)
        self._refresh_holding()
        for n in self.nodes.values():
            if n.alive:
                self._apply(n, n.m.handle(Tick(), self.now))

    def _refresh_holding(self):
        self.holding = {}
        for p, sp in self.parts.items():
            for o, (state, _, member) in sp.record_states().items():
                if member is not None:
                    self.holding[(p, o)] = member

    @rule(p=st.integers(0, 1), n=st.integers(1, 4))
    def produce(self, p, n):
        end = self.logs[p][-1].last_offset + 1 if self.logs[p] else 0
        self.logs[p].append(LogBatch(end, end + n - 1))

    @rule(mid=st.sampled_from(MEMBERS))
    def poll(self, mid):
        """The application polls: acknowledgements of the last batch go out, then it fetches from
        the partitions it is assigned."""
        n = self.nodes[mid]
        if not n.alive:
            return
        n.acks.before_poll()
        for p, batches in n.acks.take_all().items():
            res = self.parts[p].acknowledge(mid, [BrokerAck(b.first_offset, b.last_offset, b.acknowledge_types)
                                                  for b in batches], self.now)
            assert res.error in (None, ErrorCode.INVALID_RECORD_STATE)      # expired locks are refused
        for p in sorted(n.m.assignment.get(TID, ())):
            sp = self.parts[p]
            start = sp.next_fetch_offset()
            res = sp.acquire(mid, [b for b in self.logs[p] if b.last_offset >= start], self.now, max_records=3)
            for a in res.acquired:
                for o in range(a.first_offset, a.last_offset + 1):
                    assert self.holding.get((p, o)) is None, f"{p}:{o} held by {self.holding.get((p, o))}"
                    self.holding[(p, o)] = mid
                n.acks.delivered(p, [(a.first_offset, a.last_offset)], range(a.first_offset, a.last_offset + 1))

    @rule(mid=st.sampled_from(MEMBERS))
    def close(self, mid):
        n = self.nodes[mid]
        if n.alive and n.m.state in (JOINING, STABLE):
            for sp in self.parts.values():
                sp.release_member(mid)                 # the share session closes
            n.acks = Acknowledgements(IMPLICIT)
            self._refresh_holding()
            self._apply(n, n.m.handle(Close(), self.now))

    @rule(mid=st.sampled_from(MEMBERS))
    def crash(self, mid):
        n = self.nodes[mid]
        if n.alive:
            n.alive = False
            n.inflight.clear()

    @invariant()
    def no_record_held_twice(self):
        assert not self.fatal, self.fatal
        seen = {}
        for p, sp in self.parts.items():
            for o, (state, _, member) in sp.record_states().items():
                if member is not None:
                    assert (p, o) not in seen
                    seen[(p, o)] = member

    @invariant()
    def replay_rebuilds_the_group(self):
        """The coordinator's `__consumer_offsets` records, read back through their bytes, rebuild it."""
        again = ShareGroupCoordinator()
        for k, v in self.records:
            again.replay(*SGR.decode(SGR.encode_key(k), SGR.encode_value(v)))
        assert set(again.groups) == set(self.coord.groups)
        for gid, g in self.coord.groups.items():
            h = again.groups[gid]
            for attr in ("group_epoch", "metadata_hash", "assignment_epoch", "members", "initialized", "initializing"):
                assert getattr(g, attr) == getattr(h, attr), attr
            assert g.targets == h.targets

    def teardown(self):
        if not hasattr(self, "nodes"):
            return
        # the survivors keep heartbeating until the group settles; crashed members' sessions expire
        alive = [n for n in self.nodes.values() if n.alive]
        for n in alive:
            if n.m.state in (UNSUBSCRIBED, LEAVING):
                while n.inflight:
                    self.deliver(n.mid, False)
                if n.m.state == UNSUBSCRIBED:
                    self._apply(n, n.m.handle(Subscribe(("t",)), self.now))
        for _ in range(40):
            self.tick(INTERVAL_MS)
            for n in alive:
                while n.inflight:
                    self.deliver(n.mid, False)
        g = self.coord.groups.get("g")
        if alive:
            assert g is not None and set(g.members) == {n.mid for n in alive}
            for n in alive:
                assert n.m.state == STABLE and n.m.member_epoch == g.assignment_epoch
                assert {t: ps for t, ps in n.m.assignment.items()} == {
                    t: ps for t, ps in g.targets[n.mid].items() if ps}
            union = set().union(*(n.m.assignment.get(TID, frozenset()) for n in alive))
            assert union == {0, 1}
            # drain: every produced record ends acknowledged
            for _ in range(60):
                self.now += LOCK_MS
                for n in alive:
                    self.poll(n.mid)
            for p, sp in self.parts.items():
                end = self.logs[p][-1].last_offset + 1 if self.logs[p] else 0
                assert sp.start_offset == end, (p, sp.start_offset, end)


TestSharePairing = SharePairing.TestCase
TestSharePairing.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
