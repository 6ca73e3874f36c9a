"""kohort.testing's fixtures serving applications written with every client family: confluent-kafka
(librdkafka), kafka-python, aiokafka, kohort itself, kafkajs (node) and the Java client: a produce +
consume round trip each; injected faults reach the clients' retry paths (a retriable Produce error is
retried and the record arrives once; a non-retriable one is named by the delivery report); restart()
keeps acknowledged records and committed offsets; brokers configured with Kafka's names (no
auto-creation, SASL/PLAIN, several listeners)."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import Producer as CKProducer

from kohort.testing.plugin import kafka_broker, kafka_broker_factory, kafka_broker_session  # noqa: F401

# the fixtures come from kohort.testing.plugin (imported above: this checkout's src, not an installed wheel)


def _ck_consume(bootstrap: str, topic: str, n: int, group: str | None = None, timeout: float = 30.0,
                extra: dict | None = None) -> list[bytes]:
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group or f"g-{uuid.uuid4().hex[:6]}",
                    "auto.offset.reset": "earliest", **(extra or {})})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        # read on briefly: a duplicate would show up now
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


def _ck_produce(bootstrap: str, topic: str, values: list[bytes], extra: dict | None = None) -> list:
    p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 0, **(extra or {})})
    reports: list = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(30) == 0
    return reports


# -- confluent-kafka (librdkafka) ----------------------------------------------------------------------------
def test_confluent_kafka_round_trip(kafka_broker):
    kafka_broker.create_topic("orders", partitions=3)
    reports = _ck_produce(kafka_broker.bootstrap_servers, "orders", [b"a", b"b", b"c"])
    assert [e for e, _ in reports] == [None, None, None]
    assert sorted(_ck_consume(kafka_broker.bootstrap_servers, "orders", 3)) == [b"a", b"b", b"c"]


def test_confluent_kafka_retries_a_retriable_produce_error_and_the_record_arrives_once(kafka_broker):
    kafka_broker.create_topic("t")
    bs = kafka_broker.bootstrap_servers
    p = CKProducer({"bootstrap.servers": bs, "linger.ms": 0})
    p.produce("t", b"warm-up")
    assert p.flush(10) == 0
    kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
    reports = []
    p.produce("t", b"once", on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(30) == 0
    assert reports == [None]
    assert kafka_broker.faults_applied("Produce") == 1 and kafka_broker.faults_pending() == 0
    assert _ck_consume(bs, "t", 2) == [b"warm-up", b"once"]


@pytest.mark.parametrize("error", ["INVALID_RECORD", "RECORD_LIST_TOO_LARGE"])
def test_confluent_kafka_delivery_report_names_a_non_retriable_error(kafka_broker, error):
    kafka_broker.create_topic("t")
    kafka_broker.fail_next("Produce", error)
    reports = _ck_produce(kafka_broker.bootstrap_servers, "t", [b"refused"])
    ((err, _),) = reports
    assert err is not None and err.name() == error and err.code() == getattr(CKError, error)
    assert not err.retriable()
    assert _ck_consume(kafka_broker.bootstrap_servers, "t", 1, timeout=2) == []


def test_confluent_kafka_reconnects_after_a_dropped_connection_and_the_record_arrives_once(kafka_broker):
    kafka_broker.create_topic("t")
    kafka_broker.drop_connection("Produce")
    assert [e for e, _ in _ck_produce(kafka_broker.bootstrap_servers, "t", [b"x"])] == [None]
    assert kafka_broker.faults_applied("Produce") == 1
    assert _ck_consume(kafka_broker.bootstrap_servers, "t", 1) == [b"x"]


def test_confluent_kafka_consumer_rejoins_after_a_join_group_error(kafka_broker):
    kafka_broker.create_topic("t")
    _ck_produce(kafka_broker.bootstrap_servers, "t", [b"x"])
    kafka_broker.fail_next("JoinGroup", "COORDINATOR_LOAD_IN_PROGRESS", count=2)
    assert _ck_consume(kafka_broker.bootstrap_servers, "t", 1) == [b"x"]
    assert kafka_broker.faults_applied("JoinGroup") == 2


@pytest.mark.parametrize("storage", ["memory", "tmp"])
def test_restart_keeps_acknowledged_records_and_committed_offsets(kafka_broker_factory, storage):
    b = kafka_broker_factory(storage=storage)
    b.create_topic("t", partitions=2)
    bs = b.bootstrap_servers
    assert [e for e, _ in _ck_produce(bs, "t", [b"1", b"2", b"3"], {"acks": "all"})] == [None] * 3
    assert sorted(_ck_consume(bs, "t", 3, group="keep")) == [b"1", b"2", b"3"]   # commits on close
    b.restart()
    assert b.bootstrap_servers == bs
    assert b.topics() == ["t"]
    _ck_produce(bs, "t", [b"4"])
    assert _ck_consume(bs, "t", 1, group="keep") == [b"4"]                        # from the committed offsets
    assert sorted(_ck_consume(bs, "t", 4)) == [b"1", b"2", b"3", b"4"]


def test_stop_and_start(kafka_broker):
    kafka_broker.create_topic("t")
    _ck_produce(kafka_broker.bootstrap_servers, "t", [b"before"])
    kafka_broker.stop()
    assert not kafka_broker.running
    with pytest.raises(RuntimeError, match="stopped"):
        kafka_broker.create_topic("u")
    kafka_broker.start()
    assert _ck_consume(kafka_broker.bootstrap_servers, "t", 1) == [b"before"]


# -- kohort's own client -------------------------------------------------------------------------------------
def test_kohort_client_round_trip_and_retry(kafka_broker):
    from kohort import Consumer, Producer
    from kohort.errors import InvalidRecordError
    kafka_broker.create_topic("t")
    bs = kafka_broker.bootstrap_servers
    with Producer({"bootstrap.servers": bs, "linger.ms": 0}) as p:
        p.produce("t", b"first").result(10)
        kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
        md = p.produce("t", b"second").result(30)             # retried after a metadata refresh
        assert md.offset == 1
        assert kafka_broker.faults_applied("Produce") == 1
        kafka_broker.fail_next("Produce", "INVALID_RECORD")
        with pytest.raises(InvalidRecordError):
            p.produce("t", b"refused").result(30)
    with Consumer({"bootstrap.servers": bs, "group.id": "g", "auto.offset.reset": "earliest"}) as c:
        c.subscribe(["t"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.2)]
    assert got == [b"first", b"second"]


def test_delay_slows_answers_for_kohort_client(kafka_broker):
    from kohort import Producer
    kafka_broker.create_topic("t")
    with Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 0}) as p:
        p.produce("t", b"warm").result(10)
        kafka_broker.delay("Produce", 400)
        t0 = time.monotonic()
        p.produce("t", b"late").result(10)
        assert time.monotonic() - t0 >= 0.4


# -- kafka-python, aiokafka ----------------------------------------------------------------------------------
def test_kafka_python_round_trip(kafka_broker):
    from kafka import KafkaConsumer, KafkaProducer
    kafka_broker.create_topic("t")
    bs = kafka_broker.bootstrap_servers
    p = KafkaProducer(bootstrap_servers=bs)
    try:
        p.send("t", b"kp").get(timeout=30)
    finally:
        p.close()
    c = KafkaConsumer("t", bootstrap_servers=bs, group_id="g", auto_offset_reset="earliest",
                      consumer_timeout_ms=20000)
    try:
        got = []
        for m in c:
            got.append(m.value)
            break
    finally:
        c.close()
    assert got == [b"kp"]


def test_aiokafka_round_trip(kafka_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    kafka_broker.create_topic("t")
    bs = kafka_broker.bootstrap_servers

    async def run() -> bytes:
        p = AIOKafkaProducer(bootstrap_servers=bs)
        await p.start()
        try:
            await p.send_and_wait("t", b"aio")
        finally:
            await p.stop()
        c = AIOKafkaConsumer("t", bootstrap_servers=bs, group_id="g", auto_offset_reset="earliest")
        await c.start()
        try:
            m = await asyncio.wait_for(c.getone(), 30)
        finally:
            await c.stop()
        return m.value
    assert asyncio.run(run()) == b"aio"


# -- kafkajs and the Java client -----------------------------------------------------------------------------
def test_kafkajs_round_trip_through_a_retried_produce_error(kafka_broker):
    from tests.interop.test_kafkajs_on_kohort import NodePeer
    kafka_broker.create_topic("js", partitions=2)
    bs = kafka_broker.bootstrap_servers
    kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
    p = NodePeer("produce", bs, "js", "100")
    try:
        assert p.wait_for(lambda e: e["event"] == "done", 60)["acked"] == 100
    finally:
        p.stop()
    assert kafka_broker.faults_applied("Produce") == 1
    c = NodePeer("consume", bs, "js", "g-js", "60")
    try:
        deadline = time.monotonic() + 60
        while len(c.seen("js")) < 100 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        c.stop()
    assert len(c.seen("js")) == 100                     # 100 distinct offsets: none written twice
    assert sorted(_ck_consume(bs, "js", 100)) == sorted(f"js-{i}".encode() for i in range(100))


def test_java_client_round_trip_through_a_retried_produce_error(kafka_broker):
    from tests.helpers.kafka_cluster import JavaPeer
    kafka_broker.create_topic("java", partitions=2)
    bs = kafka_broker.bootstrap_servers
    kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
    # one batch (linger 1 s; flush sends it): with several batches in flight the idempotent producer's
    # next batch could be appended before the failed one is retried, and the retry is then out of
    # sequence, on kohort's broker as on Kafka's (an unknown producer's first batch may start anywhere)
    with JavaPeer("produce", "--bootstrap", bs, "--topic", "java", "--count", "100", "--linger-ms", "1000") as p:
        done = p.wait_for(lambda e: e["event"] in ("done", "fatal"), 90)
    assert done["event"] == "done" and done["acked"] == 100 and done["failed"] == 0
    assert kafka_broker.faults_applied("Produce") == 1
    with JavaPeer("consume", "--bootstrap", bs, "--topic", "java", "--group", "g-java",
                  "--max-records", "100") as c:
        closed = c.wait_for(lambda e: e["event"] in ("closed", "fatal"), 90)
    assert closed["event"] == "closed" and closed["total"] == 100
    assert sorted(_ck_consume(bs, "java", 100)) == sorted(f"v-{i}".encode() for i in range(100))


# -- configured brokers --------------------------------------------------------------------------------------
def test_factory_without_auto_creation(kafka_broker_factory):
    b = kafka_broker_factory({"auto.create.topics.enable": False})
    reports = _ck_produce(b.bootstrap_servers, "missing", [b"x"], {"message.timeout.ms": 1500})
    ((err, _),) = reports
    assert err is not None
    assert b.topics() == []
    on = kafka_broker_factory()                # the default creates topics on first use, as Kafka's does
    _ck_produce(on.bootstrap_servers, "made", [b"x"])
    assert on.topics() == ["made"]


def test_factory_with_a_sasl_plain_listener_beside_plaintext(kafka_broker_factory):
    b = kafka_broker_factory({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";',
    })
    sasl = b.listener_address("SASL_PLAINTEXT")
    plain = b.listener_address("PLAINTEXT")
    assert b.bootstrap_servers == sasl and sasl != plain
    b.create_topic("t")
    auth = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": "secret"}
    assert [e for e, _ in _ck_produce(sasl, "t", [b"s"], auth)] == [None]
    assert _ck_consume(plain, "t", 1) == [b"s"]
    bad = _ck_produce(sasl, "t", [b"no"], {**auth, "sasl.password": "wrong", "message.timeout.ms": 3000})
    assert bad[0][0] is not None


def test_session_broker_is_shared(kafka_broker_session):
    name = f"s-{uuid.uuid4().hex[:6]}"
    kafka_broker_session.create_topic(name)
    assert name in kafka_broker_session.topics()


@pytest.mark.parametrize("error", ["NOT_LEADER_OR_FOLLOWER", "FETCH_SESSION_ID_NOT_FOUND"])
def test_consumers_retry_fetch_errors(kafka_broker, error):
    from kohort import Consumer
    kafka_broker.create_topic("t")
    bs = kafka_broker.bootstrap_servers
    _ck_produce(bs, "t", [b"x"])
    kafka_broker.fail_next("Fetch", error, count=3)
    assert _ck_consume(bs, "t", 1) == [b"x"]
    assert kafka_broker.faults_applied("Fetch") == 3
    kafka_broker.fail_next("Fetch", error, count=3)
    got: list[bytes] = []
    with Consumer({"bootstrap.servers": bs, "group.id": "k", "auto.offset.reset": "earliest"}) as c:
        c.subscribe(["t"])
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.2)]
    assert got == [b"x"] and kafka_broker.faults_applied("Fetch") == 6
