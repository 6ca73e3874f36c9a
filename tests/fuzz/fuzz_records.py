"""Fuzz target `records`: RecordBatch decoding (protocol/records.py) in pure Python and in the compiled
twin (_crecords): the same bytes give the same records, or the same DecodeError, in both.

Input layout: one byte of flags (check_crc, a small max_size, a min_offset), the rest is a fetch
payload (batches of any magic, compressed or not). max_size is the bulk decoders' budget for all
batches together, and iter_records' limit per batch. Compared per input: decode_records_list (tuples
and the ConsumerRecord-shaped factory form), decode_columns and the streaming iter_records (which
yields the records before a fault, then raises). Only DecodeError may escape.
"""
from __future__ import annotations

from kohort.errors import DecodeError
from kohort.protocol import records as R
from kohort.protocol.compression import COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_SNAPPY, COMPRESSION_ZSTD
from tests.fuzz.common import Finding

NAME = "records"
SMALL_MAX = 4096


def _factory(*r):
    return r


def _outcome(fn):
    """('ok', value) or ('error', DecodeError type) or None when the C side defers to Python."""
    try:
        return ("ok", fn())
    except R._NeedsPython:
        return None
    except DecodeError as e:
        return ("error", type(e).__name__)


def _stream(it):
    out = []
    try:
        for r in it:
            out.append(r)
    except DecodeError as e:
        return ("ok", out), ("error", type(e).__name__)
    return ("ok", out), None


def seeds() -> list[bytes]:
    recs = [(b"k", b"v" * 30, [("h", b"x")], 1000), (None, b"", [], 1001), (b"key2", None, [], 999)]
    out = [b"\x00" + R.build_batch(recs)]
    for codec in (COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        out.append(b"\x01" + R.build_batch(recs, compression=codec, base_offset=5))
    out.append(b"\x00" + R.build_control_batch(True, 1000, 0, 9) + R.build_batch(recs[:1], base_offset=10))
    return out


def check(data: bytes) -> None:
    if not data or not R.HAVE_EXTENSION:
        return
    flags, buf = data[0], data[1:]
    crc = bool(flags & 1)
    max_size = SMALL_MAX if flags & 2 else R.DEFAULT_MAX_SIZE
    lo = 3 if flags & 4 else None
    ext = R._ext
    pairs = [
        (lambda: ext.decode_fetch(buf, crc, max_size, lo, None, None, ()),
         lambda: R._py_decode_records_list(buf, crc, max_size, lo, None, None, ())),
        (lambda: ext.decode_fetch(buf, crc, max_size, lo, None, _factory, ("t", 0)),
         lambda: R._py_decode_records_list(buf, crc, max_size, lo, None, _factory, ("t", 0))),
        (lambda: tuple(ext.decode_columns(buf, crc, max_size, lo, None)),
         lambda: tuple(R._py_decode_columns(buf, crc, max_size, lo, None))),
    ]
    for i, (c_fn, py_fn) in enumerate(pairs):
        c = _outcome(c_fn)
        if c is None:
            continue
        py = _outcome(py_fn)
        if c != py:
            raise Finding(f"decoder {i}: C gives {_short(c)}, Python gives {_short(py)}")
    c_stream = _stream(R._chain(R._c_record_chunks(buf, crc, max_size)))
    py_stream = _stream(R._py_iter_records(buf, crc, max_size))
    if c_stream != py_stream:
        raise Finding(f"iter_records: C gives {_short(c_stream)}, Python gives {_short(py_stream)}")


def _short(x) -> str:
    s = repr(x)
    return s if len(s) < 300 else s[:300] + "..."
