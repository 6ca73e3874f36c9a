"""The native sealer (protocol/_crecords.c `NativeSealer`, client/sealer.py `native_sealer`): gzip, lz4
and zstd batches compressed and sealed on a thread that never takes the GIL. Its batches decode to
the same records as the Python path's; a producer using it delivers in order on a real broker; a
codec failure fails that batch's records only; closing with jobs queued frees everything; a missing
library (KOHORT_NATIVE_CODECS, or a library dlopen cannot find) falls back to the Python Sealer."""
import gc
import logging
import os
import resource
import subprocess
import sys
import time

import pytest

from kohort.client import sealer as sealer_mod
from kohort.client.consumer import Consumer
from kohort.client.producer import Producer
from kohort.errors import ConfigError, KohortError
from kohort.protocol import records as R
from kohort.protocol.compression import COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD
from tests.helpers.brokers import KohortBroker
from tests.helpers.scripted_broker import ScriptedCluster

CODECS = {"gzip": COMPRESSION_GZIP, "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}

# Where the compiled twin is off (KOHORT_NO_EXT=1, or no C compiler at install) there is no native
# sealer by design: the producer seals on the Python path (test_producer_batching.py's Sealer tests,
# and test_without_the_compiled_twin_the_python_sealer_seals below, which runs in a subprocess).
pytestmark = pytest.mark.skipif(R.producer_twin() is None, reason="the compiled twin is off")


def test_the_compiled_twin_has_the_native_sealer():
    """A build of the twin without it is stale (rebuild: `make setup`)."""
    assert sys.platform == "win32" or hasattr(R.producer_twin(), "NativeSealer")


def _records_section(n: int, size: int, seed: int = 0):
    """A records section as the producer encodes it (keys, headers, differing timestamps)."""
    buf = bytearray()
    for i in range(n):
        key = None if i % 4 == 0 else b"key-%d" % (i % 13)
        value = (b"v%07d-" % (i + seed)) * (size // 9 + 1)
        headers = [("h", b"%d" % i)] if i % 5 == 0 else None
        R.append_record(buf, i, i % 3, key, value[:size], headers)
    return buf


def _sealer(codec: int):
    s = sealer_mod.native_sealer(codec)
    assert s is not None, f"{codec}: the native sealer did not load here"
    return s


def _wait_collect(s, n: int, timeout: float = 20.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += s.collect()
        time.sleep(0.001)
    return out


@pytest.mark.parametrize("name", sorted(CODECS))
@pytest.mark.parametrize("n,size", [(1, 0), (7, 100), (300, 1000), (40, 70000)])
def test_native_and_python_batches_decode_to_the_same_records(name, n, size):
    codec = CODECS[name]
    buf = _records_section(n, size)
    args = dict(count=n, base_ts=1_700_000_000_000, max_ts=1_700_000_000_002, attributes=R.ATTR_TRANSACTIONAL,
                producer_id=4242, producer_epoch=7, base_sequence=123456)
    py = R.write_batch_buffer(bytes(buf), n, args["base_ts"], args["max_ts"], compression=codec,
                              attributes=args["attributes"], producer_id=4242, producer_epoch=7,
                              base_sequence=123456)
    s = _sealer(codec)
    try:
        s.submit("token", buf, n, args["base_ts"], args["max_ts"], args["attributes"], 4242, 7, 123456)
        assert s.pending == 1
        [(token, wire, err)] = _wait_collect(s, 1)
        assert s.pending == 0
    finally:
        s.close()
    assert (token, err) == ("token", None)
    assert isinstance(wire, bytearray)
    R.validate_batch(bytes(wire))                                 # length, magic, CRC-32C
    hn, hp = R.read_batch_header(bytes(wire)), R.read_batch_header(bytes(py))
    assert hn._replace(batch_length=0, crc=0) == hp._replace(batch_length=0, crc=0)
    assert hn.attributes == codec | R.ATTR_TRANSACTIONAL
    assert list(R.iter_records(bytes(wire), check_crc=True)) == list(R.iter_records(bytes(py), check_crc=True))
    assert len(list(R.iter_records(bytes(wire)))) == n
    buf.extend(b"x")       # the records' export was released: the bytearray can change again


@pytest.mark.parametrize("name", sorted(CODECS))
def test_a_batch_sealed_before_its_sequence_gets_it_byte_for_byte(name):
    """`set_batch_producer` on a natively sealed batch (producer fields -1) gives exactly the bytes
    the sealer gives with those fields at once (what a request leaving the sealer carries); gzip and
    lz4 batches are also the Python path's bytes (zstd's frames differ between the libraries)."""
    codec = CODECS[name]
    buf = _records_section(50, 300)
    fields = (987654321012, 3, 2_000_000_000)
    py = R.write_batch_buffer(bytes(buf), 50, 10, 12, compression=codec, producer_id=fields[0],
                              producer_epoch=fields[1], base_sequence=fields[2])
    s = _sealer(codec)
    try:
        s.submit("later", buf, 50, 10, 12, 0, -1, -1, -1)
        s.submit("at once", buf, 50, 10, 12, 0, *fields)
        [(_, wire, err), (_, at_once, err2)] = _wait_collect(s, 2)
    finally:
        s.close()
    assert err is None and err2 is None and R.read_batch_header(bytes(wire)).base_sequence == -1
    R.set_batch_producer(wire, *fields)
    assert wire == at_once
    R.validate_batch(bytes(wire))
    if codec != COMPRESSION_ZSTD:
        assert wire == py
    with pytest.raises(R.EncodeError):
        R.set_batch_producer(wire, 1, 1 << 15, 0)           # out of range: refused ...
    assert wire == at_once                                    # ... and the batch untouched


@pytest.mark.timeout(30)
def test_requests_sealed_ahead_wait_unnumbered_for_room_in_flight():
    """With the native sealer, SEAL_AHEAD requests beyond max.in.flight are drained and compressed
    while max.in.flight are on the wire; they take their sequence numbers only when they leave, so
    a partition never has more than 5 numbered batches unacknowledged; the records land in order."""
    from kohort.client.producer import SEAL_AHEAD
    c = ScriptedCluster(1, {"t": 1})
    p = Producer({"bootstrap.servers": c.bootstrap, "compression.type": "lz4", "linger.ms": 0,
                  "batch.size": 200, "max.in.flight.requests.per.connection": 5})
    try:
        snd = p.sender
        assert snd.seal_ahead == SEAL_AHEAD > 0
        p.produce("t", b"first").result(10)          # metadata and producer id out of the way
        c.gather, c.gather_rounds = 5, 1              # the broker answers once 5 requests have come
        with snd.io_lock:                             # we drive the I/O: no answer is read meanwhile
            futs = [p.produce("t", b"%06d" % i) for i in range(400)]
            before = snd.stats["requests"]
            snd.prepare()
            assert snd.stats["requests"] - before == 5 + SEAL_AHEAD
            deadline = time.monotonic() + 10
            while snd.node_requests.get(0, 0) < 5 and time.monotonic() < deadline:
                time.sleep(0.005)
                snd.prepare()
            assert snd.node_requests[0] == 5 and snd.node_sealing[0] == SEAL_AHEAD
            held = [b for e in snd.sealing for b in e.batches]
            assert len(held) == SEAL_AHEAD and all(b.base_sequence == -1 for b in held)
            st = snd.parts[("t", 0)]
            assert st.in_flight - st.sealing == 5
        assert p.flush(15) == 0
        assert all(f.exception(0) is None for f in futs)
        assert c.most_gathered <= 5
        assert c.values("t", 0) == [b"first"] + [b"%06d" % i for i in range(400)]
        assert not snd.sealing and snd.node_sealing[0] == 0 and st.in_flight == st.sealing == 0
    finally:
        p.close(5)
        c.close()


def test_the_sealer_thread_runs_while_a_python_thread_holds_the_gil():
    """Jobs finish while the calling thread runs Python and never lets the GIL go (switch interval
    100 s): the sealer's thread does not take it."""
    s = _sealer(COMPRESSION_LZ4)
    buf = _records_section(1000, 1000)
    old = sys.getswitchinterval()
    try:
        for i in range(10):
            s.submit(i, buf, 1000, 1, 1, 0, -1, -1, -1)
        sys.setswitchinterval(100.0)
        t = time.perf_counter()
        x = 0
        while time.perf_counter() - t < 1.0:            # pure Python: the GIL stays here
            x += 1
        got = s.collect()                                # no release of the GIL before this
    finally:
        sys.setswitchinterval(old)
        s.close()
    assert [tok for tok, _, _ in got] == list(range(10))
    assert all(err is None and wire is not None for _, wire, err in got)


def test_closing_with_jobs_queued_frees_everything():
    """close() with jobs queued and finished-but-uncollected: buffers released, no memory kept
    (RSS flat over 200 sealers of 20 jobs of 256 KiB each)."""
    buf = _records_section(250, 1000)

    def once(k):
        s = _sealer(COMPRESSION_ZSTD)
        for i in range(20):
            s.submit(i, buf, 250, 1, 1, 0, -1, -1, -1)
        if k % 2:
            time.sleep(0.002)            # some jobs finished and not collected, some still queued
        s.close()
        assert s.closed and s.pending == 0 and s.collect() == []
        with pytest.raises(RuntimeError):
            s.submit(0, buf, 250, 1, 1, 0, -1, -1, -1)
    for k in range(20):
        once(k)
    before = _rss_kb()
    for k in range(200):
        once(k)
    grown = _rss_kb() - before
    buf.extend(b"x")                     # every export released
    assert grown < 8 * 1024, f"RSS grew by {grown} KiB over 200 closed sealers"


def test_a_job_that_fails_hands_back_its_error():
    s = _sealer(COMPRESSION_LZ4)
    buf = _records_section(10, 10)
    try:
        s.fail_next(1)
        s.submit("a", buf, 10, 1, 1, 0, -1, -1, -1)
        s.submit("b", buf, 10, 1, 1, 0, -1, -1, -1)
        (ta, wa, ea), (tb, wb, eb) = _wait_collect(s, 2)
    finally:
        s.close()
    assert (ta, wa) == ("a", None) and "compression failed" in ea
    assert tb == "b" and eb is None
    R.validate_batch(bytes(wb))


def test_bad_submissions_are_refused_and_lose_nothing():
    s = _sealer(COMPRESSION_LZ4)
    try:
        with pytest.raises(ValueError):
            s.submit("t", b"x", 0, 1, 1, 0, -1, -1, -1)            # no records
        with pytest.raises(ValueError):
            s.submit("t", b"x", 1, 1, 1, COMPRESSION_LZ4, -1, -1, -1)  # codec bits are the sealer's
        with pytest.raises(TypeError):
            s.submit("t", "not bytes", 1, 1, 1, 0, -1, -1, -1)
        assert s.pending == 0
    finally:
        s.close()


# -- the producer on it ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kohort_addr():
    with KohortBroker() as b:
        yield b.bootstrap


def _read_all(addr: str, topic: str, n: int, timeout: float = 30.0):
    c = Consumer({"bootstrap.servers": addr, "group.id": None, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.assign([(topic, 0)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out += c.poll(0.5)
        return out
    finally:
        c.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", sorted(CODECS))
def test_a_producer_seals_on_the_native_sealer_in_order(kohort_addr, name):
    topic = f"native-order-{name}"
    p = Producer({"bootstrap.servers": kohort_addr, "compression.type": name, "batch.size": 3000,
                  "linger.ms": 0})
    try:
        assert p.sender.native is not None and p.sender.sealer is None
        values = [b"%06d" % i * (1 + i % 7) for i in range(3000)]
        futs = [p.produce(topic, v, partition=0) for v in values]
        assert p.flush(60) == 0
        assert [f.result(0).offset for f in futs] == list(range(3000))
        assert p.sender.stats["requests"] > 5          # many requests through the sealing FIFO
    finally:
        p.close(5)
    assert p.sender.native.closed
    got = _read_all(kohort_addr, topic, 3000)
    assert [r.value for r in got] == values


@pytest.mark.timeout(90)
def test_a_batch_that_fails_to_compress_fails_its_records_only(kohort_addr):
    """The failed batch's records get a clear error; the records after it are delivered (the batch
    took no sequence number: numbers are given as requests leave the sealer) and nothing is written
    twice."""
    topic = "native-fail"
    p = Producer({"bootstrap.servers": kohort_addr, "compression.type": "lz4", "batch.size": 2000,
                  "linger.ms": 0})
    try:
        p.produce(topic, b"first", partition=0).result(20)
        p.sender.native.fail_next(1)
        futs = [p.produce(topic, b"%05d" % i * 20, partition=0) for i in range(500)]
        p.flush(60)
        errors = [f.exception(0) for f in futs]
    finally:
        p.close(5)
    failed = [i for i, e in enumerate(errors) if e is not None]
    assert failed and failed == list(range(failed[0], failed[-1] + 1))       # one batch
    assert len(failed) < 100
    e = errors[failed[0]]
    assert isinstance(e, KohortError) and "could not compress" in str(e) and "compression failed" in str(e)
    got = [r.value for r in _read_all(kohort_addr, topic, 501 - len(failed))]
    assert got == [b"first"] + [b"%05d" % i * 20 for i in range(500) if i not in set(failed)]


@pytest.mark.timeout(180)
@pytest.mark.slow                   # 200 producers with a broker: ~22 s
def test_producers_closed_with_jobs_in_flight_leak_nothing(kohort_addr):
    """200 producers, each closed at once with compression jobs still queued (the sealer held):
    their records fail with the producer's closing error, and RSS stays flat."""
    values = [os.urandom(100) * 10 for _ in range(64)]

    def once():
        p = Producer({"bootstrap.servers": kohort_addr, "compression.type": "zstd", "linger.ms": 0,
                      "batch.size": 16384})
        try:
            p.produce("native-leak", b"x", partition=0).result(20)    # metadata, producer id
            p.sender.native.hold(True)
            futs = [p.produce("native-leak", values[i % 64], partition=0) for i in range(400)]
            assert p.flush(0.05) == 400                  # batches submitted, none sealed
            queued = p.sender.native.pending
        finally:
            p.close(0)
        assert queued > 0 and p.sender.native.closed and p.sender.native.pending == 0
        assert all(isinstance(f.exception(5), KohortError) for f in futs)
    # A closed producer is cyclic garbage (its 256 KiB receive buffer with it) until the collector
    # runs: collected every 10 producers, so RSS measures what is kept, not garbage waiting.
    for k in range(50):            # allocator pools and caches fill up first
        once()
        if k % 10 == 9:
            gc.collect()
    before = _rss_kb()
    for k in range(200):
        once()
        if k % 10 == 9:
            gc.collect()
    grown = _rss_kb() - before
    # a leak of what a job holds (its ~16 KiB output and the batch) would be ~60 MB here
    assert grown < 16 * 1024, f"RSS grew by {grown} KiB over 200 producers"


def _rss_kb() -> int:
    gc.collect()                # a closed producer is garbage in reference cycles until collected
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# -- fallback ----------------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_a_codec_without_its_library_takes_the_python_sealer(monkeypatch, caplog):
    """Listed out of KOHORT_NATIVE_CODECS (as a missing library is): the Python Sealer seals, the
    producer's log says so once at DEBUG, the records arrive."""
    monkeypatch.setattr(sealer_mod, "NATIVE_CODECS", frozenset({COMPRESSION_ZSTD}))
    monkeypatch.setattr(sealer_mod, "_said", set())
    c = ScriptedCluster(1, {"t": 1})
    caplog.set_level(logging.DEBUG, logger="kohort.client.producer")
    try:
        for _ in range(2):
            p = Producer({"bootstrap.servers": c.bootstrap, "compression.type": "lz4"})
            try:
                assert p.sender.native is None and p.sender.sealer is not None
                futs = [p.produce("t", b"v%d" % i) for i in range(100)]
                assert p.flush(20) == 0 and all(f.exception(0) is None for f in futs)
            finally:
                p.close(5)
        p = Producer({"bootstrap.servers": c.bootstrap, "compression.type": "zstd"})
        try:
            assert p.sender.native is not None and p.sender.sealer is None
        finally:
            p.close(5)
        assert c.values("t", 0) == [b"v%d" % i for i in range(100)] * 2
    finally:
        c.close()
    lines = [r.getMessage() for r in caplog.records if "native sealer" in r.getMessage()]
    assert len(lines) == 1 and "lz4" in lines[0] and "KOHORT_NATIVE_CODECS" in lines[0]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if "native sealer" in r.getMessage())


def test_a_library_dlopen_cannot_find_is_reported_and_the_env_switch_is_read():
    """In a fresh interpreter (nothing loaded yet): a library that does not exist gives the reason
    (dlopen's message) and no sealer; KOHORT_NATIVE_CODECS=zstd keeps lz4 and gzip off."""
    code = (
        "from kohort.protocol.records import producer_twin\n"
        "from kohort.client import sealer\n"
        "ext = producer_twin()\n"
        "why = ext.sealer_library(3, ['libkohort-absent-lz4.so.1'])\n"
        "print(repr(why))\n"
        "assert why and 'libkohort-absent-lz4.so.1' in why, why\n"
        "try:\n"
        "    ext.NativeSealer(3, 0)\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n"
        "else:\n"
        "    raise SystemExit('a sealer without its library')\n"
        "assert sealer.NATIVE_CODECS == {4}, sealer.NATIVE_CODECS\n"
        "assert sealer.native_sealer(3) is None and sealer.native_sealer(1) is None\n"
        "s = sealer.native_sealer(4); assert s is not None; s.close()\n"
        "print('ok')\n")
    env = dict(os.environ, KOHORT_NATIVE_CODECS="zstd")
    env.pop("KOHORT_NO_EXT", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")


def test_without_the_compiled_twin_the_python_sealer_seals():
    code = ("from kohort.client import sealer\n"
            "from kohort.protocol.compression import COMPRESSION_LZ4\n"
            "assert sealer.native_sealer(COMPRESSION_LZ4) is None\n"
            "print('ok')\n")
    env = dict(os.environ, KOHORT_NO_EXT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_fast_produce_pokes_once_sealed_batches_wait():
    """The compiled produce() calls on_tick as soon as the native sealer has finished batches (their
    request then leaves without waiting for the next tick), and not again once they are collected."""
    import socket
    import threading
    import types
    from collections import deque

    from kohort.client.accumulator import DeliveryFuture, ProducerBatch
    s = _sealer(COMPRESSION_LZ4)
    r, w = socket.socketpair()
    s.set_wake_fd(w.fileno())
    ticks, collected = [], []

    def on_tick():
        ticks.append(1)
        collected.extend(s.collect())

    def never(*a, **k):
        raise AssertionError("the compiled path was expected to take this record")
    info = types.SimpleNamespace(error=None, num_partitions=1)
    producer = types.SimpleNamespace(_closed=False, _topics={"t": info})
    quiet = types.SimpleNamespace(fatal=None)
    batches = {("t", 0): deque([ProducerBatch("t", 0, 0, 1_000_000, 1_000_000)])}
    fp = R.producer_twin().FastProduce(producer, quiet, quiet, batches, threading.Lock(), {"t": 0}, DeliveryFuture,
                                       never, never, 1, 1_000_000, on_tick, 60_000.0, None, None, s)
    try:
        fp("t", b"a")                   # the first call ticks; the next tick is a minute away
        fp("t", b"b")
        assert len(ticks) == 1
        s.submit("job", _records_section(10, 100), 10, 0, 0, 0, -1, -1, -1)
        r.settimeout(20)
        assert len(r.recv(1)) == 1      # the sealer's wake-up byte: the job is done, not collected
        fp("t", b"c")
        assert len(ticks) == 2 and [t for t, _, _ in collected] == ["job"]
        time.sleep(0.001)
        fp("t", b"d")
        assert len(ticks) == 2
    finally:
        s.set_wake_fd(-1)
        s.close()
        r.close()
        w.close()


# -- compression.<codec>.level (KIP-390) ---------------------------------------------------------------
def test_codec_level_follows_javas_producer():
    """gzip -1 is Deflater's default (6), 0 refused as Java refuses it; lz4's default 9 is the fast
    compressor, any other level LZ4 HC; zstd as given; none and snappy have no level."""
    def level(codec, **kw):
        conf = {"compression.gzip.level": -1, "compression.lz4.level": 9, "compression.zstd.level": 3}
        conf.update({f"compression.{k}.level": v for k, v in kw.items()})
        return sealer_mod.codec_level(codec, conf)
    assert [level(COMPRESSION_GZIP), level(COMPRESSION_GZIP, gzip=1), level(COMPRESSION_GZIP, gzip=9)] == [6, 1, 9]
    with pytest.raises(ConfigError, match="compression.gzip.level"):
        level(COMPRESSION_GZIP, gzip=0)
    assert [level(COMPRESSION_LZ4), level(COMPRESSION_LZ4, lz4=1), level(COMPRESSION_LZ4, lz4=12)] == [0, 1, 12]
    assert [level(COMPRESSION_ZSTD), level(COMPRESSION_ZSTD, zstd=-5), level(COMPRESSION_ZSTD, zstd=19)] == [3, -5, 19]
    assert level(0) is None and level(2) is None


@pytest.mark.parametrize("name,level", [("gzip", 1), ("gzip", 9), ("lz4", 12), ("zstd", 1), ("zstd", 19)])
def test_native_and_python_paths_compress_at_the_level_given(name, level):
    """Both sealing paths honour a level: their batches decode to the same records; gzip and lz4 are
    byte-equal (zstd's frames differ between the libraries); a level changes the batch."""
    codec = CODECS[name]
    buf = _records_section(400, 300)
    py = R.write_batch_buffer(bytes(buf), 400, 10, 12, compression=codec, level=level)
    default = R.write_batch_buffer(bytes(buf), 400, 10, 12, compression=codec)
    s = sealer_mod.native_sealer(codec, level)
    assert s is not None
    try:
        s.submit("t", buf, 400, 10, 12, 0, -1, -1, -1)
        [(_, wire, err)] = _wait_collect(s, 1)
    finally:
        s.close()
    assert err is None
    assert list(R.iter_records(bytes(wire), check_crc=True)) == list(R.iter_records(bytes(py), check_crc=True))
    if codec != COMPRESSION_ZSTD:
        assert wire == py
    assert py != default


@pytest.mark.timeout(120)
def test_a_producer_applies_its_compression_level():
    """The same records written by producers at two levels of compression.<codec>.level take
    different room in the broker's log (the higher level less), and read back the same."""
    values = [b"value-%06d-" % (i % 50) * 30 for i in range(3000)]
    sizes = {}
    with KohortBroker() as b:
        for name, level in [("gzip", 1), ("gzip", 9), ("lz4", 9), ("lz4", 12), ("zstd", 1), ("zstd", 19)]:
            topic = f"level-{name}-{level}"
            p = Producer({"bootstrap.servers": b.bootstrap, "compression.type": name,
                          f"compression.{name}.level": level, "linger.ms": 50})
            try:
                for v in values:
                    p.produce(topic, v, partition=0)
                assert p.flush(60) == 0
            finally:
                p.close(5)
            assert [r.value for r in _read_all(b.bootstrap, topic, len(values))] == values
            logs = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(b.data_dir, f"{topic}-0"))
                    for f in fs if f.endswith(".log")]
            sizes[name, level] = sum(os.path.getsize(f) for f in logs)
    assert 0 < sizes["gzip", 9] < sizes["gzip", 1], sizes
    assert 0 < sizes["lz4", 12] < sizes["lz4", 9], sizes
    assert 0 < sizes["zstd", 19] < sizes["zstd", 1], sizes
