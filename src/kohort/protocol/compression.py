"""Kafka record compression codecs: none, gzip, snappy, lz4, zstd (codec ids 0..4 as in Kafka).

`compress(codec, data)` and `decompress(codec, data, max_size=...)` are the whole API. Facts that
shape the code:

* gzip is an RFC 1952 stream (Java `GZIPOutputStream`); concatenated members are accepted.
* snappy comes in two shapes. librdkafka and this module write *raw* snappy; the Java client writes
  the xerial block framing: the 8-byte magic ``\\x82SNAPPY\\x00``, int32 version, int32 compatible
  version, then ``[int32 length, raw snappy block]*``. Both decode.
* lz4 is the LZ4 frame format with independent blocks (Kafka's Java reader refuses linked blocks,
  KAFKA-3160 fixed the header checksum for magic >= 1).
* zstd (KIP-110) is one or more zstd frames. Java's streaming writer omits the content size,
  librdkafka and this module write it. Both directions go through cramjam's zstd (libzstd, the GIL
  released), which also carries snappy: one native package for both.

Decompression is bounded: output above `max_size` (default 256 MiB) raises DecodeError before the
memory is spent, so a small hostile input cannot make us allocate without limit. zstd: a first
frame declaring a size within the limit (and 8 MiB) is decoded into exactly that size (libzstd
refuses truncation, trailing bytes and a size that lies); anything else is first walked by its
frame and block headers, which proves it whole and bounds its output (declared sizes, raw/RLE block
sizes, at most one block's maximum per compressed block), then decoded into a buffer of that
bound capped at max_size + 1. Up to 8 MiB that buffer is a pooled scratch buffer, copied out
once; above, lazily committed anonymous memory. Any failure of an underlying codec library is
reported as DecodeError.
"""
from __future__ import annotations

import mmap
import struct
import zlib

import cramjam
import lz4.frame as _lz4f

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
_zstd_compress = cramjam.zstd.compress


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
        # cramjam's zstd (libzstd) writes the content size: readers size their output from it
        return bytes(_zstd_compress(data, level=_ZSTD_DEFAULT_LEVEL if level is None else level))
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
    mv = memoryview(data)
    if not len(mv):
        raise DecodeError("zstd: empty input")
    # Fast path: a first frame declaring a size that fits (librdkafka's and kohort's single frame).
    # libzstd holds each frame to its declared size and refuses truncation and trailing bytes; the
    # output buffer holds that size and no more, so further frames (which do not fit) or any damage
    # end in an error, and then the frame walk below decides.
    size = _zstd_declared_size(mv)
    if 0 <= size <= min(max_size, _ZSTD_SCRATCH_MAX):
        try:
            out = _zstd_via_scratch(mv, size)
        except cramjam.DecompressionError:
            pass
        else:
            if len(out) == size:
                return out
    exact, loose = _zstd_output_bound(mv, max_size)
    bound = exact + loose
    if bound <= min(max_size, _ZSTD_SCRATCH_MAX):
        return _zstd_via_scratch(mv, bound)
    # Larger output goes to anonymous memory the OS commits page by page as it is written, so a
    # loose bound far above the real output costs nothing, and a bomb stops one byte past max_size.
    size = min(bound, max_size + 1)
    with mmap.mmap(-1, size, **_MMAP_FLAGS) as m:
        try:
            n = _zstd_decompress_into(mv, m)
        except cramjam.DecompressionError as e:
            if size > max_size and "whole buffer" in str(e):   # the output did not fit the cap
                raise _too_big(max_size) from None
            raise
        if n > max_size:
            raise _too_big(max_size)
        return m[:n]


def _zstd_via_scratch(mv, size: int) -> bytes:
    """Decode `mv` into a scratch buffer of `size` bytes and copy the output out. Output decoded
    into pages already mapped and warm, then copied once, costs less than fresh memory, which takes
    a page fault per 4 KiB written. Buffers come from a small pool shared by the threads: a list's
    pop and append are atomic, so two threads never hold the same buffer."""
    try:
        buf = _zstd_scratch.pop()
    except IndexError:
        buf = None
    if buf is None or len(buf) < size:
        buf = bytearray(max(size, _ZSTD_SCRATCH_MIN))
    try:
        with memoryview(buf) as whole, whole[:size] as view:
            n = _zstd_decompress_into(mv, view)
            return bytes(view[:n])
    finally:
        if len(_zstd_scratch) < _ZSTD_SCRATCH_POOL:
            _zstd_scratch.append(buf)


def _zstd_declared_size(mv) -> int:
    """The content size the first zstd frame of `mv` declares; -1 if it declares none."""
    if len(mv) < 6 or int.from_bytes(mv[:4], "little") != _ZSTD_MAGIC:
        return -1
    fhd = mv[4]
    single_segment, fcs_flag = fhd & 0x20, fhd >> 6
    if not (fcs_flag or single_segment):
        return -1
    p = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 0x03]
    n = (1, 2, 4, 8)[fcs_flag]
    if len(mv) < p + n:
        return -1
    return int.from_bytes(mv[p:p + n], "little") + (256 if n == 2 else 0)


_ZSTD_SCRATCH_MIN = 256 << 10    # a zstd scratch buffer: at least this, grown up to
_ZSTD_SCRATCH_MAX = 8 << 20      # this (larger output goes to a lazily committed mmap)
_ZSTD_SCRATCH_POOL = 4           # scratch buffers kept between calls
_zstd_scratch: list[bytearray] = []
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50        # ..0x184D2A5F: the low 4 bits are free
_ZSTD_BLOCK_MAX = 128 << 10
_MMAP_FLAGS = ({"flags": mmap.MAP_PRIVATE | getattr(mmap, "MAP_NORESERVE", 0)}
               if hasattr(mmap, "MAP_PRIVATE") else {})
_zstd_decompress_into = cramjam.zstd.decompress_into


def _zstd_output_bound(mv, max_size: int) -> tuple[int, int]:
    """Walk the frames of `mv` by their headers and block headers (RFC 8878 section 3.1), without
    decompressing, and bound what they decode to: (exact, loose). `exact` counts what is known
    exactly (declared content sizes, raw and RLE blocks); `loose` is at most Block_Maximum_Size
    (min(Window_Size, 128 KiB)) per compressed block of a frame without a declared size. Refuses
    (DecodeError) a truncated frame or block, bytes after the last frame, a reserved bit or block
    type, a declared size its blocks cannot hold, and an exact size above max_size. Skippable
    frames are stepped over. libzstd then checks the block contents and each declared size."""
    pos, end, exact, loose = 0, len(mv), 0, 0
    while pos < end:
        if end - pos < 4:
            raise DecodeError("zstd: trailing bytes after the last frame")
        magic = int.from_bytes(mv[pos:pos + 4], "little")
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE_MAGIC:
            if end - pos < 8:
                raise DecodeError("zstd: truncated skippable frame")
            pos += 8 + int.from_bytes(mv[pos + 4:pos + 8], "little")
            if pos > end:
                raise DecodeError("zstd: truncated skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise DecodeError("zstd: no frame magic" if pos == 0 else
                              f"zstd: {end - pos} bytes after the last frame are not a frame")
        if end - pos < 5:
            raise DecodeError("zstd: truncated frame header")
        fhd = mv[pos + 4]
        if fhd & 0x08:
            raise DecodeError("zstd: reserved bit set in a frame header")
        single_segment, fcs_flag, did_flag = fhd & 0x20, fhd >> 6, fhd & 0x03
        fcs_len = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        p = pos + 5
        header_end = p + (0 if single_segment else 1) + (0, 1, 2, 4)[did_flag] + fcs_len
        if header_end > end:
            raise DecodeError("zstd: truncated frame header")
        window = 0
        if not single_segment:
            wd = mv[p]
            window = 1 << (10 + (wd >> 3))
            window += (window >> 3) * (wd & 7)
        fcs = -1
        if fcs_len:
            fcs = int.from_bytes(mv[header_end - fcs_len:header_end], "little") + (256 if fcs_len == 2 else 0)
            if single_segment:
                window = fcs
        block_max = min(window, _ZSTD_BLOCK_MAX)
        pos = header_end
        frame_exact = frame_loose = 0
        while True:
            if end - pos < 3:
                raise DecodeError("zstd: truncated frame (block header)")
            header = int.from_bytes(mv[pos:pos + 3], "little")
            last, block_type, size = header & 1, (header >> 1) & 3, header >> 3
            if block_type == 3:
                raise DecodeError("zstd: reserved block type")
            if block_type == 2:                    # compressed: decodes to at most block_max
                frame_loose += block_max
                pos += 3 + size
            else:                                  # raw (size bytes follow) or RLE (one byte follows)
                frame_exact += size
                pos += 3 + (1 if block_type == 1 else size)
                if exact + frame_exact > max_size:     # a bomb of RLE blocks stops here, early
                    raise _too_big(max_size)
            if pos > end:
                raise DecodeError("zstd: truncated frame (block)")
            if last:
                break
        if fhd & 0x04:                             # content checksum
            pos += 4
            if pos > end:
                raise DecodeError("zstd: truncated frame (checksum)")
        if fcs >= 0:
            if fcs > frame_exact + frame_loose:
                raise DecodeError(f"zstd: a frame declares {fcs} bytes, more than its blocks hold")
            exact += fcs
        else:
            exact += frame_exact
            loose += frame_loose
        if exact > max_size:
            raise _too_big(max_size)
    return exact, loose
