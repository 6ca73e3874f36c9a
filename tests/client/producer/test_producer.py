"""Producer building blocks without a broker: murmur2/partitioners, the accumulator, batch bytes."""
import os
import random
import threading
import time

import pytest

from kohort.client.accumulator import ProducerBatch, RecordAccumulator
from kohort.client.partitioner import DefaultPartitioner, StickyPartitioner, murmur2, partition_for_key
from kohort.errors import ConfigError, KafkaTimeoutError
from kohort.protocol.compression import COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_SNAPPY, COMPRESSION_ZSTD
from kohort.protocol.records import (
    BATCH_HEADER_SIZE, decode_batch, read_batch_header, validate_batch, write_batch_buffer,
)


# -- murmur2 ----------------------------------------------------------------------------------------
def test_murmur2_java_vectors():
    # values from the Java client's Utils.murmur2 (UtilsTest)
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482


def test_murmur2_matches_kafka_python_port_on_random_bytes():
    from kafka.partitioner.default import murmur2 as kp_murmur2
    rng = random.Random(7)
    for _ in range(3000):
        data = rng.randbytes(rng.randrange(0, 64))
        # kafka-python returns the unsigned 32-bit value; ours is Java's signed int
        assert murmur2(data) & 0xFFFFFFFF == kp_murmur2(data) & 0xFFFFFFFF


def test_partition_for_key_is_to_positive_mod():
    for key in (b"", b"a", b"abc", os.urandom(33)):
        h = murmur2(key)
        assert partition_for_key(key, 12) == (h & 0x7FFFFFFF) % 12
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_partitioner_sticks_until_batch_closes_then_moves():
    sp = StickyPartitioner(random.Random(1))
    first = sp.partition("t", 6)
    assert all(sp.partition("t", 6) == first for _ in range(100))
    moved = sp.on_new_batch("t", 6, None, first)
    assert moved != first and sp.partition("t", 6) == moved
    # a stale notification for a partition that is no longer sticky changes nothing
    assert sp.on_new_batch("t", 6, None, first) == moved


def test_sticky_partitioner_prefers_available_partitions():
    sp = StickyPartitioner(random.Random(3))
    seen = set()
    for _ in range(50):
        p = sp.partition("t", 8, [2, 5])
        seen.add(p)
        sp.on_new_batch("t", 8, [2, 5], p)
    assert seen == {2, 5}


def test_default_partitioner_kinds():
    dp = DefaultPartitioner()
    assert dp.partition("t", b"key", 10) == partition_for_key(b"key", 10)
    assert DefaultPartitioner("murmur2").partition("t", None, 10) == partition_for_key(b"", 10)
    with pytest.raises(ConfigError, match="unknown partitioner"):
        DefaultPartitioner("nope")


# -- batches ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", [0, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD])
def test_batch_bytes_decode_with_keys_headers_timestamps(codec):
    b = ProducerBatch("t", 0, 0, 1 << 20, 0)
    rows = []
    for i in range(200):
        key = None if i % 3 == 0 else f"k{i}".encode()
        value = None if i == 7 else os.urandom(i % 150)
        headers = [("h", b"x"), ("n", None)] if i % 5 == 0 else None
        ts = 1_700_000_000_000 + (i // 50) - (3 if i == 120 else 0)     # one record out of order
        assert b.try_append(key, value, headers, ts) is not None
        rows.append((key, value, headers or [], ts))
    wire = b.seal(42, 3, 17, codec)
    h = validate_batch(wire)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (42, 3, 17, 200)
    assert h.compression == codec
    recs = decode_batch(wire)
    recs = list(recs[1] if isinstance(recs, tuple) else recs)
    assert [(r.key, r.value, [tuple(x) for x in r.headers], r.timestamp) for r in recs] == \
        [(k, v, [tuple(x) for x in hs], ts) for k, v, hs, ts in rows]
    assert [r.offset for r in recs] == list(range(200))
    assert h.max_timestamp == max(r[3] for r in rows)
    # future metadata reads the per-record timestamp
    b.complete(1000, -1, None)


@pytest.mark.parametrize("codec", [0, COMPRESSION_LZ4])
def test_a_batch_is_sealed_in_place_uncompressed_and_from_its_records_compressed(codec):
    """An uncompressed batch's wire bytes are its own buffer (header written into the room in front
    of the records: no copy, no fresh buffer of its size), the bytes write_batch_buffer makes of
    the same records; a compressed one is made from the records section alone. Sealing again (a new
    epoch) rewrites the header where it is."""
    b = ProducerBatch("t", 0, 0, 1 << 20, 0)
    for i in range(50):
        b.try_append(None if i % 2 else b"k", b"v" * i, None, 1_700_000_000_000 + i)
    records = bytes(b.buf[BATCH_HEADER_SIZE:])
    expected = write_batch_buffer(records, 50, b.base_ts, b.max_ts, compression=codec, producer_id=42,
                                  producer_epoch=3, base_sequence=17)
    buf = b.buf
    wire = b.seal(42, 3, 17, codec)
    assert wire == expected and (wire is buf) == (codec == 0)
    again = b.seal(42, 4, 0, codec)
    assert read_batch_header(again).producer_epoch == 4 and validate_batch(again).records_count == 50
    assert bytes(b.buf[BATCH_HEADER_SIZE:]) == records if codec else again is buf


def test_batch_respects_size_limit_but_first_record_always_fits():
    b = ProducerBatch("t", 0, 0, 1000, 0)
    assert b.try_append(None, b"x" * 5000, None, 1) is not None      # oversize first record
    assert b.try_append(None, b"y", None, 1) is None
    b2 = ProducerBatch("t", 0, 0, 1000, 0)
    n = 0
    while b2.try_append(None, b"z" * 50, None, 1) is not None:
        n += 1
    assert 10 < n < 20 and len(b2.seal(-1, -1, -1, 0)) <= 1000


# -- accumulator ------------------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.ms = 1_000_000

    def __call__(self):
        return self.ms


def make_acc(clock, **kw):
    args = dict(batch_size=1000, linger_ms=5, buffer_memory=1 << 20, max_block_ms=200,
                delivery_timeout_ms=10_000, retry_backoff_ms=100, clock_ms=clock)
    args.update(kw)
    return RecordAccumulator(**args)


def test_accumulator_batches_by_size_and_linger():
    clock = Clock()
    acc = make_acc(clock)
    futs = [acc.append("t", 0, None, b"v" * 90, None, 1)[0] for _ in range(25)]
    assert len(acc.batches[("t", 0)]) >= 3                       # ~9 records of 100 B per 1000 B batch
    leader = lambda t, p: 1  # noqa: E731
    nodes, _, unknown = acc.ready(clock(), leader, lambda n: True)
    assert nodes == {1} and not unknown                           # full batches are ready at once
    drained = acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True)
    assert len(drained) == 1 and drained[0].closed
    # the last, open batch waits for linger.ms
    while len(acc.batches[("t", 0)]) > 1:
        acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True)
    nodes, wait_ms, _ = acc.ready(clock(), leader, lambda n: True)
    assert nodes == set() and 0 < wait_ms <= 5
    clock.ms += 5
    nodes, _, _ = acc.ready(clock(), leader, lambda n: True)
    assert nodes == {1}
    assert futs[0].batch is drained[0] and futs[0].delta == 0


def test_accumulator_unknown_leader_reported():
    clock = Clock()
    acc = make_acc(clock, linger_ms=0)
    acc.append("t", 0, None, b"v", None, 1)
    nodes, _, unknown = acc.ready(clock(), lambda t, p: None, lambda n: True)
    assert nodes == set() and unknown == {"t"}


def test_buffer_memory_backpressure_gives_a_clear_error():
    acc = RecordAccumulator(batch_size=1000, linger_ms=5, buffer_memory=3000, max_block_ms=150,
                            delivery_timeout_ms=10_000, retry_backoff_ms=100,
                            clock_ms=lambda: int(time.monotonic() * 1000))
    for p in range(3):
        acc.append("t", p, None, b"v", None, 1)
    t0 = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match=r"buffer.memory \(3000 bytes\) is full.*max.block.ms \(150 ms\)"):
        acc.append("t", 3, None, b"v", None, 1)
    assert 0.12 < time.monotonic() - t0 < 2


def test_buffer_memory_unblocks_when_a_batch_completes():
    acc = RecordAccumulator(batch_size=1000, linger_ms=5, buffer_memory=2000, max_block_ms=5000,
                            delivery_timeout_ms=10_000, retry_backoff_ms=100,
                            clock_ms=lambda: int(time.monotonic() * 1000))
    f1, _ = acc.append("t", 0, None, b"v", None, 1)
    acc.append("t", 1, None, b"v", None, 1)

    seen = []

    def release():
        # the blocked append counts itself as a waiter: release() notifies only when one waits
        deadline = time.monotonic() + 5
        while acc._mem_waiters == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        seen.append(acc._mem_waiters)
        b = acc.drain([("t", 0)], 1 << 20, 0, lambda tp, b: True)[0]
        b.complete(5, -1, None)
        acc.release(b)
    threading.Thread(target=release).start()
    f3, _ = acc.append("t", 2, None, b"v", None, 1)
    assert f1.result(1).offset == 5 and not f3.done()
    assert seen == [1] and acc._mem_waiters == 0


def test_defaults_batch_up_to_a_megabyte_and_java_batch_size_still_holds():
    from kohort.client.config import load_config
    c = load_config("producer", {"bootstrap.servers": "h:1"})
    assert (c["batch.size"], c["linger.ms"], c["acks"], c["enable.idempotence"]) == (1_000_000, 5, -1, True)
    # batch.size=16384 set explicitly: batches close near 16 KiB, as Java's
    clock = Clock()
    acc = make_acc(clock, batch_size=16384, buffer_memory=1 << 25)
    for _ in range(100):
        acc.append("t", 0, None, b"v" * 1000, None, 1)
    sizes = [b.size for b in acc.batches[("t", 0)]]
    assert len(sizes) == 7 and all(15_000 < s <= 16384 for s in sizes[:-1])


def test_a_large_batch_reserves_buffer_memory_as_it_grows():
    clock = Clock()
    acc = make_acc(clock, batch_size=1_000_000, buffer_memory=1 << 25)
    acc.append("t", 0, None, b"v" * 1000, None, 1)
    assert acc.used == 16384                               # not batch.size up front
    for _ in range(899):
        acc.append("t", 0, None, b"v" * 1000, None, 1)
    (b,) = acc.batches[("t", 0)]
    assert b.count == 900 and not b.closed and b.size <= b.reserved == acc.used
    assert b.size_limit == b.reserved + BATCH_HEADER_SIZE          # the header's room in buf counted
    assert acc.used < 2 * b.size                           # doubled as records came, never past need x2
    while len(acc.batches[("t", 0)]) == 1:
        acc.append("t", 0, None, b"v" * 1000, None, 1)
    full = acc.batches[("t", 0)][0]
    assert full.closed and 990_000 < full.size <= 1_000_000 and full.reserved == 1_000_000


def test_a_thousand_partitions_at_once_stay_within_buffer_memory():
    acc = make_acc(lambda: int(time.monotonic() * 1000), batch_size=1_000_000, buffer_memory=32 * 1024 * 1024,
                   max_block_ms=50)
    for p in range(1000):                                  # one open batch per partition, no waiting
        acc.append("t", p, None, b"v" * 1000, None, 1)
    assert acc.used == 1000 * 16384
    with pytest.raises(KafkaTimeoutError, match="buffer.memory"):
        for _ in range(60):                                # more records: growth stops at buffer.memory
            for p in range(1000):
                acc.append("t", p, None, b"v" * 1000, None, 1)
                assert acc.used <= acc.buffer_memory
    # growth refused for want of room closed a batch below its cap (to be sent as it is); then the
    # batch opened next waited for room, up to max.block.ms
    assert any(b.closed and b.size_limit < b.cap for dq in acc.batches.values() for b in dq)


def test_growth_never_waits_for_buffer_memory():
    acc = RecordAccumulator(batch_size=1_000_000, linger_ms=5, buffer_memory=40_000, max_block_ms=100,
                            delivery_timeout_ms=10_000, retry_backoff_ms=100,
                            clock_ms=lambda: int(time.monotonic() * 1000))
    for _ in range(32):
        acc.append("t", 0, None, b"v" * 1000, None, 1)     # 16 KiB reserved, then grown to 32 KiB
    (b,) = acc.batches[("t", 0)]
    assert acc.used == 32768 and b.count == 32 and not b.closed
    t0 = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="buffer.memory"):
        acc.append("t", 0, None, b"v" * 1000, None, 1)     # 64 KiB would pass buffer.memory: b closes,
    assert b.closed and b.count == 32 and acc.used == 32768   # and only the next batch waits for room
    assert time.monotonic() - t0 >= 0.09


def test_reenqueue_keeps_sequence_order():
    clock = Clock()
    acc = make_acc(clock, batch_size=100)
    for _ in range(4):
        acc.append("t", 0, None, b"v" * 60, None, 1)
    bs = []
    for seq in range(3):
        b = acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True)[0]
        b.seal(1, 0, seq, 0)
        bs.append(b)
    # responses come back failed in any order; the queue is re-sorted by sequence
    for b in (bs[2], bs[0], bs[1]):
        acc.reenqueue(b, clock())
    q = list(acc.batches[("t", 0)])
    assert [b.base_sequence for b in q] == [0, 1, 2, -1]
    # a retried batch waits retry.backoff.ms
    assert acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True) == []
    clock.ms += 100
    assert acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True) == [bs[0]]


def test_reenqueue_with_a_shorter_backoff():
    clock = Clock()
    acc = make_acc(clock, linger_ms=50)                     # retry.backoff.ms 100
    acc.append("t", 0, None, b"v", None, 1)
    b = acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True)[0]
    b.seal(1, 0, 0, 0)
    acc.reenqueue(b, clock(), 20)                           # CONCURRENT_TRANSACTIONS on a transactional Produce
    assert acc.ready(clock(), lambda t, p: 1, lambda n: True)[:2] == (set(), 20)
    clock.ms += 19
    assert acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True) == []
    clock.ms += 1
    assert acc.ready(clock(), lambda t, p: 1, lambda n: True)[0] == {1}
    assert acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True) == [b]
    acc.reenqueue(b, clock(), 500)                          # never longer than retry.backoff.ms
    clock.ms += 100
    assert acc.drain([("t", 0)], 1 << 20, clock(), lambda tp, b: True) == [b]


def test_expiry_takes_queued_batches_past_the_delivery_timeout():
    clock = Clock()
    acc = make_acc(clock, delivery_timeout_ms=1000)
    acc.append("t", 0, None, b"v", None, 1)
    clock.ms += 999
    assert acc.expired(clock()) == []
    clock.ms += 1
    (b,) = acc.expired(clock())
    assert b.count == 1


def test_delivery_future_result_and_callbacks():
    b = ProducerBatch("t", 3, 0, 1000, 0)
    f = b.try_append(b"k", b"v", None, 123)
    seen = []
    f.add_done_callback(lambda fut: seen.append(fut.result()))
    with pytest.raises(KafkaTimeoutError):
        f.result(0.01)
    cbs = b.complete(50, -1, None)
    for fut in cbs:
        for fn in fut.callbacks:
            fn(fut)
    md = f.result(0)
    assert (md.topic, md.partition, md.offset, md.timestamp) == ("t", 3, 50, 123)
    assert seen == [md]
    b2 = ProducerBatch("t", 0, 0, 1000, 0)
    f2 = b2.try_append(None, b"v", None, 1)
    b2.complete(-1, -1, KafkaTimeoutError("boom"))
    assert isinstance(f2.exception(0), KafkaTimeoutError)
    with pytest.raises(KafkaTimeoutError, match="boom"):
        f2.result(0)


def test_header_of_sealed_batch():
    b = ProducerBatch("t", 0, 0, 1000, 0)
    b.try_append(None, b"v", None, 5)
    h = read_batch_header(b.seal(7, 1, 0, 0))
    assert h.base_offset == 0 and h.last_offset_delta == 0 and h.base_timestamp == 5
