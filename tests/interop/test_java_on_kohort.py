"""Apache Kafka's own Java client and CLI tools (4.x, from Maven Central) against kohort broker (issue 11's
interop matrix, fast part):

- the Java idempotent producer, read back by kohort's consumer exactly once;
- Java KafkaConsumer groups (classic protocol): 3 members, one SIGKILLed, nothing lost; a mixed group of
  Java, kohort and confluent-kafka members with a member SIGKILLed;
- kafka-topics --create/--describe, kafka-consumer-groups --describe/--reset-offsets --execute/--delete,
  the console producer and a console consumer in a group, the producer and consumer perf tests.
"""
from __future__ import annotations

import re
import time
import uuid

import pytest

from kohort import Consumer
from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import (
    CONSOLE_CONSUMER, CONSOLE_PRODUCER, CONSUMER_GROUPS, CONSUMER_PERF, PRODUCER_PERF, TOPICS, JavaPeer,
    run_tool,
)
from tests.helpers.peers import create_topic, produce
from tests.client.consumer.test_client_group import _member, _owned, _records


@pytest.fixture(scope="module")
def kb():
    with KohortBroker() as b:
        yield b


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def tool(main_class: str, *args: str, **kw):
    return run_tool(main_class, *args, **kw)


def test_java_idempotent_producer_on_kohort_broker(kb):
    topic = uniq("jprod")
    assert create_topic(kb.bootstrap, topic, 3) == 3
    with JavaPeer("produce", "--bootstrap", kb.bootstrap, "--topic", topic, "--count", "20000",
                  "--compression", "zstd") as j:
        done = j.wait_for(lambda e: e["event"] == "done", timeout=90)
    assert done == {"event": "done", "acked": 20000, "failed": 0, "errors": []}
    got = []
    with Consumer({"bootstrap.servers": kb.bootstrap}) as c:
        c.assign([(topic, p) for p in range(3)])
        c.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(got) < 20000 and time.monotonic() < deadline:
            got.extend(r.value for r in c.poll(0.5))
        time.sleep(0.3)
        got.extend(r.value for r in c.poll(0.2))
    assert sorted(got) == sorted(f"v-{i}".encode() for i in range(20000))


@pytest.mark.slow     # the default suite has Java members with a SIGKILL in the mixed group below
def test_java_group_of_three_with_a_member_sigkilled(kb):
    topic, group = uniq("jg3"), uniq("jg3")
    assert create_topic(kb.bootstrap, topic, 6) == 6
    produce(kb.bootstrap, topic, 3000, partitions=6)
    args = ["consume", "--bootstrap", kb.bootstrap, "--topic", topic, "--group", group, "--offsets",
            "--session-timeout-ms", "6000"]
    peers = [JavaPeer(*args).start() for _ in range(3)]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owned = [p.owned() for p in peers]
            if all(owned) and sum(map(len, owned)) == 6 and len(set().union(*(p.seen() for p in peers))) == 3000:
                break
            time.sleep(0.2)
        owned = [p.owned() for p in peers]
        assert all(owned) and sum(map(len, owned)) == 6, owned
        peers[0].kill()
        produce(kb.bootstrap, topic, 1000, partitions=6, start=3000)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owned = [p.owned() for p in peers[1:]]
            if sum(map(len, owned)) == 6 and len(set().union(*(p.seen() for p in peers))) == 4000:
                break
            time.sleep(0.2)
        owned = [p.owned() for p in peers[1:]]
        assert set().union(*owned) == {(topic, i) for i in range(6)} and sum(map(len, owned)) == 6
        assert len(set().union(*(p.seen() for p in peers))) == 4000
    finally:
        for p in peers:
            p.stop()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_mixed_group_java_kohort_confluent_with_sigkill(kb, strategy):
    """Java, kohort and confluent-kafka members in one classic group (each a process of its own); the
    kohort member is SIGKILLed; the others take its partitions and everything is consumed."""
    topic, group = uniq(f"mix-{strategy}"), uniq(f"mix-{strategy}")
    assert create_topic(kb.bootstrap, topic, 6) == 6
    produce(kb.bootstrap, topic, 3000, partitions=6)
    java_assignor = {"range": "org.apache.kafka.clients.consumer.RangeAssignor",
                     "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}
    java = JavaPeer("consume", "--bootstrap", kb.bootstrap, "--topic", topic, "--group", group, "--offsets",
                    "--session-timeout-ms", "6000", "--assignor", java_assignor[strategy]).start()
    kohort = _member(kb.bootstrap, group, topic, strategy)
    ck = _member(kb.bootstrap, group, topic, strategy, client="confluent-kafka")
    total = {(topic, i) for i in range(6)}

    def seen():
        return java.seen() | _records(kohort[1]) | _records(ck[1])

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            o = [java.owned(), _owned(kohort[1]), _owned(ck[1])]
            if all(o) and sum(map(len, o)) == 6 and set().union(*o) == total and len(seen()) == 3000:
                break
            time.sleep(0.2)
        o = [java.owned(), _owned(kohort[1]), _owned(ck[1])]
        assert all(o) and set().union(*o) == total and sum(map(len, o)) == 6, o
        kohort[0].kill()
        kohort[0].wait(10)
        produce(kb.bootstrap, topic, 1000, partitions=6, start=3000)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            o = [java.owned(), _owned(ck[1])]
            if set().union(*o) == total and sum(map(len, o)) == 6 and len(seen()) == 4000:
                break
            time.sleep(0.2)
        o = [java.owned(), _owned(ck[1])]
        assert set().union(*o) == total and sum(map(len, o)) == 6, o
        assert len(seen()) == 4000, f"{4000 - len(seen())} records never consumed"
    finally:
        java.stop()
        for p, _ in (kohort, ck):
            if p.poll() is None:
                p.kill()
            p.wait(10)


def test_kafka_cli_tools_on_kohort_broker(kb):
    bs = kb.bootstrap
    topic, group = uniq("tools"), uniq("tools")
    tool(TOPICS, "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "3",
         "--replication-factor", "1")
    d = tool(TOPICS, "--bootstrap-server", bs, "--describe", "--topic", topic).stdout
    assert "PartitionCount: 3" in d and d.count("Leader: ") == 3
    assert topic in tool(TOPICS, "--bootstrap-server", bs, "--list").stdout.split()
    lines = "".join(f"k{i}\tline-{i}\n" for i in range(300))
    tool(CONSOLE_PRODUCER, "--bootstrap-server", bs, "--topic", topic, "--reader-property", "parse.key=true",
         "--reader-property", "key.separator=\t", input=lines)
    out = tool(CONSOLE_CONSUMER, "--bootstrap-server", bs, "--topic", topic, "--group", group,
               "--from-beginning", "--max-messages", "300", "--timeout-ms", "20000").stdout
    assert sorted(out.split()) == sorted(f"line-{i}" for i in range(300))
    rows = [r.split() for r in tool(CONSUMER_GROUPS, "--bootstrap-server", bs, "--describe", "--group",
                                    group).stdout.splitlines() if r.strip() and not r.startswith("GROUP")]
    assert len(rows) == 3 and sum(int(r[3]) for r in rows) == 300 and all(r[5] == "0" for r in rows), rows
    r = tool(CONSUMER_GROUPS, "--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", topic,
             "--to-offset", "10", "--execute").stdout
    assert r.count(" 10") >= 3, r
    rows = [r.split() for r in tool(CONSUMER_GROUPS, "--bootstrap-server", bs, "--describe", "--group",
                                    group).stdout.splitlines() if r.strip() and not r.startswith("GROUP")]
    assert sorted(int(r[3]) for r in rows) == [10, 10, 10]
    # kohort's consumer resumes where Kafka's tool put the group
    with Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False}) as c:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 270 and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
    assert len(got) == 270 and min(r.offset for r in got) == 10
    r = tool(CONSUMER_GROUPS, "--bootstrap-server", bs, "--delete", "--group", group)
    assert "was successful" in r.stdout, r.stdout
    assert group not in tool(CONSUMER_GROUPS, "--bootstrap-server", bs, "--list").stdout.split()


def test_kafka_perf_tools_on_kohort_broker(kb):
    bs = kb.bootstrap
    topic = uniq("perf")
    assert create_topic(bs, topic, 2) == 2
    out = tool(PRODUCER_PERF, "--topic", topic, "--num-records", "50000", "--record-size", "100",
               "--throughput", "-1", "--producer-props", f"bootstrap.servers={bs}", "acks=all").stdout
    m = re.search(r"50000 records sent, ([\d.]+) records/sec", out)
    assert m, out
    out = tool(CONSUMER_PERF, "--bootstrap-server", bs, "--topic", topic, "--messages", "50000",
               "--timeout", "30000").stdout
    # header line, then one data line whose 6th column is data.consumed.in.nMsg
    data = [ln for ln in out.splitlines() if ln and ln[0].isdigit()]
    assert data and int(data[-1].split(",")[4].strip()) == 50000, out
