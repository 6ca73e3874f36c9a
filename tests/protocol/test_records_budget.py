"""The decompression budget of bulk decodes (records.decode_records_list, decode_columns): one bound
for everything a call (or the partitions of one Fetch answer, sharing a DecompressionBudget)
decompresses, the same in the C twin and in Python; and the consumer facing an answer whose
records decompress past it (the partition is named, its position kept, nothing skipped)."""
import time
import tracemalloc

import pytest

from kohort.client.consumer.fetcher import decode_partition
from kohort.errors import DecodeError
from kohort.protocol import compression as comp
from kohort.protocol import records as R
from tests.protocol.test_records import legacy_msg

IMPLS = ["py"] + (["c"] if R.HAVE_EXTENSION else [])
CODECS = [comp.COMPRESSION_GZIP, comp.COMPRESSION_SNAPPY, comp.COMPRESSION_LZ4, comp.COMPRESSION_ZSTD]


@pytest.fixture(params=IMPLS)
def impl(request):
    old = R.use_extension(request.param == "c")
    yield request.param
    R.use_extension(old)


def batches(n: int, size: int, codec: int = comp.COMPRESSION_ZSTD) -> bytes:
    """n one-record batches (offsets 0..n-1), each value `size` zero bytes: tiny compressed."""
    return b"".join(R.build_batch([(None, b"\0" * size, [], 1)], compression=codec, base_offset=i)
                    for i in range(n))


def _outcome(fn):
    try:
        return ("ok", fn())
    except DecodeError as e:
        return ("error", type(e).__name__, str(e))


@pytest.mark.parametrize("codec", CODECS)
def test_many_small_batches_cannot_decode_past_the_budget(impl, codec):
    data = batches(10, 4 << 20, codec)             # 40 MiB of values from a few KiB (lz4: more)
    budget = 9 << 20
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as ei:
            R.decode_records_list(data, max_size=budget)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # two batches fit (8 MiB); the third is refused while it decompresses
    pos = len(batches(2, 4 << 20, codec))
    left = budget - 2 * ((4 << 20) + 13)           # each record's body: 13 bytes + its value
    assert str(ei.value).startswith(f"record batch at offset {pos} (base offset 2), {left} "
                                    f"bytes left of the fetch's decompression budget: ")
    assert peak < 3 * budget, peak
    with pytest.raises(DecodeError):
        R.decode_columns(data, max_size=budget)
    # one batch alone is within the limit, and streaming iter_records limits each batch alone
    assert len(R.decode_records_list(batches(1, 4 << 20, codec), max_size=budget)) == 1
    assert sum(1 for _ in R.iter_records(data, max_size=budget)) == 10


def test_the_fuzzing_reproduction_is_refused_at_the_default_budget():
    """Three zstd batches of 9,879 bytes in all decode to 300 MiB of values: refused at the third
    batch (256 MiB in all), the same error in C and Python."""
    data = batches(3, 100 << 20)
    assert len(data) < 10_000
    got = []
    for name in IMPLS:
        old = R.use_extension(name == "c")
        try:
            got.append(_outcome(lambda: len(R.decode_records_list(data))))
        finally:
            R.use_extension(old)
    assert got[0][0] == "error" and "(base offset 2)" in got[0][2]
    assert all(g == got[0] for g in got)


def test_c_and_python_agree_on_budgets_and_what_is_left():
    data = batches(3, 3000) + R.build_batch([(b"k", b"v" * 50, [], 5)], base_offset=3)
    probe = R.DecompressionBudget(1 << 20)
    R._py_decode_records_list(data, max_size=probe)
    need = (1 << 20) - probe.left                   # the three zstd bodies (values + record framing)
    assert 9000 < need < 9100
    for limit in (0, 2999, need // 3, need - 1, need, need + 1, 20000):
        outs, lefts = [], []
        for name in IMPLS:
            old = R.use_extension(name == "c")
            try:
                b = R.DecompressionBudget(limit)
                outs.append(_outcome(lambda: R.decode_records_list(data, max_size=b, min_offset=1)))
                lefts.append(b.left)
                outs.append(_outcome(lambda: R.decode_columns(data, max_size=limit)))
            finally:
                R.use_extension(old)
        assert all(o == outs[0] for o in outs[::2]) and all(o == outs[1] for o in outs[1::2]), limit
        assert len(set(lefts)) == 1, (limit, lefts)
        if limit >= need:
            assert outs[0][0] == "ok" and len(outs[0][1]) == 3 and lefts[0] == limit - need
        else:
            assert outs[0][0] == "error"


def test_a_shared_budget_bounds_several_calls(impl):
    b = R.DecompressionBudget(10_000)
    assert len(R.decode_records_list(batches(2, 4000), max_size=b)) == 2
    assert b.left == 10_000 - 2 * (4000 + 9)       # each body: the value and 9 bytes of framing
    assert R.decode_records_list(R.build_batch([(None, b"x" * 5000, [], 1)]), max_size=b)  # uncompressed
    assert b.left == 1982
    with pytest.raises(DecodeError, match="1982 bytes left"):
        R.decode_records_list(batches(1, 4000), max_size=b)
    with pytest.raises(ValueError):
        R.DecompressionBudget(-1)


def test_legacy_compressed_wrappers_spend_their_records(impl):
    inner = b"".join(legacy_msg(i, 1, b"k", b"\0" * 1000, timestamp=1) for i in range(3))
    wrapper = legacy_msg(2, 1, None, comp.compress(comp.COMPRESSION_GZIP, inner), timestamp=1,
                         attributes=comp.COMPRESSION_GZIP)
    plain = legacy_msg(3, 1, b"k", b"\0" * 1000, timestamp=1)
    b = R.DecompressionBudget(10_000)
    assert len(R.decode_records_list(wrapper + plain, max_size=b,
                                     record_factory=lambda *r: r)) == 4
    assert b.left == 10_000 - 3 * 1001
    with pytest.raises(DecodeError):
        R.decode_records_list(wrapper + wrapper, max_size=3000)


def test_decode_partition_shares_the_budget_in_read_committed():
    data = batches(3, 3000)
    aborted = [type("A", (), {"producer_id": 999, "first_offset": 0})()]
    with pytest.raises(DecodeError):
        decode_partition("t", 0, data, 0, aborted=aborted, read_committed=True, max_size=8000)
    out, nxt, _ = decode_partition("t", 0, data, 0, aborted=aborted, read_committed=True, max_size=9100)
    assert [r.offset for r in out] == [0, 1, 2] and nxt == 3
