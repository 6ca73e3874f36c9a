"""Real clients against `kohort broker` (a subprocess): confluent-kafka (librdkafka), kafka-python,
aiokafka and kcat each create a topic (kcat: by producing, which auto-creates), produce with every
codec and consume by explicit partition assignment; contents, keys and headers are checked."""
from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest

from tests.helpers.brokers import KohortBroker

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 50


@pytest.fixture(scope="module")
def broker():
    with KohortBroker() as b:
        yield b


def _records(codec: str):
    return [(f"k-{codec}-{i}".encode(), f"value {codec} {i} ".encode() * (i % 7 + 1),
             [("h1", f"x{i}".encode()), ("h2", b"")]) for i in range(N)]


def _topic(client: str) -> str:
    return f"{client}-{uuid.uuid4().hex[:8]}"


def test_confluent_kafka(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = _topic("ck")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=len(CODECS), replication_factor=1)]).values():
        f.result(10)
    for p, codec in enumerate(CODECS):
        prod = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                         "enable.idempotence": True, "linger.ms": 5})
        errors = []
        for k, v, h in _records(codec):
            prod.produce(topic, key=k, value=v, headers=h, partition=p,
                         on_delivery=lambda e, m: errors.append(e) if e else None)
        assert prod.flush(15) == 0 and errors == []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    try:
        for p, codec in enumerate(CODECS):
            c.assign([TopicPartition(topic, p, 0)])
            got = []
            while len(got) < N:
                m = c.poll(10)
                assert m is not None, f"stalled after {len(got)} records of {codec}"
                assert not m.error(), m.error()
                got.append((m.key(), m.value(), [(k, v or b"") for k, v in m.headers()], m.offset()))
            assert [(k, v, h) for k, v, h, _ in got] == _records(codec)
            assert [o for *_, o in got] == list(range(N))
    finally:
        c.close()


def _kafka_python_snappy(monkeypatch):
    """kafka-python wants python-snappy, which is not installed; give it cramjam's snappy (real
    codec, other binding) under python-snappy's two function names."""
    import cramjam
    import kafka.codec
    if kafka.codec.has_snappy():
        return

    class _Snappy:
        @staticmethod
        def compress(b):
            return bytes(cramjam.snappy.compress_raw(bytes(b)))

        @staticmethod
        def decompress(b):
            return bytes(cramjam.snappy.decompress_raw(bytes(b)))
    monkeypatch.setattr(kafka.codec, "snappy", _Snappy)


def test_kafka_python(broker, monkeypatch):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    _kafka_python_snappy(monkeypatch)
    from kafka.admin import KafkaAdminClient, NewTopic
    topic = _topic("kp")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=len(CODECS), replication_factor=1)])
    admin.close()
    for p, codec in enumerate(CODECS):
        prod = KafkaProducer(bootstrap_servers=broker.bootstrap,
                             compression_type=None if codec == "none" else codec)
        futs = [prod.send(topic, key=k, value=v, headers=h, partition=p) for k, v, h in _records(codec)]
        offsets = [f.get(10).offset for f in futs]
        assert offsets == list(range(N))
        prod.close()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        for p, codec in enumerate(CODECS):
            tp = TopicPartition(topic, p)
            c.assign([tp])
            c.seek(tp, 0)
            got = []
            for m in c:
                got.append((m.key, m.value, [(k, v) for k, v in m.headers]))
                if len(got) == N:
                    break
            assert got == _records(codec)
    finally:
        c.close()


def test_aiokafka(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    topic = _topic("aio")

    async def main():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=len(CODECS), replication_factor=1)])
        finally:
            await admin.close()
        for p, codec in enumerate(CODECS):
            prod = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                    compression_type=None if codec == "none" else codec)
            await prod.start()
            try:
                futs = [await prod.send(topic, key=k, value=v, headers=h, partition=p)
                        for k, v, h in _records(codec)]
                metas = [await f for f in futs]
                assert [m.offset for m in metas] == list(range(N))
            finally:
                await prod.stop()
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            for p, codec in enumerate(CODECS):
                tp = TopicPartition(topic, p)
                c.assign([tp])
                c.seek(tp, 0)
                got = []
                while len(got) < N:
                    m = await asyncio.wait_for(c.getone(), 10)
                    got.append((m.key, m.value, [(k, v) for k, v in m.headers]))
                assert got == _records(codec)
        finally:
            await c.stop()

    asyncio.run(main())


def test_kcat(broker):
    from tests.conftest import require_kcat
    require_kcat()
    topic = _topic("kcat")   # created by the first produce (auto.create.topics.enable)
    for p, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        lines = "".join(f"key{i}:{codec} line {i}\n" for i in range(N))
        r = subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-z", codec,
                            "-K:", "-H", f"codec={codec}", "-X", "topic.request.required.acks=-1"],
                           input=lines, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
    r = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                        "-f", "%o|%k|%s|%h\n"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    got = r.stdout.splitlines()
    want = [f"{p * N + i}|key{i}|{codec} line {i}|codec={codec}"
            for p, codec in enumerate(CODECS) for i in range(N)]
    assert got == want


def test_confluent_admin_client(broker):
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                       NewTopic, OffsetSpec)
    topic = _topic("adm")
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic(topic, 2, 1, config={"cleanup.policy": "compact"})])[topic].result(10)
    with pytest.raises(Exception) as ei:
        a.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
    assert "TOPIC_ALREADY_EXISTS" in str(ei.value)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    cfg = a.describe_configs([res])[res].result(10)
    assert cfg["cleanup.policy"].value == "compact" and cfg["retention.ms"].is_default
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    a.incremental_alter_configs([res])[res].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    cfg = a.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "3600000" and cfg["cleanup.policy"].value == "compact,delete"
    a.create_partitions([NewPartitions(topic, 3)])[topic].result(10)
    prod = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        prod.produce(topic, key=b"k%d" % i, value=b"v", partition=2, timestamp=1_000_000 + i)
    assert prod.flush(10) == 0
    tp = TopicPartition(topic, 2)
    offs = a.list_offsets({tp: OffsetSpec.latest()})[tp].result(10)
    assert offs.offset == 10
    offs = a.list_offsets({tp: OffsetSpec.for_timestamp(1_000_004)})[tp].result(10)
    assert offs.offset == 4
    offs = a.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(10)
    assert offs.offset == 9
    low = a.delete_records([TopicPartition(topic, 2, 6)])[TopicPartition(topic, 2, 6)].result(10)
    assert low.low_watermark == 6
    assert a.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset == 6
    cluster = a.describe_cluster().result(10)
    assert [n.port for n in cluster.nodes] == [broker.port] and cluster.controller.id == 0
    a.delete_topics([topic])[topic].result(10)
    assert topic not in a.list_topics(timeout=10).topics
