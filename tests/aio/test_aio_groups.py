"""A group of kohort.aio members mixed with confluent-kafka (librdkafka) members and Apache Kafka's Java
KafkaConsumer, each a subprocess (tests/helpers/group_member.py; tests/interop/peers/java/Peer.java for Java), classic
protocol and KIP-848: one member is SIGKILLed mid-stream while records keep arriving; its partitions are
taken over and nothing is lost (duplicates only of what it read and had not committed). Records are
identified by (partition, offset), which every member reports."""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import JavaPeer
from tests.interop.test_groups_clients import Member, committed, create_topic, produce, wait_until

BROKER_CONFIG = {"group.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 3000,
                 "group.consumer.min.session.timeout.ms": 1000, "group.consumer.heartbeat.interval.ms": 300,
                 "group.consumer.min.heartbeat.interval.ms": 100, "group.initial.rebalance.delay.ms": 0}
SESSION_MS = 3000

# (members, index of the one SIGKILLed)
CASES = {"classic": (("kohort-aio", "confluent", "java", "kohort-aio"), 0),
         "consumer": (("kohort-aio-848", "confluent-848", "java-848", "kohort-aio-848"), 1)}
NPARTS = 8


class JavaMember:
    """A Java KafkaConsumer group member (Peer.java consume --offsets, committing after every poll) seen
    through Member's attributes: records, assignment, commits, closed, lines, kill(), terminate().
    Session timing at Java's defaults (its heartbeat.interval.ms of 3 s must stay below the session
    timeout); the member SIGKILLed is never the Java one, so the takeover waits on the victim's session."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str):
        self.client, self.topic = client, topic
        protocol = "consumer" if client.endswith("-848") else "classic"
        args = ["consume", "--bootstrap", bootstrap, "--topic", topic, "--group", group,
                "--protocol", protocol, "--commit", "sync", "--offsets"]
        if protocol == "classic":           # the group's other members (group_member.py) use roundrobin
            args += ["--assignor", "org.apache.kafka.clients.consumer.RoundRobinAssignor"]
        self.peer = JavaPeer(*args).start()

    @property
    def lines(self) -> list[str]:
        return [str(e) for e in self.peer.events] + self.peer.stderr_lines[-5:]

    @property
    def records(self) -> list[tuple[float, int, int, None]]:
        return [(0.0, p, off, None) for t, p, off in self.peer.seen() if t == self.topic]

    @property
    def assignment(self) -> frozenset:
        return frozenset(p for t, p in self.peer.owned() if t == self.topic)

    @property
    def commits(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for ev in self.peer.of("committed"):
            for tp, off in ev["offsets"].items():
                t, p = tp.rsplit("-", 1)
                if t == self.topic:
                    out[int(p)] = off
        return out

    @property
    def closed(self) -> bool:
        return bool(self.peer.of("closed"))

    def terminate(self, timeout: float = 20) -> None:
        self.peer.stop(timeout)

    def kill(self) -> None:
        self.peer.kill()


def member(client: str, bs: str, group: str, topic: str) -> Member | JavaMember:
    if client.startswith("java"):
        return JavaMember(client, bs, group, topic)
    return Member(client, bs, group, topic, SESSION_MS)


@pytest.fixture(scope="module")
def broker():
    with KohortBroker(config=BROKER_CONFIG) as b:
        yield b


@pytest.mark.parametrize("protocol", list(CASES))
def test_mixed_group_member_sigkilled_nothing_lost(broker, protocol):
    clients, victim_index = CASES[protocol]
    bs, nparts = broker.bootstrap, NPARTS
    topic, group = f"aio-mix-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, nparts)
    produced = produce(bs, topic, nparts, 0, 300)
    members = [member(c, bs, group, topic) for c in clients]
    try:
        def consumed():
            return [(*r, i) for i, m in enumerate(members) for r in m.records]

        def every(n):           # (partition, offset) of the first n records, produced round-robin
            return {(p, off) for p in range(nparts) for off in range(n // nparts + (p < n % nparts))}

        def read():
            return {(r[1], r[2]) for r in consumed()}

        wait_until(lambda: read() >= every(len(produced)), 60, "the first records", members)
        # an even split (librdkafka reports KIP-848 assignments incrementally: its lines are not the full set)
        full = [m for m in members if m.client != "confluent-848"]
        share = nparts // len(members)
        wait_until(lambda: all(len(m.assignment) == share for m in full), 30, "an even split", members)
        time.sleep(1.0)                     # the last rebalance settles
        feeder = threading.Thread(target=lambda: produced.extend(produce(bs, topic, nparts, 300, 300, 0.005)))
        feeder.start()
        time.sleep(0.5)
        victim = members[victim_index]
        t_kill = time.monotonic()
        victim.kill()
        victim_commits = dict(victim.commits)
        feeder.join(30)
        assert len(produced) == 600
        took = wait_until(lambda: read() >= every(len(produced)), SESSION_MS / 1000 + 25,
                          "every record after the SIGKILL", members)
        print(f"{protocol}: all records read {took:.1f}s after killing {victim.client}")
        idle = [m.client for i, m in enumerate(members) if i != victim_index and not m.records]
        assert not idle, f"members that read nothing: {idle}"
        seen: dict[tuple, list] = {}
        for t, p, off, v, who in consumed():
            seen.setdefault((p, off), []).append((t, v, who))
        assert set(seen) == every(len(produced)), "a record read that was never produced"
        dups = early = 0
        for (p, off), hits in seen.items():
            if len(hits) > 1:
                dups += len(hits) - 1
                if max(h[0] for h in hits) < t_kill:
                    # both reads before the kill: the first rebalances, where a member's commit can fail
                    # (COMMITFAIL) and the next owner reads from the last committed offset
                    early += 1
                    continue
                assert victim_index in {h[2] for h in hits}, (p, off, hits)
                assert off >= victim_commits.get(p, 0), (p, off, hits, victim_commits)
        print(f"{protocol}: {dups} records read twice ({early} in the first rebalances, the rest read by the "
              "killed member past its last commit)")
        for i, m in enumerate(members):
            if i != victim_index:
                m.terminate()
                assert m.closed, m.lines[-5:]
        assert committed(bs, group, topic, nparts) == {p: len(produced) // nparts for p in range(nparts)}
    finally:
        for m in members:
            m.kill()
