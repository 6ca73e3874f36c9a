"""kohort's client against a 3-node Apache Kafka 4.x (KRaft, combined nodes, RF 3, min.insync.replicas 2)
while nodes die (issue 11, slow suite):

- bootstrap with the first listed broker dead;
- SIGKILL the node coordinating a kohort group, then the node leading a partition, while 2 kohort
  members consume (committing after each batch) and a kohort producer (acks=all, idempotent) writes:
  every acknowledged record is consumed, duplicates stay within the uncommitted window (at most one
  poll batch per member and kill), and the recovery times are printed (pytest -s shows them).
"""
from __future__ import annotations

import collections
import threading
import time
import uuid

import pytest

from kohort import Consumer, Producer
from kohort.client.admin import Admin
from tests.helpers.kafka_cluster import KafkaCluster
from tests.client.consumer.test_client_group import _member, _owned

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

RECOVERY: dict[str, float] = {}


def _ensure_all_up(kc: KafkaCluster) -> None:
    for n in kc.nodes:
        if not n.alive:
            kc.restart(n.node_id)
    kc.wait_ready(120, nodes=3)


def test_bootstrap_with_the_first_listed_broker_dead(kafka3):
    _ensure_all_up(kafka3)
    topic = f"boot-{uuid.uuid4().hex[:8]}"
    kafka3.create_topic(topic, 3)
    first = kafka3.nodes[0]
    kafka3.kill(first.node_id)
    try:
        t0 = time.monotonic()
        with Admin({"bootstrap.servers": kafka3.bootstrap}) as a:
            assert topic in a.list_topics()
        RECOVERY["admin bootstrap past a dead first broker"] = time.monotonic() - t0
        p = Producer({"bootstrap.servers": kafka3.bootstrap, "acks": "all"})
        try:
            for i in range(300):
                p.produce(topic, str(i).encode(), partition=i % 3)
            assert p.flush(60) == 0
        finally:
            p.close()
        got = []
        with Consumer({"bootstrap.servers": kafka3.bootstrap, "group.id": f"boot-{uuid.uuid4().hex[:6]}",
                       "auto.offset.reset": "earliest"}) as c:
            c.subscribe([topic])
            deadline = time.monotonic() + 60
            while len(got) < 300 and time.monotonic() < deadline:
                got.extend(c.poll(0.5))
        assert sorted(int(r.value) for r in got) == list(range(300))
    finally:
        kafka3.restart(first.node_id)


class _Writer:
    """A kohort producer (acks=all, idempotent) writing until stopped; remembers every ack."""

    def __init__(self, bs: str, topic: str, partitions: int):
        self.p = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5, "delivery.timeout.ms": 120000})
        self.topic, self.partitions = topic, partitions
        self.acked: list[tuple[int, int]] = []
        self.ack_times: list[float] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def on_delivery(self, err, md):
        if err is None:
            self.acked.append((md.partition, md.offset))
            self.ack_times.append(time.monotonic())
        else:
            self.errors.append(repr(err))

    def run(self):
        i = 0
        while not self.stop.is_set():
            self.p.produce(self.topic, str(i).encode(), partition=i % self.partitions,
                           on_delivery=self.on_delivery)
            i += 1
            if i % 50 == 0:
                time.sleep(0.02)

    def close(self):
        self.stop.set()
        self.t.join(30)
        self.p.flush(120)
        self.p.close()


def _consumed(members) -> collections.Counter:
    c = collections.Counter()
    for _, lines in members:
        for ev in list(lines):
            for t, p, o in ev.get("records", []):
                c[(p, o)] += 1
    return c


def _largest_gap(times: list[float], after: float) -> float:
    ts = [t for t in times if t >= after - 1]
    return max((b - a for a, b in zip(ts, ts[1:])), default=float("inf"))


@pytest.mark.parametrize("victim", ["coordinator", "leader"])
def test_kill_a_node_while_a_group_consumes_and_a_producer_writes(kafka3, victim):
    _ensure_all_up(kafka3)
    topic, group = f"kill-{victim}-{uuid.uuid4().hex[:6]}", f"kill-{victim}-{uuid.uuid4().hex[:6]}"
    kafka3.create_topic(topic, 6)
    w = _Writer(kafka3.bootstrap, topic, 6)
    w.t.start()
    members = [_member(kafka3.bootstrap, group, topic, "range", seconds=300) for _ in range(2)]
    progress: list[float] = []
    killed = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum(len(_owned(lines)) for _, lines in members) == 6 and len(_consumed(members)) > 2000:
                break
            time.sleep(0.2)
        assert sum(len(_owned(lines)) for _, lines in members) == 6
        node = kafka3.coordinator(group) if victim == "coordinator" else kafka3.leader(topic, 0)
        t_kill = time.monotonic()
        kafka3.kill(node)
        killed = node
        last, n_before = time.monotonic(), len(_consumed(members))
        end = time.monotonic() + 40
        while time.monotonic() < end:           # sample consumption progress after the kill
            n = len(_consumed(members))
            if n > n_before:
                progress.append(time.monotonic())
                n_before = n
            time.sleep(0.05)
        w.close()
        acked = set(w.acked)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not acked <= set(_consumed(members)):
            time.sleep(0.5)
        consumed = _consumed(members)
        missing = acked - set(consumed)
        assert not missing, f"{len(missing)} acknowledged records never consumed, e.g. {sorted(missing)[:5]}"
        dups = sum(c - 1 for c in consumed.values() if c > 1)
        # uncommitted window: each member re-reads at most its last batch (≤ 200 records) per rebalance
        assert dups <= 2 * 200 * 2, f"{dups} duplicates"
        assert not w.errors, w.errors[:3]
        RECOVERY[f"{victim} kill: largest gap between producer acks"] = _largest_gap(w.ack_times, t_kill)
        RECOVERY[f"{victim} kill: consumption resumed after"] = (progress[0] - t_kill) if progress else float("inf")
        RECOVERY[f"{victim} kill: acked / consumed / duplicates"] = (len(acked), len(consumed), dups)
        print(f"\n3-node {victim} kill (node {node}): " + ", ".join(
            f"{k.split(': ', 1)[1]} = {v if isinstance(v, tuple) else round(v, 2)}"
            for k, v in RECOVERY.items() if k.startswith(victim)))
    finally:
        if not w.stop.is_set():
            w.stop.set()
            w.t.join(10)
            w.p.close()
        for p, _ in members:
            p.kill()
            p.wait(10)
        if killed is not None:
            kafka3.restart(killed)
