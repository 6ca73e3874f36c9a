"""Idempotent producer against kohort's broker: SIGKILL and restart mid-stream loses nothing and
duplicates nothing (every record counted), and order per partition is kept."""
import threading
import time

import pytest

from kohort.client.admin import Admin
from kohort.client.producer import Producer
from kohort.errors import KafkaConnectionError
from kohort.protocol.records import iter_records


def _read_all(addr, topic, partitions):
    """Read every record with kohort's own wire layer (Fetch) — independent of the producer."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": addr, "group.id": "idem-check", "enable.auto.commit": False,
                  "log_level": 0})
    tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
    c.assign(tps)
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    got = {p: [] for p in range(partitions)}
    deadline = time.time() + 60
    while any(len(got[p]) < ends[p] for p in got) and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got[m.partition()].append((m.offset(), m.value()))
    c.close()
    return got, ends


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigkill_restart_mid_stream_no_loss_no_duplicates():
    from tests.helpers.brokers import KohortBroker
    b = KohortBroker()
    b.start()
    try:
        topic = "idem"
        with Admin({"bootstrap.servers": b.bootstrap}) as a:
            assert a.create_topics({topic: 3})[topic] is None
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 2, "batch.size": 4096,
                      "delivery.timeout.ms": 120000, "request.timeout.ms": 5000,
                      "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 50})
        assert p.idempotent
        futs = []
        killed = threading.Event()
        restarted = threading.Event()

        def killer():
            # once records flow, SIGKILL the broker under load and restart it on the same port and dir
            while sum(1 for f in futs[:3000] if f.done()) < 2000:
                time.sleep(0.005)
            b.kill()
            killed.set()
            time.sleep(0.3)
            b.start()
            restarted.set()
        t = threading.Thread(target=killer)
        t.start()
        i = 0
        after = 0
        while after < 20000 and i < 400000:       # produce without pause across the kill and restart
            futs.append(p.produce(topic, f"{i:08d}".encode(), key=f"k{i % 50}".encode()))
            i += 1
            if restarted.is_set():
                after += 1
        total = i
        assert p.flush(120) == 0
        t.join()
        assert killed.is_set()
        assert p.sender.stats["disconnects"] >= 1 and p.sender.stats["retries"] >= 1, p.sender.stats
        errors = [f.exception(0) for f in futs if f.exception(0) is not None]
        assert errors == []
        p.close()
        got, ends = _read_all(b.bootstrap, topic, 3)
        values = [v for p_ in got.values() for _, v in p_]
        assert len(values) == total, f"{len(values)} records in the log for {total} produced"
        assert len(set(values)) == total                      # no duplicate
        assert set(values) == {f"{i:08d}".encode() for i in range(total)}   # no loss
        # per partition (so per key) the order of production is kept
        for recs in got.values():
            seq = [int(v) for _, v in recs]
            assert seq == sorted(seq)
        # and the acknowledged offsets are where the records really are
        where = {(m.partition, m.offset): i for i, m in enumerate(f.result(0) for f in futs)}
        for part, recs in got.items():
            for off, v in recs[:200]:
                assert where[(part, off)] == int(v)
    finally:
        b.stop()
        if b._tmp is not None:
            b._tmp.cleanup()


@pytest.mark.timeout(60)
def test_unreachable_broker_gives_one_clear_error():
    from tests.helpers.brokers import free_port
    port = free_port()
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "max.block.ms": 1500})
    t0 = time.monotonic()
    with pytest.raises(KafkaConnectionError) as ei:
        p.produce("t", b"v")
    assert time.monotonic() - t0 < 5
    msg = str(ei.value)
    assert f"127.0.0.1:{port}" in msg and "bootstrap" in msg and "refused" in msg.lower()
    assert msg.startswith(f"cannot reach any Kafka broker at 127.0.0.1:{port} (")
    p.close()


@pytest.mark.timeout(60)
def test_acks_zero_and_acks_one_and_non_idempotent(kohort_broker):
    addr = kohort_broker.bootstrap
    with Admin({"bootstrap.servers": addr}) as a:
        a.create_topics({"acks": 1})
    for acks in ("0", "1"):
        p = Producer({"bootstrap.servers": addr, "acks": acks})
        assert not p.idempotent
        futs = [p.produce("acks", b"v%d" % i) for i in range(500)]
        p.close()
        mds = [f.result(0) for f in futs]
        if acks == "0":
            assert all(m.offset == -1 for m in mds)
        else:
            assert [m.offset for m in mds] == list(range(500, 1000))
    with Admin({"bootstrap.servers": addr}) as a:
        assert a.list_offsets({("acks", 0): -1})[("acks", 0)] == 1000


@pytest.mark.timeout(60)
def test_on_delivery_callbacks_and_batches_carry_producer_id(kohort_broker):
    addr = kohort_broker.bootstrap
    seen = []
    p = Producer({"bootstrap.servers": addr})
    for i in range(100):
        p.produce("cb", b"%d" % i, on_delivery=lambda err, md: seen.append((err, md)))
    p.flush(10)
    assert len(seen) == 100 and all(e is None for e, _ in seen)
    assert sorted(md.offset for _, md in seen) == list(range(100))
    assert p.sender.producer_id >= 0
    p.close()
    # the batch in the log carries that producer id and sequence 0
    from tests.helpers.rawclient import RawClient
    from kohort.protocol.messages.fetch import FetchRequest
    rc = RawClient(addr)
    try:
        v = min(rc.versions[1][1], 12)
        FT = FetchRequest.FetchTopic
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, rack_id="",
                           topics=[FT(topic="cb", partitions=[FT.FetchPartition(
                               partition=0, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[])
        resp = rc.request(req, v)
        data = bytes(resp.responses[0].partitions[0].records)
        from kohort.protocol.records import read_batch_header
        h = read_batch_header(data)
        assert h.producer_id == p.sender.producer_id and h.base_sequence == 0
        assert len(list(iter_records(data))) == 100
    finally:
        rc.close()


@pytest.fixture
def kohort_broker():
    from tests.helpers.brokers import KohortBroker
    b = KohortBroker()
    b.start()
    try:
        yield b
    finally:
        b.stop()
        if b._tmp is not None:
            b._tmp.cleanup()


@pytest.mark.timeout(60)
def test_a_failed_first_batch_keeps_the_batches_behind_it_from_landing_first(kafka_broker):
    """A broker with no state for a producer id on a partition appends any sequence (as Kafka's
    ProducerAppendInfo does), so until the partition has acknowledged a batch of the producer id only
    one batch of it is in flight: its first batch failing (NOT_LEADER_OR_FOLLOWER, not appended) with
    batches waiting behind it still gives every record once, in order, without error. (With 5 in
    flight from the start, the batches behind it were appended first, and the first one, resent,
    was refused as out of order.)"""
    from kohort.client.consumer import Consumer
    from kohort.structs import TopicPartition
    kafka_broker.create_topic("first", partitions=1)
    kafka_broker.create_topic("first-w", partitions=1)
    bs = kafka_broker.bootstrap_servers
    n = 400
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "batch.size": 2048, "retry.backoff.ms": 10,
                  "delivery.timeout.ms": 8000, "request.timeout.ms": 5000})
    try:
        p.produce("first-w", b"warm").result(10)         # the leader's connection and producer id ready
        # the next Produce's answer is held back, and every answer behind it on the connection (the
        # first batch's NOT_LEADER_OR_FOLLOWER too): batches behind the first one are written before
        # its answer comes
        kafka_broker.delay("Produce", 400)
        kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
        held = p.produce("first-w", b"held")
        deadline = time.monotonic() + 5
        while sum(p.sender.node_requests.values()) < 1 and time.monotonic() < deadline:
            time.sleep(0.005)                            # its request is sent
        futs = [p.produce("first", b"%06d" % i + b"x" * 200, partition=0) for i in range(n)]
        assert p.flush(20) == 0
        assert held.exception(0) is None
        assert [f.exception(0) for f in futs] == [None] * n
        assert [f.result(0).offset for f in futs] == list(range(n))
    finally:
        p.close()
    assert kafka_broker.faults_applied("Produce") == 2
    c = Consumer({"bootstrap.servers": bs, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition("first", 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [int(r.value[:6]) for r in c.poll(0.5)]
    finally:
        c.close()
    assert got == list(range(n))
