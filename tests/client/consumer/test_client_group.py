"""Consumer groups against librdkafka's mock cluster (3 brokers: coordinator and leaders apart).

Fast (~3.5 s: the mock's initial rebalance delay is 3 s): a commit for records of an older
generation fails clearly. Slow (-m slow): one member joins, consumes, commits and a restarted
member resumes from the commit (the mock waits session.timeout.ms - 1 s to re-elect after a
leave); max.poll.interval.ms makes the member leave, and the next poll reports the partitions lost
and rejoins (Java's behaviour); three kohort members as subprocesses share the partitions and one
is SIGKILLed; mixed groups with confluent-kafka members (range, cooperative-sticky); a member whose
processing outlasts session.timeout.ms keeps its partitions thanks to background heartbeats.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kohort import Consumer
from kohort.client.consumer.group import STABLE, CommitFailedError
from kohort.client.consumer.membership import (
    FATAL, REDISCOVER, REJOIN, RESET_GENERATION, RESET_MEMBER, RETRY, error_action,
)
from kohort.structs import TopicPartition
from tests.helpers.peers import create_topic, mock_cluster, produce  # noqa: F401

MEMBER = Path(__file__).parents[2] / "helpers" / "client_group_member.py"
BASE = {"auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def poll_until(c, cond, timeout=15.0):
    got = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got.extend(c.poll(0.2))
        if cond(got):
            return got
    raise AssertionError(f"condition not met in {timeout}s; got {len(got)} records, health {c.health()}")


def test_error_classification():
    assert error_action(0) == "ok"
    assert error_action(16) == REDISCOVER and error_action(15) == REDISCOVER
    assert error_action(27) == REJOIN
    assert error_action(22) == RESET_GENERATION and error_action(25) == RESET_MEMBER
    assert error_action(14) == RETRY
    assert error_action(30) == FATAL   # GROUP_AUTHORIZATION_FAILED


@pytest.mark.slow
def test_join_consume_commit_resume(mock_cluster):
    n = create_topic(mock_cluster, "grp-a", 4)
    produce(mock_cluster, "grp-a", 400, partitions=n)
    conf = {"bootstrap.servers": mock_cluster, "group.id": "g-resume", **BASE, "enable.auto.commit": False}
    assigned = []
    with Consumer(conf) as c:
        c.subscribe(["grp-a"], on_assign=lambda cons, tps: assigned.extend(tps))
        got = poll_until(c, lambda g: len(g) >= 150)
        for tp in c.assignment():
            c.position(tp, 10)     # every partition has a position (reset or read): commit() covers them all
        assert set(assigned) == {TopicPartition("grp-a", p) for p in range(n)}
        h = c.health()
        assert h["member_state"] == STABLE and h["rebalance_count"] == 1 and h["leader"]
        assert h["seconds_since_heartbeat"] is not None and h["seconds_since_heartbeat"] < 5
        c.commit()
        committed = c.committed(c.assignment())
        assert sum(om.offset for om in committed.values()) == len(got)
    with Consumer(conf) as c2:
        c2.subscribe(["grp-a"])
        rest = poll_until(c2, lambda g: len(g) >= 400 - len(got))
        assert len(rest) == 400 - len(got)
        seen = {(r.partition, r.offset) for r in got} | {(r.partition, r.offset) for r in rest}
        assert len(seen) == 400


@pytest.mark.slow
def test_poll_interval_exceeded_leaves_and_rejoins(mock_cluster):
    n = create_topic(mock_cluster, "grp-b", 4)
    produce(mock_cluster, "grp-b", 50, partitions=n)
    conf = {"bootstrap.servers": mock_cluster, "group.id": "g-slowpoll", **BASE, "max.poll.interval.ms": 1500}
    lost = []
    with Consumer(conf) as c:
        c.subscribe(["grp-b"], on_lost=lambda cons, tps: lost.extend(tps))
        poll_until(c, lambda g: len(g) > 0)
        gen = c.health()["generation_id"]
        time.sleep(2.5)
        with pytest.raises(CommitFailedError, match="not part of an active generation"):
            c.commit()
        c.poll(0.1)     # Java: no error; the lost partitions are reported and the member rejoins
        assert lost
        # and it rejoins afterwards
        poll_until(c, lambda g: c.health()["member_state"] == STABLE and c.assignment(), timeout=15)
        assert c.health()["generation_id"] > gen


def test_commit_of_older_generation_fails(mock_cluster):
    """A commit the coordinator answers ILLEGAL_GENERATION fails clearly, and the member keeps its
    member id (Java resets only the generation) and rejoins."""
    from kohort.client.consumer.membership import Generation
    n = create_topic(mock_cluster, "grp-c", 4)
    produce(mock_cluster, "grp-c", 50, partitions=n)
    conf = {"bootstrap.servers": mock_cluster, "group.id": "g-oldgen", **BASE, "enable.auto.commit": False}
    with Consumer(conf) as c:
        c.subscribe(["grp-c"])
        poll_until(c, lambda g: len(g) > 0)
        g = c._group
        with g._lock:     # as after a rebalance the application did not notice
            gen = g.m.generation
            g.m.generation = Generation(gen.generation_id + 1, gen.member_id, gen.protocol_name)
        with pytest.raises(CommitFailedError, match="ILLEGAL_GENERATION"):
            c.commit()
        assert g.member_id == gen.member_id


def _member(bs, group, topics, strategy, seconds=60, client="kohort"):
    p = subprocess.Popen([sys.executable, str(MEMBER), bs, group, topics, strategy, str(seconds), client],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ})
    lines: list = []
    t = threading.Thread(target=lambda: [lines.append(json.loads(x)) for x in p.stdout], daemon=True)
    t.start()
    return p, lines


def _owned(lines):
    own = set()
    for ev in lines:
        for k in ("assigned",):
            own |= {tuple(x) for x in ev.get(k, [])}
        for k in ("revoked", "lost"):
            own -= {tuple(x) for x in ev.get(k, [])}
    return own


def _records(lines):
    return {(t, p, o) for ev in list(lines) for t, p, o in ev.get("records", [])}


def _three_members_sigkill(bs, topics_parts, group, settle=40, finish=60):
    produced = 0
    for t, n in topics_parts:
        produce(bs, t, 2000, partitions=n)
        produced += 2000
    total = {(t, p) for t, n in topics_parts for p in range(n)}
    procs = [_member(bs, group, ",".join(t for t, _ in topics_parts), "range") for _ in range(3)]
    try:
        end = time.monotonic() + settle
        while time.monotonic() < end:
            owned = [_owned(lines) for _, lines in procs]
            if all(owned) and sum(len(o) for o in owned) == len(total):
                break
            time.sleep(0.2)
        owned = [_owned(lines) for _, lines in procs]
        assert set().union(*owned) == total and sum(len(o) for o in owned) == len(total)   # disjoint, complete
        victim, vlines = procs[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(5)
        for t, n in topics_parts:
            produce(bs, t, 1000, partitions=n, start=2000)
            produced += 1000
        end = time.monotonic() + finish
        while time.monotonic() < end:
            seen = set().union(*(_records(lines) for _, lines in procs))
            survivors = [_owned(lines) for _, lines in procs[1:]]
            if len(seen) >= produced and set().union(*survivors) == total:
                break
            time.sleep(0.3)
        seen = set().union(*(_records(lines) for _, lines in procs))
        assert len(seen) == produced, f"{produced - len(seen)} records never consumed"
        survivors = [_owned(lines) for _, lines in procs[1:]]
        assert set().union(*survivors) == total and sum(map(len, survivors)) == len(total)
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
            p.wait(5)


@pytest.mark.slow
def test_three_members_split_and_sigkill_loses_nothing(mock_cluster):
    """3 kohort members (subprocesses) share 2 topics x 4 partitions (the mock's fixed count); one is
    SIGKILLed; the others take over its partitions from the committed offsets and nothing is lost."""
    na = create_topic(mock_cluster, "grp-k1", 4)
    nb = create_topic(mock_cluster, "grp-k2", 4)
    _three_members_sigkill(mock_cluster, [("grp-k1", na), ("grp-k2", nb)], "g-kill")


@pytest.mark.slow
def test_three_members_on_six_partitions_tansu(tansu):
    n = create_topic(tansu, "grp-six", 6)
    assert n == 6
    _three_members_sigkill(tansu, [("grp-six", 6)], "g-six", settle=120, finish=120)


def _confluent_member(bs, group, topic, strategy, seen, stop):
    from confluent_kafka import Consumer as CK
    c = CK({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500})
    owned = set()

    def on_assign(cons, parts):
        owned.update((p.topic, p.partition) for p in parts)
        if strategy == "cooperative-sticky":
            cons.incremental_assign(parts)

    def on_revoke(cons, parts):
        owned.difference_update((p.topic, p.partition) for p in parts)
        if strategy == "cooperative-sticky":
            cons.incremental_unassign(parts)

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stop.is_set():
        for m in c.consume(100, 0.2):
            if m.error() is None:
                seen.append((m.topic(), m.partition(), m.offset()))
    c.close()
    return owned


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_mixed_group_with_confluent_kafka(mock_cluster, strategy):
    topic = f"grp-mixed-{strategy}"
    n = create_topic(mock_cluster, topic, 4)
    produce(mock_cluster, topic, 2000, partitions=n)
    group = f"g-mixed-{strategy}"
    seen_ck: list = []
    stop = threading.Event()
    ck = threading.Thread(target=_confluent_member, args=(mock_cluster, group, topic, strategy, seen_ck, stop))
    ck.start()
    assigned = set()
    try:
        with Consumer({"bootstrap.servers": mock_cluster, "group.id": group, **BASE,
                       "partition.assignment.strategy": strategy}) as c:
            c.subscribe([topic], on_assign=lambda cons, tps: assigned.update(tps),
                        on_revoke=lambda cons, tps: assigned.difference_update(tps))
            got = []
            end = time.monotonic() + 40
            while time.monotonic() < end:
                got.extend(c.poll(0.2))
                if len({(r.partition, r.offset) for r in got} | {(p, o) for _, p, o in seen_ck}) >= 2000 \
                        and c.health()["member_state"] == STABLE:
                    break
            mine = {(r.partition, r.offset) for r in got}
            theirs = {(p, o) for _, p, o in seen_ck}
            assert len(mine | theirs) == 2000
            assert 0 < len(assigned) < n       # the partitions really are shared
    finally:
        stop.set()
        ck.join(20)


def long_processing_keeps_partitions(bs, topic, partitions):
    """A member whose processing of one batch (8 s) outlasts session.timeout.ms (6 s) but not
    max.poll.interval.ms keeps its partitions: same generation, no rebalance (background heartbeats)."""
    n = create_topic(bs, topic, partitions)
    produce(bs, topic, 100, partitions=n)
    conf = {"bootstrap.servers": bs, "group.id": f"g-{topic}", **BASE, "max.poll.interval.ms": 20000,
            "max.poll.records": 10}
    with Consumer(conf) as c:
        c.subscribe([topic])
        poll_until(c, lambda g: len(g) > 0)
        before = c.health()
        time.sleep(8)     # "processing" longer than session.timeout.ms (6 s)
        c.poll(0.5)
        after = c.health()
        assert after["member_state"] == STABLE
        assert after["generation_id"] == before["generation_id"]
        assert after["rebalance_count"] == before["rebalance_count"]
        assert c.assignment() == {TopicPartition(topic, p) for p in range(n)}


@pytest.mark.slow
def test_processing_longer_than_session_timeout_keeps_partitions(mock_cluster):
    long_processing_keeps_partitions(mock_cluster, "grp-long", 4)


@pytest.mark.slow
def test_tansu_group_join_consume_commit(tansu):
    """Flexible versions of the group APIs (JoinGroup v9, SyncGroup v5, ...) against a real Kafka
    implementation; Tansu's first classic join takes tens of seconds."""
    n = create_topic(tansu, "tansu-grp", 3)
    produce(tansu, "tansu-grp", 300, partitions=n)
    conf = {"bootstrap.servers": tansu, "group.id": "g-tansu", **BASE, "enable.auto.commit": False}
    with Consumer(conf) as c:
        c.subscribe(["tansu-grp"])
        got = poll_until(c, lambda g: len(g) >= 300, timeout=90)
        assert c.assignment() == {TopicPartition("tansu-grp", p) for p in range(n)}
        c.commit()
        committed = c.committed(c.assignment())
        assert sum(om.offset for om in committed.values()) == 300


def test_a_heartbeat_answer_wakes_a_waiting_poll():
    """A heartbeat's answer (REBALANCE_IN_PROGRESS: rejoin) wakes poll()'s wait for records, so the
    rejoin goes out at once rather than when that wait ends (up to 0.5 s on an idle topic)."""
    from concurrent.futures import Future

    from kohort.client.consumer.group import ClassicDriving, GroupMember
    from kohort.protocol.messages.heartbeat import HeartbeatResponse

    class Fetcher:
        wakeups = 0

        def wakeup(self):
            Fetcher.wakeups += 1
    gm = GroupMember.__new__(GroupMember)       # the answer path only: no network, no threads
    gm.fetcher = Fetcher()
    gm.group_id = "g"
    gm.driving = ClassicDriving()
    handled = []
    gm._handle = lambda ev: handled.append(ev) or []
    fut = Future()
    fut.set_result(HeartbeatResponse(error_code=27))
    gm._on_answer(("heartbeat", None), 12, fut)
    assert len(handled) == 1 and Fetcher.wakeups == 1
