"""Producer.produce_batch against a real kohort broker (issue 17): what a consumer reads after
produce_batch is what it reads after produce() per record (partitions, offsets order, keys, values,
headers, timestamps), with idempotent and transactional producers, C and Python runs; and the Spark
sink's write path (spark/sink.write_batches, Arrow batches in, no Spark needed) on top of it."""
import time

import pyarrow as pa
import pytest

from kohort.client import accumulator
from kohort.client.admin import Admin
from kohort.client.consumer.consumer import Consumer
from kohort.client.producer import Producer
from kohort.errors import KohortError, RecordTooLargeError
from kohort.protocol import records as R
from kohort.spark.options import SinkOptions, parse_sink_options
from kohort.spark.sink import write_batches, write_exactly_once
from tests.helpers.brokers import KohortBroker

needs_ext = pytest.mark.skipif(not accumulator.COMPILED, reason="C extension not built or KOHORT_NO_EXT set")
RUNS = ["python", pytest.param("c", marks=needs_ext)]
_seq = iter(range(10**6))


@pytest.fixture(scope="module")
def addr():
    with KohortBroker() as b:
        yield b.bootstrap


def _topic(addr, parts=3):
    name = f"pb-{next(_seq)}"
    a = Admin({"bootstrap.servers": addr})
    try:
        assert a.create_topics({name: parts})[name] is None
    finally:
        a.close()
    return name


def _producer(addr, run, **cfg):
    old = R.use_extension(run == "c")
    try:
        return Producer({"bootstrap.servers": addr, **cfg})
    finally:
        R.use_extension(old)


def _read(addr, topic, parts=3, isolation="read_uncommitted"):
    c = Consumer({"bootstrap.servers": addr, "isolation.level": isolation, "auto.offset.reset": "earliest"})
    try:
        tps = [(topic, p) for p in range(parts)]
        c.assign(tps)
        ends = c.end_offsets(tps, 30)
        got = {p: [] for p in range(parts)}
        deadline = time.monotonic() + 60
        while any(c.position(tp) < ends[tp] for tp in ends):
            assert time.monotonic() < deadline, "could not read the topic to its end"
            for r in c.poll(0.5):
                got[r.partition].append((r.offset, r.key, r.value, r.headers, r.timestamp))
        return got
    finally:
        c.close()


def _records(n):
    keys = [None if i % 5 == 0 else b"key-%d" % (i % 37) for i in range(n)]
    values = [None if i % 11 == 0 else b"value %d " % i * (i % 7) for i in range(n)]
    parts = [i % 3 if keys[i] is None else None for i in range(n)]      # no sticky: deterministic
    headers = [[("h", b"%d" % i)] if i % 13 == 0 else None for i in range(n)]
    ts = [1_700_000_000_000 + i // 10 for i in range(n)]
    return keys, values, parts, headers, ts


@pytest.mark.timeout(120)
@pytest.mark.parametrize("run", RUNS)
def test_a_consumer_reads_the_same_after_produce_batch_as_after_produce(addr, run):
    n = 4000
    keys, values, parts, headers, ts = _records(n)
    t1, t2 = _topic(addr), _topic(addr)
    p = _producer(addr, run, **{"batch.size": 2000, "linger.ms": 2})
    try:
        for i in range(n):
            p.produce(t1, values[i], keys[i], headers[i], parts[i], ts[i])
        bf = p.produce_batch(t2, pa.array(values, pa.binary()), pa.array(keys, pa.large_binary()), parts, ts,
                             headers)
        assert p.flush(60) == 0
        assert bf.result(30) == n
    finally:
        p.close(10)
    a, b = _read(addr, t1), _read(addr, t2)
    assert a == b and sum(len(v) for v in a.values()) == n
    at = {(q, off): v for q, recs in b.items() for off, _, v, _, _ in recs}
    assert all(at[bf.metadata(i)[1:3]] == values[i] for i in range(n))      # metadata(i): where i landed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("run", RUNS)
def test_transactional_produce_batch_commits_and_aborts(addr, run):
    t = _topic(addr)
    p = _producer(addr, run, **{"transactional.id": f"pb-txn-{run}-{t}"})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        assert p.produce_batch(t, [b"a%d" % i for i in range(300)], partition=[i % 3 for i in range(300)]) \
            .result(30) == 300
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce_batch(t, [b"gone"] * 50, keys=[b"k%d" % i for i in range(50)])
        p.abort_transaction(30)
    finally:
        p.close(10)
    got = _read(addr, t, isolation="read_committed")
    assert sorted(v for recs in got.values() for _, _, v, _, _ in recs) == sorted(b"a%d" % i for i in range(300))


def _opts(addr, **extra) -> SinkOptions:
    return parse_sink_options({"kafka.bootstrap.servers": addr, **extra})


@pytest.mark.timeout(120)
def test_sink_writes_arrow_batches_with_every_column(addr):
    """key, value (string), topic (two topics mixed), partition (with nulls), headers: each row where a
    produce() of it would go, rows of a topic in order."""
    t1, t2 = _topic(addr), _topic(addr)
    n = 900
    rb = pa.record_batch({
        "key": pa.array([None if i % 4 == 0 else "k%d" % i for i in range(n)], pa.string()),
        "value": pa.array(["v%d" % i for i in range(n)], pa.string()),
        "topic": pa.array([t1 if i % 3 else t2 for i in range(n)], pa.string()),
        "partition": pa.array([2 if i % 4 == 0 else None for i in range(n)], pa.int32()),
        "headers": pa.array([[{"key": "i", "value": b"%d" % i}] if i % 9 == 0 else None for i in range(n)],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    })
    assert write_batches(_opts(addr), [rb.slice(0, 400), rb.slice(400)]) == n
    for topic, rows in ((t1, [i for i in range(n) if i % 3]), (t2, [i for i in range(n) if i % 3 == 0])):
        got = _read(addr, topic)
        assert [v for v, *_ in sorted((v, k) for recs in got.values() for _, k, v, _, _ in recs)] == \
            sorted(b"v%d" % i for i in rows)
        p2 = [v for _, _, v, _, _ in got[2]]
        assert [b"v%d" % i for i in rows if i % 4 == 0] == [v for v in p2 if int(v[1:]) % 4 == 0]
        hs = {v: h for recs in got.values() for _, _, v, h, _ in recs if h}
        assert hs == {b"v%d" % i: [("i", b"%d" % i)] for i in rows if i % 9 == 0}


@pytest.mark.timeout(120)
def test_sink_failure_names_the_row_and_null_topic_is_refused(addr):
    t = _topic(addr, 1)
    rb = pa.record_batch({"value": pa.array([b"ok", b"x" * 20000, b"ok"], pa.binary())})
    with pytest.raises(KohortError, match=r"row 2,.*max.request.size") as e:
        write_batches(_opts(addr, **{"topic": t, "kafka.max.request.size": "10000"}), [rb.slice(0, 1), rb])
    assert isinstance(e.value.__cause__, RecordTooLargeError)
    nb = pa.record_batch({"value": pa.array([b"a"], pa.binary()), "topic": pa.array([None], pa.string())})
    with pytest.raises(KohortError, match="row 0 has a null topic"):
        write_batches(_opts(addr), [nb])


@pytest.mark.timeout(120)
def test_exactly_once_sink_writes_a_batch_once(addr):
    t = _topic(addr, 1)
    rb = pa.record_batch({"value": pa.array([b"r%d" % i for i in range(500)], pa.binary())})
    opts = _opts(addr, topic=t, **{"kohort.sink.semantic": "exactly_once"})
    assert write_exactly_once(opts, [rb], identity=("q1", 0, 0)) == 500
    assert write_exactly_once(opts, [rb], identity=("q1", 0, 0)) == 0      # a replay: nothing again
    got = _read(addr, t, 1, "read_committed")
    assert [v for _, _, v, _, _ in got[0]] == [b"r%d" % i for i in range(500)]


def test_sink_producer_takes_large_batches_unless_the_options_say_otherwise():
    from kohort.spark.sink import producer_config
    assert producer_config(_opts("127.0.0.1:1"))["batch.size"] == 1_000_000
    cfg = producer_config(_opts("127.0.0.1:1", **{"kafka.batch.size": "16384", "kafka.linger.ms": "0"}))
    assert (cfg["batch.size"], cfg["linger.ms"]) == ("16384", "0")
