"""Committed offsets of a KIP-848 consumer group, one raw conversation held with kohort broker and with
Apache Kafka 4.x (`kafka1`), answers compared: an admin commit making a simple (classic) group that a
consumer-protocol join then replaces, the consumer group validating commits and fetches (epoch,
member, OffsetCommit version), OffsetDelete of subscribed and other topics, what ListGroups and
DescribeGroups say of a consumer group with members, empty with only offsets left, and without
offsets, and DeleteGroups taking the offsets with the group."""
from __future__ import annotations

import time
import uuid

from kohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as H
from kohort.protocol.messages.create_topics import CreateTopicsRequest as CT
from kohort.protocol.messages.delete_groups import DeleteGroupsRequest as DelG
from kohort.protocol.messages.describe_groups import DescribeGroupsRequest as DG
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest as FC
from kohort.protocol.messages.list_groups import ListGroupsRequest as LG
from kohort.protocol.messages.offset_commit import OffsetCommitRequest as OC
from kohort.protocol.messages.offset_delete import OffsetDeleteRequest as OD
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest as OF
from tests.helpers.brokers import KohortBroker
from tests.helpers.rawclient import RawClient


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _offsets_conversation(bs: str) -> list:
    c = RawClient(bs)
    g, h, topic, other = uniq("off"), uniq("off"), uniq("off"), uniq("off")
    try:
        r = c.request(CT(timeout_ms=10000, topics=[
            CT.CreatableTopic(name=t, num_partitions=2, replication_factor=1) for t in (topic, other)]), 7)
        assert all(t.error_code == 0 for t in r.topics), r
        deadline = time.monotonic() + 60
        for gid in (g, h):
            while c.request(FC(key=gid, key_type=0), 3).error_code and time.monotonic() < deadline:
                time.sleep(0.2)

        def retry(req, version, code):
            while True:
                r = c.request(req, version)
                if code(r) not in (14, 15, 16) or time.monotonic() > deadline:
                    return r
                time.sleep(0.2)

        def hb(mid, epoch, group=g, **kw):
            r = retry(H(group_id=group, member_id=mid, member_epoch=epoch, **kw), 1, lambda r: r.error_code)
            return r.error_code, r.member_epoch

        def join(mid, group=g):
            return hb(mid, 0, group, rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])

        def commit(mid, epoch, t=topic, version=9, group=g):
            P = OC.Topic.Partition
            r = retry(OC(group_id=group, generation_id_or_member_epoch=epoch, member_id=mid, topics=[
                OC.Topic(name=t, partitions=[P(partition_index=0, committed_offset=7)])]), version,
                lambda r: r.topics[0].partitions[0].error_code)
            return r.topics[0].partitions[0].error_code

        def fetch(mid=None, epoch=-1, group=g):
            G = OF.Group
            r = retry(OF(groups=[G(group_id=group, member_id=mid, member_epoch=epoch, topics=[
                G.Topics(name=t, partition_indexes=[0]) for t in (topic, other)])]), 9,
                lambda r: r.groups[0].error_code)
            x = r.groups[0]
            return x.error_code, sorted((t.name == topic, p.partition_index, p.committed_offset, p.error_code)
                                        for t in x.topics for p in t.partitions)

        def listed(group=g):
            r = c.request(LG(states_filter=[], types_filter=[]), 5)
            busy = {"Assigning": "rebalancing", "Reconciling": "rebalancing"}   # Kafka 4.3 assigns in batches
            return [(x.group_type, x.protocol_type, busy.get(x.group_state, x.group_state))
                    for x in r.groups if x.group_id == group]

        def described(group=g):
            x = c.request(DG(groups=[group]), 6).groups[0]
            return (x.error_code, (x.error_message or "").replace(group, "G"), x.group_state, x.protocol_type,
                    len(x.members))

        obs = [("admin commit to a new id", commit("", -1))]
        obs.append(("simple group listed", listed()))
        obs.append(("simple group described", described()))
        obs.append(("commit with a generation to an unknown id", commit("m", 1, group=uniq("none"))))
        e, epoch = join("a")
        obs.append(("consumer join over the simple group", e))
        obs.append(("listed once, as a consumer group", [x[:2] for x in listed()]))
        obs.append(("described as not classic", described()))
        obs.append(("the simple group's offsets kept", fetch()))
        obs.append(("commit at the member epoch", commit("a", epoch)))
        obs.append(("commit at a newer epoch", commit("a", epoch + 1)))
        obs.append(("commit by an unknown member", commit("nobody", epoch)))
        obs.append(("commit v8 by a consumer-protocol member", commit("a", epoch, version=8)))
        obs.append(("admin commit while a member is in", commit("", -1)))
        obs.append(("fetch at the member epoch", fetch("a", epoch)))
        obs.append(("fetch at a newer epoch", fetch("a", epoch + 1)))
        obs.append(("fetch by an unknown member", fetch("nobody", epoch)))
        od = c.request(OD(group_id=g, topics=[OD.Topic(name=t, partitions=[OD.Topic.Partition(partition_index=0)])
                                             for t in (topic, other)]), 0)
        obs.append(("offset delete with a member", od.error_code,
                    sorted((t.name == topic, [p.error_code for p in t.partitions]) for t in od.topics)))
        obs.append(("a leaves", hb("a", -1)[0]))
        obs.append(("empty consumer group with offsets listed", listed()))
        obs.append(("admin commit to the empty consumer group", commit("", -1, t=other)))
        obs.append(("still a consumer group", [x[:2] for x in listed()], described()))
        od = c.request(OD(group_id=g, topics=[OD.Topic(name=topic, partitions=[OD.Topic.Partition(partition_index=0)])]),
                       0)
        obs.append(("offset delete when empty", od.error_code, [p.error_code for p in od.topics[0].partitions]))
        obs.append(("offsets left", fetch()))
        e, _ = join("b", group=h)
        obs.append(("a consumer group without offsets", e, hb("b", -1, group=h)[0], listed(h), described(h)))
        dr = c.request(DelG(groups_names=[g, h]), 2)
        obs.append(("delete both", sorted((x.group_id == g, x.error_code) for x in dr.results)))
        obs.append(("gone", listed(), listed(h), described(), fetch()))
        obs.append(("commit with an epoch after deletion", commit("a", epoch)))
        return obs
    finally:
        c.sock.close()


def test_consumer_group_offsets_conversation_matches_apache_kafka(kafka1):
    with KohortBroker() as kb:
        ours = _offsets_conversation(kb.bootstrap)
    theirs = _offsets_conversation(kafka1.bootstrap)
    assert len(ours) == len(theirs)
    diffs = [(o, t) for o, t in zip(ours, theirs) if o != t]
    assert not diffs, "\n".join(f"kohort {o}\nkafka  {t}" for o, t in diffs)
