"""The KIP-848 group member (kohort.client.consumer.membership_848) with a fake clock: every transition
and every error of its table, as Java's AsyncKafkaConsumer (ConsumerMembershipManager,
ConsumerHeartbeatRequestManager, CommitRequestManager) handles them; plus the config checks of
group.protocol=consumer and the v0 heartbeat rewrite of the driver."""
import uuid

import pytest

from kohort.client.config import load_config
from kohort.client.consumer.group import new_member_id
from kohort.protocol.messages.consumer_group_heartbeat import heartbeat_for_version
from kohort.client.consumer.membership import (
    Assign, AutoCommit, Close, CommitFailedError, Generation, MemberConfig, MetadataUpdate, Poll, Raise,
    RequestFailed, RequestMetadata, Response, Revoke, Send, Subscribe, Tick, Unsubscribe, UseCoordinator,
)
from kohort.client.consumer.membership_848 import (
    FATAL_STATE, FENCED, JOINING, RECONCILING, STABLE, STALE, UNSUBSCRIBED, ConsumerMembership,
    heartbeat_error_action,
)
from kohort.errors import ConfigError, ErrorCode as E, IncompatibleBrokerVersionError, for_code
from kohort.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest as HBReq, ConsumerGroupHeartbeatResponse as HBResp,
)
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kohort.structs import TopicPartition as TP

T0 = 1_000_000
TID = {"t": uuid.UUID(int=1), "u": uuid.UUID(int=2)}


def resp(err=0, epoch=1, interval=1000, assignment=None, member_id="me", message=None):
    a = None
    if assignment is not None:
        by = {}
        for t, p in assignment:
            by.setdefault(t, []).append(p)
        a = HBResp.Assignment(topic_partitions=[HBResp.Assignment.TopicPartitions(topic_id=TID[t], partitions=ps)
                                                for t, ps in sorted(by.items())])
    return HBResp(throttle_time_ms=0, error_code=err, error_message=message, member_id=member_id,
                  member_epoch=epoch, heartbeat_interval_ms=interval, assignment=a)


def owned_of(req):
    if req.topic_partitions is None:
        return None
    names = {v: k for k, v in TID.items()}
    return {(names[tp.topic_id], p) for tp in req.topic_partitions for p in tp.partitions}


class Sim:
    def __init__(self, auto_commit=None, instance=None, assignor=None, rebalance_timeout=20000):
        cfg = MemberConfig(group_id="g", group_instance_id=instance, rebalance_timeout_ms=rebalance_timeout,
                           retry_backoff_ms=100, request_timeout_ms=3000, auto_commit_interval_ms=auto_commit,
                           rack_id="r1", remote_assignor=assignor)
        self.now = T0
        self.m = ConsumerMembership(cfg, "me", self.now)
        self.sent: list[Send] = []
        self.meta_version = 0
        self.feed(MetadataUpdate(self._v(), {"t": 4, "u": 2}, dict(TID)))

    def _v(self):
        self.meta_version += 1
        return self.meta_version

    def feed(self, ev):
        out = self.m.handle(ev, self.now)
        self.sent += [a for a in out if isinstance(a, Send)]
        return out

    def poll(self):
        """As the driver: actions that revoke or assign are run, then the driver polls again."""
        out = self.feed(Poll())
        if any(isinstance(a, (Revoke, Assign)) for a in out):
            out += self.feed(Poll())
        return out

    def tick(self, ms=0):
        self.now += ms
        return self.feed(Tick())

    def hbs(self):
        return [s for s in self.sent if isinstance(s.request, HBReq)]

    def last_hb(self):
        return self.hbs()[-1]

    def answer(self, body):
        return self.feed(Response(self.last_hb().tag, body))

    def find(self):
        find = [s for s in self.sent if isinstance(s.request, FindCoordinatorRequest)][-1]
        out = self.feed(Response(find.tag, FindCoordinatorResponse(error_code=0, node_id=1, host="h", port=9092,
                                                                    coordinators=[])))
        assert UseCoordinator(0x7FFFFFFF - 1, 1, "h", 9092) in out

    def to_stable(self, tps=(("t", 0), ("t", 1)), subscribe=("t",), epoch=1):
        self.feed(Subscribe(tuple(subscribe)))
        self.poll()
        self.find()
        self.poll()
        assert self.m.state == JOINING
        self.answer(resp(epoch=epoch, assignment=tps))
        assert self.m.state == RECONCILING
        out = self.poll()
        assert self.m.state == STABLE, self.m.state
        return out


def test_join_is_a_full_heartbeat_with_the_clients_member_id():
    s = Sim(assignor="range")
    s.feed(Subscribe(("t", "u")))
    assert s.m.state == UNSUBSCRIBED and s.sent == []          # joins start from poll(), as Java
    out = s.poll()
    assert [type(a.request).__name__ for a in out] == ["FindCoordinatorRequest"]
    s.find()
    s.poll()
    hb = s.last_hb()
    r = hb.request
    assert s.m.state == JOINING and hb.to == 0x7FFFFFFF - 1
    assert (r.group_id, r.member_id, r.member_epoch) == ("g", "me", 0)
    assert r.rebalance_timeout_ms == 20000 and r.subscribed_topic_names == ["t", "u"]
    assert r.subscribed_topic_regex is None and r.server_assignor == "range" and r.rack_id == "r1"
    assert r.topic_partitions == [] and r.instance_id is None
    # one heartbeat in flight at a time
    s.tick(5000)
    s.poll()
    assert len(s.hbs()) == 1


def test_reconciliation_assigns_then_acknowledges_after_the_callbacks():
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.answer(resp(epoch=1, assignment=[("t", 0), ("t", 1)]))
    assert s.m.state == RECONCILING and s.m.generation == Generation(1, "me", None)
    out = s.feed(Poll())
    assert out == [Assign(frozenset({TP("t", 0), TP("t", 1)}), frozenset({TP("t", 0), TP("t", 1)}), False)]
    n = len(s.hbs())
    s.tick(5000)            # the callbacks have not run yet: nothing is acknowledged
    assert all(h.request.topic_partitions is None for h in s.hbs()[n:])
    s.feed(Response(s.last_hb().tag, resp(epoch=1))) if len(s.hbs()) > n else None
    s.feed(Poll())          # the driver ran them: ack at once
    ack = s.last_hb().request
    assert owned_of(ack) == {("t", 0), ("t", 1)} and ack.member_epoch == 1
    assert s.m.state == STABLE and s.m.rebalance_count == 1


def test_revocation_comes_first_and_the_ack_lists_only_what_is_kept():
    s = Sim(auto_commit=5000)
    s.to_stable(tps=[("t", 0), ("t", 1), ("t", 2)])
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(epoch=1, assignment=[("t", 0)]))      # the broker moves 1 and 2 away (epoch unchanged)
    assert s.m.state == RECONCILING
    out = s.feed(Poll())
    assert out[0] == Revoke(frozenset({TP("t", 1), TP("t", 2)}), lost=False, commit=True)
    assert out[1] == Assign(frozenset(), frozenset({TP("t", 0)}), False)   # called even with nothing added
    s.tick(1000)                                          # a heartbeat meanwhile does not ack
    assert s.last_hb().request.topic_partitions is None
    s.answer(resp(epoch=1))
    s.feed(Poll())
    assert owned_of(s.last_hb().request) == {("t", 0)}
    s.answer(resp(epoch=2, assignment=[("t", 0), ("t", 3)]))
    out = s.feed(Poll())
    assert out == [Assign(frozenset({TP("t", 3)}), frozenset({TP("t", 0), TP("t", 3)}), False)]


def test_heartbeats_follow_the_brokers_interval_and_send_only_changes():
    s = Sim()
    s.to_stable()
    s.answer(resp(epoch=1, interval=2000))
    n = len(s.hbs())
    s.tick(1999)
    assert len(s.hbs()) == n
    assert s.m.next_deadline() == s.now + 1
    s.tick(1)
    r = s.last_hb().request
    assert len(s.hbs()) == n + 1
    assert r.rebalance_timeout_ms == -1 and r.subscribed_topic_names is None and r.topic_partitions is None
    assert r.server_assignor is None and r.rack_id is None
    s.answer(resp(epoch=1, interval=2000))
    s.feed(Subscribe(("t", "u")))                  # a changed subscription goes out at once
    s.tick(0)
    assert s.last_hb().request.subscribed_topic_names == ["t", "u"]


def test_same_assignment_at_a_new_epoch_is_acknowledged_without_callbacks():
    s = Sim()
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(epoch=3, assignment=[("t", 0), ("t", 1)]))
    out = s.feed(Poll())
    assert not [a for a in out if isinstance(a, (Assign, Revoke))]
    assert s.last_hb().request.member_epoch == 3 and s.m.state == STABLE


@pytest.mark.parametrize("code", [E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID])
def test_fenced_member_loses_its_partitions_and_rejoins_with_epoch_0_and_the_same_id(code):
    s = Sim(auto_commit=1000)
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(err=code, epoch=1))
    assert s.m.state == FENCED and s.m.next_deadline() is None
    with pytest.raises(CommitFailedError):
        s.m.commit_generation()
    s.tick(5000)
    n = len(s.hbs())
    assert len(s.hbs()) == n                          # no heartbeat until the loss is reported
    out = s.feed(Poll())
    assert out == [Revoke(frozenset({TP("t", 0), TP("t", 1)}), lost=True, commit=False)]
    s.feed(Poll())
    r = s.last_hb().request
    assert s.m.state == JOINING and (r.member_id, r.member_epoch, r.topic_partitions) == ("me", 0, [])
    assert r.subscribed_topic_names == ["t"] and r.rebalance_timeout_ms == 20000


def test_fenced_without_partitions_rejoins_at_once():
    s = Sim()
    s.to_stable(tps=[])
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(err=E.FENCED_MEMBER_EPOCH, epoch=1))
    assert s.m.state == JOINING
    s.tick(0)
    assert s.last_hb().request.member_epoch == 0


@pytest.mark.parametrize("code", [E.UNRELEASED_INSTANCE_ID, E.UNSUPPORTED_ASSIGNOR, E.GROUP_MAX_SIZE_REACHED,
                                  E.INVALID_REQUEST, E.FENCED_INSTANCE_ID, E.GROUP_AUTHORIZATION_FAILED,
                                  E.INVALID_REGULAR_EXPRESSION, E.GROUP_ID_NOT_FOUND, E.UNSUPPORTED_VERSION])
def test_fatal_errors_are_raised_by_every_poll_and_stop_heartbeats(code):
    s = Sim(instance="i1")
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(err=code, epoch=1, message="why"))
    assert s.m.state == FATAL_STATE and heartbeat_error_action(code) == "fatal"
    out = s.feed(Poll())
    assert out[0] == Revoke(frozenset({TP("t", 0), TP("t", 1)}), lost=True, commit=False)
    assert isinstance(out[1], Raise) and isinstance(out[1].error, for_code(code))
    assert "why" in str(out[1].error)
    n = len(s.sent)
    s.tick(60000)
    assert len(s.sent) == n
    again = s.feed(Poll())
    assert len(again) == 1 and isinstance(again[0], Raise)           # never a silent empty loop


def test_a_broker_without_api_68_is_a_clear_fatal_error():
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.feed(RequestFailed(s.last_hb().tag, "no ConsumerGroupHeartbeat", unsupported=True))
    for _ in range(2):
        out = s.feed(Poll())
        assert len(out) == 1 and isinstance(out[0], Raise)
        err = out[0].error
        assert isinstance(err, for_code(E.UNSUPPORTED_VERSION))
        assert "does not support group.protocol=consumer" in str(err)


def test_not_coordinator_rediscovers_and_sends_a_full_heartbeat_at_once():
    s = Sim()
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(err=E.NOT_COORDINATOR, epoch=1))
    assert s.m.coordinator is None
    out = s.tick(0)
    assert [type(a.request).__name__ for a in out] == ["FindCoordinatorRequest"]
    s.find()
    s.tick(0)
    r = s.last_hb().request
    assert r.member_epoch == 1 and owned_of(r) == {("t", 0), ("t", 1)} and r.rebalance_timeout_ms == 20000


def test_load_in_progress_and_retriable_errors_back_off_then_go_full():
    s = Sim()
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(err=E.COORDINATOR_LOAD_IN_PROGRESS, epoch=1))
    n = len(s.hbs())
    s.tick(99)
    assert len(s.hbs()) == n
    s.tick(1)
    assert len(s.hbs()) == n + 1 and s.last_hb().request.subscribed_topic_names == ["t"]


def test_a_lost_answer_resends_a_full_heartbeat_with_the_epoch_it_had():
    s = Sim()
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.feed(RequestFailed(s.last_hb().tag, "connection reset"))
    s.tick(0)
    s.find()
    s.tick(100)
    r = s.last_hb().request
    assert r.member_epoch == 1 and owned_of(r) == {("t", 0), ("t", 1)} and r.subscribed_topic_names == ["t"]


def test_topic_authorization_failed_is_raised_once_and_the_member_stays():
    s = Sim()
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(err=E.TOPIC_AUTHORIZATION_FAILED, epoch=1))
    out = s.feed(Poll())
    assert len(out) == 1 and isinstance(out[0].error, for_code(E.TOPIC_AUTHORIZATION_FAILED))
    assert not [a for a in s.feed(Poll()) if isinstance(a, Raise)]
    assert s.m.state == STABLE and s.m.owned


@pytest.mark.parametrize("instance,leave,epoch", [(None, True, -1), ("i1", True, -2), ("i1", False, -2),
                                                   (None, False, None)])
def test_close_revokes_and_leaves(instance, leave, epoch):
    s = Sim(instance=instance)
    s.to_stable()
    s.answer(resp(epoch=1))
    n = len(s.hbs())
    out = s.feed(Close(leave=leave))
    assert out[0] == Revoke(frozenset({TP("t", 0), TP("t", 1)}), lost=False, commit=False)
    if epoch is None:
        assert len(s.hbs()) == n
    else:
        r = s.last_hb().request
        assert s.last_hb().tag[0] == "leave" and r.member_epoch == epoch and r.instance_id == instance
    assert not s.m.subscribed and s.m.next_deadline() is None


def test_unsubscribe_leaves_with_minus_1_and_a_new_subscribe_rejoins():
    s = Sim()
    s.to_stable()
    s.answer(resp(epoch=1))
    out = s.feed(Unsubscribe())
    assert isinstance(out[0], Revoke) and s.last_hb().request.member_epoch == -1
    assert s.m.state == UNSUBSCRIBED
    s.feed(Subscribe(("u",)))
    s.poll()
    r = s.last_hb().request
    assert r.member_epoch == 0 and r.subscribed_topic_names == ["u"] and r.topic_partitions == []


def test_poll_timeout_leaves_then_the_next_poll_reports_lost_and_rejoins():
    s = Sim(rebalance_timeout=20000)
    s.to_stable()
    s.answer(resp(epoch=1))
    for _ in range(20):
        s.tick(1000)
        if s.hbs()[-1].tag[0] != "leave" and s.m.state != STALE:
            s.answer(resp(epoch=1))
    assert s.m.state == STALE
    leave = s.last_hb()
    assert leave.tag[0] == "leave" and leave.request.member_epoch == -1
    out = s.feed(Poll())
    assert out == [Revoke(frozenset({TP("t", 0), TP("t", 1)}), lost=True, commit=False)]
    s.feed(Poll())
    assert s.m.state == JOINING and s.last_hb().request.member_epoch == 0


def test_static_member_poll_timeout_leaves_with_minus_2():
    s = Sim(instance="i1", rebalance_timeout=5000)
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(5000)
    assert s.m.state == STALE and s.last_hb().request.member_epoch == -2


def test_regex_subscription_is_sent_for_the_broker_to_resolve():
    s = Sim()
    s.feed(Subscribe((), regex="t|u"))
    s.poll()
    s.find()
    s.poll()
    r = s.last_hb().request
    assert r.subscribed_topic_regex == "t|u" and r.subscribed_topic_names is None
    s.answer(resp(epoch=1, assignment=[("t", 0), ("u", 1)]))
    out = s.poll()
    assert any(a == Assign(frozenset({TP("t", 0), TP("u", 1)}), frozenset({TP("t", 0), TP("u", 1)}), False)
               for a in out)
    s.answer(resp(epoch=1))
    s.feed(Subscribe(("t",)))            # back to names: the regex is cleared with ""
    s.tick(0)
    r = s.last_hb().request
    assert r.subscribed_topic_names == ["t"] and r.subscribed_topic_regex == ""


def test_unknown_topic_ids_ask_for_metadata_and_are_reconciled_when_it_lands():
    s = Sim()
    s.feed(MetadataUpdate(s._v(), {"t": 4}, {"t": TID["t"]}))         # does not know u yet
    s.feed(Subscribe((), regex=".*"))
    s.poll()
    s.find()
    s.poll()
    s.answer(resp(epoch=1, assignment=[("t", 0), ("u", 0)]))
    out = s.feed(Poll())
    assert RequestMetadata(frozenset()) in out
    assert Assign(frozenset({TP("t", 0)}), frozenset({TP("t", 0)}), False) in out
    s.feed(Poll())
    assert owned_of(s.last_hb().request) == {("t", 0)} and s.m.state == RECONCILING
    s.answer(resp(epoch=1))
    s.feed(MetadataUpdate(s._v(), {"t": 4, "u": 2}, dict(TID)))
    out = s.feed(Poll())
    assert out == [Assign(frozenset({TP("u", 0)}), frozenset({TP("t", 0), TP("u", 0)}), False)]
    s.feed(Poll())
    assert owned_of(s.last_hb().request) == {("t", 0), ("u", 0)} and s.m.state == STABLE


def test_a_new_assignment_while_the_callbacks_run_is_reconciled_next():
    s = Sim()
    s.to_stable(tps=[("t", 0), ("t", 1)])
    s.answer(resp(epoch=1))
    s.tick(1000)
    s.answer(resp(epoch=1, assignment=[("t", 0)]))
    out = s.feed(Poll())                       # Revoke t-1 ... the callbacks run
    assert isinstance(out[0], Revoke)
    s.tick(1000)
    s.answer(resp(epoch=1, assignment=[]))     # meanwhile: give up t-0 too
    out = s.feed(Poll())                       # the first ran; the second is reconciled at once
    assert out[0] == Revoke(frozenset({TP("t", 0)}), lost=False, commit=False)
    s.feed(Poll())
    assert owned_of(s.last_hb().request) == set() and s.m.state == STABLE


def test_answers_from_before_fencing_are_ignored():
    s = Sim()
    s.to_stable()
    s.answer(resp(epoch=1))
    s.tick(1000)
    tag = s.last_hb().tag
    s.feed(Response(tag, resp(err=E.FENCED_MEMBER_EPOCH, epoch=1)))
    s.feed(Response(tag, resp(epoch=5, assignment=[("t", 3)])))
    assert s.m.state == FENCED and s.m.member_epoch == 0


def test_v0_broker_generates_the_member_id():
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.answer(resp(epoch=1, member_id="server-made", assignment=[]))
    s.tick(1000)
    assert s.last_hb().request.member_id == "server-made"
    req = HBReq(group_id="g", member_id="me", member_epoch=0, subscribed_topic_names=["t"], topic_partitions=[])
    v0 = heartbeat_for_version(req, 0)
    assert v0.member_id == "" and req.member_id == "me" and heartbeat_for_version(req, 1) is req
    later = HBReq(group_id="g", member_id="server-made", member_epoch=3)
    assert heartbeat_for_version(later, 0).member_id == "server-made"
    with pytest.raises(IncompatibleBrokerVersionError):
        heartbeat_for_version(HBReq(group_id="g", member_id="me", member_epoch=0, subscribed_topic_regex="x"), 0)
    mid = new_member_id()
    assert len(mid) == 22 and mid != new_member_id()


def test_auto_commit_in_the_group_only():
    s = Sim(auto_commit=1000)
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.now += 2000
    assert AutoCommit() not in s.poll()              # joining: nothing to commit with
    s.answer(resp(epoch=1, assignment=[("t", 0)]))
    s.poll()
    s.now += 1000
    assert AutoCommit() in s.feed(Poll())


def test_commits_carry_the_member_epoch_and_stale_epochs_are_handled_as_java():
    s = Sim()
    s.feed(Subscribe(("t",)))
    with pytest.raises(CommitFailedError):
        s.m.commit_generation()                 # not in the group yet
    s.poll()
    s.find()
    s.poll()
    s.answer(resp(epoch=4, assignment=[("t", 0)]))
    s.poll()
    g = s.m.commit_generation()
    assert g == Generation(4, "me", None)
    assert s.m.commit_failed(0, g, s.now) == ("ok", None)
    verdict, err = s.m.commit_failed(E.STALE_MEMBER_EPOCH, g, s.now)
    assert verdict == "raise" and isinstance(err, CommitFailedError)      # same epoch: nothing newer to use
    old = Generation(3, "me", None)
    assert s.m.commit_failed(E.STALE_MEMBER_EPOCH, old, s.now)[0] == "stale"   # retried with epoch 4
    assert s.m.commit_failed(E.UNKNOWN_MEMBER_ID, g, s.now)[0] == "raise"
    assert s.m.commit_failed(E.COORDINATOR_LOAD_IN_PROGRESS, g, s.now)[0] == "retry"
    assert s.m.commit_failed(E.NOT_COORDINATOR, g, s.now)[0] == "retry" and s.m.coordinator is None
    assert s.m.commit_failed(E.OFFSET_METADATA_TOO_LARGE, g, s.now)[0] == "raise"


def test_error_table_defaults_follow_kafkas_retriable_flag():
    assert heartbeat_error_action(E.NONE) == "ok"
    assert heartbeat_error_action(E.REQUEST_TIMED_OUT) == "retry"
    assert heartbeat_error_action(E.UNKNOWN_SERVER_ERROR) == "fatal"


# -- configuration (Java's ConsumerConfig) -------------------------------------------------------------
BASE = {"bootstrap.servers": "h:9092", "group.id": "g"}


@pytest.mark.parametrize("key,value", [("partition.assignment.strategy", "range"), ("session.timeout.ms", 10000),
                                       ("heartbeat.interval.ms", 1000)])
def test_classic_only_keys_are_refused_with_the_consumer_protocol(key, value):
    with pytest.raises(ConfigError, match=f"{key} cannot be set when group.protocol=CONSUMER"):
        load_config("consumer", {**BASE, "group.protocol": "consumer", key: value})
    load_config("consumer", {"bootstrap.servers": "h:9092", "group.protocol": "consumer", key: value})   # no group


def test_group_remote_assignor_belongs_to_the_consumer_protocol():
    c = load_config("consumer", {**BASE, "group.protocol": "CONSUMER", "group.remote.assignor": "range"})
    assert c["group.protocol"] == "consumer" and c["group.remote.assignor"] == "range"
    with pytest.raises(ConfigError, match="group.remote.assignor cannot be set when group.protocol=CLASSIC"):
        load_config("consumer", {**BASE, "group.remote.assignor": "range"})
    with pytest.raises(ConfigError, match="must be one of"):
        load_config("consumer", {**BASE, "group.protocol": "streams"})


def test_the_machine_imports_no_io():
    from tests.test_layering import closure
    assert closure("kohort.client.consumer.membership_848") == {}


def test_the_ack_lists_the_partitions_even_when_they_look_unchanged():
    """Joined owning nothing, told {t-3}, then (before the callbacks ran) told nothing: the member
    takes t-3 and gives it back; the broker thinks it holds t-3 (it sent it), so the ack must say []
    although [] is what the member last sent (found by test_kip848_client_property)."""
    s = Sim()
    s.feed(Subscribe(("t",)))
    s.poll()
    s.find()
    s.poll()
    s.answer(resp(epoch=2, assignment=[("t", 3)]))
    assert isinstance(s.feed(Poll())[0], Assign)          # callbacks pending
    s.tick(5000)
    s.answer(resp(epoch=2, assignment=[]))
    out = s.feed(Poll())                                  # the Assign ran; t-3 goes at once
    assert out[0] == Revoke(frozenset({TP("t", 3)}), lost=False, commit=False)
    s.feed(Poll())
    assert s.last_hb().request.topic_partitions == [] and s.m.state == STABLE
