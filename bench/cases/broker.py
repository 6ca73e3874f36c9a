"""Broker: produce then consume with confluent-kafka (librdkafka) clients, kohort broker vs Apache Kafka
4.3.1 (and Tansu).

The worker calls bench/bench_broker.py's `run_one(port, n, size, partitions)` (acks=all, idempotent,
linger 5 ms, batch.size 1 MB, then an assign()-from-0 consumer) in its own process and reports
produce, consume (steady state: first record to last, as bench_broker measures it) and end-to-end
(n / (produce + consumer start-up + consume time)) records/s. Columns: the run's kohort
broker (default log.flush.policy=fsync-before-ack), a second kohort broker with log.flush.policy=os
(no fsync before acks, like Kafka's default), Apache Kafka 4.3.1 (one KRaft node from
tests/kafka_cluster.py, with the JVM options of Kafka's own kafka-server-start.sh: 1 GB heap, G1,
C2) and Tansu (memory storage). The ratio compares kohort at Kafka's durability (flush=os) with
Apache Kafka; the fsync-before-ack column is reported beside it.
"""
from __future__ import annotations

from cases.common import KOHORT_BROKER, TANSU
from cases.consumer import size_label

KOHORT_OS = "kohort broker (flush=os)"
KAFKA = "Apache Kafka 4.3.1"
# kafka-server-start.sh's defaults (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS), not the test bed's
# small C1-only JVM: Kafka as its users run it
KAFKA_JVM = ["-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-Djava.awt.headless=true"]
_extra = []


def end_to_end(port: int, n: int, size: int, partitions: int) -> dict:
    import bench_broker
    got = bench_broker.run_one(port, n, size, partitions)
    ps, cs = got[0], got[1]
    startup = got[2] if len(got) > 2 else 0.0     # consumer start-up, timed apart since f721146
    total = ps + cs + startup
    return {"value": n / total, "rows": {"produce": n / ps, "consume": n / cs, "end-to-end": n / total},
            "produce_s": ps, "consume_s": cs, "consumer_startup_s": startup}


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    sizes = {100: 100_000} if quick else {100: 300_000, 1024: 50_000}
    brokers = dict(env.brokers.addr)
    errors = dict(env.brokers.errors)
    try:
        from tests.brokers import KohortBroker
        b = KohortBroker(config={"log.flush.policy": "os"})
        b.__enter__()
        _extra.append(b)
        brokers[KOHORT_OS] = b.bootstrap
    except Exception as e:
        errors[KOHORT_OS] = f"{type(e).__name__}: {e}"
    try:
        from tests import kafka_cluster
        kafka_cluster.BROKER_JVM = KAFKA_JVM
        kc = kafka_cluster.KafkaCluster(nodes=1)
        _extra.append(kc)
        kc.start()
        brokers[KAFKA] = kc.bootstrap
        import bench_broker              # a long-running Kafka is JIT-compiled: warm it up first
        for _ in range(2):
            bench_broker.run_one(int(kc.bootstrap.rsplit(":", 1)[1]), 100_000, 100, 1)
    except Exception as e:
        errors[KAFKA] = f"{type(e).__name__}: {e}"
    sec = Section("broker", "broker, confluent-kafka clients", "records/s", ours=KOHORT_OS,
                  peers=[KAFKA],
                  notes=["bench_broker.run_one: acks=all idempotent producer (linger 5 ms, batch.size 1 MB), "
                         "then an assign()-from-0 consumer (consume: first record to last); end-to-end = n / (produce + consumer "
                         "start-up + consume time). "
                         "Ratio: kohort broker with log.flush.policy=os (page-cache durability, as Kafka's "
                         "default) vs Apache Kafka 4.3.1 (kafka-server-start.sh's JVM options); kohort's "
                         "default fsync-before-ack and Tansu beside."])
    jobs = []
    for size, n in sizes.items():
        for name in (KOHORT_BROKER, KOHORT_OS, KAFKA, TANSU):
            addr = brokers.get(name)
            port = int(addr.rsplit(":", 1)[1]) if addr else 0
            before = None
            if addr is None:
                msg = errors.get(name, "broker not running")

                def before(job, round_no, msg=msg):
                    raise RuntimeError(msg)
            jobs.append(Job("broker", f"{size_label(size)} × {n:,}", name, "cases.broker:end_to_end",
                            {"port": port, "n": n, "size": size, "partitions": 1}, timeout=240,
                            subrows=["produce", "consume", "end-to-end"], before=before))
    return [sec], jobs


def finish(env) -> None:
    while _extra:
        b = _extra.pop()
        if hasattr(b, "__exit__"):
            b.__exit__(None, None, None)
        else:
            b.close()
