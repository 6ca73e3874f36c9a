"""The broker's log (`--log-level info --log-format json`): connections (opened/closed with client id,
listener, principal) and group events with Kafka's rebalance reasons, for kohort classic members and
confluent-kafka KIP-848 members; member expiry and fencing (slow: they wait out a session timeout)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kohort.client.consumer import Consumer
from tests.helpers.brokers import KohortBroker
from tests.broker.coordinator.test_kip848_broker import BROKER_CONFIG, _ck_member, _owned, _wait
from tests.broker.test_metrics_groups import _produce

MEMBER = Path(__file__).parents[1] / "helpers" / "client_group_member.py"


def events(b) -> list[dict]:
    out = []
    for ln in list(b.log_lines):
        if ln.startswith("{"):
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass
    return out


def wait_event(b, timeout=30, **match) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        for e in events(b):
            if all((v(e.get(k)) if callable(v) else e.get(k) == v) for k, v in match.items()):
                return e
        if time.monotonic() > deadline:
            raise AssertionError(f"no event {match} in:\n" + "\n".join(json.dumps(e) for e in events(b)[-40:]))
        time.sleep(0.1)


@pytest.fixture(scope="module")
def b():
    with KohortBroker(config=BROKER_CONFIG, extra_args=["--log-level", "info", "--log-format", "json"]) as br:
        yield br


def _member(bs, group, topic, client_id):
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": client_id,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    return c


def inner_reason(ev: dict) -> str:
    """The reason inside a RebalanceStarted line: Preparing to rebalance group ... (reason: R)."""
    return re.fullmatch(r"Preparing to rebalance group \S+ in state PreparingRebalance with old generation \d+ "
                        r"\(reason: (.*)\)\.", ev["msg"]).group(1)


def test_connections_and_classic_group_events(b):
    topic, group = f"lg-{uuid.uuid4().hex[:6]}", f"lg-{uuid.uuid4().hex[:6]}"
    _produce(b.bootstrap, topic, {0: 5, 1: 5})
    c1 = _member(b.bootstrap, group, topic, "log-c1")
    c2 = None
    try:
        _wait(lambda: len(c1.poll(0.2)) >= 0 and len(c1.assignment()) == 2, 30, lambda: None)
        e = wait_event(b, event="connection-opened", client_id="log-c1")
        assert e["listener"] == "PLAINTEXT" and e["principal"] == "User:ANONYMOUS" and e["level"] == "INFO"
        assert e["logger"] == "kohort.broker.connections" and "log-c1" in e["msg"]
        j1 = wait_event(b, event="MemberJoined", group=group, member_id=lambda m: m and m.startswith("log-c1-"))
        assert j1["logger"] == "kohort.broker.groups" and j1["type"] == "classic"
        r1 = wait_event(b, event="RebalanceStarted", group=group)
        assert inner_reason(r1).startswith(f"Adding new member {j1['member_id']} with group instance id null; "
                                           f"client reason: ")
        assert r1["msg"].startswith(f"Preparing to rebalance group {group} in state PreparingRebalance with old "
                                    f"generation 0 (reason: ")
        s1 = wait_event(b, event="GenerationStarted", group=group, members=1)
        assert s1["msg"] == f"Stabilized group {group} generation {s1['generation']} with 1 members."
        c2 = _member(b.bootstrap, group, topic, "log-c2")
        _wait(lambda: [c.poll(0.1) for c in (c1, c2)] and len(c1.assignment()) == len(c2.assignment()) == 1,
              30, lambda: None)
        j2 = wait_event(b, event="MemberJoined", group=group, member_id=lambda m: m and m.startswith("log-c2-"))
        wait_event(b, event="RebalanceStarted", group=group, msg=lambda r: j2["member_id"] in r)
        wait_event(b, event="GenerationStarted", group=group, members=2)
        c2.close()
        c2 = None
        left = wait_event(b, event="MemberLeft", group=group, member_id=j2["member_id"])
        assert left["msg"].startswith(f"[Group {group}] Member {j2['member_id']} has left group through explicit "
                                      f"`LeaveGroup` request; client reason: ")
        r = wait_event(b, event="RebalanceStarted", group=group, msg=lambda m: "LeaveGroup" in m)
        assert inner_reason(r) == f"explicit `LeaveGroup` request for ({j2['member_id']}) members."
    finally:
        for c in (c1, c2):
            if c is not None:
                c.close()
    e = wait_event(b, event="GenerationStarted", group=group, state="Empty")
    assert e["msg"] == f"Group {group} with generation {e['generation']} is now empty."
    closed = wait_event(b, event="connection-closed", client_id="log-c1")
    assert closed["requests"] > 0 and closed["listener"] == "PLAINTEXT"


def test_consumer_group_events(b):
    topic, group = f"lg8-{uuid.uuid4().hex[:6]}", f"lg8-{uuid.uuid4().hex[:6]}"
    _produce(b.bootstrap, topic, {0: 5, 1: 5})
    p, lines = _ck_member(b.bootstrap, group, topic, seconds=4)      # leaves by itself after 4 s
    try:
        j = wait_event(b, event="MemberJoined", group=group, type="consumer")
        assert j["msg"] == f"[GroupId {group}] Member {j['member_id']} joins the consumer group using the consumer protocol."
        e = wait_event(b, event="GroupEpochBumped", group=group)
        assert e["msg"] == f"[GroupId {group}] Bumped group epoch to {e['generation']}." and e["reason"]
        wait_event(b, event="TargetAssignmentComputed", group=group)
        left = wait_event(b, event="MemberLeft", group=group, member_id=j["member_id"])
        assert left["msg"] == f"[GroupId {group}] Member {j['member_id']} left the consumer group."
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(10)


@pytest.mark.slow
def test_member_expiry_and_fencing_are_logged(b):
    topic, group, cg = (f"lgx-{uuid.uuid4().hex[:6]}" for _ in range(3))
    _produce(b.bootstrap, topic, {0: 5})
    m = subprocess.Popen([sys.executable, str(MEMBER), b.bootstrap, group, topic, "range", "60"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p, lines = _ck_member(b.bootstrap, cg, topic, seconds=60)
    try:
        j = wait_event(b, event="MemberJoined", group=group)
        wait_event(b, event="GenerationStarted", group=group)
        jc = wait_event(b, event="MemberJoined", group=cg)
        assert _wait(lambda: len(_owned(lines)) == 1, 30, lambda: None)
        m.send_signal(signal.SIGKILL)
        p.send_signal(signal.SIGKILL)
        e = wait_event(b, event="MemberExpired", group=group, member_id=j["member_id"])
        assert e["msg"] == f"Member {j['member_id']} in group {group} has failed, removing it from the group."
        r = wait_event(b, event="RebalanceStarted", group=group, msg=lambda m: "heartbeat expiration" in m)
        assert inner_reason(r) == f"removing member {j['member_id']} on heartbeat expiration."
        f = wait_event(b, event="MemberExpired", group=cg, member_id=jc["member_id"])
        assert f["msg"] == (f"[GroupId {cg}] Member {jc['member_id']} fenced from the group because the member "
                            f"session expired.")
    finally:
        for proc in (m, p):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def _classic_scenario(bs, group, topic):
    """c1 joins, c2 joins, c2 leaves, c1 leaves: each member a kohort Consumer."""
    c1 = _member(bs, group, topic, "log-c1")
    c2 = None
    try:
        assert _wait(lambda: c1.poll(0.1) is not None and len(c1.assignment()) == 2, 60, lambda: None)
        c2 = _member(bs, group, topic, "log-c2")
        assert _wait(lambda: [c.poll(0.1) for c in (c1, c2)] and len(c1.assignment()) == len(c2.assignment()) == 1,
                     60, lambda: None)
        c2.close()
        c2 = None
        assert _wait(lambda: c1.poll(0.1) is not None and len(c1.assignment()) == 2, 60, lambda: None)
    finally:
        for c in (c1, c2):
            if c is not None:
                c.close()


def _norm(reason: str, ids: dict) -> str:
    def sub(m):
        return ids.setdefault(m.group(0), f"M{len(ids) + 1}")
    return re.sub(r"[A-Za-z0-9_.-]+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", sub, reason)


@pytest.mark.slow
def test_rebalance_reasons_match_apache_kafka(b):
    """The same classic-group story told by Apache Kafka 4.3.1's group coordinator log and by kohort's:
    the same rebalances with the same reasons (member ids aside)."""
    from tests.helpers.kafka_cluster import KafkaCluster
    topic, group = f"lgk-{uuid.uuid4().hex[:6]}", f"lgk-{uuid.uuid4().hex[:6]}"
    kc = KafkaCluster(nodes=1)
    kc.log4j.write_text(kc.log4j.read_text() + "logger.gc.name = org.apache.kafka.coordinator.group\n"
                                                "logger.gc.level = INFO\n")
    try:
        kc.start()
        kc.create_topic(topic, 2)
        _classic_scenario(kc.bootstrap, group, topic)
        deadline = time.monotonic() + 20
        pat = re.compile(rf"Preparing to rebalance group {re.escape(group)} in state \w+ with old generation "
                         rf"\d+ \(reason: (.*)\)\.")
        while True:
            theirs = [m.group(1) for m in pat.finditer(kc.nodes[0].log())]
            if len(theirs) >= 4 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        kc.close()
    _produce(b.bootstrap, topic, {0: 1, 1: 1})
    _classic_scenario(b.bootstrap, group, topic)
    wait_event(b, event="GenerationStarted", group=group, state="Empty")
    ours = [inner_reason(e) for e in events(b) if e.get("event") == "RebalanceStarted" and e.get("group") == group]
    assert [_norm(r, {}) for r in ours] and len(ours) == len(theirs), (ours, theirs)
    ids_o, ids_t = {}, {}
    assert [_norm(r, ids_o) for r in ours] == [_norm(r, ids_t) for r in theirs], (ours, theirs)
