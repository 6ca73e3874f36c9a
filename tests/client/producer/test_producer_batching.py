"""Producer batching and request pipelining (issue 17): what keeps one busy partition fast, checked
as behaviour (requests in flight, batch sizes), never as timing."""
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohort.client import accumulator
from kohort.client.partitioner import partition_for_key
from kohort.client.producer import Producer
from kohort.errors import KohortError
from kohort.protocol import records as R
from tests.helpers.scripted_broker import ScriptedCluster


@pytest.fixture
def cluster():
    c = ScriptedCluster(1, {"t": 1})
    yield c
    c.close()


@pytest.fixture(scope="module")
def cluster3():
    c = ScriptedCluster(1, {"t3": 3})
    yield c
    c.close()


@pytest.mark.timeout(60)
def test_backlog_of_one_partition_goes_out_max_in_flight_at_a_time(cluster):
    """A backlog of full batches for one partition fills max.in.flight requests at once (Java's
    Sender loops while batches are sendable); it used to send one request per round trip."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "batch.size": 200,
                  "max.in.flight.requests.per.connection": 5})
    try:
        p.produce("t", b"first").result(10)          # metadata and producer id out of the way
        cluster.gather = 5                           # the broker answers once 5 requests have come
        with p.sender.io_lock:                       # we drive the I/O: none while the backlog builds up
            futs = [p.produce("t", b"%06d" % i) for i in range(400)]
            before = p.sender.stats["requests"]
            p.sender.prepare()                       # one round of the sender
            assert p.sender.stats["requests"] - before == 5
        assert p.flush(15) == 0
        assert all(f.exception(0) is None for f in futs)
        assert cluster.most_gathered >= 5
        assert cluster.values("t", 0) == [b"first"] + [b"%06d" % i for i in range(400)]
    finally:
        p.close(5)


# -- the compiled twin of produce() (issue 17) -----------------------------------------------------------
needs_ext = pytest.mark.skipif(not accumulator.COMPILED, reason="C extension not built or KOHORT_NO_EXT set")


def _make(cluster, c_twin: bool, batch_size: int, **extra):
    old = R.use_extension(c_twin)
    try:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, "batch.size": batch_size,
                      **extra})
    finally:
        R.use_extension(old)
    p.partitioner.sticky._rng = random.Random(5)
    assert (type(p.produce).__name__ == "FastProduce") == c_twin
    p.partitions_for("t3")
    return p


def _batches(p):
    """Every queued batch per partition: (records bytes, count, base_ts, max_ts, ts_list, closed)."""
    return {tp: [(bytes(b.buf), b.count, b.base_ts, b.max_ts, b.ts_list, b.closed) for b in dq]
            for tp, dq in p.acc.batches.items() if dq}


_value = st.one_of(st.none(), st.binary(max_size=300),
                  st.integers(8000, 20000).map(lambda n: b"L" * n))   # longer length varints
_record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),                   # key
    _value,
    st.one_of(st.none(), st.integers(0, 2)),                          # partition
    st.sampled_from([0, 0, 0, 1, 1, 2, -1, 37]),                      # timestamp step (ms), some backwards
    st.sampled_from([None, None, None, [("h", b"1")], []]),           # headers (the Python path)
    st.sampled_from(["", "keyword"]))                                 # positional or keyword arguments


@needs_ext
@pytest.mark.timeout(120)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(records=st.lists(_record, min_size=1, max_size=300), batch_size=st.sampled_from([1, 300, 2000, 30000]),
       ignore_keys=st.booleans())
def test_c_produce_encodes_exactly_what_python_encodes(cluster3, records, batch_size, ignore_keys):
    """FastProduce (C) and Producer.produce (Python) queue the same batches, byte for byte: the same
    partitions, batch boundaries, timestamps and futures."""
    out = []
    for c_twin in (False, True):
        p = _make(cluster3, c_twin, batch_size, **{"partitioner.ignore.keys": ignore_keys})
        try:
            ts = 1_700_000_000_000
            futs = []
            with p.sender.io_lock:                   # nothing is sent: compare what is queued
                for key, value, partition, step, headers, style in records:
                    ts += step
                    if style:
                        f = p.produce(topic="t3", value=value, key=key, partition=partition,
                                      timestamp=ts, headers=headers)
                    else:
                        f = p.produce("t3", value, key, headers, partition, ts)
                    futs.append(f)
                got = _batches(p)
                where = [(f.batch.partition, f.delta, f.batch.timestamps_at(f.delta)) for f in futs]
            out.append((got, where))
        finally:
            p.close(5)
    assert out[0] == out[1]


@needs_ext
@pytest.mark.timeout(60)
def test_c_produce_fills_batches_as_python_does(cluster3):
    """Value sizes from 0 to 300 B (one and two byte varints) into 1000 B batches, timestamps one millisecond apart: the same batch boundaries, closed
    flags and max timestamps."""
    out = []
    for c_twin in (False, True):
        p = _make(cluster3, c_twin, 1000)
        try:
            with p.sender.io_lock:
                ts = 1_700_000_000_000
                rnd = random.Random(3)                # some batches end exactly at the limit
                for i in range(6000):
                    ts += rnd.choice((0, 0, 1, 1, -1, 2, 300))
                    key = None if i % 3 else rnd.randbytes(rnd.randrange(41))
                    p.produce("t3", b"v" * rnd.randrange(301), key, None, None if i % 5 else i % 3, ts)
                out.append(_batches(p))
        finally:
            p.close(5)
    assert out[0] == out[1]


@needs_ext
@pytest.mark.timeout(60)
def test_c_produce_grows_a_large_batch_by_doubling(cluster3):
    """A batch filled to 1 MB by the C path reallocates its bytearray by doubling (twice per doubling
    of its reservation: once by the Python path that grows the reservation), not by bytearray's own
    steps of an eighth (43 reallocations, each a possible copy of everything so far); what it holds
    is what the Python path encodes."""
    allocs = []
    out = []
    for c_twin in (True, False):
        p = _make(cluster3, c_twin, 1_000_000)
        try:
            with p.sender.io_lock:                   # nothing is sent: one batch fills up
                value = bytes(range(256)) * 4
                for _ in range(900):
                    f = p.produce("t3", value, None, None, 1, 1_700_000_000_000)
                    if c_twin:
                        allocs.append(f.batch.buf.__alloc__())
                out.append(_batches(p))
        finally:
            p.close(5)
    assert out[0] == out[1]
    assert len(out[0][("t3", 1)]) == 1 and allocs[-1] >= 900 * 1024
    grows = sum(1 for a, b in zip(allocs, allocs[1:]) if b != a)
    assert grows <= 20, grows                 # bytearray alone: 43


def _count_python_produce(monkeypatch) -> list:
    """A list that gets one entry per call of the Python `Producer.produce` (the compiled path's fallback)."""
    calls: list = []
    reference = Producer.produce

    def counted(self, *args, **kw):
        calls.append(1)
        return reference(self, *args, **kw)
    monkeypatch.setattr(Producer, "produce", counted)
    return calls


@needs_ext
@pytest.mark.timeout(60)
def test_c_produce_takes_large_records_and_grows_their_batch(cluster3, monkeypatch):
    """Records of 16 KiB (and a keyed 9,000 B one) into 1 MB batches: the C path grows a batch's
    reservation itself (the accumulator's doubling rule), so only the record opening each batch goes
    to Python; what is queued is what the Python path queues, byte for byte; a record larger than
    batch.size still gets a batch of its own."""
    python_calls = _count_python_produce(monkeypatch)
    big = bytes(range(256)) * 64                  # 16 KiB
    out = []
    for c_twin, batch_size in ((False, 1_000_000), (True, 1_000_000), (False, 20_000), (True, 20_000)):
        p = _make(cluster3, c_twin, batch_size)
        try:
            with p.sender.io_lock:                   # nothing is sent: compare what is queued
                for i in range(130):
                    p.produce("t3", big, None, None, 1, 1_700_000_000_000 + i // 50)
                p.produce("t3", b"k" * 9000, b"key", None, 1, 1_700_000_000_003)
                p.produce("t3", b"x" * 30_000, None, None, 1, 1_700_000_000_003)    # > batch.size 20000
                got = _batches(p)
            if c_twin:
                assert len(python_calls) == len(got[("t3", 1)]), (batch_size, len(python_calls))
            out.append(got)
        finally:
            p.close(5)
        del python_calls[:]
    assert out[0] == out[1] and out[2] == out[3]
    assert len(out[0][("t3", 1)]) == 3                           # 63 + 63 + 6 records
    assert [b[1] for b in out[2][("t3", 1)]][-2:] == [1, 1]      # 9,000 B alone; 30,000 B alone


@needs_ext
@pytest.mark.timeout(60)
def test_c_produce_stays_compiled_after_its_batches_went_out(cluster, monkeypatch):
    """A partition whose queue emptied (every batch sent) keeps its deque, which FastProduce holds on
    to: the records after it take the C path again, only the one opening a batch goes to Python."""
    python_calls = _count_python_produce(monkeypatch)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    try:
        assert type(p.produce).__name__ == "FastProduce"
        p.produce("t", b"first").result(10)
        for rnd in range(3):
            p.flush(10)
            assert not p.acc.batches[("t", 0)]        # sent: the queue is empty, the deque stays
            del python_calls[:]
            with p.sender.io_lock:                   # nothing is sent meanwhile: one batch
                futs = [p.produce("t", b"r%d-%d" % (rnd, i)) for i in range(50)]
            assert len(python_calls) == 1, len(python_calls)     # the record opening the batch
            assert p.flush(10) == 0 and all(f.exception(0) is None for f in futs)
    finally:
        p.close(5)


@needs_ext
@pytest.mark.timeout(60)
def test_c_produce_hands_odd_calls_to_python(cluster3):
    """Arguments the C path does not handle go to the Python produce: its errors, serializers,
    callbacks, str values."""
    p = _make(cluster3, True, 16384)
    try:
        with pytest.raises(KohortError, match="partitions 0..2"):
            p.produce("t3", b"v", partition=7)
        with pytest.raises(KohortError, match="must be bytes or str"):
            p.produce("t3", 12)
        with pytest.raises(TypeError):
            p.produce("t3", b"v", nope=1)
        seen = []
        f1 = p.produce("t3", "text", partition=1, on_delivery=lambda err, md: seen.append((err, md)))
        f2 = p.produce("t3", b"\x00" * 10, key=bytearray(b"k"))
        assert p.flush(10) == 0
        assert f1.result(0).partition == 1 and seen and seen[0][0] is None
        assert f2.result(0).partition == partition_for_key(b"k", 3)
        p.close(5)
        with pytest.raises(KohortError, match="closed"):
            p.produce("t3", b"late")
    finally:
        p.close(5)
    q = Producer({"bootstrap.servers": cluster3.bootstrap, "value.serializer": lambda v: v.encode()})
    try:
        assert type(q.produce).__name__ == "FastProduce"
        assert q.produce("t3", "serialized", partition=0).result(10).offset >= 0
    finally:
        q.close(5)
    assert b"serialized" in cluster3.values("t3", 0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("c_twin", [False, pytest.param(True, marks=needs_ext)])
def test_keyed_records_land_where_java_puts_them(cluster3, c_twin):
    p = _make(cluster3, c_twin, 16384)
    try:
        keys = [b"k%d" % i for i in range(60)]
        futs = [p.produce("t3", b"v", key=k) for k in keys]
        assert p.flush(10) == 0
        assert [f.result(0).partition for f in futs] == [partition_for_key(k, 3) for k in keys]
    finally:
        p.close(5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("c_twin", [pytest.param(True, marks=needs_ext), False])
def test_a_producing_thread_sends_its_batches_itself_before_they_fill(cluster, c_twin):
    """With batches far from full (1 MB batch.size), the thread calling produce() takes its turn at
    the I/O every TICK_MS: batches lingered out go out from it, not only from the I/O thread (which
    would wait for the GIL held by the producing thread)."""
    import threading
    import time
    old = R.use_extension(c_twin)
    try:
        p = Producer({"bootstrap.servers": cluster.bootstrap})
    finally:
        R.use_extension(old)
    senders = []
    send = p.sender._send_batches

    def observed(node, batches):
        senders.append(threading.current_thread() is threading.main_thread())
        return send(node, batches)
    p.sender._send_batches = observed
    try:
        p.produce("t", b"first").result(10)          # metadata and producer id out of the way
        senders.clear()
        n = 0
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            p.produce("t", b"%06d" % n)
            n += 1
        assert p.flush(15) == 0
        assert any(senders), senders
        assert cluster.values("t", 0) == [b"first"] + [b"%06d" % i for i in range(n)]
    finally:
        p.close(5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec", ["lz4", "zstd", "gzip", "snappy"])
def test_compressed_batches_sealed_on_the_sealer_thread_go_out_in_order(cluster, codec, monkeypatch):
    """Batches that take long to compress are sealed on the Sealer's thread; requests still reach
    the broker in sequence order, every record once. (The Python Sealer: snappy's way, and every
    codec's where its library is missing, as KOHORT_NATIVE_CODECS="" makes it here.)"""
    import threading

    from kohort.client import sealer
    monkeypatch.setattr(sealer, "NATIVE_CODECS", frozenset())
    p = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": codec, "batch.size": 2000,
                  "linger.ms": 0})
    where = []
    seal_and_send = p.sender._seal_and_send

    def observed(*args):
        where.append(threading.current_thread().name)
        return seal_and_send(*args)
    p.sender._seal_and_send = observed
    try:
        p.produce("t", b"first").result(10)
        p.sender._seal_s_per_byte = 1.0              # as if compressing were slow: every request goes there
        futs = [p.produce("t", b"%06d" % i * (1 + i % 7)) for i in range(3000)]
        assert p.flush(30) == 0
        assert all(f.exception(0) is None for f in futs)
        assert [f.result(0).offset for f in futs] == list(range(1, 3001))
        assert cluster.values("t", 0) == [b"first"] + [b"%06d" % i * (1 + i % 7) for i in range(3000)]
        assert "kohort-producer-sealer" in where
    finally:
        p.close(5)
    assert not p.sender.sealer._thread.is_alive()


def test_an_uncompressed_producer_has_no_sealer(cluster):
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    try:
        assert p.sender.sealer is None
    finally:
        p.close(5)


@needs_ext
@pytest.mark.timeout(60)
@pytest.mark.parametrize("codec,acks,reused", [("lz4", "all", True), ("none", "all", True), ("none", "0", False)])
def test_a_finished_batchs_buffer_is_filled_again_by_a_later_batch(cluster, codec, acks, reused):
    """An acknowledged batch's buffer goes to the accumulator's pool and a later batch is encoded
    into it (keeping its allocation: no growth by doubling, no fresh pages); every record lands, in
    order, whatever the buffer held before. Uncompressed under acks=0 a batch is finished before its
    bytes are written: its buffer is never reused."""
    # linger.ms long: each round's 50 records make one batch, sent by flush()
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 10_000, "batch.size": 100_000,
                  "compression.type": codec, "acks": acks})
    try:
        bufs, sent = [], []
        for i in range(6):
            vs = [bytes([i]) * 1000 + j.to_bytes(2, "big") for j in range(50)]
            futs = [p.produce("t", v) for v in vs]
            bufs.append(futs[-1].batch.buf)
            sent += vs
            assert p.flush(10) == 0
        again = [any(b is old for old in bufs[:k]) for k, b in enumerate(bufs) if k]
        # (flush() may return between a batch's futures and its buffer's return to the pool, so a
        # round may start a fresh buffer; over five rounds one at least reuses one)
        assert any(again) == reused
        if acks != "0":
            assert cluster.values("t", 0) == sent
    finally:
        p.close(5)


@needs_ext
def test_recycle_buffer_keeps_the_allocation_and_leaves_a_viewed_buffer_alone():
    ext = R.producer_twin()
    buf = bytearray(b"x" * 100_000)
    alloc = buf.__alloc__()
    with memoryview(buf):
        assert ext.recycle_buffer(buf, 61) is False and len(buf) == 100_000
    assert ext.recycle_buffer(buf, 61) is True
    assert buf == bytes(61) and buf.__alloc__() == alloc
    assert ext.recycle_buffer(bytearray(10), 61) is False and ext.recycle_buffer(b"x" * 100, 61) is False


@needs_ext
def test_the_buffer_pool_takes_a_burst_of_answers_within_buffer_memory():
    """Batches finished together (one burst of answers) all go to the pool while their buffers fit
    the part of buffer.memory no batch has reserved (beyond the eighth of it a pool may always
    hold), and a new batch is filled into a pooled buffer."""
    acc = accumulator.RecordAccumulator(batch_size=50_000, linger_ms=0, buffer_memory=1_000_000,
                                        max_block_ms=1000, delivery_timeout_ms=120_000, retry_backoff_ms=100,
                                        clock_ms=lambda: 0)
    value = b"v" * 4_500
    done = []
    for part in range(9):                # nine batches of ~50 kB each
        for _ in range(11):
            acc.append("t", part, None, value, None, 0)
        done.append(acc.batches[("t", part)][-1])
    assert acc.used == sum(b.reserved for b in done) and 400_000 < acc.used < 600_000
    open_one = done.pop()                # stays open: its reservation stays
    for b in done:
        acc.batches[("t", b.partition)].popleft()
        spare = []
        b.complete(0, -1, None, spare)
        acc.release(b, spare)
        assert acc.used + acc._pool_bytes <= acc.buffer_memory
    assert acc.used == open_one.reserved
    assert len(acc._pool) == 8 and acc._pool_bytes > acc.buffer_memory // 8
    pooled = list(acc._pool)
    acc.append("t", 0, None, value, None, 0)
    assert any(acc.batches[("t", 0)][-1].buf is buf for buf in pooled) and len(acc._pool) == 7
