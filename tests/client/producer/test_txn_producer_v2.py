"""kohort's transactional producer speaks transactions v2 (KIP-890 part 2) where the broker finalized
transaction.version >= 2 -- Produce v12 and TxnOffsetCommit v5 add their partitions themselves (no
AddPartitionsToTxn, no AddOffsetsToTxn), EndTxn v5 bumps the epoch of every transaction -- and v1
elsewhere: on kohort broker at transaction.version 1 and 2 (the versions it served, from its
metrics) and on Apache Kafka 4.3.1."""
from __future__ import annotations

import uuid

import pytest

from kohort.client.producer import Producer
from kohort.structs import ConsumerGroupMetadata, TopicPartition
from tests.helpers.brokers import KohortBroker, free_port
from tests.interop.test_txn_copier import versions_seen
from tests.client.producer.test_txn_producer_kafka import create, read


@pytest.fixture(scope="module")
def tv_broker():
    made = {}

    def get(tv):
        if tv not in made:
            made[tv] = KohortBroker(config={"transaction.version": tv}, metrics_port=free_port()).start()
        return made[tv]
    try:
        yield get
    finally:
        for b in made.values():
            b.stop()


def _three_transactions(bs: str) -> tuple[Producer, list[int]]:
    """commit (records on 2 partitions + a group's offsets), abort, commit; returns the producer
    (closed) and its epoch after init and after each transaction."""
    u = uuid.uuid4().hex[:8]
    topic, group = f"tv-{u}", f"tvg-{u}"
    create(bs, topic, 2)
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"tvid-{u}"})
    epochs = []
    try:
        p.init_transactions(30)
        epochs.append(p._txn.producer_epoch)
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, b"c1-%d" % i, partition=i % 2)
        p.send_offsets_to_transaction({TopicPartition(topic, 0): 7}, ConsumerGroupMetadata(group), 30)
        p.commit_transaction(30)
        epochs.append(p._txn.producer_epoch)
        p.begin_transaction()
        p.produce(topic, b"aborted", partition=0)
        p.abort_transaction(30)
        epochs.append(p._txn.producer_epoch)
        p.begin_transaction()
        p.produce(topic, b"c2", partition=1)
        p.commit_transaction(30)
        epochs.append(p._txn.producer_epoch)
    finally:
        p.close(10)
    got, _, _ = read(bs, topic, "read_committed", 2)
    assert sorted(got) == [b"c1-0", b"c1-1", b"c1-2", b"c1-3", b"c2"]
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": bs}) as a:
        committed = a.list_group_offsets(group)
    assert {(tp.topic, tp.partition): om.offset for tp, om in committed.items()} == {(topic, 0): 7}
    return p, epochs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tv", [1, 2])
def test_kohort_broker_transaction_version_decides_v1_or_v2(tv_broker, tv):
    broker = tv_broker(tv)
    p, epochs = _three_transactions(broker.bootstrap)
    seen = versions_seen(broker)
    if tv == 2:
        assert p.sender.txn_features.get("transaction.version") == 2
        assert epochs == [epochs[0] + k for k in range(4)], epochs      # EndTxn v5: one bump each
        assert seen["EndTxn"] == {5} and seen["TxnOffsetCommit"] == {5} and seen["Produce"] == {12}, seen
        assert "AddPartitionsToTxn" not in seen and "AddOffsetsToTxn" not in seen, seen
    else:
        assert p.sender.txn_features.get("transaction.version", 0) < 2
        assert epochs == [epochs[0]] * 4, epochs
        assert seen["EndTxn"] == {4} and seen["TxnOffsetCommit"] == {4} and max(seen["Produce"]) <= 11, seen
        assert seen["AddPartitionsToTxn"] == {3} and seen["AddOffsetsToTxn"], seen


@pytest.mark.timeout(180)
def test_apache_kafka_speaks_v2_with_kohort(kafka1):
    p, epochs = _three_transactions(kafka1.bootstrap)
    assert p.sender.txn_features.get("transaction.version", 0) >= 2
    assert epochs == [epochs[0] + k for k in range(4)], epochs


@pytest.mark.timeout(120)
def test_apache_kafka_holds_a_next_transaction_until_its_markers(kafka1):
    """Apache Kafka answers EndTxn before it writes the markers, and holds (retrying every 20 ms) a next
    transaction's first Produce that arrives meanwhile. kohort's producer sees such a held first batch
    and then sends the next transactions' first batches MARKER_GAP_MS after EndTxn's answer; every
    transaction still commits, in order."""
    from kohort.client import producer as kp
    u = uuid.uuid4().hex[:8]
    topic = f"gap-{u}"
    create(kafka1.bootstrap, topic)
    p = Producer({"bootstrap.servers": kafka1.bootstrap, "transactional.id": f"gapid-{u}"})
    txns, per = 150, 20
    try:
        p.init_transactions(30)
        for t in range(txns):
            p.begin_transaction()
            for i in range(per):
                p.produce(topic, b"%d-%d" % (t, i))
            p.commit_transaction(30)
        assert 0 < p.sender.marker_gap_txns <= kp.MARKER_GAP_TXNS, "no held first Produce was seen"
    finally:
        p.close(10)
    got, _, _ = read(kafka1.bootstrap, topic, "read_committed")
    assert got == [b"%d-%d" % (t, i) for t in range(txns) for i in range(per)]
