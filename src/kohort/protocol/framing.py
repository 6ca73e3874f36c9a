"""Size-prefixed framing, request/response encoding with headers, and version negotiation. Sans I/O.

A Kafka frame is an int32 size followed by that many bytes: a header then a body. `FrameReader`
splits a byte stream into frames and refuses an oversize frame from its 4-byte prefix alone, before
any of its body is buffered. `ClientProtocol` is the client side of one connection: it numbers
requests (correlation ids), remembers what each in-flight request was, and turns received bytes into
(correlation_id, response) pairs -- no sockets involved, so tests drive it with plain bytes.
`pick_version` chooses the highest version both sides support from the broker's ApiVersions ranges
(KIP-35).
"""
from __future__ import annotations

import struct
from collections import OrderedDict

from kohort.errors import DecodeError, KohortError
from kohort.protocol.headers import (
    API_VERSIONS_KEY,
    RequestHeader,
    ResponseHeader,
    request_header_version,
    response_header_version,
)
from kohort.protocol.messages import REQUESTS, RESPONSES
from kohort.protocol.primitives import Reader

_SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # socket.request.max.bytes


class FrameTooLargeError(DecodeError):
    """The size prefix announces more bytes than the receiver accepts."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size, self.limit = size, limit


class UnsupportedRequestError(KohortError):
    """A well-framed request for an API key or version this side does not implement.

    Carries what could be read of the header so a broker can answer as Kafka does."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None):
        super().__init__(f"unsupported request: api_key={api_key} version={api_version}")
        self.api_key, self.api_version = api_key, api_version
        self.correlation_id, self.client_id = correlation_id, client_id


class UnsupportedVersionError(KohortError):
    """No version of an API is supported by both sides."""


def frame(payload) -> bytes:
    return _SIZE.pack(len(payload)) + bytes(payload)


def frame_size(prefix: bytes, limit: int = DEFAULT_MAX_FRAME) -> int:
    """Size announced by a 4-byte prefix, validated against `limit` (refused before the body is read)."""
    (n,) = _SIZE.unpack(prefix)
    if n < 0:
        raise DecodeError(f"negative frame size {n}")
    if n > limit:
        raise FrameTooLargeError(n, limit)
    return n


class FrameReader:
    """Splits a byte stream into frame payloads."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME):
        self.max_frame = max_frame
        self._buf = bytearray()
        self._need: int | None = None

    def feed(self, data) -> list[bytes]:
        self._buf += data
        frames = []
        while True:
            if self._need is None:
                if len(self._buf) < 4:
                    break
                self._need = frame_size(bytes(self._buf[:4]), self.max_frame)
                del self._buf[:4]
            if len(self._buf) < self._need:
                break
            frames.append(bytes(self._buf[: self._need]))
            del self._buf[: self._need]
            self._need = None
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


# -- requests ---------------------------------------------------------------------------------------
def encode_request(request, version: int, correlation_id: int, client_id: str | None = "kohort") -> bytes:
    """A complete frame (size prefix, header, body) for `request` in `version`."""
    cls = type(request)
    hv = request_header_version(cls, version)
    out = bytearray(4)
    RequestHeader(request_api_key=cls.API_KEY, request_api_version=version,
                  correlation_id=correlation_id, client_id=client_id).encode_into(out, hv)
    request.encode_into(out, version)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def peek_request_header(payload) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the fixed start of a request frame."""
    if len(payload) < 8:
        raise DecodeError("request frame shorter than its header")
    return struct.unpack_from(">hhi", payload, 0)


def decode_request(payload):
    """Decode a request frame payload (no size prefix) -> (RequestHeader, request object).

    Raises UnsupportedRequestError for a well-formed header naming an API/version we lack, and
    DecodeError for anything malformed."""
    api_key, version, corr = peek_request_header(payload)
    cls = REQUESTS.get(api_key)
    r = Reader(payload)
    if cls is None or not (cls.MIN_VERSION <= version <= cls.MAX_VERSION):
        client_id = None
        try:
            r2 = Reader(payload, 8)
            client_id = r2.nullable_string()
        except DecodeError:
            pass
        raise UnsupportedRequestError(api_key, version, corr, client_id)
    header = RequestHeader.read(r, request_header_version(cls, version))
    body = cls.decode(r, version)
    return header, body


# -- responses --------------------------------------------------------------------------------------
def encode_response(response, version: int, correlation_id: int) -> bytes:
    """A complete frame for `response` (of the API given by its class) in `version`."""
    return bytes(encode_response_buffer(response, version, correlation_id))


def encode_response_buffer(response, version: int, correlation_id: int) -> bytearray:
    """The same frame as `encode_response`, as the bytearray it was built in: size prefix, header
    and body written once, without the final copy to bytes (a fetch response's record bytes are
    copied once, into this buffer). For a writer that hands it on at once and keeps no reference."""
    cls = type(response)
    out = bytearray(4)
    hv = response_header_version(cls.API_KEY, cls, version)
    ResponseHeader(correlation_id=correlation_id).encode_into(out, hv)
    response.encode_into(out, version)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return out


def decode_response(payload, api_key: int, version: int):
    """Decode a response frame payload -> (correlation_id, response object)."""
    cls = RESPONSES.get(api_key)
    if cls is None:
        raise DecodeError(f"no response schema for api_key {api_key}")
    r = Reader(payload)
    header = ResponseHeader.read(r, response_header_version(api_key, cls, version))
    return header.correlation_id, cls.decode(r, version)


# -- version negotiation ----------------------------------------------------------------------------
def pick_version(api_key: int, broker_ranges: dict[int, tuple[int, int]], cap: int | None = None) -> int:
    """The highest version both kohort and the broker support (optionally capped)."""
    cls = REQUESTS.get(api_key)
    if cls is None:
        raise UnsupportedVersionError(f"kohort has no schema for api_key {api_key}")
    rng = broker_ranges.get(api_key)
    if rng is None:
        raise UnsupportedVersionError(f"the broker does not support {cls.__name__[:-7]} (api_key {api_key})")
    hi = min(cls.MAX_VERSION, rng[1], cap if cap is not None else cls.MAX_VERSION)
    lo = max(cls.MIN_VERSION, rng[0])
    if hi < lo:
        raise UnsupportedVersionError(
            f"no common version of {cls.__name__[:-7]}: kohort {cls.MIN_VERSION}-{cls.MAX_VERSION}, "
            f"broker {rng[0]}-{rng[1]}")
    return hi


class ClientProtocol:
    """Client side of one Kafka connection, sans I/O.

    send() -> bytes to write; receive_data(bytes) -> list of (correlation_id, response). Kafka answers
    requests of one connection in order, so a response for an unexpected correlation id is an error."""

    def __init__(self, client_id: str | None = "kohort", max_frame: int = DEFAULT_MAX_FRAME):
        self.client_id = client_id
        self._frames = FrameReader(max_frame)
        self._next_corr = 0
        self._in_flight: OrderedDict[int, tuple[int, int]] = OrderedDict()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def send(self, request, version: int, expect_response: bool = True) -> tuple[int, bytes]:
        corr = self._next_corr
        self._next_corr = (corr + 1) & 0x7FFFFFFF
        data = encode_request(request, version, corr, self.client_id)
        if expect_response:
            self._in_flight[corr] = (type(request).API_KEY, version)
        return corr, data

    def receive_data(self, data) -> list:
        out = []
        for payload in self._frames.feed(data):
            if len(payload) < 4:
                raise DecodeError("response frame shorter than its correlation id")
            (corr,) = _SIZE.unpack_from(payload, 0)
            if not self._in_flight:
                raise DecodeError(f"response with correlation id {corr} but nothing in flight")
            expected, (api_key, version) = next(iter(self._in_flight.items()))
            if corr != expected:
                raise DecodeError(f"response correlation id {corr} does not match the oldest request {expected}")
            del self._in_flight[corr]
            _, resp = decode_response(payload, api_key, version)
            out.append((corr, resp))
        return out


__all__ = [
    "API_VERSIONS_KEY", "ClientProtocol", "DEFAULT_MAX_FRAME", "FrameReader", "FrameTooLargeError",
    "UnsupportedRequestError", "UnsupportedVersionError", "decode_request", "decode_response",
    "encode_request", "encode_response", "encode_response_buffer", "frame", "frame_size", "peek_request_header", "pick_version",
]
