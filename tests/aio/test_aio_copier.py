"""An asyncio transactional copier (tests/helpers/aio_copier.py, kohort.aio) SIGKILLed five times mid-stream and
restarted with the same transactional.id and group.instance.id copies every input record exactly
once: a read_committed reader of the output sees each input value once, and the group's committed
offsets are the input's end. A TxnOffsetCommit answered ILLEGAL_GENERATION (what a rebalance under the
transaction gives) makes the copier abort and rewind to the committed offsets, and it still copies
every record exactly once. An idle member's heartbeat task sleeps between deadlines (the copier's
group member must not spin on the loop it shares with the copy)."""
from __future__ import annotations

import asyncio
import os
import random
import select
import subprocess
import sys
import time
import uuid

import pytest

from kohort.aio import AIOAdmin, AIOConsumer, AIOProducer
from kohort.structs import TopicPartition
from tests.helpers.aio_copier import copy
from tests.helpers.brokers import KohortBroker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N, PARTS = 10000, 2


@pytest.mark.slow
def test_copier_sigkilled_five_times_copies_exactly_once():
    src, dst = f"cp-src-{uuid.uuid4().hex[:6]}", f"cp-dst-{uuid.uuid4().hex[:6]}"
    group, txid = f"g-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:6]}"
    with KohortBroker(config={"group.min.session.timeout.ms": 1000, "group.initial.rebalance.delay.ms": 0}) as b:
        bs = b.bootstrap

        async def setup():
            async with AIOAdmin(bs) as admin:
                await admin.create_topics({src: PARTS, dst: PARTS})
            async with AIOProducer(bs) as p:
                for i in range(N):
                    await p.send(src, b"%d" % i, partition=i % PARTS)
                await p.flush()
        asyncio.run(setup())

        def start():
            return subprocess.Popen([sys.executable, "-m", "tests.helpers.aio_copier", bs, src, dst, group, txid],
                                    cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        async def committed():
            async with AIOAdmin(bs) as admin:
                return await admin.list_group_offsets(group)

        rng = random.Random(5)
        for kill in range(5):
            proc = start()
            try:
                ready, _, _ = select.select([proc.stdout], [], [], 60)
                if not ready:
                    # a copier that ran well before its kill may have copied the whole input: then
                    # its successor has nothing to commit, and the kills are over
                    offs = asyncio.run(committed())
                    assert {tp.partition: om.offset for tp, om in offs.items()} == {p: N // PARTS for p in range(PARTS)}
                    break
                line = proc.stdout.readline()          # it committed at least once
                assert line.startswith("COMMIT"), line
                time.sleep(rng.uniform(0.05, 0.4))
            finally:
                proc.kill()
                proc.wait()
        proc = start()
        try:
            async def copied() -> list[bytes]:
                async with AIOConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                                       isolation_level="read_committed") as c:
                    c.assign([TopicPartition(dst, p) for p in range(PARTS)])
                    out: list[bytes] = []
                    deadline = time.monotonic() + 60
                    while len(out) < N and time.monotonic() < deadline:
                        for recs in (await c.getmany(timeout_ms=1000)).values():
                            out += [r.value for r in recs]
                    await asyncio.sleep(1.0)           # nothing more arrives (no duplicate after the last)
                    for recs in (await c.getmany(timeout_ms=500)).values():
                        out += [r.value for r in recs]
                    return out
            out = asyncio.run(copied())
        finally:
            proc.kill()
            proc.wait()
        assert len(out) == N and sorted(out, key=int) == [b"%d" % i for i in range(N)]

        offs = asyncio.run(committed())
        assert {tp.partition: om.offset for tp, om in offs.items()} == {p: N // PARTS for p in range(PARTS)}


@pytest.mark.parametrize("error", ["ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID"])
def test_copier_aborts_and_rewinds_when_txn_offset_commit_is_refused(kafka_broker, error):
    n = 200
    kafka_broker.create_topic("src", partitions=PARTS)
    kafka_broker.create_topic("dst", partitions=PARTS)
    bs = kafka_broker.bootstrap_servers

    async def run() -> tuple[list[str], list[bytes], dict]:
        async with AIOProducer(bs) as p:
            for i in range(n):
                await p.send("src", b"%d" % i, partition=i % PARTS)
            await p.flush()
        kafka_broker.fail_next("TxnOffsetCommit", error)
        lines: list[str] = []
        stop = asyncio.Event()

        def report(line: str) -> None:
            lines.append(line)
            if sum(int(ln.split()[1]) for ln in lines if ln.startswith("COMMIT")) >= n:
                stop.set()
        consumer = AIOConsumer(bootstrap_servers=bs, group_id="g", group_instance_id="copier-1",
                               enable_auto_commit=False, auto_offset_reset="earliest",
                               isolation_level="read_committed")
        async with AIOProducer(bs, transactional_id="copier") as producer, consumer:
            consumer.subscribe(["src"])
            await asyncio.wait_for(copy(consumer, producer, "dst", report, stop), 60)
        async with AIOConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                               isolation_level="read_committed") as c:
            c.assign([TopicPartition("dst", p) for p in range(PARTS)])
            out: list[bytes] = []
            while len(out) < n:
                for recs in (await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)).values():
                    out += [r.value for r in recs]
            for recs in (await c.getmany(timeout_ms=300)).values():
                out += [r.value for r in recs]
        async with AIOAdmin(bs) as admin:
            offs = await admin.list_group_offsets("g")
        return lines, out, offs

    lines, out, offs = asyncio.run(run())
    assert kafka_broker.faults_applied("TxnOffsetCommit") == 1
    aborts = [ln for ln in lines if ln.startswith("ABORT")]
    assert len(aborts) == 1 and error in aborts[0], lines
    assert sorted(out, key=int) == [b"%d" % i for i in range(n)]
    assert {tp.partition: om.offset for tp, om in offs.items()} == {p: n // PARTS for p in range(PARTS)}


def test_an_idle_group_member_heartbeat_task_sleeps_until_its_deadline(kafka_broker):
    """The heartbeat task feeds the machine a Tick only when its next deadline (or another task's
    event) is due, so an idle member leaves the loop, and the CPU, free between heartbeats."""
    from kohort.client.consumer.membership_common import Tick
    kafka_broker.create_topic("idle")
    ticks = 0

    async def run() -> None:
        nonlocal ticks
        async with AIOConsumer(bootstrap_servers=kafka_broker.bootstrap_servers, group_id="g-idle",
                               heartbeat_interval_ms=3000) as c:
            c.subscribe(["idle"])
            deadline = time.monotonic() + 20
            while not c.assignment() and time.monotonic() < deadline:
                await c.getmany(timeout_ms=100)
            assert c.assignment()
            m = c.group.m
            handle = m.handle

            def counting(ev, now):
                nonlocal ticks
                ticks += isinstance(ev, Tick)
                return handle(ev, now)
            m.handle = counting
            await c.getmany(timeout_ms=1000)
    asyncio.run(run())
    assert 0 < ticks <= 20, ticks
