"""The pieces that tie kohort's group machines together (kohort.broker.coordinator.registry, machine,
serde, offsets), with the real pure machines and a fake clock: which machine owns a group id, timers
and append tokens routed by the arming machine's namespace (also inside another machine's Outcome, as
an online upgrade makes them), the serdes' record kinds, and the offsets store kept apart from the
groups."""
from __future__ import annotations

from kohort.broker.coordinator import ClassicGroupCoordinator, CommitPartition, GroupType
from kohort.broker.coordinator.consumer_group import ConsumerGroupConfig, ConsumerGroups, ConsumerHeartbeatParams
from kohort.broker.coordinator.consumer_group_model import ConsumerRecordKind
from kohort.broker.coordinator.machine import AppendToken
from kohort.broker.coordinator.model import Append, CancelTimer, SetTimer
from kohort.broker.coordinator.registry import GroupRegistry
from kohort.broker.coordinator.serde import ClassicRecordKind, ClassicRecordSerde, ConsumerGroupRecordSerde
from kohort.protocol.consumer_protocol import (
    ConsumerProtocolAssignment as Asg, ConsumerProtocolSubscription as Sub, decode_subscription,
    encode_assignment, encode_subscription,
)

from tests.helpers.coordinator_harness import Harness

TOPICS = {"t": 4}


def _sub() -> bytes:
    return encode_subscription(Sub(topics=["t"], user_data=None, owned_partitions=[]))


def _stable_classic_group(h: Harness, gid: str = "g") -> str:
    """A classic group of protocol type "consumer", Stable with one member owning t-0..3."""
    r, mid = h.join_single(gid, protocols=(("range", _sub()),))
    h.advance(h.c.config.group_initial_rebalance_delay_ms)      # the initial rebalance delay
    gen = h.result(r).generation_id
    asg = encode_assignment(Asg(assigned_partitions=[Asg.TopicPartition(topic="t", partitions=[0, 1, 2, 3])],
                                user_data=None))
    assert h.result(h.sync(gid, gen, mid, ((mid, asg),))).error_code == 0
    return mid


def _machines():
    h = Harness(decoder=lambda m: decode_subscription(m).topics)
    cfg = ConsumerGroupConfig()
    consumer = ConsumerGroups(cfg, classic_group_active=lambda gid: h.c.groups.get(gid) is not None,
                              classic_upgrade=lambda gid, now: h.c.release_for_upgrade(gid, now, cfg.max_size),
                              classic_downgrade=lambda snap, now: h.c.adopt_from_consumer(snap, now))
    return h, consumer, GroupRegistry(h.c, consumer)


def test_registry_knows_each_group_type_and_its_owner():
    h, consumer, reg = _machines()
    _stable_classic_group(h, "classic")
    h.commit("simple", {("t", 0): 5})                    # an admin commit makes a simple classic group
    out = consumer.heartbeat(ConsumerHeartbeatParams("new", "m1", 0, subscribed_topic_names=("t",), owned={},
                                                     rebalance_timeout_ms=1000), TOPICS, h.now, "r")
    for a in out.appends:
        consumer.on_append_done(a.token, 0, h.now)
    assert reg.type_of("classic") is GroupType.CLASSIC and reg.owner("classic") is h.c
    assert reg.type_of("simple") is GroupType.CLASSIC
    assert reg.type_of("new") is GroupType.CONSUMER and reg.owner("new") is consumer
    assert reg.type_of("nobody") is None and reg.owner("nobody") is h.c
    assert reg.group_ids() == {"classic", "simple", "new"}
    assert reg.serves(GroupType.CONSUMER) and not reg.serves(GroupType.SHARE)
    assert reg.assignor_name("new") == "uniform" and reg.assignor_name("classic") == "range"
    assert dict(reg.committed_offsets("simple"))[("t", 0)].offset == 5
    # offsets are validated by the group of the id, whatever machine owns it
    assert reg.other_group("new") is consumer.groups["new"] and reg.other_group("classic") is None
    assert h.commit_errors(h.commit("classic", {("t", 0): 1}, 1, "x", api_version=9)) == {("t", 0): 25}
    assert h.commit_errors(h.commit("new", {("t", 0): 1}, 99, "m1", api_version=9)) == {("t", 0): 113}
    assert "new" not in h.c.groups                                        # no classic group stands in for it
    h.c.phase = "loading"
    assert reg.owner("new") is h.c
    assert h.commit_errors(h.commit("new", {("t", 0): 1}, 99, "m1", api_version=9)) == {("t", 0): 14}
    assert not GroupRegistry(h.c).serves(GroupType.CONSUMER)


def test_timers_and_tokens_carry_the_namespace_of_the_machine_that_made_them():
    """An online upgrade: the consumer machine's step releases the classic group, so one Outcome holds
    both machines' timers and appends; each says which machine it belongs to."""
    h, consumer, reg = _machines()
    mid = _stable_classic_group(h)
    out = consumer.heartbeat(ConsumerHeartbeatParams("g", "n", 0, subscribed_topic_names=("t",), owned={},
                                                     rebalance_timeout_ms=1000), TOPICS, h.now, "r")
    assert reg.type_of("g") is GroupType.CONSUMER
    namespaces = {(type(t).__name__, t.namespace) for t in out.timers}
    assert ("CancelTimer", "classic") in namespaces        # the classic member's heartbeat timer
    assert ("SetTimer", "consumer") in namespaces          # the members' session timers
    assert CancelTimer(("heartbeat", "g", mid)) in out.timers     # the namespace is not part of equality
    tokens = [a.token for a in out.appends]
    assert {t.namespace for t in tokens} == {"classic", "consumer"}
    for a in out.appends:                                   # each machine completes only its own tokens
        owner = h.c if a.token.namespace == "classic" else consumer
        owner.on_append_done(a.token, 0, h.now)
        assert a.token not in owner.pending_tokens()
    assert not h.c.pending_tokens() and not consumer.pending_tokens()
    assert all(isinstance(t, (SetTimer, CancelTimer)) and t.namespace in ("classic", "consumer") for t in out.timers)
    assert all(isinstance(a, Append) and isinstance(a.token, AppendToken) for a in out.appends)


def test_each_machine_declares_its_record_kinds():
    classic, consumer = ClassicRecordSerde(), ConsumerGroupRecordSerde()
    assert ClassicGroupCoordinator.SERDE == classic and ConsumerGroups.SERDE == consumer
    assert not classic.KINDS & consumer.KINDS
    assert set(classic.KINDS) == {ClassicRecordKind.LEGACY_OFFSET_COMMIT, ClassicRecordKind.OFFSET_COMMIT,
                                  ClassicRecordKind.GROUP_METADATA} == {0, 1, 2}
    assert set(consumer.KINDS) == set(ConsumerRecordKind) == {3, 5, 6, 7, 8}
    assert ClassicGroupCoordinator.TIMER_NAMESPACE != ConsumerGroups.TIMER_NAMESPACE


def test_offsets_live_apart_from_the_groups():
    h = Harness()
    h.commit("s", {("t", 0): 5, ("t", 1): 6})
    store = h.c.offsets
    assert {tp: co.offset for tp, co in store.of("s").items()} == {("t", 0): 5, ("t", 1): 6}
    first = store.of("s")[("t", 0)]
    h.commit("s", {("t", 0): CommitPartition(0, 7)})
    store.remove("s", ("t", 0), first)                      # committed again since: kept
    assert store.of("s")[("t", 0)].offset == 7
    assert [r.partition for r in store.tombstones("s")] == [0, 1]
    store.remove("s", ("t", 0))
    store.remove("s", ("t", 1))
    assert not store.has("s") and list(store.groups()) == []
