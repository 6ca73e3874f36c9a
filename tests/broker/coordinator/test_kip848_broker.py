"""KIP-848 (group.protocol=consumer) real clients on kohort broker: Apache Kafka's Java consumer (4.x)
and confluent-kafka (librdkafka) consumers, each member a process of its own, in groups of three with
one member SIGKILLed: every record is consumed, and no partition is owned by two live members at any
sample (ownership from each member's assign/revoke/lost callbacks). Also: a classic group upgraded
online, static members, a regex subscription, a broker SIGKILL mid-rebalance, and Kafka's own
DumpLogSegments reading kohort's consumer-group records. The two longest (~12-15 s) are marked slow."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from kohort.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import JavaPeer
from tests.helpers.peers import create_topic, produce
from tests.helpers.rawclient import RawClient
from tests.client.consumer.test_client_group import _owned, _records

CK_MEMBER = Path(__file__).parents[2] / "helpers" / "kip848_member.py"

# short consumer-protocol session so a SIGKILLed member is fenced in seconds (Kafka's floor is 45 s)
BROKER_CONFIG = {
    "group.consumer.min.session.timeout.ms": 3000, "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.heartbeat.interval.ms": 500, "group.consumer.heartbeat.interval.ms": 1000,
}


@pytest.fixture(scope="module")
def kb():
    with KohortBroker(config=BROKER_CONFIG) as b:
        yield b


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _no_double_ownership(owned: list[set]) -> None:
    seen: dict = {}
    for i, o in enumerate(owned):
        for tp in o:
            assert tp not in seen, f"{tp} owned by members {seen[tp]} and {i} at once: {owned}"
            seen[tp] = i


def _wait(cond, timeout, sample):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sample()
        if cond():
            return True
        time.sleep(0.1)
    sample()
    return cond()


@pytest.mark.slow
def test_java_consumer_protocol_group_of_three_with_a_member_sigkilled(kb):
    topic, group = uniq("k848j"), uniq("k848j")
    n = 6
    total = {(topic, i) for i in range(n)}
    assert create_topic(kb.bootstrap, topic, n) == n
    produce(kb.bootstrap, topic, 3000, partitions=n)
    args = ["consume", "--bootstrap", kb.bootstrap, "--topic", topic, "--group", group, "--offsets",
            "--protocol", "consumer"]
    peers = [JavaPeer(*args).start() for _ in range(3)]
    live = list(peers)

    def sample():
        _no_double_ownership([p.owned() for p in live])

    def seen():
        return set().union(*(p.seen() for p in peers))

    try:
        ok = _wait(lambda: all(p.owned() for p in live)
                   and set().union(*(p.owned() for p in live)) == total and len(seen()) == 3000,
                   60, sample)
        fatal = [e for p in peers for e in p.events if e["event"] in ("fatal", "error")]
        assert ok, ([p.owned() for p in live], len(seen()), fatal[:3])
        d = _describe(kb.bootstrap, group)
        assert d.group_state == "Stable" and len(d.members) == 3, d
        assert {m.member_epoch for m in d.members} == {d.group_epoch} and d.assignor_name == "uniform"
        peers[0].kill()
        live = peers[1:]
        produce(kb.bootstrap, topic, 1000, partitions=n, start=3000)
        ok = _wait(lambda: set().union(*(p.owned() for p in live)) == total and len(seen()) == 4000,
                   60, sample)
        assert ok, ([p.owned() for p in live], 4000 - len(seen()))
    finally:
        for p in peers:
            p.stop()


def _ck_member(bs, group, topic, seconds=90, remote_assignor=None):
    extra = [remote_assignor] if remote_assignor else []
    p = subprocess.Popen([sys.executable, str(CK_MEMBER), bs, group, topic, str(seconds), *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list = []
    t = threading.Thread(target=lambda: [lines.append(json.loads(x)) for x in p.stdout], daemon=True)
    t.start()
    return p, lines


def test_confluent_kafka_consumer_protocol_group_of_three_with_a_member_sigkilled(kb):
    topic, group = uniq("k848c"), uniq("k848c")
    n = 6
    total = {(topic, i) for i in range(n)}
    assert create_topic(kb.bootstrap, topic, n) == n
    produce(kb.bootstrap, topic, 3000, partitions=n)
    members = [_ck_member(kb.bootstrap, group, topic) for _ in range(3)]
    live = list(members)

    def sample():
        _no_double_ownership([_owned(lines) for _, lines in live])

    def seen():
        return set().union(*(_records(lines) for _, lines in members))

    try:
        ok = _wait(lambda: all(_owned(ls) for _, ls in live)
                   and set().union(*(_owned(ls) for _, ls in live)) == total and len(seen()) == 3000,
                   60, sample)
        errors = [e for _, ls in members for e in ls if "error" in e]
        assert ok, ([_owned(ls) for _, ls in live], len(seen()), errors[:3])
        d = _describe(kb.bootstrap, group)
        assert d.group_state == "Stable" and len(d.members) == 3, d
        assert {m.member_epoch for m in d.members} == {d.group_epoch}
        members[0][0].send_signal(signal.SIGKILL)
        members[0][0].wait(10)
        live = members[1:]
        produce(kb.bootstrap, topic, 1000, partitions=n, start=3000)
        ok = _wait(lambda: set().union(*(_owned(ls) for _, ls in live)) == total and len(seen()) == 4000,
                   60, sample)
        assert ok, ([_owned(ls) for _, ls in live], 4000 - len(seen()))
        d = _describe(kb.bootstrap, group)
        assert len(d.members) == 2
    finally:
        for p, _ in members:
            if p.poll() is None:
                p.kill()
            p.wait(10)


def _describe(bs, group):
    c = RawClient(bs)
    try:
        r = c.request(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False), 1)
    finally:
        c.sock.close()
    g = r.groups[0]
    assert g.error_code == 0, g
    return g


def test_kafkas_dump_log_segments_reads_kohorts_consumer_group_records(tmp_path):
    """kohort writes the KIP-848 records in Kafka's formats: Kafka's own DumpLogSegments
    --offsets-decoder decodes every one of them (member metadata, epochs, targets, current
    assignments with pending revocation, tombstones)."""
    import asyncio
    import glob

    from kohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as H
    from kohort.protocol.messages.create_topics import CreateTopicsRequest as CT
    from tests.helpers.broker_wire import Wire, running_broker
    from kohort.protocol.consumer_protocol import ConsumerProtocolSubscription as Sub, encode_subscription
    from kohort.protocol.messages.join_group import JoinGroupRequest as J
    from tests.helpers.kafka_cluster import run_tool

    def join(mid, **kw):
        return H(group_id="g", member_id=mid, member_epoch=0, rebalance_timeout_ms=30000,
                 subscribed_topic_names=["t"], topic_partitions=[], **kw)

    async def go():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await w.call(CT(timeout_ms=5000, topics=[CT.CreatableTopic(name="t", num_partitions=4,
                                                                       replication_factor=1)]), 5)
            ra = await w.call(join("a", instance_id="inst-a"), 1)
            await w.call(join("b"), 1)
            await w.call(H(group_id="g", member_id="a", member_epoch=1, instance_id="inst-a",
                           topic_partitions=ra.assignment.topic_partitions), 1)
            await w.call(H(group_id="g", member_id="b", member_epoch=-1), 1)
            sub = encode_subscription(Sub(topics=["t"], user_data=None, owned_partitions=[]))
            r = await w.call(J(group_id="g", session_timeout_ms=12345, rebalance_timeout_ms=10000,
                               member_id="c", protocol_type="consumer",
                               protocols=[J.Protocol(name="range", metadata=sub)]), 9)
            assert r.error_code == 0
            await w.close()
            return str(b.storage.topic("t").topic_id)
    asyncio.run(go())
    logs = [p for p in glob.glob(str(tmp_path / "__consumer_offsets-*" / "*.log")) if Path(p).stat().st_size]
    assert len(logs) == 1
    out = run_tool("org.apache.kafka.tools.DumpLogSegments", "--files", logs[0], "--offsets-decoder",
                   "--print-data-log").stdout
    records = [json.loads(line.split(" key: ")[1].split(" payload: ")[0]) for line in out.splitlines()
               if " key: " in line]
    payloads = [line.split(" payload: ")[1] for line in out.splitlines() if " key: " in line]
    assert [r["type"] for r in records][:16] == ["5", "3", "7", "6", "8", "5", "3", "7", "7", "6", "8",
                                                 "8", "8", "7", "5", "3"], out
    classic = [json.loads(p)["data"] for r, p in zip(records, payloads)
               if r["type"] == "5" and r["data"]["memberId"] == "c"]
    assert classic and classic[0]["classicMemberMetadata"]["sessionTimeoutMs"] == 12345, classic
    assert classic[0]["classicMemberMetadata"]["supportedProtocols"][0]["name"] == "range"
    first = json.loads(payloads[0])["data"]
    assert first["instanceId"] == "inst-a" and first["subscribedTopicNames"] == ["t"]
    assert first["rebalanceTimeoutMs"] == 30000
    revoking = json.loads(payloads[11])["data"]
    assert revoking["state"] == 1 and revoking["memberEpoch"] == 1
    assert [p["partitions"] for p in revoking["assignedPartitions"]] == [[0, 1]]
    assert [p["partitions"] for p in revoking["partitionsPendingRevocation"]] == [[2, 3]]
    assert payloads[12:15] == ["<DELETE>"] * 3
    assert json.loads(payloads[15])["data"] == {"epoch": 3}


@pytest.mark.slow
def test_mixed_java_and_confluent_consumer_protocol_group_with_broker_sigkill_mid_rebalance():
    """Java and confluent-kafka members (both group.protocol=consumer) in one group; kohort broker is
    SIGKILLed right after a third member joins (mid-rebalance) and restarted on the same port and data:
    the group is replayed from __consumer_offsets, reconciliation completes, nothing is lost and no
    partition is owned by two members at any sample."""
    with KohortBroker(config=BROKER_CONFIG) as b:
        topic, group = uniq("k848m"), uniq("k848m")
        n = 6
        total = {(topic, i) for i in range(n)}
        assert create_topic(b.bootstrap, topic, n) == n
        produce(b.bootstrap, topic, 2000, partitions=n)
        java = JavaPeer("consume", "--bootstrap", b.bootstrap, "--topic", topic, "--group", group,
                        "--offsets", "--protocol", "consumer").start()
        cks = [_ck_member(b.bootstrap, group, topic, seconds=120)]
        procs = [java] + cks

        def owned():
            return [java.owned()] + [_owned(ls) for _, ls in cks]

        def sample():
            _no_double_ownership(owned())

        def seen():
            return java.seen() | set().union(*(_records(ls) for _, ls in cks))

        try:
            ok = _wait(lambda: all(owned()) and set().union(*owned()) == total and len(seen()) == 2000,
                       60, sample)
            assert ok, (owned(), len(seen()))
            epoch = _describe(b.bootstrap, group).group_epoch
            cks.append(_ck_member(b.bootstrap, group, topic, seconds=120))
            states = []
            assert _wait(lambda: states.append(_describe(b.bootstrap, group)) or
                         states[-1].group_epoch > epoch, 30, sample)
            b.kill()                      # the third member joined: the others have yet to revoke
            assert states[-1].group_state in ("Assigning", "Reconciling"), states[-1]
            time.sleep(1)
            b.start()
            produce(b.bootstrap, topic, 1000, partitions=n, start=2000)
            ok = _wait(lambda: all(owned()) and set().union(*owned()) == total
                       and sum(map(len, owned())) == n and len(seen()) == 3000, 90, sample)
            assert ok, (owned(), 3000 - len(seen()))
            d = _describe(b.bootstrap, group)
            assert len(d.members) == 3
        finally:
            java.stop()
            for p, _ in cks:
                if p.poll() is None:
                    p.kill()
                p.wait(10)


def test_confluent_kafka_regex_subscription_resolved_by_the_broker(kb):
    """librdkafka sends a `^` subscription as SubscribedTopicRegex (v1): the broker resolves it over
    its topics, and a topic created later that matches is assigned too."""
    prefix = uniq("k848r")
    group = uniq("k848r")
    assert create_topic(kb.bootstrap, f"{prefix}-a", 2) == 2
    assert create_topic(kb.bootstrap, f"{prefix}x", 1) == 1          # does not match
    produce(kb.bootstrap, f"{prefix}-a", 100, partitions=2)
    p, lines = _ck_member(kb.bootstrap, group, f"^{prefix}-.*", seconds=60)
    try:
        assert _wait(lambda: _owned(lines) == {(f"{prefix}-a", 0), (f"{prefix}-a", 1)}, 30, lambda: None), lines
        d = _describe(kb.bootstrap, group)
        assert d.members[0].subscribed_topic_regex == f"(^{prefix}-.*)"     # librdkafka wraps each
        assert create_topic(kb.bootstrap, f"{prefix}-b", 1) == 1
        produce(kb.bootstrap, f"{prefix}-b", 50, partitions=1)
        want = {(f"{prefix}-a", 0), (f"{prefix}-a", 1), (f"{prefix}-b", 0)}
        assert _wait(lambda: _owned(lines) == want and len(_records(lines)) == 150, 30, lambda: None), \
            (_owned(lines), len(_records(lines)))
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(10)


@pytest.mark.slow     # static members restarting: kohort's client in the default suite (test_kip848_client, test_groups_clients)
def test_java_static_members_restart_gets_the_same_partitions_without_rebalance(kb):
    """Java consumers with group.instance.id (group.protocol=consumer): close() sends epoch -2, the
    member's partitions stay reserved, and a new process with the same instance id gets exactly those
    partitions back at once; the other member is never asked to revoke anything."""
    topic, group = uniq("k848s"), uniq("k848s")
    n = 4
    total = {(topic, i) for i in range(n)}
    assert create_topic(kb.bootstrap, topic, n) == n
    args = ["consume", "--bootstrap", kb.bootstrap, "--topic", topic, "--group", group, "--protocol",
            "consumer", "--instance-id"]
    p1, p2 = JavaPeer(*args, "i1").start(), JavaPeer(*args, "i2").start()
    p3 = None
    try:
        assert _wait(lambda: p1.owned() and p2.owned()
                     and p1.owned() | p2.owned() == total, 60,
                     lambda: _no_double_ownership([p1.owned(), p2.owned()]))
        mine, epoch = p1.owned(), _describe(kb.bootstrap, group).group_epoch
        revoked_before = len(p2.of("revoked"))
        p1.stop()
        d = _describe(kb.bootstrap, group)
        assert sorted(m.member_epoch for m in d.members)[0] == -2 and d.group_epoch == epoch
        p3 = JavaPeer(*args, "i1").start()
        assert _wait(lambda: p3.owned() == mine, 60, lambda: None), p3.owned()
        d = _describe(kb.bootstrap, group)
        assert d.group_epoch == epoch and len(d.members) == 2 and {m.instance_id for m in d.members} == {"i1", "i2"}
        assert len(p2.of("revoked")) == revoked_before and p2.owned() == total - mine
    finally:
        for p in (p1, p2, p3):
            if p is not None:
                p.stop()


def test_classic_group_upgraded_online_by_consumer_protocol_members(kb):
    """Two kohort classic members (cooperative-sticky) form a classic group; a Java and a confluent-kafka
    member with group.protocol=consumer join it: kohort broker upgrades the group online to a consumer
    group (the classic members stay, now answered as classic members of a consumer group), partitions
    move without ever being owned twice, every record is consumed."""
    from tests.client.consumer.test_client_group import _member
    topic, group = uniq("k848u"), uniq("k848u")
    n = 6
    total = {(topic, i) for i in range(n)}
    assert create_topic(kb.bootstrap, topic, n) == n
    produce(kb.bootstrap, topic, 2000, partitions=n)
    classic = [_member(kb.bootstrap, group, topic, "cooperative-sticky", seconds=90) for _ in range(2)]
    java = ck = None

    def owned():
        out = [_owned(ls) for _, ls in classic]
        if java is not None:
            out.append(java.owned())
        if ck is not None:
            out.append(_owned(ck[1]))
        return out

    def seen():
        s = set().union(*(_records(ls) for _, ls in classic))
        if java is not None:
            s |= java.seen()
        if ck is not None:
            s |= _records(ck[1])
        return s

    def sample():
        _no_double_ownership(owned())

    try:
        assert _wait(lambda: all(owned()) and set().union(*owned()) == total and len(seen()) == 2000, 60, sample)
        c = RawClient(kb.bootstrap)
        try:
            from kohort.protocol.messages.list_groups import ListGroupsRequest
            lg = c.request(ListGroupsRequest(states_filter=[], types_filter=[]), 5)
        finally:
            c.sock.close()
        assert [(g.group_type, g.group_state) for g in lg.groups if g.group_id == group] == [("classic", "Stable")]
        java = JavaPeer("consume", "--bootstrap", kb.bootstrap, "--topic", topic, "--group", group,
                        "--offsets", "--protocol", "consumer").start()
        ck = _ck_member(kb.bootstrap, group, topic, seconds=90)
        produce(kb.bootstrap, topic, 1000, partitions=n, start=2000)
        assert _wait(lambda: all(owned()) and set().union(*owned()) == total and sum(map(len, owned())) == n
                     and len(seen()) == 3000, 60, sample), (owned(), 3000 - len(seen()))
        # Every partition owned once does not mean every member has acknowledged its epoch yet: the group
        # reads Reconciling until the last heartbeat says so; wait for Stable rather than sample it once.
        state = {}

        def stable():
            state["d"] = _describe(kb.bootstrap, group)
            return state["d"].group_state == "Stable"
        assert _wait(stable, 30, sample), state.get("d")
        assert sorted(m.member_type for m in state["d"].members) == [0, 0, 1, 1], state["d"]
    finally:
        if java is not None:
            java.stop()
        for p, _ in classic + ([ck] if ck else []):
            if p.poll() is None:
                p.kill()
            p.wait(10)


# -- the same KIP-848 conversation with kohort broker and with Apache Kafka 4.x -----------------------
def _kip848_conversation(bs: str) -> list:
    """A scripted ConsumerGroupHeartbeat/OffsetCommit/ConsumerGroupDescribe conversation; returns what
    the answers said (error codes, assignment sizes, hand-over order), not epoch numbers: Kafka 4.3
    computes targets in batches (group.consumer.assignment.interval.ms), so its epochs advance in
    other steps than kohort's -- members follow the epochs they are given, as real clients do."""
    from kohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as H
    from kohort.protocol.messages.create_topics import CreateTopicsRequest as CT
    from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest as FC
    from kohort.protocol.messages.offset_commit import OffsetCommitRequest as OC

    c = RawClient(bs)
    g, topic = uniq("conv"), uniq("conv")
    try:
        r = c.request(CT(timeout_ms=10000, topics=[CT.CreatableTopic(name=topic, num_partitions=4,
                                                                     replication_factor=1)]), 7)
        tid = r.topics[0].topic_id
        deadline = time.monotonic() + 60
        while c.request(FC(key=g, key_type=0), 3).error_code and time.monotonic() < deadline:
            time.sleep(0.2)

        def hb(mid, epoch, owned=None, group=g, **kw):
            tps = None if owned is None else \
                [H.TopicPartitions(topic_id=tid, partitions=sorted(owned))] if owned else []
            req = H(group_id=group, member_id=mid, member_epoch=epoch, topic_partitions=tps, **kw)
            while True:
                r = c.request(req, 1)
                if r.error_code not in (14, 15, 16) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            parts = None if r.assignment is None else sorted(
                p for tp in r.assignment.topic_partitions for p in tp.partitions)
            return r.error_code, r.member_epoch, parts

        def join(mid, **kw):
            kw.setdefault("rebalance_timeout_ms", 30000)
            kw.setdefault("subscribed_topic_names", [topic])
            return hb(mid, 0, owned=[], **kw)

        def commit(mid, epoch):
            P = OC.Topic.Partition
            r = c.request(OC(group_id=g, generation_id_or_member_epoch=epoch, member_id=mid, topics=[
                OC.Topic(name=topic, partitions=[P(partition_index=0, committed_offset=1)])]), 9)
            return r.topics[0].partitions[0].error_code

        a, b = "member-a-" + g, "member-b-" + g
        obs = []
        state = {}                                   # member -> [epoch, owned]
        r = join(a)
        while r[0] == 0 and not r[2] and time.monotonic() < deadline:
            time.sleep(0.2)                          # Kafka 4.3 may answer the join before its first target
            r = hb(a, r[1], owned=[])
        state[a] = [r[1], r[2]]
        obs.append(("a joins", r[0], len(r[2])))
        r = join(b)
        state[b] = [r[1], r[2] or []]
        obs.append(("b joins", r[0], r[2] or []))
        overlaps, a_revoked_before_b = [], None
        while time.monotonic() < deadline:           # both heartbeat, acking what they were told
            for m in (a, b):
                e, ep, parts = hb(m, state[m][0], owned=state[m][1])
                assert e == 0, (m, e)
                state[m][0] = ep
                if parts is not None:
                    other = state[b if m == a else a][1]
                    if set(parts) & set(other):
                        overlaps.append((m, parts, other))
                    state[m][1] = parts
            if len(state[a][1]) == 2 and len(state[b][1]) == 2:
                break
            time.sleep(0.2)
        obs.append(("converged", sorted(len(v[1]) for v in state.values()),
                    not set(state[a][1]) & set(state[b][1]), overlaps))
        ea = state[a][0]
        obs.append(("a newer epoch", hb(a, ea + 1)[0]))
        obs.append(("a older epoch, owned null", hb(a, ea - 1)[0]))
        obs.append(("unknown member", hb("nobody", ea)[0]))
        obs.append(("commit current epoch", commit(a, ea)))
        obs.append(("commit newer epoch", commit(a, ea + 1)))
        obs.append(("commit unknown member", commit("nobody", ea)))
        obs.append(("join without rebalance timeout", hb("x", 0, owned=[], subscribed_topic_names=[topic])[0]))
        obs.append(("join owning a topic without partitions", c.request(H(
            group_id=g, member_id="x", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=[topic],
            topic_partitions=[H.TopicPartitions(topic_id=tid, partitions=[])]), 1).error_code))
        obs.append(("unknown assignor", join("x", server_assignor="nope")[0]))
        obs.append(("epoch -3", hb(a, -3)[0]))
        obs.append(("-2 without instance id", hb(a, -2)[0]))
        obs.append(("bad regex", join("x", subscribed_topic_names=None, subscribed_topic_regex="(")[0]))
        obs.append(("static joins", join("s1", instance_id="inst")[0]))
        obs.append(("same instance again", join("s2", instance_id="inst")[0]))
        r = hb("s1", -2, instance_id="inst")
        obs.append(("static -2", r[0], r[1]))
        obs.append(("instance taken over", join("s3", instance_id="inst")[0]))
        obs.append(("old id of the instance", hb("s1", 1, instance_id="inst")[0]))
        obs.append(("unknown instance", hb("s9", 1, instance_id="nope")[0]))
        from kohort.protocol.messages.describe_groups import DescribeGroupsRequest as DG
        from kohort.protocol.messages.list_groups import ListGroupsRequest as LG
        from kohort.protocol.messages.offset_delete import OffsetDeleteRequest as ODel
        od = c.request(ODel(group_id=g, topics=[ODel.Topic(name=topic, partitions=[
            ODel.Topic.Partition(partition_index=0)])]), 0)
        obs.append(("offset delete of a subscribed topic", od.error_code, od.topics[0].partitions[0].error_code))
        for v in (5, 6):
            x = c.request(DG(groups=[g]), v).groups[0]
            obs.append((f"DescribeGroups v{v}", x.error_code, x.group_state, x.protocol_type, len(x.members)))
        lg = c.request(LG(states_filter=[], types_filter=["consumer"]), 5)
        busy = {"Assigning": "rebalancing", "Reconciling": "rebalancing"}   # Kafka 4.3 assigns in batches
        obs.append(("ListGroups consumer", [(x.group_type, x.protocol_type, busy.get(x.group_state, x.group_state))
                                            for x in lg.groups if x.group_id == g]))
        r = join(a)
        obs.append(("a rejoins with epoch 0 under its id", r[0], None if r[2] is None else len(r[2])))
        r = hb(a, -1)
        obs.append(("a leaves", r[0], r[1]))
        obs.append(("a leaves again", hb(a, -1)[0]))
        obs.append(("unknown group", hb("x", 1, group=uniq("none"))[0]))
        obs.append(("leave unknown group", hb("x", -1, group=uniq("none"))[0]))
        D = ConsumerGroupDescribeRequest
        none = uniq("none")
        ds = {x.group_id: x for x in c.request(D(group_ids=[g, none], include_authorized_operations=False),
                                               1).groups}                 # Kafka answers in its own order
        obs.append(("describe", ds[g].error_code, ds[g].assignor_name, sorted(m.member_type for m in ds[g].members),
                    sorted(m.instance_id or "" for m in ds[g].members), ds[none].error_code))
        return obs
    finally:
        c.sock.close()


def _mixed_conversation(bs: str) -> list:
    """Classic members and consumer-protocol members in one group: an online upgrade of a classic group
    by a consumer-protocol join, then the classic member reconciling through JoinGroup/SyncGroup/
    Heartbeat; returns the answers' error codes and assignment sizes (not epochs)."""
    from kohort.protocol.consumer_protocol import (
        ConsumerProtocolAssignment as Asg, ConsumerProtocolSubscription as Sub, decode_assignment,
        encode_assignment, encode_subscription,
    )
    from kohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as H
    from kohort.protocol.messages.create_topics import CreateTopicsRequest as CT
    from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest as FC
    from kohort.protocol.messages.heartbeat import HeartbeatRequest as HBc
    from kohort.protocol.messages.join_group import JoinGroupRequest as J
    from kohort.protocol.messages.leave_group import LeaveGroupRequest as L
    from kohort.protocol.messages.offset_commit import OffsetCommitRequest as OC
    from kohort.protocol.messages.sync_group import SyncGroupRequest as S

    c = RawClient(bs)
    g, topic = uniq("mixconv"), uniq("mixconv")
    try:
        r = c.request(CT(timeout_ms=10000, topics=[CT.CreatableTopic(name=topic, num_partitions=4,
                                                                     replication_factor=1)]), 7)
        tid = r.topics[0].topic_id
        deadline = time.monotonic() + 60
        while c.request(FC(key=g, key_type=0), 3).error_code and time.monotonic() < deadline:
            time.sleep(0.2)

        def retry(req, version):
            while True:
                r = c.request(req, version)
                if r.error_code not in (14, 15, 16) or time.monotonic() > deadline:
                    return r
                time.sleep(0.2)

        def cjoin(mid, owned=()):
            sub = encode_subscription(Sub(topics=[topic], user_data=None, owned_partitions=[
                Sub.TopicPartition(topic=topic, partitions=sorted(owned))] if owned else []))
            return retry(J(group_id=g, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id=mid,
                           protocol_type="consumer", protocols=[J.Protocol(name="cooperative-sticky",
                                                                           metadata=sub)]), 9)

        def csync(mid, gen, assignments=()):
            r = retry(S(group_id=g, generation_id=gen, member_id=mid, protocol_type="consumer",
                        protocol_name="cooperative-sticky", assignments=list(assignments)), 5)
            parts = [] if r.error_code or not r.assignment else sorted(
                p for tp in decode_assignment(r.assignment).assigned_partitions for p in tp.partitions)
            return r.error_code, parts

        def chb(mid, gen):
            return retry(HBc(group_id=g, generation_id=gen, member_id=mid), 4).error_code

        def hb(mid, epoch, owned=None, **kw):
            tps = None if owned is None else \
                [H.TopicPartitions(topic_id=tid, partitions=sorted(owned))] if owned else []
            r = retry(H(group_id=g, member_id=mid, member_epoch=epoch, topic_partitions=tps, **kw), 1)
            parts = None if r.assignment is None else sorted(
                p for tp in r.assignment.topic_partitions for p in tp.partitions)
            return r.error_code, r.member_epoch, parts

        obs = []
        # a classic group of one member, which assigns itself everything
        r = cjoin("")
        cid = r.member_id
        r = cjoin(cid)
        obs.append(("classic group formed", r.error_code, r.leader == cid))
        gen = r.generation_id
        everything = encode_assignment(Asg(assigned_partitions=[Asg.TopicPartition(topic=topic,
                                                                                    partitions=[0, 1, 2, 3])],
                                           user_data=None))
        code, mine = csync(cid, gen, [S.Assignment(member_id=cid, assignment=everything)])
        obs.append(("classic sync", code, mine))
        # a consumer-protocol member joins: online upgrade
        n = "consumer-" + g
        r = hb(n, 0, owned=[], rebalance_timeout_ms=30000, subscribed_topic_names=[topic])
        obs.append(("consumer member joins the classic group", r[0], r[2]))
        ne, nowned = r[1], r[2] or []
        # the classic member: heartbeat says rejoin, its rejoin (owning all) asks it to give two up
        code = chb(cid, gen)
        while code == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
            code = chb(cid, gen)
        obs.append(("classic heartbeat after the upgrade", code))
        steps = []
        while time.monotonic() < deadline:
            r = cjoin(cid, mine)
            steps.append(("join", r.error_code, r.leader, len(r.members)))
            gen = r.generation_id
            code, got = csync(cid, gen)
            if code == 0:
                mine = got                       # a cooperative member gives up what it was not given
            steps.append(("sync", code))
            e, ne2, parts = hb(n, ne, owned=nowned)
            ne = ne2
            if parts is not None:
                nowned = parts
            if len(mine) == 2 and len(nowned) == 2:
                break
            time.sleep(0.2)
        obs.append(("converged", len(mine), len(nowned), not set(mine) & set(nowned)))
        obs.append(("classic joins answered without leader or members",
                    sorted({s for s in steps if s[0] == "join"})))
        obs.append(("classic heartbeat, stable", chb(cid, gen)))
        obs.append(("classic heartbeat, wrong generation", chb(cid, gen + 5)))
        obs.append(("classic sync, wrong generation", csync(cid, gen + 5)[0]))
        P = OC.Topic.Partition
        for label, epoch in (("classic commit", gen), ("classic commit, wrong generation", gen + 5)):
            r = c.request(OC(group_id=g, generation_id_or_member_epoch=epoch, member_id=cid, topics=[
                OC.Topic(name=topic, partitions=[P(partition_index=mine[0], committed_offset=1)])]), 9)
            obs.append((label, r.topics[0].partitions[0].error_code))
        D = ConsumerGroupDescribeRequest
        d = c.request(D(group_ids=[g], include_authorized_operations=False), 1).groups[0]
        obs.append(("describe", d.error_code, d.group_state, sorted(m.member_type for m in d.members)))
        # the last consumer-protocol member leaves: online downgrade to a classic group
        obs.append(("consumer member leaves", hb(n, -1)[:2]))
        obs.append(("classic heartbeat after the downgrade", chb(cid, gen)))
        from kohort.protocol.messages.list_groups import ListGroupsRequest
        lg = c.request(ListGroupsRequest(states_filter=[], types_filter=[]), 5)
        obs.append(("listed after the downgrade", [(x.group_type, x.protocol_type) for x in lg.groups
                                                   if x.group_id == g]))
        r = cjoin(cid, mine)
        obs.append(("classic rejoin after the downgrade", r.error_code, r.leader == cid, len(r.members),
                    r.generation_id > gen))
        gen = r.generation_id
        code, got = csync(cid, gen, [S.Assignment(member_id=cid, assignment=everything)])
        obs.append(("classic sync after the downgrade", code, got))
        d = c.request(D(group_ids=[g], include_authorized_operations=False), 1).groups[0]
        obs.append(("ConsumerGroupDescribe of the classic group", d.error_code))
        lv = c.request(L(group_id=g, members=[L.MemberIdentity(member_id=cid)]), 5)
        obs.append(("classic leaves", lv.error_code, [m.error_code for m in lv.members]))
        obs.append(("classic heartbeat after leaving", chb(cid, gen)))
        return obs
    finally:
        c.sock.close()


@pytest.mark.slow
def test_kip848_conversation_matches_apache_kafka(kb, kafka1):
    """The same scripted conversation gets the same answers from kohort broker as from Apache Kafka
    4.x (error codes, epochs, assignment sizes, states)."""
    ours, theirs = _kip848_conversation(kb.bootstrap), _kip848_conversation(kafka1.bootstrap)
    ours += _mixed_conversation(kb.bootstrap)
    theirs += _mixed_conversation(kafka1.bootstrap)
    assert len(ours) == len(theirs)
    diffs = [(o, t) for o, t in zip(ours, theirs) if o != t]
    assert not diffs, "\n".join(f"kohort {o}\nkafka  {t}" for o, t in diffs)


def test_kafka_consumer_groups_tool_describes_a_consumer_group(kb):
    """kafka-consumer-groups.sh (Kafka 4.x Admin: ListGroups v5, ConsumerGroupDescribe, OffsetFetch)
    lists a kohort consumer group with its type, and shows members, epochs and target assignments."""
    from tests.helpers.kafka_cluster import CONSUMER_GROUPS, run_tool
    topic, group = uniq("k848cli"), uniq("k848cli")
    assert create_topic(kb.bootstrap, topic, 3) == 3
    produce(kb.bootstrap, topic, 300, partitions=3)
    p, lines = _ck_member(kb.bootstrap, group, topic, seconds=60)
    try:
        assert _wait(lambda: len(_records(lines)) == 300 and len(_owned(lines)) == 3, 30, lambda: None)
        assert _wait(lambda: _describe(kb.bootstrap, group).group_state == "Stable", 10, lambda: None)
        d = _describe(kb.bootstrap, group)

        def tool(*args):
            return [r.split() for r in run_tool(CONSUMER_GROUPS, "--bootstrap-server", kb.bootstrap,
                                                *args).stdout.splitlines() if r.strip()]
        assert [group, "Consumer"] in tool("--list", "--type")
        rows = tool("--describe", "--group", group, "--members", "--verbose")
        assert rows[0][:9] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                               "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        epoch = str(d.members[0].member_epoch)
        assert rows[1][4:] == ["3", epoch, f"{topic}:0,1,2", epoch, f"{topic}:0,1,2"], rows
        rows = tool("--describe", "--group", group, "--state")
        assert rows[1][-3:] == ["uniform", "Stable", "1"], rows
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_confluent_kafka_members_choose_the_server_range_assignor(kb):
    """group.remote.assignor=range (ServerAssignor): the broker assigns contiguous, co-partitioned ranges."""
    t1, t2, group = uniq("k848rg"), uniq("k848rg"), uniq("k848rg")
    for t in (t1, t2):
        assert create_topic(kb.bootstrap, t, 4) == 4
    members = [_ck_member(kb.bootstrap, group, f"{t1},{t2}", seconds=60, remote_assignor="range")
               for _ in range(2)]
    try:
        assert _wait(lambda: all(len(_owned(ls)) == 4 for _, ls in members), 30,
                     lambda: _no_double_ownership([_owned(ls) for _, ls in members]))
        d = _describe(kb.bootstrap, group)
        assert d.assignor_name == "range"
        for _, ls in members:
            o = _owned(ls)
            p1 = sorted(p for t, p in o if t == t1)
            assert p1 == sorted(p for t, p in o if t == t2) and p1 in ([0, 1], [2, 3]), o
    finally:
        for p, _ in members:
            if p.poll() is None:
                p.kill()
            p.wait(10)
