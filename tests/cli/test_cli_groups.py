"""`kohort groups` against kafka-consumer-groups.sh (Kafka 4.3.1's ConsumerGroupCommand) on the same
groups, on kohort's broker and on Apache Kafka (those comparisons are slow tests; the default ones check
kohort's side of the same features): --describe --offsets/--members/--state [--verbose] (classic groups and
KIP-848 consumer groups), --all-groups, --list --type/--state, --delete-offsets, --reset-offsets
--by-duration, --export and --from-file (each tool reads the other's CSV), and Kafka's own spelling
(`kohort groups --describe --group G`)."""
from __future__ import annotations

import json
import time
import uuid

import pytest

from kohort.cli.main import main
from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import CONSUMER_GROUPS, run_tool
from tests.broker.coordinator.test_kip848_broker import BROKER_CONFIG, _ck_member, _owned, _wait


@pytest.fixture(scope="module")
def kb():
    with KohortBroker(config=BROKER_CONFIG) as b:
        yield b.bootstrap


@pytest.fixture(params=["kohort", "kafka"])
def bs(request, kb):
    """The slow comparisons run on kohort's broker and on Apache Kafka 4.3.1 (kohort's CLI against
    Kafka's answers, too)."""
    return kb if request.param == "kohort" else request.getfixturevalue("kafka1").bootstrap


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def kohort(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def rows(text: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln.strip()]


def kafka(bs, *args, check=True) -> str:
    return run_tool(CONSUMER_GROUPS, "--bootstrap-server", bs, *args, check=check).stdout


def _topic(bs, name, partitions, counts=None, timestamps=None):
    from kohort.client.admin import Admin
    from kohort.client.producer import Producer
    with Admin({"bootstrap.servers": bs}) as a:
        a.create_topics({name: partitions})
    with Producer({"bootstrap.servers": bs, "linger.ms": 0}) as p:
        for part, n in (counts or {}).items():
            for i in range(n):
                ts = timestamps[i] if timestamps else None
                p.produce(name, value=b"v%d" % i, partition=part, timestamp=ts)
        p.flush()


def _commit(bs, group, offsets: dict):
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": bs}) as a:
        a.alter_group_offsets(group, offsets)


def test_kafka_spelling_is_translated():
    from kohort.cli.groups import kafka_style
    assert kafka_style(["--describe", "--group", "a", "--group=b", "--members", "--verbose", "--timeout", "5000"]) \
        == ["describe", "a", "b", "--members", "--verbose", "--timeout", "5"]
    assert kafka_style(["--list", "--state", "stable"]) == ["list", "--state", "stable"]
    assert kafka_style(["--validate-regex", "t.*"]) == ["validate-regex", "t.*"]
    assert kafka_style(["describe", "g"]) == ["describe", "g"]          # kohort's own spelling untouched
    with pytest.raises(Exception, match="exactly one action"):
        kafka_style(["--list", "--describe"])


@pytest.mark.slow
def test_classic_group_describe_matches_kafka_tool(capsys, bs):
    """A live classic group of two confluent-kafka members: offsets (lag per partition), members and
    state as kohort prints them equal what kafka-consumer-groups.sh prints for the same group."""
    from confluent_kafka import Consumer, TopicPartition
    topic, group = uniq("cg-live"), uniq("cg-live")
    _topic(bs, topic, 4, {0: 3, 1: 4, 2: 5, 3: 6})
    consumers = [Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": f"cg-peer-{i}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "heartbeat.interval.ms": 500, "log_level": 0}) for i in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])
        deadline = time.time() + 60
        while time.time() < deadline and not all(len(c.assignment()) == 2 for c in consumers):
            for c in consumers:
                c.poll(0.2)
        for c in consumers:
            c.commit(offsets=[TopicPartition(topic, tp.partition, 1) for tp in c.assignment()], asynchronous=False)
        # --offsets (the default): the same lag per partition, the same owners
        rc, out, _ = kohort(capsys, "groups", "--describe", "--group", group, "--bootstrap-server", bs)
        assert rc == 0
        ours = {(r[1], r[2]): (r[3], r[4], r[5], r[8]) for r in rows(out)[1:]}
        theirs = {(r[1], r[2]): (r[3], r[4], r[5], r[8]) for r in rows(kafka(bs, "--describe", "--group", group))[1:]}
        assert ours == theirs and len(ours) == 4
        assert {v[2] for v in ours.values()} == {"2", "3", "4", "5"}
        rc, out, _ = kohort(capsys, "groups", "describe", group, "--offsets", "--verbose", "-b", bs)
        assert rows(out)[0][3] == "LEADER-EPOCH"
        # --members --verbose: the same members and partition counts
        rc, out, _ = kohort(capsys, "groups", "--describe", "--group", group, "--members", "--verbose",
                            "--bootstrap-server", bs)
        ours = rows(out)
        theirs = rows(kafka(bs, "--describe", "--group", group, "--members", "--verbose"))
        assert ours[0] == theirs[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                        "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        assert sorted(ours[1:]) == sorted(theirs[1:]) and len(ours) == 3
        # --state
        rc, out, _ = kohort(capsys, "groups", "describe", group, "--state", "-b", bs)
        ours, theirs = rows(out), rows(kafka(bs, "--describe", "--group", group, "--state"))
        assert ours == theirs, (ours, theirs)
        assert ours[1][-3:] == ["range", "Stable", "2"]
    finally:
        for c in consumers:
            c.close()


def _consumer_group(capsys, kb, name):
    """A KIP-848 consumer group of one confluent-kafka member (group.protocol=consumer), Stable, that
    consumed and committed 3 partitions x 5 records. Returns (topic, group, process)."""
    topic, group = uniq(name), uniq(name)
    _topic(kb, topic, 3, {0: 5, 1: 5, 2: 5})
    p, lines = _ck_member(kb, group, topic, seconds=60)
    assert _wait(lambda: len(_owned(lines)) == 3, 40, lambda: None)

    def stable():
        rc, out, _ = kohort(capsys, "groups", "describe", group, "--state", "--json", "-b", kb)
        return rc == 0 and json.loads(out)[0]["state"] == "Stable"
    assert _wait(stable, 20, lambda: None)
    return topic, group, p


def _stop(p):
    if p.poll() is None:
        p.kill()
    p.wait(10)


def test_consumer_group_describe_lag_and_list(capsys, kb):
    """A KIP-848 consumer group: members with epochs and target assignments (ConsumerGroupDescribe),
    lag, reset refused while active, --list --type/--state."""
    topic, group, p = _consumer_group(capsys, kb, "cg848")
    try:
        rc, out, _ = kohort(capsys, "groups", "describe", group, "--members", "--verbose", "-b", kb)
        ours = rows(out)
        assert ours[0][-4:] == ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        assert ours[1][4:] == ["3", ours[1][5], f"{topic}:0,1,2", ours[1][5], f"{topic}:0,1,2"]
        rc, out, _ = kohort(capsys, "groups", "describe", group, "--members", "--json", "-b", kb)
        (v,) = json.loads(out)
        assert v["type"] == "consumer" and v["members"][0]["member_type"] == "consumer"
        assert v["members"][0]["member_epoch"] == v["group_epoch"] == v["target_assignment_epoch"] >= 1
        # `lag` and reset's activity check read a consumer group too (Admin.describe_groups falls back to
        # ConsumerGroupDescribe, as Kafka's Admin does; it was GROUP_ID_NOT_FOUND before)
        rc, out, err = kohort(capsys, "groups", "lag", group, "--json", "-b", kb)
        assert rc == 0, err
        assert len(json.loads(out)[0]["partitions"]) == 3
        rc, _, err = kohort(capsys, "groups", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute",
                            "-b", kb)
        assert rc == 1 and "Stable" in err and "inactive" in err
        rc, out, _ = kohort(capsys, "groups", "--list", "--type", "consumer", "-b", kb)
        assert [group, "Consumer", "Stable", "consumer"] in rows(out)
        assert all(r[1] == "Consumer" for r in rows(out)[1:])
        rc, out, _ = kohort(capsys, "groups", "list", "--state", "empty", "-b", kb)
        assert group not in out
        rc, _, err = kohort(capsys, "groups", "list", "--state", "sleepy", "-b", kb)
        assert rc == 1 and "valid states are" in err
        rc, out, _ = kohort(capsys, "groups", "describe", "--all-groups", "--state", "--json", "-b", kb)
        assert group in {v["group"] for v in json.loads(out)}
    finally:
        _stop(p)


@pytest.mark.slow
def test_consumer_group_describe_matches_kafka_tool(capsys, bs):
    """The same KIP-848 group as Kafka's tool shows it: --members --verbose, --offsets, --state --verbose,
    --list --type."""
    topic, group, p = _consumer_group(capsys, bs, "cg848k")
    try:
        rc, out, _ = kohort(capsys, "groups", "describe", group, "--members", "--verbose", "-b", bs)
        ours, theirs = rows(out), rows(kafka(bs, "--describe", "--group", group, "--members", "--verbose"))
        assert ours == theirs, (ours, theirs)
        rc, out, _ = kohort(capsys, "groups", "--describe", "--group", group, "--bootstrap-server", bs)
        ours = {(r[1], r[2]): (r[3], r[4], r[5], r[6]) for r in rows(out)[1:]}
        theirs = {(r[1], r[2]): (r[3], r[4], r[5], r[6])
                  for r in rows(kafka(bs, "--describe", "--group", group))[1:]}
        assert ours == theirs and len(ours) == 3, (ours, theirs)
        rc, out, _ = kohort(capsys, "groups", "describe", group, "--state", "--verbose", "-b", bs)
        ours, theirs = rows(out), rows(kafka(bs, "--describe", "--group", group, "--state", "--verbose"))
        assert ours == theirs, (ours, theirs)
        assert [group, "Consumer"] in rows(kafka(bs, "--list", "--type", "consumer"))
    finally:
        _stop(p)


def test_delete_offsets(capsys, kb):
    """--delete-offsets removes a topic's (or some partitions') offsets of an inactive group, like Kafka."""
    t1, t2, group = uniq("do"), uniq("do"), uniq("do")
    _topic(kb, t1, 2, {0: 2, 1: 2})
    _topic(kb, t2, 1, {0: 2})
    _commit(kb, group, {(t1, 0): 1, (t1, 1): 2, (t2, 0): 1})
    rc, out, _ = kohort(capsys, "groups", "--delete-offsets", "--group", group, "--topic", f"{t1}:1",
                        "--bootstrap-server", kb)
    assert rc == 0 and f"Request succeeded for deleting offsets from group {group}." in out
    assert [t1, "1", "Successful"] in rows(out)
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": kb}) as a:
        assert {(tp.topic, tp.partition) for tp in a.list_group_offsets(group)} == {(t1, 0), (t2, 0)}
    rc, out, err = kohort(capsys, "groups", "delete-offsets", group, "--topic", "nope", "-b", kb)
    assert rc == 1 and "nope" in err


@pytest.mark.slow
def test_delete_offsets_by_kafka_tool(capsys, bs):
    t1, group = uniq("dok"), uniq("dok")
    _topic(bs, t1, 2, {0: 2, 1: 2})
    _commit(bs, group, {(t1, 0): 1, (t1, 1): 2})
    out = kafka(bs, "--delete-offsets", "--group", group, "--topic", f"{t1}:1")
    assert "Request succeeded" in out and [t1, "1", "Successful"] in rows(out)
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": bs}) as a:
        assert {(tp.topic, tp.partition) for tp in a.list_group_offsets(group)} == {(t1, 0)}


def _aged_topic(kb, name):
    topic, group = uniq(name), uniq(name)
    now = int(time.time() * 1000)
    stamps = [now - 3 * 3600_000] * 4 + [now - 60_000] * 3      # 4 records 3 h old, 3 a minute old
    _topic(kb, topic, 2, {0: 7, 1: 7}, timestamps=stamps)
    _commit(kb, group, {(topic, 0): 0, (topic, 1): 0})
    return topic, group


def test_reset_by_duration_export_and_from_file(capsys, kb, tmp_path):
    """--by-duration finds the first record at most that old; --export prints Kafka's CSV; --from-file
    reads it (one group: topic,partition,offset; several: group,topic,partition,offset)."""
    topic, group = _aged_topic(kb, "rs")
    rc, out, _ = kohort(capsys, "groups", "--reset-offsets", "--group", group, "--topic", topic,
                        "--by-duration", "PT1H", "--export", "--bootstrap-server", kb)
    assert rc == 0 and out == f"{topic},0,4\n{topic},1,4\n"
    csv = tmp_path / "plan.csv"
    csv.write_text(f"{topic},0,2\n{topic},1,6\n")
    rc, out, _ = kohort(capsys, "groups", "reset-offsets", group, "--from-file", str(csv), "--execute", "--json",
                        "-b", kb)
    assert rc == 0 and [p["new_offset"] for p in json.loads(out)["partitions"]] == [2, 6]
    other = uniq("other")
    rc, out, _ = kohort(capsys, "groups", "reset-offsets", group, other, "--topic", f"{topic}:0",
                        "--to-earliest", "--export", "-b", kb)
    assert out.splitlines() == [f"{group},{topic},0,0", f"{other},{topic},0,0"]
    csv.write_text(out)
    rc, out, _ = kohort(capsys, "groups", "reset-offsets", group, other, "--from-file", str(csv), "--json", "-b", kb)
    assert rc == 0 and [(g["group"], g["partitions"][0]["new_offset"]) for g in json.loads(out)] == \
        [(group, 0), (other, 0)]
    rc, _, err = kohort(capsys, "groups", "reset-offsets", group, "--topic", topic, "--by-duration", "1h", "-b", kb)
    assert rc == 1 and "ISO-8601" in err


@pytest.mark.slow
def test_reset_csv_and_by_duration_match_kafka_tool(capsys, bs, tmp_path):
    """Kafka's tool plans the same --by-duration reset and reads kohort's multi-group CSV."""
    topic, group = _aged_topic(bs, "rsk")
    rc, out, _ = kohort(capsys, "groups", "--reset-offsets", "--group", group, "--topic", topic,
                        "--by-duration", "PT1H", "--export", "--bootstrap-server", bs)
    theirs = kafka(bs, "--reset-offsets", "--group", group, "--topic", topic, "--by-duration", "PT1H", "--export")
    assert sorted(ln for ln in theirs.splitlines() if ln.strip()) == out.splitlines() == [f"{topic},0,4", f"{topic},1,4"]
    rc, out, _ = kohort(capsys, "groups", "reset-offsets", group, uniq("other"), "--topic", f"{topic}:0",
                        "--to-earliest", "--export", "-b", bs)
    csv = tmp_path / "plan.csv"
    csv.write_text(out)
    theirs = kafka(bs, "--reset-offsets", "--group", group, "--from-file", str(csv), "--dry-run")
    assert [group, topic, "0", "0"] in rows(theirs)


def test_duration_parsing_follows_java():
    from kohort.cli.groups import parse_duration_ms
    assert parse_duration_ms("PT1H30M") == 5_400_000
    assert parse_duration_ms("P1DT2S") == 86_402_000
    assert parse_duration_ms("PT0.5S") == 500
    assert parse_duration_ms("-PT1M") == -60_000
    for bad in ("P", "PT", "1h", "PT1X"):
        with pytest.raises(Exception, match="ISO-8601"):
            parse_duration_ms(bad)
