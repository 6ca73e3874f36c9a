"""Shared by the cases: the brokers of a run, topics, seeding the same records for every client.

Parent side: `Brokers` starts a `kohort broker` (default settings, temp data dir) and a Tansu broker
(memory storage) once per run, and Apache Kafka 4.3.1 on first use (`Brokers.kafka()`: one KRaft node
from tests/helpers/kafka_cluster.py with kafka-server-start.sh's JVM options, warmed up); `create_topic` and
`seed` prepare data with confluent-kafka's producer (librdkafka, so seeding is quick and identical for
every client that reads it afterwards).
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(HERE)
for p in (os.path.join(ROOT, "src"), ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)
# the brokers this run starts (`kohort broker` subprocesses) run this tree's kohort, not whichever
# one the virtualenv has installed (a git worktree shares the main checkout's venv)
_pp = os.environ.get("PYTHONPATH", "")
if os.path.join(ROOT, "src") not in _pp.split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (os.path.join(ROOT, "src"), _pp) if x)

KOHORT_BROKER = "kohort broker"
TANSU = "Tansu"
KAFKA = "Apache Kafka 4.3.1"
# kafka-server-start.sh's defaults (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS), not the test bed's
# small C1-only JVM: Kafka as its users run it
KAFKA_JVM = ["-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-Djava.awt.headless=true"]
CLIENTS = ["kohort", "confluent-kafka", "kafka-python", "aiokafka"]


def values(size: int, count: int = 1024, seed: int = 7) -> list[bytes]:
    """`count` distinct values of `size` bytes: half random, half repetitive (compressible like typical
    JSON-ish payloads, so lz4 has real work)."""
    rnd = random.Random(seed * 1_000_003 + size)
    return [rnd.randbytes(size // 2) + b"x" * (size - size // 2) for _ in range(count)]


class Brokers:
    """The two brokers of a run: {name: "127.0.0.1:PORT"}; stop() stops both."""

    def __init__(self, which=(KOHORT_BROKER, TANSU)):
        self.addr: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.pid: dict[str, int | None] = {}       # each broker's process id (Kafka's node)
        self._stops = []
        for name in which:
            try:
                if name == KOHORT_BROKER:
                    from tests.helpers.brokers import KohortBroker
                    b = KohortBroker()
                    b.__enter__()
                    self.addr[name] = b.bootstrap
                    self.pid[name] = b.proc.pid
                    self._stops.append(lambda b=b: b.__exit__(None, None, None))
                    self.kohort = b
                elif name == TANSU:
                    from tests.conftest import start_tansu
                    proc, addr = start_tansu()
                    self.addr[name] = addr
                    self.pid[name] = proc.pid
                    self._stops.append(lambda p=proc: stop_proc(p))
            except Exception as e:
                self.errors[name] = f"{type(e).__name__}: {e}"

    def kafka(self) -> str | None:
        """Apache Kafka's bootstrap address, starting the broker on first use (None, with the reason
        in errors[KAFKA], when it cannot start). A long-running Kafka is JIT-compiled, so it is warmed
        up with two produce/consume rounds before anything is measured on it."""
        if KAFKA in self.addr or KAFKA in self.errors:
            return self.addr.get(KAFKA)
        try:
            import bench_broker
            kc, _port = bench_broker.start_kafka()
            self._stops.append(kc.close)
            self.addr[KAFKA] = kc.bootstrap
            self.pid[KAFKA] = bench_broker._pid(kc)
        except Exception as e:
            self.errors[KAFKA] = f"{type(e).__name__}: {e}"
        return self.addr.get(KAFKA)

    def stop(self) -> None:
        for s in reversed(self._stops):
            try:
                s()
            except Exception:
                pass
        self._stops.clear()


def stop_proc(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def delete_topic(addr: str, topic: str) -> None:
    """Delete `topic` (a finished job's data); a failure is printed, not raised: the run goes on."""
    from kohort.client.admin import Admin
    try:
        with Admin({"bootstrap.servers": addr}) as admin:
            err = admin.delete_topics([topic]).get(topic)
        if err is not None:
            print(f"  could not delete {topic}: {err}", flush=True)
    except Exception as e:          # noqa: BLE001 - the bench goes on; the disk may fill later
        print(f"  could not delete {topic}: {e}", flush=True)


def create_topic(addr: str, topic: str, partitions: int = 1) -> None:
    from kohort.client.admin import Admin
    from kohort.errors import UnknownTopicOrPartitionError
    with Admin({"bootstrap.servers": addr}) as admin:
        err = admin.create_topics({topic: partitions}).get(topic)
        if err is not None and "already exists" not in str(err).lower() and \
                "TOPIC_ALREADY_EXISTS" not in type(err).__name__.upper():
            raise err
        # Apache Kafka answers UNKNOWN_TOPIC_OR_PARTITION, or a partition without a leader, for a moment after
        # CreateTopics; a worker starting then fails its set-up, so wait until every partition has a leader.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                desc = {d.name: d for d in admin.describe_topics([topic])}
            except UnknownTopicOrPartitionError:
                desc = {}
            d = desc.get(topic)
            if d is not None and len(d.partitions) == partitions and all(p.leader >= 0 for p in d.partitions):
                return
            time.sleep(0.05)
        raise TimeoutError(f"topic {topic!r}: {partitions} partitions with a leader not seen within 30 s")


def seed(addr: str, topic: str, n: int, size: int, compression: str = "none", partitions: int = 1) -> float:
    """Produce n records of `size` bytes round-robin over the partitions (null keys); -> seconds."""
    from confluent_kafka import Producer
    create_topic(addr, topic, partitions)
    vals = values(size)
    p = Producer({"bootstrap.servers": addr, "acks": "all", "linger.ms": 20, "compression.type": compression,
                  "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1_048_576})
    errors = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)
    t = time.perf_counter()
    nv = len(vals)
    for i in range(n):
        while True:
            try:
                p.produce(topic, vals[i % nv], partition=i % partitions, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        if i & 4095 == 0:
            p.poll(0)
    left = p.flush(300)
    if left or errors:
        raise RuntimeError(f"seeding {topic}: {left} undelivered, errors {errors[:3]}")
    return time.perf_counter() - t
