"""ShareFetch's MinBytes, MaxWaitMs and MaxBytes on kohort broker in process, over raw requests: a
fetch waits while fewer than MinBytes can be acquired and answers once enough is produced, or at
MaxWaitMs with what there is; MaxBytes is split over the partitions, only the first partition with
data getting a batch larger than its share (the decisions themselves: test_share_fetch_wait.py)."""
from __future__ import annotations

import threading
import time
import uuid

from kohort import Admin, Producer
from kohort.protocol.messages.share_fetch import ShareFetchRequest
from kohort.testing.inprocess import broker
from tests.broker.share.test_share_broker import FAST, _join_until_assigned
from tests.helpers.rawclient import RawClient


def _setup(kb, topic: str, group: str, partitions: int) -> uuid.UUID:
    kb.create_topic(topic, partitions)
    with Admin({"bootstrap.servers": kb.bootstrap_servers}) as admin:
        admin.alter_configs(("group", group), {"share.auto.offset.reset": "earliest"})
        return uuid.UUID(str(admin.describe_topics([topic])[0].topic_id))


def _produce(kb, topic: str, partition: int, values: list[bytes]) -> None:
    with Producer({"bootstrap.servers": kb.bootstrap_servers}) as p:
        for v in values:
            p.send(topic, value=v, partition=partition)
            p.flush()                       # one batch per record


def _fetch(c, group, member, epoch, tid, partitions, *, min_bytes=1, max_wait=0, max_bytes=1 << 20, max_records=500):
    F = ShareFetchRequest.FetchTopic
    parts = [F.FetchPartition(partition_index=i, acknowledgement_batches=[]) for i in partitions]
    t0 = time.monotonic()
    r = c.request(ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=epoch,
                                    max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes, max_records=max_records,
                                    batch_size=500, share_acquire_mode=0, is_renew_ack=False,
                                    topics=[F(topic_id=tid, partitions=parts)], forgotten_topics_data=[]), 2)
    assert r.error_code == 0, r
    acquired = {p.partition_index: [o for a in p.acquired_records for o in range(a.first_offset, a.last_offset + 1)]
                for t in r.responses for p in t.partitions if p.acquired_records}
    return acquired, time.monotonic() - t0


def test_a_fetch_waits_for_min_bytes_then_answers_at_max_wait_or_when_enough_is_produced():
    with broker(FAST) as kb:
        tid = _setup(kb, "mb", "gmb", 2)
        _produce(kb, "mb", 0, [b"a", b"b", b"c"])
        c = RawClient(kb.bootstrap_servers)
        try:
            _join_until_assigned(c, "gmb", "raw-member", "mb", 2)
            # MinBytes 1: the three records at once
            acquired, took = _fetch(c, "gmb", "raw-member", 0, tid, [0, 1], min_bytes=1, max_wait=5000)
            assert acquired == {0: [0, 1, 2]} and took < 2.0
            _produce(kb, "mb", 0, [b"d"])
            # one small record, MinBytes 1 MiB: waited out to MaxWaitMs, then handed out anyway
            acquired, took = _fetch(c, "gmb", "raw-member", 1, tid, [], min_bytes=1 << 20, max_wait=800)
            assert acquired == {0: [3]} and took >= 0.75
            # nothing there, MinBytes 20000: records produced during the wait answer it long before MaxWaitMs
            threading.Timer(0.5, _produce, (kb, "mb", 1, [b"x" * 4000 for _ in range(6)])).start()
            acquired, took = _fetch(c, "gmb", "raw-member", 2, tid, [], min_bytes=20000, max_wait=15000)
            offsets = acquired.get(1, [])
            assert set(acquired) == {1} and 0.4 < took < 8.0, (acquired, took)
            assert offsets == list(range(len(offsets))) and len(offsets) >= 5, offsets   # >= 20000 bytes
        finally:
            c.close()


def test_a_fetch_short_of_min_bytes_stays_short_when_the_new_records_are_too_few():
    """Records arriving during the wait that still leave the fetch below MinBytes do not answer it."""
    with broker(FAST) as kb:
        tid = _setup(kb, "mb2", "gmb2", 1)
        c = RawClient(kb.bootstrap_servers)
        try:
            _join_until_assigned(c, "gmb2", "raw-member", "mb2", 1)
            threading.Timer(0.2, _produce, (kb, "mb2", 0, [b"small"])).start()
            acquired, took = _fetch(c, "gmb2", "raw-member", 0, tid, [0], min_bytes=1 << 20, max_wait=1200)
            assert acquired == {0: [0]} and took >= 1.15, (acquired, took)
        finally:
            c.close()


def test_max_bytes_is_split_over_the_partitions_and_only_the_first_with_data_may_exceed_its_share():
    with broker(FAST) as kb:
        tid = _setup(kb, "mbx", "gmbx", 2)
        for p in (0, 1):
            _produce(kb, "mbx", p, [b"x" * 300, b"y" * 300])
        c = RawClient(kb.bootstrap_servers)
        try:
            _join_until_assigned(c, "gmbx", "raw-member", "mbx", 2)
            # 1 byte in all: partition 0 gets its first batch whole, partition 1 nothing
            acquired, _ = _fetch(c, "gmbx", "raw-member", 0, tid, [0, 1], max_bytes=1)
            assert acquired == {0: [0]}
            # ~1.5 batches per partition: each gets its first batch, the second does not fit
            acquired, _ = _fetch(c, "gmbx", "raw-member", 1, tid, [], max_bytes=2 * 550)
            assert acquired == {0: [1], 1: [0]}, acquired
        finally:
            c.close()


def test_max_bytes_or_max_records_0_fetch_nothing_and_answer_at_once():
    """As Apache Kafka 4.3.1 answers them (test_share_broker_kafka_wire.py): no partition in the answer."""
    with broker(FAST) as kb:
        tid = _setup(kb, "mb0", "gmb0", 1)
        _produce(kb, "mb0", 0, [b"a"])
        c = RawClient(kb.bootstrap_servers)
        try:
            _join_until_assigned(c, "gmb0", "raw-member", "mb0", 1)
            assert _fetch(c, "gmb0", "raw-member", 0, tid, [0], max_bytes=0, max_wait=5000)[0] == {}
            acquired, took = _fetch(c, "gmb0", "raw-member", 1, tid, [], max_records=0, max_wait=5000)
            assert acquired == {} and took < 2.0
            assert _fetch(c, "gmb0", "raw-member", 2, tid, [])[0] == {0: [0]}
        finally:
            c.close()
