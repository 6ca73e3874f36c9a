"""Kafka wire primitives: a bounds-checked Reader and append-only writers.

Every length read from the wire is checked against the bytes actually present before anything is
allocated, so garbage input raises only DecodeError. No I/O here.
"""
from __future__ import annotations

import struct
import uuid as _uuid

from kohort.errors import DecodeError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")

ZERO_UUID = _uuid.UUID(int=0)


class Reader:
    """Reads primitives from a bytes-like buffer, never past `end`."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0, end: int | None = None):
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise DecodeError(f"need {n} bytes at offset {p}, only {self.end - p} left")
        self.pos = p + n
        return p

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._take(1))[0]

    def bool(self) -> bool:
        return self.buf[self._take(1)] != 0

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._take(2))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._take(4))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self.buf, self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._take(8))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self._take(8))[0]

    def uuid(self) -> _uuid.UUID:
        p = self._take(16)
        return _uuid.UUID(bytes=bytes(self.buf[p:p + 16]))

    def uvarint(self, max_bytes: int = 5) -> int:
        buf, p, end = self.buf, self.pos, self.end
        result = shift = 0
        for i in range(max_bytes):
            if p >= end:
                raise DecodeError("truncated varint")
            b = buf[p]
            p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = p
                return result
            shift += 7
        raise DecodeError("varint too long")

    def varint(self) -> int:
        v = self.uvarint(5)
        return (v >> 1) ^ -(v & 1)

    def varlong(self) -> int:
        v = self.uvarint(10)
        return (v >> 1) ^ -(v & 1)

    def raw(self, n: int) -> bytes:
        p = self._take(n)
        return bytes(self.buf[p:p + n])

    def view(self, n: int) -> memoryview:
        p = self._take(n)
        return self.buf[p:p + n]

    # -- length-prefixed values -------------------------------------------------------------
    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise DecodeError("null string where a string is required")
        return self._text(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._text(n)

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("null compact string where a string is required")
        return self._text(n)

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._text(n)

    def _text(self, n: int) -> str:
        p = self._take(n)
        try:
            return str(self.buf[p:p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid UTF-8 in string: {e}") from None

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0:
            raise DecodeError("null bytes where bytes are required")
        return self.raw(n)

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self.raw(n)

    def compact_bytes(self) -> bytes:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("null compact bytes where bytes are required")
        return self.raw(n)

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.raw(n)

    def array_len(self) -> int:
        """Non-flexible array length (-1 = null). Bounded by the remaining bytes."""
        n = self.int32()
        if n > self.end - self.pos:
            raise DecodeError(f"array of {n} elements cannot fit in {self.end - self.pos} bytes")
        return n

    def compact_array_len(self) -> int:
        n = self.uvarint() - 1
        if n > self.end - self.pos:
            raise DecodeError(f"array of {n} elements cannot fit in {self.end - self.pos} bytes")
        return n


# -- writers: each appends to a bytearray ---------------------------------------------------------
def w_int8(out: bytearray, v: int) -> None:
    out += _I8.pack(v)


def w_bool(out: bytearray, v: bool) -> None:
    out.append(1 if v else 0)


def w_int16(out: bytearray, v: int) -> None:
    out += _I16.pack(v)


def w_uint16(out: bytearray, v: int) -> None:
    out += _U16.pack(v)


def w_int32(out: bytearray, v: int) -> None:
    out += _I32.pack(v)


def w_uint32(out: bytearray, v: int) -> None:
    out += _U32.pack(v)


def w_int64(out: bytearray, v: int) -> None:
    out += _I64.pack(v)


def w_float64(out: bytearray, v: float) -> None:
    out += _F64.pack(v)


def w_uuid(out: bytearray, v) -> None:
    out += (v.bytes if v is not None else bytes(16))


def read_uvarint(buf, p: int, end: int) -> tuple[int, int] | None:
    """(value, next position) of an unsigned varint of at most 5 bytes at buf[p], or None when it is
    cut short by `end` or longer (the straight-line readers' way: they hand such input to the
    schema's codecs, whose Reader names the problem)."""
    result = shift = 0
    while p < end and shift < 35:
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, p
        shift += 7
    return None


def w_uvarint(out: bytearray, v: int) -> None:
    if v < 0:
        raise ValueError("unsigned varint cannot be negative")
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def uvarint_bytes(v: int) -> bytes:
    out = bytearray()
    w_uvarint(out, v)
    return bytes(out)


def w_varint(out: bytearray, v: int) -> None:
    w_uvarint(out, ((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def w_varlong(out: bytearray, v: int) -> None:
    w_uvarint(out, ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _utf8(v: str) -> bytes:
    return v.encode("utf-8")


def w_string(out: bytearray, v: str) -> None:
    if v is None:
        raise ValueError("string field is not nullable in this version")
    b = _utf8(v)
    out += _I16.pack(len(b))
    out += b


def w_nullable_string(out: bytearray, v: str | None) -> None:
    if v is None:
        out += b"\xff\xff"
    else:
        w_string(out, v)


def w_compact_string(out: bytearray, v: str) -> None:
    if v is None:
        raise ValueError("string field is not nullable in this version")
    b = _utf8(v)
    w_uvarint(out, len(b) + 1)
    out += b


def w_compact_nullable_string(out: bytearray, v: str | None) -> None:
    if v is None:
        out.append(0)
    else:
        w_compact_string(out, v)


def w_bytes(out: bytearray, v) -> None:
    if v is None:
        raise ValueError("bytes field is not nullable in this version")
    out += _I32.pack(len(v))
    out += v


def w_nullable_bytes(out: bytearray, v) -> None:
    if v is None:
        out += b"\xff\xff\xff\xff"
    else:
        w_bytes(out, v)


def w_compact_bytes(out: bytearray, v) -> None:
    if v is None:
        raise ValueError("bytes field is not nullable in this version")
    w_uvarint(out, len(v) + 1)
    out += v


def w_compact_nullable_bytes(out: bytearray, v) -> None:
    if v is None:
        out.append(0)
    else:
        w_compact_bytes(out, v)
