"""Produce throughput with transactions vs without (issue 15): kohort's producer, confluent-kafka and
Java's KafkaProducer 4.3.1 (bench/java/TxnBench.java; ProduceBench.java without transactions) on kohort
broker and on Apache Kafka 4.3.1 (one node, started here from tests/helpers/kafka_cluster.py when the
Kafka jars are present, warmed up with transactions of both kinds before anything is measured; stopped by
`finish`).

Each run writes N records of one 100-byte value to a fresh 1-partition topic, acks=all, linger.ms=5:
"idempotent" = no transactions (every client's default: idempotent); "transactions of K" = a
transactional.id, init_transactions() before timing, then begin / K produce calls / commit repeated
until N records are committed. Time from the first produce() (or begin) to the end of the last
flush/commit. Both brokers finalize transaction.version 2, so kohort's producer and Java's speak
transactions v2 (KIP-890 part 2) there and librdkafka v1; the rows "kohort broker, transaction.version
1" (a second kohort broker started here) have every client on v1.

Each transactional run also reports `transactions` and `slow_transactions` (in the JSON lines): the
transactions that took 15 ms or more longer than the run's median one, from begin to the return of
commit. On Apache Kafka they are mostly the ones whose first request met the previous transaction's
markers still being written (EndTxn is answered before the markers): CONCURRENT_TRANSACTIONS, retried
after 20 ms by the broker (v2: the partition leader retries the implicit add) or by the client (v1:
AddPartitionsToTxn).
"""
from __future__ import annotations

import itertools
import os
import uuid

from cases.common import KAFKA_JVM, KOHORT_BROKER, create_topic, values

KAFKA = "Apache Kafka 4.3.1"
KOHORT_TV1 = "kohort broker, transaction.version 1"
CLIENTS = ["kohort", "confluent-kafka", "java"]
MAX_ROUNDS = 3
_seq = itertools.count()
_kafka = {}


def _slow(took: list[float]) -> int:
    """Transactions 15 ms or more slower than the run's median one."""
    if not took:
        return 0
    limit = sorted(took)[len(took) // 2] + 0.015
    return sum(1 for x in took if x >= limit)


def produce(client: str, addr: str, topic: str, n: int, size: int, txn: int) -> dict:
    import time
    value = values(size, 1)[0]
    tid = f"bench-{uuid.uuid4().hex[:8]}" if txn else None
    took: list[float] = []
    if client == "java":
        return _java(addr, topic, n, size, txn)
    if client == "kohort":
        from kohort.client.producer import Producer
        cfg = {"bootstrap.servers": addr, "acks": "all", "linger.ms": 5}
        if tid:
            cfg["transactional.id"] = tid
        p = Producer(cfg)
        p.partitions_for(topic)
        if tid:
            p.init_transactions(60)
        t = time.perf_counter()
        if not tid:
            for _ in range(n):
                p.produce(topic, value)
            assert p.flush() == 0
        else:
            done = 0
            while done < n:
                k = min(txn, n - done)
                tb = time.perf_counter()
                p.begin_transaction()
                for _ in range(k):
                    p.produce(topic, value)
                p.commit_transaction(60)
                took.append(time.perf_counter() - tb)
                done += k
        dt = time.perf_counter() - t
        p.close()
    else:
        from confluent_kafka import Producer
        cfg = {"bootstrap.servers": addr, "acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 1000000,
               "log_level": 0}
        if tid:
            cfg["transactional.id"] = tid
        p = Producer(cfg)
        p.list_topics(topic, timeout=10)
        if tid:
            p.init_transactions(60)

        def send(k):
            for i in range(k):
                try:
                    p.produce(topic, value)
                except BufferError:
                    p.poll(0.05)
                    p.produce(topic, value)
                if i & 1023 == 0:
                    p.poll(0)
        t = time.perf_counter()
        if not tid:
            send(n)
            assert p.flush(120) == 0
        else:
            done = 0
            while done < n:
                k = min(txn, n - done)
                tb = time.perf_counter()
                p.begin_transaction()
                send(k)
                p.commit_transaction(60)
                took.append(time.perf_counter() - tb)
                done += k
        dt = time.perf_counter() - t
    out = {"value": n / dt, "seconds": dt, "records": n}
    if tid:
        out.update(transactions=len(took), slow_transactions=_slow(took))
    return out


def _java(addr: str, topic: str, n: int, size: int, txn: int) -> dict:
    """Java's KafkaProducer: bench/java/TxnBench.java (transactions), ProduceBench.java (none)."""
    import subprocess
    from bench_consumer import java_classes
    if not txn:
        import types
        from bench_producer import run_java
        dt = run_java(addr, topic, n, values(size, 1)[0],
                      types.SimpleNamespace(batch_size=0, compression="none"))
        return {"value": n / dt, "seconds": dt, "records": n}
    lib, out = java_classes("TxnBench")
    p = subprocess.run(["java", "-Xmx1g", "-cp", f"{lib}/*:{out}", "TxnBench", addr, topic, str(n), str(size),
                        str(txn)], capture_output=True, text=True, timeout=300)
    line = [x.split() for x in p.stdout.splitlines() if x.startswith("TXN_S ")]
    if p.returncode != 0 or not line:
        raise RuntimeError(f"TxnBench failed: {(p.stderr or p.stdout).strip()[-300:]}")
    dt = float(line[0][1])
    return {"value": n / dt, "seconds": dt, "records": n, "transactions": int(line[0][3]),
            "slow_transactions": int(line[0][5])}


def _kohort_tv1_addr():
    """A kohort broker advertising transaction.version 1 (both clients on transactions v1)."""
    if "tv1" in _kafka or "tv1_error" in _kafka:
        return _kafka.get("tv1"), _kafka.get("tv1_error")
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import sys
        if root not in sys.path:
            sys.path.insert(0, root)
        from tests.helpers.brokers import KohortBroker
        b = KohortBroker(config={"transaction.version": 1}).start()
        _kafka.update(tv1_broker=b, tv1=b.bootstrap)
    except Exception as e:  # noqa: BLE001 - reported in the table's rows
        _kafka["tv1_error"] = f"{type(e).__name__}: {e}"
    return _kafka.get("tv1"), _kafka.get("tv1_error")


def _kafka_addr():
    """A one-node Apache Kafka for this run (None, error) when its jars are missing."""
    if "addr" in _kafka or "error" in _kafka:
        return _kafka.get("addr"), _kafka.get("error")
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import sys
        if root not in sys.path:
            sys.path.insert(0, root)
        from tests.helpers.kafka_cluster import KafkaCluster
        kc = KafkaCluster(nodes=1, jvm=KAFKA_JVM)
        kc.start()
        _kafka.update(cluster=kc)
        _warm_up(kc.bootstrap)
        _kafka["addr"] = kc.bootstrap
    except Exception as e:  # noqa: BLE001 - reported in the table's rows
        _kafka["error"] = f"{type(e).__name__}: {e}"
    return _kafka.get("addr"), _kafka.get("error")


def _warm_up(addr: str) -> None:
    """Kafka's transactional paths JIT-compiled before anything is measured, as cases.common warms the
    shared Kafka: two produce/consume rounds, then transactions of 100 under v1 (confluent-kafka:
    AddPartitionsToTxn) and v2 (kohort: the leader's implicit add), twice each. Without it the first
    client of the first round meets a cold Kafka (marker writes of 100-200 ms)."""
    import bench_broker
    bench_broker.run_one(int(addr.rsplit(":", 1)[1]), 100_000, 100, 1)
    for _ in range(2):
        for client in ("confluent-kafka", "kohort"):
            topic = f"txnwarm-{next(_seq)}"
            create_topic(addr, topic, 1)
            produce(client, addr, topic, 20_000, 100, 100)


def finish(env) -> None:
    kc = _kafka.pop("cluster", None)
    if kc is not None:
        kc.close()
    b = _kafka.pop("tv1_broker", None)
    if b is not None:
        b.stop()


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    n, size = (30_000, 100) if quick else (100_000, 100)
    txn_sizes = (1000,) if quick else (100, 1000, 10_000)
    sec = Section("txn", "produce throughput, transactions vs none", "records/s",
                  notes=[f"{n:,} records x {size} B, acks=all, linger.ms=5, fresh 1-partition topic; "
                         "'transactions of K': begin, K produce(), commit, repeated (init_transactions() "
                         "before timing). java: Apache Kafka's KafkaProducer 4.3.1, acks=all, linger.ms 5, "
                         "its 16 KiB batches (bench/java/ProduceBench.java, TxnBench.java), transactions "
                         "v2 where the broker finalized transaction.version 2, as kohort's producer."])
    kaddr, kerr = _kafka_addr()
    taddr, terr = _kohort_tv1_addr()
    jobs = []
    for broker, addr, err in ((KOHORT_BROKER, env.brokers.addr.get(KOHORT_BROKER),
                               env.brokers.errors.get(KOHORT_BROKER)), (KAFKA, kaddr, kerr),
                              (KOHORT_TV1, taddr, terr)):
        for txn in ((0, *txn_sizes) if broker != KOHORT_TV1 else txn_sizes):
            row = f"{broker} · " + ("idempotent, no transactions" if not txn else f"transactions of {txn:,}")
            for client in CLIENTS:
                jobs.append(Job("txn", row, client, "cases.txn:produce",
                                {"client": client, "addr": addr, "topic": None, "n": n, "size": size, "txn": txn},
                                timeout=240, profile=client in profile, before=_fresh_topic(addr, err)))
    return [sec], jobs


def _fresh_topic(addr, err):
    def before(job, round_no):
        if addr is None:
            raise RuntimeError(err or "broker not running")
        topic = f"txnbench-{next(_seq)}"
        create_topic(addr, topic, 1)
        return {"topic": topic}
    return before
