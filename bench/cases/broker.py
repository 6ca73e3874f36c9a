"""Broker: produce then consume with confluent-kafka (librdkafka) and with Apache Kafka's Java clients,
kohort broker vs Apache Kafka 4.3.1 (and Tansu).

The worker calls bench/bench_broker.py's `run_one(port, n, size, partitions)` (confluent-kafka) or
`run_one_java` (bench/java/ProduceBench.java + ConsumeBench.java): acks=all, idempotent, linger 5 ms,
batch.size 1 MB, then an assign()-from-0 consumer, in its own process, and reports produce, consume
(steady state: first record to last) and end-to-end (n / (produce + consumer start-up + consume
time)) records/s. Columns: the run's kohort broker (default log.flush.policy=fsync-before-ack), a
second kohort broker with log.flush.policy=os (no fsync before acks, like Kafka's default), Apache
Kafka 4.3.1 (cases.common.Brokers.kafka(): one KRaft node with kafka-server-start.sh's JVM options:
1 GB heap, G1, C2) and Tansu (memory storage). The ratio compares kohort at Kafka's durability
(flush=os) with Apache Kafka; the fsync-before-ack column is reported beside it.

Section broker_cpu: the broker's own CPU per Produce request (bench_broker.produce_cpu: pipelined
Produce v9 requests of one ~16 KiB batch each over a plain socket, acks=all, 5 in flight; the broker
process's CPU over the run ÷ requests), on the same brokers.
"""
from __future__ import annotations

from cases.common import KAFKA, KOHORT_BROKER, TANSU
from cases.consumer import size_label

KOHORT_OS = "kohort broker (flush=os)"
CLIENT_FN = {"confluent-kafka": "cases.broker:end_to_end", "Java": "cases.broker:end_to_end_java"}
_extra = []


def _result(n: int, got) -> dict:
    ps, cs, startup = got
    total = ps + cs + startup
    return {"value": n / total, "rows": {"produce": n / ps, "consume": n / cs, "end-to-end": n / total},
            "produce_s": ps, "consume_s": cs, "consumer_startup_s": startup}


def end_to_end(port: int, n: int, size: int, partitions: int) -> dict:
    import bench_broker
    return _result(n, bench_broker.run_one(port, n, size, partitions))


def end_to_end_java(port: int, n: int, size: int, partitions: int) -> dict:
    import bench_broker
    return _result(n, bench_broker.run_one_java(port, n, size, partitions))


def produce_cpu(port: int, pid: int, requests: int) -> dict:
    import bench_broker
    return bench_broker.produce_cpu(port, pid, requests)


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    sizes = {100: 100_000, 1024: 20_000} if quick else {100: 300_000, 1024: 50_000}
    env.brokers.kafka()
    brokers = dict(env.brokers.addr)
    errors = dict(env.brokers.errors)
    pids = dict(env.brokers.pid)
    try:
        from tests.helpers.brokers import KohortBroker
        b = KohortBroker(config={"log.flush.policy": "os"})
        b.__enter__()
        _extra.append(b)
        brokers[KOHORT_OS] = b.bootstrap
        pids[KOHORT_OS] = b.proc.pid
    except Exception as e:
        errors[KOHORT_OS] = f"{type(e).__name__}: {e}"
    sec = Section("broker", "broker, confluent-kafka and Java clients", "records/s", ours=KOHORT_OS,
                  peers=[KAFKA],
                  notes=["bench_broker.run_one (confluent-kafka) and run_one_java (Apache Kafka's Java "
                         "KafkaProducer/KafkaConsumer 4.3.1): acks=all idempotent producer (linger 5 ms, "
                         "batch.size 1 MB; the producer's start-up before the clock), then an assign()-from-0 consumer "
                         "(consume: first record to last); "
                         "end-to-end = n / (produce + consumer start-up + consume time). "
                         "Ratio: kohort broker with log.flush.policy=os (page-cache durability, as Kafka's "
                         "default) vs Apache Kafka 4.3.1 (kafka-server-start.sh's JVM options); kohort's "
                         "default fsync-before-ack and Tansu beside."])
    jobs = []
    for size, n in sizes.items():
        for client, fn in CLIENT_FN.items():
            for name in (KOHORT_BROKER, KOHORT_OS, KAFKA, TANSU):
                addr = brokers.get(name)
                port = int(addr.rsplit(":", 1)[1]) if addr else 0
                before = None
                if addr is None:
                    msg = errors.get(name, "broker not running")

                    def before(job, round_no, msg=msg):
                        raise RuntimeError(msg)
                jobs.append(Job("broker", f"{size_label(size)} × {n:,} · {client}", name, fn,
                                {"port": port, "n": n, "size": size, "partitions": 1}, timeout=240,
                                subrows=["produce", "consume", "end-to-end"], before=before))
    cpu = Section("broker_cpu", "broker CPU per Produce request", "µs", higher_is_better=False, ours=KOHORT_OS,
                  peers=[KAFKA],
                  notes=["bench_broker.produce_cpu: Produce v9 requests over one plain socket to a fresh "
                         "1-partition topic, each one batch of 150 × 100 B records (16.4 KB, about Java's "
                         "batch.size), no producer id, acks=all, 5 in flight, after 500 untimed; the broker "
                         "process's CPU (user + system, every thread; /proc) over the run ÷ requests. "
                         "Ratio: Apache Kafka ÷ kohort broker with log.flush.policy=os (> 1: kohort broker "
                         "cheaper); kohort's default fsync-before-ack beside."])
    requests = 2000 if quick else 5000
    for name in (KOHORT_BROKER, KOHORT_OS, KAFKA):
        addr, pid = brokers.get(name), pids.get(name)
        before = None
        if addr is None or pid is None:
            msg = errors.get(name, "broker not running")

            def before(job, round_no, msg=msg):
                raise RuntimeError(msg)
        jobs.append(Job("broker_cpu", "16 KiB batch · acks=all · 5 in flight", name, "cases.broker:produce_cpu",
                        {"port": int(addr.rsplit(":", 1)[1]) if addr else 0, "pid": pid or 0,
                         "requests": requests}, timeout=240, before=before))
    return [sec, cpu], jobs


def finish(env) -> None:
    while _extra:
        b = _extra.pop()
        if hasattr(b, "__exit__"):
            b.__exit__(None, None, None)
        else:
            b.close()
