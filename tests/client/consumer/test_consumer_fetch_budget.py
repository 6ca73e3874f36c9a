"""The consumers (threaded and asyncio) against a real kohort broker when what one Fetch answer
decompresses to passes the answer's decompression budget: partitions that fit alone are all read,
nothing skipped; a partition whose records do not fit a whole budget raises a DecodeError naming it
and its offset from every read, keeps its position, and is read on once the application seeks past."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kohort.aio import AIOConsumer
from kohort.client.admin import Admin
from kohort.client.consumer import Consumer
from kohort.client.producer import Producer
from kohort.errors import DecodeError
from kohort.structs import TopicPartition
from tests.helpers.brokers import KohortBroker

BUDGET = 700_000
VALUE = 100_000         # zeros: a few hundred bytes once zstd-compressed


@pytest.fixture(scope="module")
def loaded():
    """A broker and a topic: partitions 0 and 1 hold 5 records of 100 kB each (500 kB decompressed:
    each fits the budget alone, not both together); partition 2 holds one 900 kB record, then a
    small one."""
    with KohortBroker() as b:
        topic = f"fb-{uuid.uuid4().hex[:6]}"
        with Admin({"bootstrap.servers": b.bootstrap}) as a:
            a.create_topics({topic: 3})
        with Producer({"bootstrap.servers": b.bootstrap, "compression.type": "zstd"}) as p:
            for part in (0, 1):
                for i in range(5):
                    p.produce(topic, bytes([i]) * VALUE, partition=part)
            p.produce(topic, b"\0" * 900_000, partition=2)
            p.flush()
            p.produce(topic, b"after", partition=2)
            p.flush()
        yield b.bootstrap, topic


def _consumer(bs):
    c = Consumer({"bootstrap.servers": bs, "group.id": None, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c._fetcher.decompression_budget = BUDGET
    return c


def test_partitions_that_fit_alone_are_all_read(loaded):
    bs, topic = loaded
    c = _consumer(bs)
    try:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got: dict[int, list] = {0: [], 1: []}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 10 and time.monotonic() < deadline:
            for r in c.poll(0.2):
                got[r.partition].append((r.offset, r.value[0], len(r.value)))
        assert got == {p: [(i, i, VALUE) for i in range(5)] for p in (0, 1)}
    finally:
        c.close()


def test_a_partition_past_the_whole_budget_is_named_and_keeps_its_position(loaded):
    bs, topic = loaded
    c = _consumer(bs)
    tp = TopicPartition(topic, 2)
    try:
        c.assign([tp])
        for _ in range(2):              # raised again on every read, as Kafka's consumer does
            deadline = time.monotonic() + 30
            with pytest.raises(DecodeError) as ei:
                while time.monotonic() < deadline:
                    assert c.poll(0.2) == []
            assert f"records of {topic}-2 fetched at offset 0 could not be decoded" in str(ei.value)
            assert "decompression budget" in str(ei.value)
            assert c.position(tp) == 0
        c.seek(tp, 1)
        deadline = time.monotonic() + 30
        got = []
        while not got and time.monotonic() < deadline:
            got = c.poll(0.2)
        assert [(r.offset, r.value) for r in got] == [(1, b"after")]
    finally:
        c.close()


def test_aio_consumer_same_rules(loaded, monkeypatch):
    bs, topic = loaded
    from kohort.aio import consumer as aio_consumer
    monkeypatch.setattr(aio_consumer, "DEFAULT_MAX_SIZE", BUDGET)

    async def main():
        c = AIOConsumer(bootstrap_servers=bs, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([TopicPartition(topic, p) for p in (0, 1, 2)])
            got: dict[int, list] = {0: [], 1: [], 2: []}
            errors = []
            deadline = time.monotonic() + 30
            while (sum(map(len, got.values())) < 10 or len(errors) < 2) and time.monotonic() < deadline:
                try:
                    batch = await c.getmany(timeout_ms=200)
                except DecodeError as e:
                    errors.append(str(e))
                    continue
                for tp, recs in batch.items():
                    got[tp.partition] += [(r.offset, r.value[0], len(r.value)) for r in recs]
            assert {p: got[p] for p in (0, 1)} == {p: [(i, i, VALUE) for i in range(5)] for p in (0, 1)}
            assert got[2] == [] and len(errors) >= 2
            assert all(f"records of {topic}-2 fetched at offset 0 could not be decoded" in e for e in errors)
            assert await c.position(TopicPartition(topic, 2)) == 0
            c.seek(TopicPartition(topic, 2), 1)
            deadline = time.monotonic() + 30
            while not got[2] and time.monotonic() < deadline:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    got[tp.partition] += [(r.offset, r.value) for r in recs]
            assert got[2] == [(1, b"after")]
        finally:
            await c.stop()

    asyncio.run(asyncio.wait_for(main(), 90))
