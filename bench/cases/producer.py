"""Producer throughput: kohort vs confluent-kafka, kafka-python, aiokafka and Apache Kafka's Java
KafkaProducer (bench/bench_producer.py's client functions, each run in its own process against a fresh
single-partition topic), on kohort broker and on Apache Kafka 4.3.1; and, kohort vs confluent-kafka
at their defaults, the produce -> acknowledgement latency at a low rate and the memory taken with
1,000 partitions written at once.

Throughput rows: kohort and confluent-kafka at their own defaults (given only bootstrap.servers, and
compression.type on compressed rows), as a new user times them; kafka-python and aiokafka with
acks=all, linger.ms=5 (their defaults would be weaker); Java with ProduceBench's settings (acks=all,
linger.ms 5, Java's 16 KiB batch.size); rows with batch.size 1 MB give it to every client (with acks=all,
linger.ms=5). One value of the given size (half random, half repetitive) repeated, null keys. Time
from the first produce call to the end of flush. Column "kohort produce_batch": the columnar
Producer.produce_batch (calls of 10,000 records) on the same rows; the ratio column stays per-record
kohort vs the best peer.
"""
from __future__ import annotations

import itertools
import statistics
import types

from cases.common import CLIENTS, KAFKA, KOHORT_BROKER, create_topic, delete_topic, values
from cases.consumer import size_label

_seq = itertools.count()
BATCH = "kohort produce_batch"
COLUMNS = [CLIENTS[0], BATCH, *CLIENTS[1:], "java"]
PAIR = ["kohort", "confluent-kafka"]
LOW_RATE = 1000                       # records/s of the latency rows
MEMORY_PARTITIONS = 1000


def _opts(compression: str, batch_size: int | None) -> types.SimpleNamespace:
    # at defaults unless the row gives a batch size to every client
    return types.SimpleNamespace(compression=compression, kohort_extra={}, batch_size=batch_size,
                                 defaults=batch_size is None)


def produce(client: str, addr: str, topic: str, n: int, size: int, compression: str,
            batch_size: int | None = None) -> dict:
    import bench_producer
    dt = bench_producer.CLIENTS[client](addr, topic, n, values(size, 1)[0], _opts(compression, batch_size))
    return {"value": n / dt, "seconds": dt, "records": n, "mb_per_s": n * size / dt / 1e6}


def latency(client: str, addr: str, topic: str, n: int, size: int, rate: int) -> dict:
    import bench_producer
    fn = {"kohort": bench_producer.latency_kohort, "confluent-kafka": bench_producer.latency_confluent}[client]
    lat = sorted(x * 1000 for x in fn(addr, topic, n, values(size, 1)[0], rate, _opts("none", None)))
    if any(x != x or x <= 0 for x in lat):
        raise RuntimeError(f"{client}: a record was not acknowledged")
    q = statistics.quantiles(lat, n=100)
    p50 = statistics.median(lat)
    return {"value": p50, "rows": {"p50": p50, "p99": q[98]}, "records": n, "max_ms": lat[-1]}


def memory(client: str, addr: str, topic: str, n: int, size: int, partitions: int) -> dict:
    import bench_producer
    fn = {"kohort": bench_producer.memory_kohort, "confluent-kafka": bench_producer.memory_confluent}[client]
    r = fn(addr, topic, n, values(size, 1)[0], partitions, _opts("none", None))
    return {"value": r["rss_growth_kb"] / 1024, "seconds": r["seconds"], "records_per_s": n / r["seconds"]}


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    sizes = {100: 100_000} if quick else {100: 300_000, 1024: 100_000, 16384: 10_000}
    codecs = ("none", "lz4") if quick else ("none", "lz4", "zstd")
    env.brokers.kafka()
    sec = Section("producer", "producer throughput", "records/s",
                  peers=[c for c in COLUMNS if c not in ("kohort", BATCH)],
                  notes=["kohort and confluent-kafka at their defaults (only bootstrap.servers, plus "
                         "compression.type; kohort: batch.size 1 MB, linger.ms 5, acks=all, idempotent; "
                         "librdkafka: batch.size 1 MB, linger.ms 5, acks=all, idempotence off); kafka-python "
                         "and aiokafka: acks=all, linger.ms=5, 16 KiB batches; java: Apache Kafka's "
                         "KafkaProducer 4.3.1 (bench/java/ProduceBench.java: acks=all, linger.ms 5, 16 KiB). "
                         "Rows saying batch.size 1 MB: that, acks=all and linger.ms=5 for all. Fresh "
                         "1-partition topic per run; time from the first produce() to the end of flush().",
                         f"{BATCH}: Producer.produce_batch in calls of 10,000 records (lists); compare it with "
                         "the peers' columns of its row."])
    lat = Section("producer_latency", f"producer latency at {LOW_RATE:,} records/s", "ms",
                  higher_is_better=False, peers=["confluent-kafka"],
                  notes=[f"produce() -> acknowledgement of 100 B records at {LOW_RATE:,} records/s, each "
                         "client at its defaults (kohort: the future's callback, run by the I/O; "
                         "confluent-kafka: the delivery report, served by a thread blocked in poll(0.1)); p50 and "
                         "p99 of the run's records. Fresh 1-partition topic per run."])
    mem = Section("producer_memory", f"producer memory, {MEMORY_PARTITIONS:,} partitions written at once",
                  "MB", higher_is_better=False, peers=["confluent-kafka"],
                  notes=[f"Growth of the process's RSS (peak, sampled every 10 ms, over the RSS after the "
                         f"client is started) while 1 KiB records go round-robin to {MEMORY_PARTITIONS:,} "
                         "partitions, then flush(); each client at its defaults (kohort: buffer.memory "
                         "32 MiB; librdkafka: queue.buffering.max.kbytes 1 GiB)."])
    jobs = []
    for broker in (KOHORT_BROKER, KAFKA):
        addr = env.brokers.addr.get(broker)
        variants = [(size, n, codec, None) for size, n in sizes.items() for codec in codecs]
        # the same batch size for all: librdkafka's default is 1 MB, Java's 16 KiB
        variants += [(size, n, "none", 1_000_000) for size, n in sizes.items() if size < 16384]
        for size, n, codec, batch in variants:
            row = f"{broker} · {size_label(size)} · {codec}" + (" · batch.size 1 MB" if batch else "")
            for client in COLUMNS:
                jobs.append(Job("producer", row, client, "cases.producer:produce",
                                {"client": client, "addr": addr, "topic": None, "n": n, "size": size,
                                 "compression": codec, "batch_size": batch},
                                timeout=150, profile=client in profile or (client == BATCH and "kohort" in profile),
                                before=_fresh_topic(addr, broker, env)))
        n_lat = 1000 if quick else 3000
        for client in PAIR:
            jobs.append(Job("producer_latency", f"{broker} · 100 B", client, "cases.producer:latency",
                            {"client": client, "addr": addr, "topic": None, "n": n_lat, "size": 100,
                             "rate": LOW_RATE},
                            timeout=60, subrows=["p50", "p99"], profile=client in profile,
                            before=_fresh_topic(addr, broker, env)))
    addr = env.brokers.addr.get(KOHORT_BROKER)
    n_mem = 20_000 if quick else 100_000
    for client in PAIR:
        jobs.append(Job("producer_memory", f"{KOHORT_BROKER} · 1 KiB × {n_mem:,}", client, "cases.producer:memory",
                        {"client": client, "addr": addr, "topic": None, "n": n_mem, "size": 1024,
                         "partitions": MEMORY_PARTITIONS},
                        timeout=240, profile=client in profile,
                        before=_fresh_topic(addr, KOHORT_BROKER, env, MEMORY_PARTITIONS)))
    return [sec, lat, mem], jobs


_last_topic: dict[str, str] = {}     # broker address -> the topic its previous job wrote


def _fresh_topic(addr, broker, env, partitions: int = 1):
    """A new topic per job; the previous job's topic on that broker is deleted first: the brokers run
    through the whole bench, and the producer section alone writes tens of GB."""
    def before(job, round_no):
        if addr is None:
            raise RuntimeError(env.brokers.errors.get(broker, "broker not running"))
        old = _last_topic.pop(addr, None)
        if old is not None:
            delete_topic(addr, old)
        topic = f"prod-{next(_seq)}"
        create_topic(addr, topic, partitions)
        _last_topic[addr] = topic
        return {"topic": topic}
    return before
