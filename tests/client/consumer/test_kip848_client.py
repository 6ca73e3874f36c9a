"""kohort's own Consumer with group.protocol=consumer (KIP-848) against real brokers: kohort broker
(alone, and in groups mixed with Java 4.x and confluent-kafka consumer-protocol members), Apache Kafka
4.3.1 (1 and 3 nodes), brokers without the protocol (a clear error from poll()), static members, the
broker-side regex and assignors, and classic kohort groups upgraded online by consumer-protocol kohort
members. Ownership comes from each member's assign/revoke/lost callbacks, sampled throughout: no
partition is ever owned by two members, and every record is consumed.

Subprocess members: tests/helpers/client_group_member.py with STRATEGY "consumer" (kohort), Peer.java
(--protocol consumer), tests/helpers/kip848_member.py (confluent-kafka); in-process members: `Member` below.
Helpers are the KIP-848 broker tests' (test_kip848_broker.py) and the group tests' (test_client_group.py).
The Kafka test bed runs consumer groups with a 1 s heartbeat interval and a 10 s session. Tests of
10-20 s (groups of members in processes of their own, except the kohort-broker SIGKILL one) are
slow-marked."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from kohort import Consumer
from kohort.errors import ErrorCode, for_code
from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import JavaPeer
from tests.helpers.peers import create_topic, produce
from tests.client.consumer.test_client_group import _member, _owned, _records
from tests.broker.coordinator.test_kip848_broker import (  # noqa: F401 - kb is a fixture
    BROKER_CONFIG, _ck_member, _describe, _no_double_ownership, _wait, kb, uniq,
)


class Member:
    """An in-process kohort consumer (group.protocol=consumer) polling on a thread of its own; the
    same JSON-like events as the subprocess members ({"assigned"}, {"revoked"}, {"lost"}, {"records"})."""

    def __init__(self, bs, group, topics=None, pattern=None, **conf):
        self.lines: list = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           **{k.replace("_", "."): v for k, v in conf.items()}})
        ev = self.lines.append
        self.c.subscribe(topics, pattern=pattern,
                         on_assign=lambda c, tps: ev({"assigned": [list(tp) for tp in tps]}),
                         on_revoke=lambda c, tps: ev({"revoked": [list(tp) for tp in tps]}),
                         on_lost=lambda c, tps: ev({"lost": [list(tp) for tp in tps]}))
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                recs = self.c.poll(0.2)
                if recs:
                    self.lines.append({"records": [[r.topic, r.partition, r.offset] for r in recs]})
                    try:
                        self.c.commit()
                    except Exception as e:   # noqa: BLE001 - a rebalance in between: the next owner re-reads
                        self.lines.append({"commit_failed": str(e)})
        except BaseException as e:   # noqa: BLE001 - reported to the test
            self.error = e
        finally:
            self.c.close()

    def owned(self):
        return _owned(list(self.lines))

    def close(self):
        self._stop.set()
        self._t.join(30)
        assert not self._t.is_alive()


def _kill(members):
    for p, _ in members:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_kohort_consumer_protocol_group_of_three_with_a_member_sigkilled(kb):
    topic, group = uniq("k848k"), uniq("k848k")
    n = 6
    total = {(topic, i) for i in range(n)}
    assert create_topic(kb.bootstrap, topic, n) == n
    produce(kb.bootstrap, topic, 3000, partitions=n)
    members = [_member(kb.bootstrap, group, topic, "consumer", seconds=90) for _ in range(3)]
    live = list(members)

    def sample():
        _no_double_ownership([_owned(ls) for _, ls in live])

    def seen():
        return set().union(*(_records(ls) for _, ls in members))

    try:
        ok = _wait(lambda: all(_owned(ls) for _, ls in live)
                   and set().union(*(_owned(ls) for _, ls in live)) == total and len(seen()) == 3000, 60, sample)
        assert ok, ([_owned(ls) for _, ls in live], len(seen()))
        assert _wait(lambda: _describe(kb.bootstrap, group).group_state == "Stable", 20, sample)
        d = _describe(kb.bootstrap, group)
        assert len(d.members) == 3 and {m.member_epoch for m in d.members} == {d.group_epoch}
        assert d.assignor_name == "uniform" and all(len(m.member_id) == 22 for m in d.members)   # client-made ids
        members[0][0].send_signal(signal.SIGKILL)
        members[0][0].wait(10)
        live = members[1:]
        produce(kb.bootstrap, topic, 1000, partitions=n, start=3000)
        ok = _wait(lambda: set().union(*(_owned(ls) for _, ls in live)) == total and len(seen()) == 4000, 60, sample)
        assert ok, ([_owned(ls) for _, ls in live], 4000 - len(seen()))
    finally:
        _kill(members)


@pytest.mark.slow
def test_kohort_java_and_confluent_consumer_protocol_members_in_one_group_kohort_member_sigkilled(kb):
    topic, group = uniq("k848x"), uniq("k848x")
    n = 8
    total = {(topic, i) for i in range(n)}
    assert create_topic(kb.bootstrap, topic, n) == n
    produce(kb.bootstrap, topic, 4000, partitions=n)
    kohort = [_member(kb.bootstrap, group, topic, "consumer", seconds=120) for _ in range(2)]
    java = JavaPeer("consume", "--bootstrap", kb.bootstrap, "--topic", topic, "--group", group, "--offsets",
                    "--protocol", "consumer").start()
    ck = [_ck_member(kb.bootstrap, group, topic, seconds=120)]
    dead: list = []

    def owned():
        return [_owned(ls) for p, ls in kohort if p not in dead] + [java.owned()] + [_owned(ls) for _, ls in ck]

    def sample():
        _no_double_ownership(owned())

    def seen():
        return java.seen() | set().union(*(_records(ls) for _, ls in kohort + ck))

    try:
        ok = _wait(lambda: all(owned()) and set().union(*owned()) == total and len(seen()) == 4000, 90, sample)
        assert ok, (owned(), len(seen()))
        victim = kohort[0][0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        dead.append(victim)
        produce(kb.bootstrap, topic, 2000, partitions=n, start=4000)
        ok = _wait(lambda: set().union(*owned()) == total and sum(map(len, owned())) == n
                   and len(seen()) == 6000, 90, sample)
        assert ok, (owned(), 6000 - len(seen()))
        d = _describe(kb.bootstrap, group)
        assert len(d.members) == 3
    finally:
        java.stop()
        _kill(kohort + ck)


@pytest.mark.slow
def test_kohort_members_through_a_broker_sigkill_mid_rebalance():
    """kohort broker is SIGKILLed right after a third kohort member joined (the others have yet to
    revoke) and restarted on the same port and data: the members find the coordinator again, resend
    full heartbeats with their epochs, the group replayed from __consumer_offsets converges, nothing
    is lost and no partition is owned by two members at any sample."""
    with KohortBroker(config=BROKER_CONFIG) as b:
        topic, group = uniq("k848bk"), uniq("k848bk")
        n = 6
        total = {(topic, i) for i in range(n)}
        assert create_topic(b.bootstrap, topic, n) == n
        produce(b.bootstrap, topic, 2000, partitions=n)
        members = [_member(b.bootstrap, group, topic, "consumer", seconds=150) for _ in range(2)]

        def owned():
            return [_owned(ls) for _, ls in members]

        def sample():
            _no_double_ownership(owned())

        def seen():
            return set().union(*(_records(ls) for _, ls in members))

        try:
            assert _wait(lambda: all(owned()) and set().union(*owned()) == total and len(seen()) == 2000,
                         60, sample), (owned(), len(seen()))
            epoch = _describe(b.bootstrap, group).group_epoch
            members.append(_member(b.bootstrap, group, topic, "consumer", seconds=150))
            states = []
            assert _wait(lambda: states.append(_describe(b.bootstrap, group)) or states[-1].group_epoch > epoch,
                         30, sample)
            b.kill()
            time.sleep(1)
            b.start()
            produce(b.bootstrap, topic, 1000, partitions=n, start=2000)
            ok = _wait(lambda: all(owned()) and set().union(*owned()) == total and sum(map(len, owned())) == n
                       and len(seen()) == 3000, 90, sample)
            assert ok, (owned(), 3000 - len(seen()))
            assert len(_describe(b.bootstrap, group).members) == 3
        finally:
            _kill(members)


def test_a_broker_without_the_consumer_protocol_is_a_clear_error_from_poll(tansu):
    """Tansu serves no ConsumerGroupHeartbeat (API 68); kohort broker with the protocol disabled
    answers UNSUPPORTED_VERSION: both end in UnsupportedVersion from poll(), every time."""
    with KohortBroker(config={"group.coordinator.rebalance.protocols": "classic"}) as b:
        for bs in (tansu, b.bootstrap):
            with Consumer({"bootstrap.servers": bs, "group.id": uniq("no848"), "group.protocol": "consumer"}) as c:
                c.subscribe(["t"])
                for _ in range(2):
                    deadline = time.monotonic() + 30
                    with pytest.raises(for_code(ErrorCode.UNSUPPORTED_VERSION),
                                       match="does not support group.protocol=consumer"):
                        while time.monotonic() < deadline:
                            c.poll(0.2)


def test_static_members_keep_their_partitions_and_a_duplicate_instance_is_refused(kb):
    topic, group = uniq("k848s"), uniq("k848s")
    assert create_topic(kb.bootstrap, topic, 4) == 4
    total = {(topic, i) for i in range(4)}
    a = Member(kb.bootstrap, group, [topic], group_instance_id="ia")
    b = Member(kb.bootstrap, group, [topic], group_instance_id="ib")
    members = [a, b]
    try:
        assert _wait(lambda: a.owned() and b.owned() and a.owned() | b.owned() == total, 30,
                     lambda: _no_double_ownership([m.owned() for m in members]))
        assert _wait(lambda: _describe(kb.bootstrap, group).group_state == "Stable", 20, lambda: None)
        mine, epoch = a.owned(), _describe(kb.bootstrap, group).group_epoch
        dup = Member(kb.bootstrap, group, [topic], group_instance_id="ia")
        members.append(dup)
        assert _wait(lambda: dup.error is not None, 30, lambda: None)
        assert isinstance(dup.error, for_code(ErrorCode.UNRELEASED_INSTANCE_ID)), dup.error
        a.close()                                       # leaves with epoch -2: its partitions stay reserved
        d = _describe(kb.bootstrap, group)
        assert sorted(m.member_epoch for m in d.members)[0] == -2 and d.group_epoch == epoch
        revoked_before = sum(1 for e in b.lines if "revoked" in e)
        a2 = Member(kb.bootstrap, group, [topic], group_instance_id="ia")
        members.append(a2)
        assert _wait(lambda: a2.owned() == mine, 30, lambda: None), (a2.owned(), mine)
        assert sum(1 for e in b.lines if "revoked" in e) == revoked_before
        assert _describe(kb.bootstrap, group).group_epoch == epoch
    finally:
        for m in members:
            m.close()


def test_regex_subscription_is_resolved_by_the_broker(kb):
    prefix, group = uniq("k848re"), uniq("k848re")
    assert create_topic(kb.bootstrap, f"{prefix}-a", 2) == 2
    assert create_topic(kb.bootstrap, f"{prefix}x", 1) == 1              # does not match
    produce(kb.bootstrap, f"{prefix}-a", 100, partitions=2)
    m = Member(kb.bootstrap, group, pattern=f"{prefix}-.*")
    try:
        want = {(f"{prefix}-a", 0), (f"{prefix}-a", 1)}
        assert _wait(lambda: m.owned() == want and len(_records(m.lines)) == 100, 30, lambda: None), m.lines
        assert _describe(kb.bootstrap, group).members[0].subscribed_topic_regex == f"{prefix}-.*"
        assert create_topic(kb.bootstrap, f"{prefix}-b", 1) == 1
        produce(kb.bootstrap, f"{prefix}-b", 50, partitions=1)
        want.add((f"{prefix}-b", 0))
        assert _wait(lambda: m.owned() == want and len(_records(m.lines)) == 150, 30, lambda: None), \
            (m.owned(), m.error)
    finally:
        m.close()


def test_remote_assignor_range_and_an_unknown_assignor(kb):
    t1, t2, group = uniq("k848ra"), uniq("k848ra"), uniq("k848ra")
    for t in (t1, t2):
        assert create_topic(kb.bootstrap, t, 4) == 4
    ms = [Member(kb.bootstrap, group, [t1, t2], group_remote_assignor="range") for _ in range(2)]
    bad = Member(kb.bootstrap, uniq("k848ra"), [t1], group_remote_assignor="nope")
    try:
        assert _wait(lambda: all(len(m.owned()) == 4 for m in ms), 30,
                     lambda: _no_double_ownership([m.owned() for m in ms]))
        assert _describe(kb.bootstrap, group).assignor_name == "range"
        for m in ms:
            o = m.owned()
            p1 = sorted(p for t, p in o if t == t1)
            assert p1 == sorted(p for t, p in o if t == t2) and p1 in ([0, 1], [2, 3]), o
        assert _wait(lambda: bad.error is not None, 30, lambda: None)
        assert isinstance(bad.error, for_code(ErrorCode.UNSUPPORTED_ASSIGNOR)), bad.error
    finally:
        for m in ms + [bad]:
            m.close()


def _upgrade_online(bs, settle=60):
    """Two classic kohort members (cooperative-sticky) consume; two consumer-protocol kohort members
    join the same group (online upgrade); then the classic ones leave: everything consumed, no
    partition owned twice at any sample."""
    topic, group = uniq("k848up"), uniq("k848up")
    n = 6
    total = {(topic, i) for i in range(n)}
    assert create_topic(bs, topic, n) == n
    produce(bs, topic, 2000, partitions=n)
    classic = [_member(bs, group, topic, "cooperative-sticky", seconds=120) for _ in range(2)]
    modern: list = []
    gone: list = []

    def live():
        return [(p, ls) for p, ls in classic + modern if p not in gone]

    def sample():
        _no_double_ownership([_owned(ls) for _, ls in live()])

    def seen():
        return set().union(*(_records(ls) for _, ls in classic + modern))

    try:
        assert _wait(lambda: all(_owned(ls) for _, ls in classic) and len(seen()) == 2000, settle, sample)
        modern.extend(_member(bs, group, topic, "consumer", seconds=120) for _ in range(2))
        produce(bs, topic, 1000, partitions=n, start=2000)
        ok = _wait(lambda: all(_owned(ls) for _, ls in live()) and sum(len(_owned(ls)) for _, ls in live()) == n
                   and set().union(*(_owned(ls) for _, ls in live())) == total and len(seen()) == 3000,
                   settle, sample)
        assert ok, ([_owned(ls) for _, ls in live()], 3000 - len(seen()))
        d = _describe(bs, group)
        assert sorted(m.member_type for m in d.members) == [0, 0, 1, 1], d      # 0 classic, 1 consumer
        for p, _ in classic:
            p.send_signal(signal.SIGTERM)      # (no handler: gone without leaving; the session expires it)
            p.wait(10)
            gone.append(p)
        produce(bs, topic, 1000, partitions=n, start=3000)
        ok = _wait(lambda: set().union(*(_owned(ls) for _, ls in live())) == total and len(seen()) == 4000,
                   settle, sample)
        assert ok, ([_owned(ls) for _, ls in live()], 4000 - len(seen()))
    finally:
        _kill(classic + modern)


@pytest.mark.slow
def test_classic_kohort_group_upgraded_online_by_kohort_consumer_protocol_members(kb):
    _upgrade_online(kb.bootstrap)


@pytest.mark.slow
def test_classic_kohort_group_upgraded_online_on_kafka(kafka1):
    _upgrade_online(kafka1.bootstrap, settle=120)


def test_a_kohort_consumer_protocol_member_on_kafka(kafka1):
    """One member on Apache Kafka 4.3.1: joins, consumes, commits with its member epoch, leaves (-1) on
    close; an unknown remote assignor is refused by Kafka too."""
    topic, group = uniq("k848k1"), uniq("k848k1")
    assert create_topic(kafka1.bootstrap, topic, 3) == 3
    produce(kafka1.bootstrap, topic, 300, partitions=3)
    m = Member(kafka1.bootstrap, group, [topic])
    bad = Member(kafka1.bootstrap, uniq("k848k1"), [topic], group_remote_assignor="nope")
    try:
        assert _wait(lambda: len(_records(m.lines)) == 300 and len(m.owned()) == 3, 60, lambda: None), \
            (m.owned(), m.error)
        assert _wait(lambda: bad.error is not None, 30, lambda: None)
        assert isinstance(bad.error, for_code(ErrorCode.UNSUPPORTED_ASSIGNOR)), bad.error
        for _ in range(50):
            d = _describe(kafka1.bootstrap, group)
            if d.group_state == "Stable":
                break
            time.sleep(0.2)
        assert d.members[0].member_epoch == d.group_epoch >= 1
    finally:
        m.close()
        bad.close()
    d = _describe(kafka1.bootstrap, group)
    assert d.group_state == "Empty" and not d.members
    with Consumer({"bootstrap.servers": kafka1.bootstrap, "group.id": group}) as c:
        committed = c.committed([(topic, p) for p in range(3)])
    assert sum(om.offset for om in committed.values()) == 300


def _group_on_kafka(cluster, kill: bool):
    topic, group = uniq("k848kg"), uniq("k848kg")
    n = 6
    total = {(topic, i) for i in range(n)}
    assert create_topic(cluster.bootstrap, topic, n, replication=min(3, len(cluster.nodes))) == n
    produce(cluster.bootstrap, topic, 3000, partitions=n)
    members = [_member(cluster.bootstrap, group, topic, "consumer", seconds=240) for _ in range(3)]
    live = list(members)

    def sample():
        _no_double_ownership([_owned(ls) for _, ls in live])

    def seen():
        return set().union(*(_records(ls) for _, ls in members))

    try:
        ok = _wait(lambda: all(_owned(ls) for _, ls in live)
                   and set().union(*(_owned(ls) for _, ls in live)) == total and len(seen()) == 3000, 120, sample)
        assert ok, ([_owned(ls) for _, ls in live], len(seen()))
        victim = members[0][0]
        victim.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        victim.wait(10)
        live = members[1:]
        produce(cluster.bootstrap, topic, 1000, partitions=n, start=3000)
        # the dead member's partitions move once its session (10 s on the test bed) expires
        ok = _wait(lambda: set().union(*(_owned(ls) for _, ls in live)) == total and len(seen()) == 4000,
                   150, sample)
        assert ok, ([_owned(ls) for _, ls in live], 4000 - len(seen()))
    finally:
        _kill(members)


@pytest.mark.slow
def test_kohort_consumer_protocol_group_on_kafka_one_node(kafka1):
    _group_on_kafka(kafka1, kill=True)


@pytest.mark.slow
def test_kohort_consumer_protocol_group_on_kafka_three_nodes(kafka3):
    _group_on_kafka(kafka3, kill=True)


# -- issue 12's Java-semantics scenarios, with group.protocol=consumer ---------------------------------
@pytest.mark.parametrize("scenario", ["metadata_driven_rejoin", "commit_after_rebalance",
                                      "poll_after_max_poll_interval"])
def test_group_scenarios_with_the_consumer_protocol(kb, scenario):
    from tests.helpers import group_scenarios as S
    getattr(S, scenario)(kb.bootstrap, uniq("s848"), protocol="consumer")


@pytest.mark.parametrize("scenario", ["metadata_driven_rejoin", "commit_after_rebalance",
                                      "poll_after_max_poll_interval"])
def test_group_scenarios_with_the_consumer_protocol_on_kafka(kafka1, scenario):
    from tests.helpers import group_scenarios as S
    getattr(S, scenario)(kafka1.bootstrap, uniq("s848"), protocol="consumer")


def test_commits_carry_the_member_epoch_and_a_stale_one_is_handled_as_java(kb):
    """OffsetCommit v9 with the member epoch: the broker answers STALE_MEMBER_EPOCH for an older epoch;
    the application's commit then fails with CommitFailedError, a commit made before revoking
    partitions is retried with the member's current epoch (Java's CommitRequestManager)."""
    from kohort.client.consumer.membership import CommitFailedError, Generation
    from kohort.structs import OffsetAndMetadata, TopicPartition
    topic, group = uniq("k848st"), uniq("k848st")
    assert create_topic(kb.bootstrap, topic, 2) == 2
    with Consumer({"bootstrap.servers": kb.bootstrap, "group.id": group, "group.protocol": "consumer",
                   "auto.offset.reset": "earliest"}) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 2 and time.monotonic() < deadline:
            c.poll(0.1)
        g = c._group
        epoch, mid = g.m.member_epoch, g.member_id
        assert epoch >= 1 and c.health()["member_epoch"] == epoch
        offs = {TopicPartition(topic, 0): OffsetAndMetadata(0)}
        c.commit(offs)                                           # the current epoch: accepted
        stale = Generation(epoch - 1, mid, None)
        with pytest.raises(CommitFailedError, match="STALE_MEMBER_EPOCH"):
            g._commit_sync(offs, 5, stale)
        g._commit_sync(offs, 5, stale, retry_stale=True)         # retried with the current epoch
        assert c.committed([TopicPartition(topic, 0)])[TopicPartition(topic, 0)].offset == 0
