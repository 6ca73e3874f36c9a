"""Consumer throughput: kohort vs confluent-kafka, kafka-python, aiokafka and the Java KafkaConsumer on
the same records.

The client functions are bench/bench_consumer.py's (`CLIENTS[name](bootstrap, topic, ends, total)`
-> records/s): explicit assignment of every partition, no group, read from offset 0 until every record
is in, each value touched; timed from just after assign() to the last record, so each client's own
start-up (offset lookup, first fetch) is inside the time. Here each run is a fresh process.

Parent side: `build(env, mode)` seeds one topic per (broker, size, codec) with the same records for
every client (cases.common.seed) and makes the jobs.
"""
from __future__ import annotations

from cases.common import CLIENTS, KAFKA, KOHORT_BROKER, TANSU, seed

TIMEOUT_S = 150.0
# our column names -> bench_consumer's client names
_NAMES = {"kohort": "kohort", "confluent-kafka": "confluent", "kafka-python": "kafka-python",
          "aiokafka": "aiokafka", "java": "java"}
COLUMNS = CLIENTS + ["java"]          # Apache Kafka's Java KafkaConsumer too (bench/java/ConsumeBench.java)


def consume(client: str, addr: str, topic: str, partitions: int, n: int, size: int,
            unit: str = "records/s") -> dict:
    import bench_consumer
    # the seeding spread n records round-robin; computed rather than asked (Tansu's ListOffsets
    # "latest" lags the log end, which would make the clients stop short)
    ends = {p: n // partitions + (p < n % partitions) for p in range(partitions)}
    total = n
    rate = bench_consumer.CLIENTS[_NAMES[client]](addr, topic, ends, total)
    mb = rate * size / 1e6
    return {"value": rate if unit == "records/s" else mb, "records_per_s": rate, "mb_per_s": mb,
            "records": total, "seconds": total / rate}


def first_record(client: str, addr: str, topic: str) -> dict:
    """ms from assign() (client constructed and started beforehand) to the first record returned,
    set up the way bench_consumer's functions do (kohort: auto.offset.reset=earliest; confluent:
    offset 0 in the assignment; kafka-python and aiokafka: seek_to_beginning), polling with a 1 s
    timeout as bench_consumer (and most applications) do: a poll that does not return as soon as
    data is in shows here."""
    import time
    deadline = 30.0
    if client == "kohort":
        from kohort import Consumer
        c = Consumer({"bootstrap.servers": addr, "auto.offset.reset": "earliest"})
        t = time.perf_counter()
        c.assign([(topic, 0)])
        while not c.poll(1.0):
            if time.perf_counter() - t > deadline:
                raise RuntimeError("no record")
        dt = time.perf_counter() - t
        c.close()
    elif client == "confluent-kafka":
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": addr, "group.id": "bench-unused", "enable.auto.commit": False})
        t = time.perf_counter()
        c.assign([TopicPartition(topic, 0, 0)])
        while True:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                break
            if time.perf_counter() - t > deadline:
                raise RuntimeError("no record")
        dt = time.perf_counter() - t
        c.close()
    elif client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition
        c = KafkaConsumer(bootstrap_servers=addr, enable_auto_commit=False)
        t = time.perf_counter()
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        while not c.poll(timeout_ms=1000):
            if time.perf_counter() - t > deadline:
                raise RuntimeError("no record")
        dt = time.perf_counter() - t
        c.close()
    elif client == "aiokafka":
        import asyncio

        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def main():
            c = AIOKafkaConsumer(bootstrap_servers=addr, enable_auto_commit=False)
            await c.start()
            t = time.perf_counter()
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            while not await c.getmany(timeout_ms=1000):
                if time.perf_counter() - t > deadline:
                    raise RuntimeError("no record")
            dt = time.perf_counter() - t
            await c.stop()
            return dt
        dt = asyncio.run(main())
    else:
        raise ValueError(f"unknown client {client!r}")
    return {"value": dt * 1000}


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def rows(quick: bool) -> list[tuple[str, int, int, str, int]]:
    """(broker, size, records, codec, partitions) of the throughput section. Full: on kohort broker and
    on Apache Kafka, 100 B / 1 KiB / 16 KiB x none / lz4 / zstd on 1 partition, plus 64 partitions
    (100 B and 1 KiB, uncompressed); Tansu keeps its two uncompressed rows. (The scaling case has the
    kohort broker's curve over 1, 4, 16 and 64 partitions.)"""
    if quick:
        return [(b, 100, 100_000, c, 1) for b in (KOHORT_BROKER, KAFKA) for c in ("none", "lz4")] + \
               [(KOHORT_BROKER, 100, 100_000, "none", 64), (TANSU, 100, 100_000, "none", 1)]
    counts = {100: 300_000, 1024: 100_000, 16_384: 10_000}
    out = []
    for broker in (KOHORT_BROKER, KAFKA):
        out += [(broker, size, n, codec, 1) for size, n in counts.items() for codec in ("none", "lz4", "zstd")]
        out += [(broker, size, counts[size], "none", p) for p in (64,) for size in (100, 1024)]
    out += [(TANSU, size, counts[size], "none", 1) for size in (100, 1024)]
    return out


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    env.brokers.kafka()
    sec = Section("consumer", "consumer throughput", "records/s",
                  notes=["Each client reads the same seeded records (values half random, half repetitive; "
                         "null keys; spread round-robin over the row's partitions) from offset 0 by assign(), "
                         "values touched (bench_consumer.py's client functions); time from assign() to the last "
                         "record, so start-up counts. Every client at its defaults: librdkafka's fetch.queue.backoff.ms=1000 "
                         "pauses confluent-kafka's fetching ~1 s whenever its local queue fills (from a few 100k "
                         "records on), which is why its 100 B rows swing between ~140k and ~1.5M. Apache Kafka "
                         "4.3.1 runs with kafka-server-start.sh's JVM options, warmed up before the first row."])
    first = Section("consumer-start", "consumer start-up: assign() → first record", "ms",
                    higher_is_better=False,
                    notes=["The wait inside every consumer number above: a started client, assign() of "
                           "one seeded partition from its beginning, until poll(1 s timeout) returns a record."])
    jobs, start_jobs = [], []
    for broker, size, n, codec, parts in rows(quick):
        addr = env.brokers.addr.get(broker)
        row = f"{broker} · {size_label(size)} · {codec}" + (f" · {parts} partitions" if parts > 1 else "")
        topic = f"cons-{size}-{codec}-{parts}"
        setup_err = env.brokers.errors.get(broker)
        if addr is not None:
            try:
                seed(addr, topic, n, size, codec, parts)
            except Exception as e:
                setup_err = f"seeding: {type(e).__name__}: {e}"
        for client in COLUMNS:
            jobs.append(Job("consumer", row, client, "cases.consumer:consume",
                            {"client": client, "addr": addr, "topic": topic, "partitions": parts, "n": n,
                             "size": size},
                            timeout=TIMEOUT_S + 30, profile=client in profile,
                            before=_fail(setup_err)))
        if size == 100 and codec == "none" and parts == 1:
            for client in CLIENTS:
                start_jobs.append(Job("consumer-start", broker, client, "cases.consumer:first_record",
                                      {"client": client, "addr": addr, "topic": topic}, timeout=60,
                                      before=_fail(setup_err)))
    return [sec, first], jobs + start_jobs


def _fail(err):
    if err is None:
        return None

    def before(job, round_no):
        raise RuntimeError(err)
    return before
