"""kohort's transactional producer against real brokers: Apache Kafka 4.3.1 (`kafka1`) and kohort
broker. Commit and abort as read by kohort's read_committed / read_uncommitted consumer (aborted
records and markers skipped, offsets with gaps), zombie fencing of two producers with one
transactional.id, offsets committed in a transaction (visible only once it commits), stale consumer
group metadata refused (abortable), the broker's transaction timeout (fatal for the old producer),
and the call-order errors."""
from __future__ import annotations

import time
import uuid

import pytest

from kohort.client.consumer.consumer import Consumer
from kohort.client.producer import Producer
from kohort.errors import (
    AbortableTransactionError,
    ConfigError,
    FatalTransactionError,
    IllegalTransactionStateError,
    ProducerFencedError,
    TransactionAbortedError,
)
from kohort.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from tests.helpers.brokers import KohortBroker


@pytest.fixture(scope="module")
def kohort_txn_broker():
    with KohortBroker(config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000}) as b:
        yield b


@pytest.fixture(params=["kafka", "kohort"])
def bootstrap(request):
    if request.param == "kafka":
        return request.getfixturevalue("kafka1").bootstrap
    return request.getfixturevalue("kohort_txn_broker").bootstrap


def create(bs: str, topic: str, partitions: int = 1) -> None:
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": bs}) as a:
        assert a.create_topics({topic: partitions}, replication_factor=1)[topic] is None
    c = Consumer({"bootstrap.servers": bs})
    try:
        deadline = time.monotonic() + 30
        while len(c.partitions_for_topic(topic, 5) or []) != partitions:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        c.close()


def read(bs: str, topic: str, isolation: str, partitions: int = 1):
    """(values, end offsets) of the whole topic under `isolation`."""
    c = Consumer({"bootstrap.servers": bs, "isolation.level": isolation, "auto.offset.reset": "earliest"})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = c.end_offsets(tps, 30)
        out = []
        deadline = time.monotonic() + 30
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "could not read to the end"
            out += [(r.offset, r.value) for r in c.poll(0.5)]
        return [v for _, v in sorted(out)], [o for o, _ in sorted(out)], ends
    finally:
        c.close()


def names(tag):
    u = uuid.uuid4().hex[:8]
    return f"txp-{tag}-{u}", f"txid-{tag}-{u}"


def producer(bs, tid, **kw):
    return Producer({"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 2, **kw})


def test_commit_and_abort_read_committed(bootstrap):
    topic, tid = names("ca")
    create(bootstrap, topic)
    with producer(bootstrap, tid) as p:
        p.init_transactions(30)
        p.begin_transaction()
        futs = [p.produce(topic, f"c1-{i}".encode()) for i in range(5)]
        p.commit_transaction(30)
        assert [f.result(0).offset for f in futs] == [0, 1, 2, 3, 4]
        p.begin_transaction()
        aborted = [p.produce(topic, f"a-{i}".encode()) for i in range(5)]
        p.flush(30)
        p.abort_transaction(30)
        assert all(f.result(0).offset >= 0 for f in aborted)      # written, then aborted
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, f"c2-{i}".encode())
        p.commit_transaction(30)
    committed, offsets, ends = read(bootstrap, topic, "read_committed")
    assert committed == [f"c1-{i}".encode() for i in range(5)] + [f"c2-{i}".encode() for i in range(5)]
    assert offsets == [0, 1, 2, 3, 4, 12, 13, 14, 15, 16]      # markers at 5, 11, 17; aborted 6-10 skipped
    assert ends[TopicPartition(topic, 0)] == 18
    everything, _, _ = read(bootstrap, topic, "read_uncommitted")
    assert len(everything) == 15 and everything[5:10] == [f"a-{i}".encode() for i in range(5)]


def test_abort_drops_records_not_yet_sent(bootstrap):
    topic, tid = names("drop")
    create(bootstrap, topic)
    with producer(bootstrap, tid, **{"linger.ms": 60000, "batch.size": 1 << 20}) as p:
        p.init_transactions(30)
        p.begin_transaction()
        fut = p.produce(topic, b"never")                 # lingering: not sent when the abort comes
        p.abort_transaction(30)
        with pytest.raises(TransactionAbortedError):
            fut.result(10)
        p.begin_transaction()
        p.produce(topic, b"kept")
        p.commit_transaction(30)
    assert read(bootstrap, topic, "read_uncommitted")[0] == [b"kept"]


def test_zombie_is_fenced(bootstrap):
    topic, tid = names("fence")
    create(bootstrap, topic)
    old = producer(bootstrap, tid)
    new = producer(bootstrap, tid)
    try:
        old.init_transactions(30)
        old.begin_transaction()
        old.produce(topic, b"zombie").result(30)         # written inside an open transaction
        new.init_transactions(60)                        # fences `old` and aborts its transaction
        with pytest.raises(FatalTransactionError) as ei:
            old.commit_transaction(30)
        assert isinstance(ei.value.cause, ProducerFencedError) and not ei.value.abortable
        with pytest.raises(FatalTransactionError):
            old.begin_transaction()                      # and it stays unusable
        new.begin_transaction()
        new.produce(topic, b"new")
        new.commit_transaction(30)
    finally:
        old.close(5)
        new.close(5)
    assert read(bootstrap, topic, "read_committed")[0] == [b"new"]


def test_call_order_and_config_errors(bootstrap):
    topic, tid = names("order")
    create(bootstrap, topic)
    with pytest.raises(ConfigError):
        Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "acks": 1})
    with pytest.raises(ConfigError):
        Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "enable.idempotence": False})
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        with pytest.raises(IllegalTransactionStateError):
            plain.begin_transaction()
    with producer(bootstrap, tid) as p:
        with pytest.raises(IllegalTransactionStateError):
            p.produce(topic, b"x")                       # before init_transactions
        p.init_transactions(30)
        with pytest.raises(IllegalTransactionStateError):
            p.produce(topic, b"x")                       # outside a transaction
        with pytest.raises(IllegalTransactionStateError):
            p.commit_transaction(5)
        p.begin_transaction()
        p.commit_transaction(30)                         # an empty transaction is fine


def test_compiled_produce_follows_the_transaction(kohort_txn_broker):
    """With the C extension, produce() of a transactional producer takes the compiled path for the
    partitions its transaction holds; after commit or abort, and outside a transaction, it raises as
    the Python produce does, and read_committed sees exactly the committed records."""
    bs = kohort_txn_broker.bootstrap
    topic, tid = names("fast")
    create(bs, topic, 2)
    with producer(bs, tid) as p:
        compiled = type(p.produce).__name__ == "FastProduce"
        p.init_transactions(30)
        for rnd, end in enumerate(("commit", "abort", "commit")):
            p.begin_transaction()
            for i in range(200):
                p.produce(topic, f"{end}-{rnd}-{i}".encode(), partition=i % 2)
            if compiled:
                assert p._txn.sendable == {(topic, 0), (topic, 1)}
            if end == "commit":
                p.commit_transaction(30)
            else:
                p.flush(30)
                p.abort_transaction(30)
            assert p._txn.sendable == set()
            with pytest.raises(IllegalTransactionStateError):
                p.produce(topic, b"outside", partition=0)
    got = sorted(read(bs, topic, "read_committed", 2)[0])
    assert got == sorted(f"commit-{r}-{i}".encode() for r in (0, 2) for i in range(200))


def _group_member(bs, topic, group, protocol="classic"):
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "group.protocol": protocol})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while not c.assignment():
        assert time.monotonic() < deadline, "no assignment"
        c.poll(0.2)
    return c


def test_send_offsets_visible_only_after_commit(bootstrap):
    src, tid = names("off")
    create(bootstrap, src)
    group = "g-" + src
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        for i in range(10):
            plain.produce(src, f"{i}".encode())
    c = _group_member(bootstrap, src, group)
    try:
        meta = c.group_metadata()
        assert isinstance(meta, ConsumerGroupMetadata)
        assert meta.group_id == group and meta.generation_id >= 1 and meta.member_id
        tp = TopicPartition(src, 0)
        with producer(bootstrap, tid) as p:
            p.init_transactions(30)
            p.begin_transaction()
            p.send_offsets_to_transaction({tp: OffsetAndMetadata(4)}, meta, 30)
            p.abort_transaction(30)
            assert c.committed([tp], 30).get(tp) is None        # aborted: nothing committed
            p.begin_transaction()
            p.send_offsets_to_transaction({tp: OffsetAndMetadata(7, "m")}, meta, 30)
            p.commit_transaction(30)
        deadline = time.monotonic() + 30
        while True:            # the commit marker reaches the group coordinator asynchronously
            om = c.committed([tp], 30).get(tp)
            if om is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert om is not None and om.offset == 7 and om.metadata == "m"
    finally:
        c.close()


def test_stale_group_metadata_is_abortable(bootstrap):
    src, tid = names("stale")
    create(bootstrap, src)
    group = "g-" + src
    c = _group_member(bootstrap, src, group)
    try:
        meta = c.group_metadata()
        stale = ConsumerGroupMetadata(group, meta.generation_id + 5, meta.member_id, None)
        with producer(bootstrap, tid) as p:
            p.init_transactions(30)
            p.begin_transaction()
            with pytest.raises(AbortableTransactionError) as ei:
                p.send_offsets_to_transaction({TopicPartition(src, 0): OffsetAndMetadata(1)}, stale, 30)
            assert ei.value.abortable
            with pytest.raises(AbortableTransactionError):
                p.commit_transaction(30)
            p.abort_transaction(30)                       # abortable: the producer goes on
            p.begin_transaction()
            p.send_offsets_to_transaction({TopicPartition(src, 0): OffsetAndMetadata(1)}, c.group_metadata(), 30)
            p.commit_transaction(30)
    finally:
        c.close()


def test_send_offsets_with_a_kip848_member_on_kafka(kafka1):
    # under KIP-848 the generation sent is the member epoch (Java's groupMetadata()); Kafka checks it
    bs = kafka1.bootstrap
    src, tid = names("k848")
    create(bs, src)
    group = "g-" + src
    c = _group_member(bs, src, group, "consumer")
    try:
        meta = c.group_metadata()
        assert meta.generation_id >= 1 and meta.member_id
        tp = TopicPartition(src, 0)
        with producer(bs, tid) as p:
            p.init_transactions(30)
            p.begin_transaction()
            with pytest.raises(AbortableTransactionError):     # a stale member epoch is fenced
                p.send_offsets_to_transaction({tp: OffsetAndMetadata(1)},
                                              ConsumerGroupMetadata(group, meta.generation_id + 3, meta.member_id), 30)
            p.abort_transaction(30)
            p.begin_transaction()
            p.send_offsets_to_transaction({tp: OffsetAndMetadata(3)}, c.group_metadata(), 30)
            p.commit_transaction(30)
        deadline = time.monotonic() + 30
        while (c.committed([tp], 30).get(tp) is None) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert c.committed([tp], 30)[tp].offset == 3
    finally:
        c.close()


@pytest.mark.slow
def test_transaction_timeout_aborts_and_fences_the_producer(bootstrap):
    topic, tid = names("timeout")
    create(bootstrap, topic)
    with producer(bootstrap, tid, **{"transaction.timeout.ms": 1000}) as p:
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"late").result(30)
        # the broker's abort scan (Kafka: every 10 s) aborts it and bumps the epoch
        deadline = time.monotonic() + 40
        while read(bootstrap, topic, "read_committed")[2][TopicPartition(topic, 0)] < 2:
            assert time.monotonic() < deadline, "the broker did not abort the timed-out transaction"
            time.sleep(0.5)
        with pytest.raises(FatalTransactionError):
            p.commit_transaction(30)
    assert read(bootstrap, topic, "read_committed")[0] == []
    with producer(bootstrap, tid) as again:              # a new producer takes over
        again.init_transactions(30)
        again.begin_transaction()
        again.produce(topic, b"ok")
        again.commit_transaction(30)
    assert read(bootstrap, topic, "read_committed")[0] == [b"ok"]
