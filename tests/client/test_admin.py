"""Admin client against kohort's broker (and Tansu for the common subset): topics, partitions, configs,
cluster, group offsets and resets, lag; and the same live group as confluent-kafka's admin API sees it."""
import os
import time

import pytest

from kohort.client.admin import EARLIEST, LATEST, Admin
from kohort.client.producer import Producer
from kohort.errors import KafkaConnectionError, KohortError, UnknownTopicOrPartitionError
from kohort.structs import TopicPartition as TP
from tests.helpers.brokers import KohortBroker


@pytest.fixture(scope="module")
def kb():
    with KohortBroker() as b:
        yield b.bootstrap


@pytest.fixture
def admin(kb):
    a = Admin({"bootstrap.servers": kb, "default.api.timeout.ms": 15000})
    yield a
    a.close()


def _fill(addr, topic, per_partition: dict, ts=None):
    p = Producer({"bootstrap.servers": addr, "linger.ms": 1})
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, b"v%d" % i, partition=part, timestamp=None if ts is None else ts + i)
    assert p.flush(20) == 0
    p.close()


def test_topic_lifecycle(admin):
    assert admin.create_topics({"t-life": 3, "t-life2": {"num_partitions": 2, "configs": {"retention.ms": "1000"}}}) \
        == {"t-life": None, "t-life2": None}
    res = admin.create_topics(["t-life"])
    assert res["t-life"].name == "TOPIC_ALREADY_EXISTS"
    assert {"t-life", "t-life2"} <= set(admin.list_topics())
    (d,) = admin.describe_topics(["t-life"])
    assert [p.partition for p in d.partitions] == [0, 1, 2] and all(p.leader >= 0 for p in d.partitions)
    assert admin.create_partitions({"t-life": 5}) == {"t-life": None}
    assert len(admin.describe_topics(["t-life"])[0].partitions) == 5
    cfg = admin.describe_configs([("topic", "t-life2")])[(2, "t-life2")]
    assert cfg["retention.ms"].value == "1000"
    admin.alter_configs(("topic", "t-life2"), {"retention.ms": "5000", "cleanup.policy": "compact"})
    cfg = admin.describe_configs([("topic", "t-life2")])[(2, "t-life2")]
    assert cfg["retention.ms"].value == "5000" and cfg["cleanup.policy"].value == "compact"
    assert admin.delete_topics(["t-life2"]) == {"t-life2": None}
    assert "t-life2" not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError, match="'t-life2' does not exist"):
        admin.describe_topics(["t-life2"])


def test_bad_arguments_are_clear(admin):
    with pytest.raises(KohortError, match="num_partitions must be >= 1"):
        admin.create_topics({"bad": 0})
    with pytest.raises(KohortError, match="unknown config resource type"):
        admin.describe_configs([("table", "x")])
    with pytest.raises(KohortError, match="unknown reset target"):
        admin.plan_reset_offsets("g", [("x", 0)], to="middle")


def test_cluster(admin, kb):
    c = admin.describe_cluster()
    assert c.brokers and f"{c.brokers[0].host}:{c.brokers[0].port}" == kb
    assert c.controller_id == c.brokers[0].node_id


def test_list_offsets_and_group_offsets_reset(admin, kb):
    admin.create_topics({"t-off": 2})
    t0 = int(time.time() * 1000) - 100_000
    _fill(kb, "t-off", {0: 10, 1: 4}, ts=t0)
    assert admin.list_offsets({("t-off", 0): EARLIEST, ("t-off", 0): LATEST}) == {TP("t-off", 0): 10}  # noqa
    assert admin.list_offsets({("t-off", 1): t0 + 2}) == {TP("t-off", 1): 2}
    admin.alter_group_offsets("g-off", {("t-off", 0): 3, ("t-off", 1): 1})
    offs = admin.list_group_offsets("g-off")
    assert {tp: o.offset for tp, o in offs.items()} == {TP("t-off", 0): 3, TP("t-off", 1): 1}
    lag = {(r.topic, r.partition): (r.current_offset, r.log_end_offset, r.lag) for r in admin.group_lag("g-off")}
    assert lag == {("t-off", 0): (3, 10, 7), ("t-off", 1): (1, 4, 3)}
    tps = [("t-off", 0), ("t-off", 1)]
    plan = admin.reset_group_offsets("g-off", tps, to="latest", dry_run=True)
    assert plan == {TP("t-off", 0): (3, 10), TP("t-off", 1): (1, 4)}
    assert admin.list_group_offsets("g-off")[TP("t-off", 0)].offset == 3      # dry run changed nothing
    cases = [("earliest", None, {0: 0, 1: 0}), ("offset", 2, {0: 2, 1: 2}), ("shift-by", 5, {0: 7, 1: 4}),
             ("shift-by", -100, {0: 0, 1: 0}), ("timestamp", t0 + 3, {0: 3, 1: 3}),
             ("offset", 99, {0: 10, 1: 4}), ("current", None, {0: 10, 1: 4})]
    for to, value, want in cases:
        admin.reset_group_offsets("g-off", tps, to=to, value=value)
        got = {tp.partition: o.offset for tp, o in admin.list_group_offsets("g-off").items()}
        assert got == want, (to, value)
    assert admin.delete_groups(["g-off"]) == {"g-off": None}
    assert admin.list_group_offsets("g-off") == {}


def test_unreachable_cluster_is_one_clear_error():
    from tests.helpers.brokers import free_port
    port = free_port()
    with Admin({"bootstrap.servers": f"127.0.0.1:{port}", "default.api.timeout.ms": 1500}) as a:
        t0 = time.monotonic()
        with pytest.raises(KafkaConnectionError) as ei:
            a.list_topics()
        assert time.monotonic() - t0 < 6
    msg = str(ei.value)
    assert f"127.0.0.1:{port}" in msg and "ECONNREFUSED" in msg and "--bootstrap-server" in msg
    assert msg.startswith(f"cannot reach any Kafka broker at 127.0.0.1:{port} (")


def test_admin_on_tansu(tansu):
    with Admin({"bootstrap.servers": tansu}) as a:
        name = f"ta-{os.getpid()}"
        assert a.create_topics({name: 2}) == {name: None}
        assert len(a.describe_topics([name])[0].partitions) == 2
        _fill(tansu, name, {0: 3})
        a.alter_group_offsets(f"g-{name}", {(name, 0): 1})
        assert a.list_group_offsets(f"g-{name}")[TP(name, 0)].offset == 1
        assert a.delete_topics([name]) == {name: None}


# -- a live group, as confluent-kafka's admin API reports it ------------------------------------------
@pytest.fixture
def live_group(kb, admin):
    from confluent_kafka import Consumer
    topic, group = "t-live", "g-live"
    admin.create_topics({topic: 4})
    _fill(kb, topic, {0: 5, 1: 6, 2: 7, 3: 8})
    consumers = []
    for i in range(2):
        consumers.append(Consumer({"bootstrap.servers": kb, "group.id": group, "client.id": f"peer-{i}",
                                   "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                   "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                                   "log_level": 0}))
    for c in consumers:
        c.subscribe([topic])
    deadline = time.time() + 40
    while time.time() < deadline:
        for c in consumers:
            c.poll(0.2)
        if all(len(c.assignment()) == 2 for c in consumers):
            break
    assert all(len(c.assignment()) == 2 for c in consumers), "group never settled"
    from confluent_kafka import TopicPartition
    consumers[0].commit(offsets=[TopicPartition(topic, tp.partition, 2) for tp in consumers[0].assignment()],
                        asynchronous=False)
    yield topic, group, consumers
    for c in consumers:
        c.close()


def confluent_view(kb, topic, group):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    ac = AdminClient({"bootstrap.servers": kb, "log_level": 0})
    desc = ac.describe_consumer_groups([group])[group].result(20)
    members = sorted((m.member_id, m.client_id, m.host,
                      tuple(sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)))
                     for m in desc.members)
    offs = ac.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
    committed = {(tp.topic, tp.partition): tp.offset for tp in offs.topic_partitions if tp.offset >= 0}
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": kb, "group.id": "watermarks", "log_level": 0})
    ends = {(topic, p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(4)}
    c.close()
    lag = {tp: ends[tp] - off for tp, off in committed.items()}
    return str(desc.state).split(".")[-1], members, committed, lag


@pytest.mark.timeout(120)
def test_live_group_matches_confluent_admin(kb, admin, live_group):
    topic, group, _ = live_group
    state, members, committed, lag = confluent_view(kb, topic, group)
    (d,) = admin.describe_groups([group])
    ours = sorted((m.member_id, m.client_id, m.client_host,
                   tuple(sorted((tp.topic, tp.partition) for tp in m.assignment))) for m in d.members)
    assert ours == members
    assert d.state.upper() == state.upper() == "STABLE"
    rows = admin.group_lag(group)
    assert {(r.topic, r.partition): r.current_offset for r in rows if r.current_offset is not None} == committed
    assert {(r.topic, r.partition): r.lag for r in rows if r.lag is not None} == lag
    owners = {(r.topic, r.partition): r.member_id for r in rows}
    for member_id, _, _, tps in members:
        for tp in tps:
            assert owners[tp] == member_id
    # offsets of an active group cannot be reset
    with pytest.raises(KohortError, match="inactive"):
        admin.reset_group_offsets(group, [(topic, 0)], to="earliest")
    assert any(g.group_id == group for g in admin.list_groups())
