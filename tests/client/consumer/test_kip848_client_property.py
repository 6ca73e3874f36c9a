"""kohort's KIP-848 client members (membership_848.ConsumerMembership) paired with kohort broker's pure
consumer-group coordinator (broker/coordinator/consumer_group.py) in memory, driven by a hypothesis
rule machine: members join, poll (their rebalance callbacks run then), heartbeat, lose answers,
leave, crash (their session expires), and topics grow. Between them only the wire shapes travel
(ConsumerGroupHeartbeat requests and responses, topics by id).

Invariants: a partition is never consumed by two live members at once (what the application holds
between its callbacks), fenced epochs are refused, and in the end every member converges to its target
(all STABLE at the group epoch, the partitions split exactly)."""
from __future__ import annotations

import uuid

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kohort.broker.coordinator.consumer_group import FENCED_MEMBER_EPOCH, ConsumerHeartbeatParams
from kohort.client.consumer.membership import (
    Assign, Close, MemberConfig, MetadataUpdate, Poll, Raise, RequestFailed, RequestMetadata, Response, Revoke, Send,
    Subscribe, Tick,
)
from kohort.client.consumer.membership_848 import STABLE, ConsumerMembership
from kohort.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest as HBReq, ConsumerGroupHeartbeatResponse as HBResp,
)
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from tests.broker.coordinator.test_consumer_group_state import G, Harness, parts

TOPIC_IDS = {t: uuid.uuid5(uuid.NAMESPACE_DNS, t) for t in ("t", "u", "v")}
NAMES = {v: k for k, v in TOPIC_IDS.items()}
SESSION_MS, INTERVAL_MS = 6000, 1000


class Node:
    """One consumer: its membership machine, the requests it has in flight, and what its
    application holds (the partitions between on_partitions_assigned and revoked/lost)."""

    def __init__(self, mid: str, instance: str | None, topics: tuple):
        cfg = MemberConfig(group_id=G, group_instance_id=instance, rebalance_timeout_ms=600000,
                           retry_backoff_ms=100, auto_commit_interval_ms=None)
        self.m = ConsumerMembership(cfg, mid, 0)
        self.mid = mid
        self.inflight: list[Send] = []
        self.callbacks: list = []          # Revoke/Assign of a poll, not yet run by the application
        self.holding: set = set()
        self.topics = topics


def to_params(req: HBReq) -> ConsumerHeartbeatParams:
    owned = None if req.topic_partitions is None else {
        NAMES[tp.topic_id]: frozenset(tp.partitions) for tp in req.topic_partitions}
    return ConsumerHeartbeatParams(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch, instance_id=req.instance_id,
        rack_id=req.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names),
        subscribed_topic_regex=req.subscribed_topic_regex, server_assignor=req.server_assignor, owned=owned)


def to_response(r) -> HBResp:
    a = None
    if r.assignment is not None:
        a = HBResp.Assignment(topic_partitions=[HBResp.Assignment.TopicPartitions(
            topic_id=TOPIC_IDS[t], partitions=sorted(ps)) for t, ps in sorted(r.assignment.items())])
    return HBResp(throttle_time_ms=0, error_code=r.error_code, error_message=r.error_message,
                  member_id=r.member_id, member_epoch=r.member_epoch, heartbeat_interval_ms=r.heartbeat_interval_ms,
                  assignment=a)


class ClientAndBrokerMachines(RuleBasedStateMachine):
    @initialize(topics=st.dictionaries(st.sampled_from(["t", "u", "v"]), st.integers(1, 5), min_size=1),
                assignor=st.sampled_from(["uniform", "range"]))
    def setup(self, topics, assignor):
        self.h = Harness(topics=topics, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS)
        self.assignor = assignor
        self.nodes: dict[str, Node] = {}
        self.n = 0
        self.meta = 0

    # -- the application side and the network, by hand ---------------------------------------------------
    def _metadata(self, node: Node) -> None:
        self.meta += 1
        node.m.handle(MetadataUpdate(self.meta, dict(self.h.topics), {t: TOPIC_IDS[t] for t in self.h.topics}),
                      self.h.now)

    def _act(self, node: Node, out: list) -> None:
        """Requests go out (in flight until delivered); callbacks wait for the application."""
        for a in out:
            if isinstance(a, Send):
                node.inflight.append(a)
            elif isinstance(a, (Revoke, Assign)):
                node.callbacks.append(a)
            elif isinstance(a, RequestMetadata):
                self._metadata(node)
            elif isinstance(a, Raise):
                raise AssertionError(f"{node.mid}: {a.error!r}")

    def _run_callbacks(self, node: Node) -> None:
        """The application runs the callbacks of its last poll, then the driver polls again."""
        todo, node.callbacks = node.callbacks, []
        for a in todo:
            tps = {(tp.topic, tp.partition) for tp in (a.partitions if isinstance(a, Revoke) else a.added)}
            if isinstance(a, Revoke):
                assert tps <= node.holding, (a, node.holding)
                node.holding -= tps
            else:
                assert tps.isdisjoint(node.holding)
                node.holding |= tps
                assert node.holding == {(tp.topic, tp.partition) for tp in a.assignment}
        self._act(node, node.m.handle(Poll(), self.h.now))

    def _poll(self, node: Node) -> None:
        """The application polls: it first finishes callbacks left from before (one poll() call)."""
        if node.callbacks:
            self._run_callbacks(node)
        else:
            self._act(node, node.m.handle(Poll(), self.h.now))

    def _deliver(self, node: Node, lose: bool = False) -> None:
        while node.inflight:
            s = node.inflight.pop(0)
            if isinstance(s.request, FindCoordinatorRequest):
                body = FindCoordinatorResponse(error_code=0, node_id=0, host="h", port=1, coordinators=[])
                self._act(node, node.m.handle(Response(s.tag, body), self.h.now))
                continue
            r = self._broker(s.request)
            if lose:
                self._act(node, node.m.handle(RequestFailed(s.tag, "lost"), self.h.now))
            else:
                self._act(node, node.m.handle(Response(s.tag, to_response(r)), self.h.now))

    def _broker(self, req: HBReq):
        out = self.h.c.heartbeat(to_params(req), self.h.topics, self.h.now, "r")
        responses = self.h.store(out)
        assert len(responses) == 1
        return responses[0].result

    def _step(self, node: Node, lose=False) -> None:
        self._act(node, node.m.handle(Tick(), self.h.now))
        self._deliver(node, lose)

    # -- rules --------------------------------------------------------------------------------------------
    @rule(static=st.booleans())
    def add_member(self, static):
        if len(self.nodes) >= 5:
            return
        self.n += 1
        node = Node(f"m{self.n}", f"i{self.n}" if static else None, tuple(sorted(self.h.topics)))
        self.nodes[node.mid] = node
        self._metadata(node)
        node.m.handle(Subscribe(node.topics), self.h.now)
        self._poll(node)
        self._deliver(node)
        self._poll(node)
        self._deliver(node)

    @precondition(lambda self: self.nodes)
    @rule(data=st.data())
    def poll(self, data):
        node = self.nodes[data.draw(st.sampled_from(sorted(self.nodes)))]
        self._poll(node)
        self._deliver(node)

    @precondition(lambda self: any(n.callbacks for n in self.nodes.values()))
    @rule(data=st.data())
    def callbacks_finish(self, data):
        node = self.nodes[data.draw(st.sampled_from(sorted(m for m, n in self.nodes.items() if n.callbacks)))]
        self._run_callbacks(node)
        self._deliver(node)

    @precondition(lambda self: self.nodes)
    @rule(data=st.data(), lose=st.booleans())
    def heartbeat(self, data, lose):
        node = self.nodes[data.draw(st.sampled_from(sorted(self.nodes)))]
        self._step(node, lose)

    @precondition(lambda self: self.nodes)
    @rule(ms=st.integers(1, 3000))
    def time_passes(self, ms):
        """Time passes; every live member's due heartbeats arrive (sessions stay alive)."""
        self.h.now += ms
        for node in self.nodes.values():
            self._step(node)
        self.h.advance(0)

    @precondition(lambda self: self.nodes)
    @rule(data=st.data())
    def close(self, data):
        node = self.nodes.pop(data.draw(st.sampled_from(sorted(self.nodes))))
        if node.callbacks:
            self._run_callbacks(node)        # close() runs inside the application thread, after them
        self._act(node, node.m.handle(Close(leave=True), self.h.now))
        self._run_callbacks(node)
        self._deliver(node)
        assert not node.holding

    @precondition(lambda self: self.nodes)
    @rule(data=st.data())
    def crash(self, data):
        """SIGKILL: the process is gone (holds nothing); its session expires while others heartbeat."""
        node = self.nodes.pop(data.draw(st.sampled_from(sorted(self.nodes))))
        end = self.h.now + SESSION_MS + 1
        while self.h.now < end:
            self.h.now = min(end, self.h.now + INTERVAL_MS)
            for other in self.nodes.values():
                self._step(other)
            self.h.advance(0)
        assert G not in self.h.c.groups or node.mid not in self.h.group.members

    @precondition(lambda self: self.nodes)
    @rule(data=st.data(), delta=st.sampled_from([1, 2]))
    def fenced_epochs_refused(self, data, delta):
        node = self.nodes[data.draw(st.sampled_from(sorted(self.nodes)))]
        if G not in self.h.c.groups or node.mid not in self.h.group.members:
            return
        m = self.h.group.members[node.mid]
        if m.member_epoch <= 0:
            return
        before = (m.member_epoch, dict(m.assigned), self.h.group.group_epoch)
        r = self._broker(HBReq(group_id=G, member_id=node.mid, member_epoch=m.member_epoch + delta,
                               instance_id=node.m.cfg.group_instance_id, topic_partitions=[]))
        assert r.error_code == FENCED_MEMBER_EPOCH
        assert before == (m.member_epoch, dict(m.assigned), self.h.group.group_epoch)
        # the client, told so, gives its partitions up as lost and rejoins with epoch 0
        self._deliver(node)              # nothing in flight: the broker's answer is the only one
        if node.m.state == STABLE and node.m.member_epoch == m.member_epoch and m.instance_id is None:
            # (a dynamic member: a static one still registered under its instance id would be
            # answered UNRELEASED_INSTANCE_ID on rejoining, as by Kafka)
            self._act(node, node.m.handle(Response(("heartbeat848", m.member_epoch), to_response(r)), self.h.now))
            self._poll(node)             # (may first finish older callbacks)
            if not node.callbacks:
                self._poll(node)
            self._run_callbacks(node)    # on_partitions_lost
            assert not node.holding and node.m.member_epoch == 0
            self._deliver(node)

    @rule(topic=st.sampled_from(["t", "u", "v"]), more=st.integers(1, 3))
    def add_partitions(self, topic, more):
        if topic in self.h.topics:
            self.h.topics[topic] += more
            for node in self.nodes.values():
                self._metadata(node)

    # -- invariants ---------------------------------------------------------------------------------------
    @invariant()
    def a_partition_is_never_held_by_two_members(self):
        if not hasattr(self, "h"):
            return
        seen = {}
        for node in self.nodes.values():
            for tp in node.holding:      # (topic, partition)
                assert tp not in seen, f"{tp} held by {seen[tp]} and {node.mid}"
                seen[tp] = node.mid

    def teardown(self):
        if not getattr(self, "nodes", None):
            return
        for _ in range(6 * len(self.nodes) + 6):
            self.h.now += INTERVAL_MS
            for node in self.nodes.values():
                self._poll(node)
                self._deliver(node)
                self._step(node)
            self.h.advance(0)
            self.a_partition_is_never_held_by_two_members()
        g = self.h.group
        total = set()
        for node in self.nodes.values():
            m = g.members[node.mid]
            assert node.m.state == STABLE, (node.mid, node.m.state)
            assert node.m.member_epoch == m.member_epoch == g.group_epoch == g.assignment_epoch
            held = set(node.holding)
            assert held == parts(g.target[node.mid]) == parts(m.assigned), node.mid
            total |= held
        assert total == {(t, p) for t in self.h.topics for p in range(self.h.topics[t])}


ClientAndBrokerMachines.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestClientAndBrokerMachines = ClientAndBrokerMachines.TestCase


def test_a_revoking_member_is_not_acknowledged_before_its_callbacks_ran():
    """The hand-over the machine above must get right, step by step: m1 is told to give partition 1
    to m2; heartbeats go on while m1's revocation callback has not run yet, and m2 gets the
    partition only after it has."""
    s = ClientAndBrokerMachines()
    s.setup(topics={"t": 2}, assignor="uniform")
    s.add_member(static=False)
    m1 = s.nodes["m1"]
    s._poll(m1)
    s._run_callbacks(m1)
    s._deliver(m1)
    assert m1.holding == {("t", 0), ("t", 1)}
    s.add_member(static=False)
    m2 = s.nodes["m2"]
    s.time_passes(1000)                       # m1 hears it must give one partition up
    s._poll(m1)
    assert [type(a).__name__ for a in m1.callbacks] == ["Revoke", "Assign"]
    for _ in range(3):                        # its callback is slow: heartbeats go on meanwhile
        s.time_passes(1000)
        s._poll(m2)
        s._run_callbacks(m2)
        s.a_partition_is_never_held_by_two_members()
        assert not m2.holding
    s._run_callbacks(m1)
    s._deliver(m1)
    s.time_passes(1000)
    s._poll(m2)
    s._run_callbacks(m2)
    assert m1.holding | m2.holding == {("t", 0), ("t", 1)} and len(m2.holding) == 1
    s.a_partition_is_never_held_by_two_members()
