"""Consumer throughput: kohort vs confluent-kafka vs kafka-python vs aiokafka on the same records.

    python bench/bench_consumer.py BOOTSTRAP [--records 1000000] [--size 100] [--rounds 3]
                                   [--topic bench-consumer] [--partitions 4] [--clients kohort,confluent,...]

Produces the records once with confluent-kafka if the topic holds fewer than --records, then, for
each client and round, consumes every record of the topic from offset 0 (explicit assignment, no
group, so group join latency does not count) and reports records/s; the table shows the median of
the rounds. Each client touches every record's value (len) so lazy decoding cannot cheat.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def end_offsets(bootstrap, topic):
    """{partition: records held} (end offset minus log start offset; brokers may trim old data --
    librdkafka's mock cluster keeps only about 42k records per partition)."""
    from kohort import Consumer
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        parts = c.partitions_for_topic(topic) or []
        if not parts:
            return {}
        tps = [(topic, p) for p in parts]
        ends, starts = c.end_offsets(tps), c.beginning_offsets(tps)
        return {tp.partition: ends[tp] - starts[tp] for tp in ends}


def ensure_data(bootstrap, topic, partitions, records, size):
    have = end_offsets(bootstrap, topic)
    if sum(have.values()) >= records:
        return have
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    if not have:
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})   # kept: its futures fail once it is destroyed
            fs = admin.create_topics([NewTopic(topic, partitions, 1)])
            for f in fs.values():
                f.result(15)
        except Exception as e:  # the mock cluster auto-creates instead
            print(f"(create_topics: {e}; relying on auto-creation)", file=sys.stderr)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    value = b"v" * size
    missing = records - sum(have.values())
    t = time.perf_counter()
    for i in range(missing):
        while True:
            try:
                p.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)
    print(f"produced {missing} records in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    return end_offsets(bootstrap, topic)


def run_kohort(bootstrap, topic, ends, total):
    from kohort import Consumer
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                   "max.poll.records": 10000, "fetch.max.wait.ms": 100}) as c:
        c.assign([(topic, p) for p in ends])
        n = nbytes = 0
        t = time.perf_counter()
        while n < total:
            recs = c.poll(1.0)
            n += len(recs)
            for r in recs:
                nbytes += len(r.value)
        return n / (time.perf_counter() - t)


def run_confluent(bootstrap, topic, ends, total):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    n = nbytes = 0
    t = time.perf_counter()
    while n < total:
        msgs = c.consume(10000, 1.0)
        for m in msgs:
            if m.error() is None:
                n += 1
                nbytes += len(m.value())
    rate = n / (time.perf_counter() - t)
    c.close()
    return rate


def run_kafka_python(bootstrap, topic, ends, total):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, auto_offset_reset="earliest",
                      max_poll_records=10000)
    tps = [TopicPartition(topic, p) for p in ends]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    n = nbytes = 0
    t = time.perf_counter()
    while n < total:
        for batch in c.poll(1000, max_records=10000).values():
            n += len(batch)
            for r in batch:
                nbytes += len(r.value)
    rate = n / (time.perf_counter() - t)
    c.close()
    return rate


def run_aiokafka(bootstrap, topic, ends, total):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in ends]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            n = nbytes = 0
            t = time.perf_counter()
            while n < total:
                got = await c.getmany(timeout_ms=1000, max_records=10000)
                for batch in got.values():
                    n += len(batch)
                    for r in batch:
                        nbytes += len(r.value)
            return n / (time.perf_counter() - t)
        finally:
            await c.stop()
    return asyncio.run(main())


def java_classes(name: str):
    """(kafka-lib dir, classes dir) for bench/java/<name>.java, compiled against .peers/kafka-lib into
    bench/out/java when the class is missing or older than its source."""
    import subprocess
    root = Path(__file__).resolve().parents[1]
    lib = root / ".peers" / "kafka-lib"
    if not lib.is_dir():
        raise RuntimeError(f"{lib} is missing: run make peers")
    out = root / "bench" / "out" / "java"
    src = root / "bench" / "java" / f"{name}.java"
    cls = out / f"{name}.class"
    if not cls.exists() or cls.stat().st_mtime < src.stat().st_mtime:
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", f"{lib}/*", "-d", str(out), str(src)], check=True)
    return lib, out


def run_java_consumer(bootstrap, topic, partitions, total) -> dict:
    """Apache Kafka's Java KafkaConsumer (bench/java/ConsumeBench.java): {"rate": records/s from just
    after assign() to the last record, "first_s": assign() to the first record}; the JVM starts before
    its clock does."""
    import subprocess
    lib, out = java_classes("ConsumeBench")
    p = subprocess.run(["java", "-Xmx1g", "-cp", f"{lib}/*:{out}", "ConsumeBench", bootstrap, topic,
                        str(partitions), str(total)], capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines():
        if line.startswith("RATE "):
            f = line.split()
            return {"rate": float(f[1]), "first_s": float(f[5])}
    raise RuntimeError(f"ConsumeBench failed: {(p.stderr or p.stdout).strip()[-300:]}")


def run_java(bootstrap, topic, ends, total):
    return run_java_consumer(bootstrap, topic, max(ends) + 1 if ends else 1, total)["rate"]


CLIENTS = {"kohort": run_kohort, "confluent": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka, "java": run_java}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bootstrap", help="broker address host:port[,host:port]")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--topic", default="bench-consumer")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    a = ap.parse_args(argv)
    ends = ensure_data(a.bootstrap, a.topic, a.partitions, a.records, a.size)
    total = sum(ends.values())
    print(f"topic {a.topic}: {len(ends)} partitions, {total} records of {a.size} bytes; {a.rounds} rounds")
    results = {}
    for name in a.clients.split(","):
        rates = []
        for _ in range(a.rounds):
            try:
                rates.append(CLIENTS[name](a.bootstrap, a.topic, ends, total))
            except Exception as e:
                print(f"{name}: failed: {e!r}", file=sys.stderr)
                break
        if rates:
            results[name] = statistics.median(rates)
            print(f"  {name:<13} {results[name]:>12,.0f} records/s   (rounds: "
                  + ", ".join(f"{r:,.0f}" for r in rates) + ")", flush=True)
    best = max(results, key=results.get) if results else None
    print(f"fastest: {best}")
    return results


if __name__ == "__main__":
    main()
