"""kohort's ShareConsumer (KIP-932) and the share-group Admin calls against Apache Kafka 4.3.1 (one
node with share groups on, its default) and against kohort's broker, each scenario on both, with fast share settings (lock 4 s, heartbeat 0.5 s, delivery
count limit 3, assignment interval 0) and `__share_group_state` with replication factor 1. Each group
reads from the earliest offset (group config share.auto.offset.reset=earliest, set with
Admin.alter_configs on the GROUP resource). Also: kohort and confluent-kafka ShareConsumer members in
one group, and the configuration checks (no broker)."""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from kohort import Admin, Producer, ShareConsumer
from kohort.client.share.consumer import AcknowledgeType, IllegalStateError
from kohort.errors import ConfigError, KohortError
from kohort.structs import ConsumerRecord, TopicPartition

SHARE_BROKER_CONFIG = {
    "group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 4000,
    "group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500,
    "group.share.min.session.timeout.ms": 3000, "group.share.session.timeout.ms": 6000,
    "group.share.assignment.interval.ms": 0, "group.share.delivery.count.limit": 3,
    "share.coordinator.state.topic.replication.factor": 1, "share.coordinator.state.topic.min.isr": 1,
}


@pytest.fixture(scope="module", params=["kafka", "kohort"])
def kshare(request):
    """Apache Kafka 4.3.1 (1 node) or kohort's broker, both with the fast share settings."""
    if request.param == "kohort":
        from tests.helpers.brokers import KohortBroker
        with KohortBroker(config=SHARE_BROKER_CONFIG) as kb:
            yield kb
        return
    from tests.helpers.kafka_cluster import KafkaCluster
    kc = KafkaCluster(nodes=1, extra_config=SHARE_BROKER_CONFIG)
    kc.start()
    yield kc
    kc.close()


@pytest.fixture(scope="module")
def admin(kshare):
    a = Admin({"bootstrap.servers": kshare.bootstrap})
    yield a
    a.close()


def _setup(kshare, admin, partitions=3, records=30):
    """A fresh topic with `records` values spread round-robin over its partitions, and a group name
    whose share.auto.offset.reset is earliest."""
    t = "sh-" + uuid.uuid4().hex[:8]
    g = "g-" + t
    admin.create_topics([t], num_partitions=partitions, replication_factor=1)
    admin.alter_configs(("group", g), {"share.auto.offset.reset": "earliest"})
    with Producer({"bootstrap.servers": kshare.bootstrap}) as p:
        for i in range(records):
            p.send(t, value=b"v%d" % i, partition=i % partitions)
        p.flush()
    return t, g


def _consumer(kshare, g, t=None, **conf):
    c = ShareConsumer({"bootstrap.servers": kshare.bootstrap, "group.id": g, **conf})
    if t is not None:
        c.subscribe([t])
    return c


def _poll_until(c, n, timeout=15.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += c.poll(0.5)
    return got


# -- configuration (no broker) ---------------------------------------------------------------------------
@pytest.mark.parametrize("key,value", [("auto.offset.reset", "earliest"), ("enable.auto.commit", False),
                                       ("group.instance.id", "i"), ("isolation.level", "read_committed"),
                                       ("session.timeout.ms", 10000), ("group.protocol", "consumer")])
def test_configs_java_rejects_are_rejected(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ShareConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", key: value})


def test_bad_modes_and_missing_group_are_clear_errors():
    with pytest.raises(ConfigError, match="share.acknowledgement.mode"):
        ShareConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "share.acknowledgement.mode": "auto"})
    with pytest.raises(ConfigError, match="share.acquire.mode"):
        ShareConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "share.acquire.mode": "fast"})
    with pytest.raises(ConfigError, match="group.id"):
        ShareConsumer({"bootstrap.servers": "127.0.0.1:1"})
    c = ShareConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    try:
        with pytest.raises(IllegalStateError, match="not subscribed"):
            c.poll(0)
    finally:
        c.close(timeout=1)
    with pytest.raises(IllegalStateError, match="closed"):
        c.poll(0)


# -- Apache Kafka 4.3.1 ------------------------------------------------------------------------------------
def test_three_members_each_record_accepted_once(kshare, admin):
    t, g = _setup(kshare, admin, partitions=3, records=90)
    members = [_consumer(kshare, g, t) for _ in range(3)]
    seen: Counter = Counter()
    per_member: Counter = Counter()
    try:
        deadline = time.monotonic() + 20
        while sum(seen.values()) < 90 and time.monotonic() < deadline:
            for i, c in enumerate(members):
                for r in c.poll(0.2):
                    assert r.delivery_count == 1
                    seen[(r.partition, r.offset)] += 1
                    per_member[i] += 1
        for c in members:
            assert all(e is None for e in c.commit_sync(10).values())
        # two members can read all 90 records before the third has joined: describe until all three show,
        # each with an assignment
        deadline = time.monotonic() + 15
        d = admin.describe_share_groups([g])[g]
        while (len(d.members) < 3 or not all(m.assignment for m in d.members)) and time.monotonic() < deadline:
            time.sleep(0.2)
            d = admin.describe_share_groups([g])[g]
        assert d.state == "Stable" and d.assignor == "simple" and len(d.members) == 3
        assert {m.member_id for m in d.members} == {c.member_id for c in members}
        assert all(m.subscribed_topics == [t] and m.assignment for m in d.members)
    finally:
        for c in members:
            c.close()
    assert len(seen) == 90 and set(seen.values()) == {1}, "every record delivered exactly once"
    assert sorted(seen) == sorted((p, o) for p in range(3) for o in range(30))
    offsets = admin.list_share_group_offsets(g)
    assert set(offsets) == {TopicPartition(t, p) for p in range(3)}
    assert all(info.lag == 0 for info in offsets.values()), offsets
    assert any(x.group_id == g and x.group_type == "share" for x in admin.list_share_groups())


def test_a_heartbeat_falling_due_at_poll_goes_out(kshare, admin):
    """poll() hands the member a Poll event; when a heartbeat is due at that moment the member sends it
    from there. Were that Send dropped, the heartbeat would stay "in flight" forever: the member would
    stop heartbeating and the coordinator remove it once its session expired. Heartbeats go on, and
    the member is still in the group after longer than its session."""
    t, g = _setup(kshare, admin, partitions=1, records=1)
    c = _consumer(kshare, g, t)
    try:
        assert len(_poll_until(c, 1)) == 1
        member = c._member
        before = None
        deadline = time.monotonic() + 5
        while before is None and time.monotonic() < deadline:
            with c._cond:                      # the driver thread cannot tick meanwhile
                if member.inflight is None:    # no heartbeat waiting for its answer
                    member.next_heartbeat_ms = 0           # due now
                    before = member._seq
                    c.poll(0)
                    assert member._seq == before + 1     # sent (poll(0) may have read its answer too)
            time.sleep(0.01)
        assert before is not None, "a heartbeat was always in flight"
        deadline = time.monotonic() + 5
        while member._seq < before + 3 and time.monotonic() < deadline:    # answered, and the next ones
            time.sleep(0.1)
        assert member._seq >= before + 3, (member._seq, before, member.inflight)
        time.sleep(7)                          # longer than the member session (6 s): still a member
        assert [m.member_id for m in admin.describe_share_groups([g])[g].members] == [c.member_id]
    finally:
        c.close()


def test_a_waiting_poll_does_not_spin(kshare, admin):
    """While poll() waits for records that do not come, the application thread and the driver thread
    sleep: the driver steps on its own timer (every 0.1 s at most), on heartbeat answers and on fetch
    answers. Were every member step to wake the other thread, the two would wake each other back and
    forth, thousands of steps a second, taking the CPU the brokers and the other members need."""
    t, g = _setup(kshare, admin, partitions=1, records=1)
    c = _consumer(kshare, g, t)
    try:
        assert len(_poll_until(c, 1)) == 1
        steps = [0]
        step = c._step

        def counted_step():
            steps[0] += 1
            step()
        c._step = counted_step                 # the driver looks its step up on every turn
        t0 = time.monotonic()
        assert c.poll(2.0) == []               # accepts the record, then nothing more comes
        waited = time.monotonic() - t0
        # 0.1 s timer + heartbeats every 0.5 s + the long-polling fetches (fetch.max.wait.ms 500): ~40
        assert steps[0] < 40 * waited, (steps[0], waited)
    finally:
        c.close()


def test_release_redelivers_with_delivery_count_2(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=5)
    c = _consumer(kshare, g, t, **{"share.acknowledgement.mode": "explicit"})
    try:
        first = _poll_until(c, 5)
        assert [(r.offset, r.delivery_count) for r in first] == [(o, 1) for o in range(5)]
        assert c.acquisition_lock_timeout_ms() == 4000
        for r in first:
            c.acknowledge(r, AcknowledgeType.RELEASE)
        again = _poll_until(c, 5)
        assert [(r.offset, r.delivery_count, r.value) for r in again] == [(o, 2, b"v%d" % o) for o in range(5)]
        for r in again:
            c.acknowledge(r)                      # ACCEPT
        assert c.commit_sync(10) == {TopicPartition(t, 0): None}
        assert c.poll(1.5) == []
    finally:
        c.close()
    assert admin.list_share_group_offsets(g)[TopicPartition(t, 0)].lag == 0


def test_reject_archives_and_limit_archives(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=4)
    c = _consumer(kshare, g, t, **{"share.acknowledgement.mode": "explicit"})
    counts: dict[int, list[int]] = {}
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            recs = c.poll(0.5)
            for r in recs:
                counts.setdefault(r.offset, []).append(r.delivery_count)
                if r.offset == 0:
                    c.acknowledge(r, AcknowledgeType.REJECT)       # never again
                elif r.offset == 1:
                    c.acknowledge(r, AcknowledgeType.ACCEPT)
                else:
                    c.acknowledge(r, AcknowledgeType.RELEASE)      # until the limit (3) archives it
            if recs:
                c.commit_sync(10)
            elif all(len(counts.get(o, ())) >= 3 for o in (2, 3)):
                break
        assert c.poll(1.0) == []
    finally:
        c.close()
    assert counts[0] == [1] and counts[1] == [1]
    assert counts[2] == [1, 2, 3] and counts[3] == [1, 2, 3]
    assert admin.list_share_group_offsets(g)[TopicPartition(t, 0)].lag == 0


def test_explicit_mode_refuses_poll_with_unacknowledged_records(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=3)
    c = _consumer(kshare, g, t, **{"share.acknowledgement.mode": "explicit"})
    try:
        recs = _poll_until(c, 3)
        assert len(recs) == 3
        c.acknowledge(recs[0])
        with pytest.raises(IllegalStateError, match="not acknowledged"):
            c.poll(0)
        with pytest.raises(IllegalStateError, match="already acknowledged|not delivered"):
            c.acknowledge(recs[0])
        for r in recs[1:]:
            c.acknowledge(r)
        assert c.poll(0.3) == []
    finally:
        c.close()


def test_implicit_mode_acknowledge_refused_and_commit_async_callback(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=4)
    done: list = []
    c = ShareConsumer({"bootstrap.servers": kshare.bootstrap, "group.id": g},
                      acknowledgement_commit_callback=lambda offs, err: done.append((offs, err)))
    c.subscribe([t])
    try:
        recs = _poll_until(c, 4)
        with pytest.raises(IllegalStateError, match="explicit"):
            c.acknowledge(recs[0])
        c.commit_async()
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            c.poll(0.2)
        assert done == [({TopicPartition(t, 0): {0, 1, 2, 3}}, None)]
    finally:
        c.close()


def test_closed_members_records_go_to_the_others(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=6)
    a = _consumer(kshare, g, t, **{"share.acknowledgement.mode": "explicit"})
    b = None
    try:
        held = _poll_until(a, 6)
        assert [r.delivery_count for r in held] == [1] * 6
        b = _consumer(kshare, g, t)
        assert b.poll(1.0) == []                  # a holds every record
        a.close()                                 # ShareAcknowledge epoch -1 releases them at once
        got = _poll_until(b, 6, timeout=4.0)      # well before a's locks (4 s) would expire
        assert sorted((r.offset, r.delivery_count) for r in got) == [(o, 2) for o in range(6)]
    finally:
        a.close()
        if b is not None:
            b.close()


def test_admin_alter_delete_offsets_and_delete_group(kshare, admin):
    from kohort.errors import ERRORS, ErrorCode
    t, g = _setup(kshare, admin, partitions=2, records=10)
    c = _consumer(kshare, g, t)
    try:
        assert len(_poll_until(c, 10)) == 10
        c.commit_sync(10)
        with pytest.raises(ERRORS[ErrorCode.NON_EMPTY_GROUP]):
            admin.alter_share_group_offsets(g, {TopicPartition(t, 0): 0})
        assert admin.delete_share_groups([g])[g] is not None          # NON_EMPTY_GROUP while a member is in
    finally:
        c.close()
    res = admin.alter_share_group_offsets(g, {TopicPartition(t, 0): 2, TopicPartition(t, 1): 0})
    assert res == {TopicPartition(t, 0): None, TopicPartition(t, 1): None}
    offs = admin.list_share_group_offsets(g)
    assert offs[TopicPartition(t, 0)].start_offset == 2 and offs[TopicPartition(t, 0)].lag == 3
    assert offs[TopicPartition(t, 1)].start_offset == 0 and offs[TopicPartition(t, 1)].lag == 5
    c = _consumer(kshare, g, t)
    try:
        again = _poll_until(c, 8)
        assert sorted((r.partition, r.offset) for r in again) == [(0, o) for o in range(2, 5)] + [(1, o) for o in range(5)]
        c.commit_sync(10)
    finally:
        c.close()
    assert admin.delete_share_group_offsets(g, [t]) == {t: None}
    assert admin.list_share_group_offsets(g) == {}
    assert admin.describe_groups([g])[0].protocol_type == "share"
    assert admin.delete_share_groups([g]) == {g: None}
    with pytest.raises(KohortError):
        admin.describe_share_groups([g])


def test_kohort_and_confluent_kafka_members_mixed(kshare, admin):
    import confluent_kafka as ck
    assert hasattr(ck, "ShareConsumer"), f"confluent-kafka {ck.version()[0]} has no ShareConsumer (2.15+ needed)"
    t, g = _setup(kshare, admin, partitions=3, records=60)
    k = _consumer(kshare, g, t)
    c = ck.ShareConsumer({"bootstrap.servers": kshare.bootstrap, "group.id": g})
    c.subscribe([t])
    seen: Counter = Counter()
    by: Counter = Counter()
    stop = threading.Event()
    errors: list = []

    def ck_loop():
        try:
            while not stop.is_set():
                for m in c.poll(0.2):
                    if m.error() is None:
                        seen[(m.partition(), m.offset())] += 1
                        by["ck"] += 1
        except Exception as e:                  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=ck_loop)
    th.start()
    try:
        deadline = time.monotonic() + 20
        while sum(seen.values()) < 60 and time.monotonic() < deadline:
            for r in k.poll(0.2):
                seen[(r.partition, r.offset)] += 1
                by["kohort"] += 1
        k.commit_sync(10)
        members = admin.describe_share_groups([g])[g].members
        assert len(members) == 2
    finally:
        stop.set()
        th.join(10)
        c.close()
        k.close()
    assert not errors
    assert len(seen) == 60 and set(seen.values()) == {1}


def test_renew_keeps_records_and_redelivers_them_to_the_same_member(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=2)
    c = _consumer(kshare, g, t, **{"share.acknowledgement.mode": "explicit"})
    try:
        recs = _poll_until(c, 2)
        c.acknowledge(recs[0], AcknowledgeType.RENEW)        # KIP-1222: keep it, its lock restarts
        c.acknowledge(recs[1], AcknowledgeType.ACCEPT)
        again = _poll_until(c, 1, timeout=5)
        assert [(r.offset, r.delivery_count) for r in again] == [(0, 1)]   # renewed, not redelivered
        c.acknowledge(again[0])
        assert c.commit_sync(10) == {TopicPartition(t, 0): None}
    finally:
        c.close()
    assert admin.list_share_group_offsets(g)[TopicPartition(t, 0)].lag == 0


def test_lock_expiry_redelivers_and_wakeup_interrupts_poll(kshare, admin):
    from kohort.client.share.consumer import WakeupError
    t, g = _setup(kshare, admin, partitions=1, records=3)
    a = _consumer(kshare, g, t, **{"share.acknowledgement.mode": "explicit"})
    b = _consumer(kshare, g, t)
    try:
        held = _poll_until(a, 3)
        assert len(held) == 3
        start = time.monotonic()
        got = _poll_until(b, 3, timeout=12)     # a never acknowledges: its 4 s locks expire
        assert sorted((r.offset, r.delivery_count) for r in got) == [(0, 2), (1, 2), (2, 2)]
        assert time.monotonic() - start >= 2.5
        a.acknowledge(held[0], AcknowledgeType.RELEASE)     # too late: the lock is gone
        assert a.commit_sync(5)[TopicPartition(t, 0)] is not None    # INVALID_RECORD_STATE from the leader
        threading.Timer(0.3, b.wakeup).start()
        with pytest.raises(WakeupError):
            b.poll(5.0)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("mode", ["record_limit", "batch_optimized"])
def test_acquire_mode_decides_how_much_one_fetch_takes(kshare, admin, mode):
    t, g = _setup(kshare, admin, partitions=1, records=7)      # one log batch of 7 records
    conf = {"share.acquire.mode": mode, "share.acknowledgement.mode": "explicit", "max.poll.records": 3}
    a = _consumer(kshare, g, t, **conf)
    b = None
    try:
        first = _poll_until(a, 1)
        assert [r.offset for r in first] == [0, 1, 2]           # poll() returns max.poll.records either way
        b = _consumer(kshare, g, t)
        other = _poll_until(b, 4, timeout=3.0)
        if mode == "record_limit":                              # KIP-1206: a acquired 3, the rest was free
            assert [(r.offset, r.delivery_count) for r in other] == [(o, 1) for o in range(3, 7)]
        else:                                                   # a acquired the whole batch
            assert other == []
    finally:
        a.close()
        if b is not None:
            b.close()


def _ck_share_program(mod, bootstrap: str, topic: str, group: str) -> list:
    """A confluent-kafka share-consumer program: explicit mode, RELEASE each record on its first
    delivery, ACCEPT on the second, commit_sync after each poll; what it saw, in a comparable form."""
    out: list = []
    c = mod.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
    try:
        try:
            c.poll(0.1)
        except mod.IllegalStateException:
            out.append("IllegalStateException before subscribe")
        c.subscribe([topic])
        out.append(("subscription", c.subscription()))
        done = set()
        deadline = time.monotonic() + 20
        while len(done) < 6 and time.monotonic() < deadline:
            msgs = c.poll(0.5)
            for m in msgs:
                assert m.error() is None
                out.append((m.partition(), m.offset(), m.value(), m.delivery_count()))
                if m.delivery_count() == 1:
                    c.acknowledge(m, mod.AcknowledgeType.RELEASE)
                else:
                    c.acknowledge(m, mod.AcknowledgeType.ACCEPT)
                    done.add((m.partition(), m.offset()))
            if len(msgs):
                res = c.commit_sync(10)
                out.append(("commit", sorted((tp.topic == topic, tp.partition, e is None) for tp, e in res.items())))
        try:
            c.acknowledge_offset(topic, 0, 0, mod.AcknowledgeType.ACCEPT)
        except mod.IllegalStateException:
            out.append("IllegalStateException acknowledging twice")
    finally:
        c.close()
    try:
        c.poll(0)
    except mod.IllegalStateException:
        out.append("IllegalStateException after close")
    return out


def test_compat_share_consumer_matches_confluent_kafka(kshare, admin):
    import confluent_kafka
    import kohort.compat.confluent_kafka as compat
    outs = []
    for mod in (confluent_kafka, compat):
        t, g = _setup(kshare, admin, partitions=1, records=6)
        outs.append([x if not isinstance(x, tuple) or x[0] != "subscription" else ("subscription", [t == y for y in x[1]])
                     for x in _ck_share_program(mod, kshare.bootstrap, t, g)])
    assert outs[0] == outs[1]
    assert sorted(x for x in outs[1] if isinstance(x, tuple) and len(x) == 4) == \
        sorted((0, o, b"v%d" % o, n) for o in range(6) for n in (1, 2))


def test_unsubscribe_sends_acknowledgements_and_subscribe_rejoins(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=3)
    c = _consumer(kshare, g, t)
    try:
        assert len(_poll_until(c, 3)) == 3
        c.poll(0.5)                               # implicit mode: accepts the 3 (sent on this poll's fetch)
        c.unsubscribe()
        assert c.subscription() == set() and c.assignment() == set()
        with pytest.raises(IllegalStateError, match="not subscribed"):
            c.poll(0)
        with Producer({"bootstrap.servers": kshare.bootstrap}) as p:
            p.send(t, value=b"late", partition=0)
            p.flush()
        c.subscribe([t])
        got = _poll_until(c, 1)
        assert [(r.offset, r.value, r.delivery_count) for r in got] == [(3, b"late", 1)]
    finally:
        c.close()


def test_broker_without_share_groups_is_a_clear_error_from_poll():
    """A kohort broker whose share.version feature is 0 answers ShareGroupHeartbeat UNSUPPORTED_VERSION."""
    from kohort.errors import ERRORS, ErrorCode
    from tests.helpers.brokers import KohortBroker
    with KohortBroker(config={"share.version": 0}) as kb:
        with Producer({"bootstrap.servers": kb.bootstrap}) as p:
            p.send("jobs", value=b"x")
            p.flush()
        c = ShareConsumer({"bootstrap.servers": kb.bootstrap, "group.id": "g"})
        try:
            c.subscribe(["jobs"])
            with pytest.raises(ERRORS[ErrorCode.UNSUPPORTED_VERSION], match="share.version is 0"):
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    c.poll(0.2)
        finally:
            c.close(timeout=5)


# -- records (no broker) -------------------------------------------------------------------------------
def test_delivery_count_on_records_and_compat_messages():
    from kohort.compat.confluent_kafka import Message
    plain = ConsumerRecord("t", 0, 5, 1000, 0, b"k", b"v", [], 3)
    assert plain.delivery_count is None and len(plain) == 9
    assert plain == ConsumerRecord._make(("t", 0, 5, 1000, 0, b"k", b"v", [], 3))   # as the decoders build them
    shared = plain.with_delivery_count(2)
    assert shared.delivery_count == 2 and shared.offset == 5 and shared.leader_epoch == 3
    assert ConsumerRecord("t", 0, 5, 1000, 0, b"k", b"v", [], 3, delivery_count=2) == shared
    assert "delivery_count=2" in repr(shared)
    assert Message.from_record(shared).delivery_count() == 2 and Message.from_record(shared).offset() == 5
    assert Message.from_record(plain).delivery_count() is None
