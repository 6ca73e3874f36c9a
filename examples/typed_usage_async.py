"""kohort's asyncio API, the test broker, share groups and the asyncio compatibility layers as a typed
program uses them; the suite checks it with `mypy --strict` (tests/test_typing.py against src/,
tests/test_packaging.py against the installed wheel) and runs it.

    python examples/typed_usage_async.py                    # starts an in-process broker (kohort.testing)
    python examples/typed_usage_async.py HOST:PORT          # a running broker
    python examples/typed_usage_async.py --share HOST:PORT  # only the share groups (KIP-932) part

Covers kohort.aio (AIOProducer, AIOConsumer, AIOAdmin), kohort.testing (broker(), InProcessBroker and
its faults, the fixtures' types), kohort.compat.aiokafka, kohort.compat.confluent_kafka.aio, and share
groups through kohort.ShareConsumer and confluent-kafka's ShareConsumer (on kohort's broker or any
Kafka 4.2+).
"""
from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Mapping
from typing import Any

from kohort import Admin, ShareConsumer
from kohort.aio import AIOAdmin, AIOConsumer, AIOProducer, RecordMetadata
from kohort.compat import aiokafka as ak
from kohort.compat import confluent_kafka as ck
from kohort.compat.confluent_kafka import aio as ckaio
from kohort.errors import KafkaError
from kohort.structs import ConsumerRecord, TopicPartition
from kohort.testing import BrokerFactory, InProcessBroker, Storage, broker


async def aio_client(bootstrap: str, topic: str, n: int) -> int:
    """Admin, producer and consumer of kohort.aio; returns how many records came back."""
    admin = AIOAdmin(bootstrap)
    await admin.start()
    created: dict[str, KafkaError | None] = await admin.create_topics([topic], num_partitions=2)
    assert created[topic] is None, created
    names: list[str] = await admin.list_topics()
    assert topic in names
    await admin.close()

    producer = AIOProducer(bootstrap, linger_ms=5)
    await producer.start()
    sent: list[RecordMetadata] = [
        await producer.send_and_wait(topic, value=b"v%d" % i, key=b"k%d" % i) for i in range(n)]
    assert all(md.offset >= 0 for md in sent)
    await producer.stop()

    consumer = AIOConsumer(topic, bootstrap_servers=bootstrap, group_id="typed-aio",
                           auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        batches: dict[TopicPartition, list[ConsumerRecord]] = await consumer.getmany(timeout_ms=1000)
        for records in batches.values():
            got.extend(records)
    await consumer.commit()
    committed: int | None = await consumer.committed(TopicPartition(topic, 0))
    assert committed is None or committed >= 0
    await consumer.stop()
    return len(got)


def share_group(bootstrap: str, topic: str, n: int) -> int:
    """A share group (KIP-932) read by kohort.ShareConsumer and confluent-kafka's ShareConsumer."""
    admin = Admin({"bootstrap.servers": bootstrap})
    admin.create_topics([topic], num_partitions=1)
    admin.alter_configs(("group", "typed-share"), {"share.auto.offset.reset": "earliest"})
    admin.close()
    p = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=b"%d" % i)
    p.flush(30.0)

    committed: list[int] = []

    def on_commit(offsets: dict[TopicPartition, set[int]], error: KafkaError | None) -> None:
        if error is None:
            committed.extend(o for acked in offsets.values() for o in acked)

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "typed-share",
                              "share.acknowledgement.mode": "explicit"}, acknowledgement_commit_callback=on_commit)
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < n // 2 and time.monotonic() < deadline:
        for record in consumer.poll(1.0)[: n // 2 - seen]:
            consumer.acknowledge(record)
            seen += 1
    results: dict[TopicPartition, KafkaError | None] = consumer.commit_sync(30.0)
    assert all(e is None for e in results.values()), results
    consumer.close()                    # what it acquired and did not acknowledge is released
    assert len(committed) == seen, (committed, seen)

    other = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "typed-share",
                              "share.acknowledgement.mode": "explicit"})
    other.subscribe([topic])
    deadline = time.monotonic() + 60
    while seen < n and time.monotonic() < deadline:
        messages: ck.Messages = other.poll(1.0)
        for msg in messages:
            if msg.error() is None:
                other.acknowledge(msg, ck.AcknowledgeType.ACCEPT)
                seen += 1
    other.close()
    return seen


async def aiokafka_compat(bootstrap: str, topic: str, n: int) -> int:
    """The same through aiokafka's API (kohort.compat.aiokafka)."""
    producer = ak.AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    for i in range(n):
        await producer.send_and_wait(topic, value=b"%d" % i)
    await producer.stop()
    consumer = ak.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="typed-ak",
                                   auto_offset_reset="earliest")
    await consumer.start()
    seen = 0
    deadline = time.monotonic() + 60
    while seen < n and time.monotonic() < deadline:
        batches: dict[ak.TopicPartition, list[ak.ConsumerRecord]] = await consumer.getmany(timeout_ms=1000)
        seen += sum(len(records) for records in batches.values())
    await consumer.stop()
    return seen


async def confluent_aio(bootstrap: str, topic: str, n: int) -> int:
    """The same through confluent-kafka's asyncio API (kohort.compat.confluent_kafka.aio)."""
    producer = ckaio.AIOProducer({"bootstrap.servers": bootstrap})
    for i in range(n):
        delivered: asyncio.Future[ck.Message] = await producer.produce(topic, value=b"%d" % i)
        msg = await delivered
        assert msg.error() is None
    await producer.close()
    consumer = ckaio.AIOConsumer({"bootstrap.servers": bootstrap, "group.id": "typed-ckaio",
                                  "auto.offset.reset": "earliest"})
    await consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < n and time.monotonic() < deadline:
        got: ck.Message | None = await consumer.poll(1.0)
        if got is not None and got.error() is None:
            seen += 1
    await consumer.close()
    return seen


def test_orders_roundtrip(kafka_broker: InProcessBroker) -> None:
    """A test as a project writes it with the pytest plugin's `kafka_broker` fixture; a retriable
    error injected on Produce is retried by the producer."""
    kafka_broker.create_topic("orders", partitions=1)
    kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER", count=1)

    async def roundtrip() -> RecordMetadata:
        producer = AIOProducer(kafka_broker.bootstrap_servers)
        await producer.start()
        try:
            return await producer.send_and_wait("orders", value=b"order-1")
        finally:
            await producer.stop()
    md = asyncio.run(roundtrip())
    assert md.offset == 0 and kafka_broker.faults_applied("Produce") == 1


def test_with_config(kafka_broker_factory: BrokerFactory) -> None:
    """`kafka_broker_factory`: brokers with Kafka's config names."""
    b = kafka_broker_factory({"auto.create.topics.enable": False}, storage="tmp")
    assert b.running and b.topics() == []


def _factory(made: list[InProcessBroker]) -> BrokerFactory:
    """What the plugin's `kafka_broker_factory` does, without pytest (so main can run the test above)."""
    def make(config: Mapping[str, Any] | None = None, *, storage: Storage = "memory") -> InProcessBroker:
        b = InProcessBroker(config, storage=storage).start()
        made.append(b)
        return b
    return make


async def amain(bootstrap: str) -> str:
    records = await aio_client(bootstrap, "typed-aio", 20)
    ak_seen = await aiokafka_compat(bootstrap, "typed-aiokafka", 10)
    ck_seen = await confluent_aio(bootstrap, "typed-ck-aio", 10)
    return f"aio: {records} records; aiokafka: {ak_seen} records; confluent_kafka.aio: {ck_seen} records"


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--share":
        print(f"share: {share_group(argv[2], 'typed-share', 10)} records")
    elif len(argv) == 2:
        print(asyncio.run(amain(argv[1])))
    elif len(argv) == 1:
        with broker() as b:
            print(asyncio.run(amain(b.bootstrap_servers)))
        with broker() as b:
            test_orders_roundtrip(b)
        made: list[InProcessBroker] = []
        try:
            test_with_config(_factory(made))
        finally:
            for m in made:
                m.close()
        print("testing: fixtures ok")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
