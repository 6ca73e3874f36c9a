"""The pure group member (kohort.client.consumer.membership) with a fake clock: every transition and
every error of its table, as Java's AbstractCoordinator/ConsumerCoordinator handle them."""
import pytest
from hypothesis import given, settings, strategies as st

from kohort.assignors import get_assignor
from kohort.client.consumer import membership as M
from kohort.client.consumer.membership import (
    COMPLETING_REBALANCE, PREPARING_REBALANCE, STABLE, UNJOINED, Assign, AutoCommit, Close, CommitFailedError,
    Generation, MemberConfig, Membership, MetadataUpdate, Poll, Raise, RebalanceInProgressError, RequestFailed,
    RequestMetadata, Response, Revoke, Send, Subscribe, Tick, Unsubscribe, UseCoordinator,
)
from kohort.errors import ErrorCode as E
from kohort.protocol.consumer_protocol import (
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, decode_assignment, encode_assignment,
    encode_subscription,
)
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kohort.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from kohort.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from kohort.protocol.messages.leave_group import LeaveGroupRequest
from kohort.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from kohort.structs import TopicPartition

T0 = 1_000_000


def assignment(*tps):
    by = {}
    for t, p in tps:
        by.setdefault(t, []).append(p)
    return encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in by.items()]))


class Sim:
    """A Membership, a fake clock and the requests it sent, answered by hand."""

    def __init__(self, strategy="range", auto_commit=None, instance=None, **kw):
        cfg = MemberConfig(group_id="g", group_instance_id=instance, session_timeout_ms=6000,
                           rebalance_timeout_ms=20000, heartbeat_interval_ms=500, retry_backoff_ms=100,
                           request_timeout_ms=3000, auto_commit_interval_ms=auto_commit,
                           assignors=[get_assignor(strategy)], **kw)
        self.now = T0
        self.m = Membership(cfg, self.now)
        self.sent: list[Send] = []

    def feed(self, ev):
        out = self.m.handle(ev, self.now)
        self.sent += [a for a in out if isinstance(a, Send)]
        return out

    def poll(self):
        """As the driver: a poll whose actions revoke partitions is followed by another (the join)."""
        out = self.feed(Poll())
        if any(isinstance(a, Revoke) for a in out):
            out += self.feed(Poll())
        return out

    def tick(self, ms=0):
        self.now += ms
        return self.feed(Tick())

    def last(self, cls):
        for s in reversed(self.sent):
            if isinstance(s.request, cls):
                return s
        raise AssertionError(f"no {cls.__name__} sent: {self.sent}")

    def count(self, cls):
        return sum(isinstance(s.request, cls) for s in self.sent)

    def answer(self, cls, body):
        return self.feed(Response(self.last(cls).tag, body))

    # -- canned flows --------------------------------------------------------------------------------
    def find(self, node=1):
        from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
        out = self.answer(FindCoordinatorRequest, FindCoordinatorResponse(
            error_code=0, node_id=node, host="h", port=9092, coordinators=[]))
        assert UseCoordinator(0x7FFFFFFF - node, node, "h", 9092) in out

    def join_response(self, err=0, gen=1, member="m1", leader="m0", members=(), protocol="range"):
        return JoinGroupResponse(error_code=err, generation_id=gen, protocol_type="consumer", protocol_name=protocol,
                                 leader=leader, member_id=member, members=list(members))

    def member(self, mid, topics):
        meta = encode_subscription(ConsumerProtocolSubscription(topics=list(topics)), 1)
        return JoinGroupResponse.Member(member_id=mid, metadata=meta)

    def to_stable(self, tps=(("t", 0), ("t", 1)), gen=1, member="m1", subscribe=("t",), protocol="range"):
        """Subscribe, find the coordinator, join as a follower, sync with `tps`, apply on poll."""
        self.feed(Subscribe(tuple(subscribe)))
        self.poll()
        self.find()
        self.poll()
        assert self.m.state == PREPARING_REBALANCE
        self.answer(JoinGroupRequest, self.join_response(gen=gen, member=member, protocol=protocol))
        self.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=assignment(*tps)))
        out = self.poll()
        assert self.m.state == STABLE
        return out


def test_revocation_comes_before_the_join_request():
    s = Sim(auto_commit=5000)
    s.to_stable()
    s.feed(Subscribe(("t", "u")))
    out = s.feed(Poll())
    assert out == [Revoke(frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}), lost=False, commit=True)]
    assert s.count(JoinGroupRequest) == 1 and s.m.state == STABLE      # commits still use generation 1
    assert s.m.commit_generation().generation_id == 1
    s.feed(Poll())
    assert s.count(JoinGroupRequest) == 2 and s.m.state == PREPARING_REBALANCE


def test_find_join_sync_follower_path():
    s = Sim()
    s.feed(Subscribe(("t",)))
    out = s.poll()
    assert [type(a.request).__name__ for a in out] == ["FindCoordinatorRequest"]
    s.find()
    assert s.m.state == UNJOINED
    s.poll()
    join = s.last(JoinGroupRequest)
    assert s.m.state == PREPARING_REBALANCE and join.to == 0x7FFFFFFF - 1
    assert join.request.member_id == "" and join.request.protocols[0].name == "range"
    s.answer(JoinGroupRequest, s.join_response())
    assert s.m.state == COMPLETING_REBALANCE and s.m.generation == Generation(1, "m1", "range")
    sync = s.last(SyncGroupRequest)
    assert sync.request.assignments == [] and sync.request.generation_id == 1
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=assignment(("t", 0))))
    # (6) STABLE as soon as SyncGroup's answer arrives, the assignment is applied by the next poll
    assert s.m.state == STABLE and s.m.owned == frozenset()
    out = s.poll()
    assert out == [Assign(frozenset({TopicPartition("t", 0)}), frozenset({TopicPartition("t", 0)}), False)]
    assert s.m.commit_generation() == Generation(1, "m1", "range")


def test_member_id_required_rejoins_with_the_given_id():
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.answer(JoinGroupRequest, s.join_response(err=E.MEMBER_ID_REQUIRED, gen=-1, member="given"))
    assert s.m.member_id == "given"
    s.poll()
    assert s.count(JoinGroupRequest) == 2 and s.last(JoinGroupRequest).request.member_id == "given"


def test_heartbeats_continue_while_sync_is_in_flight():
    """(6) Java's heartbeat thread runs in COMPLETING_REBALANCE too."""
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.answer(JoinGroupRequest, s.join_response())
    assert s.m.state == COMPLETING_REBALANCE
    s.tick(500)
    assert s.count(HeartbeatRequest) == 1
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    # Java ignores REBALANCE_IN_PROGRESS outside STABLE: the sync in flight goes on
    assert s.m.state == COMPLETING_REBALANCE and s.m.generation == Generation(1, "m1", "range")
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=assignment(("t", 0))))
    assert s.m.state == STABLE


def test_no_heartbeat_before_joining():
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.tick(5000)
    assert s.count(HeartbeatRequest) == 0


def test_heartbeat_interval_and_success_extends_session():
    s = Sim()
    s.to_stable()
    s.tick(499)
    assert s.count(HeartbeatRequest) == 0
    s.tick(1)
    assert s.count(HeartbeatRequest) == 1
    s.tick(600)
    assert s.count(HeartbeatRequest) == 1          # one in flight at a time
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=0))
    s.tick(0)
    assert s.count(HeartbeatRequest) == 2
    for _ in range(20):                              # answered heartbeats keep the session (and poll) alive
        s.answer(HeartbeatRequest, HeartbeatResponse(error_code=0))
        s.poll()
        s.tick(500)
    assert s.m.coordinator is not None and s.m.state == STABLE


def test_session_timeout_without_answers_rediscovers_from_the_heartbeat_side():
    """(2) Java marks the coordinator unknown after session.timeout.ms without a heartbeat answer,
    and the heartbeat thread looks it up again; the membership is kept."""
    s = Sim()
    s.to_stable()
    s.tick(500)
    for _ in range(12):
        s.feed(Poll())
        s.tick(500)
    assert s.m.coordinator is None
    assert s.count(FindCoordinatorRequest) == 2       # sent by the tick that found the session expired
    s.find(node=2)
    assert s.m.state == STABLE and s.m.generation.generation_id == 1
    s.tick(500)
    assert s.last(HeartbeatRequest).to == 0x7FFFFFFF - 2


@pytest.mark.parametrize("err", [E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE])
def test_heartbeat_coordinator_errors_rediscover(err):
    s = Sim()
    s.to_stable()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=err))
    assert s.m.coordinator is None and s.m.state == STABLE
    out = s.tick(0)                                  # (2) the heartbeat side looks it up
    assert any(isinstance(a, Send) and isinstance(a.request, FindCoordinatorRequest) for a in out)


def test_heartbeat_disconnect_rediscovers():
    s = Sim()
    s.to_stable()
    s.tick(500)
    s.feed(RequestFailed(s.last(HeartbeatRequest).tag, "connection lost"))
    assert s.m.coordinator is None
    s.tick(0)
    s.find()
    s.tick(100)
    assert s.count(HeartbeatRequest) == 2


def test_heartbeat_rebalance_in_progress_requests_rejoin_keeping_generation():
    s = Sim()
    s.to_stable()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    assert s.m.rejoin_needed and s.m.generation.generation_id == 1 and s.m.state == STABLE
    out = s.poll()
    assert any(isinstance(a, Revoke) and not a.lost for a in out)      # eager: revoke, not lost
    assert s.last(JoinGroupRequest).request.member_id == "m1"


def test_heartbeat_illegal_generation_keeps_member_id():
    """(7) Java: resetStateOnResponseError(HEARTBEAT, ILLEGAL_GENERATION, shouldResetMemberId=false)."""
    s = Sim()
    s.to_stable()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.ILLEGAL_GENERATION))
    assert s.m.generation == Generation(-1, "m1", None) and s.m.state == UNJOINED
    with pytest.raises(CommitFailedError):
        s.m.commit_generation()
    out = s.poll()
    assert Revoke(frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}), lost=True, commit=False) in out
    assert s.last(JoinGroupRequest).request.member_id == "m1"


def test_heartbeat_unknown_member_id_resets_member_id():
    s = Sim()
    s.to_stable()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID))
    assert s.m.generation == M.NO_GENERATION
    out = s.poll()
    assert any(isinstance(a, Revoke) and a.lost for a in out)
    assert s.last(JoinGroupRequest).request.member_id == ""


def test_heartbeat_error_for_an_old_generation_is_ignored():
    s = Sim()
    s.to_stable()
    s.tick(500)
    hb = s.last(HeartbeatRequest)
    s.m.generation = Generation(2, "m1", "range")      # a newer generation meanwhile
    s.feed(Response(hb.tag, HeartbeatResponse(error_code=E.ILLEGAL_GENERATION)))
    assert s.m.generation == Generation(2, "m1", "range")


def test_heartbeat_fenced_instance_raises_on_poll():
    s = Sim(instance="i1")
    s.to_stable()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.FENCED_INSTANCE_ID))
    out = s.poll()
    assert len(out) == 1 and isinstance(out[0], Raise) and out[0].error.code == E.FENCED_INSTANCE_ID


def test_heartbeat_fatal_error_raises_on_poll():
    s = Sim()
    s.to_stable()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.GROUP_AUTHORIZATION_FAILED))
    out = s.poll()
    assert isinstance(out[0], Raise) and out[0].error.code == E.GROUP_AUTHORIZATION_FAILED


def test_poll_timeout_leaves_and_next_poll_reports_lost_and_rejoins():
    """(5) Java: maybeLeaveGroup from the heartbeat thread; the next poll's onJoinPrepare calls
    onPartitionsLost and rejoins; commits of the lost generation fail meanwhile."""
    s = Sim()
    s.to_stable()
    for _ in range(39):
        s.tick(500)
        if s.m._hb_inflight:
            s.answer(HeartbeatRequest, HeartbeatResponse(error_code=0))
    assert s.count(LeaveGroupRequest) == 0
    s.tick(600)
    leave = s.last(LeaveGroupRequest)
    assert leave.request.members[0].member_id == "m1"
    assert s.m.generation == M.NO_GENERATION and s.m.state == UNJOINED
    with pytest.raises(CommitFailedError, match="not part of an active generation"):
        s.m.commit_generation()
    out = s.poll()
    assert not any(isinstance(a, Raise) for a in out)
    assert out[0] == Revoke(frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}), lost=True, commit=False)
    assert s.m.state == PREPARING_REBALANCE and s.last(JoinGroupRequest).request.member_id == ""


def test_lost_partitions_are_reported_even_while_the_coordinator_is_unknown():
    s = Sim()
    s.to_stable()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID))
    s.m._mark_coordinator_unknown("gone", s.now)
    out = s.feed(Poll())
    assert out == [Revoke(frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}), lost=True, commit=False)]
    out = s.feed(Poll())
    assert isinstance(out[0].request, FindCoordinatorRequest)


def test_static_member_does_not_leave_on_poll_timeout_or_close():
    s = Sim(instance="i1")
    s.to_stable()
    s.tick(20500)
    s.tick(500)
    assert s.count(LeaveGroupRequest) == 0
    s2 = Sim(instance="i1")
    s2.to_stable()
    out = s2.feed(Close(leave=False))
    assert s2.count(LeaveGroupRequest) == 0 and any(isinstance(a, Revoke) for a in out)


def test_close_revokes_and_leaves():
    s = Sim()
    s.to_stable()
    out = s.feed(Close())
    assert out[0] == Revoke(frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}), lost=False, commit=False)
    assert s.count(LeaveGroupRequest) == 1 and s.m.generation == M.NO_GENERATION


def test_unsubscribe_revokes_and_leaves():
    s = Sim()
    s.to_stable()
    s.feed(Unsubscribe())
    assert s.count(LeaveGroupRequest) == 1 and not s.m.subscribed
    assert s.m.commit_generation() == M.NO_GENERATION      # manual assignment commits as -1/""


def test_commit_checks_only_that_the_generation_is_stable():
    """(3) Java's generationIfStable: no record-generation bookkeeping."""
    s = Sim()
    s.to_stable()
    assert s.m.commit_generation().generation_id == 1
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    s.poll()                                   # rejoining
    with pytest.raises(RebalanceInProgressError):
        s.m.commit_generation()
    s.answer(JoinGroupRequest, s.join_response(gen=2))
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=assignment(("t", 0))))
    s.poll()
    assert s.m.commit_generation().generation_id == 2


@pytest.mark.parametrize("err,verdict,cls,member_after", [
    (E.NONE, "ok", None, "m1"),
    (E.ILLEGAL_GENERATION, "raise", CommitFailedError, "m1"),
    (E.UNKNOWN_MEMBER_ID, "raise", CommitFailedError, ""),
    (E.REBALANCE_IN_PROGRESS, "raise", RebalanceInProgressError, "m1"),
    (E.NOT_COORDINATOR, "retry", None, "m1"),
    (E.COORDINATOR_NOT_AVAILABLE, "retry", None, "m1"),
    (E.REQUEST_TIMED_OUT, "retry", None, "m1"),
    (E.COORDINATOR_LOAD_IN_PROGRESS, "retry", None, "m1"),
    (E.UNKNOWN_TOPIC_OR_PARTITION, "retry", None, "m1"),
    (E.OFFSET_METADATA_TOO_LARGE, "raise", None, "m1"),
    (E.GROUP_AUTHORIZATION_FAILED, "raise", None, "m1"),
    (E.FENCED_INSTANCE_ID, "raise", None, "m1"),
])
def test_commit_error_table(err, verdict, cls, member_after):
    s = Sim()
    s.to_stable()
    gen = s.m.commit_generation()
    got, error = s.m.commit_failed(err, gen, s.now)
    assert got == verdict
    if cls is not None:
        assert isinstance(error, cls)
    elif verdict == "raise":
        assert error.code == err
    assert s.m.member_id == member_after
    if err in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT):
        assert s.m.coordinator is None
    if err in (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.REBALANCE_IN_PROGRESS):
        assert s.m.rejoin_needed


def test_commit_error_of_a_stale_generation_while_rejoining_is_rebalance_in_progress():
    s = Sim()
    s.to_stable()
    gen = s.m.commit_generation()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS))
    s.poll()
    s.m.generation = Generation(2, "m1", "range")
    got, error = s.m.commit_failed(E.ILLEGAL_GENERATION, gen, s.now)
    assert got == "raise" and isinstance(error, RebalanceInProgressError)
    assert s.m.generation.generation_id == 2


def _joining(**kw):
    s = Sim(**kw)
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    return s


@pytest.mark.parametrize("err", [E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_ENOUGH_REPLICAS])
def test_join_retriable_errors_retry_after_backoff(err):
    s = _joining()
    s.answer(JoinGroupRequest, s.join_response(err=err, gen=-1, member=""))
    s.poll()
    assert s.count(JoinGroupRequest) == 1
    s.now += 100
    s.poll()
    assert s.count(JoinGroupRequest) == 2


@pytest.mark.parametrize("err", [E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID])
def test_join_errors_retried_at_once(err):
    s = _joining()
    s.answer(JoinGroupRequest, s.join_response(err=E.MEMBER_ID_REQUIRED, gen=-1, member="old"))
    s.poll()
    s.answer(JoinGroupRequest, s.join_response(err=err, gen=-1, member=""))
    s.poll()
    assert s.count(JoinGroupRequest) == 3
    assert s.last(JoinGroupRequest).request.member_id == ("" if err == E.UNKNOWN_MEMBER_ID else "old")


@pytest.mark.parametrize("err", [E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE])
def test_join_coordinator_errors_rediscover(err):
    s = _joining()
    s.answer(JoinGroupRequest, s.join_response(err=err, gen=-1, member=""))
    assert s.m.coordinator is None
    out = s.poll()
    assert isinstance(out[0].request, FindCoordinatorRequest)


@pytest.mark.parametrize("err", [E.GROUP_MAX_SIZE_REACHED, E.INCONSISTENT_GROUP_PROTOCOL, E.INVALID_SESSION_TIMEOUT,
                                 E.INVALID_GROUP_ID, E.GROUP_AUTHORIZATION_FAILED, E.FENCED_INSTANCE_ID,
                                 E.UNSUPPORTED_VERSION, E.UNKNOWN_SERVER_ERROR])
def test_join_fatal_errors_raise_then_a_later_poll_rejoins(err):
    """(4) Java requests a rejoin before throwing from poll()."""
    s = _joining()
    s.answer(JoinGroupRequest, s.join_response(err=err, gen=-1, member=""))
    out = s.poll()
    assert len(out) == 1 and isinstance(out[0], Raise) and out[0].error.code == err
    assert s.m.rejoin_needed
    s.now += 100
    s.poll()
    assert s.count(JoinGroupRequest) == 2


def test_join_transport_failure_rediscovers_and_rejoins():
    s = _joining()
    s.feed(RequestFailed(s.last(JoinGroupRequest).tag, "timed out"))
    assert s.m.coordinator is None and s.m.rejoin_needed
    s.poll()
    s.find()
    s.now += 100
    s.poll()
    assert s.count(JoinGroupRequest) == 2


def test_join_answer_after_leaving_rejoins():
    s = _joining()
    s.m._reset_state_and_generation("left", True)
    s.answer(JoinGroupRequest, s.join_response())
    assert s.count(SyncGroupRequest) == 0 and s.m.rejoin_needed


def test_inconsistent_protocol_type_is_fatal():
    s = _joining()
    r = s.join_response()
    r.protocol_type = "connect"
    s.answer(JoinGroupRequest, r)
    assert isinstance(s.poll()[0], Raise)


def _syncing(**kw):
    s = _joining(**kw)
    s.answer(JoinGroupRequest, s.join_response())
    return s


@pytest.mark.parametrize("err,member", [(E.ILLEGAL_GENERATION, "m1"), (E.UNKNOWN_MEMBER_ID, "")])
def test_sync_member_errors(err, member):
    """(7) SyncGroup ILLEGAL_GENERATION keeps the member id too."""
    s = _syncing()
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=err))
    assert s.m.member_id == member and s.m.generation.generation_id == -1
    s.poll()
    assert s.count(JoinGroupRequest) == 2 and s.last(JoinGroupRequest).request.member_id == member


@pytest.mark.parametrize("err", [E.REBALANCE_IN_PROGRESS, E.INVALID_REQUEST])
def test_sync_rebalance_rejoins_at_once_keeping_the_generation(err):
    s = _syncing()
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=err))
    assert s.m.generation.generation_id == 1
    out = s.poll()
    assert not any(isinstance(a, Raise) for a in out) and s.count(JoinGroupRequest) == 2


def test_sync_coordinator_error_and_fatal_error():
    s = _syncing()
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=E.NOT_COORDINATOR))
    assert s.m.coordinator is None
    s = _syncing()
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=E.GROUP_AUTHORIZATION_FAILED))
    assert isinstance(s.poll()[0], Raise) and s.m.rejoin_needed


def test_sync_answer_after_a_generation_reset_is_dropped():
    s = _syncing()
    s.tick(500)
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID))
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=assignment(("t", 0))))
    assert s.m.state == UNJOINED
    out = s.poll()
    assert not any(isinstance(a, Assign) for a in out) and s.count(JoinGroupRequest) == 2


def test_leader_assigns_from_the_metadata_it_has_without_waiting_for_topics():
    """(1) The leader never waits for a topic to exist: one metadata refresh, then assign."""
    s = Sim()
    s.feed(MetadataUpdate(1, {"t": 2}))
    s.feed(Subscribe(("t", "later")))
    s.poll()
    s.find()
    s.poll()
    members = [s.member("m1", ["t", "later"])]
    out = s.answer(JoinGroupRequest, s.join_response(member="m1", leader="m1", members=members))
    assert RequestMetadata(frozenset({"t", "later"})) in out and s.count(SyncGroupRequest) == 0
    s.feed(MetadataUpdate(2, {"t": 2}))                  # "later" still does not exist
    sync = s.last(SyncGroupRequest)
    got = {a.member_id: decode_assignment(a.assignment) for a in sync.request.assignments}
    assert [(tp.topic, tp.partitions) for tp in got["m1"].assigned_partitions] == [("t", [0, 1])]
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=sync.request.assignments[0].assignment))
    s.poll()
    assert s.m.state == STABLE and not s.m.rejoin_needed
    # the topic appears: the leader's metadata no longer matches what it assigned from -> rejoin
    s.feed(MetadataUpdate(3, {"t": 2, "later": 3}))
    s.poll()
    assert s.count(JoinGroupRequest) == 2
    assert "metadata" in s.last(JoinGroupRequest).request.reason


def test_leader_metadata_wait_is_bounded():
    s = Sim()
    s.feed(Subscribe(("nope",)))
    s.poll()
    s.find()
    s.poll()
    s.answer(JoinGroupRequest, s.join_response(member="m1", leader="m1", members=[s.member("m1", ["nope"])]))
    assert s.count(SyncGroupRequest) == 0
    s.tick(2999)
    assert s.count(SyncGroupRequest) == 0
    s.tick(1)
    assert s.count(SyncGroupRequest) == 1


def test_returning_static_leader_told_to_skip_the_assignment_does_not_rejoin_when_its_metadata_lands():
    """KIP-814: a restarted static leader (no metadata yet) is told to skip the assignment; it still
    waits for the group's topics' metadata before syncing, so their first metadata is no change and
    the group stays in its generation (a rejoin would fail a transaction's TxnOffsetCommit)."""
    s = Sim(instance="i")
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    resp = s.join_response(member="m1", leader="m1", members=[s.member("m1", ["t"])])
    resp.skip_assignment = True
    out = s.answer(JoinGroupRequest, resp)
    assert RequestMetadata(frozenset({"t"})) in out and s.count(SyncGroupRequest) == 0
    s.feed(MetadataUpdate(1, {"t": 2}))
    assert s.last(SyncGroupRequest).request.assignments == []
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=assignment(("t", 0), ("t", 1))))
    s.poll()
    assert s.m.state == STABLE
    s.feed(MetadataUpdate(2, {"t": 2}))
    s.poll()
    assert s.count(JoinGroupRequest) == 1 and not s.m.rejoin_needed


@pytest.mark.parametrize("change", [{"t": 3}, {}])
def test_leader_rejoins_when_partitions_grow_or_topic_disappears(change):
    s = Sim()
    s.feed(MetadataUpdate(1, {"t": 2}))
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.answer(JoinGroupRequest, s.join_response(member="m1", leader="m1", members=[s.member("m1", ["t"])]))
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=assignment(("t", 0), ("t", 1))))
    s.poll()
    s.feed(MetadataUpdate(2, {"t": 2}))
    s.poll()
    assert s.count(JoinGroupRequest) == 1
    s.feed(MetadataUpdate(3, change))
    s.poll()
    assert s.count(JoinGroupRequest) == 2


def test_follower_ignores_metadata_changes_but_rejoins_on_subscription_change():
    s = Sim()
    s.feed(MetadataUpdate(1, {"t": 2}))
    s.to_stable()
    s.feed(MetadataUpdate(2, {"t": 4}))
    s.poll()
    assert s.count(JoinGroupRequest) == 1
    s.feed(Subscribe(("t", "u")))
    s.poll()
    assert s.count(JoinGroupRequest) == 2


def test_leader_without_the_selected_assignor_raises():
    s = Sim()
    s.feed(MetadataUpdate(1, {"t": 2}))
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.answer(JoinGroupRequest, s.join_response(member="m1", leader="m1", members=[s.member("m1", ["t"])],
                                               protocol="roundrobin"))
    out = s.poll()
    assert isinstance(out[0], Raise) and "roundrobin" in str(out[0].error)


def test_eager_revokes_everything_before_joining_and_commits_with_auto_commit():
    s = Sim(auto_commit=5000)
    s.to_stable()
    s.feed(Subscribe(("t", "u")))
    out = s.poll()
    assert out[0] == Revoke(frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}), lost=False, commit=True)
    assert s.m.owned == frozenset()


def test_cooperative_keeps_owned_partitions_and_rejoins_after_revoking():
    s = Sim(strategy="cooperative-sticky")
    s.to_stable(tps=(("t", 0), ("t", 1), ("u", 0)), subscribe=("t", "u"), protocol="cooperative-sticky")
    s.feed(Subscribe(("t",)))
    out = s.poll()
    assert out[0] == Revoke(frozenset({TopicPartition("u", 0)}), lost=False, commit=False)
    join = s.last(JoinGroupRequest).request
    sub = M.decode_subscription(join.protocols[0].metadata)
    assert [(tp.topic, tp.partitions) for tp in sub.owned_partitions] == [("t", [0, 1])]
    s.answer(JoinGroupRequest, s.join_response(gen=2, protocol="cooperative-sticky"))
    s.answer(SyncGroupRequest, SyncGroupResponse(error_code=0, assignment=assignment(("t", 0))))
    out = s.poll()
    assert Revoke(frozenset({TopicPartition("t", 1)}), lost=False, commit=False) in out
    assert Assign(frozenset(), frozenset({TopicPartition("t", 0)}), True) in out
    assert s.m.rejoin_needed                     # KIP-429: rejoin after revoking
    s.poll()
    assert s.count(JoinGroupRequest) == 3


def test_auto_commit_interval():
    s = Sim(auto_commit=1000)
    s.to_stable()
    assert AutoCommit() not in s.poll()
    s.now += 1000
    assert AutoCommit() in s.poll()
    assert AutoCommit() not in s.poll()


def test_find_coordinator_errors_back_off_and_fatal_raises():
    from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    s.answer(FindCoordinatorRequest, FindCoordinatorResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, coordinators=[]))
    s.poll()
    assert s.count(FindCoordinatorRequest) == 1
    s.now += 100
    s.poll()
    assert s.count(FindCoordinatorRequest) == 2
    s.answer(FindCoordinatorRequest, FindCoordinatorResponse(error_code=E.GROUP_AUTHORIZATION_FAILED,
                                                             coordinators=[]))
    assert isinstance(s.poll()[0], Raise)
    s.feed(RequestFailed(("find",), "no broker"))
    s.now += 100
    s.poll()
    assert s.count(FindCoordinatorRequest) == 3


def test_find_coordinator_v4_answer():
    from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    C = FindCoordinatorResponse.Coordinator
    out = s.answer(FindCoordinatorRequest, FindCoordinatorResponse(coordinators=[
        C(key="g", node_id=3, host="x", port=1, error_code=0)]))
    assert UseCoordinator(0x7FFFFFFF - 3, 3, "x", 1) in out


def test_every_error_of_the_table_is_a_kafka_name():
    for code, act in M.ERROR_ACTIONS.items():
        assert E(code).name and act in {M.OK, M.REDISCOVER, M.RETRY, M.REJOIN, M.RESET_GENERATION, M.RESET_MEMBER,
                                        M.NEW_MEMBER_ID, M.FENCED, M.FATAL}
    assert M.error_action(E.UNKNOWN_SERVER_ERROR) == M.FATAL
    assert M.error_action(E.NOT_ENOUGH_REPLICAS) == M.RETRY


def test_next_deadline():
    s = Sim()
    assert s.m.next_deadline() is None
    s.to_stable()
    assert s.m.next_deadline() == s.now + 500
    s.tick(500)
    assert s.m.next_deadline() == s.now + 5500            # heartbeat in flight: the session deadline
    s.feed(RequestFailed(s.last(HeartbeatRequest).tag, "gone"))
    assert s.m.next_deadline() == s.now                    # look the coordinator up now
    s.tick(0)
    assert s.m.next_deadline() is None                     # FindCoordinator in flight: nothing timed
    s.find()
    s.answer(HeartbeatRequest, HeartbeatResponse(error_code=E.GROUP_AUTHORIZATION_FAILED))
    assert s.m.next_deadline() is None                     # failed: the next poll raises


@pytest.mark.parametrize("outage_ms", [1000, 7000])
@pytest.mark.parametrize("load_answer", [None, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR])
def test_coordinator_restart_while_the_application_processes_keeps_the_partitions(outage_ms, load_answer):
    """The coordinator restarts while the application works on one batch for longer than
    session.timeout.ms (no Poll for 9 s), the heartbeat side running: the heartbeat in flight fails,
    FindCoordinator is refused while the broker is down (for longer than the session too, 7 s), the
    coordinator comes back (first heartbeat answered `load_answer`, as a loading or not yet ready
    coordinator may, then NONE). As Java's AbstractCoordinator: the coordinator is only marked
    unknown and found again, the generation is kept, the next polls revoke nothing, assign nothing
    and send no JoinGroup, and commits use the same generation."""
    s = Sim()
    s.to_stable()
    joins = s.count(JoinGroupRequest)
    s.tick(500)
    s.feed(RequestFailed(s.last(HeartbeatRequest).tag, "broker closed the connection"))    # the broker stops
    assert s.m.coordinator is None and s.m.state == STABLE
    elapsed = 500
    while elapsed < 500 + outage_ms:                    # down: every lookup refused
        out = s.tick(100)
        elapsed += 100
        for a in out:
            assert not isinstance(a, (Revoke, Assign))
            if isinstance(a, Send) and isinstance(a.request, FindCoordinatorRequest):
                s.feed(RequestFailed(a.tag, "connection refused"))
    s.tick(100)
    s.find()                                              # back (the same node)
    assert s.m.generation == Generation(1, "m1", "range") and s.m.state == STABLE
    answered = 0
    while elapsed < 9000:                                 # the rest of the processing: heartbeats answered
        before = s.count(HeartbeatRequest)
        s.tick(100)
        elapsed += 100
        if s.count(HeartbeatRequest) > before:
            err = load_answer if (answered == 0 and load_answer is not None) else 0
            out = s.answer(HeartbeatRequest, HeartbeatResponse(error_code=err))
            answered += 1
            if s.m.coordinator is None:                   # NOT_COORDINATOR: found again at once
                s.tick(0)
                s.find()
    assert answered >= 2 and s.m.coordinator is not None
    for _ in range(3):                                    # the application polls again
        out = s.poll()
        assert not [a for a in out if isinstance(a, (Revoke, Assign, Raise))], out
        s.tick(100)
    assert s.count(JoinGroupRequest) == joins and not s.m.rejoin_needed
    assert s.m.owned == frozenset({TopicPartition("t", 0), TopicPartition("t", 1)})
    assert s.m.commit_generation() == Generation(1, "m1", "range")


_OUTCOMES = ["ok", "disconnect", E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
             E.REQUEST_TIMED_OUT]


def _answer_pending(s: "Sim", send: Send, outcome) -> list:
    """Answer one heartbeat or FindCoordinator the way a restarting coordinator may."""
    if outcome == "disconnect":
        return s.feed(RequestFailed(send.tag, "connection lost"))
    code = 0 if outcome == "ok" else outcome
    if isinstance(send.request, HeartbeatRequest):
        return s.feed(Response(send.tag, HeartbeatResponse(error_code=code)))
    if code in (E.REQUEST_TIMED_OUT,):
        code = E.COORDINATOR_NOT_AVAILABLE
    return s.feed(Response(send.tag, FindCoordinatorResponse(error_code=code, node_id=1, host="h", port=9092,
                                                              coordinators=[])))



@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("tick"), st.sampled_from([0, 100, 500, 3000, 7000])),
    st.tuples(st.just("answer"), st.integers(0, 3), st.sampled_from(_OUTCOMES)),
    st.tuples(st.just("poll"), st.just(0)),
), max_size=60))
def test_no_coordinator_trouble_alone_ever_rebalances_the_member(steps):
    """Whatever a coordinator that goes away and comes back answers in whatever order (connections
    lost, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, timeouts, lookups
    refused; sessions expiring on the member's side; polls or none), as long as it never answers
    with a membership error the member never revokes, assigns, raises or sends JoinGroup, and keeps
    its generation: Java's AbstractCoordinator only marks the coordinator unknown and finds it again."""
    s = Sim()
    s.to_stable()
    gen, joins = s.m.generation, s.count(JoinGroupRequest)
    answered: set = set()

    def pending():
        return [x for x in s.sent if id(x) not in answered and isinstance(x.request, (HeartbeatRequest,
                                                                                       FindCoordinatorRequest))]

    def check(out):
        assert not [a for a in out if isinstance(a, (Revoke, Assign, Raise))], out
        assert s.count(JoinGroupRequest) == joins and s.m.generation == gen and s.m.state == STABLE

    last_poll = s.now
    for step in steps:
        if step[0] == "tick":
            if s.now + step[1] - last_poll >= 20000:      # within max.poll.interval.ms (the Sim's 20 s)
                check(s.feed(Poll()))
                last_poll = s.now
            check(s.tick(step[1]))
        elif step[0] == "poll":
            check(s.feed(Poll()))
            last_poll = s.now
        else:
            waiting = pending()
            if waiting:
                send = waiting[step[1] % len(waiting)]
                answered.add(id(send))
                check(_answer_pending(s, send, step[2]))
    for _ in range(200):                                  # then the coordinator is back for good
        for send in pending():
            answered.add(id(send))
            check(_answer_pending(s, send, "ok"))
        check(s.tick(100))
        check(s.feed(Poll()))
        if s.m.coordinator is not None and s.m.last_heartbeat_ms is not None and \
                s.m.last_heartbeat_ms >= s.now - 1000:
            break
    assert s.m.coordinator is not None
    assert s.m.commit_generation() == gen and not s.m.rejoin_needed
