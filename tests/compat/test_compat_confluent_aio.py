"""kohort.compat.confluent_kafka.aio: a program written against confluent_kafka.aio 2.16 prints the same
through the compatibility module as through confluent-kafka itself on a kohort broker and (slow) on
Apache Kafka 4.3.1; produce()
takes headers there (the original raises NotImplementedError); errors are KafkaExceptions."""
from __future__ import annotations

import asyncio
import importlib
import uuid

import pytest

from tests.helpers.brokers import KohortBroker

MODULES = ["confluent_kafka", "kohort.compat.confluent_kafka"]


@pytest.fixture(scope="module")
def broker():
    with KohortBroker(config={"group.min.session.timeout.ms": 1000, "group.initial.rebalance.delay.ms": 0}) as b:
        yield b


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def program(ck, aio, bs: str, topic: str, out: list) -> None:
    """Produce keyed messages to three partitions, then consume them in a group with async rebalance
    callbacks, committing synchronously; print what a user would print."""
    producer = aio.AIOProducer({"bootstrap.servers": bs, "linger.ms": 1})
    try:
        futs = [await producer.produce(topic, value=f"value-{i}".encode(), key=f"key-{i}".encode(),
                                       partition=i % 3) for i in range(12)]
        await producer.flush()
        for f in futs:
            m = await f
            out.append(f"delivered {m.topic()} [{m.partition()}] @ {m.offset()} key={m.key()} err={m.error()}")
        md = await producer.list_topics(topic)
        out.append(f"metadata: {sorted(md.topics[topic].partitions)}")
    finally:
        await producer.close()

    consumer = aio.AIOConsumer({"bootstrap.servers": bs, "group.id": uniq("g"), "auto.offset.reset": "earliest",
                                "enable.auto.commit": False})

    async def on_assign(c, partitions):
        out.append(f"assigned {[(p.topic == topic, p.partition) for p in partitions]}")

    async def on_revoke(c, partitions):
        out.append(f"revoked {[p.partition for p in partitions]}")

    try:
        await consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        got = []
        while len(got) < 12:
            for m in await consumer.consume(num_messages=5, timeout=1.0):
                if m.error():
                    out.append(f"error {m.error()}")
                    continue
                got.append((m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[0]))
        for g in sorted(got):
            out.append(f"consumed {g}")
        last = max(got)
        committed = await consumer.commit(offsets=[ck.TopicPartition(topic, p, 4) for p in range(3)],
                                          asynchronous=False)
        out.append(f"commit -> {[(p.partition, p.offset) for p in committed]} {last[0]}")
        got = await consumer.committed([ck.TopicPartition(topic, p) for p in range(3)], timeout=10)
        out.append(f"committed {[(p.partition, p.offset) for p in got]}")
        lo, hi = await consumer.get_watermark_offsets(ck.TopicPartition(topic, 1), timeout=10)
        out.append(f"watermarks {lo} {hi}")
        out.append(f"assignment {[p.partition for p in await consumer.assignment()]}")
    finally:
        await consumer.close()


async def run(module: str, bs: str) -> list[str]:
    ck = importlib.import_module(module)
    aio = importlib.import_module(module + ".aio")
    from kohort.aio import AIOAdmin
    topic = uniq("ckaio")
    async with AIOAdmin(bs) as admin:
        assert (await admin.create_topics({topic: 3}))[topic] is None
    out: list[str] = []
    await program(ck, aio, bs, topic, out)
    return [line.replace(topic, "T") for line in out]


def test_a_confluent_aio_program_prints_the_same_through_kohort(broker):
    outs = {m: asyncio.run(asyncio.wait_for(run(m, broker.bootstrap), 90)) for m in MODULES}
    print("\n".join(outs["kohort.compat.confluent_kafka"]))
    assert outs["kohort.compat.confluent_kafka"] == outs["confluent_kafka"]


@pytest.mark.slow
def test_a_confluent_aio_program_prints_the_same_through_kohort_on_apache_kafka(kafka1):
    outs = {m: asyncio.run(asyncio.wait_for(run(m, kafka1.bootstrap), 120)) for m in MODULES}
    print("\n".join(outs["kohort.compat.confluent_kafka"]))
    assert outs["kohort.compat.confluent_kafka"] == outs["confluent_kafka"]


def test_headers_are_supported_and_errors_are_kafka_exceptions(broker):
    from kohort.compat.confluent_kafka import KafkaException
    from kohort.compat.confluent_kafka.aio import AIOConsumer, AIOProducer

    topic = uniq("ckaio-h")

    async def main():
        with pytest.raises(KafkaException):
            AIOProducer({"bootstrap.servers": broker.bootstrap, "no.such.setting": 1})
        async with AIOProducer({"bootstrap.servers": broker.bootstrap}) as p:
            f = await p.produce(topic, b"v", key=b"k", headers={"trace": b"abc", "n": "1"})
            m = await f
            assert m.offset() == 0 and m.headers() == [("trace", b"abc"), ("n", b"1")]
        async with AIOConsumer({"bootstrap.servers": broker.bootstrap, "group.id": uniq("g"),
                                "auto.offset.reset": "earliest"}) as c:
            await c.subscribe([topic])
            m = await c.poll(10)
            assert m is not None and m.headers() == [("trace", b"abc"), ("n", b"1")] and m.value() == b"v"
        with pytest.raises(KafkaException):
            AIOConsumer({"bootstrap.servers": broker.bootstrap})          # no group.id
    asyncio.run(asyncio.wait_for(main(), 60))


def test_every_confluent_aio_method_has_a_parity_row():
    import confluent_kafka.aio as real

    import kohort.compat.confluent_kafka.aio as K
    from tests.cli.test_cli_parity import STATUSES, sections, ticks
    rows = sections()["confluent-kafka-python asyncio (`kohort.compat.confluent_kafka.aio`)"]
    listed = {t: r for r in rows for t in ticks(r[0])}
    assert all(r[2] in STATUSES for r in rows)
    for name in ("AIOProducer", "AIOConsumer"):
        public = {f"{name}.{m}" for m in dir(getattr(real, name)) if not m.startswith("_")}
        assert not public - set(listed), f"confluent_kafka.aio calls without a row: {sorted(public - set(listed))}"
    for t, r in listed.items():
        if "." in t and t.split(".")[0] in ("AIOProducer", "AIOConsumer"):
            cls, meth = t.split(".", 1)
            assert hasattr(getattr(K, cls), meth), f"{t} has a row but kohort.compat.confluent_kafka.aio lacks it"
