"""Producer.produce_batch (issue 17): records go exactly as produce() would send them one by one --
the same batches byte for byte, partitions, timestamps, offsets -- from lists or Arrow arrays, with the
C runs (`_crecords.append_run`) and their Python reference; per-record failures, back-pressure,
idempotent and transactional producers."""
import bisect
import random
import threading

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohort.client import accumulator, batch_produce
from kohort.client.partitioner import partition_for_key
from kohort.client.producer import Producer
from kohort.errors import KafkaTimeoutError, KohortError, RecordTooLargeError
from kohort.protocol import records as R
from tests.helpers.scripted_broker import ScriptedCluster

needs_ext = pytest.mark.skipif(not accumulator.COMPILED, reason="C extension not built or KOHORT_NO_EXT set")
RUNS = ["python", pytest.param("c", marks=needs_ext)]


@pytest.fixture(scope="module")
def cluster3():
    c = ScriptedCluster(1, {"t3": 3, "one": 1})
    yield c
    c.close()


def _make(cluster, c_twin: bool, **extra):
    old = R.use_extension(c_twin)
    try:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, **extra})
    finally:
        R.use_extension(old)
    p.partitioner.sticky._rng = random.Random(5)
    p.partitions_for("t3")
    return p


def _batches(p):
    return {tp: [(bytes(b.buf), b.count, b.base_ts, b.max_ts, b.ts_list, b.closed) for b in dq]
            for tp, dq in p.acc.batches.items() if dq}


def test_the_compiled_run_is_built_with_the_twin():
    if accumulator.COMPILED:
        assert batch_produce._c_append_run is not None, "stale _crecords build: make setup"


_rec = st.tuples(
    st.one_of(st.none(), st.binary(max_size=12)),                          # key
    st.one_of(st.none(), st.binary(max_size=200), st.text(max_size=5)),    # value (str: converted)
    st.one_of(st.none(), st.none(), st.integers(0, 2)),                     # partition
    st.sampled_from([0, 0, 0, 1, -1, 40]),                                  # timestamp step
    st.sampled_from([None, None, None, [("h", b"1")], []]))                 # headers


@pytest.mark.timeout(120)
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(records=st.lists(_rec, min_size=1, max_size=250), batch_size=st.sampled_from([1, 300, 2000, 30000]),
       ignore_keys=st.booleans(), shape=st.sampled_from(["per-record", "one-partition", "no-partition"]))
def test_produce_batch_queues_what_produce_queues(cluster3, records, batch_size, ignore_keys, shape):
    """produce() per record (the Python reference) vs produce_batch with Python runs and with C runs:
    the same batches byte for byte, the same (partition, offset delta, timestamp) per record."""
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    parts = {"per-record": [r[2] for r in records], "one-partition": 1, "no-partition": None}[shape]
    ts, tss = 1_700_000_000_000, []
    for r in records:
        ts += r[3]
        tss.append(ts)
    headers = [r[4] for r in records]
    out = []
    for mode in ("produce", "python", "c") if accumulator.COMPILED else ("produce", "python"):
        p = _make(cluster3, mode == "c", **{"batch.size": batch_size, "partitioner.ignore.keys": ignore_keys})
        try:
            with p.sender.io_lock:                   # nothing is sent: compare what is queued
                if mode == "produce":
                    futs = [p.produce("t3", v, k, h, parts if not isinstance(parts, list) else parts[i], t)
                            for i, (k, v, t, h) in enumerate(zip(keys, values, tss, headers))]
                    where = [(f.batch.partition, f.delta, f.batch.timestamps_at(f.delta)) for f in futs]
                else:
                    bf = p.produce_batch("t3", values, keys, parts, tss, headers)
                    where = []
                    for i in range(len(records)):       # where each record went (spans, not yet sent)
                        s, n, b, d = bf._spans[bisect.bisect_right(bf._starts, i) - 1]
                        assert s <= i < s + n
                        where.append((b.partition, d + i - s, b.timestamps_at(d + i - s)))
                    assert not bf._failed
                out.append((_batches(p), where))
        finally:
            p.close(5)
    assert all(o == out[0] for o in out[1:])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("run", RUNS)
def test_arrow_and_lists_land_where_produce_puts_them(cluster3, run):
    """Arrow binary/string arrays with nulls, chunked arrays, a partition array with nulls: a consumer
    reads back what produce() would have written, in order per partition."""
    n = 3000
    keys = [None if i % 4 == 0 else b"k%d" % (i % 50) for i in range(n)]
    values = [None if i % 7 == 0 else ("v%d" % i) for i in range(n)]
    parts = [None if i % 3 else i % 3 for i in range(n)]
    p = _make(cluster3, run == "c", **{"batch.size": 500})
    try:
        karr = pa.chunked_array([pa.array(keys[:1000], pa.binary()), pa.array(keys[1000:], pa.binary())])
        varr = pa.array(values, pa.large_string())
        before = {q: len(cluster3.values("t3", q)) for q in range(3)}
        bf = p.produce_batch("t3", varr, karr, pa.array(parts, pa.int32()))
        assert bf.result(30) == n and bf.done()
        got = {q: cluster3.values("t3", q)[before[q]:] for q in range(3)}
        want = {0: [], 1: [], 2: []}
        for i in range(n):
            q = parts[i]
            if q is None and keys[i] is not None:
                q = partition_for_key(keys[i], 3)
            md = bf.metadata(i)
            assert q is None or md.partition == q
            want[md.partition].append(None if values[i] is None else values[i].encode())
        assert got == want
        assert [bf.metadata(i).offset for i in range(n) if bf.metadata(i).partition == 0] == \
            list(range(before[0], before[0] + len(want[0])))
    finally:
        p.close(5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("run", RUNS)
def test_records_produce_refuses_fail_alone(cluster3, run):
    """A record too large, a bad type, a partition that does not exist: that record's failure, the
    others are delivered; result() raises ProduceBatchError naming them."""
    p = _make(cluster3, run == "c", **{"max.request.size": 5000})
    try:
        values = [b"a", b"x" * 6000, b"b", 12, b"c", b"d"]
        parts = [0, 0, 0, 0, 7, 0]
        bf = p.produce_batch("t3", values, partition=parts)
        called = threading.Event()
        bf.add_done_callback(lambda f: f is bf and called.set())
        assert bf.wait(30) and called.wait(30)
        late = []
        bf.add_done_callback(late.append)          # already done: at once
        assert late == [bf]
        f = bf.failures()
        assert set(f) == {1, 3, 4}
        assert isinstance(f[1], RecordTooLargeError)
        assert "must be bytes or str" in str(f[3]) and "partitions 0..2" in str(f[4])
        with pytest.raises(batch_produce.ProduceBatchError, match="3 of 6 records failed; record 1"):
            bf.result(0)
        assert [bf.metadata(i).offset for i in (0, 2, 5)] == [bf.metadata(0).offset + d for d in (0, 1, 2)]
        with pytest.raises(RecordTooLargeError):
            bf.metadata(1)
        with pytest.raises(KohortError, match="entries"):
            p.produce_batch("t3", [b"a"], keys=[b"a", b"b"])
        with pytest.raises(KohortError, match="Arrow binary or string"):
            p.produce_batch("t3", pa.array([1, 2]))
    finally:
        p.close(5)
    with pytest.raises(KohortError, match="closed"):
        p.produce_batch("t3", [b"late"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("run", RUNS)
def test_small_buffer_memory_blocks_then_times_out_for_the_rest(cluster3, run):
    """buffer.memory full while nothing is sent: produce_batch blocks up to max.block.ms like produce(),
    then fails the records not queued (the queued ones are delivered once I/O resumes)."""
    p = _make(cluster3, run == "c", **{"batch.size": 1000, "buffer.memory": 4000, "max.block.ms": 300})
    try:
        with p.sender.io_lock:                   # the sender cannot run: nothing frees memory
            bf = p.produce_batch("t3", [b"v" * 100] * 200, partition=0)
        assert bf.wait(30)
        f = bf.failures()
        assert f and all(isinstance(e, KafkaTimeoutError) for e in f.values())
        first = min(f)
        assert set(f) == set(range(first, 200)) and 0 < first < 200
        assert all(bf.metadata(i).partition == 0 for i in range(first))
        bf2 = p.produce_batch("t3", [b"w" * 100] * 200, partition=0)   # with I/O: back-pressure only
        assert bf2.result(30) == 200
    finally:
        p.close(5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("vtype", [pa.binary(), pa.large_binary(), pa.string()])
def test_arrow_buffers_read_in_place_encode_what_produce_encodes(cluster3, vtype):
    """Arrow arrays (sliced: a non-zero offset; nulls; empty values) read in place by the C run vs the
    same records as lists through produce(): the same batches byte for byte."""
    rnd = random.Random(7)
    n = 3000
    vals = [None if i % 9 == 0 else b"" if i % 13 == 0 else
            bytes(rnd.randrange(97, 123) for _ in range(rnd.randrange(1, 150))) for i in range(n + 5)]
    keys = [None if i % 50 else b"k%d" % (i % 23) for i in range(n + 5)]
    varr = pa.array([v if v is None or vtype != pa.string() else v.decode() for v in vals], vtype).slice(5)
    karr = pa.array(keys, pa.large_binary()).slice(5)
    vals, keys = vals[5:], keys[5:]
    out = []
    for mode in ("produce", "python", "c") if accumulator.COMPILED else ("produce", "python"):
        p = _make(cluster3, mode == "c", **{"batch.size": 1500})
        try:
            with p.sender.io_lock:
                if mode == "produce":
                    for i in range(n):
                        p.produce("t3", vals[i], keys[i], None, None if keys[i] else 1, 1_700_000_000_000)
                else:
                    bf = p.produce_batch("t3", varr, karr, [None if keys[i] else 1 for i in range(n)],
                                         1_700_000_000_000)
                    assert not bf._failed and len(bf._spans) < n / 3      # runs, not record by record
                out.append(_batches(p))
        finally:
            p.close(5)
    assert all(o == out[0] for o in out[1:])
