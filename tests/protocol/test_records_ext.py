"""The C record decoder (kohort.protocol._crecords) against the pure-Python one.

* every scenario of test_records.py rerun under both implementations (the `impl` fixture);
* C == Python on hypothesis-generated fetch payloads (all codecs, LogAppendTime, control batches,
  legacy v0/v1 entries, partial trailing batches), for iter_records, decode_records_list (tuples,
  offset windows, record factories) and decode_columns (also as Arrow);
* fuzzing: random and mutated bytes make the C path raise DecodeError only, the same class as
  Python, or give Python's result; values beyond int64 go back to Python (NeedsPython);
* CRC-32C against the crc32c package, GC tracking, KOHORT_NO_EXT, no leaks on error paths.
"""
import gc
import os
import random
import struct
import subprocess
import sys
import tracemalloc
import weakref
from collections import namedtuple
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohort.errors import DecodeError
from kohort.protocol import compression as comp
from kohort.protocol import records as R
from tests.protocol import test_records as T
from tests.protocol.test_records import kp_snappy  # noqa: F401  (fixture used by the rerun scenarios)

needs_ext = pytest.mark.skipif(not R.HAVE_EXTENSION, reason="C extension not built")
IMPLS = ["python", pytest.param("c", marks=needs_ext)]


@pytest.fixture(params=IMPLS)
def impl(request):
    old = R.use_extension(request.param == "c")
    yield request.param
    R.use_extension(old)


# -- every test_records.py scenario under both implementations -----------------------------------
_SCENARIOS = [name for name in dir(T) if name.startswith("test_") and (
    "batch" in name or "record" in name or "legacy" in name or "crc" in name or "control" in name
    or "magic" in name or "varint" in name or "fuzz" in name or "hostile" in name
    or "kafka_python" in name or "kohort" in name)]


@pytest.mark.parametrize("scenario", _SCENARIOS)
def test_records_scenarios_both_impls(scenario, impl, request):
    fn = getattr(T, scenario)
    if hasattr(fn, "hypothesis"):
        fn()                                        # the @given test runs its own examples
        return
    import inspect
    marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
    grid = [{}]
    for mark in marks:                                # stacked parametrize marks: their product
        names = mark.args[0]
        names = [a.strip() for a in names.split(",")] if isinstance(names, str) else list(names)
        rows = [dict(zip(names, v if len(names) > 1 else (v,))) for v in mark.args[1]]
        grid = [{**g, **r} for g in grid for r in rows]
    kwargs = {}
    for name in inspect.signature(fn).parameters:
        if name == "kp_snappy":
            kwargs[name] = request.getfixturevalue("kp_snappy")
        elif name not in grid[0]:
            pytest.fail(f"unexpected parameter {name}")
    for params in grid:
        fn(**kwargs, **params)


def test_scenarios_found():
    assert len(_SCENARIOS) >= 15 and "test_batch_round_trip" in _SCENARIOS


# -- payload generators ---------------------------------------------------------------------------
header_st = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6))
record_st = st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=300),
                      st.lists(header_st, max_size=3),
                      st.integers(-2**40, 2**42))


@st.composite
def v2_batch(draw):
    recs = draw(st.lists(record_st, min_size=1, max_size=12))
    kind = draw(st.sampled_from(["data", "data", "data", "control"]))
    if kind == "control":
        return R.build_control_batch(draw(st.booleans()), producer_id=draw(st.integers(0, 99)),
                                     producer_epoch=1, base_offset=draw(st.integers(0, 2**40)))
    raw = R.build_batch(
        recs, base_offset=draw(st.integers(0, 2**50)), compression=draw(st.sampled_from(T.CODECS)),
        timestamp_type=draw(st.sampled_from([0, 1])),
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)),
        transactional=draw(st.booleans()))
    if R.read_batch_header(raw).timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME:
        raw = bytearray(raw)
        R.set_log_append_time(raw, 0, draw(st.integers(0, 2**42)))
        raw = bytes(raw)
    return raw


@st.composite
def legacy_entry(draw):
    magic = draw(st.sampled_from([0, 1]))
    codec = draw(st.sampled_from([0, 1, 2, 3] if magic == 1 else [0, 1, 2]))
    base = draw(st.integers(0, 2**40))
    n = draw(st.integers(1, 4))
    ts = draw(st.integers(0, 2**41))
    msgs = [T.legacy_msg(base + i if not codec or magic == 0 else i, magic,
                         draw(st.none() | st.binary(max_size=10)), draw(st.binary(max_size=30)),
                         timestamp=ts + i) for i in range(n)]
    if not codec:
        return b"".join(msgs)
    return T.legacy_msg(base + n - 1, magic, None, comp.compress(codec, b"".join(msgs)),
                        timestamp=ts, attributes=codec | (8 if draw(st.booleans()) else 0))


@st.composite
def fetch_payload(draw):
    parts = draw(st.lists(st.one_of(v2_batch(), v2_batch(), legacy_entry()), max_size=5))
    payload = b"".join(parts)
    if payload and draw(st.booleans()):          # a partial trailing batch
        extra = draw(v2_batch())
        payload += extra[:draw(st.integers(0, len(extra) - 1))]
    return payload


def c_list(payload, **kw):
    old = R.use_extension(True)
    try:
        return R.decode_records_list(payload, **kw)
    finally:
        R.use_extension(old)


class ConsumerRecordNT(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list
    leader_epoch: int | None


PlainNT = namedtuple("PlainNT", "offset timestamp timestamp_type key value headers leader_epoch")


class NotATuple:
    __slots__ = ("args",)

    def __init__(self, *args):
        self.args = args

    def __eq__(self, other):
        return type(other) is NotATuple and other.args == self.args


class TupleWithDict(tuple):
    def __new__(cls, *args):
        self = super().__new__(cls, args)
        self.made_by_new = True
        return self


def _same_outcome(fn_py, fn_c):
    """Both return equal values, or both raise the same DecodeError subclass."""
    try:
        want = ("ok", fn_py())
    except DecodeError as e:
        want = ("err", type(e))
    try:
        got = ("ok", fn_c())
    except DecodeError as e:
        got = ("err", type(e))
    assert got == want
    return want


# -- equality on generated payloads ----------------------------------------------------------------
@needs_ext
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=fetch_payload(), check_crc=st.booleans(), as_type=st.sampled_from([bytes, bytearray,
                                                                                  memoryview]))
def test_c_equals_python_on_generated_payloads(payload, check_crc, as_type):
    want = list(R._py_iter_records(payload, check_crc))
    buf = as_type(payload)
    assert R._ext.decode_fetch(buf, check_crc) == want
    assert c_list(buf, check_crc=check_crc) == want
    old = R.use_extension(True)
    try:
        assert list(R.iter_records(buf, check_crc)) == want
        cols = R.decode_columns(buf, check_crc)
    finally:
        R.use_extension(old)
    for step in (1, 3):                              # the chunked walk iter_records streams with
        got, pos = [], 0
        while pos >= 0:
            recs, pos = R._ext.decode_chunk(buf, pos, check_crc, R.DEFAULT_MAX_SIZE, step)
            got += recs
        assert got == want
    assert cols == R._py_decode_columns(payload, check_crc)
    assert cols.count == len(want)
    if want:
        lo = want[len(want) // 3][0]
        hi = want[-1][0]
        win = [r for r in want if lo <= r[0] < hi]
        assert c_list(buf, min_offset=lo, max_offset=hi) == win
        assert R._py_decode_records_list(payload, min_offset=lo, max_offset=hi) == win
        assert R._ext.decode_columns(buf, False, None, lo, hi) == \
            tuple(R._py_decode_columns(payload, False, R.DEFAULT_MAX_SIZE, lo, hi))
    for factory, prefix in ((ConsumerRecordNT, ("t", 3)), (PlainNT, ()), (NotATuple, ("x",))):
        py = R._py_decode_records_list(payload, check_crc, record_factory=factory, prefix=prefix)
        fields = [tuple(r)[len(prefix):] if factory is not NotATuple else r.args[1:] for r in py]
        assert [(o, ts, k, v, hs) for o, ts, tt, k, v, hs, ep in fields] == want
        c = c_list(buf, check_crc=check_crc, record_factory=factory, prefix=prefix)
        assert c == py and all(type(r) is factory for r in c)


def test_record_factory_fields_and_direct_fill():
    batch = R.build_batch([(b"k", b"v", [("h", b"1")], 50)], base_offset=7, compression=1,
                          partition_leader_epoch=4)
    legacy = T.legacy_msg(8, 0, None, b"old")
    for use_c in ([False, True] if R.HAVE_EXTENSION else [False]):
        old = R.use_extension(use_c)
        try:
            got = R.decode_records_list(batch + legacy, record_factory=ConsumerRecordNT,
                                        prefix=("topic", 0))
            other = R.decode_records_list(batch, record_factory=TupleWithDict)
        finally:
            R.use_extension(old)
        assert got == [ConsumerRecordNT("topic", 0, 7, 50, 0, b"k", b"v", [("h", b"1")], 4),
                       ConsumerRecordNT("topic", 0, 8, -1, -1, None, b"old", [], None)]
        assert got[0].value == b"v" and got[1].timestamp_type == -1
        assert other[0].made_by_new and tuple(other[0]) == (7, 50, 0, b"k", b"v", [("h", b"1")], 4)
        unknown = R.decode_records_list(R.build_batch([(None, b"x", None, 1)]), record_factory=PlainNT)
        assert unknown[0].leader_epoch is None
    with pytest.raises(TypeError):
        R.decode_records_list(batch, prefix=("t",))


def test_record_factory_is_the_consumers_record_class(impl):
    from kohort.structs import ConsumerRecord
    payload = R.build_batch([(b"k", b"v", [("h", None)], 5), (None, None, None, 6)], base_offset=3,
                            partition_leader_epoch=2, compression=2) + T.legacy_msg(5, 1, b"a", b"b", 9)
    got = R.decode_records_list(payload, min_offset=4, record_factory=ConsumerRecord,
                                prefix=("orders", 7))
    assert got == [ConsumerRecord("orders", 7, 4, 6, 0, None, None, [], 2),
                   ConsumerRecord("orders", 7, 5, 9, 0, b"a", b"b", [], None)]
    assert all(type(r) is ConsumerRecord for r in got)
    assert (got[1].topic, got[1].offset, got[1].key, got[1].leader_epoch) == ("orders", 5, b"a", None)
    counted = R.decode_records_list(payload, min_offset=4, record_factory=ConsumerRecord,
                                    prefix=("orders", 7), suffix=(3,))     # a share consumer's delivery count
    assert counted == [ConsumerRecord(*r, delivery_count=3) for r in got]
    assert all(type(r) is ConsumerRecord and r.delivery_count == 3 for r in counted)
    with pytest.raises(TypeError):
        R.decode_records_list(payload, suffix=(3,))


# -- fuzzing --------------------------------------------------------------------------------------
def _c_vs_py(data):
    _same_outcome(lambda: list(R._py_iter_records(data)), lambda: R._ext.decode_fetch(data))
    _same_outcome(lambda: list(R._py_iter_records(data, True)),
                  lambda: R._ext.decode_fetch(data, True))
    _same_outcome(lambda: tuple(R._py_decode_columns(data)), lambda: R._ext.decode_columns(data))
    _same_outcome(lambda: R._py_decode_records_list(data, record_factory=PlainNT),
                  lambda: R._ext.decode_fetch(data, record_factory=PlainNT))


@needs_ext
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=300))
def test_fuzz_c_random_bytes(data):
    _c_vs_py(data)


_SEEDS = T._SEEDS + [
    R.build_batch(T.sample_records(4, seed=9), compression=c, timestamp_type=1) for c in T.CODECS
] + [R.build_batch([(b"k", b"v", [("a", b"b"), ("c", None)], 5)] * 3)]


@needs_ext
@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.sampled_from(_SEEDS), rseed=st.integers(0, 2**32), fix_crc=st.booleans())
def test_fuzz_c_mutated_batches(seed, rseed, fix_crc):
    rnd = random.Random(rseed)
    raw = bytearray(seed)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(5)
        i = rnd.randrange(len(raw))
        if op == 0:
            raw[i] = rnd.randrange(256)
        elif op == 1:
            del raw[i:]
        elif op == 2:
            raw[i:i] = rnd.randbytes(rnd.randint(1, 8))
        elif op == 3:
            raw[i] = rnd.choice([0x00, 0x01, 0x7F, 0x80, 0xFF])
        else:                                      # record area only, header intact
            j = rnd.randrange(min(61, len(raw) - 1), len(raw))
            raw[j] = rnd.randrange(256)
        if len(raw) < 2:
            break
    if fix_crc and len(raw) >= 61 and raw[16] == 2:
        struct.pack_into(">I", raw, 17, R._crc32c(bytes(raw[21:])))
    data = bytes(raw)
    _c_vs_py(data)
    _same_outcome(lambda: list(R._py_iter_records(data)), lambda: list(R.iter_records(data)))


def _hand_batch(records_section: bytes, count: int, base_offset=0, base_ts=0, attributes=0):
    hdr = struct.pack(">qiibIhiqqqhii", base_offset, 49 + len(records_section), -1, 2, 0,
                      attributes, count - 1, base_ts, base_ts, -1, -1, -1, count)
    raw = bytearray(hdr + records_section)
    struct.pack_into(">I", raw, 17, R._crc32c(bytes(raw[21:])))
    return bytes(raw)


def _record(body: bytes) -> bytes:
    out = bytearray()
    R._zz_varint(out, len(body))
    return bytes(out) + body


@needs_ext
def test_hostile_varints_and_lengths():
    cases = {
        "5-byte length 2**34": b"\xff\xff\xff\xff\x7f" + b"\x00" * 10,
        "6-byte varint": b"\x80\x80\x80\x80\x80\x01" + b"\x00" * 10,
        "negative length": b"\x03" + b"\x00" * 10,
        "truncated varint at end": b"\x0e\x00\x00\x00\x00\x00\x00\x80",
        "key length -2": _record(b"\x00\x00\x00\x03\x00\x00"),
        "key overruns": _record(b"\x00\x00\x00\x40\x00\x00"),
        "header count huge": _record(b"\x00\x00\x00\x01\x01\xfe\xff\xff\xff\x0f"),
        "header count -1": _record(b"\x00\x00\x00\x01\x01\x01"),
        "header key not utf-8": _record(b"\x00\x00\x00\x01\x01\x02\x02\xff\xfe\x01"),
        "header value -3": _record(b"\x00\x00\x00\x01\x01\x02\x02ab\x05"),
        "record longer than fields": _record(b"\x00\x00\x00\x01\x01\x00\x00"),
        "10-byte varlong too long": _record(b"\x00" + b"\x80" * 10 + b"\x01\x00\x01\x01\x00"),
    }
    for name, section in cases.items():
        data = _hand_batch(section, 1)
        with pytest.raises(DecodeError):
            R._ext.decode_fetch(data)
        with pytest.raises(DecodeError):
            list(R._py_iter_records(data))
        _c_vs_py(data)
    # non-canonical varints (0x80 0x00 for 0) decode the same in both
    odd = _hand_batch(_record(b"\x00\x80\x00\x80\x00\x01\x01\x80\x00"), 1)
    assert R._ext.decode_fetch(odd) == list(R._py_iter_records(odd)) == [(0, 0, None, None, [])]


@needs_ext
def test_values_beyond_int64_go_back_to_python():
    # offsets overflow int64: Python ints keep going, C hands the payload back to Python
    raw = R.build_batch([(b"k", b"v", None, 1)] * 3, base_offset=2**63 - 2)
    with pytest.raises(R._ext.NeedsPython):
        R._ext.decode_fetch(raw)
    want = list(R._py_iter_records(raw))
    assert [r[0] for r in want] == [2**63 - 2, 2**63 - 1, 2**63]
    assert c_list(raw) == want
    old = R.use_extension(True)
    try:
        assert list(R.iter_records(raw)) == want
        with pytest.raises(DecodeError, match="int64"):
            R.decode_columns(raw)
    finally:
        R.use_extension(old)
    # a 10-byte varlong timestamp delta with bits above bit 63
    wide = _hand_batch(_record(b"\x00" + b"\xff" * 9 + b"\x7f" + b"\x00\x01\x01\x00"), 1)
    want = list(R._py_iter_records(wide))
    assert want[0][1] == -(2**69)
    with pytest.raises(R._ext.NeedsPython):
        R._ext.decode_fetch(wide)
    assert c_list(wide) == want
    # ...but in a LogAppendTime batch the delta is ignored, so C decodes it itself
    lat = _hand_batch(_record(b"\x00" + b"\xff" * 9 + b"\x7f" + b"\x00\x01\x01\x00"), 1,
                      base_ts=77, attributes=R.ATTR_TIMESTAMP_TYPE)
    assert R._ext.decode_fetch(lat) == list(R._py_iter_records(lat)) == [(0, 77, None, None, [])]


def test_iter_records_keeps_partial_results_before_a_fault(impl):
    good = R.build_batch([(b"a", b"1", None, 1), (b"b", b"2", None, 2)], base_offset=0)
    bad = bytearray(R.build_batch([(b"c", b"3", None, 3)], base_offset=2))
    bad[16] = 7                                     # unknown magic
    it = R.iter_records(good + bytes(bad))
    assert next(it)[0] == 0 and next(it)[0] == 1
    with pytest.raises(DecodeError, match="magic"):
        next(it)
    with pytest.raises(DecodeError):
        R.decode_records_list(good + bytes(bad))


def test_iter_records_fault_after_several_chunks(impl):
    batches = [R.build_batch([(b"k", b"%d" % i, None, i) for i in range(300)], base_offset=300 * b,
                             compression=b % 2) for b in range(4)]
    bad = bytearray(R.build_batch([(b"k", b"v", None, 1)], base_offset=1200))
    bad[-1] = 0x06                                   # header count 3 in a 0-byte space
    payload = b"".join(batches) + bytes(bad) + batches[0]
    seen = []
    with pytest.raises(R.CorruptRecordError):
        for r in R.iter_records(payload):
            seen.append(r[0])
    assert seen == list(range(1200))
    assert [r[0] for r in R.iter_records(b"".join(batches))] == list(range(1200))


def test_decompression_limit_and_codec_errors(impl):
    b = R.BatchBuilder(compression=4)
    b.append(None, bytes(3 << 20), None, 1)
    raw = b.build()
    with pytest.raises(DecodeError, match="limit"):
        R.decode_records_list(raw, max_size=1 << 20)
    assert len(R.decode_records_list(raw, max_size=4 << 20)[0][3]) == 3 << 20
    unknown = bytearray(R.build_batch([(b"k", b"v", None, 1)]))
    struct.pack_into(">h", unknown, 21, 6)           # codec id 6
    with pytest.raises(DecodeError, match="codec"):
        R.decode_columns(bytes(unknown))


# -- columns / Arrow --------------------------------------------------------------------------------
def test_columns_layout_and_arrow(impl):
    recs = [(b"k1", b"v1", [("h", b"x")], 10), (None, b"", None, 11), (b"", None, None, 12)]
    payload = R.build_batch(recs, base_offset=100, compression=3) + T.legacy_msg(103, 0, b"z", b"w")
    cols = R.decode_columns(payload, min_offset=101)
    assert cols.count == 3
    assert struct.unpack("<3q", cols.offsets) == (101, 102, 103)
    assert struct.unpack("<3q", cols.timestamps) == (11, 12, -1)
    assert struct.unpack("<3b", cols.timestamp_types) == (0, 0, -1)
    assert cols.key_validity == bytes([0b110]) and cols.value_validity == bytes([0b101])
    assert struct.unpack("<4i", cols.key_offsets) == (0, 0, 0, 1) and cols.key_data == b"z"
    assert cols.headers is None
    rb = cols.to_arrow()
    assert rb.column("key").to_pylist() == [None, b"", b"z"]
    assert rb.column("value").to_pylist() == [b"", None, b"w"]
    assert rb.column("headers").to_pylist() == [[], [], []]
    full = R.decode_columns(payload).to_arrow()
    assert full.column("headers").to_pylist()[0] == [{"key": "h", "value": b"x"}]
    assert full.column("offset").to_pylist() == [100, 101, 102, 103]
    empty = R.decode_columns(b"")
    assert empty.count == 0 and empty.to_arrow().num_rows == 0


# -- CRC, GC, switches, leaks ---------------------------------------------------------------------
@needs_ext
def test_crc32c_matches_the_crc32c_package():
    rnd = random.Random(5)
    for n in list(range(0, 40)) + [1000, 4097, 4096 + 31, 65536 + 3, 300_001]:   # one and three lanes
        data = rnd.randbytes(n + 7)
        for start in (0, 1, 3, 7):
            view = memoryview(data)[start:start + n]
            assert R._ext.crc32c(view) == R._crc32c(view)
    assert R._ext.crc32c(b"123456789") == 0xE3069283           # the standard check value
    assert R._ext.crc32c(b"6789", R._ext.crc32c(b"12345")) == 0xE3069283


class _Marker:
    pass


@needs_ext
def test_results_with_headers_are_gc_tracked_again():
    raw = R.build_batch([(b"k", b"v", [("h", b"1")], 1)] * 5)
    for factory, hi in ((None, 4), (PlainNT, 5)):
        recs = c_list(raw, record_factory=factory)
        assert all(gc.is_tracked(r) and gc.is_tracked(r[hi]) for r in recs)
        marker = _Marker()
        gone = weakref.ref(marker)
        recs[0][hi].append((marker, recs))         # a cycle through a record with headers is collectable
        del recs, marker
        gc.collect()
        assert gone() is None


@needs_ext
def test_results_without_headers_stay_untracked():
    """Issue 17: atomic records with an empty headers list are left out of the cycle collector
    (tracked, the collector scanning them cost more than decoding them)."""
    raw = R.build_batch([(b"k", b"v", None, 1)] * 5)
    for factory, hi in ((None, 4), (PlainNT, 5)):
        recs = c_list(raw, record_factory=factory)
        assert not any(gc.is_tracked(r) or gc.is_tracked(r[hi]) for r in recs)
        recs[0][hi].append(("h", b"added"))        # the lists stay usable
        assert recs[0][hi] == [("h", b"added")] and recs[1][hi] == []


@needs_ext
def test_no_leaks_on_success_and_error_paths():
    good = R.build_batch(T.sample_records(20), compression=1)
    bad = bytearray(good)
    bad[-3] ^= 0xFF
    hdr = R.build_batch([(b"k", b"v", [("a", b"b")] * 3, 1)] * 20)
    bad_hdr = hdr[:-1] + b"\x7f"

    def run():
        for data in (good, bytes(bad), hdr, bad_hdr):
            for fn in (lambda: R._ext.decode_fetch(data), lambda: R._ext.decode_fetch(data, True),
                       lambda: R._ext.decode_columns(data),
                       lambda: R._ext.decode_fetch(data, record_factory=PlainNT)):
                try:
                    fn()
                except DecodeError:
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


@pytest.mark.parametrize("env,expect", [("", R.HAVE_EXTENSION), ("1", False)])
def test_kohort_no_ext_env(env, expect):
    code = "from kohort.protocol import records as R; print(R.HAVE_EXTENSION, R.extension_enabled())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KOHORT_NO_EXT": env},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(R.HAVE_EXTENSION), str(expect)]


def test_use_extension_switch():
    old = R.use_extension(False)
    try:
        assert not R.extension_enabled()
        if R.HAVE_EXTENSION:
            R.use_extension(True)
            assert R.extension_enabled()
    finally:
        R.use_extension(old)


@needs_ext
def test_extension_module_is_the_in_tree_build():
    # the editable install (make setup) builds it next to its sources
    assert os.path.dirname(R._ext.__file__) == os.path.dirname(R.__file__)


def test_the_extension_is_built_unless_turned_off():
    """`make setup` builds the compiled twin; the tests above skip only when KOHORT_NO_EXT=1 turns it off,
    so a missing build fails here instead of hiding behind those skips."""
    from kohort.client import accumulator
    if os.environ.get("KOHORT_NO_EXT") == "1":
        assert not R.extension_enabled() and not accumulator.COMPILED
    else:
        assert R.HAVE_EXTENSION and R.extension_enabled() and accumulator.COMPILED


def _validate_both(data, pos=0):
    """records.validate_batch with the compiled check, then without: the same header or the same
    error (class and message)."""
    out = []
    for enabled in (True, False):
        old = R.use_extension(enabled)
        try:
            out.append(("ok", R.validate_batch(data, pos)))
        except DecodeError as e:
            out.append(("err", type(e), str(e)))
        finally:
            R.use_extension(old)
    assert out[0] == out[1]
    if out[0][0] == "ok":
        assert type(out[0][1]) is R.BatchHeader
    return out[0]


@needs_ext
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.sampled_from(_SEEDS), rseed=st.integers(0, 2**32), fix_crc=st.booleans(),
       as_type=st.sampled_from([bytes, bytearray, memoryview]), lead=st.integers(0, 3))
def test_check_batch_equals_validate_batch(seed, rseed, fix_crc, as_type, lead):
    """The compiled batch check (the broker's Produce path) against the Python checks on valid,
    mutated, cut and re-CRCed batches, at an offset inside a larger buffer too."""
    rnd = random.Random(rseed)
    raw = bytearray(seed)
    for _ in range(rnd.randint(0, 3)):
        i = rnd.randrange(len(raw))
        op = rnd.randrange(3)
        if op == 0:
            raw[i] = rnd.randrange(256)
        elif op == 1:
            del raw[i:]
        else:
            raw[i] = rnd.choice([0x00, 0x7F, 0x80, 0xFF])
        if len(raw) < 2:
            break
    if fix_crc and len(raw) >= 61:
        struct.pack_into(">I", raw, 17, R._crc32c(bytes(raw[21:21 + max(0, min(len(raw), 12 + struct.unpack_from(">i", raw, 8)[0]) - 21)])))
    data = as_type(bytes(lead * b"\x07") + bytes(raw))
    _validate_both(data, lead)


@needs_ext
def test_check_batch_valid_batches_every_codec():
    for codec in (0, 1, 2, 3, 4):
        b = R.build_batch([(b"k%d" % i, b"v" * i, [], 1000 + i) for i in range(20)], compression=codec,
                          producer_id=7, producer_epoch=3, base_sequence=2**31 - 5, base_offset=2**62,
                          partition_leader_epoch=-1, transactional=True)
        got = _validate_both(b)
        assert got[0] == "ok" and got[1].records_count == 20 and got[1].base_offset == 2**62
    assert R._ext.check_batch(b, -1) is None and R._ext.check_batch(b, len(b)) is None
