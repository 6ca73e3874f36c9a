"""kohort.compat.aiokafka: programs written against aiokafka 0.14 (equivalents of the ones in aiokafka's
examples/ folder: simple produce, simple consumer, batch produce, transactional produce, a consumer
keeping local state with manual commits) print the same through the compatibility module as through
aiokafka itself, both on a kohort broker and (slow) on Apache Kafka 4.3.1; plus aiokafka's argument checks and error
classes."""
from __future__ import annotations

import asyncio
import collections
import importlib
import uuid

import pytest

from tests.helpers.brokers import KohortBroker

MODULES = ["aiokafka", "kohort.compat.aiokafka"]


@pytest.fixture(scope="module")
def broker():
    with KohortBroker(config={"group.min.session.timeout.ms": 1000, "group.initial.rebalance.delay.ms": 0}) as b:
        yield b


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def create_topic(bs: str, topic: str, partitions: int) -> None:
    from kohort.aio import AIOAdmin
    async with AIOAdmin(bs) as admin:
        assert (await admin.create_topics({topic: partitions}))[topic] is None


# -- the programs: `ak` is the aiokafka module or its kohort counterpart ------------------------------------
async def simple_produce(ak, bs, topic, out):
    producer = ak.AIOKafkaProducer(bootstrap_servers=bs)
    await producer.start()
    try:
        for i in range(5):
            md = await producer.send_and_wait(topic, f"message {i}".encode(), partition=0)
            out.append(f"sent to {md.topic}:{md.partition} at offset {md.offset} ({md.topic_partition})")
    finally:
        await producer.stop()


async def simple_consume(ak, bs, topic, out):
    consumer = ak.AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=uniq("simple"),
                                   auto_offset_reset="earliest")
    await consumer.start()
    try:
        n = 0
        async for msg in consumer:
            out.append(f"consumed: {msg.topic} {msg.partition} {msg.offset} {msg.key} {msg.value} "
                       f"{msg.timestamp_type} {list(msg.headers)} {msg.serialized_value_size}")
            n += 1
            if n == 5:
                break
    finally:
        await consumer.stop()


async def batch_produce(ak, bs, topic, out):
    producer = ak.AIOKafkaProducer(bootstrap_servers=bs)
    await producer.start()
    try:
        batch = producer.create_batch()
        i = 0
        while True:
            meta = batch.append(key=None, value=b"x" * 200 + str(i).encode(), timestamp=None)
            if meta is None:
                break
            i += 1
        out.append(f"batch holds {batch.record_count()} records")
        partitions = await producer.partitions_for(topic)
        fut = await producer.send_batch(batch, topic, partition=sorted(partitions)[1])
        md = await fut
        out.append(f"batch sent to partition {md.partition} at offset {md.offset}; partitions {sorted(partitions)}")
    finally:
        await producer.stop()


async def transactional_produce(ak, bs, topic, out):
    producer = ak.AIOKafkaProducer(bootstrap_servers=bs, transactional_id=uniq("tx"))
    await producer.start()
    try:
        async with producer.transaction():
            md = await producer.send_and_wait(topic, b"committed", partition=0)
            out.append(f"in transaction: offset {md.offset}")
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aborted", partition=0)
                raise RuntimeError("abort this one")
        except RuntimeError as e:
            out.append(f"aborted: {e}")
        try:
            await producer.send(topic, b"outside")
        except ak.IllegalOperation as e:
            out.append(f"outside a transaction: {type(e).__name__}")
    finally:
        await producer.stop()
    consumer = ak.AIOKafkaConsumer(topic, bootstrap_servers=bs, isolation_level="read_committed",
                                   auto_offset_reset="earliest")
    await consumer.start()
    try:
        got = await consumer.getmany(timeout_ms=3000)
        out.append(f"read_committed: {sorted(m.value for ms in got.values() for m in ms)}")
    finally:
        await consumer.stop()


async def local_state_consume(ak, bs, topic, out):
    from collections import Counter
    state: dict = {}
    counts: Counter = Counter()
    consumer = None

    class Rebalance(ak.ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            out.append(f"revoked {sorted(tp.partition for tp in revoked)}")

        async def on_partitions_assigned(self, assigned):
            for tp in sorted(assigned):
                if tp in state:
                    consumer.seek(tp, state[tp])
                else:
                    await consumer.seek_to_beginning(tp)
            out.append(f"assigned {sorted(tp.partition for tp in assigned)}")

    consumer = ak.AIOKafkaConsumer(bootstrap_servers=bs, group_id=uniq("state"), enable_auto_commit=False,
                                   auto_offset_reset="none", key_deserializer=lambda k: k.decode())
    await consumer.start()
    consumer.subscribe([topic], listener=Rebalance())
    try:
        total = 0
        while total < 30:
            try:
                batches = await consumer.getmany(timeout_ms=2000)
            except (ak.errors.NoOffsetForPartitionError, ak.errors.OffsetOutOfRangeError):
                # fetching may start before the listener has seeked (aiokafka #738): start over
                fresh = [tp for tp in consumer.assignment() if tp not in state]
                if fresh:
                    await consumer.seek_to_beginning(*fresh)
                continue
            for tp, msgs in batches.items():
                for m in msgs:
                    counts[m.key] += 1
                state[tp] = msgs[-1].offset + 1
                total += len(msgs)
            if batches:
                await consumer.commit({tp: state[tp] for tp in batches})
        out.append(f"counts {sorted(counts.items())}")
        for p in range(3):
            out.append(f"committed {p}: {await consumer.committed(ak.TopicPartition(topic, p))}")
        try:
            await consumer.commit({ak.TopicPartition("not-mine", 0): 1})
        except Exception as e:          # noqa: BLE001 - the class is what is compared
            out.append(f"commit of an unassigned partition: {type(e).__name__}")
    finally:
        await consumer.stop()


async def run_programs(module: str, bs: str) -> list[str]:
    ak = importlib.import_module(module)
    importlib.import_module(module + ".errors")
    out: list[str] = []
    t1, t2, t3, t4 = uniq("simple"), uniq("batch"), uniq("txn"), uniq("state")
    await create_topic(bs, t1, 1)
    await create_topic(bs, t2, 3)
    await create_topic(bs, t3, 1)
    await create_topic(bs, t4, 3)
    await simple_produce(ak, bs, t1, out)
    await simple_consume(ak, bs, t1, out)
    await batch_produce(ak, bs, t2, out)
    await transactional_produce(ak, bs, t3, out)
    producer = ak.AIOKafkaProducer(bootstrap_servers=bs)
    await producer.start()
    for i in range(30):
        await producer.send(t4, b"v", key=f"k{i % 4}".encode(), partition=i % 3)
    await producer.flush()
    await producer.stop()
    await local_state_consume(ak, bs, t4, out)
    return [line.replace(t1, "T1").replace(t2, "T2").replace(t3, "T3").replace(t4, "T4") for line in out]


def test_aiokafka_programs_print_the_same_through_kohort(broker):
    outputs = {m: asyncio.run(asyncio.wait_for(run_programs(m, broker.bootstrap), 90)) for m in MODULES}
    print("\n".join(outputs["kohort.compat.aiokafka"]))
    assert outputs["kohort.compat.aiokafka"] == outputs["aiokafka"]


@pytest.mark.slow
def test_aiokafka_programs_print_the_same_through_kohort_on_apache_kafka(kafka1):
    outputs = {m: asyncio.run(asyncio.wait_for(run_programs(m, kafka1.bootstrap), 120)) for m in MODULES}
    print("\n".join(outputs["kohort.compat.aiokafka"]))
    assert outputs["kohort.compat.aiokafka"] == outputs["aiokafka"]


def test_argument_checks_and_errors_match_aiokafka():
    import aiokafka
    import aiokafka.errors as AE

    import kohort.compat.aiokafka as K
    import kohort.compat.aiokafka.errors as KE

    assert set(K.__all__) >= set(aiokafka.__all__) - {"AIOKafkaClient"}
    for name in ("UnknownTopicOrPartitionError", "NotLeaderForPartitionError", "OffsetOutOfRangeError",
                 "RebalanceInProgressError", "GroupCoordinatorNotAvailableError", "KafkaTimeoutError",
                 "KafkaConnectionError", "CommitFailedError", "IllegalStateError", "ProducerFenced",
                 "RecordTooLargeError", "NoOffsetForPartitionError", "OutOfOrderSequenceNumber"):
        a, k = getattr(AE, name), getattr(KE, name)
        assert k.__name__ == a.__name__ and getattr(k, "errno", None) == getattr(a, "errno", None), name
        assert k.retriable == a.retriable, name
        assert issubclass(k, RuntimeError) and issubclass(k, KE.KafkaError)
    assert KE.for_code(3) is KE.UnknownTopicOrPartitionError and KE.for_code(3).errno == 3
    assert not issubclass(KE.ConsumerStoppedError, RuntimeError)

    async def checks():
        for mod in (aiokafka, K):
            with pytest.raises(ValueError):
                mod.AIOKafkaProducer(acks=2)
            with pytest.raises(ValueError):
                mod.AIOKafkaProducer(compression_type="brotli")
            c = mod.AIOKafkaConsumer(group_id="g")
            with pytest.raises(TypeError):
                c.subscribe(topics=["a"], pattern="b")
            with pytest.raises(TypeError):
                c.subscribe(topics=["a"], listener=object())
    asyncio.run(checks())


def test_every_aiokafka_method_has_a_parity_row():
    import aiokafka

    import kohort.compat.aiokafka as K
    from tests.cli.test_cli_parity import STATUSES, sections, ticks
    rows = sections()["aiokafka (`kohort.compat.aiokafka`)"]
    listed = {t: r for r in rows for t in ticks(r[0])}
    assert all(r[2] in STATUSES for r in rows)
    for name in ("AIOKafkaProducer", "AIOKafkaConsumer"):
        public = {f"{name}.{m}" for m in dir(getattr(aiokafka, name)) if not m.startswith("_")}
        assert not public - set(listed), f"aiokafka calls without a row: {sorted(public - set(listed))}"
    for t, r in listed.items():
        if r[2] == "same" and t.startswith("AIOKafka"):
            cls, meth = t.split(".", 1)
            assert hasattr(getattr(K, cls), meth), f"{t} is marked same but kohort.compat.aiokafka lacks it"
