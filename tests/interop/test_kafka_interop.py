"""kohort's client, CLI and admin against the real thing: Apache Kafka 4.x (1 KRaft node, `kafka1`), and
Apache Kafka's Java client and tools as the second opinion (issue 11's interop matrix, fast part).

- kohort Producer → Kafka → kohort Consumer and the Java KafkaConsumer, every codec, keys, headers,
  timestamps;
- the Java idempotent producer → Kafka → a kohort consumer group;
- a group of 3 kohort members on Kafka committing as they go; Kafka's kafka-consumer-groups sees the
  committed offsets and members;
- kohort's CLI (topics, produce, consume, groups describe/lag/reset-offsets/delete) against Kafka,
  checked with Kafka's own TopicCommand / ConsumerGroupCommand.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from kohort import Consumer, Producer
from kohort.client.admin import Admin
from tests.helpers.kafka_cluster import CONSUMER_GROUPS, TOPICS, JavaPeer
from tests.client.consumer.test_client_group import _member, _owned, _records

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kohort_cli(*args: str, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", *args], capture_output=True, text=True,
                       timeout=timeout, input=input)
    return r


def produce_numbers(bs: str, topic: str, n: int, partitions: int) -> None:
    """Records str(i) for i < n, round-robin over the partitions, all acknowledged."""
    p = Producer({"bootstrap.servers": bs})
    try:
        for i in range(n):
            p.produce(topic, str(i).encode(), partition=i % partitions)
        assert p.flush(30) == 0
    finally:
        p.close()


def read_all(bs: str, topic: str, partitions: int, expect: int, timeout: float = 30.0) -> list:
    got = []
    with Consumer({"bootstrap.servers": bs, "auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_kohort_producer_to_kafka_read_by_kohort_every_codec(kafka1, codec):
    topic = uniq(f"codec-{codec}")
    kafka1.create_topic(topic, 2)
    sent = []
    p = Producer({"bootstrap.servers": kafka1.bootstrap, "compression.type": codec, "linger.ms": 5})
    try:
        for i in range(300):
            key, value = f"k{i % 7}".encode(), f"value-{i}".encode() * (1 + i % 5)
            ts = 1_700_000_000_000 + i
            p.produce(topic, value, key=key, headers=[("i", str(i).encode()), ("null", None)],
                      partition=i % 2, timestamp=ts)
            sent.append((i % 2, key, value, ts, str(i).encode()))
        assert p.flush(30) == 0
    finally:
        p.close()
    got = read_all(kafka1.bootstrap, topic, 2, 300)
    assert sorted((r.partition, r.key, r.value, r.timestamp, dict(r.headers)["i"]) for r in got) == sorted(sent)
    assert all(dict(r.headers)["null"] is None for r in got)
    for part in (0, 1):
        offs = [r.offset for r in got if r.partition == part]
        assert offs == list(range(150))


def test_java_consumer_reads_what_kohort_produced_with_every_codec(kafka1):
    topic = uniq("codec-all")
    kafka1.create_topic(topic, 3)
    values = set()
    for codec in CODECS:
        p = Producer({"bootstrap.servers": kafka1.bootstrap, "compression.type": codec})
        try:
            for i in range(200):
                v = f"{codec}-{i}"
                values.add(v)
                p.produce(topic, v.encode(), partition=i % 3)
            assert p.flush(30) == 0
        finally:
            p.close()
    with JavaPeer("consume", "--bootstrap", kafka1.bootstrap, "--topic", topic, "--group", uniq("jg"),
                  "--commit", "none", "--max-records", "1000", "--offsets") as j:
        j.wait_for(lambda e: e["event"] == "closed", timeout=60)
    seen = [o for e in j.of("records") for o in e["offsets"]]
    assert len(seen) == len(set(seen)) == 1000


def test_java_idempotent_producer_to_kohort_consumer_group(kafka1):
    topic, group = uniq("jprod"), uniq("kg")
    kafka1.create_topic(topic, 4)
    with JavaPeer("produce", "--bootstrap", kafka1.bootstrap, "--topic", topic, "--count", "5000",
                  "--compression", "lz4") as j:
        done = j.wait_for(lambda e: e["event"] == "done", timeout=60)
    assert done["acked"] == 5000 and done["failed"] == 0
    values = []
    with Consumer({"bootstrap.servers": kafka1.bootstrap, "group.id": group,
                   "auto.offset.reset": "earliest", "enable.auto.commit": False}) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(values) < 5000 and time.monotonic() < deadline:
            recs = c.poll(0.5)
            values.extend(r.value for r in recs)
            if recs:
                c.commit()
    assert sorted(values) == sorted(f"v-{i}".encode() for i in range(5000))
    with Admin({"bootstrap.servers": kafka1.bootstrap}) as a:
        committed = a.list_group_offsets(group)
    assert sum(om.offset for om in committed.values()) == 5000


def _describe_group(kafka1, group: str, *extra: str) -> list[list[str]]:
    r = kafka1.tool(CONSUMER_GROUPS, "--bootstrap-server", kafka1.bootstrap, "--describe", "--group", group,
                    *extra)
    return [line.split() for line in r.stdout.splitlines() if line.strip() and not line.startswith("GROUP")]


def test_group_of_three_kohort_members_on_kafka_seen_by_kafka_tools(kafka1):
    topic, group = uniq("g3"), uniq("g3")
    kafka1.create_topic(topic, 6)
    produce_numbers(kafka1.bootstrap, topic, 3000, 6)
    members = [_member(kafka1.bootstrap, group, topic, "range") for _ in range(3)]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            owned = [_owned(lines) for _, lines in members]
            seen = set().union(*(_records(lines) for _, lines in members))
            if all(owned) and sum(map(len, owned)) == 6 and len(seen) == 3000:
                break
            time.sleep(0.2)
        owned = [_owned(lines) for _, lines in members]
        assert all(owned) and sum(map(len, owned)) == 6 and set().union(*owned) == {(topic, i) for i in range(6)}
        assert len(set().union(*(_records(lines) for _, lines in members))) == 3000
        time.sleep(0.5)     # the last commit of each member
        rows = _describe_group(kafka1, group)
        # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
        assert sorted((r[1], int(r[2]), int(r[3]), int(r[4])) for r in rows) == \
            [(topic, i, 500, 500) for i in range(6)]
        assert len({r[6] for r in rows}) == 3          # three distinct members own them
        members_rows = _describe_group(kafka1, group, "--members")
        assert len(members_rows) == 3
    finally:
        for proc, _ in members:
            proc.kill()
            proc.wait(10)


def test_kohort_cli_topics_and_groups_against_kafka(kafka1):
    bs = kafka1.bootstrap
    topic, group = uniq("cli"), uniq("cli")
    r = kohort_cli("topics", "create", topic, "--partitions", "3", "-b", bs)
    assert r.returncode == 0, r.stderr
    d = kafka1.tool(TOPICS, "--bootstrap-server", bs, "--describe", "--topic", topic).stdout
    assert "PartitionCount: 3" in d
    r = kohort_cli("topics", "describe", topic, "--json", "-b", bs)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)[0]["partitions"]) == 3
    r = kohort_cli("produce", topic, "-b", bs, input="".join(f"line-{i}\n" for i in range(90)))
    assert r.returncode == 0, r.stderr
    r = kohort_cli("consume", topic, "-b", bs, "--group", group, "--from-beginning", "--count", "90")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(f"line-{i}" for i in range(90))
    r = kohort_cli("groups", "lag", group, "-b", bs, "--json")
    assert r.returncode == 0, r.stderr
    rows = _describe_group(kafka1, group)
    assert sum(int(row[3]) for row in rows) == 90 and sum(int(row[5]) for row in rows) == 0
    r = kohort_cli("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", "-b", bs)
    assert r.returncode == 0, r.stderr
    rows = _describe_group(kafka1, group)
    assert [int(row[3]) for row in rows] == [0, 0, 0] and sum(int(row[5]) for row in rows) == 90
    r = kohort_cli("groups", "describe", group, "-b", bs)
    assert r.returncode == 0 and topic in r.stdout, r.stdout + r.stderr
    r = kohort_cli("groups", "delete", group, "-b", bs)
    assert r.returncode == 0, r.stderr
    listed = kafka1.tool(CONSUMER_GROUPS, "--bootstrap-server", bs, "--list").stdout.split()
    assert group not in listed
    r = kohort_cli("topics", "delete", topic, "-b", bs)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 20
    while topic in kafka1.tool(TOPICS, "--bootstrap-server", bs, "--list").stdout.split():
        assert time.monotonic() < deadline, "topic still listed by kafka-topics after kohort deleted it"
        time.sleep(0.5)


def test_kohort_classic_member_beside_a_java_kip848_member_on_kafka(kafka1):
    """Kafka 4.x lets classic members and consumer-protocol (KIP-848) members share a group: a Java
    member with group.protocol=consumer and a kohort (classic) member split the partitions, and when the
    Java member leaves the kohort member takes everything."""
    topic, group = uniq("mixp"), uniq("mixp")
    kafka1.create_topic(topic, 4)
    produce_numbers(kafka1.bootstrap, topic, 2000, 4)
    java = JavaPeer("consume", "--bootstrap", kafka1.bootstrap, "--topic", topic, "--group", group,
                    "--protocol", "consumer", "--offsets").start()
    kohort = None
    try:
        java.wait_for(lambda e: e["event"] == "assigned" and e["partitions"], timeout=60)
        kohort = _member(kafka1.bootstrap, group, topic, "range")

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jo, ko = java.owned(), _owned(kohort[1])
            if jo and ko and not (jo & ko) and len(jo | ko) == 4:
                break
            time.sleep(0.2)
        jo, ko = java.owned(), _owned(kohort[1])
        assert jo and ko and not (jo & ko) and len(jo | ko) == 4, (jo, ko)
        java.stop()
        deadline = time.monotonic() + 60
        while len(_owned(kohort[1])) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_owned(kohort[1])) == 4
        java_seen = java.seen()
        deadline = time.monotonic() + 30
        while len(java_seen | _records(kohort[1])) < 2000 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(java_seen | _records(kohort[1])) == 2000
    finally:
        java.stop()
        if kohort is not None:
            kohort[0].kill()
            kohort[0].wait(10)
