"""The share group coordinator (broker/share/group.py) and the simple assignor (broker/share/assignor.py),
pure, with a fake clock: every heartbeat transition and error, share-state initialization, leaves and
session expiry, describe, delete, records in Kafka's order and replay through their bytes; the
assignor's sharing and balance (hypothesis)."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kohort.broker.share import assignor
from kohort.broker.share.group import (
    CancelTimer, SetTimer, ShareGroupConfig, ShareGroupCoordinator, session_timer_key,
)
from kohort.errors import ErrorCode
from kohort.protocol import share_group_records as R
from kohort.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as HB

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {"t": (T1, 3), "u": (T2, 2)}
NAMES = {T1: "t", T2: "u"}
CFG = ShareGroupConfig(assignment_interval_ms=0)       # targets recomputed at once (as Kafka before 4.3)


def hb(member, epoch, topics=None, group="g", rack=None):
    return HB(group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
              subscribed_topic_names=None if topics is None else list(topics))


def kinds(out):
    return [(type(k).__name__.replace("ShareGroup", "").replace("Key", ""), v is None) for k, v in out.records]


def joined(c, member, topics=("t",), now=0, init=True):
    out = c.heartbeat(hb(member, 0, topics), TOPICS, now)
    assert out.response.error_code == 0
    if init:
        for i in out.initialize:
            c.state_initialized(i.group_id, i.partitions, TOPICS, now)
    return out


def assigned(resp):
    return {tp.topic_id: sorted(tp.partitions) for tp in resp.assignment.topic_partitions}


# -- heartbeat ---------------------------------------------------------------------------------------
def test_first_join_creates_the_group_and_asks_for_share_state():
    c = ShareGroupCoordinator(CFG)
    out = c.heartbeat(hb("a", 0, ["t"]), TOPICS, 100, client_id="cid", client_host="/127.0.0.1")
    r = out.response
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "a", 1, 5000)
    assert r.assignment is not None and r.assignment.topic_partitions == []      # nothing initialized yet
    assert kinds(out) == [("MemberMetadata", False), ("Metadata", False), ("StatePartitionMetadata", False),
                          ("TargetAssignmentMember", False), ("TargetAssignmentMetadata", False),
                          ("CurrentMemberAssignment", False)]
    init, = out.initialize
    assert (init.group_id, init.state_epoch, init.partitions) == ("g", 1, {T1: frozenset({0, 1, 2})})
    assert out.timers == [SetTimer(session_timer_key("g", "a"), 100 + 45000)]
    assert c.groups["g"].initializing == {T1: ("t", frozenset({0, 1, 2}))}


def test_partitions_arrive_once_initialized():
    c = ShareGroupCoordinator(CFG)
    out = c.heartbeat(hb("a", 0, ["t"]), TOPICS, 0)
    init = out.initialize[0]
    out = c.state_initialized("g", init.partitions, TOPICS, 10)
    assert kinds(out) == [("StatePartitionMetadata", False), ("Metadata", False)]
    assert c.groups["g"].initialized == {T1: ("t", frozenset({0, 1, 2}))} and not c.groups["g"].initializing
    out = c.heartbeat(hb("a", 1), TOPICS, 20)
    assert out.response.member_epoch == 2 and assigned(out.response) == {T1: [0, 1, 2]}
    # a quiet heartbeat: no records, no assignment in the answer
    out = c.heartbeat(hb("a", 2), TOPICS, 30)
    assert out.records == [] and out.response.assignment is None and out.response.member_epoch == 2
    # a second initialization report changes nothing
    assert c.state_initialized("g", init.partitions, TOPICS, 40).records == []
    assert c.state_initialized("nope", init.partitions, TOPICS, 40).records == []


def test_members_share_partitions_when_there_are_more_members_than_partitions():
    c = ShareGroupCoordinator(CFG)
    joined(c, "a", ("u",))
    for m in ("b", "c"):
        joined(c, m, ("u",))
    epochs = {}
    for m in ("a", "b", "c"):
        r = c.heartbeat(hb(m, c.groups["g"].members[m].member_epoch), TOPICS, 50).response
        epochs[m] = r.member_epoch
    g = c.groups["g"]
    counts = sorted(len(m.assigned.get(T2, ())) for m in g.members.values())
    assert counts == [1, 1, 2]
    sharers = {p: sum(p in m.assigned.get(T2, ()) for m in g.members.values()) for p in (0, 1)}
    assert sharers == {0: 2, 1: 2}
    assert set(epochs.values()) == {g.assignment_epoch}


@pytest.mark.parametrize("req,reason", [
    (HB(group_id="", member_id="a", member_epoch=0, subscribed_topic_names=["t"]), "GroupId"),
    (HB(group_id="g", member_id="", member_epoch=0, subscribed_topic_names=["t"]), "MemberId can't be empty"),
    (HB(group_id="g", member_id="x" * 37, member_epoch=0, subscribed_topic_names=["t"]), "longer than 36"),
    (HB(group_id="g", member_id="a", member_epoch=0, rack_id="", subscribed_topic_names=["t"]), "RackId"),
    (HB(group_id="g", member_id="a", member_epoch=-2), "greater than or equal to -1"),
    (HB(group_id="g", member_id="a", member_epoch=0), "SubscribedTopicNames"),
    (HB(group_id="g", member_id="a", member_epoch=0, subscribed_topic_names=[]), "SubscribedTopicNames"),
])
def test_invalid_requests(req, reason):
    out = ShareGroupCoordinator(CFG).heartbeat(req, TOPICS, 0)
    assert out.response.error_code == ErrorCode.INVALID_REQUEST and reason in out.response.error_message
    assert out.records == []


def test_group_and_member_errors():
    c = ShareGroupCoordinator(ShareGroupConfig(max_size=2, assignment_interval_ms=0))
    assert c.heartbeat(hb("a", 3), TOPICS, 0).response.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert "g" not in c.groups
    joined(c, "a")
    c.heartbeat(hb("a", 1), TOPICS, 0)                            # epoch 2 now
    assert c.heartbeat(hb("zz", 1), TOPICS, 0).response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert c.heartbeat(hb("a", 7), TOPICS, 0).response.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    m = c.groups["g"].members["a"]
    assert (m.member_epoch, m.previous_member_epoch) == (2, 1)
    assert c.heartbeat(hb("a", 1), TOPICS, 0).response.error_code == 0           # the previous epoch is fine
    joined(c, "b")
    out = c.heartbeat(hb("c", 0, ["t"]), TOPICS, 0)
    assert out.response.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED and "c" not in c.groups["g"].members
    assert c.heartbeat(hb("zz", -1), TOPICS, 0).response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert c.heartbeat(hb("a", -1, group="other"), TOPICS, 0).response.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    with pytest.raises(ValueError):
        ShareGroupConfig(session_timeout_ms=1000, heartbeat_interval_ms=1000)


def test_rejoin_with_epoch_zero_keeps_the_member():
    c = ShareGroupCoordinator(CFG)
    joined(c, "a")
    c.heartbeat(hb("a", 1), TOPICS, 0)
    out = c.heartbeat(hb("a", 0, ["t"]), TOPICS, 10)
    assert out.response.error_code == 0 and out.response.member_epoch == c.groups["g"].assignment_epoch
    assert assigned(out.response) == {T1: [0, 1, 2]}


def test_subscription_and_metadata_changes_bump_the_group_epoch():
    c = ShareGroupCoordinator(CFG)
    joined(c, "a")
    e = c.groups["g"].group_epoch
    out = c.heartbeat(hb("a", c.groups["g"].members["a"].member_epoch, ["t", "u"]), TOPICS, 0)
    assert c.groups["g"].group_epoch == e + 1 and out.initialize[0].partitions == {T2: frozenset({0, 1})}
    e = c.groups["g"].group_epoch
    grown = dict(TOPICS, t=(T1, 4))
    out = c.heartbeat(hb("a", c.groups["g"].members["a"].member_epoch), grown, 0)
    assert c.groups["g"].group_epoch == e + 1 and out.initialize[0].partitions == {T1: frozenset({3})}


def test_the_target_is_recomputed_at_most_once_per_assignment_interval():
    c = ShareGroupCoordinator(ShareGroupConfig(assignment_interval_ms=1000))
    joined(c, "a", ("u",), now=0)                     # the first target at once (empty: nothing initialized)
    g = c.groups["g"]
    assert (g.assignment_epoch, g.assignment_timestamp_ms) == (1, 0)
    out = c.heartbeat(hb("a", 1), TOPICS, 500)        # initialized meanwhile: group epoch 2, too early
    assert g.group_epoch == 2 and g.assignment_epoch == 1 and out.response.assignment is None
    out = c.heartbeat(hb("a", 1), TOPICS, 1000)
    assert g.assignment_epoch == 2 and assigned(out.response) == {T2: [0, 1]}
    meta = [v for k, v in out.records if isinstance(k, R.ShareGroupTargetAssignmentMetadataKey)]
    assert meta[0].assignment_timestamp == 1000
    # a member joining inside the interval gets the current target epoch and nothing yet
    out = c.heartbeat(hb("b", 0, ["u"]), TOPICS, 1500)
    assert out.response.member_epoch == 2 and assigned(out.response) == {}
    out = c.heartbeat(hb("b", 2), TOPICS, 2000)
    assert out.response.member_epoch == 3 and assigned(out.response) == {T2: [1]}
    assert ShareGroupCoordinator().config.assignment_interval_ms == 1000          # Kafka 4.3's default
    with pytest.raises(ValueError):
        ShareGroupConfig(assignment_interval_ms=-1)


def test_leave_and_session_expiry_remove_the_member():
    c = ShareGroupCoordinator(CFG)
    joined(c, "a")
    joined(c, "b")
    e = c.groups["g"].group_epoch
    out = c.heartbeat(hb("a", -1), TOPICS, 0)
    assert (out.response.error_code, out.response.member_epoch) == (0, -1)
    assert kinds(out) == [("CurrentMemberAssignment", True), ("TargetAssignmentMember", True),
                          ("MemberMetadata", True), ("Metadata", False)]
    assert out.timers == [CancelTimer(session_timer_key("g", "a"))]
    assert c.groups["g"].group_epoch == e + 1
    out = c.session_expired("g", "b", 45000)
    assert ("MemberMetadata", True) in kinds(out) and c.groups["g"].state == "Empty"
    assert c.session_expired("g", "b", 45000).records == []


def test_describe_and_delete():
    c = ShareGroupCoordinator(CFG)
    joined(c, "a", now=0)
    c.heartbeat(hb("a", 1), TOPICS, 0)
    d, missing = c.describe(["g", "x"], NAMES)
    assert (d.group_state, d.assignor_name, d.members[0].member_id) == ("Stable", "simple", "a")
    assert d.members[0].assignment.topic_partitions[0].topic_name == "t"
    assert (missing.error_code, missing.group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
    assert c.delete_group("g")[0] == ErrorCode.NON_EMPTY_GROUP
    c.heartbeat(hb("a", -1), TOPICS, 0)
    err, recs = c.delete_group("g")
    assert err is None and all(v is None for _, v in recs) and "g" not in c.groups
    assert c.delete_group("g")[0] == ErrorCode.GROUP_ID_NOT_FOUND


def test_replay_of_the_records_rebuilds_the_groups():
    c = ShareGroupCoordinator(CFG)
    log = []

    def run(out):
        log.extend(out.records)
        return out
    run(c.heartbeat(hb("a", 0, ["t"]), TOPICS, 0, client_id="x", client_host="/h"))
    run(c.state_initialized("g", {T1: frozenset({0, 1, 2})}, TOPICS, 0))
    run(c.heartbeat(hb("b", 0, ["t", "u"], rack="r1"), TOPICS, 0))
    for i in list(c.groups["g"].initializing.items()):
        run(c.state_initialized("g", {i[0]: i[1][1]}, TOPICS, 0))
    run(c.heartbeat(hb("a", c.groups["g"].members["a"].member_epoch), TOPICS, 0))
    run(c.heartbeat(hb("b", c.groups["g"].members["b"].member_epoch), TOPICS, 0))
    run(c.heartbeat(hb("c", 0, ["t"]), TOPICS, 0))
    run(c.heartbeat(hb("c", -1), TOPICS, 0))
    again = ShareGroupCoordinator(CFG)
    for k, v in log:
        again.replay(*R.decode(R.encode_key(k), R.encode_value(v)))
    a, b = c.groups["g"], again.groups["g"]
    for attr in ("group_epoch", "metadata_hash", "assignment_epoch", "assignment_timestamp_ms", "targets",
                 "initialized", "initializing"):
        assert getattr(a, attr) == getattr(b, attr), attr
    assert a.members == b.members
    assert again.on_loaded(5) == [SetTimer(session_timer_key("g", m), 5 + 45000) for m in b.members]


# -- the simple assignor ------------------------------------------------------------------------------------
def test_simple_assignor_spreads_slots_with_ceil_steps():
    subs = {m: frozenset({T1}) for m in ("a", "b", "c")}
    out = assignor.assign(subs, {T1: frozenset({0, 1})}, {})
    assert sorted(len(a.get(T1, ())) for a in out.values()) == [1, 1, 2]
    out = assignor.assign({"a": frozenset({T1})}, {T1: frozenset({0, 1, 2})}, {})
    assert out == {"a": {T1: frozenset({0, 1, 2})}}
    assert assignor.assign({}, {T1: frozenset({0})}, {}) == {}


def test_simple_assignor_is_sticky_within_balance_and_drops_unsubscribed():
    subs = {"a": frozenset({T1}), "b": frozenset({T1})}
    cur = {"a": {T1: frozenset({2, 3})}, "b": {T1: frozenset({0, 1})}}
    assert assignor.assign(subs, {T1: frozenset(range(4))}, cur) == cur
    # b unsubscribes from T1 and subscribes to T2: mixed subscriptions are balanced per topic
    subs = {"a": frozenset({T1}), "b": frozenset({T2})}
    out = assignor.assign(subs, {T1: frozenset(range(4)), T2: frozenset({0})}, cur)
    assert out == {"a": {T1: frozenset(range(4))}, "b": {T2: frozenset({0})}}


@settings(max_examples=200, deadline=None)
@given(n_members=st.integers(1, 8), n_parts=st.integers(1, 8), seed=st.randoms())
def test_simple_assignor_every_partition_assigned_and_balanced(n_members, n_parts, seed):
    members = [f"m{i}" for i in range(n_members)]
    parts = frozenset(range(n_parts))
    cur = {m: {T1: frozenset(p for p in parts if seed.random() < 0.4)} for m in members}
    out = assignor.assign({m: frozenset({T1}) for m in members}, {T1: parts}, cur)
    sharing = -(-n_members // n_parts)
    counts = [len(out[m].get(T1, ())) for m in members]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == sharing * n_parts
    for p in parts:
        assert sum(p in out[m].get(T1, ()) for m in members) == sharing
