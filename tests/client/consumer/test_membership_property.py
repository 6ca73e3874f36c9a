"""The client's pure group member (membership.py) paired with the broker's pure coordinator
(broker/coordinator/) in memory, one fake clock, hypothesis choosing what happens: members join,
leave, crash, stop polling (slow), commit; partitions are added; the clock jumps.

Checked at every step:
  * no partition is owned by two members that applied assignments of the same generation, nor by
    two members the coordinator still counts as members;
  * no accepted OffsetCommit came from a fenced member: the coordinator accepted it only for its
    current generation and a member of it.
Checked after the chaos, once things are left alone:
  * the group becomes stable and every partition is owned by exactly one live member.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from kohort.assignors import get_assignor
from kohort.broker.coordinator import (
    CommitPartition, CoordinatorConfig, HeartbeatParams, JoinParams, LeaveMember, LeaveParams, OffsetCommitParams,
    SyncParams,
)
from kohort.client.consumer.membership import (
    STABLE, Assign, Close, CommitFailedError, MemberConfig, Membership, MetadataUpdate, Poll, Raise,
    RequestMetadata, Response, Revoke, Send, Subscribe, Tick,
)
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kohort.protocol.messages.heartbeat import HeartbeatRequest
from kohort.protocol.messages.join_group import JoinGroupRequest
from kohort.protocol.messages.leave_group import LeaveGroupRequest
from kohort.protocol.messages.sync_group import SyncGroupRequest
from tests.helpers.coordinator_harness import Harness

STEP = 100          # ms between rounds of ticks/polls
SESSION, MAX_POLL, HB = 6000, 15000, 1000


class Node:
    def __init__(self, name: str, m: Membership):
        self.name, self.m = name, m
        self.alive = True
        self.slow_until = 0
        self.pending: list = []        # (reply id, tag) parked at the coordinator
        self.inbox: list = []          # events to deliver
        self.applied_gen = -1          # generation of the assignment `m.owned` came from
        self.poll_every = STEP         # the application polls this often (ms)
        self.next_poll = 0


class World:
    def __init__(self, strategy: str, topics: dict[str, int]):
        self.h = Harness(CoordinatorConfig(), now=1_000_000)
        self.strategy = strategy
        self.topics = dict(topics)
        self.meta_version = 1
        self.nodes: list[Node] = []
        self.accepted = 0

    @property
    def now(self) -> int:
        return self.h.now

    def add(self, poll_every: int = STEP) -> None:
        cfg = MemberConfig(group_id="g", session_timeout_ms=SESSION, rebalance_timeout_ms=MAX_POLL,
                           heartbeat_interval_ms=HB, retry_backoff_ms=100, request_timeout_ms=3000,
                           assignors=[get_assignor(self.strategy)])
        n = Node(f"n{len(self.nodes)}", Membership(cfg, self.now))
        n.poll_every = poll_every
        self.nodes.append(n)
        self.event(n, MetadataUpdate(self.meta_version, dict(self.topics)))
        self.event(n, Subscribe(tuple(sorted(self.topics))))

    # -- the wire --------------------------------------------------------------------------------------
    def event(self, n: Node, ev) -> None:
        if not n.alive:
            return
        acts = n.m.handle(ev, self.now)
        if isinstance(ev, Poll) and any(isinstance(a, Revoke) for a in acts):
            acts += n.m.handle(Poll(), self.now)        # as the driver: revoke, then poll again to join
        for a in acts:
            if isinstance(a, Send):
                self.send(n, a)
            elif isinstance(a, Assign):
                n.applied_gen = n.m.generation.generation_id
            elif isinstance(a, RequestMetadata):
                n.inbox.append(MetadataUpdate(self.meta_version + 1, dict(self.topics)))
            elif isinstance(a, Raise):
                raise AssertionError(f"{n.name}: unexpected error {a.error!r}")

    def send(self, n: Node, s: Send) -> None:
        req, h = s.request, self.h
        if isinstance(req, FindCoordinatorRequest):
            n.inbox.append(Response(s.tag, FindCoordinatorResponse(error_code=0, node_id=0, host="h", port=1,
                                                                   coordinators=[])))
            return
        r = h.reply()
        if isinstance(req, JoinGroupRequest):
            out = h.c.join_group(JoinParams(
                req.group_id, req.member_id, req.group_instance_id, client_id=n.name,
                session_timeout_ms=req.session_timeout_ms, rebalance_timeout_ms=req.rebalance_timeout_ms,
                protocol_type=req.protocol_type, protocols=tuple((p.name, p.metadata) for p in req.protocols),
                reason=req.reason), h.now, r)
        elif isinstance(req, SyncGroupRequest):
            out = h.c.sync_group(SyncParams(
                req.group_id, req.generation_id, req.member_id, req.group_instance_id, req.protocol_type,
                req.protocol_name, tuple((a.member_id, a.assignment) for a in req.assignments)), h.now, r)
        elif isinstance(req, HeartbeatRequest):
            out = h.c.heartbeat(HeartbeatParams(req.group_id, req.generation_id, req.member_id,
                                                req.group_instance_id), h.now, r)
        elif isinstance(req, LeaveGroupRequest):
            out = h.c.leave_group(LeaveParams(req.group_id, tuple(LeaveMember(m.member_id) for m in req.members)),
                                  h.now, r)
        else:
            raise AssertionError(f"unexpected request {req!r}")
        h.apply(out)
        n.pending.append((r, s.tag))

    def deliver(self) -> None:
        for n in self.nodes:
            if not n.alive:
                continue
            ready = [(r, tag) for r, tag in n.pending if r in self.h.responses]
            n.pending = [p for p in n.pending if p[0] not in self.h.responses]
            for r, tag in ready:
                n.inbox.append(Response(tag, self.h.responses[r][0]))
            while n.inbox:
                self.event(n, n.inbox.pop(0))

    # -- time ------------------------------------------------------------------------------------------
    def run(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.h.advance(min(STEP, end - self.now))
            self.round()

    def jump(self, ms: int) -> None:
        """The whole machine stalls (e.g. a GC pause or a suspended VM): time moves on at once."""
        self.h.advance(ms)
        self.round()

    def round(self) -> None:
        self.deliver()
        for n in self.nodes:
            if n.alive:
                self.event(n, Tick())
                if self.now >= n.slow_until and self.now >= n.next_poll:
                    n.next_poll = self.now + n.poll_every
                    self.event(n, Poll())
        self.deliver()
        self.check()

    # -- application actions -----------------------------------------------------------------------------
    def commit(self, n: Node) -> None:
        if not n.alive or not n.m.owned:
            return
        try:
            gen = n.m.commit_generation()
        except CommitFailedError:
            return
        topics: dict = {}
        for tp in sorted(n.m.owned):
            topics.setdefault(tp.topic, []).append(CommitPartition(tp.partition, 1))
        r = self.h.reply()
        self.h.apply(self.h.c.offset_commit(OffsetCommitParams(
            "g", tuple((t, tuple(ps)) for t, ps in topics.items()), gen.generation_id, gen.member_id), self.now, r))
        res = self.h.result(r)
        codes = {p.error_code for _, ps in res.topics for p in ps}
        if codes == {0}:
            g = self.h.group("g")
            assert g is not None and g.generation_id == gen.generation_id and gen.member_id in g.members, (
                f"fenced commit accepted: {gen} vs group generation {g and g.generation_id}")
            self.accepted += 1
        else:
            (code,) = codes
            n.m.commit_failed(code, gen, self.now)

    def grow(self, topic: str, by: int) -> None:
        self.topics[topic] += by
        self.meta_version += 1
        for n in self.nodes:
            n.inbox.append(MetadataUpdate(self.meta_version, dict(self.topics)))

    # -- invariants ----------------------------------------------------------------------------------------
    def check(self) -> None:
        seen: dict = {}
        g = self.h.group("g")
        members = set(g.members) if g is not None else set()
        current: dict = {}
        for n in self.nodes:
            if not n.alive:
                continue
            for tp in n.m.owned:
                key = (n.applied_gen, tp)
                assert key not in seen, f"{tp} owned by {seen[key]} and {n.name} in generation {n.applied_gen}"
                seen[key] = n.name
                # stronger: members the coordinator still has never share a partition (zombies it
                # removed may still think they own one until their next poll)
                if n.m.member_id in members:
                    assert tp not in current, f"{tp} owned by members {current[tp]} and {n.name} at once"
                    current[tp] = n.name

    def settle(self) -> None:
        live = [n for n in self.nodes if n.alive]
        for n in live:
            n.slow_until = 0
            n.poll_every = STEP
        want = {(t, p) for t, c in self.topics.items() for p in range(c)}
        for _ in range(1200):           # up to 120 s of quiet
            self.run(STEP)
            owned = [tp for n in live for tp in n.m.owned]
            # the coordinator must agree too: after a time jump it may have expired a member that has not
            # heartbeated since and so still believes itself Stable in the old generation
            g = self.h.group("g")
            agreed = g is not None and g.state.value == "Stable" and set(g.members) == {
                n.m.generation.member_id for n in live} and all(
                n.m.generation.generation_id == g.generation_id for n in live)
            if live and agreed and all(n.m.state == STABLE and not n.m.rejoin_needed for n in live) \
                    and len(owned) == len(set(owned)) and set(owned) == want:
                return
        raise AssertionError(
            f"not stable after 120 s: {[(n.name, n.m.state, n.m.generation, sorted(n.m.owned)) for n in live]}; "
            f"group {self.h.group('g')}")


ACTIONS = st.one_of(
    st.tuples(st.just("join"), st.sampled_from([STEP, 500, 1500, 4000])),
    st.tuples(st.just("leave"), st.integers(0, 7)),
    st.tuples(st.just("crash"), st.integers(0, 7)),
    st.tuples(st.just("slow"), st.integers(0, 7), st.integers(1000, 25000)),
    st.tuples(st.just("run"), st.integers(100, 8000)),
    st.tuples(st.just("jump"), st.integers(1000, 20000)),
    st.tuples(st.just("commit"), st.integers(0, 7)),
    st.tuples(st.just("grow"), st.sampled_from(["a", "b"]), st.integers(1, 2)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=st.sampled_from(["range", "cooperative-sticky"]), first_poll_every=st.sampled_from([STEP, 1500]),
       actions=st.lists(ACTIONS, min_size=1, max_size=25))
def test_members_and_coordinator_keep_the_invariants(strategy, first_poll_every, actions):
    w = World(strategy, {"a": 4, "b": 3})
    w.add(first_poll_every)
    for act in actions:
        kind = act[0]
        live = [n for n in w.nodes if n.alive]
        if kind == "join" and len(live) < 6:
            w.add(act[1])
        elif kind in ("leave", "crash", "slow", "commit") and live:
            n = live[act[1] % len(live)]
            if kind == "leave":
                w.event(n, Close())
                w.deliver()
                n.alive = False
            elif kind == "crash":
                n.alive = False
            elif kind == "slow":
                n.slow_until = w.now + act[2]
            else:
                w.commit(n)
        elif kind == "run":
            w.run(act[1])
        elif kind == "jump":
            w.jump(act[1])
        elif kind == "grow":
            w.grow(act[1], act[2])
        w.check()
    if not any(n.alive for n in w.nodes):
        w.add()
    w.settle()
    for n in w.nodes:
        if n.alive:
            w.commit(n)
    assert w.accepted >= 1
