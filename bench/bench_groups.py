"""Consumer-group latency: kohort broker vs Tansu, same client (confluent-kafka, default configs),
same run.

* first record: a fresh consumer in a fresh group subscribes to a 2-partition topic holding records;
  time from subscribe() to the first record returned by poll() (FindCoordinator, JoinGroup incl. the
  broker's initial rebalance delay, SyncGroup, OffsetFetch, ListOffsets, Fetch).
* takeover after a clean close: two consumers share the topic (one partition each); one closes
  (LeaveGroup); a marker record is produced to its former partition at once; time from the start of
  close() to the survivor returning that marker (the leaver committed its position first, so the
  survivor resumes before the marker). With default configs the survivor learns of the
  rebalance from its next heartbeat (heartbeat.interval.ms=3000), so up to ~3 s is protocol-bound.

Kafka's fixed group.initial.rebalance.delay.ms=3000 and Tansu's slow first join are the marks;
kohort's adaptive delay completes a lone member's join after group.initial.rebalance.quiet.ms.

    .venv/bin/python bench/bench_groups.py                 # kohort and tansu
    .venv/bin/python bench/bench_groups.py --brokers kohort --repeat 10
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))


def _setup_topic(addr: str, topic: str, partitions: int, n: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": addr})          # keep the handle alive until done
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": addr})
    for i in range(n):
        p.produce(topic, f"r{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def first_record(addr: str, topic: str, timeout: float) -> float | None:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": addr, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest"})
    try:
        t0 = time.perf_counter()
        c.subscribe([topic])
        while time.perf_counter() - t0 < timeout:
            m = c.poll(0.05)
            if m is not None and not m.error():
                return time.perf_counter() - t0
        return None
    finally:
        c.close()


def takeover(addr: str, topic: str, timeout: float) -> float | None:
    from confluent_kafka import Consumer, Producer
    group = f"bench-{uuid.uuid4().hex[:8]}"
    owned: dict[str, set] = {"a": set(), "b": set()}

    def consumer(name):
        def on_assign(c, parts):
            owned[name] = {p.partition for p in parts}
        c = Consumer({"bootstrap.servers": addr, "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([topic], on_assign=on_assign)
        return c

    a, b = consumer("a"), consumer("b")
    p = Producer({"bootstrap.servers": addr, "linger.ms": 0})
    try:
        t_start = time.perf_counter()
        while not (len(owned["a"]) == 1 and len(owned["b"]) == 1):   # wait for a 1/1 split
            a.poll(0.05)
            b.poll(0.05)
            if time.perf_counter() - t_start > timeout:
                return None
        for _ in range(20):                      # settle: both drained the existing records
            a.poll(0.05)
            b.poll(0.05)
        a.commit(asynchronous=False)             # the survivor resumes where the leaver stopped
        (gone,) = owned["a"]
        marker = f"marker-{uuid.uuid4().hex}".encode()
        t0 = time.perf_counter()
        a.close()
        a = None
        p.produce(topic, marker, partition=gone)
        p.flush(10)
        while time.perf_counter() - t0 < timeout:
            m = b.poll(0.02)
            if m is not None and not m.error() and m.value() == marker:
                return time.perf_counter() - t0
        return None
    finally:
        if a is not None:
            a.close()
        b.close()


def fmt(xs: list) -> str:
    ok = [x for x in xs if x is not None]
    if not ok:
        return "timeout"
    s = f"median {statistics.median(ok) * 1000:7.0f} ms  min {min(ok) * 1000:6.0f}  max {max(ok) * 1000:6.0f}"
    if len(ok) < len(xs):
        s += f"  ({len(xs) - len(ok)} timed out)"
    return s


def bench(name: str, addr: str, repeat: int, timeout: float) -> dict:
    topic = f"groups-{uuid.uuid4().hex[:8]}"
    _setup_topic(addr, topic, 2, 100)
    firsts = []
    for _ in range(repeat):
        firsts.append(first_record(addr, topic, timeout))
        print(f"  {name}: first record {firsts[-1]}", file=sys.stderr, flush=True)
    takes = []
    for _ in range(repeat):
        takes.append(takeover(addr, topic, timeout))
        print(f"  {name}: takeover {takes[-1]}", file=sys.stderr, flush=True)
    return {"first": firsts, "takeover": takes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default="kohort,tansu")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tansu-repeat", type=int, default=2, help="Tansu's first join is slow")
    ap.add_argument("--timeout", type=float, default=90.0)
    opts = ap.parse_args()
    results = {}
    for name in opts.brokers.split(","):
        if name == "kohort":
            from tests.helpers.brokers import KohortBroker
            with KohortBroker() as b:
                results[name] = bench(name, b.bootstrap, opts.repeat, opts.timeout)
        elif name == "tansu":
            from tests.conftest import start_tansu
            proc, addr = start_tansu()
            try:
                results[name] = bench(name, addr, opts.tansu_repeat, opts.timeout)
            finally:
                proc.terminate()
                proc.wait(10)
        else:
            raise SystemExit(f"unknown broker {name!r} (kohort, tansu)")
    import confluent_kafka
    print(f"\nconfluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]}), "
          "default consumer configs")
    print(f"{'broker':8} {'subscribe -> first record':48} {'clean close -> survivor consumes':48}")
    for name, r in results.items():
        print(f"{name:8} {fmt(r['first']):48} {fmt(r['takeover']):48}")


if __name__ == "__main__":
    main()
