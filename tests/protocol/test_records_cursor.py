"""records.RecordCursor: decode_records_list in resumable steps, the C cursor (`_crecords.FetchCursor`)
against the pure-Python twin and both against decode_records_list.

* on hypothesis-generated payloads (every codec, LogAppendTime, control and transactional batches,
  legacy v0/v1 entries, partial trailing batches): the steps of either twin join to exactly the
  list decode_records_list gives, for tuples, record factories and offset windows, step by step
  the same lists in C and Python;
* on mutated bytes: the same steps, then the same DecodeError class at the same step, in C and
  Python, and a failed cursor stays done;
* each step resumes where the last stopped: a batch is decompressed once (the budget is spent
  once), the work of small steps over a large batch stays linear, and the decompression budget
  (int or shared DecompressionBudget) ends where decode_records_list leaves it, errors included;
* NeedsPython (legacy entries, values beyond int64) hands the rest to the Python twin from where
  the step began, mid-batch too; the record bytes stay exported only while records are left; no
  leaks; records with headers tracked by the collector again.
"""
import gc
import random
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohort.errors import DecodeError
from kohort.protocol import compression as comp
from kohort.protocol import records as R
from kohort.structs import ConsumerRecord
from tests.protocol import test_records as T
from tests.protocol.test_records_ext import PlainNT, fetch_payload

needs_ext = pytest.mark.skipif(not R.HAVE_EXTENSION, reason="C extension not built")
IMPLS = ["python", pytest.param("c", marks=needs_ext)]
BOTH = ["python"] + (["c"] if R.HAVE_EXTENSION else [])


@pytest.fixture(params=IMPLS)
def impl(request):
    old = R.use_extension(request.param == "c")
    yield request.param
    R.use_extension(old)


def steps(impl: str, payload, step: int, **kw) -> list:
    """Every take of a fresh cursor until done: ("ok", records) or ("error", class, message) last."""
    old = R.use_extension(impl == "c")
    try:
        cur = R.RecordCursor(payload, **kw)
        out = []
        for _ in range(100_000):
            if cur.done:
                return out
            try:
                recs = cur.take(step)
            except DecodeError as e:
                out.append(("error", type(e)))
                assert cur.done and cur.take(step) == []
                return out
            assert len(recs) <= step
            out.append(("ok", recs))
        raise AssertionError("the cursor never finished")
    finally:
        R.use_extension(old)


def joined(outs: list) -> list:
    return [r for o in outs if o[0] == "ok" for r in o[1]]


def whole(payload, check_crc=False, **kw):
    try:
        return ("ok", R._py_decode_records_list(payload, check_crc, **kw))
    except DecodeError as e:
        return ("error", type(e))


# -- equality ---------------------------------------------------------------------------------------
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=fetch_payload(), check_crc=st.booleans(), step=st.sampled_from([1, 2, 3, 7, 1000]),
       as_type=st.sampled_from([bytes, bytearray, memoryview]), window=st.booleans())
def test_steps_join_to_decode_records_list(payload, check_crc, step, as_type, window):
    want = R._py_decode_records_list(payload, check_crc)
    kw = {"check_crc": check_crc}
    if window and want:
        kw.update(min_offset=want[len(want) // 3][0], max_offset=want[-1][0])
    for factory, prefix in ((None, ()), (ConsumerRecord, ("t", 3)), (PlainNT, ())):
        full = dict(kw, record_factory=factory, prefix=prefix) if factory else dict(kw)
        expect = whole(payload, **full)
        assert expect[0] == "ok"
        per_impl = [steps(impl, as_type(payload), step, **full) for impl in BOTH]
        for outs in per_impl:
            assert joined(outs) == expect[1]
            assert all(o[0] == "ok" for o in outs)
            assert all(len(o[1]) == step for o in outs[:-1]) and len(outs[-1][1]) < step
            if factory is not None:
                assert all(type(r) is factory for r in joined(outs))
        assert all(p == per_impl[0] for p in per_impl)


_SEEDS = T._SEEDS + [
    R.build_batch(T.sample_records(40, seed=3), compression=c, timestamp_type=t)
    for c in T.CODECS for t in (0, 1)
] + [R.build_batch([(b"k", b"v", [("a", b"b"), ("c", None)], 5)] * 9)]


@needs_ext
@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(seeds=st.lists(st.sampled_from(_SEEDS), min_size=1, max_size=3), rseed=st.integers(0, 2**32),
       fix_crc=st.booleans(), step=st.sampled_from([1, 4, 50]))
def test_mutated_payloads_fail_alike_step_by_step(seeds, rseed, fix_crc, step):
    rnd = random.Random(rseed)
    raw = bytearray(b"".join(seeds))
    for _ in range(rnd.randint(1, 3)):
        i = rnd.randrange(len(raw))
        op = rnd.randrange(4)
        if op == 0:
            raw[i] = rnd.randrange(256)
        elif op == 1:
            del raw[i:]
        elif op == 2:
            raw[i:i] = rnd.randbytes(rnd.randint(1, 8))
        else:
            raw[i] = rnd.choice([0x00, 0x01, 0x7F, 0x80, 0xFF])
        if len(raw) < 2:
            break
    if fix_crc:          # keep the first batch's CRC right, so its records are read
        h = bytes(raw[:61])
        if len(raw) >= 61 and h[16] == 2:
            end = 12 + struct.unpack_from(">i", h, 8)[0]
            if 21 <= end <= len(raw):
                struct.pack_into(">I", raw, 17, R._crc32c(bytes(raw[21:end])))
    data = bytes(raw)
    for check_crc in (False, True):
        c, py = (steps(impl, data, step, check_crc=check_crc, record_factory=PlainNT) for impl in ("c", "python"))
        assert c == py
        expect = whole(data, check_crc=check_crc, record_factory=PlainNT)
        if expect[0] == "ok":
            assert joined(c) == expect[1] and c[-1][0] == "ok"
            continue
        assert c[-1] == expect                      # the same error class
        streamed = []                               # what the reference walk yields before failing
        try:
            for r in R._py_iter_batches_full(data, check_crc, R.DecompressionBudget()):
                streamed.append(PlainNT(r[0], r[1], r[5], r[2], r[3], r[4], r[6]))
        except DecodeError:
            pass
        got = joined(c)
        assert got == streamed[:len(got)] and len(streamed) - len(got) < step


# -- resuming ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", T.CODECS[1:])
def test_a_compressed_batch_is_decompressed_once(impl, codec):
    recs = [(None, b"%06d" % i * 10, None, i) for i in range(5000)]
    payload = R.build_batch(recs, compression=codec) + R.build_batch(recs[:10], base_offset=5000, compression=codec)
    probe = R.DecompressionBudget()
    want = R.decode_records_list(payload, max_size=probe)
    b = R.DecompressionBudget()
    cur = R.RecordCursor(payload, max_size=b)
    got = cur.take(7)
    spent_first = b.limit - b.left
    assert 0 < spent_first < b.limit - probe.left          # the first batch only
    for _ in range(200):
        got += cur.take(7)
        assert b.limit - b.left == spent_first          # no batch decompressed again
    while not cur.done:
        got += cur.take(7)
    assert got == want and b.left == probe.left


@needs_ext
def test_small_steps_over_a_large_batch_stay_linear():
    """The C cursor (the Python twin is a generator, which resumes by construction)."""
    payload = R.build_batch([(None, b"v" * 20, None, i) for i in range(40_000)])

    def best(fn):
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return min(ts)

    def by_steps():
        cur = R.RecordCursor(payload, record_factory=ConsumerRecord, prefix=("t", 0))
        n = 0
        while not cur.done:
            n += len(cur.take(16))
        assert n == 40_000
    old = R.use_extension(True)
    try:
        one = best(lambda: R.decode_records_list(payload, record_factory=ConsumerRecord, prefix=("t", 0)))
        stepped = best(by_steps)
    finally:
        R.use_extension(old)
    # 2,500 steps: walking from the batch's start each time would read ~50M records (>100x one call)
    assert stepped < 10 * one + 0.02, (stepped, one)


def test_steps_resume_inside_batches_across_every_kind(impl):
    ctrl = R.build_control_batch(False, producer_id=5, producer_epoch=1, base_offset=30)
    payload = (R.build_batch([(b"k%d" % i, b"v", [("h", b"%d" % i)], i) for i in range(30)], compression=2)
               + ctrl
               + R.build_batch([(None, b"w%d" % i, None, 100 + i) for i in range(25)], base_offset=31,
                               timestamp_type=1)
               + R.build_batch([(None, b"z", None, 7)] * 3, base_offset=56, transactional=True, producer_id=5))
    want = R._py_decode_records_list(payload, min_offset=4, record_factory=ConsumerRecord, prefix=("t", 1))
    assert [r.offset for r in want] == list(range(4, 30)) + list(range(31, 59))
    for step in (1, 5, 26, 54, 55):
        outs = steps(impl, payload, step, min_offset=4, record_factory=ConsumerRecord, prefix=("t", 1))
        assert joined(outs) == want


def test_the_budget_ends_as_decode_records_list_leaves_it(impl):
    data = b"".join(R.build_batch([(None, b"\0" * 3000, [], 1)] * 2, compression=comp.COMPRESSION_ZSTD,
                                  base_offset=2 * i) for i in range(3))
    probe = R.DecompressionBudget(1 << 20)
    full = R._py_decode_records_list(data, max_size=probe)
    need = probe.limit - probe.left
    for limit in (0, need // 3, need // 3 * 2 + 5, need - 1, need, need + 7):
        ref = R.DecompressionBudget(limit)
        try:
            expect = ("ok", R._py_decode_records_list(data, max_size=ref))
        except DecodeError as e:
            expect = ("error", type(e))
        outs = []
        for shared in (False, True):
            b = R.DecompressionBudget(limit)
            got = steps(impl, data, 1, max_size=b if shared else limit)
            if expect[0] == "ok":
                assert joined(got) == expect[1] and got[-1][0] == "ok"
            else:
                assert got[-1] == expect and joined(got) == full[:len(joined(got))]
            if shared:
                assert b.left == ref.left, (limit, b.left, ref.left)
            outs.append(got)
        assert outs[0] == outs[1]
    assert len(steps(impl, data, 1, max_size=need // 3 * 2 + 5)) == 5      # 4 records, then the error


def test_a_shared_budget_spent_between_steps_is_respected(impl):
    data = b"".join(R.build_batch([(None, b"\0" * 4000, [], 1)], compression=comp.COMPRESSION_ZSTD,
                                  base_offset=i) for i in range(3))
    b = R.DecompressionBudget(12_000)
    cur = R.RecordCursor(data, max_size=b)
    assert len(cur.take(1)) == 1 and b.left == 12_000 - 4009
    b.left -= 3000                                 # another partition of the answer spent it
    assert len(cur.take(1)) == 1 and b.left == 12_000 - 3000 - 2 * 4009
    with pytest.raises(DecodeError, match="982 bytes left of the fetch's decompression budget"):
        cur.take(1)
    assert cur.done and cur.take(5) == []


# -- NeedsPython ------------------------------------------------------------------------------------
@needs_ext
def test_values_beyond_int64_go_to_the_python_twin_mid_batch():
    head = R.build_batch([(b"a", b"1", None, 1)] * 4, compression=1)
    over = R.build_batch([(b"k", b"%d" % i, None, 1) for i in range(10)], base_offset=2**63 - 6, compression=2)
    tail = R.build_batch([(None, b"t", None, 2)] * 3, base_offset=5)
    payload = head + over + tail
    want = R._py_decode_records_list(payload, record_factory=PlainNT)
    assert [r.offset for r in want][4:10] == [2**63 - 6 + i for i in range(6)] and want[13].offset == 2**63 + 3
    for step in (1, 3, 6, 100):
        b = R.DecompressionBudget()
        ref = R.DecompressionBudget()
        R._py_decode_records_list(payload, max_size=ref)
        c = steps("c", payload, step, record_factory=PlainNT, max_size=b)
        assert c == steps("python", payload, step, record_factory=PlainNT)
        assert joined(c) == want and b.left == ref.left
    cur = R._ext.FetchCursor(payload, False, None, None, None, PlainNT, ())
    assert len(cur.take(7)) == 7                      # 4 of head, 3 of over (its offsets still fit)
    with pytest.raises(R._ext.NeedsPython):
        cur.take(7)
    assert cur.done and cur.resume[:2] == (len(head), 3)


@needs_ext
def test_legacy_entries_go_to_the_python_twin():
    v2 = R.build_batch([(b"k", b"%d" % i, None, 5) for i in range(6)], compression=1)
    legacy = T.legacy_msg(6, 1, b"a", b"b", timestamp=9) + T.legacy_msg(
        8, 1, None, comp.compress(1, T.legacy_msg(0, 1, b"x", b"y", timestamp=1)
                                  + T.legacy_msg(1, 1, None, b"z", timestamp=2)),
        timestamp=2, attributes=1)
    more = R.build_batch([(None, b"w", None, 5)] * 2, base_offset=9)
    payload = v2 + legacy + more
    for step in (1, 2, 4, 50):
        for kw in ({}, {"record_factory": ConsumerRecord, "prefix": ("t", 0)}, {"check_crc": True}):
            c = steps("c", payload, step, **kw)
            assert c == steps("python", payload, step, **kw)
            assert joined(c) == whole(payload, **kw)[1] and len(joined(c)) == 11


# -- resources --------------------------------------------------------------------------------------
@needs_ext
def test_the_buffer_is_exported_only_while_records_are_left():
    buf = bytearray(R.build_batch([(None, b"x", None, 1)] * 10, compression=1))
    cur = R.RecordCursor(buf)
    assert len(cur.take(3)) == 3
    with pytest.raises(BufferError):
        buf += b"\0"
    assert len(cur.take(100)) == 7 and cur.done
    buf += b"\0"                                  # released once done
    cur = R.RecordCursor(buf)
    cur.take(2)
    del cur                                       # abandoned mid-batch
    gc.collect()
    buf += b"\0"


@needs_ext
def test_records_with_headers_are_tracked_again():
    payload = R.build_batch([(None, b"v", [("h", b"1")], 1), (None, b"v", None, 1)] * 5)
    cur = R.RecordCursor(payload, record_factory=ConsumerRecord, prefix=("t", 0))
    got = cur.take(4) + cur.take(100)
    assert [gc.is_tracked(r) for r in got] == [True, False] * 5


@needs_ext
def test_no_leaks_on_steps_errors_and_abandoned_cursors():
    good = R.build_batch(T.sample_records(40), compression=1)
    bad = bytearray(good)
    bad[-3] ^= 0xFF
    over = R.build_batch([(b"k", b"v", None, 1)] * 4, base_offset=2**63 - 2)

    def run():
        for data in (good, bytes(bad), good + over, over):
            for kw in ({}, {"check_crc": True}, {"record_factory": PlainNT},
                       {"record_factory": ConsumerRecord, "prefix": ("t", 0), "max_size": R.DecompressionBudget()}):
                cur = R.RecordCursor(data, **kw)
                try:
                    while not cur.done:
                        cur.take(3)
                except DecodeError:
                    pass
                half = R._ext.FetchCursor(data, False, None, None, None, None, ())
                try:
                    half.take(5)
                except (DecodeError, R._ext.NeedsPython):
                    pass
    run()
    tracemalloc.start()
    try:
        run()
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(30):
            run()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, grown


def test_bad_arguments(impl):
    payload = R.build_batch([(None, b"x", None, 1)])
    with pytest.raises(TypeError):
        R.RecordCursor(payload, prefix=("t",))
    cur = R.RecordCursor(payload)
    with pytest.raises(ValueError):
        cur.take(0)
    assert cur.take(1) == [(0, 1, None, b"x", [])] and not cur.done
    assert cur.take(1) == [] and cur.done
    if impl == "c":
        with pytest.raises(TypeError):
            R._ext.FetchCursor(payload).__init__(payload)
        with pytest.raises(TypeError):
            R._ext.FetchCursor.__new__(R._ext.FetchCursor).take(1)
