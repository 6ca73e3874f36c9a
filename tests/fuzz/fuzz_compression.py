"""Fuzz target `compression`: decompression of every codec (protocol/compression.py) with a small
output limit, as a fetch of hostile batches or a hostile producer would exercise it.

Input layout: one byte chooses the codec (gzip, snappy raw or xerial, lz4 frame, zstd) and the limit
(256 B .. 64 KiB), the rest is the compressed data. Invariants: only DecodeError escapes, and what
comes out is never longer than the limit (a zip bomb is refused, not inflated).
"""
from __future__ import annotations

from kohort.errors import DecodeError
from kohort.protocol.compression import (
    COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_SNAPPY, COMPRESSION_ZSTD, compress, decompress,
    xerial_snappy_compress,
)
from tests.fuzz.common import Finding

NAME = "compression"
CODECS = (COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD)


def seeds() -> list[bytes]:
    text = b"kohort " * 40 + bytes(range(256))
    out = [bytes([i]) + compress(c, text) for i, c in enumerate(CODECS)]
    out.append(bytes([1]) + xerial_snappy_compress(text, block_size=64))
    out.append(bytes([0x30 | 3]) + compress(COMPRESSION_ZSTD, b"\0" * 200000))    # over the limit
    return out


def check(data: bytes) -> None:
    if not data:
        return
    codec = CODECS[data[0] & 3]
    limit = 256 << ((data[0] >> 4) & 7)
    try:
        out = decompress(codec, data[1:], limit)
    except DecodeError:
        return
    if len(out) > limit:
        raise Finding(f"codec {codec}: {len(out)} bytes out, over the limit of {limit}")
