"""A partition whose leader is down (Metadata names leader -1, LEADER_NOT_AVAILABLE) and comes back:
the client's metadata keeps being refreshed (after retry.backoff.ms) until a leader is named, and a
consumer fetches such a partition once its leader returns, while it fetches its other partitions all
along. Real sockets: kohort's Cluster against the scripted cluster, kohort's Consumer against
kohort's in-process broker."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from kohort import Consumer
from kohort.client.cluster import Cluster, Snapshot
from kohort.client.network import NetworkClient
from kohort.errors import ErrorCode
from kohort.structs import OffsetAndMetadata, TopicPartition
from kohort.testing.plugin import kafka_broker  # noqa: F401
from tests.helpers.peers import create_topic, produce
from tests.helpers.scripted_broker import ScriptedCluster


def _pump(cluster: Cluster, cond, timeout: float) -> bool:
    """Call maybe_refresh() every 50 ms, as the consumer's and the producer's poll loops do, until
    cond() holds or the time is up."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        cluster.maybe_refresh()
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_metadata_is_refreshed_while_a_partition_has_no_leader():
    sc = ScriptedCluster(2, {"t": 2})
    sc.move_leader("t", 1, -1)
    conf = {"bootstrap.servers": sc.bootstrap, "retry.backoff.ms": 50, "retry.backoff.max.ms": 400,
            "metadata.max.age.ms": 300_000}
    net = NetworkClient(conf)
    cluster = Cluster(net, conf)
    try:
        cluster.add_topics({"t"})
        cluster.refresh(10.0)
        assert cluster.leader_for(TopicPartition("t", 1)) is None
        assert cluster.partition_info(TopicPartition("t", 1)).error_code == ErrorCode.LEADER_NOT_AVAILABLE
        # nobody asks for a refresh: the leaderless partition alone keeps metadata being refreshed
        seen = sc.metadata_requests
        assert _pump(cluster, lambda: sc.metadata_requests >= seen + 2, 5.0), sc.metadata_requests
        # while the answers stay stale the wait doubles (50, 100, 200, 400, 400 ms...): over 2 s a
        # handful of requests, not the forty a flat 50 ms would send
        seen = sc.metadata_requests
        _pump(cluster, lambda: False, 2.0)
        assert 2 <= sc.metadata_requests - seen <= 8, sc.metadata_requests - seen
        sc.move_leader("t", 1, 1)
        assert _pump(cluster, lambda: cluster.leader_for(TopicPartition("t", 1)) == 1, 5.0)
        # a leader is named: refreshes stop (metadata.max.age.ms is 5 minutes)
        _pump(cluster, lambda: False, 0.3)
        settled = sc.metadata_requests
        _pump(cluster, lambda: False, 0.6)
        assert sc.metadata_requests == settled
    finally:
        net.close()
        sc.close()


def _leaderless(cluster: Cluster, tp: TopicPartition) -> None:
    """Load the metadata, then make `tp` leaderless in it, as a Kafka whose only replica of `tp` is
    down answers (leader -1, LEADER_NOT_AVAILABLE). No refresh is due or under way afterwards: only
    the client's own reaction to the leaderless partition can bring a leader back."""
    cluster.add_topics({tp.topic})
    cluster.refresh(10.0)
    while (pending := cluster.maybe_refresh()) is not None:
        pending.result(10.0)
    with cluster._lock:
        s = cluster.snapshot
        parts = dict(s.partitions)
        parts[tp] = replace(parts[tp], leader=-1, error_code=ErrorCode.LEADER_NOT_AVAILABLE)
        cluster.snapshot = Snapshot(brokers=s.brokers, partitions=parts, topics=s.topics,
                                    topic_ids=s.topic_ids, topic_errors=s.topic_errors,
                                    internal_topics=s.internal_topics, cluster_id=s.cluster_id,
                                    controller_id=s.controller_id, updated_at=s.updated_at,
                                    version=s.version + 1)


def _count(c: Consumer, want: dict[int, int], timeout: float) -> dict[int, int]:
    got = {p: 0 for p in want}
    end = time.monotonic() + timeout
    while got != want and time.monotonic() < end:
        for r in c.poll(0.2):
            got[r.partition] += 1
    return got


@pytest.mark.parametrize("committed", [False, True], ids=["seek", "committed-with-epoch"])
def test_consumer_fetches_a_partition_once_its_leader_is_named(kafka_broker, committed):  # noqa: F811
    """Handed two partitions while its metadata says partition 1 has no leader, the consumer fetches
    partition 0 all along and partition 1 within seconds, long before metadata.max.age.ms (5 min)
    would refresh the metadata. With a committed offset that carries a leader epoch (what a group
    member taking over a partition finds) the position first waits for validation (KIP-320,
    OffsetForLeaderEpoch to the leader), which needs a leader too."""
    bs = kafka_broker.bootstrap_servers
    topic = f"leaderless-{int(committed)}"
    create_topic(bs, topic, 2)
    produce(bs, topic, 200, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    conf = {"bootstrap.servers": bs, "metadata.max.age.ms": 300_000, "retry.backoff.ms": 100,
            "fetch.max.wait.ms": 100, "enable.auto.commit": False}
    if committed:
        conf["group.id"] = f"g-{topic}"
        with Consumer(conf) as first:
            first.assign([tp0, tp1])
            first.commit({tp0: OffsetAndMetadata(10, "", 0), tp1: OffsetAndMetadata(10, "", 0)})
    with Consumer(conf) as c:
        _leaderless(c._cluster, tp1)
        c.assign([tp0, tp1])
        if not committed:
            c.seek(tp0, 10)
            c.seek(tp1, 10)
        assert _count(c, {0: 90, 1: 90}, 10.0) == {0: 90, 1: 90}
        assert c._cluster.leader_for(tp1) is not None


def test_assigned_partitions_start_at_the_groups_committed_offsets(kafka_broker):  # noqa: F811
    """assign() with a group.id and no other call that would find the coordinator: poll() looks the
    coordinator up itself and starts from the committed offsets (Java's refreshCommittedOffsetsIfNeeded)."""
    bs = kafka_broker.bootstrap_servers
    create_topic(bs, "assigned-committed", 2)
    produce(bs, "assigned-committed", 200, partitions=2)
    tps = [TopicPartition("assigned-committed", p) for p in range(2)]
    conf = {"bootstrap.servers": bs, "group.id": "g-assigned-committed", "enable.auto.commit": False,
            "fetch.max.wait.ms": 100}
    with Consumer(conf) as first:
        first.assign(tps)
        first.commit({tps[0]: OffsetAndMetadata(30), tps[1]: OffsetAndMetadata(60)})
    with Consumer(conf) as c:
        c.assign(tps)
        assert _count(c, {0: 70, 1: 40}, 10.0) == {0: 70, 1: 40}
        assert [c.position(tp) for tp in tps] == [100, 100]
