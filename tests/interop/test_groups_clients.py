"""Consumer groups of real clients against `kohort broker` (a subprocess): confluent-kafka,
kafka-python and aiokafka members (each a subprocess running tests/helpers/group_member.py) alone and mixed
in one group; clean close (partitions taken over at once), SIGKILL of a member (taken over after its
session timeout, nothing lost, duplicates only of what the killed member had not committed), and
committed offsets surviving a broker restart and a broker SIGKILL."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.helpers.brokers import KohortBroker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = ["confluent", "kafka-python", "aiokafka"]
BROKER_CONFIG = {"group.min.session.timeout.ms": 1000}


class Member:
    """One group member subprocess and what it reported."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, session_ms: int = 6000):
        self.client = client
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.group_member", client, bootstrap, group, topic, str(session_ms)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.lines: list[str] = []
        self.records: list[tuple[float, int, int, str]] = []       # (time, partition, offset, value)
        self.assignments: list[tuple[float, frozenset]] = []
        self.commits: dict[int, int] = {}
        self.closed = False
        self.cv = threading.Condition()
        self._t = threading.Thread(target=self._pump, daemon=True)
        self._t.start()

    def _pump(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            now = time.monotonic()
            with self.cv:
                self.lines.append(line)
                kind, _, rest = line.partition(" ")
                if kind == "REC":
                    p, off, value = rest.split(" ", 2)
                    self.records.append((now, int(p), int(off), value))
                elif kind == "ASSIGNED":
                    self.assignments.append((now, frozenset(int(x) for x in rest.split(",") if x)))
                elif kind == "COMMIT":
                    for item in rest.split(","):
                        p, o = item.split(":")
                        self.commits[int(p)] = int(o)
                elif kind == "CLOSED":
                    self.closed = True
                self.cv.notify_all()

    @property
    def assignment(self) -> frozenset:
        return self.assignments[-1][1] if self.assignments else frozenset()

    def values(self) -> set[str]:
        return {r[3] for r in self.records}

    def terminate(self, timeout: float = 20) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._t.join(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._t.join(5)


def wait_until(pred, timeout: float, what: str, members=()) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.02)
    tails = "\n".join(f"--- {m.client}: {m.lines[-8:]}" for m in members)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tails}")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def produce(bootstrap: str, topic: str, partitions: int, start: int, n: int, delay: float = 0.0) -> list[str]:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if delay else 5})
    values = [f"v{i}" for i in range(start, start + n)]
    for i, v in zip(range(start, start + n), values):
        p.produce(topic, v.encode(), partition=i % partitions)
        if delay:
            p.poll(0)
            time.sleep(delay)
    assert p.flush(10) == 0
    return values


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


@pytest.fixture(scope="module")
def broker():
    with KohortBroker(config=BROKER_CONFIG) as b:
        yield b


@pytest.mark.parametrize("client", CLIENTS)
def test_single_client_group_consumes_everything_and_commits(broker, client):
    topic, group = f"solo-{client}-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 3)
    values = set(produce(broker.bootstrap, topic, 3, 0, 150))
    m = Member(client, broker.bootstrap, group, topic)
    try:
        wait_until(lambda: m.values() >= values, 30, "all records", [m])
        first = m.records[0][0] - m.started
        assert m.assignments[0][1] == {0, 1, 2}, m.assignments
        assert len(m.records) == 150                       # one member, nothing read twice
        assert first < 15, first
        wait_until(lambda: m.commits == {0: 50, 1: 50, 2: 50}, 10, "commits", [m])
    finally:
        m.terminate()
    assert m.closed and m.proc.returncode == 0
    assert committed(broker.bootstrap, group, topic, 3) == {0: 50, 1: 50, 2: 50}


def test_committed_offsets_survive_restart_and_sigkill():
    from confluent_kafka import Consumer
    with KohortBroker(config=BROKER_CONFIG) as b:
        topic, group = "durable", "g-durable"
        create_topic(b.bootstrap, topic, 2)
        produce(b.bootstrap, topic, 2, 0, 20)
        # a short session: if this member cannot say goodbye (the broker restarts under it) it expires
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 2000, "heartbeat.interval.ms": 200})
        c.subscribe([topic])
        seen = 0
        t0 = time.monotonic()
        while seen < 20 and time.monotonic() - t0 < 20:
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen += 1
        assert seen == 20
        c.commit(asynchronous=False)
        b.kill()                                  # SIGKILL right after the commit was acknowledged
        b.start()
        assert committed(b.bootstrap, group, topic, 2) == {0: 10, 1: 10}
        b.restart()                               # clean restart
        assert committed(b.bootstrap, group, topic, 2) == {0: 10, 1: 10}
        c.close()
        # a new member resumes from the committed offsets: only new records arrive
        produce(b.bootstrap, topic, 2, 20, 4)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got = []
        t0 = time.monotonic()
        while len(got) < 4 and time.monotonic() - t0 < 20:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value().decode())
        c.close()
        assert sorted(got) == ["v20", "v21", "v22", "v23"]


def test_mixed_group_splits_six_partitions_two_each(broker):
    """confluent-kafka + kafka-python + aiokafka in one group: 2/2/2, every record consumed once."""
    topic, group, nparts = f"split-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}", 6
    create_topic(broker.bootstrap, topic, nparts)
    produced = set(produce(broker.bootstrap, topic, nparts, 0, 120))
    members = [Member(c, broker.bootstrap, group, topic) for c in CLIENTS]
    try:
        wait_until(lambda: all(len(m.assignment) == 2 for m in members)
                   and frozenset().union(*(m.assignment for m in members)) == set(range(nparts)),
                   40, "a 2/2/2 split", members)
        wait_until(lambda: set().union(*(m.values() for m in members)) >= produced, 20, "all records", members)
        if not any(line.startswith("COMMITFAIL") for m in members for line in m.lines):
            assert sum(len(m.records) for m in members) == len(produced)  # nobody read twice
    finally:
        for m in members:
            m.terminate()
    assert all(m.closed for m in members)
    assert committed(broker.bootstrap, group, topic, nparts) == {p: 20 for p in range(nparts)}


ROLES = [("confluent", "kafka-python", "aiokafka"), ("kafka-python", "aiokafka", "confluent"),
         ("aiokafka", "confluent", "kafka-python")]


@pytest.mark.slow
@pytest.mark.parametrize("roles", ROLES, ids=["-".join(r) for r in ROLES])
def test_mixed_group_split_clean_close_and_sigkill(broker, roles):
    """confluent-kafka + kafka-python + aiokafka in one group on 6 partitions; roles = (the member
    that closes cleanly, the one SIGKILLed, the one left with everything)."""
    topic, group, nparts, session = f"mixed-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}", 6, 6000
    bs = broker.bootstrap
    create_topic(bs, topic, nparts)
    produced = produce(bs, topic, nparts, 0, 600)
    ms = {c: Member(c, bs, group, topic, session) for c in CLIENTS}
    members = list(ms.values())
    try:
        def consumed() -> list[tuple[float, int, int, str, str]]:
            return [(*r, m.client) for m in members for r in m.records]

        # 1. three members split six partitions two each; everything is consumed
        wait_until(lambda: all(len(m.assignment) == 2 for m in members)
                   and frozenset().union(*(m.assignment for m in members)) == set(range(nparts)),
                   40, "a 2/2/2 split", members)
        wait_until(lambda: {r[3] for r in consumed()} >= set(produced), 30, "phase 1 records", members)

        # 2. a clean close: its partitions are taken over at once (well before the session timeout)
        leaver, victim, last = (ms[r] for r in roles)
        survivors = [victim, last]
        t_close = time.monotonic()
        leaver.terminate()
        assert leaver.closed
        took = wait_until(lambda: all(m.assignments and m.assignments[-1][0] > t_close for m in survivors)
                          and frozenset().union(*(m.assignment for m in survivors)) == set(range(nparts))
                          and all(len(m.assignment) == 3 for m in survivors),
                          session / 1000, "takeover after a clean close", members)
        assert took < 3.0, took
        print(f"clean close: partitions taken over after {took:.2f}s")
        produced += produce(bs, topic, nparts, 600, 300)
        wait_until(lambda: {r[3] for r in consumed()} >= set(produced), 30, "phase 2 records", members)
        before_kill = list(consumed())
        dups = len(before_kill) - len({r[3] for r in before_kill})
        assert dups == 0, f"{dups} duplicates without any crash"

        # 3. SIGKILL mid-stream: the survivor takes over after the session timeout, nothing is lost
        feeder = threading.Thread(target=lambda: produced.extend(produce(bs, topic, nparts, 900, 300, 0.01)))
        feeder.start()
        time.sleep(1.0)
        victim_commits = dict(victim.commits)
        victim_owned = victim.assignment
        t_kill = time.monotonic()
        victim.kill()
        victim_commits = dict(victim.commits)          # read again: lines pumped up to the kill
        took = wait_until(lambda: last.assignments[-1][0] > t_kill and last.assignment == set(range(nparts)),
                          session / 1000 + 15, "takeover after SIGKILL", members)
        assert took > session / 1000 * 0.5, f"taken over after {took:.1f}s, before the session timeout"
        print(f"SIGKILL: partitions taken over after {took:.2f}s (session.timeout.ms={session})")
        feeder.join(30)
        assert len(produced) == 1200
        wait_until(lambda: {r[3] for r in consumed()} >= set(produced), 30, "all records", members)

        # at-least-once: duplicates only of records the killed member read but had not committed
        seen: dict[str, list] = {}
        for t, p, off, v, who in consumed():
            seen.setdefault(v, []).append((t, p, off, who))
        for v, hits in seen.items():
            if len(hits) > 1:
                assert len(hits) == 2, (v, hits)
                (_, p, off, _), = {(0, h[1], h[2], 0) for h in hits}
                assert p in victim_owned and off >= victim_commits.get(p, 0), (v, hits, victim_commits)
                assert {h[3] for h in hits} == {victim.client, last.client}
                assert max(h[0] for h in hits) > t_kill
        print(f"duplicates after the kill: {sum(len(h) - 1 for h in seen.values())}")
        last.terminate()
        assert last.closed
        assert committed(bs, group, topic, nparts) == {p: 200 for p in range(nparts)}
    finally:
        for m in members:
            m.kill()


def test_admin_clients_list_describe_alter_and_delete_groups(broker):
    """confluent-kafka's and kafka-python's admin clients over DescribeGroups, ListGroups, OffsetFetch,
    OffsetCommit (admin), OffsetDelete and DeleteGroups."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KTP
    topic, group = f"adm-{uuid.uuid4().hex[:6]}", f"g-adm-{uuid.uuid4().hex[:6]}"
    bs = broker.bootstrap
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 0, 10)
    m = Member("confluent", bs, group, topic)
    admin = AdminClient({"bootstrap.servers": bs})
    kadmin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        wait_until(lambda: m.commits == {0: 5, 1: 5}, 20, "commits", [m])
        listed = admin.list_consumer_groups().result(10)
        assert group in {g.group_id for g in listed.valid}
        d = admin.describe_consumer_groups([group])[group].result(10)
        assert str(d.state).endswith("STABLE") and len(d.members) == 1
        assert {tp.partition for tp in d.members[0].assignment.topic_partitions} == {0, 1}
        assert group in {g["group_id"] for g in kadmin.list_groups()}
        # a non-empty group cannot be deleted
        res = admin.delete_consumer_groups([group])[group]
        with pytest.raises(Exception):
            res.result(10)
    finally:
        m.terminate()
    offs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert {tp.partition: tp.offset for tp in offs.topic_partitions} == {0: 5, 1: 5}
    # admin commit to the (now Empty) group, then kafka-python deletes one partition's offset
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0, 2)])])[group].result(10)
    assert committed(bs, group, topic, 2) == {0: 2, 1: 5}
    kadmin.delete_group_offsets(group, [KTP(topic, 1)])
    assert committed(bs, group, topic, 2) == {0: 2, 1: -1001}
    admin.delete_consumer_groups([group])[group].result(10)
    assert committed(bs, group, topic, 2) == {0: -1001, 1: -1001}
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    kadmin.close()


def test_static_member_restart_keeps_its_partitions_without_rebalance(broker):
    """KIP-345 with confluent-kafka: a static member (group.instance.id) closes without leaving and
    comes back within its session timeout; it gets its partition back and the other member is not
    rebalanced."""
    from confluent_kafka import Consumer
    topic, group = f"static-{uuid.uuid4().hex[:6]}", f"g-static-{uuid.uuid4().hex[:6]}"
    bs = broker.bootstrap
    create_topic(bs, topic, 2)
    assigned: dict[str, list] = {"a": [], "b": []}

    def consumer(name):
        def on_assign(c, parts):
            assigned[name].append({p.partition for p in parts})
        c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.instance.id": f"inst-{name}",
                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 300,
                      "auto.offset.reset": "earliest"})
        c.subscribe([topic], on_assign=on_assign)
        return c

    a, b = consumer("a"), consumer("b")
    try:
        wait_until(lambda: (a.poll(0.02), b.poll(0.02)) and assigned["a"] and assigned["b"]
                   and len(assigned["a"][-1]) == 1 and len(assigned["b"][-1]) == 1, 30, "a 1/1 split")
        mine = assigned["a"][-1]
        b_rebalances = len(assigned["b"])
        a.close()                                   # static member: no LeaveGroup
        a = consumer("a")
        wait_until(lambda: (a.poll(0.02), b.poll(0.02)) and len(assigned["a"]) == 2, 20, "static rejoin")
        assert assigned["a"][-1] == mine
        for _ in range(20):                          # ~1 s of B's heartbeats: no rebalance for B
            b.poll(0.05)
        assert len(assigned["b"]) == b_rebalances
    finally:
        a.close()
        b.close()
