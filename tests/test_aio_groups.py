"""A group of kohort.aio members mixed with confluent-kafka (librdkafka) members, each a subprocess
(tests/group_member.py), classic protocol and KIP-848: one member is SIGKILLed mid-stream while records
keep arriving; its partitions are taken over and nothing is lost (duplicates only of what it read and
had not committed)."""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.brokers import KohortBroker
from tests.test_groups_clients import Member, committed, create_topic, produce, wait_until

BROKER_CONFIG = {"group.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 3000,
                 "group.consumer.min.session.timeout.ms": 1000, "group.consumer.heartbeat.interval.ms": 300,
                 "group.consumer.min.heartbeat.interval.ms": 100, "group.initial.rebalance.delay.ms": 0}
SESSION_MS = 3000

# (members, index of the one SIGKILLed)
CASES = {"classic": (("kohort-aio", "confluent", "kohort-aio"), 0),
         "consumer": (("kohort-aio-848", "confluent-848", "kohort-aio-848"), 1)}


@pytest.fixture(scope="module")
def broker():
    with KohortBroker(config=BROKER_CONFIG) as b:
        yield b


@pytest.mark.parametrize("protocol", list(CASES))
def test_mixed_group_member_sigkilled_nothing_lost(broker, protocol):
    clients, victim_index = CASES[protocol]
    bs, nparts = broker.bootstrap, 6
    topic, group = f"aio-mix-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(bs, topic, nparts)
    produced = produce(bs, topic, nparts, 0, 300)
    members = [Member(c, bs, group, topic, SESSION_MS) for c in clients]
    try:
        def consumed():
            return [(*r, i) for i, m in enumerate(members) for r in m.records]

        wait_until(lambda: {r[3] for r in consumed()} >= set(produced), 40, "the first records", members)
        # a 2/2/2 split (librdkafka reports KIP-848 assignments incrementally: its lines are not the full set)
        full = [m for m in members if m.client != "confluent-848"]
        wait_until(lambda: all(len(m.assignment) == nparts // 3 for m in full), 30, "a 2/2/2 split", members)
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
        took = wait_until(lambda: {r[3] for r in consumed()} >= set(produced), SESSION_MS / 1000 + 25,
                          "every record after the SIGKILL", members)
        print(f"{protocol}: all records read {took:.1f}s after killing {victim.client}")
        seen: dict[str, list] = {}
        for t, p, off, v, who in consumed():
            seen.setdefault(v, []).append((t, p, off, who))
        dups = 0
        for v, hits in seen.items():
            if len(hits) > 1:
                dups += len(hits) - 1
                assert victim_index in {h[3] for h in hits}, (v, hits)
                (p, off), = {(h[1], h[2]) for h in hits}
                assert off >= victim_commits.get(p, 0), (v, hits, victim_commits)
        print(f"{protocol}: {dups} records read twice (read by the killed member, not committed)")
        for i, m in enumerate(members):
            if i != victim_index:
                m.terminate()
                assert m.closed, m.lines[-5:]
        assert committed(bs, group, topic, nparts) == {p: 100 for p in range(nparts)}
    finally:
        for m in members:
            m.kill()
