"""Group convergence, classic vs KIP-848 consumer protocol, kohort broker vs Apache Kafka 4.3.1, with
the same clients: kohort's own consumers (issue 14).

`converge(addr, protocol, members)` (one worker process): a topic of 2 partitions per member (at
least 6) fed by a producer thread (one record per partition every 50 ms); N-1 kohort consumers,
each polling on a thread of its own in this process, reach a stable split; then

* join: the N-th member subscribes at t0; timed until every member is *stable and consuming*: the
  members' assignments (from their callbacks) are disjoint, cover every partition, differ in size by
  at most one, and each member has read a record from every partition it holds since it got it;
* leave: one member close()s at t1 (LeaveGroup / heartbeat with epoch -1); timed until the remaining
  N-1 are stable and consuming again.

Both protocols run with the same timers on both brokers: classic members use cooperative-sticky with
session.timeout.ms=10000 and heartbeat.interval.ms=1000; the brokers give consumer-protocol members
the same (group.consumer.session.timeout.ms=10000, group.consumer.heartbeat.interval.ms=1000, the
uniform assignor) and group.initial.rebalance.delay.ms=0 -- the Apache Kafka test bed's settings
(tests/helpers/kafka_cluster.py), so this case starts its own kohort broker with them. All members of a run are real kohort
Consumers in one process (at 100 members: 100 consumers, ~300 threads), so at the larger sizes the
client process's own CPU share on a busy machine counts in the times. Standalone:

    PYTHONPATH=src:. .venv/bin/python bench/run.py --quick --only kip848
"""
from __future__ import annotations

import threading
import time
import uuid

from cases.common import KAFKA_JVM, KOHORT_BROKER, create_topic

KAFKA = "Apache Kafka 4.3.1"
MAX_ROUNDS = 1          # minutes per cell at 100 members; protocol timers dominate the spread


class _Member:
    """A kohort consumer on a thread of its own: assignment from its callbacks, the partitions it has
    read since it got them."""

    def __init__(self, addr, group, topic, protocol):
        from kohort import Consumer
        conf = {"bootstrap.servers": addr, "group.id": group, "auto.offset.reset": "latest",
                "enable.auto.commit": False, "group.protocol": protocol}
        if protocol == "classic":
            conf.update({"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10000,
                         "heartbeat.interval.ms": 1000})
        self.c = Consumer(conf)
        self.lock = threading.Lock()
        self.owned: set = set()
        self.read: set = set()
        self.stop = threading.Event()
        self.c.subscribe([topic], on_assign=self._assigned, on_revoke=self._gone, on_lost=self._gone)
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _assigned(self, c, tps):
        with self.lock:
            self.owned |= {tp.partition for tp in tps}
            self.read -= {tp.partition for tp in tps}

    def _gone(self, c, tps):
        with self.lock:
            self.owned -= {tp.partition for tp in tps}
            self.read -= {tp.partition for tp in tps}

    def _run(self):
        try:
            while not self.stop.is_set():
                parts = {r.partition for r in self.c.poll(0.1)}
                with self.lock:
                    self.read |= parts & self.owned
        finally:
            self.c.close(autocommit=False)

    def view(self):
        with self.lock:
            return set(self.owned), set(self.read)

    def close(self):
        self.stop.set()


def _stable(members, partitions) -> bool:
    views = [m.view() for m in members]
    sizes = [len(o) for o, _ in views]
    if not views or min(sizes) == 0 or max(sizes) - min(sizes) > 1 or sum(sizes) != partitions:
        return False
    if set().union(*(o for o, _ in views)) != set(range(partitions)):
        return False
    return all(o <= r for o, r in views)


def _wait_stable(members, partitions, timeout) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _stable(members, partitions):
            return time.monotonic()
        time.sleep(0.01)
    raise RuntimeError(f"{len(members)} members not stable and consuming within {timeout:.0f} s: sizes "
                       f"{sorted(len(m.view()[0]) for m in members)}")


def converge(addr: str, protocol: str, members: int) -> dict:
    from confluent_kafka import Producer
    partitions = max(6, 2 * members)
    topic, group = f"k848b-{uuid.uuid4().hex[:8]}", f"k848b-{uuid.uuid4().hex[:8]}"
    create_topic(addr, topic, partitions)
    stop = threading.Event()

    def produce():
        p = Producer({"bootstrap.servers": addr, "linger.ms": 5})
        while not stop.is_set():
            for q in range(partitions):
                p.produce(topic, b"tick", partition=q)
            p.poll(0)
            stop.wait(0.05)
        p.purge()              # what is still queued no longer matters
        p.flush(5)
    pt = threading.Thread(target=produce, daemon=True)
    pt.start()
    group_members: list[_Member] = []
    timeout = 120 + 2 * members
    try:
        for _ in range(members - 1):
            group_members.append(_Member(addr, group, topic, protocol))
        _wait_stable(group_members, partitions, timeout)
        t0 = time.monotonic()
        group_members.append(_Member(addr, group, topic, protocol))
        join = _wait_stable(group_members, partitions, timeout) - t0
        leaver = group_members.pop(0)
        t1 = time.monotonic()
        leaver.close()
        leave = _wait_stable(group_members, partitions, timeout) - t1
        leaver.t.join(30)
        return {"value": join * 1000, "rows": {"member joins": join * 1000, "member leaves": leave * 1000},
                "partitions": partitions}
    finally:
        stop.set()
        for m in group_members:
            m.close()
        for m in group_members:
            m.t.join(30)
        pt.join(10)


_kafka = None
_kohort = None
# the group timers of the Apache Kafka test bed (tests/helpers/kafka_cluster.py), given to kohort broker too
GROUP_CONFIG = {"group.consumer.session.timeout.ms": 10000, "group.consumer.min.session.timeout.ms": 6000,
                "group.consumer.heartbeat.interval.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 500,
                "group.initial.rebalance.delay.ms": 0}


def build(env, mode: str, profile: set[str]):
    global _kafka, _kohort
    from harness import Job, Section
    sizes = [3, 30] if mode == "quick" else [3, 30, 100]
    sec = Section("kip848", "group convergence: classic vs consumer protocol (KIP-848)", "ms",
                  higher_is_better=False, ours=KOHORT_BROKER, peers=[KAFKA],
                  notes=["Time from a member joining (or leaving with close()) until every member is stable "
                         "and consuming: assignments disjoint, complete, balanced (sizes differ by <= 1), and a "
                         "record read from every held partition since it was assigned. 2 partitions per member "
                         "(>= 6), a record per partition every 50 ms. Same clients everywhere: N real kohort "
                         "Consumers in one process (classic: cooperative-sticky). Same timers everywhere: "
                         "session 10 s, heartbeat 1 s (classic: client settings; consumer: broker settings), "
                         "group.initial.rebalance.delay.ms=0. Ratio: Kafka ÷ kohort broker (> 1: kohort broker "
                         "faster)."])
    brokers = {}
    errors = {}
    try:
        from tests.helpers.brokers import KohortBroker
        _kohort = KohortBroker(config=GROUP_CONFIG)
        _kohort.__enter__()
        brokers[KOHORT_BROKER] = _kohort.bootstrap
    except Exception as e:       # noqa: BLE001 - reported in its cells
        errors[KOHORT_BROKER] = f"{type(e).__name__}: {e}"
        brokers[KOHORT_BROKER] = None
    kafka_err = None
    try:
        from tests.helpers.kafka_cluster import KafkaCluster
        _kafka = KafkaCluster(nodes=1, jvm=KAFKA_JVM)
        _kafka.start()
        brokers[KAFKA] = _kafka.bootstrap
    except Exception as e:       # noqa: BLE001 - reported in its cells
        kafka_err = f"{type(e).__name__}: {e}"
        brokers[KAFKA] = None
    jobs = []
    for n in sizes:
        for protocol in ("classic", "consumer"):
            for broker, addr in brokers.items():
                before = None
                err = kafka_err if broker == KAFKA else errors.get(broker)
                if addr is None:
                    def before(job, round_no, err=err):
                        raise RuntimeError(err or "broker not started")
                jobs.append(Job("kip848", f"{protocol} · {n} members", broker, "cases.kip848:converge",
                                {"addr": addr, "protocol": protocol, "members": n},
                                timeout=600, subrows=["member joins", "member leaves"], before=before))
    return [sec], jobs


def finish(env) -> None:
    global _kafka, _kohort
    if _kafka is not None:
        _kafka.close()
        _kafka = None
    if _kohort is not None:
        _kohort.__exit__(None, None, None)
        _kohort = None
