"""Share groups (KIP-932) served by kohort broker, in process over loopback: the share.version feature
in ApiVersions, ShareGroupHeartbeat/ShareGroupDescribe through the runtime's share machine (records in
`__consumer_offsets`, replayed after a restart), ListGroups/DescribeGroups/DeleteGroups with the share
type, a group id of another type refused as Kafka refuses it, and the Admin share calls."""
from __future__ import annotations

import time
import uuid

import pytest

from kohort import Admin
from kohort.errors import ErrorCode
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from kohort.protocol.messages.describe_groups import DescribeGroupsRequest
from kohort.protocol.messages.join_group import JoinGroupRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from kohort.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from kohort.testing.inprocess import broker
from tests.helpers.rawclient import RawClient

FAST = {"group.share.assignment.interval.ms": 0, "group.share.heartbeat.interval.ms": 200,
        "group.share.session.timeout.ms": 1500}


def _hb(c, group, member, epoch, topics=None):
    return c.request(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                subscribed_topic_names=topics), 1)


def _join_until_assigned(c, group, member, topic, count, timeout=5.0):
    r = _hb(c, group, member, 0, [topic])
    assert r.error_code == 0, r
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parts = {p for tp in (r.assignment.topic_partitions if r.assignment else []) for p in tp.partitions}
        if len(parts) == count:
            return r
        time.sleep(0.05)
        r = _hb(c, group, member, r.member_epoch)
        assert r.error_code == 0, r
    raise AssertionError(f"no full assignment: {r}")


@pytest.fixture()
def kb():
    with broker(FAST) as b:
        yield b


def test_api_versions_finalize_share_version_and_advertise_share_apis(kb):
    c = RawClient(kb.bootstrap_servers)
    try:
        r = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="0"), 3)
        assert {(f.name, f.min_version, f.max_version) for f in r.supported_features} >= {("share.version", 0, 1)}
        assert {(f.name, f.min_version_level, f.max_version_level) for f in r.finalized_features} >= {
            ("share.version", 1, 1)}
        assert c.versions[76] == (1, 1) and c.versions[77] == (1, 1)
    finally:
        c.close()


def test_share_version_0_answers_unsupported_version():
    with broker({"share.version": 0}) as b:
        c = RawClient(b.bootstrap_servers)
        try:
            r = c.request(ApiVersionsRequest(client_software_name="t", client_software_version="0"), 3)
            assert "share.version" not in {f.name for f in r.finalized_features}
            assert _hb(c, "g", "m", 0, ["t"]).error_code == ErrorCode.UNSUPPORTED_VERSION
        finally:
            c.close()


def test_heartbeat_assigns_after_initialization_describe_and_replay_after_restart():
    with broker(FAST, storage="tmp") as kb:
        kb.create_topic("t", 3)
        c = RawClient(kb.bootstrap_servers)
        r = _hb(c, "g", "m1", 0, ["t"])
        # a new group's first answer is empty: partitions become assignable once their state exists
        assert r.error_code == 0 and r.member_epoch == 1 and r.assignment.topic_partitions == []
        r = _join_until_assigned(c, "g", "m1", "t", 3)
        epoch = r.member_epoch
        d = c.request(ShareGroupDescribeRequest(group_ids=["g", "nope"], include_authorized_operations=False), 1)
        g, nope = d.groups
        assert (g.error_code, g.group_state, g.assignor_name, g.group_epoch) == (0, "Stable", "simple", epoch)
        assert [(m.member_id, m.client_host, m.subscribed_topic_names) for m in g.members] == [
            ("m1", "/127.0.0.1", ["t"])]
        assert g.members[0].assignment.topic_partitions[0].topic_name == "t"
        assert (nope.error_code, nope.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")
        # errors of the machine come through the wire
        assert _hb(c, "g", "m1", epoch + 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert _hb(c, "g", "ghost", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert _hb(c, "g", "", 0, ["t"]).error_code == ErrorCode.INVALID_REQUEST
        c.close()
        kb.restart()
        c = RawClient(kb.bootstrap_servers)
        try:
            d = c.request(ShareGroupDescribeRequest(group_ids=["g"], include_authorized_operations=False), 1)
            g = d.groups[0]
            assert (g.error_code, g.group_epoch, [m.member_id for m in g.members]) == (0, epoch, ["m1"])
            assert sorted(g.members[0].assignment.topic_partitions[0].partitions) == [0, 1, 2]
            r = _hb(c, "g", "m1", epoch)
            assert (r.error_code, r.member_epoch) == (0, epoch)
        finally:
            c.close()


def test_group_ids_of_other_types_are_refused_as_kafka_refuses_them(kb):
    kb.create_topic("t", 1)
    c = RawClient(kb.bootstrap_servers)
    try:
        assert _hb(c, "sg", "m1", 0, ["t"]).error_code == 0
        # a share group's id for a consumer group, a classic group, offsets
        r = c.request(ConsumerGroupHeartbeatRequest(group_id="sg", member_id="c1", member_epoch=0,
                                                    rebalance_timeout_ms=5000, subscribed_topic_names=["t"],
                                                    topic_partitions=[]), 0)
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group sg is not a consumer group.")
        r = c.request(JoinGroupRequest(group_id="sg", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                       member_id="", protocol_type="consumer", protocols=[]), 5)
        assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        T = OffsetCommitRequest.Topic
        r = c.request(OffsetCommitRequest(group_id="sg", generation_id_or_member_epoch=-1, member_id="", topics=[
            T(name="t", partitions=[T.Partition(partition_index=0, committed_offset=1)])]), 8)
        assert r.topics[0].partitions[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        d = c.request(DescribeGroupsRequest(groups=["sg"]), 6).groups[0]
        assert (d.error_code, d.error_message, d.group_state) == (
            ErrorCode.GROUP_ID_NOT_FOUND, "Group sg is not a classic group.", "Dead")
        # a consumer group's id for a share group
        r = c.request(ConsumerGroupHeartbeatRequest(group_id="cg", member_id="c1", member_epoch=0,
                                                    rebalance_timeout_ms=5000, subscribed_topic_names=["t"],
                                                    topic_partitions=[]), 0)
        assert r.error_code == 0
        r = _hb(c, "cg", "m1", 0, ["t"])
        assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
        d = c.request(ShareGroupDescribeRequest(group_ids=["cg"], include_authorized_operations=False), 1).groups[0]
        assert (d.error_code, d.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
    finally:
        c.close()


def test_admin_lists_describes_and_deletes_share_groups(kb):
    kb.create_topic("t", 2)
    group = "ag-" + uuid.uuid4().hex[:6]
    c = RawClient(kb.bootstrap_servers)
    admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
    try:
        _join_until_assigned(c, group, "m1", "t", 2)
        listed = {g.group_id: g for g in admin.list_share_groups()}
        assert listed[group].state == "Stable" and (listed[group].group_type, listed[group].protocol_type) == ("share", "share")
        assert group not in {g.group_id for g in admin.list_groups(types=("consumer",))}
        desc = admin.describe_share_groups([group])[group]
        assert (desc.state, desc.assignor, [m.member_id for m in desc.members]) == ("Stable", "simple", ["m1"])
        res = admin.delete_share_groups([group])
        assert res[group] is not None        # NON_EMPTY_GROUP while m1 is in it
        assert _hb(c, group, "m1", -1).member_epoch == -1
        assert [g.state for g in admin.list_share_groups() if g.group_id == group] == ["Empty"]
        assert admin.delete_share_groups([group]) == {group: None}
        assert group not in {g.group_id for g in admin.list_share_groups()}
    finally:
        admin.close()
        c.close()


def test_session_timeout_removes_a_silent_member(kb):
    kb.create_topic("t", 1)
    c = RawClient(kb.bootstrap_servers)
    try:
        _hb(c, "g2", "m1", 0, ["t"])
        time.sleep(2.0)          # session 1.5 s
        d = c.request(ShareGroupDescribeRequest(group_ids=["g2"], include_authorized_operations=False), 1).groups[0]
        assert (d.group_state, d.members) == ("Empty", [])
    finally:
        c.close()


def test_broker_restart_acknowledged_never_again_in_flight_back():
    """__share_group_state replayed at start: accepted records are not delivered again, records that
    were acquired (never acknowledged) come back, with their delivery counts going on."""
    from kohort import Producer, ShareConsumer
    from kohort.client.share.consumer import AcknowledgeType
    cfg = {**FAST, "group.share.record.lock.duration.ms": 60000}
    with broker(cfg, storage="tmp") as kb:
        kb.create_topic("t", 1)
        admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
        admin.alter_configs(("group", "g"), {"share.auto.offset.reset": "earliest"})
        admin.close()
        with Producer({"bootstrap.servers": kb.bootstrap_servers}) as p:
            for i in range(6):
                p.send("t", value=b"v%d" % i, partition=0)
            p.flush()
        c = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "g",
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe(["t"])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 6 and time.monotonic() < deadline:
            got += c.poll(0.3)
        assert sorted(r.offset for r in got) == list(range(6))
        for r in got:
            if r.offset < 3:
                c.acknowledge(r, AcknowledgeType.ACCEPT)
        assert all(e is None for e in c.commit_sync(10).values())
        # offsets 3-5 stay acquired (lock 60 s) when the broker goes down: no close, no release
        kb.restart()
        admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
        try:       # group configs are kept in the data directory
            got_cfg = admin.describe_configs([("group", "g")])[(32, "g")]["share.auto.offset.reset"]
            assert (got_cfg.value, got_cfg.source) == ("earliest", 8)
        finally:
            admin.close()
        c2 = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "g"})
        c2.subscribe(["t"])
        again = []
        deadline = time.monotonic() + 15
        while len(again) < 3 and time.monotonic() < deadline:
            again += c2.poll(0.3)
        time.sleep(0.5)
        again += c2.poll(0.5)
        assert sorted(r.offset for r in again) == [3, 4, 5]
        assert {r.delivery_count for r in again} == {1}      # acquisitions are not persisted (Kafka's rule)
        c2.commit_sync(10)
        c2.close(timeout=5)
        c.close(timeout=2)
        admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
        try:
            offs = admin.list_share_group_offsets("g")
            from kohort.structs import TopicPartition
            assert offs[TopicPartition("t", 0)].start_offset == 6 and offs[TopicPartition("t", 0)].lag == 0
        finally:
            admin.close()


def test_console_state_shows_share_groups_members_start_offsets_and_lag():
    from kohort import Producer, ShareConsumer
    from kohort.broker.console import state
    with broker(FAST) as kb:
        kb.create_topic("t", 2)
        admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
        admin.alter_configs(("group", "cg"), {"share.auto.offset.reset": "earliest"})
        admin.close()
        with Producer({"bootstrap.servers": kb.bootstrap_servers}) as p:
            for i in range(10):
                p.send("t", value=b"x", partition=i % 2)
            p.flush()
        c = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "cg",
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe(["t"])
        try:
            got = []
            deadline = time.monotonic() + 15
            while len(got) < 10 and time.monotonic() < deadline:
                got += c.poll(0.3)
            assert len(got) == 10

            async def read():
                return state.groups(kb._broker), state.group(kb._broker, "cg")
            listed, one = kb._run(read())
            row = [g for g in listed if g["group_id"] == "cg"][0]
            assert (row["type"], row["state"], row["members"], row["assignor"]) == ("share", "Stable", 1, "simple")
            assert [m["assignment"] for m in one["members"]] == [[{"topic": "t", "partitions": [0, 1]}]]
            # 5 records per partition acquired, none acknowledged: all in flight, all lagging
            assert [(o["partition"], o["start_offset"], o["in_flight"], o["lag"]) for o in one["offsets"]] == [
                (0, 0, 5, 5), (1, 0, 5, 5)]
        finally:
            c.close(timeout=5)


def test_group_configs_on_the_group_resource(kb):
    from kohort.errors import ERRORS
    admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
    try:
        admin.alter_configs(("group", "cfg"), {"share.auto.offset.reset": "by_duration:PT1H",
                                               "share.record.lock.duration.ms": "15000",
                                               "consumer.session.timeout.ms": "50000"})
        got = admin.describe_configs([("group", "cfg")])[(32, "cfg")]
        assert (got["share.auto.offset.reset"].value, got["share.auto.offset.reset"].source) == ("by_duration:PT1H", 8)
        assert (got["share.record.lock.duration.ms"].value, got["share.record.lock.duration.ms"].source) == ("15000", 8)
        assert (got["share.delivery.count.limit"].value, got["share.delivery.count.limit"].source) == ("5", 5)
        assert got["consumer.session.timeout.ms"].value == "50000"
        for bad in ({"share.auto.offset.reset": "soon"}, {"share.auto.offset.reset": "by_duration:1h"},
                    {"no.such.config": "1"}, {"share.delivery.count.limit": "11"},
                    {"share.isolation.level": "serializable"}, {"share.record.lock.duration.ms": "x"},
                    {"share.heartbeat.interval.ms": "60000"}):
            with pytest.raises(ERRORS[ErrorCode.INVALID_CONFIG]):
                admin.alter_configs(("group", "cfg"), bad)
        # nothing of a refused change was applied
        got = admin.describe_configs([("group", "cfg")])[(32, "cfg")]
        assert got["share.auto.offset.reset"].value == "by_duration:PT1H"
        assert got["share.delivery.count.limit"].source == 5
    finally:
        admin.close()


def test_by_duration_reset_starts_at_the_first_record_that_recent(kb):
    """share.auto.offset.reset=by_duration:PT1H: records older than an hour are skipped."""
    from kohort import Producer, ShareConsumer
    from kohort.broker.share_leader import parse_duration_ms
    kb.create_topic("bd", 1)
    admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
    admin.alter_configs(("group", "bd"), {"share.auto.offset.reset": "by_duration:PT1H"})
    admin.close()
    now = int(time.time() * 1000)
    with Producer({"bootstrap.servers": kb.bootstrap_servers}) as p:
        for i, age_ms in enumerate((3 * 3600_000, 2 * 3600_000, 60_000, 0)):
            p.send("bd", value=b"r%d" % i, partition=0, timestamp=now - age_ms)
        p.flush()
    c = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "bd"})
    c.subscribe(["bd"])
    try:
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += c.poll(0.3)
        assert [r.offset for r in got] == [2, 3]
    finally:
        c.close(timeout=5)
    assert parse_duration_ms("PT1H") == 3600_000 and parse_duration_ms("P1DT30M") == 88200_000
    assert parse_duration_ms("PT0.5S") == 500
    for bad in ("1h", "P", "PT", "-PT1H"):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)


@pytest.mark.slow
def test_broker_sigkill_acknowledged_never_again_in_flight_back(tmp_path):
    """kohort broker SIGKILLed while records are acquired: after it comes back (same data directory)
    confluent-kafka's ShareConsumer gets exactly the records that were not acknowledged."""
    import confluent_kafka as ck
    from kohort import Producer, ShareConsumer
    from kohort.client.share.consumer import AcknowledgeType
    from tests.helpers.brokers import KohortBroker
    cfg = {**FAST, "group.share.record.lock.duration.ms": 60000}
    kb = KohortBroker(data_dir=str(tmp_path), config=cfg).start()
    try:
        admin = Admin({"bootstrap.servers": kb.bootstrap})
        admin.create_topics(["k"], num_partitions=1, replication_factor=1)
        admin.alter_configs(("group", "gk"), {"share.auto.offset.reset": "earliest"})
        admin.close()
        with Producer({"bootstrap.servers": kb.bootstrap}) as p:
            for i in range(8):
                p.send("k", value=b"v%d" % i, partition=0)
            p.flush()
        c = ShareConsumer({"bootstrap.servers": kb.bootstrap, "group.id": "gk",
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe(["k"])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 8 and time.monotonic() < deadline:
            got += c.poll(0.3)
        assert sorted(r.offset for r in got) == list(range(8))
        for r in got:
            if r.offset in (0, 1, 2, 5):
                c.acknowledge(r, AcknowledgeType.ACCEPT)
            elif r.offset == 6:
                c.acknowledge(r, AcknowledgeType.REJECT)
        assert all(e is None for e in c.commit_sync(10).values())
        kb.kill()                         # SIGKILL: no clean shutdown
        c.close(timeout=1)
        kb.start()
        cc = ck.ShareConsumer({"bootstrap.servers": kb.bootstrap, "group.id": "gk"})
        cc.subscribe(["k"])
        again = []
        deadline = time.monotonic() + 20
        while len(again) < 3 and time.monotonic() < deadline:
            again += [m for m in cc.poll(0.5) if m.error() is None]
        time.sleep(0.5)
        again += [m for m in cc.poll(0.5) if m.error() is None]
        assert sorted(m.offset() for m in again) == [3, 4, 7]
        cc.close()
    finally:
        kb.stop()


MEMBER = """
import sys, time
import confluent_kafka as ck
c = ck.ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                      "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
n = 0
while True:
    for m in c.poll(0.2):
        if m.error() is None:
            n += 1
            print(m.offset(), flush=True)     # acquired, never acknowledged
"""


@pytest.mark.slow
def test_sigkilled_members_records_go_to_the_others_when_its_lock_expires():
    import subprocess
    import sys
    from kohort import Producer, ShareConsumer
    with broker(FAST) as kb:
        kb.create_topic("sk", 1)
        admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
        admin.alter_configs(("group", "gsk"), {"share.auto.offset.reset": "earliest",
                                               "share.record.lock.duration.ms": "2000"})
        admin.close()
        with Producer({"bootstrap.servers": kb.bootstrap_servers}) as p:
            for i in range(5):
                p.send("sk", value=b"v%d" % i, partition=0)
            p.flush()
        proc = subprocess.Popen([sys.executable, "-c", MEMBER, kb.bootstrap_servers, "gsk", "sk"],
                                stdout=subprocess.PIPE, text=True)
        try:
            seen = [int(proc.stdout.readline()) for _ in range(5)]
            assert sorted(seen) == list(range(5))
        finally:
            proc.kill()                   # SIGKILL: no acknowledgement, no session close
            proc.wait()
        t0 = time.monotonic()
        c = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "gsk"})
        c.subscribe(["sk"])
        try:
            got = []
            while len(got) < 5 and time.monotonic() - t0 < 15:
                got += c.poll(0.3)
            assert sorted(r.offset for r in got) == list(range(5))
            assert {r.delivery_count for r in got} == {2}
        finally:
            c.close(timeout=5)


def test_a_closed_connection_ends_its_share_session_and_releases_the_records():
    from kohort import Producer, ShareConsumer
    from kohort.protocol.messages.share_fetch import ShareFetchRequest
    cfg = {**FAST, "group.share.record.lock.duration.ms": 60000}
    with broker(cfg) as kb:
        kb.create_topic("cc", 1)
        admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
        admin.alter_configs(("group", "gcc"), {"share.auto.offset.reset": "earliest"})
        tid = admin.describe_topics(["cc"])[0].topic_id
        admin.close()
        with Producer({"bootstrap.servers": kb.bootstrap_servers}) as p:
            for i in range(3):
                p.send("cc", value=b"v%d" % i, partition=0)
            p.flush()
        c = RawClient(kb.bootstrap_servers)
        _join_until_assigned(c, "gcc", "raw-member", "cc", 1)
        F = ShareFetchRequest.FetchTopic
        r = c.request(ShareFetchRequest(group_id="gcc", member_id="raw-member", share_session_epoch=0,
                                        max_wait_ms=2000, min_bytes=1, max_bytes=1 << 20, max_records=500,
                                        batch_size=500, share_acquire_mode=0, is_renew_ack=False,
                                        topics=[F(topic_id=uuid.UUID(str(tid)), partitions=[
                                            F.FetchPartition(partition_index=0, acknowledgement_batches=[])])],
                                        forgotten_topics_data=[]), 2)
        acquired = [(a.first_offset, a.last_offset) for t in r.responses for p in t.partitions
                    for a in p.acquired_records]
        assert acquired == [(0, 2)]
        c.close()                          # no acknowledgement, no session close: the socket just goes
        t0 = time.monotonic()
        other = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "gcc"})
        other.subscribe(["cc"])
        try:
            got = []
            while len(got) < 3 and time.monotonic() - t0 < 15:
                got += other.poll(0.3)
            # within 15 s: long before the 60 s lock would have expired
            assert sorted(r.offset for r in got) == [0, 1, 2] and {r.delivery_count for r in got} == {2}
        finally:
            other.close(timeout=5)


def test_share_group_configs_set_the_heartbeat_interval_and_session_timeout(kb):
    kb.create_topic("hc", 1)
    admin = Admin({"bootstrap.servers": kb.bootstrap_servers})
    admin.alter_configs(("group", "ghc"), {"share.heartbeat.interval.ms": "700", "share.session.timeout.ms": "6000"})
    admin.close()
    c = RawClient(kb.bootstrap_servers)
    try:
        r = _hb(c, "ghc", "m1", 0, ["hc"])
        assert (r.error_code, r.heartbeat_interval_ms) == (0, 700)
        time.sleep(2.0)          # past the broker's 1.5 s session: the group's 6 s applies
        assert _hb(c, "ghc", "m1", r.member_epoch).error_code == 0
        assert _hb(c, "other", "m1", 0, ["hc"]).heartbeat_interval_ms == 200       # the broker's setting
    finally:
        c.close()
