"""Kafka record compression codecs: none, gzip, snappy, lz4, zstd (codec ids 0..4 as in Kafka).

`compress(codec, data)` and `decompress(codec, data, max_size=...)` are the whole API. Facts that
shape the code:

* gzip is an RFC 1952 stream (Java `GZIPOutputStream`); concatenated members are accepted.
* snappy comes in two shapes. librdkafka and this module write *raw* snappy; the Java client writes
  the xerial block framing: the 8-byte magic ``\\x82SNAPPY\\x00``, int32 version, int32 compatible
  version, then ``[int32 length, raw snappy block]*``. Both decode.
* lz4 is the LZ4 frame format with independent blocks (Kafka's Java reader refuses linked blocks,
  KAFKA-3160 fixed the header checksum for magic >= 1).
* zstd (KIP-110) is a zstd frame; Java's streaming writer omits the content size, so the reader
  streams.

Decompression is bounded: output above `max_size` (default 256 MiB) raises DecodeError before the
memory is spent, so a small hostile input cannot make us allocate without limit. Any failure of an
underlying codec library is reported as DecodeError.
"""
from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame as _lz4f
import zstandard as _zstd

from kohort.errors import DecodeError, EncodeError

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODEC_IDS = {name: cid for cid, name in CODEC_NAMES.items()}

DEFAULT_MAX_SIZE = 256 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16          # magic(8) + version int32 + compatible int32
_XERIAL_BLOCK_SIZE = 32 * 1024    # what xerial's SnappyOutputStream uses by default
_I32 = struct.Struct(">i")

# Default levels Kafka's Java producer uses (KIP-390 made them configurable).
_GZIP_DEFAULT_LEVEL = 6           # java.util.zip.Deflater.DEFAULT_COMPRESSION
_ZSTD_DEFAULT_LEVEL = 3

_snappy_compress_raw = cramjam.snappy.compress_raw
_snappy_decompress_raw_into = cramjam.snappy.decompress_raw_into
_snappy_raw_len = cramjam.snappy.decompress_raw_len


def codec_name(codec: int) -> str:
    try:
        return CODEC_NAMES[codec]
    except KeyError:
        raise DecodeError(f"unknown compression codec id {codec}") from None


# -- compress -------------------------------------------------------------------------------------
def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress `data` with Kafka codec id `codec` (0 none .. 4 zstd). `level` is codec-specific."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        c = zlib.compressobj(_GZIP_DEFAULT_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == COMPRESSION_SNAPPY:
        # Raw snappy, as librdkafka writes; Java's xerial reader accepts it (no magic -> raw).
        return bytes(_snappy_compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return _lz4f.compress(
            data,
            compression_level=0 if level is None else level,
            block_linked=False,       # Kafka's Java LZ4 reader rejects dependent blocks
            content_checksum=False,
            store_size=False,
        )
    if codec == COMPRESSION_ZSTD:
        return _zstd.ZstdCompressor(level=_ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)
    raise EncodeError(f"unknown compression codec id {codec}")


def xerial_snappy_compress(data, block_size: int = _XERIAL_BLOCK_SIZE) -> bytes:
    """Xerial-framed snappy as the Java client writes it (for tests and interop; not the default)."""
    mv = memoryview(data)
    out = bytearray(XERIAL_MAGIC)
    out += _I32.pack(1) + _I32.pack(1)
    for i in range(0, len(mv), block_size):
        block = bytes(_snappy_compress_raw(mv[i:i + block_size]))
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


# -- decompress -----------------------------------------------------------------------------------
def decompress(codec: int, data, max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Decompress `data` (Kafka codec id `codec`); DecodeError if malformed or larger than max_size."""
    if codec == COMPRESSION_NONE:
        if len(data) > max_size:
            raise _too_big(max_size)
        return bytes(data)
    try:
        if codec == COMPRESSION_GZIP:
            return _gunzip(data, max_size)
        if codec == COMPRESSION_SNAPPY:
            return _unsnappy(data, max_size)
        if codec == COMPRESSION_LZ4:
            return _unlz4(data, max_size)
        if codec == COMPRESSION_ZSTD:
            return _unzstd(data, max_size)
    except DecodeError:
        raise
    except (MemoryError, RecursionError):
        raise
    except Exception as e:  # the codec libraries raise assorted types on garbage input
        raise DecodeError(f"{CODEC_NAMES[codec]} decompression failed: {e}") from None
    raise DecodeError(f"unknown compression codec id {codec}")


def _too_big(max_size: int) -> DecodeError:
    return DecodeError(f"decompressed data exceeds the limit of {max_size} bytes")


def _gunzip(data, max_size: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    if not rest:
        raise DecodeError("gzip: empty input")
    while rest:
        d = zlib.decompressobj(31)
        chunk = d.decompress(rest, max_size + 1 - len(out))
        if not out and d.eof and not d.unused_data and len(chunk) <= max_size:
            return chunk                       # the usual single member: no extra copy
        out += chunk
        while not d.eof:
            if len(out) > max_size:
                raise _too_big(max_size)
            if not d.unconsumed_tail:
                raise DecodeError("gzip: truncated stream")
            out += d.decompress(d.unconsumed_tail, max_size + 1 - len(out))
        if len(out) > max_size:
            raise _too_big(max_size)
        rest = d.unused_data
    return bytes(out)


def _unsnappy_block(block, out: bytearray, max_size: int) -> None:
    n = _snappy_raw_len(block)
    if n < 0 or len(out) + n > max_size:
        raise _too_big(max_size)
    start = len(out)
    out += bytes(n)
    got = _snappy_decompress_raw_into(block, memoryview(out)[start:])
    if got != n:
        raise DecodeError("snappy: block shorter than its declared length")


def _unsnappy(data, max_size: int) -> bytes:
    mv = memoryview(data)
    out = bytearray()
    if len(mv) >= _XERIAL_HEADER_SIZE and mv[:8] == XERIAL_MAGIC:
        # Version/compat ints are not checked: some producers write them little-endian.
        p, end = _XERIAL_HEADER_SIZE, len(mv)
        while p < end:
            if p + 4 > end:
                raise DecodeError("xerial snappy: truncated block length")
            n = _I32.unpack_from(mv, p)[0]
            p += 4
            if n < 0 or p + n > end:
                raise DecodeError(f"xerial snappy: block length {n} overruns the input")
            _unsnappy_block(mv[p:p + n], out, max_size)
            p += n
        return bytes(out)
    _unsnappy_block(mv, out, max_size)
    return bytes(out)


def _unlz4(data, max_size: int) -> bytes:
    # Output is pulled in steps of at most _LZ4_STEP: lz4's max_length allocates its whole size up
    # front, so passing the full cap would cost a 256 MiB allocation per batch.
    rest = data
    if not len(rest):
        raise DecodeError("lz4: empty input")
    out = bytearray()
    while len(rest):
        d = _lz4f.LZ4FrameDecompressor()
        chunk = d.decompress(rest, max_length=min(max_size + 1 - len(out), _LZ4_STEP))
        if not out and d.eof and not d.unused_data:
            return chunk                       # the usual single frame: no extra copy
        out += chunk
        while not d.eof:
            if len(out) > max_size:
                raise _too_big(max_size)
            if d.needs_input:
                raise DecodeError("lz4: truncated frame")
            out += d.decompress(b"", max_length=min(max_size + 1 - len(out), _LZ4_STEP))
        if len(out) > max_size:
            raise _too_big(max_size)
        rest = d.unused_data or b""
    return bytes(out)


_LZ4_STEP = 4 << 20


def _unzstd(data, max_size: int) -> bytes:
    # Input is fed in small pieces so one call can expand by at most ~_ZSTD_FEED * 128 (a zstd
    # RLE block is 4 bytes for 128 KiB of output): the limit is enforced between pieces.
    mv = memoryview(data)
    if not len(mv):
        raise DecodeError("zstd: empty input")
    dctx = _zstd.ZstdDecompressor()
    # Fast path: one frame that declares its content size (librdkafka, python-zstandard).
    try:
        size = _zstd.frame_content_size(mv)
    except _zstd.ZstdError:
        size = -1
    if size > max_size:
        raise _too_big(max_size)
    if size >= 0:
        try:
            out = dctx.decompress(mv, max_output_size=max_size, allow_extra_data=False)
        except _zstd.ZstdError:
            pass                               # several frames, or damage: the streaming path decides
        else:
            if len(out) == size:
                return out
    if _zstd_frames_complete(mv):
        # well-formed frames without a declared size (librdkafka's, Java's): decoded in bounded steps
        try:
            return _unzstd_steps(dctx, mv, max_size)
        except _zstd.ZstdError:
            pass                               # damage inside a block: the checking path below says so
    out = bytearray()
    while len(mv):
        d = dctx.decompressobj()
        p, end = 0, len(mv)
        while not d.eof:
            if p >= end:
                raise DecodeError("zstd: truncated frame")
            out += d.decompress(mv[p:p + _ZSTD_FEED])
            p += _ZSTD_FEED
            if len(out) > max_size:
                raise _too_big(max_size)
        mv = memoryview(d.unused_data + bytes(mv[p:])) if p < end else memoryview(d.unused_data)
    return bytes(out)


_ZSTD_FEED = 1024
_ZSTD_STEP = 256 << 10
_ZSTD_MAGIC = 0xFD2FB528


def _unzstd_steps(dctx, mv, max_size: int) -> bytes:
    """Decompress complete frames reading at most _ZSTD_STEP bytes of output at a time (the limit is
    checked between steps, so a bomb costs at most one step past max_size); about 3x faster than
    feeding the input 1 KiB at a time. Only for input `_zstd_frames_complete` accepted: the reader
    does not report a truncated frame by itself."""
    parts, n = [], 0
    with dctx.stream_reader(mv, read_across_frames=True) as r:
        while True:
            piece = r.read(_ZSTD_STEP)
            if not piece:
                break
            n += len(piece)
            if n > max_size:
                raise _too_big(max_size)
            parts.append(piece)
    return b"".join(parts)


def _zstd_frames_complete(mv) -> bool:
    """Whether `mv` is a whole number of zstd frames (RFC 8878 section 3.1.1), found by walking the
    frame headers and block headers without decompressing: no truncation, no trailing bytes, no
    reserved block types. Skippable frames and anything unusual answer False (the checking path)."""
    pos, end = 0, len(mv)
    try:
        while pos < end:
            if end - pos < 6 or int.from_bytes(mv[pos:pos + 4], "little") != _ZSTD_MAGIC:
                return False
            fhd = mv[pos + 4]
            single_segment = fhd & 0x20
            if fhd & 0x08:                     # reserved bit
                return False
            fcs_flag, did_flag = fhd >> 6, fhd & 0x03
            pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[did_flag] + \
                (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
            while True:
                if end - pos < 3:
                    return False
                header = int.from_bytes(mv[pos:pos + 3], "little")
                last, block_type, size = header & 1, (header >> 1) & 3, header >> 3
                if block_type == 3:
                    return False
                pos += 3 + (1 if block_type == 1 else size)
                if pos > end:
                    return False
                if last:
                    break
            if fhd & 0x04:                     # content checksum
                pos += 4
        return pos == end
    except (IndexError, ValueError):
        return False
