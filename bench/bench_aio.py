"""asyncio clients: kohort.aio vs aiokafka vs confluent_kafka.aio (producer) and kohort's threaded
consumer, with the event loop's stall measured by a 1 ms ticker task beside each asyncio client.

    python bench/bench_aio.py BOOTSTRAP [--records 200000] [--size 100] [--clients kohort-aio,aiokafka,...]

For each size: every producer writes --records records to its own 1-partition topic (send per record,
then flush); then every consumer reads one of those topics from offset 0 (explicit assignment, every
record's value touched). Reported: records/s, and for the asyncio clients the ticker's figures: the CPU
time run on the loop in one go (p99/max, what the client's own work costs the loop) and the ticker's
lateness (p99/max, wall clock, which also counts what else the machine runs).
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


class Ticker:
    def __init__(self):
        self.cpu, self.late, self._stop, self._task = [], [], None, None

    async def __aenter__(self):
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())
        return self

    async def _run(self):
        while not self._stop.is_set():
            t, c = time.perf_counter(), time.thread_time()
            await asyncio.sleep(0.001)
            self.late.append((time.perf_counter() - t - 0.001) * 1000)
            self.cpu.append((time.thread_time() - c) * 1000)

    async def __aexit__(self, *exc):
        self._stop.set()
        await self._task

    def figures(self) -> str:
        def q(xs):
            return statistics.quantiles(xs, n=100, method="inclusive")[98], max(xs)
        (cp, cm), (wp, wm) = q(self.cpu), q(self.late)
        return f"loop CPU p99 {cp:5.1f} ms max {cm:6.1f} ms | lateness p99 {wp:6.1f} ms max {wm:6.1f} ms"


async def produce_kohort_aio(bs, topic, n, value):
    from kohort.aio import AIOProducer
    async with AIOProducer(bs) as p:
        async with Ticker() as tk:
            t = time.perf_counter()
            for _ in range(n):
                await p.send(topic, value, partition=0)
            await p.flush()
            dt = time.perf_counter() - t
    return n / dt, tk


async def produce_aiokafka(bs, topic, n, value):
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=5, max_batch_size=262144)
    await p.start()
    try:
        async with Ticker() as tk:
            t = time.perf_counter()
            for _ in range(n):
                await p.send(topic, value, partition=0)
            await p.flush()
            dt = time.perf_counter() - t
    finally:
        await p.stop()
    return n / dt, tk


async def produce_confluent_aio(bs, topic, n, value):
    from confluent_kafka.aio import AIOProducer
    p = AIOProducer({"bootstrap.servers": bs, "linger.ms": 5})
    try:
        async with Ticker() as tk:
            t = time.perf_counter()
            for _ in range(n):
                await p.produce(topic, value, partition=0)
            await p.flush()
            dt = time.perf_counter() - t
    finally:
        await p.close()
    return n / dt, tk


async def consume_kohort_aio(bs, topic, n):
    from kohort.aio import AIOConsumer
    from kohort.structs import TopicPartition
    async with AIOConsumer(bootstrap_servers=bs, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        got = nbytes = 0
        async with Ticker() as tk:
            t = time.perf_counter()
            while got < n:
                for recs in (await c.getmany(timeout_ms=1000)).values():
                    got += len(recs)
                    for r in recs:
                        nbytes += len(r.value)
            dt = time.perf_counter() - t
    return n / dt, tk


async def consume_aiokafka(bs, topic, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    c = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    try:
        c.assign([TopicPartition(topic, 0)])
        got = nbytes = 0
        async with Ticker() as tk:
            t = time.perf_counter()
            while got < n:
                for recs in (await c.getmany(timeout_ms=1000)).values():
                    got += len(recs)
                    for r in recs:
                        nbytes += len(r.value)
            dt = time.perf_counter() - t
    finally:
        await c.stop()
    return n / dt, tk


def consume_kohort_sync(bs, topic, n):
    from kohort import Consumer
    with Consumer({"bootstrap.servers": bs, "auto.offset.reset": "earliest", "max.poll.records": 10000,
                   "fetch.max.wait.ms": 100}) as c:
        c.assign([(topic, 0)])
        got = nbytes = 0
        t = time.perf_counter()
        while got < n:
            recs = c.poll(1.0)
            got += len(recs)
            for r in recs:
                nbytes += len(r.value)
        return n / (time.perf_counter() - t), None


PRODUCERS = {"kohort-aio": produce_kohort_aio, "aiokafka": produce_aiokafka, "confluent-aio": produce_confluent_aio}
CONSUMERS = {"kohort-aio": consume_kohort_aio, "aiokafka": consume_aiokafka, "kohort-sync": consume_kohort_sync}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--clients", default=",".join(sorted(set(PRODUCERS) | set(CONSUMERS))))
    a = ap.parse_args()
    clients = a.clients.split(",")
    value = b"x" * a.size
    topic = None
    print(f"{a.records} x {a.size} B")
    for name, fn in PRODUCERS.items():
        if name not in clients:
            continue
        t = f"bench-aio-{name}-{uuid.uuid4().hex[:6]}"
        rate, tk = asyncio.run(fn(a.bootstrap, t, a.records, value))
        topic = topic or t
        print(f"  produce {name:13s} {rate:>11,.0f} rec/s | {tk.figures()}")
    if topic is None:
        raise SystemExit("no producer ran: nothing to consume")
    for name, fn in CONSUMERS.items():
        if name not in clients:
            continue
        if asyncio.iscoroutinefunction(fn):
            rate, tk = asyncio.run(fn(a.bootstrap, topic, a.records))
        else:
            rate, tk = fn(a.bootstrap, topic, a.records)
        print(f"  consume {name:13s} {rate:>11,.0f} rec/s" + (f" | {tk.figures()}" if tk else ""))


if __name__ == "__main__":
    main()
