"""Kafka record layer: RecordBatch v2 (magic 2) read/write, control records, legacy MessageSet v0/v1.

What lives here:

* `BatchHeader` / `read_batch_header` / `iter_batches` / `validate_batch`: the 61-byte v2 header,
  walking a fetch payload batch by batch (a partial trailing batch ends the walk quietly, as Kafka
  fetch responses may be cut mid-batch), and CRC-32C checking (Attributes .. end of batch).
* `Record`, `decode_batch`: full decode of one batch into Record objects (decompressing).
* `iter_records`: the consumer's fast path over a whole fetch payload, yielding plain tuples
  ``(offset, timestamp, key, value, headers)`` and skipping control batches. It inlines the common
  one- and two-byte varints and works on one ``bytes`` object so keys/values are single slices.
* `decode_records_list` (the same records as one list, optionally filtered by offset and built by a
  caller's record class), `RecordCursor` (that list in steps, each resuming where the last
  stopped: bounded work per step, one walk and one decompression per batch) and `decode_columns` (Arrow-shaped column buffers, `Columns`). Their
  `max_size` is one budget for everything the call decompresses (`DecompressionBudget` shares one
  across the partitions of a Fetch response), so a few small compressed batches cannot build
  unbounded record lists; `iter_records` streams and limits each batch alone.
* The compiled twin: when the C extension `kohort.protocol._crecords` was built and the environment
  variable KOHORT_NO_EXT is unset or empty, the three functions above run in C (`HAVE_EXTENSION`,
  `extension_enabled()`, `use_extension()`); the pure-Python decoders (`_py_*`) stay the reference
  and produce identical results. Legacy entries and decompression call back into Python. The same
  extension carries the producer's per-record path (`producer_twin()`, see client/accumulator.py).
* Encoding, once: `append_record` (one record), `encode_headers`, `write_batch` (header,
  compression, CRC; `write_batch_buffer` gives the bytearray, not a bytes copy); `BatchBuilder` /
  `build_batch` build on them, and so does the producer's ProducerBatch.
* `patch_base_offset`, `patch_leader_epoch` (in place, CRC unaffected because the CRC starts at
  Attributes), `set_log_append_time` (rewrites Attributes/MaxTimestamp and the CRC).
* Control batches of transaction markers (KIP-98), encoded only here: `marker_key`/`marker_value`,
  `build_control_batch`; read by `parse_control_record` (strict) and `parse_marker` (lenient).
* Reading fetched bytes, shared by the consumer and the Spark source: `scan_batches` (next fetch
  offset, last leader epoch, CRC check, from headers only) and `AbortedTransactions`, the one
  read_committed filter (KIP-98).
* `ExternalRecords` / `SpliceBuffer`: record bytes a message refers to rather than holds (a
  broker's Fetch answer served with sendfile), and the buffer that encodes around them;
  `GatherBuffer`: the client's counterpart, which refers to large in-memory record bytes (a Produce
  request's batches) so they go to the socket in one gathering write instead of being copied.
* Legacy MessageSet v0/v1 (KIP-32 added the v1 timestamp; KIP-31 relative offsets in compressed
  wrappers): `iter_legacy_messages`, and `iter_any_records` for payloads mixing magic 0/1/2.

Malformed bytes raise only DecodeError (CorruptRecordError for integrity failures).
"""
from __future__ import annotations

import heapq
import os
import struct
import zlib
from array import array
from itertools import chain, islice
from collections import namedtuple
from typing import Iterator

from crc32c import crc32c as _crc32c

from kohort.errors import DecodeError, EncodeError
from kohort.protocol.compression import (  # noqa: F401  (re-exported codec ids)
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    DEFAULT_MAX_SIZE,
    compress,
    decompress,
)


class ExternalRecords:
    """Record bytes that stay where they are until they are sent (a byte range of a log segment):
    a broker's Fetch answer carries them so its writer can hand them to the OS (sendfile) instead of
    copying them through Python. The RECORDS field writes `len()` as the length and, into
    a `SpliceBuffer`, only notes where the bytes go; into any other buffer, the bytes of `read()`.
    Subclasses (storage) say where the bytes are; this module does no I/O."""

    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        raise NotImplementedError


class SpliceBuffer(bytearray):
    """An encoding buffer that leaves ExternalRecords out: `splices` lists (position in the
    buffer, records) in order; the frame is the buffer with each one's bytes inserted there."""

    def __init__(self, *args):
        super().__init__(*args)
        self.splices: list = []

    @property
    def frame_size(self) -> int:
        return len(self) + sum(r.size for _, r in self.splices)


GATHER_MIN = 16384
"""Record bytes at least this long are referred to by a GatherBuffer; shorter ones are copied (an
extra piece to write costs about what copying 16 KiB does; measured with bench/bench_request_send.py)."""


class GatherBuffer(bytearray):
    """An encoding buffer that refers to record bytes of at least GATHER_MIN bytes instead of
    copying them: `pieces` lists (position in the buffer, bytes-like) in order; the frame is the
    buffer with each one's bytes inserted there. `buffers()` gives that frame as a list of
    bytes-likes for a gathering write (socket.sendmsg); they refer to the pieces, which must not
    change until written. (No __init__: `pieces` is an empty tuple until the first one is noted,
    so a request without large records costs what a bytearray does.)"""

    pieces: tuple | list = ()

    def add_piece(self, v) -> None:
        """Note `v`'s bytes as the frame's next bytes after what is in the buffer now."""
        if not self.pieces:
            self.pieces = []
        self.pieces.append((len(self), v))

    @property
    def frame_size(self) -> int:
        n = len(self)
        for _, v in self.pieces:
            n += len(v)
        return n

    def buffers(self) -> list:
        """The frame in order: slices of this buffer and the pieces between them (no copies)."""
        if not self.pieces:
            return [self]
        mv = memoryview(self)
        out: list = []
        prev = 0
        for pos, v in self.pieces:
            if pos > prev:
                out.append(mv[prev:pos])
            out.append(v)
            prev = pos
        if prev < len(self):
            out.append(mv[prev:])
        return out


class CorruptRecordError(DecodeError):
    """A record batch fails an integrity check (CRC, declared sizes, record framing)."""


# -- constants ------------------------------------------------------------------------------------
MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

BATCH_HEADER_SIZE = 61          # Kafka's RECORD_BATCH_OVERHEAD
LOG_OVERHEAD = 12               # BaseOffset int64 + Length int32
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD   # smallest valid Length field (49)
_MIN_RECORD_SIZE = 7            # length, attributes, ts delta, offset delta, key, value, headers

# byte offsets inside a v2 batch
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43         # producerId int64, producerEpoch int16, baseSequence int32

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40     # KIP-534

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_TIMESTAMP_TYPE = -1          # legacy v0 messages carry no timestamp
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

# legacy MessageSet v0/v1
LEGACY_RECORD_OVERHEAD_V0 = 14  # crc 4, magic 1, attributes 1, key len 4, value len 4
LEGACY_RECORD_OVERHEAD_V1 = 22  # + timestamp 8

_HDR = struct.Struct(">qiibIhiqqqhii")
assert _HDR.size == BATCH_HEADER_SIZE
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_PRODUCER = struct.Struct(">qhi")         # producerId, producerEpoch, baseSequence
_LEGACY_HEAD = struct.Struct(">qiIbb")      # offset, size, crc, magic, attributes (18 bytes)
_CONTROL_KEY = struct.Struct(">hh")         # version, type
_CONTROL_VALUE = struct.Struct(">hi")       # version, coordinator_epoch

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


# -- header ---------------------------------------------------------------------------------------
class BatchHeader(namedtuple("BatchHeader", (
        "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
        "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
        "base_sequence", "records_count"))):
    """The 61-byte header of a v2 RecordBatch (field names as Kafka's, snake_case)."""

    __slots__ = ()

    @property
    def total_size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else TIMESTAMP_CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)


_make_header = BatchHeader._make
_chain = chain.from_iterable


def read_batch_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the v2 header at `pos`. DecodeError if fewer than 61 bytes, magic != 2 or Length < 49."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise DecodeError(f"truncated record batch header at offset {pos}")
    h = _make_header(_HDR.unpack_from(buf, pos))
    if h.magic != MAGIC_V2:
        raise DecodeError(f"record batch at offset {pos} has magic {h.magic}, expected 2")
    if h.batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch at offset {pos} declares length {h.batch_length} < 49")
    return h


def iter_batches(buf, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (pos, header) for each complete v2 batch; stop quietly at a partial trailing batch."""
    n = len(buf)
    while n - pos >= LOG_OVERHEAD:
        length = _I32.unpack_from(buf, pos + 8)[0]
        if length >= 0 and pos + LOG_OVERHEAD + length > n:
            return                                   # partial trailing batch
        h = read_batch_header(buf, pos)
        yield pos, h
        pos += LOG_OVERHEAD + h.batch_length


def validate_batch(buf, pos: int = 0) -> BatchHeader:
    """Check the batch at `pos` is complete and its CRC-32C matches; CorruptRecordError otherwise.
    With the compiled twin a valid batch is checked in one call (`_crecords.check_batch`); an
    invalid one always goes through the Python checks below, which name the problem."""
    if _check_batch is not None and _use_ext:
        t = _check_batch(buf, pos)
        if t is not None:
            return _tuple_new(BatchHeader, t)
    try:
        h = read_batch_header(buf, pos)
    except CorruptRecordError:
        raise
    except DecodeError as e:
        raise CorruptRecordError(str(e)) from None
    end = pos + LOG_OVERHEAD + h.batch_length
    if end > len(buf):
        raise CorruptRecordError(
            f"record batch at offset {pos} declares {h.total_size} bytes, only {len(buf) - pos} present")
    if h.records_count < 0:
        raise CorruptRecordError(f"record batch at offset {pos} has negative records count")
    crc = _crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:end])
    if crc != h.crc:
        raise CorruptRecordError(
            f"record batch at offset {pos}: CRC-32C {crc:#010x} does not match stored {h.crc:#010x}")
    return h


# -- records --------------------------------------------------------------------------------------
class Record:
    """One decoded record. `headers` is a list of (str, bytes | None)."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers", "timestamp_type", "leader_epoch")

    def __init__(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                 headers: list | None = None, timestamp_type: int = TIMESTAMP_CREATE_TIME,
                 leader_epoch: int = NO_PARTITION_LEADER_EPOCH):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = [] if headers is None else headers
        self.timestamp_type = timestamp_type
        self.leader_epoch = leader_epoch

    def _astuple(self):
        return (self.offset, self.timestamp, self.key, self.value, self.headers,
                self.timestamp_type, self.leader_epoch)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return self._astuple() == other._astuple()

    __hash__ = None

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r}, "
                f"timestamp_type={self.timestamp_type}, leader_epoch={self.leader_epoch})")


def _uvarint(d, p: int, max_bytes: int) -> tuple[int, int]:
    """Unsigned varint at d[p] (slow path for 3+ byte values); returns (value, new_pos)."""
    result = shift = 0
    n = len(d)
    for _ in range(max_bytes):
        if p >= n:
            raise CorruptRecordError("truncated varint in record")
        b = d[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7
    raise CorruptRecordError("varint too long in record")


def _read_headers(d, p: int, end: int, count: int) -> tuple[list, int]:
    if count < 0 or count > (end - p) // 2:
        raise CorruptRecordError(f"invalid record header count {count}")
    headers = []
    for _ in range(count):
        b, p = _uvarint(d, p, 5)
        klen = (b >> 1) ^ -(b & 1)
        if klen < 0 or p + klen > end:
            raise CorruptRecordError(f"invalid record header key length {klen}")
        try:
            hkey = str(d[p:p + klen], "utf-8")
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"record header key is not UTF-8: {e}") from None
        p += klen
        b, p = _uvarint(d, p, 5)
        vlen = (b >> 1) ^ -(b & 1)
        if vlen >= 0:
            if p + vlen > end:
                raise CorruptRecordError(f"record header value length {vlen} overruns the record")
            hval = d[p:p + vlen]
            p += vlen
        elif vlen == -1:
            hval = None
        else:
            raise CorruptRecordError(f"invalid record header value length {vlen}")
        headers.append((hkey, hval))
    return headers, p


def _iter_body(d: bytes, p: int, end: int, count: int, base_offset: int, base_ts: int,
               _uvarint=_uvarint, _read_headers=_read_headers):
    """Yield (offset, timestamp, key, value, headers) for `count` records in d[p:end].

    `d` must be a bytes object (keys/values are then single slices). The one- and two-byte varint
    cases are inlined; lengths are zig-zag, so an odd raw value means negative (-1 = null).
    Timestamps are CreateTime (base + delta); see `_body` for LogAppendTime batches.
    """
    if count < 0 or count > (end - p) // _MIN_RECORD_SIZE:
        raise CorruptRecordError(f"records count {count} cannot fit in {end - p} bytes")
    try:
        for _ in range(count):
            # Length (varint)
            b = d[p]
            if b < 128:
                p += 1
            else:
                c = d[p + 1]
                if c < 128:
                    b = (b & 127) | (c << 7)
                    p += 2
                else:
                    b, p = _uvarint(d, p, 5)
            if b & 1:
                raise CorruptRecordError("negative record length")
            rec_end = p + (b >> 1)
            if rec_end > end:
                raise CorruptRecordError("record overruns its batch")
            # Attributes (int8, unused), TimestampDelta (varlong)
            b = d[p + 1]
            if b < 128:
                p += 2
            else:
                c = d[p + 2]
                if c < 128:
                    b = (b & 127) | (c << 7)
                    p += 3
                else:
                    b, p = _uvarint(d, p + 1, 10)
            ts = base_ts + ((b >> 1) ^ -(b & 1))
            # OffsetDelta (varint)
            b = d[p]
            if b < 128:
                p += 1
            else:
                c = d[p + 1]
                if c < 128:
                    b = (b & 127) | (c << 7)
                    p += 2
                else:
                    b, p = _uvarint(d, p, 5)
            offset = base_offset + ((b >> 1) ^ -(b & 1))
            # Key
            b = d[p]
            if b < 128:
                p += 1
            else:
                c = d[p + 1]
                if c < 128:
                    b = (b & 127) | (c << 7)
                    p += 2
                else:
                    b, p = _uvarint(d, p, 5)
            if b & 1:
                if b != 1:
                    raise CorruptRecordError("invalid record key length")
                key = None
            else:
                b >>= 1
                key = d[p:p + b]
                p += b
            # Value
            b = d[p]
            if b < 128:
                p += 1
            else:
                c = d[p + 1]
                if c < 128:
                    b = (b & 127) | (c << 7)
                    p += 2
                else:
                    b, p = _uvarint(d, p, 5)
            if b & 1:
                if b != 1:
                    raise CorruptRecordError("invalid record value length")
                value = None
            else:
                b >>= 1
                value = d[p:p + b]
                p += b
            # Headers
            if d[p]:
                b, p = _uvarint(d, p, 5)
                headers, p = _read_headers(d, p, rec_end, (b >> 1) ^ -(b & 1))
            else:
                p += 1
                headers = []
            if p != rec_end:
                raise CorruptRecordError("record length does not match its fields")
            yield (offset, ts, key, value, headers)
    except IndexError:
        raise CorruptRecordError("truncated record") from None
    if p != end:
        raise CorruptRecordError(f"{end - p} bytes left over after the declared records")


def _body(d: bytes, p: int, end: int, count: int, base_offset: int, base_ts: int, attributes: int,
          max_ts: int):
    """_iter_body, with every timestamp replaced by MaxTimestamp in LogAppendTime batches."""
    gen = _iter_body(d, p, end, count, base_offset, base_ts)
    if attributes & ATTR_TIMESTAMP_TYPE:
        return ((o, max_ts, k, v, h) for o, _, k, v, h in gen)
    return gen


def _batch_body(d, pos: int, h: BatchHeader, max_size: int):
    """(data, start, end) of the record bytes of the batch at `pos`, decompressed if needed."""
    codec = h[5] & ATTR_COMPRESSION_MASK
    end = pos + LOG_OVERHEAD + h[1]
    if codec == COMPRESSION_NONE:
        return d, pos + BATCH_HEADER_SIZE, end
    raw = decompress(codec, memoryview(d)[pos + BATCH_HEADER_SIZE:end], max_size)
    return raw, 0, len(raw)


def _as_bytes(buf) -> bytes:
    return buf if type(buf) is bytes else bytes(buf)


def iter_batch_records(buf, pos: int, header: BatchHeader, max_size: int = DEFAULT_MAX_SIZE):
    """Yield (offset, timestamp, key, value, headers) for the batch at `pos` (header already read).

    Control batches are not skipped here. `buf` is best a bytes object (others are copied once).
    """
    end = pos + LOG_OVERHEAD + header.batch_length
    if end > len(buf):
        raise CorruptRecordError(f"record batch at offset {pos} is truncated")
    if type(buf) is not bytes:
        buf = bytes(memoryview(buf)[pos:end])
        pos = 0
    d, p, e = _batch_body(buf, pos, header, max_size)
    return _body(d, p, e, header.records_count, header.base_offset, header.base_timestamp,
                 header.attributes, header.max_timestamp)


def decode_batch(buf, pos: int = 0, check_crc: bool = True,
                 max_size: int = DEFAULT_MAX_SIZE) -> tuple[BatchHeader, list[Record]]:
    """Decode the complete batch at `pos` into (header, [Record]), decompressing as needed."""
    if check_crc:
        h = validate_batch(buf, pos)
    else:
        h = read_batch_header(buf, pos)
    tstype = h.timestamp_type
    epoch = h.partition_leader_epoch
    records = [Record(o, t, k, v, hs, tstype, epoch)
               for o, t, k, v, hs in iter_batch_records(buf, pos, h, max_size)]
    return h, records


class DecompressionBudget:
    """How many bytes the batches of one bulk decode (decode_records_list, decode_columns) may
    still decompress to, together: `left` is spent as batches are decompressed (legacy compressed
    wrappers spend their records' keys and values). Pass one as `max_size` to several calls (the
    partitions of one Fetch response) to bound them all; an int max_size is a fresh budget."""

    __slots__ = ("limit", "left")

    def __init__(self, limit: int = DEFAULT_MAX_SIZE):
        if limit < 0:
            raise ValueError(f"decompression budget must be >= 0, got {limit}")
        self.limit = limit
        self.left = limit

    def __repr__(self) -> str:
        return f"DecompressionBudget(limit={self.limit}, left={self.left})"


def _budget_error(e: DecodeError, pos: int, base_offset: int, left: int) -> DecodeError:
    """A decompression failure under a budget, naming the batch (the C twin words it alike)."""
    return type(e)(f"record batch at offset {pos} (base offset {base_offset}), {left} bytes left "
                   f"of the fetch's decompression budget: {e}")


def _py_iter_records(buf, check_crc: bool = False, max_size: int = DEFAULT_MAX_SIZE,
                     _start: int = 0, _budget: DecompressionBudget | None = None, _base: int = 0):
    """Pure-Python iter_records. Fast path: (offset, timestamp, key, value, headers) for every data record of a fetch payload.

    Walks all complete batches (a partial trailing batch ends the walk), skips control batches and
    decompresses. Legacy v0/v1 message sets in the payload are read through the legacy decoder.
    Aborted-transaction filtering (read_committed) is the caller's job: it needs the fetch
    response's AbortedTransactions list.
    """
    d = buf if type(buf) is bytes else bytes(buf)
    n = len(d)
    pos = _start
    unpack = _HDR.unpack_from
    body = _iter_body
    lat_body = _body
    while n - pos >= LOG_OVERHEAD:
        length = _I32.unpack_from(d, pos + 8)[0]
        end = pos + LOG_OVERHEAD + length
        if length >= 0 and end > n:
            return
        if length < LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"entry at offset {pos} declares length {length}")
        if d[pos + MAGIC_OFFSET] < MAGIC_V2:
            if _budget is None:
                for r in _iter_legacy(d, pos, end, check_crc, 0, True, max_size):
                    yield (r.offset, r.timestamp, r.key, r.value, r.headers)
            else:
                for r in _legacy_entries(d, pos, end, check_crc, _budget.left, _budget):
                    yield r[:5]
            pos = end
            continue
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch at offset {pos} declares length {length} < 49")
        (base_offset, _, _, magic, crc, attributes, _, base_ts, max_ts, _, _, _,
         count) = unpack(d, pos)
        if magic != MAGIC_V2:
            raise DecodeError(f"record batch at offset {pos} has unknown magic {magic}")
        if check_crc and _crc32c(memoryview(d)[pos + ATTRIBUTES_OFFSET:end]) != crc:
            raise CorruptRecordError(f"record batch at offset {pos}: CRC-32C mismatch")
        if not attributes & ATTR_CONTROL:
            codec = attributes & ATTR_COMPRESSION_MASK
            if codec:
                if _budget is None:
                    data = decompress(codec, memoryview(d)[pos + BATCH_HEADER_SIZE:end], max_size)
                else:
                    try:
                        data = decompress(codec, memoryview(d)[pos + BATCH_HEADER_SIZE:end],
                                          _budget.left)
                    except DecodeError as ex:
                        raise _budget_error(ex, _base + pos, base_offset, _budget.left) from None
                    _budget.left -= len(data)
                p, e = 0, len(data)
            else:
                data, p, e = d, pos + BATCH_HEADER_SIZE, end
            if attributes & ATTR_TIMESTAMP_TYPE:
                yield from lat_body(data, p, e, count, base_offset, base_ts, attributes, max_ts)
            else:
                yield from body(data, p, e, count, base_offset, base_ts)
        pos = end



def _legacy_entries(d: bytes, pos: int, end: int, check_crc: bool, max_size: int,
                    budget: DecompressionBudget | None = None) -> list:
    """The legacy entry d[pos:end] as (offset, timestamp, key, value, headers, timestamp_type)
    tuples: what the C walker calls for magic 0/1 entries (it spends the budget itself). With
    `budget`, a compressed wrapper's records spend their keys' and values' bytes from it."""
    out = [(r.offset, r.timestamp, r.key, r.value, r.headers, r.timestamp_type)
           for r in _iter_legacy(d, pos, end, check_crc, 0, True, max_size)]
    if budget is not None and end - pos > 17 and d[pos + 17] & 0x07:
        budget.left -= sum(len(r[2] or b"") + len(r[3] or b"") for r in out)
    return out


# -- the compiled twin and the bulk entry points --------------------------------------------------
try:
    from kohort.protocol import _crecords as _ext
except ImportError:                     # built without a C compiler: pure Python only
    _ext = None

HAVE_EXTENSION = _ext is not None
_check_batch = getattr(_ext, "check_batch", None)     # None in a build that predates it
_tuple_new = tuple.__new__
_use_ext = HAVE_EXTENSION and not os.environ.get("KOHORT_NO_EXT")
if _ext is not None:
    _ext.configure(DecodeError, CorruptRecordError, decompress, _legacy_entries)
    _NeedsPython = _ext.NeedsPython
else:
    class _NeedsPython(Exception):
        pass


def extension_enabled() -> bool:
    """True when iter_records / decode_records_list / decode_columns run in C."""
    return _use_ext


def use_extension(enabled: bool) -> bool:
    """Switch between the C and the pure-Python decoders (tests, benchmarks); returns the old
    setting. Enabling raises RuntimeError when the extension is not built."""
    global _use_ext
    if enabled and not HAVE_EXTENSION:
        raise RuntimeError("kohort.protocol._crecords is not built (no C compiler at install time?)")
    old, _use_ext = _use_ext, bool(enabled)
    return old


def producer_twin():
    """The compiled twin of the producer's per-record path (`_crecords`: RecordBuffer, RecordFuture,
    FastProduce, murmur2) when the extension is enabled, else None (client/accumulator.py and
    client/producer.py hold the Python reference). A stale build without these classes counts as none
    (tests/protocol/test_records_ext.py fails on it, so `make setup` rebuilding it is not forgotten)."""
    if not _use_ext or not all(hasattr(_ext, n) for n in ("RecordBuffer", "RecordFuture", "FastProduce", "murmur2")):
        return None
    return _ext


def iter_records(buf, check_crc: bool = False, max_size: int = DEFAULT_MAX_SIZE):
    """Fast path: (offset, timestamp, key, value, headers) for every data record of a fetch payload.

    Walks all complete batches (a partial trailing batch ends the walk), skips control batches and
    decompresses. Legacy v0/v1 message sets in the payload are read through the legacy decoder.
    Aborted-transaction filtering (read_committed) is the caller's job: it needs the fetch
    response's AbortedTransactions list. Runs in C when the extension is enabled; on malformed
    input the Python decoder then reruns so the records before the fault are still yielded and
    the same DecodeError follows, exactly as in pure Python.
    """
    if _use_ext:
        return _chain(_c_record_chunks(buf, check_crc, max_size))
    return _py_iter_records(buf, check_crc, max_size)


_ITER_CHUNK = 512      # records per C call when streaming: small enough to stay in the CPU caches


def _c_record_chunks(buf, check_crc, max_size):
    """Lists of records from the C decoder, entry by entry; on malformed input, the Python
    decoder from the faulty entry on (it yields nothing more, then raises its DecodeError)."""
    d = buf if type(buf) is bytes else bytes(buf)
    chunk = _ext.decode_chunk
    pos = 0
    while pos >= 0:
        try:
            recs, nxt = chunk(d, pos, check_crc, max_size, _ITER_CHUNK)
        except (DecodeError, _NeedsPython):
            yield _py_iter_records(d, check_crc, max_size, _start=pos)
            return
        yield recs
        pos = nxt


def decode_records_list(buf, check_crc: bool = False, max_size: int = DEFAULT_MAX_SIZE, *,
                        min_offset: int | None = None, max_offset: int | None = None,
                        record_factory=None, prefix: tuple = (), suffix: tuple = ()) -> list:
    """All data records of a fetch payload as one list (what iter_records yields, in bulk).

    Only records with min_offset <= offset < max_offset are kept (None: unbounded); a consumer
    passes its fetch position as min_offset, since a fetch returns whole batches. Without
    `record_factory` each record is the tuple (offset, timestamp, key, value, headers). With it,
    each record is ``record_factory(*prefix, offset, timestamp, timestamp_type, key, value,
    headers, leader_epoch)`` with leader_epoch None when unknown (-1
    in the batch, legacy messages): the layout of kohort.structs.ConsumerRecord with prefix
    (topic, partition); `suffix` fields are passed after leader_epoch (a share consumer's
    delivery count). In C, a tuple subclass without per-instance storage (ConsumerRecord, a
    namedtuple) is filled directly and its __new__ is not called. Malformed input raises
    DecodeError and returns nothing.

    `max_size` bounds the bytes all batches decompress to together (an int, or a
    `DecompressionBudget` shared with other calls); passing it raises DecodeError naming the
    batch's position and base offset.
    """
    if _use_ext:
        shared = type(max_size) is DecompressionBudget
        left = max_size.left if shared else 0
        try:
            if suffix:
                return _ext.decode_fetch(buf, check_crc, max_size, min_offset, max_offset,
                                         record_factory, prefix, suffix)
            return _ext.decode_fetch(buf, check_crc, max_size, min_offset, max_offset,
                                     record_factory, prefix)
        except _NeedsPython:
            if shared:
                max_size.left = left        # the Python decoder starts over
    return _py_decode_records_list(buf, check_crc, max_size, min_offset, max_offset,
                                   record_factory, prefix, suffix)


def _py_decode_records_list(buf, check_crc=False, max_size=DEFAULT_MAX_SIZE, min_offset=None,
                            max_offset=None, record_factory=None, prefix=(), suffix=()) -> list:
    budget = max_size if type(max_size) is DecompressionBudget else DecompressionBudget(max_size)
    if record_factory is None:
        if prefix or suffix:
            raise TypeError("prefix and suffix need a record_factory")
        recs = _py_iter_records(buf, check_crc, budget.limit, _budget=budget)
    else:
        recs = _py_iter_batches_full(buf, check_crc, budget)
    if min_offset is not None or max_offset is not None:
        lo = min_offset if min_offset is not None else -(1 << 200)
        hi = max_offset if max_offset is not None else 1 << 200
        recs = (r for r in recs if lo <= r[0] < hi)
    if record_factory is None:
        return list(recs)
    return [record_factory(*prefix, o, ts, tt, k, v, hs, ep, *suffix) for o, ts, k, v, hs, tt, ep in recs]


def _py_iter_batches_full(buf, check_crc: bool, budget: DecompressionBudget, _start: int = 0,
                          _skip: int = 0):
    """_py_iter_records' walk, with (timestamp_type, leader_epoch or None) added to each tuple;
    from the entry at `_start`, whose first `_skip` records are read but not yielded."""
    d = buf if type(buf) is bytes else bytes(buf)
    n = len(d)
    pos = _start
    while n - pos >= LOG_OVERHEAD:
        length = _I32.unpack_from(d, pos + 8)[0]
        end = pos + LOG_OVERHEAD + length
        if length >= 0 and end > n:
            return
        if length < LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"entry at offset {pos} declares length {length}")
        if d[pos + MAGIC_OFFSET] < MAGIC_V2:
            for r in _legacy_entries(d, pos, end, check_crc, budget.left, budget):
                yield r + (None,)
        else:
            if length < _MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"record batch at offset {pos} declares length {length} < 49")
            attributes = _I16.unpack_from(d, pos + ATTRIBUTES_OFFSET)[0]
            tstype = TIMESTAMP_LOG_APPEND_TIME if attributes & ATTR_TIMESTAMP_TYPE else \
                TIMESTAMP_CREATE_TIME
            epoch = _I32.unpack_from(d, pos + PARTITION_LEADER_EPOCH_OFFSET)[0]
            if epoch == NO_PARTITION_LEADER_EPOCH:
                epoch = None
            # the complete batch through the reference walker: same checks, same errors
            batch = _py_iter_records(d[pos:end], check_crc, budget.limit, _budget=budget, _base=pos)
            if _skip:
                batch = islice(batch, _skip, None)
                _skip = 0
            for r in batch:
                yield r + (tstype, epoch)
        pos = end


class RecordCursor:
    """decode_records_list in steps: `take(n)` returns the next n records kept (fewer once the
    payload ends), each step resuming where the last one stopped, inside a batch too, so a
    payload cut into k steps costs one walk, not k, and a compressed batch is decompressed once.

    Same arguments, records, errors and budget as decode_records_list; the steps together give
    exactly its list. `done` turns True after a step that returned fewer than asked, or raised
    (a failed cursor stays done and returns []). A shared `DecompressionBudget` is read at each
    step and spent as batches are decompressed. The record bytes must not change while records
    are left (the C cursor keeps them exported).

    In C (`_crecords.FetchCursor`) when the extension is enabled; a legacy (magic 0/1) entry or
    a value beyond int64 hands the rest of the payload to the pure-Python twin, which redoes the
    step from where it began (same records). The Python twin is a generator over
    `_py_iter_batches_full`, which resumes by nature."""

    __slots__ = ("_c", "_py", "_args", "_budget", "done")

    def __init__(self, buf, check_crc: bool = False, max_size: int | DecompressionBudget = DEFAULT_MAX_SIZE, *,
                 min_offset: int | None = None, max_offset: int | None = None, record_factory=None,
                 prefix: tuple = ()):
        if record_factory is None and prefix:
            raise TypeError("prefix needs a record_factory")
        self._args = (buf, check_crc, min_offset, max_offset, record_factory, prefix)
        self._budget = max_size if type(max_size) is DecompressionBudget else None
        self._c = self._py = None
        self.done = False
        if _use_ext:
            try:
                self._c = _ext.FetchCursor(buf, check_crc, max_size, min_offset, max_offset,
                                           record_factory, prefix)
            except _NeedsPython:
                pass
        if self._c is None:
            if self._budget is None:
                self._budget = DecompressionBudget(max_size)
            self._py = self._py_records(0, 0)

    def _py_records(self, start: int, skip: int):
        buf, check_crc, lo, hi, factory, prefix = self._args
        recs = _py_iter_batches_full(buf, check_crc, self._budget, start, skip)
        if lo is not None or hi is not None:
            lo = lo if lo is not None else -(1 << 200)
            hi = hi if hi is not None else 1 << 200
            recs = (r for r in recs if lo <= r[0] < hi)
        if factory is None:
            return (r[:5] for r in recs)
        return (factory(*prefix, o, ts, tt, k, v, hs, ep) for o, ts, k, v, hs, tt, ep in recs)

    def take(self, max_records: int) -> list:
        """The next `max_records` (>= 1) records kept, fewer at the end of the payload."""
        if max_records < 1:
            raise ValueError(f"take() needs max_records >= 1, got {max_records}")
        if self.done:
            return []
        c = self._c
        if c is not None:
            try:
                out = c.take(max_records)
            except _NeedsPython:
                start, skip, left = c.resume
                self._c = None
                if self._budget is None:
                    self._budget = DecompressionBudget(left)
                self._budget.left = left
                self._py = self._py_records(start, skip)
            except BaseException:
                self.done = True
                raise
            else:
                self.done = c.done
                return out
        try:
            out = list(islice(self._py, max_records))
        except BaseException:
            self.done = True
            self._py = iter(())
            raise
        self.done = len(out) < max_records
        return out


class Columns(namedtuple("Columns", (
        "count", "offsets", "timestamps", "timestamp_types", "key_validity", "key_offsets",
        "key_data", "value_validity", "value_offsets", "value_data", "headers"))):
    """Records of a fetch payload as Arrow-shaped buffers (`decode_columns`).

    * count: number of records.
    * offsets, timestamps: native-endian int64 arrays (bytes of 8 * count); timestamp_types:
      int8 per record (0 CreateTime, 1 LogAppendTime, -1 legacy v0 without timestamps).
    * key_validity / value_validity: Arrow validity bitmaps (bit i set = not null, LSB first);
      key_offsets / value_offsets: int32 Arrow offsets (count + 1 entries), key_data / value_data
      the concatenated bytes: exactly the three buffers of an Arrow `binary` array.
    * headers: None when no record has headers, else one list of (str, bytes | None) per record.
    """

    __slots__ = ()

    def to_arrow(self):
        """A pyarrow.RecordBatch (offset, timestamp, timestamp_type, key, value, headers) without
        copying the key/value bytes. Imports pyarrow, which the protocol layer does not need."""
        import pyarrow as pa
        n = self.count
        buf = pa.py_buffer
        cols = [
            pa.Array.from_buffers(pa.int64(), n, [None, buf(self.offsets)]),
            pa.Array.from_buffers(pa.int64(), n, [None, buf(self.timestamps)]),
            pa.Array.from_buffers(pa.int8(), n, [None, buf(self.timestamp_types)]),
            pa.Array.from_buffers(pa.binary(), n, [buf(self.key_validity), buf(self.key_offsets),
                                                   buf(self.key_data)]),
            pa.Array.from_buffers(pa.binary(), n, [buf(self.value_validity),
                                                   buf(self.value_offsets), buf(self.value_data)]),
        ]
        htype = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        if self.headers is None:
            cols.append(pa.array([[]] * n, type=htype))
        else:
            cols.append(pa.array([[{"key": k, "value": v} for k, v in hs] for hs in self.headers],
                                 type=htype))
        return pa.RecordBatch.from_arrays(
            cols, names=["offset", "timestamp", "timestamp_type", "key", "value", "headers"])


def decode_columns(buf, check_crc: bool = False, max_size: int = DEFAULT_MAX_SIZE, *,
                   min_offset: int | None = None, max_offset: int | None = None) -> Columns:
    """Data records of a fetch payload (min_offset <= offset < max_offset) as `Columns`, for the
    Spark source's Arrow batches. ValueError if keys or values pass 2 GiB in one call; `max_size`
    bounds what all batches decompress to together, as in decode_records_list."""
    if _use_ext:
        shared = type(max_size) is DecompressionBudget
        left = max_size.left if shared else 0
        try:
            return Columns._make(_ext.decode_columns(buf, check_crc, max_size, min_offset, max_offset))
        except _NeedsPython:
            if shared:
                max_size.left = left        # the Python decoder starts over
    return _py_decode_columns(buf, check_crc, max_size, min_offset, max_offset)


def _bitmap(flags: list) -> bytes:
    out = bytearray((len(flags) + 7) // 8)
    for i, f in enumerate(flags):
        if f:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _py_decode_columns(buf, check_crc=False, max_size=DEFAULT_MAX_SIZE, min_offset=None,
                       max_offset=None) -> Columns:
    recs = [(o, ts, k, v, hs, tt) for o, ts, tt, k, v, hs, _ in _py_decode_records_list(
        buf, check_crc, max_size, min_offset, max_offset, lambda *r: r)]
    for r in recs:
        if not (_I64_MIN <= r[0] <= _I64_MAX and _I64_MIN <= r[1] <= _I64_MAX):
            raise DecodeError(f"record offset {r[0]} or timestamp {r[1]} does not fit in int64")
    cols = []
    for i in (2, 3):
        data = b"".join(r[i] for r in recs if r[i] is not None)
        if len(data) > _I32_MAX:
            raise ValueError("decode_columns: keys or values exceed 2 GiB in one call "
                             "(int32 Arrow offsets)")
        offs = array("i", [0])
        total = 0
        for r in recs:
            if r[i] is not None:
                total += len(r[i])
            offs.append(total)
        cols += [_bitmap([r[i] is not None for r in recs]), offs.tobytes(), data]
    headers = [r[4] for r in recs] if any(r[4] for r in recs) else None
    return Columns(len(recs), array("q", [r[0] for r in recs]).tobytes(),
                   array("q", [r[1] for r in recs]).tobytes(),
                   array("b", [r[5] for r in recs]).tobytes(), *cols, headers)


# -- encoding -------------------------------------------------------------------------------------
def _zz_varint(out: bytearray, v: int) -> None:
    """Append zig-zag varint `v` (callers bound v to int32 or int64)."""
    v = (v << 1) if v >= 0 else ((-v) << 1) - 1
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def zigzag(v: int) -> bytes:
    """The zig-zag varint bytes of `v`."""
    out = bytearray()
    _zz_varint(out, v)
    return bytes(out)


ZZ_TABLE_SIZE = 1 << 14
ZZ = [zigzag(v) for v in range(ZZ_TABLE_SIZE)]   # small non-negative varints, pre-encoded (hot paths)


def _zz_size(v: int) -> int:
    v = (v << 1) if v >= 0 else ((-v) << 1) - 1
    n = 1
    while v > 0x7F:
        v >>= 7
        n += 1
    return n


def _check_bytes(what: str, v):
    if v is None or isinstance(v, (bytes, bytearray, memoryview)):
        return v
    raise EncodeError(f"record {what} must be bytes or None, not {type(v).__name__}")


def encode_headers(headers) -> bytes:
    """A record's header section: [(key str|bytes, value bytes|str|None)] or a dict."""
    if not headers:
        return b"\x00"
    if isinstance(headers, dict):
        headers = list(headers.items())
    out = bytearray()
    _zz_varint(out, len(headers))
    for hk, hv in headers:
        if isinstance(hk, str):
            hk = hk.encode("utf-8")
        elif not isinstance(hk, (bytes, bytearray)):
            raise EncodeError(f"record header key must be str, not {type(hk).__name__}")
        _zz_varint(out, len(hk))
        out += hk
        if hv is None:
            out.append(1)
        else:
            if isinstance(hv, str):
                hv = hv.encode("utf-8")
            elif not isinstance(hv, (bytes, bytearray, memoryview)):
                raise EncodeError(f"record header value must be bytes, str or None, not {type(hv).__name__}")
            _zz_varint(out, len(hv))
            out += hv
    return bytes(out)


def append_record(buf: bytearray, offset_delta: int, ts_delta: int, key, value, headers) -> int:
    """Append one v2 record (its length varint first) to `buf`; returns the bytes appended. The one
    record encoder: BatchBuilder and the producer's ProducerBatch both call it (the producer inlines
    only its commonest shape: no key, no headers, same millisecond)."""
    zz = ZZ
    n0 = len(buf)
    tsv = zz[ts_delta] if 0 <= ts_delta < ZZ_TABLE_SIZE else zigzag(ts_delta)
    offv = zz[offset_delta] if offset_delta < ZZ_TABLE_SIZE else zigzag(offset_delta)
    if value is None:
        vh, vl = b"\x01", 0
    else:
        vl = len(value)
        vh = zz[vl] if vl < ZZ_TABLE_SIZE else zigzag(vl)
    if key is None:
        kh, kl = b"\x01", 0
    else:
        kl = len(key)
        kh = zz[kl] if kl < ZZ_TABLE_SIZE else zigzag(kl)
    hb = encode_headers(headers) if headers else b"\x00"
    blen = 1 + len(tsv) + len(offv) + len(kh) + kl + len(vh) + vl + len(hb)
    if blen > _I32_MAX:
        raise EncodeError("record too large")
    buf += zz[blen] if blen < ZZ_TABLE_SIZE else zigzag(blen)
    buf += b"\x00"                                    # attributes
    buf += tsv
    buf += offv
    buf += kh
    if key is not None:
        buf += key
    buf += vh
    if value is not None:
        buf += value
    buf += hb
    return len(buf) - n0


def write_batch(records_bytes, count: int, base_ts: int, max_ts: int, *, base_offset: int = 0,
                compression: int = COMPRESSION_NONE, attributes: int = 0, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """The one RecordBatch v2 writer: header, (compressed) records, CRC-32C. `attributes` adds flags
    (timestamp type, transactional, control) to the compression codec."""
    return bytes(write_batch_buffer(
        records_bytes, count, base_ts, max_ts, base_offset=base_offset, compression=compression,
        attributes=attributes, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, partition_leader_epoch=partition_leader_epoch))


def write_batch_buffer(records_bytes, count: int, base_ts: int, max_ts: int, *, base_offset: int = 0,
                       compression: int = COMPRESSION_NONE, attributes: int = 0, producer_id: int = NO_PRODUCER_ID,
                       producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                       partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                       level: int | None = None) -> bytearray:
    """`write_batch`, giving the bytearray the batch was written in rather than a bytes copy of it
    (a copy of a fresh 1 MB buffer costs about 1 ms; measured): for a producer, whose sealed batch
    is only sent (by reference, see GatherBuffer) and never changed. The codecs read `records_bytes`
    where it lies (a bytearray is not copied to bytes first); it must not change meanwhile. `level`:
    the codec library's level (compression.compress's default if None)."""
    payload = records_bytes if compression == COMPRESSION_NONE else compress(compression, records_bytes, level)
    out = bytearray(BATCH_HEADER_SIZE)
    out += payload
    try:
        _HDR.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0,
                       compression | attributes, count - 1, base_ts, max_ts, producer_id, producer_epoch,
                       base_sequence, count)
    except struct.error as e:
        raise EncodeError(f"record batch header field out of range: {e}") from None
    _U32.pack_into(out, CRC_OFFSET, _crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


def set_batch_producer(buf: bytearray, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
    """Write the producer id, epoch and base sequence into the header of the sealed v2 batch `buf`
    (the batch alone, from its base offset) and its CRC-32C again: a batch compressed before its
    sequence numbers were known gets them where it is, its records untouched."""
    if len(buf) < BATCH_HEADER_SIZE or buf[MAGIC_OFFSET] != MAGIC_V2:
        raise EncodeError("not a sealed v2 record batch")
    try:
        fields = _PRODUCER.pack(producer_id, producer_epoch, base_sequence)
    except struct.error as e:           # checked before anything is written
        raise EncodeError(f"record batch header field out of range: {e}") from None
    buf[PRODUCER_ID_OFFSET:PRODUCER_ID_OFFSET + _PRODUCER.size] = fields
    _U32.pack_into(buf, CRC_OFFSET, _crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))


def seal_batch_in_place(buf: bytearray, count: int, base_ts: int, max_ts: int, *, attributes: int = 0,
                        producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                        base_sequence: int = NO_SEQUENCE,
                        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytearray:
    """An uncompressed batch sealed where it was written: `buf` holds BATCH_HEADER_SIZE bytes of room
    followed by the records section; the header and CRC are written into that room and `buf` itself
    is returned (the bytes `write_batch_buffer` gives for the same records, without a copy or a fresh
    allocation of the batch's size)."""
    if len(buf) < BATCH_HEADER_SIZE:
        raise EncodeError("the buffer has no room for a batch header")
    try:
        _HDR.pack_into(buf, 0, 0, len(buf) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0,
                       attributes, count - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count)
    except struct.error as e:
        raise EncodeError(f"record batch header field out of range: {e}") from None
    _U32.pack_into(buf, CRC_OFFSET, _crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return buf


class BatchBuilder:
    """Incremental v2 batch encoder. Records get offset deltas 0..n-1 in append order.

    `size_in_bytes` is the exact uncompressed batch size so far; `has_room_for` tells the producer
    whether a record would keep the batch within a byte budget (a first record always fits, as in
    Kafka). `build()` compresses and computes the CRC.
    """

    __slots__ = ("base_offset", "compression", "timestamp_type", "producer_id", "producer_epoch",
                 "base_sequence", "transactional", "partition_leader_epoch", "is_control",
                 "_buf", "_count", "_base_ts", "_max_ts")

    def __init__(self, *, base_offset: int = 0, compression: int = COMPRESSION_NONE,
                 timestamp_type: int = TIMESTAMP_CREATE_TIME, producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                 transactional: bool = False,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH, is_control: bool = False):
        if compression not in (0, 1, 2, 3, 4):
            raise EncodeError(f"unknown compression codec id {compression}")
        if timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
            raise EncodeError(f"invalid timestamp type {timestamp_type}")
        self.base_offset = base_offset
        self.compression = compression
        self.timestamp_type = timestamp_type
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        self.partition_leader_epoch = partition_leader_epoch
        self.is_control = is_control
        self._buf = bytearray()
        self._count = 0
        self._base_ts = None
        self._max_ts = None

    @property
    def records_count(self) -> int:
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Exact size of the batch built now, before compression."""
        return BATCH_HEADER_SIZE + len(self._buf)

    @staticmethod
    def estimate_record_size(key, value, headers=None) -> int:
        """Upper bound of one encoded record's size (varints at their widest)."""
        size = 5 + 1 + 10 + 5 + 5 + 5 + 5          # length, attrs, ts, offset, key/value lens, count
        size += len(key) if key is not None else 0
        size += len(value) if value is not None else 0
        if headers:
            for hk, hv in headers:
                size += 10 + len(hk.encode("utf-8") if isinstance(hk, str) else hk)
                size += len(hv) if hv is not None else 0
        return size

    def has_room_for(self, key, value, headers, max_bytes: int) -> bool:
        if self._count == 0:
            return True
        return self.size_in_bytes + self.estimate_record_size(key, value, headers) <= max_bytes

    def append(self, key, value, headers, timestamp: int) -> int:
        """Encode one record; returns its offset delta. `headers` is None or [(str, bytes|None)]."""
        if type(timestamp) is not int:
            raise EncodeError(f"record timestamp must be an int (ms), not {type(timestamp).__name__}")
        _check_bytes("key", key)
        _check_bytes("value", value)
        delta = self._count
        if delta >= _I32_MAX:
            raise EncodeError("too many records in one batch")
        if self._base_ts is None:
            self._base_ts = self._max_ts = timestamp
        elif timestamp > self._max_ts:
            self._max_ts = timestamp
        ts_delta = timestamp - self._base_ts
        if not _I64_MIN <= ts_delta <= _I64_MAX:
            raise EncodeError(f"timestamp {timestamp} too far from the batch's first timestamp")
        if headers:
            for _hk, hv in headers:
                _check_bytes("header value", hv)
        append_record(self._buf, delta, ts_delta, key, value, headers)
        self._count = delta + 1
        return delta

    def build(self) -> bytes:
        if self._count == 0:
            raise EncodeError("a record batch needs at least one record")
        attributes = 0
        if self.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            attributes |= ATTR_TIMESTAMP_TYPE
        if self.transactional:
            attributes |= ATTR_TRANSACTIONAL
        if self.is_control:
            attributes |= ATTR_CONTROL
        return write_batch(self._buf, self._count, self._base_ts, self._max_ts, base_offset=self.base_offset,
                           compression=self.compression, attributes=attributes,
                           producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                           base_sequence=self.base_sequence, partition_leader_epoch=self.partition_leader_epoch)


def build_batch(records, *, base_offset: int = 0, compression: int = COMPRESSION_NONE,
                timestamp_type: int = TIMESTAMP_CREATE_TIME, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                transactional: bool = False, partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                is_control: bool = False) -> bytes:
    """Encode one v2 batch from (key, value, headers, timestamp_ms) tuples or Record objects."""
    b = BatchBuilder(base_offset=base_offset, compression=compression, timestamp_type=timestamp_type,
                     producer_id=producer_id, producer_epoch=producer_epoch,
                     base_sequence=base_sequence, transactional=transactional,
                     partition_leader_epoch=partition_leader_epoch, is_control=is_control)
    append = b.append
    for r in records:
        if isinstance(r, Record):
            append(r.key, r.value, r.headers, r.timestamp)
        else:
            append(*r)
    return b.build()


# -- in-place rewrites (broker append path) -------------------------------------------------------
def _check_patchable(buf, pos: int) -> None:
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise DecodeError(f"no complete record batch header at offset {pos}")
    if buf[pos + MAGIC_OFFSET] != MAGIC_V2:
        raise DecodeError(f"record batch at offset {pos} is not magic 2")


def patch_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Rewrite BaseOffset in place; the CRC does not cover it."""
    _check_patchable(buf, pos)
    _I64.pack_into(buf, pos, base_offset)


def patch_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Rewrite PartitionLeaderEpoch in place; the CRC does not cover it."""
    _check_patchable(buf, pos)
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: bytearray, pos: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with MaxTimestamp = `timestamp` and recompute its CRC."""
    h = read_batch_header(buf, pos)
    end = pos + h.total_size
    if end > len(buf):
        raise DecodeError(f"record batch at offset {pos} is truncated")
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, h.attributes | ATTR_TIMESTAMP_TYPE)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    _U32.pack_into(buf, pos + CRC_OFFSET, _crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:end]))


# -- control records (KIP-98 transaction markers) -------------------------------------------------
def marker_key(commit: bool) -> bytes:
    """The control record key of an end-transaction marker: int16 version 0, int16 type (COMMIT/ABORT)."""
    return _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    """The value of an end-transaction marker: int16 version 0, int32 coordinator epoch."""
    return _CONTROL_VALUE.pack(0, coordinator_epoch)


def parse_marker(key: bytes | None) -> int | None:
    """CONTROL_ABORT / CONTROL_COMMIT from a control record key, leniently (other key versions read
    as v0); None if it is not an end-transaction marker (KRaft control types are ignored). The
    strict reading is `parse_control_record`."""
    if key is None or len(key) < 4:
        return None
    t = _I16.unpack_from(key, 2)[0]
    return t if t in (CONTROL_ABORT, CONTROL_COMMIT) else None


def build_control_batch(commit: bool, producer_id: int, producer_epoch: int, base_offset: int = 0,
                        timestamp: int = NO_TIMESTAMP, coordinator_epoch: int = 0,
                        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A transactional control batch holding one COMMIT or ABORT marker (callers pass their clock)."""
    return build_batch([(marker_key(commit), marker_value(coordinator_epoch), None, timestamp)],
                       base_offset=base_offset,
                       producer_id=producer_id, producer_epoch=producer_epoch, transactional=True,
                       is_control=True, partition_leader_epoch=partition_leader_epoch)


def parse_control_record(key, value) -> tuple[int, int]:
    """(type, coordinator_epoch) of a control record; coordinator_epoch is -1 if not a marker."""
    if key is None or len(key) < 4:
        raise DecodeError("control record key shorter than 4 bytes")
    version, ctype = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise DecodeError(f"invalid control record key version {version}")
    if ctype in (CONTROL_ABORT, CONTROL_COMMIT):
        if value is None or len(value) < 6:
            raise DecodeError("transaction marker value shorter than 6 bytes")
        vversion, coordinator_epoch = _CONTROL_VALUE.unpack_from(value, 0)
        if vversion < 0:
            raise DecodeError(f"invalid transaction marker version {vversion}")
        return ctype, coordinator_epoch
    return ctype, -1


# -- scanning fetched bytes and read_committed (KIP-98) ---------------------------------------------
_ENTRY = struct.Struct(">qi")


def scan_batches(d: bytes, fetch_offset: int = -1, check_crcs: bool = False) -> tuple[int, int | None, bool]:
    """Walk the complete entries of fetched bytes `d` (batches of any magic, control ones included)
    from their headers only: -> (next fetch offset, i.e. the offset after the last complete entry and
    at least `fetch_offset`; leader epoch of the last v2 batch or None; whether legacy v0/v1 entries
    were seen). With check_crcs, verifies the CRC-32C of each v2 batch at or past fetch_offset."""
    n = len(d)
    pos = 0
    nxt = fetch_offset
    epoch = None
    legacy = False
    mv = memoryview(d)
    unpack = _ENTRY.unpack_from
    while n - pos >= 17:
        base, length = unpack(d, pos)
        end = pos + 12 + length
        if length < 0 or end > n:
            break
        if d[pos + MAGIC_OFFSET] >= MAGIC_V2 and length >= _MIN_BATCH_LENGTH:
            last = base + _I32.unpack_from(d, pos + 23)[0] + 1
            if check_crcs and last > fetch_offset and \
                    _crc32c(mv[pos + ATTRIBUTES_OFFSET:end]) != _U32.unpack_from(d, pos + CRC_OFFSET)[0]:
                raise CorruptRecordError(f"record batch at offset {base}: CRC-32C mismatch")
            e = _I32.unpack_from(d, pos + PARTITION_LEADER_EPOCH_OFFSET)[0]
            if e >= 0:
                epoch = e
        else:
            legacy = True
            last = base + 1   # legacy: the (wrapper) entry's offset is its last offset
        if last > nxt:
            nxt = last
        pos = end
    return nxt, epoch, legacy


class AbortedTransactions:
    """Consumer-side read_committed filtering (KIP-98), for one partition.

    `add(aborted)` takes a fetch response's AbortedTransactions ((producer_id, first_offset) pairs or
    objects with those attributes); `keep(d, pos, header)` is called for each v2 batch in offset order
    and says whether its records are delivered: never for control batches (an ABORT marker ends its
    producer's aborted transaction), not for a transactional batch of a producer inside an aborted
    transaction. State carries over successive fetches of the partition."""

    __slots__ = ("_pending", "_active")

    def __init__(self, aborted=()):
        self._pending: list = []            # heap of (first_offset, producer_id)
        self._active: set[int] = set()      # producers inside an aborted transaction
        self.add(aborted)

    def add(self, aborted) -> None:
        for a in aborted or ():
            pid, first = (a.producer_id, a.first_offset) if hasattr(a, "producer_id") else a
            heapq.heappush(self._pending, (first, pid))

    def keep(self, d, pos: int, h: BatchHeader) -> bool:
        pending, active = self._pending, self._active
        while pending and pending[0][0] <= h.last_offset:
            active.add(heapq.heappop(pending)[1])
        if h.is_control:
            if h.producer_id in active:
                for rec in iter_batch_records(d, pos, h):
                    if rec[2] is not None and parse_control_record(rec[2], rec[3])[0] == CONTROL_ABORT:
                        active.discard(h.producer_id)
            return False
        return not (h.is_transactional and h.producer_id in active)


# -- legacy MessageSet v0 / v1 --------------------------------------------------------------------
def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32, only used on a few LZ4 frame-descriptor bytes (so no speed concern)."""
    p1, p2, p3, p4, p5, m = 2654435761, 2246822519, 3266489917, 668265263, 374761393, 0xFFFFFFFF
    n = len(data)

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & m

    i = 0
    if n >= 16:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed & m, (seed - p1) & m]
        while i + 16 <= n:
            for j in range(4):
                v[j] = (rotl((v[j] + int.from_bytes(data[i:i + 4], "little") * p2) & m, 13) * p1) & m
                i += 4
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while i + 4 <= n:
        h = (rotl((h + int.from_bytes(data[i:i + 4], "little") * p3) & m, 17) * p4) & m
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & m, 11) * p1) & m
        i += 1
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    h ^= h >> 16
    return h


def _fix_old_kafka_lz4(data) -> bytes:
    """Magic-0 LZ4 from Kafka < 0.10 has a wrong frame header checksum (KAFKA-3160): recompute it."""
    b = bytearray(data)
    if len(b) < 7 or b[:4] != b"\x04\x22\x4d\x18":
        return bytes(b)
    flg = b[4]
    desc_len = 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(b) < 4 + desc_len + 1:
        return bytes(b)
    b[4 + desc_len] = (_xxh32(bytes(b[4:4 + desc_len])) >> 8) & 0xFF
    return bytes(b)


def _legacy_bytes(d, p: int, end: int):
    if p + 4 > end:
        raise CorruptRecordError("truncated legacy message")
    n = _I32.unpack_from(d, p)[0]
    p += 4
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"invalid legacy message field length {n}")
        return None, p
    if p + n > end:
        raise CorruptRecordError(f"legacy message field of {n} bytes overruns the message")
    return bytes(d[p:p + n]), p + n


def _iter_legacy(d, pos: int, limit: int, check_crc: bool, depth: int, stop_at_partial: bool,
                 max_size: int = DEFAULT_MAX_SIZE):
    """Yield Records of the legacy message set in d[pos:limit]."""
    n = min(len(d), limit)
    while n - pos >= LOG_OVERHEAD:
        offset, size = _I64.unpack_from(d, pos)[0], _I32.unpack_from(d, pos + 8)[0]
        end = pos + LOG_OVERHEAD + size
        if size < LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"legacy message at offset {pos} declares size {size} < 14")
        if end > n:
            if stop_at_partial:
                return
            raise CorruptRecordError(f"legacy message at offset {pos} is truncated")
        _, _, crc, magic, attributes = _LEGACY_HEAD.unpack_from(d, pos)
        if magic not in (MAGIC_V0, MAGIC_V1):
            raise DecodeError(f"message at offset {pos} has magic {magic}, expected 0 or 1")
        if check_crc:
            actual = zlib.crc32(memoryview(d)[pos + 16:end])
            if actual != crc:
                raise CorruptRecordError(
                    f"legacy message at offset {pos}: CRC32 {actual:#010x} != stored {crc:#010x}")
        p = pos + 18
        if magic == MAGIC_V1:
            if size < LEGACY_RECORD_OVERHEAD_V1:
                raise CorruptRecordError(f"v1 message at offset {pos} declares size {size} < 22")
            timestamp = _I64.unpack_from(d, p)[0]
            p += 8
            tstype = TIMESTAMP_LOG_APPEND_TIME if attributes & ATTR_TIMESTAMP_TYPE else TIMESTAMP_CREATE_TIME
        else:
            timestamp, tstype = NO_TIMESTAMP, NO_TIMESTAMP_TYPE
        key, p = _legacy_bytes(d, p, end)
        value, p = _legacy_bytes(d, p, end)
        if p != end:
            raise CorruptRecordError(f"legacy message at offset {pos} has {end - p} trailing bytes")
        codec = attributes & ATTR_COMPRESSION_MASK
        if codec == COMPRESSION_NONE:
            yield Record(offset, timestamp, key, value, [], tstype)
        else:
            if depth > 0:
                raise CorruptRecordError("compressed legacy message nested inside another")
            if value is None:
                raise CorruptRecordError("compressed legacy wrapper message has a null value")
            if codec == COMPRESSION_LZ4 and magic == MAGIC_V0:
                value = _fix_old_kafka_lz4(value)
            inner_data = decompress(codec, value, max_size)
            inner = list(_iter_legacy(inner_data, 0, len(inner_data), check_crc, 1, False, max_size))
            if not inner:
                raise CorruptRecordError("compressed legacy wrapper message holds no messages")
            # KIP-31: v1 inner offsets are relative; the wrapper carries the last inner offset.
            shift = offset - inner[-1].offset if magic == MAGIC_V1 else 0
            for r in inner:
                r.offset += shift
                if magic == MAGIC_V1 and tstype == TIMESTAMP_LOG_APPEND_TIME:
                    r.timestamp, r.timestamp_type = timestamp, TIMESTAMP_LOG_APPEND_TIME
                yield r
        pos = end
    if not stop_at_partial and pos != n:
        raise CorruptRecordError(f"{n - pos} stray bytes after the last legacy message")


def iter_legacy_messages(buf, check_crc: bool = True, max_size: int = DEFAULT_MAX_SIZE):
    """Yield Records of a legacy (magic 0/1) message set; a partial trailing message ends it."""
    return _iter_legacy(_as_bytes(buf), 0, len(buf), check_crc, 0, True, max_size)


def iter_any_records(buf, check_crc: bool = True, skip_control: bool = True,
                     max_size: int = DEFAULT_MAX_SIZE):
    """Yield Records from a fetch payload mixing magic 0, 1 and 2, by peeking at each magic byte."""
    d = _as_bytes(buf)
    n = len(d)
    pos = 0
    while n - pos >= LOG_OVERHEAD:
        length = _I32.unpack_from(d, pos + 8)[0]
        end = pos + LOG_OVERHEAD + length
        if length >= 0 and end > n:
            return
        if length < LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"entry at offset {pos} declares length {length}")
        magic = d[pos + MAGIC_OFFSET]
        if magic < MAGIC_V2:
            yield from _iter_legacy(d, pos, end, check_crc, 0, False, max_size)
        else:
            h = validate_batch(d, pos) if check_crc else read_batch_header(d, pos)
            if not (skip_control and h.attributes & ATTR_CONTROL):
                tstype, epoch = h.timestamp_type, h.partition_leader_epoch
                for o, t, k, v, hs in iter_batch_records(d, pos, h, max_size):
                    yield Record(o, t, k, v, hs, tstype, epoch)
        pos = end
