"""Producer throughput: kohort vs confluent-kafka, kafka-python, aiokafka and Apache Kafka's Java
KafkaProducer (bench/bench_producer.py's client functions, each run in its own process against a fresh
single-partition topic), on kohort broker and on Apache Kafka 4.3.1.

Same settings for all (bench_producer's): acks=all, linger.ms=5, each client's default batch size
(plus rows with batch.size 1 MB for all, librdkafka's default);
one value of the given size (half random, half repetitive) repeated, null keys. Time from the first
produce call to the end of flush. Column "kohort produce_batch": the columnar Producer.produce_batch
(calls of 10,000 records) on the same rows; the ratio column stays per-record kohort vs the best peer.
"""
from __future__ import annotations

import itertools
import types

from cases.common import CLIENTS, KAFKA, KOHORT_BROKER, create_topic, values
from cases.consumer import size_label

_seq = itertools.count()
BATCH = "kohort produce_batch"
COLUMNS = [CLIENTS[0], BATCH, *CLIENTS[1:], "java"]


def produce(client: str, addr: str, topic: str, n: int, size: int, compression: str,
            batch_size: int | None = None) -> dict:
    import bench_producer
    opts = types.SimpleNamespace(compression=compression, kohort_extra={}, batch_size=batch_size)
    dt = bench_producer.CLIENTS[client](addr, topic, n, values(size, 1)[0], opts)
    return {"value": n / dt, "seconds": dt, "records": n, "mb_per_s": n * size / dt / 1e6}


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    sizes = {100: 100_000} if quick else {100: 300_000, 1024: 100_000}
    env.brokers.kafka()
    sec = Section("producer", "producer throughput", "records/s",
                  peers=[c for c in COLUMNS if c not in ("kohort", BATCH)],
                  notes=["acks=all, linger.ms=5, each client's default batch size (librdkafka 1 MB, the "
                         "others 16 KiB) unless the row says batch.size 1 MB (then all); fresh "
                         "1-partition topic per run; time from the first produce() to the end of flush(); "
                         "java: Apache Kafka's KafkaProducer 4.3.1 (bench/java/ProduceBench.java).",
                         f"{BATCH}: Producer.produce_batch in calls of 10,000 records (lists); compare it with "
                         "the peers' columns of its row."])
    jobs = []
    for broker in (KOHORT_BROKER, KAFKA):
        addr = env.brokers.addr.get(broker)
        variants = [(size, n, codec, None) for size, n in sizes.items() for codec in ("none", "lz4")]
        # the same batch size for all: librdkafka's default is 1 MB, the others' 16 KiB
        variants += [(size, n, "none", 1_000_000) for size, n in sizes.items()]
        for size, n, codec, batch in variants:
            row = f"{broker} · {size_label(size)} · {codec}" + (" · batch.size 1 MB" if batch else "")
            for client in COLUMNS:
                jobs.append(Job("producer", row, client, "cases.producer:produce",
                                {"client": client, "addr": addr, "topic": None, "n": n, "size": size,
                                 "compression": codec, "batch_size": batch},
                                timeout=150, profile=client in profile or (client == BATCH and "kohort" in profile),
                                before=_fresh_topic(addr, broker, env)))
    return [sec], jobs


def _fresh_topic(addr, broker, env):
    def before(job, round_no):
        if addr is None:
            raise RuntimeError(env.brokers.errors.get(broker, "broker not running"))
        topic = f"prod-{next(_seq)}"
        create_topic(addr, topic, 1)
        return {"topic": topic}
    return before
