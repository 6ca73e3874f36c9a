"""KIP-848 on kohort broker over the wire: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69)
advertised and served, topic ids mapped, OffsetCommit/OffsetFetch member-epoch fencing, ListGroups
type/state, DescribeGroups/DeleteGroups of a consumer group, the protocol switch, the config names."""
import asyncio
import uuid

import pytest

from kohort.broker.config import BrokerConfig
from kohort.broker.coordinator.consumer_group import ConsumerGroupConfig
from kohort.errors import ConfigError, ErrorCode
from kohort.protocol.consumer_offsets import OFFSETS_TOPIC, group_partition, key_version
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest as D
from kohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as H
from kohort.protocol.messages.create_topics import CreateTopicsRequest as CT
from kohort.protocol.messages.delete_groups import DeleteGroupsRequest
from kohort.protocol.messages.describe_groups import DescribeGroupsRequest
from kohort.protocol.messages.list_groups import ListGroupsRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest as OC
from kohort.protocol.messages.offset_delete import OffsetDeleteRequest as ODel
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest as OF
from kohort.protocol.records import iter_records
from tests.helpers.broker_wire import Wire, running_broker


async def _topic(w, name, n):
    await w.call(CT(timeout_ms=5000, topics=[CT.CreatableTopic(name=name, num_partitions=n,
                                                               replication_factor=1)]), 5)


def _join(member_id, topics=("t",), **kw):
    return H(group_id="g", member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
             subscribed_topic_names=list(topics), topic_partitions=[], **kw)


def _commit(epoch, member="a", version=9):
    P = OC.Topic.Partition
    return OC(group_id="g", generation_id_or_member_epoch=epoch, member_id=member,
              topics=[OC.Topic(name="t", partitions=[P(partition_index=0, committed_offset=5)])])


def test_heartbeat_describe_commit_fetch_list_delete(tmp_path):
    async def go():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            api = {k.api_key: (k.min_version, k.max_version)
                   for k in (await w.call(ApiVersionsRequest(), 3)).api_keys}
            assert api[68] == (0, 1) and api[69] == (0, 1)
            await _topic(w, "t", 4)
            tid = b.storage.topic("t").topic_id
            r = await w.call(_join("a"), 1)
            assert r.error_code == 0 and r.member_id == "a" and r.member_epoch == 1
            assert [(tp.topic_id, sorted(tp.partitions)) for tp in r.assignment.topic_partitions] == \
                [(tid, [0, 1, 2, 3])]
            # v0 join: the broker makes the member id
            r0 = await w.call(_join(""), 0)
            assert r0.error_code == 0 and r0.member_id and r0.member_epoch == 2
            # describe: 2 members, a must revoke half once it heartbeats
            H_TP = H.TopicPartitions
            ra = await w.call(H(group_id="g", member_id="a", member_epoch=1,
                                topic_partitions=[H_TP(topic_id=tid, partitions=[0, 1, 2, 3])]), 1)
            assert ra.member_epoch == 1 and len(ra.assignment.topic_partitions[0].partitions) == 2
            d = (await w.call(D(group_ids=["g", "nope"], include_authorized_operations=False), 1)).groups
            assert d[0].error_code == 0 and d[0].group_state == "Reconciling" and d[0].group_epoch == 2
            assert d[0].assignor_name == "uniform" and len(d[0].members) == 2
            assert {m.member_type for m in d[0].members} == {1}
            assert d[0].members[0].assignment.topic_partitions[0].topic_name == "t"
            assert d[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
            # commits are fenced by member epoch
            c = await w.call(_commit(1), 9)
            assert c.topics[0].partitions[0].error_code == 0
            c = await w.call(_commit(7), 9)
            assert c.topics[0].partitions[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
            c = await w.call(_commit(1, member="zz"), 9)
            assert c.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
            c = await w.call(_commit(1), 8)
            assert c.topics[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION
            G = OF.Group
            f = await w.call(OF(groups=[G(group_id="g", member_id="a", member_epoch=1,
                                          topics=[G.Topics(name="t", partition_indexes=[0])])]), 9)
            assert f.groups[0].error_code == 0 and f.groups[0].topics[0].partitions[0].committed_offset == 5
            f = await w.call(OF(groups=[G(group_id="g", member_id="a", member_epoch=3,
                                          topics=[G.Topics(name="t", partition_indexes=[0])])]), 9)
            assert f.groups[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
            # OffsetDelete: not for a topic the group subscribes to
            od = await w.call(ODel(group_id="g", topics=[ODel.Topic(name="t", partitions=[
                ODel.Topic.Partition(partition_index=0)])]), 0)
            assert od.error_code == 0 and od.topics[0].partitions[0].error_code == \
                ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                        # ListGroups: type and state; DescribeGroups: not a classic group
            lg = await w.call(ListGroupsRequest(states_filter=[], types_filter=["consumer"]), 5)
            assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in lg.groups] == \
                [("g", "consumer", "consumer", "Reconciling")]
            lg = await w.call(ListGroupsRequest(states_filter=[], types_filter=["classic"]), 5)
            assert lg.groups == []
            dg = await w.call(DescribeGroupsRequest(groups=["g"]), 6)
            assert dg.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
            dl = await w.call(DeleteGroupsRequest(groups_names=["g"]), 2)
            assert dl.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
            for m in ("a", r0.member_id):
                assert (await w.call(H(group_id="g", member_id=m, member_epoch=-1), 1)).error_code == 0
            dl = await w.call(DeleteGroupsRequest(groups_names=["g"]), 2)
            assert dl.results[0].error_code == 0
            assert (await w.call(ListGroupsRequest(states_filter=[], types_filter=[]), 5)).groups == []
            await w.close()
    asyncio.run(go())


def test_owned_partitions_of_unknown_topic_ids_are_ignored(tmp_path):
    async def go():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await _topic(w, "t", 2)
            await w.call(_join("a"), 1)
            r = await w.call(H(group_id="g", member_id="a", member_epoch=1, topic_partitions=[
                H.TopicPartitions(topic_id=uuid.uuid4(), partitions=[0])]), 1)
            assert r.error_code == 0
            await w.close()
    asyncio.run(go())


def test_consumer_protocol_disabled(tmp_path):
    async def go():
        async with running_broker(tmp_path, {"group.coordinator.rebalance.protocols": "classic"}) as b:
            w = await Wire.connect(b)
            r = await w.call(_join("a"), 1)
            assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
            await w.close()
    asyncio.run(go())


def test_consumer_group_config_names_and_bounds():
    c = ConsumerGroupConfig.from_properties(BrokerConfig.from_properties({
        "group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "3000",
        "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.assignors": "range,uniform", "group.consumer.max.size": "3"}).values)
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.assignors, c.max_size) == \
        (3000, 500, ("range", "uniform"), 3)
    with pytest.raises(ConfigError, match="group.consumer.session.timeout.ms"):
        ConsumerGroupConfig.from_properties({"group.consumer.session.timeout.ms": 1000})
    with pytest.raises(ConfigError, match="group.consumer.assignors"):
        ConsumerGroupConfig.from_properties({"group.consumer.assignors": "sticky"})


def test_consumer_group_survives_a_broker_restart(tmp_path):
    """The group's records are in __consumer_offsets (Kafka's formats) and replayed at start: after a
    restart the member goes on at its epoch with its partitions, no rebalance."""
    async def go():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await _topic(w, "t", 4)
            ra = await w.call(_join("a"), 1)
            rb = await w.call(_join("b"), 1)
            tps = ra.assignment.topic_partitions
            ra = await w.call(H(group_id="g", member_id="a", member_epoch=1, topic_partitions=tps), 1)
            kept = ra.assignment.topic_partitions
            ra = await w.call(H(group_id="g", member_id="a", member_epoch=1, topic_partitions=kept), 1)
            assert ra.member_epoch == 2
            rb = await w.call(H(group_id="g", member_id="b", member_epoch=2, topic_partitions=[]), 1)
            assert rb.member_epoch == 2 and len(rb.assignment.topic_partitions[0].partitions) == 2
            c = await w.call(_commit(2), 9)
            assert c.topics[0].partitions[0].error_code == 0
            await w.close()
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            d = (await w.call(D(group_ids=["g"], include_authorized_operations=False), 1)).groups[0]
            assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch) == (0, "Stable", 2, 2)
            assert sorted(m.member_id for m in d.members) == ["a", "b"]
            r = await w.call(H(group_id="g", member_id="a", member_epoch=2, topic_partitions=kept), 1)
            assert r.error_code == 0 and r.member_epoch == 2
            assert (await w.call(_commit(2), 9)).topics[0].partitions[0].error_code == 0
            G = OF.Group
            f = await w.call(OF(groups=[G(group_id="g", member_id="a", member_epoch=2,
                                          topics=[G.Topics(name="t", partition_indexes=[0])])]), 9)
            assert f.groups[0].topics[0].partitions[0].committed_offset == 5
            # what was stored and replayed: OffsetCommit records keyed by the group and its consumer
            # group records, no GroupMetadata record; no classic group for the id after the load
            lg = b.storage.log(OFFSETS_TOPIC, group_partition("g", b.coordinator.num_partitions))
            kinds = {key_version(bytes(r[2])) for r in iter_records(lg.read(lg.log_start_offset, 1 << 24))}
            assert 1 in kinds and 3 in kinds and 2 not in kinds
            assert "g" not in b.coordinator.groups.classic_groups()
            lg = await w.call(ListGroupsRequest(states_filter=[], types_filter=[]), 5)
            assert [(x.group_id, x.group_type) for x in lg.groups] == [("g", "consumer")]
            await w.close()
    asyncio.run(go())


def test_classic_member_in_a_consumer_group(tmp_path):
    """A classic member (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) in a consumer group, as Kafka 4.x:
    JoinGroup is its heartbeat (generation = member epoch, no leader), SyncGroup hands out what the
    broker assigned, partitions move only after the consumer member revoked them, REBALANCE_IN_PROGRESS
    asks it to rejoin, commits need generation == epoch; once the consumer group is empty a classic
    JoinGroup replaces it with a classic group."""
    from kohort.protocol.consumer_protocol import (
        ConsumerProtocolSubscription as Sub, decode_assignment, encode_subscription,
    )
    from kohort.protocol.messages.heartbeat import HeartbeatRequest as HBc
    from kohort.protocol.messages.join_group import JoinGroupRequest as J
    from kohort.protocol.messages.leave_group import LeaveGroupRequest as L
    from kohort.protocol.messages.sync_group import SyncGroupRequest as S

    def classic_join(member_id="", owned=()):
        sub = Sub(topics=["t"], user_data=None, owned_partitions=[
            Sub.TopicPartition(topic="t", partitions=list(owned))] if owned else [])
        return J(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=member_id,
                 protocol_type="consumer",
                 protocols=[J.Protocol(name="cooperative-sticky", metadata=encode_subscription(sub))])

    async def sync(w, mid, gen):
        r = await w.call(S(group_id="g", generation_id=gen, member_id=mid, protocol_type="consumer",
                           protocol_name="cooperative-sticky", assignments=[]), 5)
        parts = [] if r.error_code else [p for tp in decode_assignment(r.assignment).assigned_partitions
                                         for p in tp.partitions]
        return r.error_code, sorted(parts)

    async def go():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await _topic(w, "t", 4)
            tid = b.storage.topic("t").topic_id
            await w.call(_join("a"), 1)
            r = await w.call(classic_join(), 9)
            assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED
            cid = r.member_id
            r = await w.call(classic_join(cid), 9)
            assert (r.error_code, r.generation_id, r.leader, r.members, r.protocol_name) == \
                (0, 2, "", [], "cooperative-sticky")
            assert await sync(w, cid, 2) == (0, [])                     # a still owns everything
            assert (await w.call(HBc(group_id="g", generation_id=1, member_id=cid), 4)).error_code == \
                ErrorCode.ILLEGAL_GENERATION
            # the consumer member revokes half
            ra = await w.call(H(group_id="g", member_id="a", member_epoch=1, topic_partitions=[
                H.TopicPartitions(topic_id=tid, partitions=[0, 1, 2, 3])]), 1)
            kept = ra.assignment.topic_partitions
            ra = await w.call(H(group_id="g", member_id="a", member_epoch=1, topic_partitions=kept), 1)
            assert ra.member_epoch == 2
            # the classic member is asked to rejoin, and then gets the freed partitions
            assert (await w.call(HBc(group_id="g", generation_id=2, member_id=cid), 4)).error_code == \
                ErrorCode.REBALANCE_IN_PROGRESS
            r = await w.call(classic_join(cid), 9)
            assert r.error_code == 0 and r.generation_id == 2
            code, mine = await sync(w, cid, 2)
            assert code == 0 and len(mine) == 2 and not set(mine) & set(kept[0].partitions)
            assert (await w.call(HBc(group_id="g", generation_id=2, member_id=cid), 4)).error_code == 0
            d = (await w.call(D(group_ids=["g"], include_authorized_operations=False), 1)).groups[0]
            assert d.group_state == "Stable" and len(d.members) == 2
            # commits: generation must equal the member epoch
            c = await w.call(OC(group_id="g", generation_id_or_member_epoch=2, member_id=cid, topics=[
                OC.Topic(name="t", partitions=[OC.Topic.Partition(partition_index=mine[0], committed_offset=3)])]), 8)
            assert c.topics[0].partitions[0].error_code == 0
            c = await w.call(OC(group_id="g", generation_id_or_member_epoch=1, member_id=cid, topics=[
                OC.Topic(name="t", partitions=[OC.Topic.Partition(partition_index=mine[0], committed_offset=3)])]), 8)
            assert c.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
            # leave: both gone, the group is empty; a classic join then makes it a classic group
            lv = await w.call(L(group_id="g", members=[L.MemberIdentity(member_id=cid)]), 5)
            assert lv.error_code == 0 and lv.members[0].error_code == 0
            await w.call(H(group_id="g", member_id="a", member_epoch=-1), 1)
            r = await w.call(classic_join(), 9)
            assert r.error_code == ErrorCode.MEMBER_ID_REQUIRED
            assert "g" not in b.coordinator.groups.consumer_groups()
            await w.close()
    asyncio.run(go())


def test_offsets_of_a_consumer_group_expire_unless_subscribed(tmp_path):
    """A consumer group's offsets are kept by group id (no classic group for them): with a member,
    those of its subscribed topics stay past offsets.retention.minutes; once it is empty they expire
    and the group with them (Kafka's cleanupGroupMetadata)."""
    async def go():
        async with running_broker(tmp_path, {"offsets.retention.minutes": 1}) as b:
            w = await Wire.connect(b)
            await _topic(w, "t", 1)
            await w.call(_join("a"), 1)
            assert (await w.call(_commit(1), 9)).topics[0].partitions[0].error_code == 0
            rt = b.coordinator
            classic = rt.groups.classic
            assert "g" not in classic.groups
            assert not classic.expire_offsets(rt.clock() + 61_000).appends
            assert rt.groups.committed_offsets("g")           # kept: "a" subscribes to "t"
            await w.call(H(group_id="g", member_id="a", member_epoch=-1), 1)
            out = classic.expire_offsets(rt.clock() + 61_000)
            assert out.appends                                   # now they expire
            rt.apply(out)
            for _ in range(200):                                 # the tombstones are stored, then applied
                if rt.groups.type_of("g") is None and not rt.groups.committed_offsets("g"):
                    break
                await asyncio.sleep(0.01)
            assert rt.groups.type_of("g") is None and not rt.groups.committed_offsets("g")
            await w.close()
    asyncio.run(go())


@pytest.mark.parametrize("value, error", [("consumer", "classic"), ("classic,share", "share"),
                                          ("classic,foo", "foo")])
def test_rebalance_protocols_must_keep_classic_and_name_known_protocols(value, error):
    with pytest.raises(ValueError, match=error):
        BrokerConfig.from_properties({"group.coordinator.rebalance.protocols": value})
    assert BrokerConfig.from_properties({"group.coordinator.rebalance.protocols": "Classic, consumer"})[
        "group.coordinator.rebalance.protocols"] == "classic,consumer"
