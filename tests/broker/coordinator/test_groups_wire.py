"""The group APIs of an in-process kohort Broker over a real socket: versions, exact error codes, the
records written to `__consumer_offsets`, reload after restart (replay + timers), the loading phase
and append failures. Client interop lives in test_groups_clients.py."""
from __future__ import annotations

import asyncio

from hypothesis import given, settings, strategies as st

from kohort.broker.coordinator.serde import decode_classic_record as decode_coordinator_record
from kohort.broker.coordinator_runtime import CoordinatorRuntime
from kohort.broker.coordinator.model import (
    GroupRecord, JoinParams, MemberRecord, OffsetFetchParams, OffsetRecord,
)
from kohort.errors import ErrorCode as E
from kohort.protocol.consumer_offsets import OFFSETS_TOPIC, group_partition, key_version
from kohort.protocol.consumer_protocol import (
    ConsumerProtocolSubscription, encode_subscription,
)
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.delete_groups import DeleteGroupsRequest
from kohort.protocol.messages.describe_groups import DescribeGroupsRequest
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
from kohort.protocol.messages.heartbeat import HeartbeatRequest
from kohort.protocol.messages.join_group import JoinGroupRequest
from kohort.protocol.messages.leave_group import LeaveGroupRequest
from kohort.protocol.messages.list_groups import ListGroupsRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.offset_delete import OffsetDeleteRequest
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest
from kohort.protocol.messages.sync_group import SyncGroupRequest
from kohort.protocol.records import iter_records
from tests.helpers.broker_wire import Wire, running_broker

FAST = {"group.initial.rebalance.quiet.ms": 30, "group.min.session.timeout.ms": 100}
CT = CreateTopicsRequest.CreatableTopic
OCT = OffsetCommitRequest.Topic
OFT = OffsetFetchRequest.Topic


def run(coro):
    return asyncio.run(coro)


def sub(*topics) -> bytes:
    return encode_subscription(ConsumerProtocolSubscription(topics=list(topics), user_data=None,
                                                            owned_partitions=[]))


async def create(w, name, partitions=1):
    r = await w.call(CreateTopicsRequest(topics=[CT(name=name, num_partitions=partitions, replication_factor=1,
                                                    assignments=[], configs=[])], timeout_ms=1000), 7)
    assert r.topics[0].error_code == 0


async def join(w, group, member_id="", version=9, session=10_000, topics=("t",), instance=None):
    return await w.call(JoinGroupRequest(
        group_id=group, session_timeout_ms=session, rebalance_timeout_ms=30_000, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=[JoinGroupRequest.Protocol(name="range", metadata=sub(*topics))]), version)


async def join_and_sync(w, group, session=10_000, assignment=b"A"):
    r = await join(w, group, session=session)
    assert r.error_code == E.MEMBER_ID_REQUIRED
    r = await join(w, group, r.member_id, session=session)
    assert r.error_code == 0 and r.leader == r.member_id and r.generation_id == 1
    assert r.protocol_name == "range" and len(r.members) == 1
    s = await w.call(SyncGroupRequest(group_id=group, generation_id=1, member_id=r.member_id,
                                      protocol_type="consumer", protocol_name="range",
                                      assignments=[SyncGroupRequest.Assignment(member_id=r.member_id,
                                                                               assignment=assignment)]), 5)
    assert (s.error_code, s.assignment, s.protocol_name) == (0, assignment, "range")
    return r.member_id


async def commit(w, group, offsets: dict, generation=-1, member_id="", version=9):
    by_topic: dict = {}
    for (t, p), off in offsets.items():
        by_topic.setdefault(t, []).append(OCT.Partition(partition_index=p, committed_offset=off,
                                                        committed_metadata="m"))
    r = await w.call(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation,
                                         member_id=member_id, topics=[OCT(name=t, partitions=ps)
                                                                      for t, ps in by_topic.items()]), version)
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


async def fetch(w, group, topics=None, version=9):
    if version >= 8:
        G = OffsetFetchRequest.Group
        tps = None if topics is None else [G.Topics(name=t, partition_indexes=ps) for t, ps in topics.items()]
        r = await w.call(OffsetFetchRequest(groups=[G(group_id=group, topics=tps)]), version)
        g = r.groups[0]
        assert g.group_id == group
        return g.error_code, {(t.name, p.partition_index): p.committed_offset for t in g.topics
                              for p in t.partitions}
    tps = None if topics is None else [OFT(name=t, partition_indexes=ps) for t, ps in topics.items()]
    r = await w.call(OffsetFetchRequest(group_id=group, topics=tps), version)
    return (r.error_code if version >= 2 else 0), {(t.name, p.partition_index): p.committed_offset
                                                   for t in r.topics for p in t.partitions}


def stored_records(broker, group):
    lg = broker.storage.log(OFFSETS_TOPIC, group_partition(group, broker.coordinator.num_partitions))
    data = lg.read(lg.log_start_offset, 1 << 24)
    return [(key_version(r[2]), decode_coordinator_record(r[2], r[3])) for r in iter_records(data)]


def test_consumer_offsets_topic_created_compacted(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"offsets.topic.num.partitions": 7,
                                             "offsets.topic.segment.bytes": 1 << 20}) as b:
            info = b.storage.topic(OFFSETS_TOPIC)
            assert info.num_partitions == 7 and b.coordinator.num_partitions == 7
            cfg = {k: v for k, v, _ in b.storage.describe_configs(OFFSETS_TOPIC)}
            assert cfg["cleanup.policy"] == "compact" and int(cfg["segment.bytes"]) == 1 << 20
        # an existing topic keeps its partition count even if the config changes
        async with running_broker(tmp_path, {"offsets.topic.num.partitions": 3}) as b:
            assert b.coordinator.num_partitions == 7
    run(main())


def test_find_coordinator_versions(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            for v in (0, 1, 2, 3):
                r = await w.call(FindCoordinatorRequest(key="g", key_type=0), v)
                assert (r.error_code, r.node_id, r.host, r.port) == (0, b.node_id, b.host, b.port)
            r = await w.call(FindCoordinatorRequest(key="txn", key_type=1), 3)
            assert (r.error_code, r.port) == (0, b.port)
            r = await w.call(FindCoordinatorRequest(key="x", key_type=2), 3)
            assert r.error_code == E.INVALID_REQUEST and r.node_id == -1
            assert (r.host, r.port) == ("", -1) and "key type 2" in r.error_message
            r = await w.call(FindCoordinatorRequest(key_type=2, coordinator_keys=["a", "b"]), 4)
            assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in r.coordinators] == \
                [(k, E.INVALID_REQUEST, -1, "", -1) for k in "ab"]
            for v in (4, 5, 6):
                r = await w.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b", "c"]), v)
                assert [(c.key, c.error_code, c.node_id, c.port) for c in r.coordinators] == \
                    [(k, 0, b.node_id, b.port) for k in "abc"]
            await w.close()
    run(main())


def test_full_member_lifecycle_over_the_wire(tmp_path):
    async def main():
        async with running_broker(tmp_path, FAST) as b:
            w = await Wire.connect(b)
            await create(w, "t", 2)
            mid = await join_and_sync(w, "g")
            hb = await w.call(HeartbeatRequest(group_id="g", generation_id=1, member_id=mid), 4)
            assert hb.error_code == 0
            hb = await w.call(HeartbeatRequest(group_id="g", generation_id=7, member_id=mid), 4)
            assert hb.error_code == E.ILLEGAL_GENERATION
            assert await commit(w, "g", {("t", 0): 5, ("t", 1): 9}, 1, mid) == {("t", 0): 0, ("t", 1): 0}
            assert await commit(w, "g", {("t", 0): 6}, 0, mid) == {("t", 0): E.ILLEGAL_GENERATION}
            assert await commit(w, "g", {("nope", 0): 1, ("t", 5): 1}, 1, mid) == {
                ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION}
            for v in (1, 2, 5, 7, 8, 9):
                assert await fetch(w, "g", {"t": [0, 1, 2]}, v) == (0, {("t", 0): 5, ("t", 1): 9, ("t", 2): -1})
            assert await fetch(w, "g", None, 9) == (0, {("t", 0): 5, ("t", 1): 9})
            assert await fetch(w, "g", None, 7) == (0, {("t", 0): 5, ("t", 1): 9})
            # DescribeGroups: a stable group shows the member with its subscription and assignment
            d = (await w.call(DescribeGroupsRequest(groups=["g", "unknown"]), 5)).groups
            assert (d[0].error_code, d[0].group_state, d[0].protocol_data) == (0, "Stable", "range")
            assert [(m.member_id, m.member_assignment, m.client_host) for m in d[0].members] == \
                [(mid, b"A", "/127.0.0.1")]
            assert (d[1].error_code, d[1].group_state) == (0, "Dead")
            d6 = (await w.call(DescribeGroupsRequest(groups=["unknown"]), 6)).groups[0]
            assert d6.error_code == E.GROUP_ID_NOT_FOUND and "unknown" in d6.error_message
            lg = await w.call(ListGroupsRequest(), 0)
            assert [(g.group_id, g.protocol_type) for g in lg.groups] == [("g", "consumer")]
            lg = await w.call(ListGroupsRequest(states_filter=["Empty"]), 4)
            assert lg.groups == []
            lg = await w.call(ListGroupsRequest(states_filter=["stable"], types_filter=["classic"]), 5)
            assert [(g.group_id, g.group_state, g.group_type) for g in lg.groups] == [("g", "Stable", "classic")]
            # a non-empty group cannot be deleted; leaving empties it (v3 batch form)
            dg = await w.call(DeleteGroupsRequest(groups_names=["g"]), 2)
            assert dg.results[0].error_code == E.NON_EMPTY_GROUP
            lv = await w.call(LeaveGroupRequest(group_id="g", members=[
                LeaveGroupRequest.MemberIdentity(member_id=mid), LeaveGroupRequest.MemberIdentity(member_id="x")]), 5)
            assert lv.error_code == 0 and [(m.member_id, m.error_code) for m in lv.members] == \
                [(mid, 0), ("x", E.UNKNOWN_MEMBER_ID)]
            assert (await w.call(DescribeGroupsRequest(groups=["g"]), 5)).groups[0].group_state == "Empty"
            od = await w.call(OffsetDeleteRequest(group_id="g", topics=[OffsetDeleteRequest.Topic(
                name="t", partitions=[OffsetDeleteRequest.Topic.Partition(partition_index=1)])]), 0)
            assert od.error_code == 0 and od.topics[0].partitions[0].error_code == 0
            assert await fetch(w, "g", None) == (0, {("t", 0): 5})
            dg = await w.call(DeleteGroupsRequest(groups_names=["g", "g2"]), 2)
            assert [(r.group_id, r.error_code) for r in dg.results] == [("g", 0), ("g2", E.GROUP_ID_NOT_FOUND)]
            assert await fetch(w, "g", {"t": [0]}) == (0, {("t", 0): -1})
            # what went to __consumer_offsets: Kafka's key versions, tombstones last
            recs = stored_records(b, "g")
            kinds = [(kv, type(r).__name__, r.tombstone) for kv, r in recs]
            assert kinds[0] == (2, "GroupRecord", False)                 # the new group's empty record
            assert (1, "OffsetRecord", False) in kinds
            assert kinds[-1] == (2, "GroupRecord", True)
            assert [r for _, r in recs if isinstance(r, OffsetRecord) and r.tombstone]
            assert b.coordinator.offsets_sync.rounds > 0                # commits waited for a datasync
            await w.close()
    run(main())


def test_old_versions_single_member_forms(tmp_path):
    async def main():
        async with running_broker(tmp_path, FAST) as b:
            w = await Wire.connect(b)
            await create(w, "t", 1)
            r = await join(w, "old", version=0, session=6000)          # v0-v3: no MEMBER_ID_REQUIRED
            assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
            s = await w.call(SyncGroupRequest(group_id="old", generation_id=1, member_id=r.member_id,
                                              assignments=[SyncGroupRequest.Assignment(
                                                  member_id=r.member_id, assignment=b"x")]), 0)
            assert (s.error_code, s.assignment) == (0, b"x")
            assert await commit(w, "old", {("t", 0): 3}, 1, r.member_id, version=2) == {("t", 0): 0}
            assert await fetch(w, "old", {"t": [0]}, 1) == (0, {("t", 0): 3})
            lv = await w.call(LeaveGroupRequest(group_id="old", member_id="nobody"), 0)
            assert lv.error_code == E.UNKNOWN_MEMBER_ID
            lv = await w.call(LeaveGroupRequest(group_id="old", member_id=r.member_id), 2)
            assert lv.error_code == 0
            await w.close()
    run(main())


def test_restart_replays_groups_and_offsets_then_expires_sessions(tmp_path):
    async def main():
        async with running_broker(tmp_path, FAST) as b:
            w = await Wire.connect(b)
            await create(w, "t", 3)
            mid = await join_and_sync(w, "kept", session=300)
            assert await commit(w, "kept", {("t", 0): 11, ("t", 2): 22}, 1, mid) == {("t", 0): 0, ("t", 2): 0}
            assert await commit(w, "simple", {("t", 1): 7}) == {("t", 1): 0}
            await w.close()
        async with running_broker(tmp_path, FAST) as b:
            assert b.coordinator.loaded_records >= 4
            w = await Wire.connect(b)
            assert await fetch(w, "kept", None) == (0, {("t", 0): 11, ("t", 2): 22})
            assert await fetch(w, "simple", {"t": [1]}, 3) == (0, {("t", 1): 7})
            d = (await w.call(DescribeGroupsRequest(groups=["kept"]), 5)).groups[0]
            assert d.group_state == "Stable" and [m.member_id for m in d.members] == [mid]
            # the restored member's session timer runs from load: without heartbeats it is removed
            for _ in range(60):
                await asyncio.sleep(0.05)
                d = (await w.call(DescribeGroupsRequest(groups=["kept"]), 5)).groups[0]
                if d.group_state == "Empty":
                    break
            assert d.group_state == "Empty" and d.members == []
            assert await fetch(w, "kept", None) == (0, {("t", 0): 11, ("t", 2): 22})
            await w.close()
        async with running_broker(tmp_path, FAST) as b:     # the Empty transition was stored too
            w = await Wire.connect(b)
            d = (await w.call(DescribeGroupsRequest(groups=["kept"]), 5)).groups[0]
            assert d.group_state == "Empty"
            await w.close()
    run(main())


def test_loading_phase_answers_load_in_progress(tmp_path):
    async def main():
        async with running_broker(tmp_path, FAST) as b:
            w = await Wire.connect(b)
            await create(w, "t", 1)
            assert await commit(w, "g", {("t", 0): 4}) == {("t", 0): 0}
            await w.close()
            rt = CoordinatorRuntime(b)              # a second runtime over the same storage, not loaded
            rt.ensure_topic()
            assert rt.groups.phase == "loading"
            res = await rt.join_group(JoinParams("g2", protocols=(("range", b""),)))
            assert res.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
            res = await rt.offset_fetch(OffsetFetchParams("g", (("t", (0,)),)))
            assert res.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
            await rt.load()
            res = await rt.offset_fetch(OffsetFetchParams("g", (("t", (0,)),)))
            assert res.error_code == 0 and res.topics[0][1][0].committed_offset == 4
            await rt.close()
            assert isinstance(stored_records(b, "g")[-1][1], OffsetRecord)
    run(main())


def test_append_failure_is_reported_and_not_applied(tmp_path):
    async def main():
        async with running_broker(tmp_path, FAST) as b:
            w = await Wire.connect(b)
            await create(w, "t", 1)
            assert await commit(w, "g", {("t", 0): 1}) == {("t", 0): 0}
            b.storage.delete_topic(OFFSETS_TOPIC)          # storage now refuses coordinator appends
            assert await commit(w, "g", {("t", 0): 2}) == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
            assert await fetch(w, "g", {"t": [0]}) == (0, {("t", 0): 1})
            r = await join(w, "fresh")
            assert r.error_code == E.COORDINATOR_NOT_AVAILABLE
            lg = await w.call(ListGroupsRequest(), 3)
            assert [g.group_id for g in lg.groups] == ["g"]      # the failed new group was reverted
            await w.close()
    run(main())


def test_failed_datasync_of_the_coordinator_log_fails_that_append_and_every_later_one(tmp_path, monkeypatch):
    """The coordinator's appends wait for a datasync of their own __consumer_offsets segment; when it
    fails the commit is refused (KAFKA_STORAGE_ERROR, which an OffsetCommit answers as
    NOT_COORDINATOR, as Kafka maps append errors) and not applied, and no later append is answered as
    stored (the kernel may have dropped the unsynced pages)."""
    from kohort.storage.fs import OsFileHandle
    real = OsFileHandle.datasync

    def datasync(h):
        if OFFSETS_TOPIC in h.path and failing:
            raise OSError(5, "Input/output error")
        real(h)

    async def main():
        async with running_broker(tmp_path, FAST) as b:
            w = await Wire.connect(b)
            await create(w, "t", 1)
            assert await commit(w, "g", {("t", 0): 1}) == {("t", 0): 0}
            failing.append(True)
            assert await commit(w, "g", {("t", 0): 2}) == {("t", 0): E.NOT_COORDINATOR}
            failing.clear()
            assert await commit(w, "g", {("t", 0): 3}) == {("t", 0): E.NOT_COORDINATOR}
            assert await fetch(w, "g", {"t": [0]}) == (0, {("t", 0): 1})
            await w.close()
    failing: list = []
    monkeypatch.setattr(OsFileHandle, "datasync", datasync)
    run(main())


def test_records_roundtrip_through_the_mapping():
    from kohort.broker.coordinator.serde import encode_classic_record as encode_coordinator_record
    recs = [OffsetRecord("g", "t", 3, 42, 5, "meta", 1000, None),
            OffsetRecord("g", "t", 3, 42, -1, "", 1000, 99_999),
            OffsetRecord("g", "t", 3, tombstone=True),
            GroupRecord("g", "consumer", 4, "range", "m1", 77, (
                MemberRecord("m1", "inst", "c", "/h", 300, 100, b"sub", b"asg"),)),
            GroupRecord("g", "", 0, None, None, 5, ()),
            GroupRecord("g", tombstone=True)]
    for r in recs:
        k, v = encode_coordinator_record(r)
        back = decode_coordinator_record(k, v)
        if isinstance(r, OffsetRecord) and r.expire_timestamp is not None:
            r = OffsetRecord(r.group, r.topic, r.partition, r.offset, -1, r.metadata, r.commit_timestamp,
                             r.expire_timestamp)          # value v1 has no leader epoch (as in Kafka)
        assert back == r


def test_pipelined_commits_share_fsync_rounds_and_complete_in_order(tmp_path):
    async def main():
        async with running_broker(tmp_path, FAST) as b:
            w = await Wire.connect(b)
            await create(w, "t", 1)
            rounds = b.coordinator.offsets_sync.rounds
            n = 30
            for i in range(n):        # pipelined on one connection: dispatched in this order
                req = OffsetCommitRequest(group_id=f"g{i % 3}", generation_id_or_member_epoch=-1, member_id="",
                                          topics=[OCT(name="t", partitions=[OCT.Partition(
                                              partition_index=0, committed_offset=i, committed_metadata="")])])
                await w.send(req, 9, expect_response=False)
            for i in range(n):
                corr, resp = await w.recv(8, 9)
                assert corr == i + 1 + 1 and resp.topics[0].partitions[0].error_code == 0
            done = b.coordinator.offsets_sync.rounds - rounds
            assert 1 <= done < n                           # group commit: fewer datasyncs than commits
            # per group the last commit wins: appends and completions keep the request order
            for g in range(3):
                assert await fetch(w, f"g{g}", {"t": [0]}) == (0, {("t", 0): n - 3 + g})
            await w.close()
    run(main())


def _snapshot(coordinator):
    return {gid: (g.protocol_type, g.generation_id, g.protocol_name, g.leader_id, g.state.value,
                  sorted(g.members), {tp: co.offset for tp, co in coordinator.offsets.of(g.group_id).items()})
            for gid, g in coordinator.groups.items()}


_GROUPS = st.sampled_from(["a", "b", "c"])
_RECORD = st.one_of(
    st.builds(OffsetRecord, _GROUPS, st.sampled_from(["t", "u"]), st.integers(0, 2), st.integers(0, 99),
              st.just(-1), st.just(""), st.just(1), st.none()),
    st.builds(lambda g, t, p: OffsetRecord(g, t, p, tombstone=True), _GROUPS, st.sampled_from(["t", "u"]),
              st.integers(0, 2)),
    st.builds(lambda g, gen, n: GroupRecord(g, "consumer", gen, "range", "m0" if n else None, 5, tuple(
        MemberRecord(f"m{i}", None, "c", "/h", 100, 100, b"", b"") for i in range(n))),
        _GROUPS, st.integers(0, 5), st.integers(0, 2)),
    st.builds(lambda g: GroupRecord(g, tombstone=True), _GROUPS))


@settings(max_examples=30, deadline=None)
@given(records=st.lists(_RECORD, max_size=25))
def test_load_compacts_in_memory_like_sequential_replay(records):
    """The runtime keeps only each key's last record before replaying; the state must equal a plain
    replay of every record in log order."""
    # as the coordinator writes them: a group tombstone follows tombstones of all its live offsets
    written, live = [], {}
    for r in records:
        if isinstance(r, GroupRecord) and r.tombstone:
            written += [OffsetRecord(r.group, t, p, tombstone=True) for (t, p) in live.pop(r.group, set())]
        elif isinstance(r, OffsetRecord):
            (live.setdefault(r.group, set()).discard if r.tombstone else live.setdefault(r.group, set()).add)(
                (r.topic, r.partition))
        written.append(r)
    records = written
    import tempfile

    from kohort.broker.coordinator import ClassicGroupCoordinator
    from kohort.broker.coordinator.serde import encode_classic_record as encode_coordinator_record
    from kohort.protocol.records import build_batch
    from kohort.protocol.consumer_protocol import decode_subscription

    async def main(d):
        async with running_broker(d, {"offsets.topic.num.partitions": 2}) as b:
            for r in records:
                k, v = encode_coordinator_record(r)
                b.storage.log(OFFSETS_TOPIC, group_partition(r.group, 2)).append(
                    build_batch([(k, v, [], 1)]), leader_epoch=0, now_ms=1)
            rt = CoordinatorRuntime(b)
            rt.ensure_topic()
            await rt.load()
            snap = _snapshot(rt.groups.classic)
            await rt.close()
            return snap

    with tempfile.TemporaryDirectory() as d:
        loaded = run(main(d))
    plain = ClassicGroupCoordinator(subscription_decoder=lambda m: decode_subscription(m).topics, loading=True)
    for r in records:
        plain.replay(r)
    plain.on_loaded(0)                  # loading done: offsets without a group get a simple group
    expected = _snapshot(plain)
    # A classic group whose metadata and offsets are all tombstoned leaves no trace after
    # compaction (nor in Kafka's loader).
    last_group_record = {r.group: r for r in records if isinstance(r, GroupRecord)}
    for gid, (_, _, _, _, _, members, offsets) in list(expected.items()):
        g = last_group_record.get(gid)
        if not members and not offsets and (g is None or g.tombstone):
            del expected[gid]
    assert loaded == expected


def test_known_and_unknown_partitions_in_one_commit_and_delete(tmp_path):
    async def main():
        async with running_broker(tmp_path, FAST) as b:
            w = await Wire.connect(b)
            await create(w, "t", 2)
            assert await commit(w, "g", {("t", 0): 3, ("t", 7): 4, ("nope", 0): 5, ("t", 1): 6}) == {
                ("t", 0): 0, ("t", 1): 0, ("t", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
                ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
            OD = OffsetDeleteRequest.Topic
            od = await w.call(OffsetDeleteRequest(group_id="g", topics=[
                OD(name="t", partitions=[OD.Partition(partition_index=i) for i in (1, 9)]),
                OD(name="nope", partitions=[OD.Partition(partition_index=0)])]), 0)
            assert od.error_code == 0
            assert {(t.name, p.partition_index): p.error_code for t in od.topics for p in t.partitions} == {
                ("t", 1): 0, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
            for v in (1, 7, 8):
                assert await fetch(w, "g", {"t": [0, 1]}, v) == (0, {("t", 0): 3, ("t", 1): -1})
            await w.close()
    run(main())
