"""The pure classic group coordinator (kohort.broker.coordinator) driven by a fake runtime with a
fake clock: every state transition, every error code where Kafka returns it, persistence gating,
the adaptive initial rebalance delay, replay, and a hypothesis state machine for the safety
invariants (one owner per partition per generation; no commit from a fenced generation)."""
from __future__ import annotations

import pytest

from kohort.broker.coordinator import (
    CommitPartition, CoordinatorConfig, GroupRecord, GroupState, LeaveMember, OffsetDeleteParams,
    OffsetFetchParams, OffsetRecord, heartbeat_key, initial_delay_key, map_append_error,
)
from kohort.broker.coordinator import codes as C
from kohort.errors import ConfigError
from kohort.protocol.consumer_protocol import (
    ConsumerProtocolSubscription, decode_subscription, encode_subscription,
)

from tests.helpers.coordinator_harness import Harness

S = GroupState


def _topics(meta: bytes):
    return decode_subscription(meta).topics


def keepalive(h: Harness, ms: int, *members, step: int = 5_000):
    """Advance the clock by `ms`, heartbeating (group, generation, member[, instance]) every step."""
    left = ms
    while left > 0:
        d = min(step, left)
        h.advance(d)
        left -= d
        for m in members:
            h.heartbeat(*m)


def stable_pair(h: Harness, group="g"):
    """Two dynamic members in one generation, Stable, assignments a->A, b->B."""
    ra, a = h.join_single(group, client_id="a")
    rb, b = h.join_single(group, client_id="b")
    h.advance(200)
    ja, jb = h.result(ra), h.result(rb)
    assert ja.error_code == 0 and jb.error_code == 0 and ja.generation_id == jb.generation_id == 1
    h.sync(group, 1, b)
    h.sync(group, 1, a, [(a, b"A"), (b, b"B")])
    assert h.group(group).state == S.STABLE
    return a, b


# ---------------------------------------------------------------- join / initial delay
def test_single_consumer_joins_after_quiet_window_not_three_seconds():
    h = Harness()
    r0 = h.join()
    res0 = h.result(r0)
    assert (res0.error_code, res0.member_id) == (C.MEMBER_ID_REQUIRED, "c-u1")
    assert h.group().state == S.EMPTY and "c-u1" in h.group().pending_members
    r1 = h.join(member_id="c-u1")
    assert h.result(r1) is None and h.group().state == S.PREPARING_REBALANCE
    h.advance(199)
    assert h.result(r1) is None
    h.advance(1)
    j = h.result(r1)
    assert (j.error_code, j.generation_id, j.leader, j.member_id, j.protocol_name) == \
        (0, 1, "c-u1", "c-u1", "range")
    assert [m.member_id for m in j.members] == ["c-u1"] and j.members[0].metadata == b"meta"
    assert h.group().state == S.COMPLETING_REBALANCE
    rs = h.sync("g", 1, "c-u1", [("c-u1", b"ASSIGN")])
    s = h.result(rs)
    assert (s.error_code, s.assignment, s.protocol_type, s.protocol_name) == (0, b"ASSIGN", "consumer", "range")
    assert h.group().state == S.STABLE
    assert isinstance(h.log[-1], GroupRecord) and h.log[-1].members[0].assignment == b"ASSIGN"


def test_members_starting_together_land_in_one_generation():
    h = Harness()
    replies = []
    for i in range(4):          # each joins 150 ms after the previous: within the 200 ms quiet window
        replies.append(h.join_single(client_id=f"m{i}")[0])
        h.advance(150)
    assert all(h.result(r) is None for r in replies)
    h.advance(50)
    results = [h.result(r) for r in replies]
    assert {r.generation_id for r in results} == {1}
    assert sum(1 for r in results if r.members) == 1       # only the leader gets the member list
    assert len(next(r for r in results if r.members).members) == 4


def test_initial_delay_is_capped_by_group_initial_rebalance_delay_ms():
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000, group_initial_rebalance_quiet_ms=200))
    start = h.now
    first, _ = h.join_single(client_id="m0")
    t = 0
    i = 1
    while h.result(first) is None:
        h.join_single(client_id=f"m{i}")
        i += 1
        h.advance(100)
        t += 100
    assert h.now - start == 1000     # never later than the cap, though members kept coming


def test_pending_member_holds_initial_delay_until_it_rejoins():
    h = Harness()
    ra, _ = h.join_single(client_id="a")
    rb0 = h.join(client_id="b")                     # MEMBER_ID_REQUIRED, not yet rejoined
    b = h.result(rb0).member_id
    h.advance(1000)
    assert h.result(ra) is None                     # b is known to be coming
    rb = h.join(member_id=b, client_id="b")
    h.advance(200)
    assert h.result(ra).generation_id == h.result(rb).generation_id == 1


def test_quiet_window_equal_to_delay_gives_kafkas_fixed_delay():
    h = Harness(CoordinatorConfig(group_initial_rebalance_quiet_ms=3000))
    r, _ = h.join_single()
    h.advance(2999)
    assert h.result(r) is None
    h.advance(1)
    assert h.result(r).error_code == 0


def test_zero_delay_completes_immediately():
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    r, _ = h.join_single()
    h.advance(0)
    assert h.result(r).generation_id == 1


def test_join_v3_adds_member_without_member_id_required():
    h = Harness()
    r = h.join(api_version=3)
    h.advance(200)
    assert h.result(r).error_code == 0 and h.result(r).member_id == "c-u1"


def test_invalid_session_timeout_checked_before_group_is_created():
    h = Harness()
    for st in (5999, 1_800_001):
        r = h.join(session_timeout_ms=st)
        assert h.result(r).error_code == C.INVALID_SESSION_TIMEOUT
    assert h.group() is None


def test_invalid_group_id_and_unknown_member_on_missing_group():
    h = Harness()
    assert h.result(h.join(group="")).error_code == C.INVALID_GROUP_ID
    r = h.join(member_id="ghost")
    assert (h.result(r).error_code, h.result(r).member_id) == (C.UNKNOWN_MEMBER_ID, "ghost")
    assert h.group() is None


def test_known_member_joining_empty_group_gets_unknown_member_id():
    h = Harness()
    r, m = h.join_single()
    h.advance(200)
    h.leave("g", m)
    h.advance(0)
    assert h.group().state == S.EMPTY
    r = h.join(member_id=m)
    assert h.result(r).error_code == C.UNKNOWN_MEMBER_ID


def test_inconsistent_group_protocol():
    h = Harness()
    assert h.result(h.join(protocol_type="")).error_code == C.INCONSISTENT_GROUP_PROTOCOL
    assert h.result(h.join(protocols=())).error_code == C.INCONSISTENT_GROUP_PROTOCOL
    stable_pair(h)
    assert h.result(h.join(protocol_type="connect")).error_code == C.INCONSISTENT_GROUP_PROTOCOL
    assert h.result(h.join(protocols=(("roundrobin", b""),))).error_code == C.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_chosen_by_vote_among_protocols_all_support():
    h = Harness()
    r1, _ = h.join_single(client_id="a", protocols=(("range", b"1"), ("sticky", b"1")))
    h.join_single(client_id="b", protocols=(("sticky", b"2"), ("range", b"2")))
    h.join_single(client_id="c", protocols=(("sticky", b"3"), ("rr", b"3"), ("range", b"3")))
    h.advance(200)
    j = h.result(r1)
    assert j.protocol_name == "sticky"
    assert [m.metadata for m in j.members] == [b"1", b"2", b"3"]   # metadata of the chosen protocol


def test_new_member_triggers_rebalance_existing_members_learn_by_heartbeat():
    h = Harness()
    a, b = stable_pair(h)
    rc, c = h.join_single(client_id="c")
    assert h.group().state == S.PREPARING_REBALANCE
    assert h.heartbeat("g", 1, a) == C.REBALANCE_IN_PROGRESS
    assert h.result(rc) is None
    ra = h.join(member_id=a, client_id="a")
    assert h.result(rc) is None
    rb = h.join(member_id=b, client_id="b")
    # all known members rejoined: completes at once (no delay outside the initial rebalance)
    res = [h.result(x) for x in (ra, rb, rc)]
    assert {x.generation_id for x in res} == {2} and all(x.error_code == 0 for x in res)
    assert res[0].leader == a and len(res[0].members) == 3 and res[1].members == ()


def test_rebalance_timeout_removes_dynamic_members_that_did_not_rejoin():
    h = Harness()
    a, b = stable_pair(h)
    rc, c = h.join_single(client_id="c", rebalance_timeout_ms=40_000)
    ra = h.join(member_id=a, client_id="a")
    for _ in range(4):                 # b stays alive (heartbeats) but never rejoins
        h.advance(8_000)
        assert h.heartbeat("g", 1, b) == C.REBALANCE_IN_PROGRESS
    h.advance(39_999 - 32_000)
    assert h.result(ra) is None
    h.advance(1)
    assert h.result(ra).generation_id == 2
    assert set(h.group().members) == {a, c}
    assert heartbeat_key("g", b) not in h.timers


def test_static_members_are_kept_when_not_rejoined():
    h = Harness()
    r1 = h.join(group_instance_id="i1", client_id="a")
    r2 = h.join(group_instance_id="i2", client_id="b")
    h.advance(200)
    m1, m2 = h.result(r1).member_id, h.result(r2).member_id
    assert (m1, m2) == ("i1-u1", "i2-u2")
    h.sync("g", 1, m2)
    h.sync("g", 1, m1, [(m1, b"x"), (m2, b"y")])
    r = h.join(member_id=m1, group_instance_id="i1", client_id="a")   # leader rejoin -> rebalance
    keepalive(h, 30_000, ("g", 1, m2, "i2"))          # m2 alive but does not rejoin
    assert h.result(r).generation_id == 2
    assert set(h.group().members) == {m1, m2} and h.group().generation_id == 2


def test_join_in_completing_rebalance_same_metadata_returns_current_generation():
    h = Harness()
    ra, a = h.join_single(client_id="a")
    rb, b = h.join_single(client_id="b")
    h.advance(200)
    assert h.group().state == S.COMPLETING_REBALANCE
    again = h.result(h.join(member_id=a, client_id="a"))
    assert (again.generation_id, again.leader, len(again.members)) == (1, a, 2)
    again_b = h.result(h.join(member_id=b, client_id="b"))
    assert again_b.members == ()
    # changed metadata => PreparingRebalance; the parked follower SyncGroup is told to rejoin
    rs = h.sync("g", 1, b)
    h.join(member_id=a, client_id="a", protocols=(("range", b"new"),))
    assert h.group().state == S.PREPARING_REBALANCE
    assert h.result(rs).error_code == C.REBALANCE_IN_PROGRESS


def test_follower_rejoin_in_stable_with_same_metadata_gets_current_generation_leader_forces_rebalance():
    h = Harness()
    a, b = stable_pair(h)
    j = h.result(h.join(member_id=b, client_id="b"))
    assert (j.error_code, j.generation_id, j.leader, j.members) == (0, 1, a, ())
    assert h.group().state == S.STABLE
    h.join(member_id=a, client_id="a")
    assert h.group().state == S.PREPARING_REBALANCE


# ---------------------------------------------------------------- sync
def test_sync_waits_for_leader_and_for_storage_and_fills_missing_assignments():
    h = Harness(auto_store=False)
    ra, a = None, None
    r0 = h.join(client_id="a"); h.store_all()
    a = h.result(r0).member_id
    ra = h.join(member_id=a, client_id="a")
    r1 = h.join(client_id="b"); b = h.result(r1).member_id
    rb = h.join(member_id=b, client_id="b")
    h.advance(200)
    assert h.result(ra).generation_id == 1
    sb = h.sync("g", 1, b)
    assert h.result(sb) is None
    sa = h.sync("g", 1, a, [(a, b"A"), ("stranger", b"S")])   # b missing, stranger ignored
    assert h.result(sa) is None and h.result(sb) is None and len(h.appends) == 1
    assert h.group().state == S.COMPLETING_REBALANCE
    rec = h.appends[0].records[0]
    assert {m.member_id: m.assignment for m in rec.members} == {a: b"A", b: b""}
    h.store_next()
    assert h.result(sa).assignment == b"A" and h.result(sb).assignment == b""
    assert h.group().state == S.STABLE


def test_sync_append_failure_propagates_mapped_error_and_rebalances():
    h = Harness(auto_store=False)
    r0 = h.join(client_id="a"); h.store_all()
    a = h.result(r0).member_id
    ra = h.join(member_id=a, client_id="a")
    h.advance(200)
    sa = h.sync("g", 1, a, [(a, b"A")])
    h.store_next(error=C.NOT_LEADER_OR_FOLLOWER)
    assert h.result(sa).error_code == C.NOT_COORDINATOR and h.result(sa).protocol_name is None
    assert h.group().state == S.PREPARING_REBALANCE


def test_sync_errors_in_kafkas_order():
    h = Harness()
    assert h.result(h.sync("nope", 0, "x")).error_code == C.UNKNOWN_MEMBER_ID
    assert h.result(h.sync("", 0, "x")).error_code == C.INVALID_GROUP_ID
    a, b = stable_pair(h)
    assert h.result(h.sync("g", 1, "x")).error_code == C.UNKNOWN_MEMBER_ID
    assert h.result(h.sync("g", 7, "x")).error_code == C.UNKNOWN_MEMBER_ID     # member before generation
    assert h.result(h.sync("g", 0, a)).error_code == C.ILLEGAL_GENERATION
    assert h.result(h.sync("g", 1, a, protocol_name="sticky")).error_code == C.INCONSISTENT_GROUP_PROTOCOL
    assert h.result(h.sync("g", 1, a, protocol_type="connect")).error_code == C.INCONSISTENT_GROUP_PROTOCOL
    ok = h.result(h.sync("g", 1, b, protocol_type="consumer", protocol_name="range"))
    assert (ok.error_code, ok.assignment) == (0, b"B")                          # Stable: stored assignment
    h.join_single(client_id="c")
    assert h.result(h.sync("g", 1, a)).error_code == C.REBALANCE_IN_PROGRESS


def test_members_not_syncing_within_rebalance_timeout_are_removed():
    h = Harness()
    ra, a = h.join_single(client_id="a", rebalance_timeout_ms=20_000)
    rb, b = h.join_single(client_id="b", rebalance_timeout_ms=20_000)
    h.advance(200)
    h.sync("g", 1, a, [(a, b"A"), (b, b"B")])
    assert h.group().state == S.STABLE
    keepalive(h, 19_999, ("g", 1, a), ("g", 1, b), step=4_000)   # b heartbeats but never syncs
    assert b in h.group().members and h.group().state == S.STABLE
    h.advance(1)
    assert b not in h.group().members and h.group().state == S.PREPARING_REBALANCE


# ---------------------------------------------------------------- heartbeat / session
def test_heartbeat_errors_by_state():
    h = Harness()
    assert h.heartbeat("nope", 0, "x") == C.UNKNOWN_MEMBER_ID
    assert h.heartbeat("", 0, "x") == C.INVALID_GROUP_ID
    r, m = h.join_single()
    assert h.heartbeat("g", 0, m) == C.REBALANCE_IN_PROGRESS
    h.advance(200)
    assert h.group().state == S.COMPLETING_REBALANCE
    assert h.heartbeat("g", 1, m) == 0
    assert h.heartbeat("g", 0, m) == C.ILLEGAL_GENERATION
    assert h.heartbeat("g", 1, "other") == C.UNKNOWN_MEMBER_ID
    h.sync("g", 1, m, [(m, b"")])
    assert h.heartbeat("g", 1, m) == 0
    h.leave("g", m)
    assert h.group().state == S.EMPTY
    assert h.heartbeat("g", 2, m) == C.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_member_and_rebalances():
    h = Harness()
    a, b = stable_pair(h)
    h.advance(6_000)
    assert h.heartbeat("g", 1, a) == 0
    h.advance(4_000)                                  # b's 10 s session ends
    assert b not in h.group().members
    assert h.heartbeat("g", 1, a) == C.REBALANCE_IN_PROGRESS
    assert h.group().state == S.PREPARING_REBALANCE
    ra = h.join(member_id=a, client_id="a")
    assert h.result(ra).generation_id == 2 and h.result(ra).members[0].member_id == a


def test_heartbeats_keep_the_session_alive():
    h = Harness()
    a, b = stable_pair(h)
    for _ in range(10):
        h.advance(9_000)
        assert h.heartbeat("g", 1, a) == 0 and h.heartbeat("g", 1, b) == 0
    assert h.group().state == S.STABLE


def test_new_member_parked_join_times_out_with_unknown_member_id():
    h = Harness(CoordinatorConfig(group_new_member_join_timeout_ms=60_000))
    a, b = stable_pair(h)
    rc, c = h.join_single(client_id="c")      # a and b never rejoin nor heartbeat
    h.advance(10_000)
    # a and b expired, c completed the join alone
    assert h.result(rc).generation_id == 2 and set(h.group().members) == {c}
    h2 = Harness(CoordinatorConfig(group_new_member_join_timeout_ms=5_000))
    a, b = stable_pair(h2)
    rc, c = h2.join_single(client_id="c")
    h2.advance(5_000)
    assert h2.result(rc).error_code == C.UNKNOWN_MEMBER_ID and c not in h2.group().members


def test_pending_member_expires_after_session_timeout():
    h = Harness()
    r = h.join()
    m = h.result(r).member_id
    h.advance(10_000)
    assert m not in h.group().pending_members
    assert h.heartbeat("g", 0, m) == C.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------- static membership (KIP-345)
def _static_stable(h, version=9):
    r1 = h.join(group_instance_id="i1", client_id="a", api_version=version)
    r2 = h.join(group_instance_id="i2", client_id="b", api_version=version)
    h.advance(200)
    m1, m2 = h.result(r1).member_id, h.result(r2).member_id
    h.sync("g", 1, m2)
    h.sync("g", 1, m1, [(m1, b"x"), (m2, b"y")])
    assert h.group().state == S.STABLE
    return m1, m2


def test_static_member_rejoin_in_stable_gets_assignment_without_rebalance():
    h = Harness()
    m1, m2 = _static_stable(h)
    records_before = len(h.log)
    r = h.join(group_instance_id="i2", client_id="b")
    j = h.result(r)
    assert (j.error_code, j.generation_id, j.leader, j.skip_assignment, j.members) == (0, 1, m1, False, ())
    new2 = j.member_id
    assert new2 != m2 and h.group().state == S.STABLE and len(h.log) == records_before + 1
    assert h.result(h.sync("g", 1, new2)).assignment == b"y"
    assert h.heartbeat("g", 1, m2, "i2") == C.FENCED_INSTANCE_ID
    assert h.heartbeat("g", 1, new2, "i2") == 0
    # the leader rejoining (v9) is told to skip the assignment
    j1 = h.result(h.join(group_instance_id="i1", client_id="a"))
    assert j1.skip_assignment and j1.leader == j1.member_id and len(j1.members) == 2


def test_static_leader_rejoin_before_v9_is_given_the_old_leader_id():
    h = Harness()
    m1, m2 = _static_stable(h, version=8)
    j = h.result(h.join(group_instance_id="i1", client_id="a", api_version=8))
    assert j.leader == m1 and j.member_id != m1 and not j.skip_assignment and j.members == ()


def test_static_rejoin_append_failure_restores_old_member_id():
    h = Harness()
    m1, m2 = _static_stable(h)
    h.auto_store = False
    r = h.join(group_instance_id="i2", client_id="b")
    assert h.result(r) is None
    h.store_next(error=C.REQUEST_TIMED_OUT)
    j = h.result(r)
    assert (j.error_code, j.member_id) == (C.COORDINATOR_NOT_AVAILABLE, "")
    assert h.group().static_members["i2"] == m2 and m2 in h.group().members
    assert h.heartbeat("g", 1, m2, "i2") == 0


def test_static_rejoin_changing_selected_protocol_rebalances_and_in_completing_always():
    both = (("range", b"m"), ("sticky", b"m"))
    h = Harness()
    r1 = h.join(group_instance_id="i1", client_id="a", protocols=both)
    r2 = h.join(group_instance_id="i2", client_id="b", protocols=both)
    h.advance(200)
    m1, m2 = h.result(r1).member_id, h.result(r2).member_id
    assert h.result(r1).protocol_name == "range"
    h.sync("g", 1, m2)
    h.sync("g", 1, m1, [(m1, b"x"), (m2, b"y")])
    h.join(group_instance_id="i2", client_id="b", protocols=(("range", b"changed"), ("sticky", b"m")))
    assert h.group().state == S.STABLE          # "range" still selected: no rebalance
    h.join(group_instance_id="i2", client_id="b", protocols=(("sticky", b"m"),))
    assert h.group().state == S.PREPARING_REBALANCE
    h3 = Harness()
    r1 = h3.join(group_instance_id="i1", client_id="a")
    h3.advance(200)
    assert h3.group().state == S.COMPLETING_REBALANCE
    rj = h3.join(group_instance_id="i1", client_id="a")        # KAFKA-9801: always rebalance
    assert h3.result(r1).generation_id == 1 and h3.result(rj).member_id != h3.result(r1).member_id
    assert h3.group().state == S.COMPLETING_REBALANCE and h3.result(rj).generation_id == 2


def test_fenced_instance_id_and_unknown_instance():
    h = Harness()
    m1, m2 = _static_stable(h)
    assert h.heartbeat("g", 1, m1, "i2") == C.FENCED_INSTANCE_ID
    assert h.heartbeat("g", 1, m1, "i9") == C.UNKNOWN_MEMBER_ID
    assert h.result(h.sync("g", 1, m1, group_instance_id="i2")).error_code == C.FENCED_INSTANCE_ID
    errs = h.commit_errors(h.commit("g", {("t", 0): 1}, 1, m1, "i2"))
    assert errs == {("t", 0): C.FENCED_INSTANCE_ID}


# ---------------------------------------------------------------- group.max.size
def test_group_max_size_reached():
    h = Harness(CoordinatorConfig(group_max_size=2))
    a, b = stable_pair(h)
    r = h.join(client_id="c")
    assert (h.result(r).error_code, h.result(r).member_id) == (C.GROUP_MAX_SIZE_REACHED, "")
    h.join(member_id=a, client_id="a")          # existing members are accepted
    assert h.group().state == S.PREPARING_REBALANCE
    r = h.join(client_id="d")
    # PreparingRebalance counts members awaiting join: 1 < 2 -> accepted (gets an id)
    assert h.result(r).error_code == C.MEMBER_ID_REQUIRED


# ---------------------------------------------------------------- leave
def test_leave_group_batch_and_immediate_rebalance():
    h = Harness()
    a, b = stable_pair(h)
    r = h.leave("g", b, "ghost", LeaveMember("", "nobody"))
    res = h.result(r)
    assert [m.error_code for m in res.members] == [0, C.UNKNOWN_MEMBER_ID, C.UNKNOWN_MEMBER_ID]
    assert h.group().state == S.PREPARING_REBALANCE and b not in h.group().members
    ra = h.join(member_id=a, client_id="a")
    assert h.result(ra).generation_id == 2      # a alone: completes at once
    h.leave("g", a)
    g = h.group()
    assert (g.state, g.generation_id, g.protocol_name) == (S.EMPTY, 3, None)
    assert isinstance(h.log[-1], GroupRecord) and h.log[-1].members == () and h.log[-1].generation == 3


def test_leave_static_member_by_instance_id_and_fencing():
    h = Harness()
    m1, m2 = _static_stable(h)
    res = h.result(h.leave("g", LeaveMember(m1, "i2")))
    assert res.members[0].error_code == C.FENCED_INSTANCE_ID
    res = h.result(h.leave("g", LeaveMember("", "i2")))
    assert res.members[0].error_code == 0 and m2 not in h.group().members
    assert h.group().state == S.PREPARING_REBALANCE


def test_leave_errors_for_missing_group_and_pending_member():
    h = Harness()
    assert h.result(h.leave("nope", "x")).error_code == C.UNKNOWN_MEMBER_ID
    r = h.join()
    m = h.result(r).member_id
    res = h.result(h.leave("g", m))
    assert res.members[0].error_code == 0 and not h.group().pending_members


def test_leave_during_preparing_completes_join_when_rest_rejoined():
    h = Harness()
    a, b = stable_pair(h)
    h.join_single(client_id="c")
    ra = h.join(member_id=a, client_id="a")
    assert h.result(ra) is None
    h.leave("g", b)
    assert h.result(ra).generation_id == 2


# ---------------------------------------------------------------- offsets
def test_simple_commit_on_missing_group_creates_simple_group():
    h = Harness(auto_store=False)
    r = h.commit("s", {("t", 0): 5, ("t", 1): 7})
    assert h.result(r) is None
    assert h.fetch("s", {"t": [0, 1]}) == {("t", 0): -1, ("t", 1): -1}   # not stored yet
    h.store_next()
    assert h.commit_errors(r) == {("t", 0): 0, ("t", 1): 0}
    assert h.fetch("s", {"t": [0, 1, 2]}) == {("t", 0): 5, ("t", 1): 7, ("t", 2): -1}
    assert h.fetch("s") == {("t", 0): 5, ("t", 1): 7}
    assert h.group("s").state == S.EMPTY and h.group("s").protocol_type is None
    rec = h.log[0]
    assert isinstance(rec, OffsetRecord) and rec.commit_timestamp == h.now and rec.expire_timestamp is None


def test_commit_validation_by_generation_and_member():
    h = Harness()
    a, b = stable_pair(h)
    assert h.commit_errors(h.commit("g", {("t", 0): 1}, 1, a)) == {("t", 0): 0}
    assert h.commit_errors(h.commit("g", {("t", 0): 1}, 0, a)) == {("t", 0): C.ILLEGAL_GENERATION}
    assert h.commit_errors(h.commit("g", {("t", 0): 1}, 1, "x")) == {("t", 0): C.UNKNOWN_MEMBER_ID}
    assert h.commit_errors(h.commit("g", {("t", 0): 1})) == {("t", 0): C.UNKNOWN_MEMBER_ID}
    assert h.commit_errors(h.commit("", {("t", 0): 1})) == {("t", 0): C.INVALID_GROUP_ID}
    # PreparingRebalance: the (still current) previous generation may commit
    h.join_single(client_id="c")
    assert h.commit_errors(h.commit("g", {("t", 0): 2}, 1, a)) == {("t", 0): 0}
    ra = h.join(member_id=a, client_id="a"); rb = h.join(member_id=b, client_id="b")
    assert h.group().state == S.COMPLETING_REBALANCE
    assert h.commit_errors(h.commit("g", {("t", 0): 3}, 2, a)) == {("t", 0): C.REBALANCE_IN_PROGRESS}
    assert h.commit_errors(h.commit("g", {("t", 0): 3}, 1, a)) == {("t", 0): C.ILLEGAL_GENERATION}
    assert h.fetch("g", {"t": [0]}) == {("t", 0): 2}


def test_commit_to_missing_group_with_generation():
    h = Harness()
    assert h.commit_errors(h.commit("m", {("t", 0): 1}, 3, "x", api_version=8)) == {("t", 0): C.ILLEGAL_GENERATION}
    assert h.commit_errors(h.commit("m", {("t", 0): 1}, 3, "x", api_version=9)) == {("t", 0): C.GROUP_ID_NOT_FOUND}
    assert h.group("m") is None


def test_empty_group_accepts_simple_commit_but_not_member_commit():
    h = Harness()
    r, m = h.join_single()
    h.advance(200)
    h.leave("g", m)
    assert h.commit_errors(h.commit("g", {("t", 0): 4})) == {("t", 0): 0}
    assert h.commit_errors(h.commit("g", {("t", 0): 4}, 1, m)) == {("t", 0): C.UNKNOWN_MEMBER_ID}


def test_offset_metadata_too_large_is_per_partition():
    h = Harness(CoordinatorConfig(offset_metadata_max_bytes=4))
    r = h.commit("s", {("t", 0): CommitPartition(0, 1, committed_metadata="12345"),
                       ("t", 1): CommitPartition(1, 2, committed_metadata="1234")})
    assert h.commit_errors(r) == {("t", 0): C.OFFSET_METADATA_TOO_LARGE, ("t", 1): 0}
    r = h.commit("s", {("t", 0): CommitPartition(0, 1, committed_metadata="x" * 9)})
    assert h.commit_errors(r) == {("t", 0): C.OFFSET_METADATA_TOO_LARGE}   # nothing to store: at once


def test_commit_append_failure_maps_error_and_keeps_old_offsets():
    h = Harness(auto_store=False)
    h.commit("s", {("t", 0): 1}); h.store_next()
    r = h.commit("s", {("t", 0): 2})
    h.store_next(error=C.KAFKA_STORAGE_ERROR)
    assert h.commit_errors(r) == {("t", 0): C.NOT_COORDINATOR}
    assert h.fetch("s", {"t": [0]}) == {("t", 0): 1}


def test_commit_refreshes_session_in_stable():
    h = Harness()
    a, b = stable_pair(h)
    for _ in range(3):
        h.advance(6_000)
        h.commit("g", {("t", 0): 1}, 1, a)
        h.heartbeat("g", 1, b)
    assert a in h.group().members


def test_offset_fetch_on_missing_group_and_require_stable():
    h = Harness()
    assert h.fetch("nope", {"t": [0, 1]}) == {("t", 0): -1, ("t", 1): -1}
    assert h.fetch("nope") == {}
    h.commit("s", {("t", 0): 9})
    assert h.fetch("s", {"t": [0]}, require_stable=True) == {("t", 0): 9}


def test_explicit_retention_time_sets_expire_timestamp():
    h = Harness()
    h.commit("s", {("t", 0): 1}, retention_time_ms=60_000)
    assert h.log[-1].expire_timestamp == h.now + 60_000
    h.advance(59_999)
    h.apply(h.c.expire_offsets(h.now))
    assert h.fetch("s", {"t": [0]}) == {("t", 0): 1}
    h.advance(1)
    h.apply(h.c.expire_offsets(h.now))
    assert h.group("s") is None
    assert h.log[-2] == OffsetRecord("s", "t", 0, tombstone=True)
    assert h.log[-1] == GroupRecord("s", tombstone=True)


def test_retention_counts_from_when_group_became_empty():
    cfg = CoordinatorConfig(offsets_retention_minutes=1)
    h = Harness(cfg)
    r, m = h.join_single()
    h.advance(200)
    h.sync("g", 1, m, [(m, b"")])
    h.commit("g", {("t", 0): 3}, 1, m)
    h.advance(8_000)
    h.heartbeat("g", 1, m)
    h.advance(120_000)             # session expires at ~+10 s: the group becomes Empty then
    assert h.group().state == S.EMPTY
    empty_since = h.group().state_timestamp
    h.now = empty_since + 59_999
    h.apply(h.c.expire_offsets(h.now))
    assert h.fetch("g", {"t": [0]}) == {("t", 0): 3}
    h.now = empty_since + 60_000
    h.apply(h.c.expire_offsets(h.now))
    assert h.group() is None


def test_expiration_timer_runs_periodically_after_load():
    h = Harness(CoordinatorConfig(offsets_retention_minutes=1, offsets_retention_check_interval_ms=30_000),
                loading=True)
    h.apply(h.c.on_loaded(h.now))
    h.commit("s", {("t", 0): 3})
    h.advance(90_000)
    assert h.group("s") is None


def test_undecodable_subscription_is_unknown_so_offsets_are_deletable():
    h = Harness(decoder=_topics)
    r, m = h.join_single("bad", protocols=(("range", b"\xff\xff garbage"),))
    h.advance(200)
    h.sync("bad", 1, m, [(m, b"")])
    assert h.group("bad").state == S.STABLE and h.group("bad").subscribed_topics is None
    h.commit("bad", {("t", 0): 1}, 1, m)
    rr = h.reply()
    h.apply(h.c.offset_delete(OffsetDeleteParams("bad", (("t", (0,)),)), h.now, rr))
    res = h.result(rr)
    assert res.error_code == 0 and [(t, p.error_code) for t, ps in res.topics for p in ps] == [("t", 0)]
    assert h.fetch("bad") == {}


def test_stable_consumer_group_expires_only_unsubscribed_topics():
    meta = encode_subscription(ConsumerProtocolSubscription(topics=["t"]))
    h = Harness(CoordinatorConfig(offsets_retention_minutes=1), decoder=_topics)
    r, m = h.join_single(protocols=(("range", meta),))
    h.advance(200)
    h.sync("g", 1, m, [(m, b"")])
    h.commit("g", {("t", 0): 1, ("old", 0): 2}, 1, m)
    h.now += 60_000
    h.heartbeat("g", 1, m)
    h.apply(h.c.expire_offsets(h.now))
    assert h.fetch("g") == {("t", 0): 1}


def test_offset_delete():
    meta = encode_subscription(ConsumerProtocolSubscription(topics=["t"]))
    h = Harness(decoder=_topics)
    r, m = h.join_single(protocols=(("range", meta),))
    h.advance(200)
    h.sync("g", 1, m, [(m, b"")])
    h.commit("g", {("t", 0): 1, ("u", 0): 2}, 1, m)

    def delete(gid, topics):
        rr = h.reply()
        h.apply(h.c.offset_delete(OffsetDeleteParams(gid, tuple((t, tuple(ps)) for t, ps in topics.items())),
                                  h.now, rr))
        return h.result(rr)

    res = delete("g", {"t": [0], "u": [0, 5]})
    assert res.error_code == 0
    assert {(t, p.partition_index): p.error_code for t, ps in res.topics for p in ps} == \
        {("t", 0): C.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): 0, ("u", 5): 0}
    assert h.fetch("g") == {("t", 0): 1}
    assert delete("nope", {"t": [0]}).error_code == C.GROUP_ID_NOT_FOUND
    # a consumer-protocol group without a subscription decoder: subscriptions unknown, deletable
    h2 = Harness()
    a, _ = stable_pair(h2)
    h2.commit("g", {("t", 0): 1}, 1, a)
    rr = h2.reply()
    h2.apply(h2.c.offset_delete(OffsetDeleteParams("g", (("t", (0,)),)), h2.now, rr))
    assert h2.result(rr).error_code == 0 and h2.fetch("g") == {}


def test_offset_delete_non_consumer_protocol_group_is_non_empty():
    h = Harness()
    r, m = h.join_single(protocol_type="connect")
    h.advance(200)
    rr = h.reply()
    h.apply(h.c.offset_delete(OffsetDeleteParams("g", (("t", (0,)),)), h.now, rr))
    assert h.result(rr).error_code == C.NON_EMPTY_GROUP


# ---------------------------------------------------------------- admin
def test_delete_groups_and_dead_window():
    h = Harness(auto_store=False)
    h.commit("s", {("t", 0): 1}); h.store_all()
    r0 = h.join(group="busy"); h.store_all()
    h.join(group="busy", member_id=h.result(r0).member_id); h.store_all()
    r = h.reply()
    h.apply(h.c.delete_groups(["s", "busy", "nope"], h.now, r))
    assert h.result(r) is None and h.group("s").state == S.DEAD
    # while the tombstones are being stored the group is Dead
    assert h.result(h.join(group="s")).error_code == C.COORDINATOR_NOT_AVAILABLE
    assert h.result(h.sync("s", 0, "x")).error_code == C.COORDINATOR_NOT_AVAILABLE
    assert h.heartbeat("s", 0, "x") == C.COORDINATOR_NOT_AVAILABLE
    assert h.result(h.leave("s", "x")).error_code == C.COORDINATOR_NOT_AVAILABLE
    assert h.commit_errors(h.commit("s", {("t", 0): 2})) == {("t", 0): C.COORDINATOR_NOT_AVAILABLE}
    assert h.fetch("s", {"t": [0]}) == {("t", 0): -1}
    h.store_next()
    assert dict(h.result(r).results) == {"s": 0, "busy": C.NON_EMPTY_GROUP, "nope": C.GROUP_ID_NOT_FOUND}
    assert h.group("s") is None
    assert h.log[-2:] == [OffsetRecord("s", "t", 0, tombstone=True), GroupRecord("s", tombstone=True)]


def test_delete_groups_failure_restores_group():
    h = Harness(auto_store=False)
    h.commit("s", {("t", 0): 1}); h.store_all()
    r = h.reply()
    h.apply(h.c.delete_groups(["s"], h.now, r))
    h.store_next(error=C.NOT_ENOUGH_REPLICAS)
    assert dict(h.result(r).results) == {"s": C.COORDINATOR_NOT_AVAILABLE}
    assert h.group("s").state == S.EMPTY and h.fetch("s", {"t": [0]}) == {("t", 0): 1}


def test_describe_and_list_groups():
    h = Harness()
    a, b = stable_pair(h)
    h.commit("s", {("t", 0): 1})
    r = h.reply()
    h.apply(h.c.describe_groups(["g", "nope"], h.now, r, api_version=5))
    g, nope = h.result(r).groups
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in g.members] == \
        [(a, b"meta", b"A"), (b, b"meta", b"B")]
    assert (nope.error_code, nope.group_state) == (0, "Dead")
    r = h.reply()
    h.apply(h.c.describe_groups(["nope"], h.now, r, api_version=6))
    assert h.result(r).groups[0].error_code == C.GROUP_ID_NOT_FOUND
    h.join_single(client_id="c")
    r = h.reply()
    h.apply(h.c.describe_groups(["g"], h.now, r))
    g = h.result(r).groups[0]
    assert g.group_state == "PreparingRebalance" and all(m.member_metadata == b"" for m in g.members)

    def listed(states=(), types=()):
        rr = h.reply()
        h.apply(h.c.list_groups(h.now, rr, states, types))
        return {(x.group_id, x.group_state, x.protocol_type) for x in h.result(rr).groups}

    assert listed() == {("g", "PreparingRebalance", "consumer"), ("s", "Empty", "")}
    assert listed(["empty"]) == {("s", "Empty", "")}
    assert listed(types=["consumer"]) == set()
    assert listed(types=["Classic"]) == {("g", "PreparingRebalance", "consumer"), ("s", "Empty", "")}


# ---------------------------------------------------------------- persistence gating, replay, load
def test_new_group_record_failure_removes_group_and_reports_error():
    h = Harness(auto_store=False)
    r = h.join()
    assert h.result(r) is None
    rec = h.appends[0].records[0]
    assert rec == GroupRecord("g", "", 0, None, None, h.now, ())
    h.store_next(error=C.NOT_LEADER_OR_FOLLOWER)
    assert (h.result(r).error_code, h.result(r).member_id) == (C.NOT_COORDINATOR, "")
    assert h.group() is None and not h.timers


def test_replay_rebuilds_state_and_on_loaded_arms_sessions():
    h = Harness()
    a, b = stable_pair(h)
    h.commit("g", {("t", 0): 11, ("t", 1): 12}, 1, a)
    h.commit("s", {("u", 0): 5})
    h.commit("x", {("u", 0): 5}); h.apply(h.c.delete_groups(["x"], h.now, h.reply()))
    h2 = Harness(loading=True, now=h.now)
    assert h2.result(h2.join()).error_code == C.COORDINATOR_LOAD_IN_PROGRESS
    assert h2.heartbeat("g", 1, a) == 0                               # blindly answered
    assert h2.commit_errors(h2.commit("g", {("t", 0): 1})) == {("t", 0): C.COORDINATOR_LOAD_IN_PROGRESS}
    r = h2.reply(); h2.apply(h2.c.list_groups(h2.now, r))
    assert h2.result(r).error_code == C.COORDINATOR_LOAD_IN_PROGRESS
    for rec in h.log:
        h2.c.replay(rec)
    h2.apply(h2.c.on_loaded(h2.now))
    g1, g2 = h.group(), h2.group()
    assert (g2.state, g2.generation_id, g2.protocol_name, g2.leader_id, g2.protocol_type) == \
        (S.STABLE, 1, "range", a, "consumer")
    assert {m.member_id: m.assignment for m in g2.members.values()} == {a: b"A", b: b"B"}
    assert h2.fetch("g") == {("t", 0): 11, ("t", 1): 12} and h2.fetch("s") == {("u", 0): 5}
    assert h2.group("x") is None
    assert heartbeat_key("g", a) in h2.timers
    assert h2.heartbeat("g", 1, b) == 0
    assert h2.result(h2.sync("g", 1, b)).assignment == b"B"
    h2.advance(10_000)                                                 # a never heartbeats again
    assert a not in h2.group().members


def test_loaded_group_over_max_size_rebalances():
    h = Harness()
    stable_pair(h)
    h2 = Harness(CoordinatorConfig(group_max_size=1), loading=True, now=h.now)
    for rec in h.log:
        h2.c.replay(rec)
    h2.apply(h2.c.on_loaded(h2.now))
    assert h2.group().state == S.PREPARING_REBALANCE


def test_every_operation_while_loading():
    h = Harness(loading=True)
    L = C.COORDINATOR_LOAD_IN_PROGRESS
    assert h.result(h.join()).error_code == L
    assert h.result(h.sync("g", 1, "m")).error_code == L
    assert h.result(h.leave("g", "m")).error_code == L
    assert h.commit_errors(h.commit("g", {("t", 0): 1})) == {("t", 0): L}
    r = h.reply(); h.apply(h.c.offset_fetch(OffsetFetchParams("g"), h.now, r))
    assert h.result(r).error_code == L
    r = h.reply(); h.apply(h.c.describe_groups(["g"], h.now, r))
    assert h.result(r).groups[0].error_code == L
    r = h.reply(); h.apply(h.c.delete_groups(["g"], h.now, r))
    assert dict(h.result(r).results) == {"g": L}
    r = h.reply(); h.apply(h.c.offset_delete(OffsetDeleteParams("g", ()), h.now, r))
    assert h.result(r).error_code == L
    assert not h.c.expire_offsets(h.now)


def test_group_max_size_rejection_drops_pending_member():
    h = Harness(CoordinatorConfig(group_max_size=1))
    r, a = h.join_single(client_id="a")
    h.advance(200)
    h.sync("g", 1, a, [(a, b"")])
    r0 = h.join(client_id="b")
    assert h.result(r0).error_code == C.GROUP_MAX_SIZE_REACHED   # Stable and full: no id at all
    h2 = Harness(CoordinatorConfig(group_max_size=1))
    a = h2.result(h2.join(client_id="a")).member_id
    b = h2.result(h2.join(client_id="b")).member_id          # Empty accepts: b is pending too
    assert h2.group().pending_members == {a, b}
    h2.join(member_id=a, client_id="a")                      # PreparingRebalance, 1 awaiting = full
    rb = h2.join(member_id=b, client_id="b")
    assert (h2.result(rb).error_code, h2.result(rb).member_id) == (C.GROUP_MAX_SIZE_REACHED, "")
    assert not h2.group().pending_members and heartbeat_key("g", b) not in h2.timers
    h2.advance(200)                                          # nobody pending: the join completes
    assert h2.group().state == S.COMPLETING_REBALANCE


def test_unload_answers_parked_requests_not_coordinator():
    h = Harness()
    r, m = h.join_single()
    out = h.c.unload()
    h.apply(out)
    assert h.result(r).error_code == C.NOT_COORDINATOR and not h.timers
    assert h.result(h.join()).error_code == C.NOT_COORDINATOR


def test_stale_timer_firings_are_ignored():
    h = Harness()
    a, b = stable_pair(h)
    assert not h.c.fire_timer(heartbeat_key("g", a), h.now)           # not due yet
    assert not h.c.fire_timer(initial_delay_key("g"), h.now + 10**9)   # not armed
    assert not h.c.fire_timer(("bogus",), h.now)


def test_superseded_parked_join_is_answered():
    h = Harness()
    r1, m = h.join_single()
    r2 = h.join(member_id=m)
    assert h.result(r1).error_code == C.REBALANCE_IN_PROGRESS
    h.advance(200)
    assert h.result(r2).generation_id == 1


def test_map_append_error_table():
    assert map_append_error(C.UNKNOWN_TOPIC_OR_PARTITION) == C.COORDINATOR_NOT_AVAILABLE
    assert map_append_error(C.NOT_LEADER_OR_FOLLOWER) == C.NOT_COORDINATOR
    assert map_append_error(C.RECORD_LIST_TOO_LARGE) == C.UNKNOWN_SERVER_ERROR
    assert map_append_error(C.NETWORK_EXCEPTION) == C.COORDINATOR_LOAD_IN_PROGRESS
    assert map_append_error(C.INVALID_GROUP_ID) == C.INVALID_GROUP_ID
    with pytest.raises(ValueError):
        map_append_error(0)


def test_config_from_kafka_property_names():
    cfg = CoordinatorConfig.from_properties({
        "group.initial.rebalance.delay.ms": "500", "group.initial.rebalance.quiet.ms": 50,
        "group.max.size": 3, "offsets.retention.minutes": 2, "unrelated.key": "x"})
    assert (cfg.group_initial_rebalance_delay_ms, cfg.group_initial_rebalance_quiet_ms,
            cfg.group_max_size, cfg.offsets_retention_ms) == (500, 50, 3, 120_000)
    with pytest.raises(ValueError, match="group.max.size"):
        CoordinatorConfig.from_properties({"group.max.size": "many"})
    with pytest.raises(ValueError):
        CoordinatorConfig(group_min_session_timeout_ms=10, group_max_session_timeout_ms=5)
    # every error is a ConfigError (one line from the kohort command) naming Kafka's property
    for props, words in [({"group.max.size": "many"}, "group.max.size must be an integer, got 'many'"),
                         ({"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5},
                          "group.min.session.timeout.ms (10) is above group.max.session.timeout.ms (5)"),
                         ({"group.initial.rebalance.quiet.ms": -1},
                          "group.initial.rebalance.quiet.ms must be >= 0, got -1"),
                         ({"offsets.retention.minutes": 0}, "offsets.retention.minutes must be >= 1, got 0")]:
        with pytest.raises(ConfigError) as ei:
            CoordinatorConfig.from_properties(props)
        assert str(ei.value) == words
    with pytest.raises(ConfigError, match="group.max.size must be an integer"):
        CoordinatorConfig(group_max_size=2.5)


# ---------------------------------------------------------------- hypothesis state machine
from hypothesis import HealthCheck, settings, strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

PARTITIONS = 6
CLIENTS = ["d0", "d1", "d2", "s0"]          # s0 is a static member (group.instance.id "i-s0")


class _Client:
    def __init__(self, name):
        self.name = name
        self.instance = "i-" + name if name.startswith("s") else None
        self.member_id = ""
        self.generation = -1
        self.members: tuple = ()           # the member list when this client led a generation
        self.joins: list[int] = []
        self.syncs: list[tuple[int, int]] = []
        self.synced_generation = -1
        self.rejoin = True

    @property
    def owner(self):
        return self.instance or self.member_id


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.h = Harness(CoordinatorConfig(group_max_size=3), auto_store=False)
        self.clients = {n: _Client(n) for n in CLIENTS}
        self.owned: dict[int, dict[int, str]] = {}     # generation -> partition -> owner
        self.max_generation = 0
        self.commits: list[tuple[int, int, bool]] = []   # (reply, generation, legit at request)
        self.seen: set[int] = set()

    # -- response processing ----------------------------------------------------------------
    def _process(self):
        g = self.h.group("g")
        if g is not None and g is not getattr(self, "_incarnation", None):
            # the group was deleted (offset expiration of an Empty group) and created again:
            # generations start over, so per-generation bookkeeping does too
            self._incarnation = g
            self.max_generation = 0
            self.owned = {}
        for c in self.clients.values():
            for r in list(c.joins):
                res = self.h.result(r)
                if res is None:
                    continue
                c.joins.remove(r)
                c.rejoin = res.error_code != 0
                if res.error_code == C.MEMBER_ID_REQUIRED:
                    c.member_id = res.member_id
                elif res.error_code == 0:
                    c.member_id, c.generation = res.member_id, res.generation_id
                    self.max_generation = max(self.max_generation, res.generation_id)
                    c.members = tuple(m.member_id for m in res.members) if not res.skip_assignment else ()
                elif res.error_code in (C.UNKNOWN_MEMBER_ID, C.FENCED_INSTANCE_ID,
                                        C.GROUP_MAX_SIZE_REACHED):
                    c.member_id, c.generation = "", -1
            for r, gen in list(c.syncs):
                res = self.h.result(r)
                if res is None:
                    continue
                c.syncs.remove((r, gen))
                if res.error_code != 0:
                    c.rejoin = True
                if res.error_code == 0 and gen == c.generation:
                    c.synced_generation = gen
                    parts = [int(x) for x in res.assignment.decode().split(",") if x]
                    table = self.owned.setdefault(gen, {})
                    for p in parts:
                        assert table.setdefault(p, c.owner) == c.owner, \
                            f"partition {p} given to {table[p]} and {c.owner} in generation {gen}"
        for r, gen, legit in self.commits:
            res = self.h.result(r)
            if res is not None and r not in self.seen:
                self.seen.add(r)
                ok = all(p.error_code == 0 for _, ps in res.topics for p in ps)
                if ok:
                    assert legit, f"commit of generation {gen} accepted from a fenced member"

    # -- rules --------------------------------------------------------------------------------
    @rule(name=st.sampled_from(CLIENTS), version=st.sampled_from([3, 5, 9]))
    def join(self, name, version):
        c = self.clients[name]
        kw = {"group_instance_id": c.instance} if c.instance else {}
        c.joins.append(self.h.join("g", c.member_id, client_id=name, api_version=version,
                                   session_timeout_ms=10_000, rebalance_timeout_ms=20_000, **kw))
        self._process()

    @rule(name=st.sampled_from(CLIENTS), stale=st.sampled_from([0, 0, 1]))
    def sync(self, name, stale=0):
        c = self.clients[name]
        assignments = ()
        if c.members and c.members[0:1] and c.member_id in c.members:
            n = len(c.members)       # rotate with the generation so owners change every time
            assignments = tuple(
                (m, ",".join(str(p) for p in range(PARTITIONS) if (p + c.generation) % n == i).encode())
                for i, m in enumerate(c.members))
        gen = c.generation - stale       # a zombie from an older generation, sometimes
        r = self.h.sync("g", gen, c.member_id, assignments, group_instance_id=c.instance)
        c.syncs.append((r, gen))
        self._process()

    @rule(name=st.sampled_from(CLIENTS))
    def heartbeat(self, name):
        c = self.clients[name]
        code = self.h.heartbeat("g", c.generation, c.member_id, c.instance)
        if code in (C.UNKNOWN_MEMBER_ID, C.FENCED_INSTANCE_ID):
            c.member_id, c.generation = "", -1
        if code:
            c.rejoin = True
        self._process()

    @rule(name=st.sampled_from(CLIENTS), zombie=st.booleans())
    def act(self, name, zombie=False):
        """What a well-behaved consumer would do next (drives the group through generations)."""
        c = self.clients[name]
        if c.joins or c.syncs:
            self.heartbeat(name)
        elif c.rejoin or c.generation < 0:
            self.join(name, 9)
        elif c.synced_generation != c.generation:
            self.sync(name)
        elif zombie:                      # replay the previous generation's SyncGroup / commit
            if c.generation > 1:
                self.sync(name, stale=1)
                c.generation -= 1
                self.commit(name, False)
                c.generation += 1
        else:
            self.commit(name, False)

    @rule(ms=st.sampled_from([0, 250, 2_000]))
    def tick(self, ms):
        """Every client takes its next step, storage catches up, time moves on."""
        for name in CLIENTS:
            self.act(name)
        self.h.store_all()
        self._process()
        self.advance(ms)

    @precondition(lambda self: bool(self.h.appends))
    @rule()
    def store_all(self):
        self.h.store_all()
        self._process()

    @rule(name=st.sampled_from(CLIENTS))
    def leave(self, name):
        c = self.clients[name]
        self.h.leave("g", LeaveMember(c.member_id, c.instance))
        c.member_id, c.generation, c.members = "", -1, ()
        self._process()

    @rule(name=st.sampled_from(CLIENTS), simple=st.booleans())
    def commit(self, name, simple):
        c = self.clients[name]
        g = self.h.group("g")
        gen, mid, inst = (-1, "", None) if simple else (c.generation, c.member_id, c.instance)
        if gen < 0 and (g is None or g.state == S.EMPTY):
            legit = True        # simple / admin commit to an empty (or new) group
        else:
            legit = (g is not None and mid in g.members and gen == g.generation_id
                     and gen == self.max_generation
                     and (inst is None or g.static_members.get(inst) == mid))
        r = self.h.commit("g", {("t", 0): 1}, gen, mid, inst)
        self.commits.append((r, c.generation, legit))
        self._process()

    @rule(ms=st.sampled_from([0, 100, 250, 250, 1_000, 3_000, 6_000, 11_000, 25_000, 400_000]))
    def advance(self, ms):
        self.h.advance(ms)
        self._process()

    @precondition(lambda self: bool(self.h.appends))
    @rule(fail=st.sampled_from([0, 0, 0, C.NOT_LEADER_OR_FOLLOWER, C.REQUEST_TIMED_OUT]))
    def store(self, fail):
        self.h.store_next(fail)
        self._process()

    @rule()
    def expire(self):
        self.h.apply(self.h.c.expire_offsets(self.h.now))
        self._process()

    @invariant()
    def answered_at_most_once(self):
        assert all(len(v) <= 1 for v in self.h.responses.values())

    @invariant()
    def group_is_consistent(self):
        g = self.h.group("g")
        if g is None:
            return
        assert (g.leader_id is None) == (not g.members)
        assert g.leader_id is None or g.leader_id in g.members
        assert set(g.static_members.values()) <= set(g.members)
        assert not (set(g.pending_members) & set(g.members))
        assert g.pending_sync <= set(g.members)
        if g.state == S.EMPTY:
            assert not g.members
        if g.state in (S.STABLE, S.COMPLETING_REBALANCE):
            assert g.members and g.protocol_name == "range"
        assert g.num_awaiting_join() <= 3       # group.max.size bounds the members awaiting join


CoordinatorMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestCoordinatorMachine = CoordinatorMachine.TestCase


def test_a_member_rejoining_with_other_protocols_changes_what_a_newcomer_must_support():
    """The group checks a newcomer's protocols against every member's current list (cached per
    member while its list is unchanged): after `a` rejoins with roundrobin only, a range-only
    newcomer is refused, a roundrobin one is let in."""
    h = Harness()
    both = (("range", b""), ("roundrobin", b""))
    ra, a = h.join_single(client_id="a", protocols=both)
    rb, b = h.join_single(client_id="b", protocols=both)
    h.advance(200)
    assert h.result(ra).error_code == 0 and h.result(rb).error_code == 0
    assert h.result(h.join(client_id="c", protocols=(("range", b""),))).error_code == 79   # accepted
    h.join("g", a, protocols=(("roundrobin", b""),))
    h.join("g", b, protocols=both)
    assert h.result(h.join(client_id="d", protocols=(("range", b""),))).error_code == \
        C.INCONSISTENT_GROUP_PROTOCOL
    assert h.result(h.join(client_id="e", protocols=(("roundrobin", b""),))).error_code == 79
