"""Record batches kohort writes (every codec) are read by confluent-kafka, kafka-python and aiokafka
through a real broker (Tansu), and batches those clients write are read by kohort."""
import asyncio
import time

import pytest

from kohort.protocol import records as R
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.produce import ProduceRequest
from tests.helpers.rawclient import RawClient

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
N = 20


def expected(tag, null_header=True):
    # kafka-python's producer refuses null header values, so its records carry an empty one instead
    h2 = None if null_header else b""
    return [(b"k%d" % i, b"%s-value-%d" % (tag.encode(), i) * 3, [("h1", b"x%d" % i), ("h2", h2)])
            for i in range(N)]


def create(c, topic):
    req = CreateTopicsRequest(timeout_ms=10000, topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1)])
    resp = c.request(req)
    assert resp.topics[0].error_code in (0, 36), resp


def kohort_produce(c, topic, codec):
    now = int(time.time() * 1000)
    batch = R.build_batch([(k, v, h, now) for k, v, h in expected(topic)], compression=codec)
    req = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    resp = c.request(req)
    assert resp.responses[0].partition_responses[0].error_code == 0


def kohort_fetch(c, topic, want=N):
    got, offset, end = [], 0, time.time() + 20
    while len(got) < want and time.time() < end:
        req = FetchRequest(max_wait_ms=200, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
            topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=offset,
                                                                 partition_max_bytes=1 << 20)])])
        resp = c.request(req, min(c.versions[1][1], 12))
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0
        for off, ts, k, v, h in R.iter_records(part.records or b"", check_crc=True):
            if off >= offset:
                got.append((k, v, [(hk, hv) for hk, hv in h]))
                offset = off + 1
    return got


@pytest.fixture(scope="module")
def raw(tansu):
    c = RawClient(tansu)
    yield c
    c.close()


@pytest.mark.parametrize("codec", CODECS)
def test_peers_read_kohort_batches(tansu, raw, codec):
    topic = f"kohort-wrote-{codec}"
    create(raw, topic)
    kohort_produce(raw, topic, CODECS[codec])
    want = [(k, v, h) for k, v, h in expected(topic)]

    from confluent_kafka import Consumer, TopicPartition
    ck = Consumer({"bootstrap.servers": tansu, "group.id": "x", "enable.auto.commit": False})
    ck.assign([TopicPartition(topic, 0, 0)])
    got, end = [], time.time() + 20
    while len(got) < N and time.time() < end:
        m = ck.poll(0.5)
        if m is not None and not m.error():
            got.append((m.key(), m.value(), list(m.headers() or [])))
    ck.close()
    assert got == want

    if codec != "snappy":   # kafka-python needs python-snappy for snappy, which is not a dependency
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP
        kc = KafkaConsumer(bootstrap_servers=tansu, enable_auto_commit=False, consumer_timeout_ms=5000)
        kc.assign([KTP(topic, 0)])
        kc.seek(KTP(topic, 0), 0)
        got = [(m.key, m.value, [(a, b) for a, b in m.headers]) for _, m in zip(range(N), kc)]
        kc.close()
        assert got == want

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def aio():
        c = AIOKafkaConsumer(bootstrap_servers=tansu, enable_auto_commit=False)
        await c.start()
        try:
            c.assign([ATP(topic, 0)])
            c.seek(ATP(topic, 0), 0)
            out = []
            while len(out) < N:
                m = await asyncio.wait_for(c.getone(), 20)
                out.append((m.key, m.value, [(a, b) for a, b in m.headers]))
            return out
        finally:
            await c.stop()
    assert asyncio.run(aio()) == want


@pytest.mark.parametrize("codec", CODECS)
def test_kohort_reads_peer_batches(tansu, raw, codec):
    from confluent_kafka import Producer
    topic = f"ck-wrote-{codec}"
    create(raw, topic)
    p = Producer({"bootstrap.servers": tansu, "compression.type": codec, "linger.ms": 20})
    for k, v, h in expected(topic):
        p.produce(topic, key=k, value=v, headers=h, partition=0)
    assert p.flush(20) == 0
    assert kohort_fetch(raw, topic) == expected(topic)

    if codec != "snappy":
        from kafka import KafkaProducer
        topic = f"kp-wrote-{codec}"
        create(raw, topic)
        kp = KafkaProducer(bootstrap_servers=tansu, compression_type=None if codec == "none" else codec,
                           linger_ms=20)
        for k, v, h in expected(topic, null_header=False):
            kp.send(topic, key=k, value=v, headers=h, partition=0)
        kp.flush(20)
        kp.close()
        assert kohort_fetch(raw, topic) == expected(topic, null_header=False)

    from aiokafka import AIOKafkaProducer
    topic = f"aio-wrote-{codec}"
    create(raw, topic)

    async def aio():
        p = AIOKafkaProducer(bootstrap_servers=tansu, compression_type=None if codec == "none" else codec,
                             linger_ms=20)
        await p.start()
        try:
            futs = [await p.send(topic, key=k, value=v, headers=h, partition=0) for k, v, h in expected(topic)]
            await asyncio.gather(*futs)
        finally:
            await p.stop()
    asyncio.run(aio())
    assert kohort_fetch(raw, topic) == expected(topic)
