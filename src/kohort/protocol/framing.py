"""Size-prefixed framing, request/response encoding with headers, and version negotiation. Sans I/O.

A Kafka frame is an int32 size followed by that many bytes: a header then a body. `FrameReader`
splits a byte stream into frames and refuses an oversize frame from its 4-byte prefix alone, before
any of its body is buffered. `ClientProtocol` is the client side of one connection (h11's shape): it
cuts the response frames, owns the correlation ids and the requests in flight, matches responses in
order, and is the only place the handshake lives: ApiVersions negotiation with fallback, version
choice and capping, SASL, the leniency real brokers need (trailing bytes after a response body) --
no sockets involved, so tests drive it with plain bytes and any loop (threads, asyncio) can drive
it. Every client stack (NetworkClient, and so the producer, consumer, admin and the Spark source)
connects through it. `pick_version` chooses the highest version both sides support from the
broker's ApiVersions ranges (KIP-35).
"""
from __future__ import annotations

import mmap
import struct
import sys
from collections import deque
from typing import Any, Callable, NamedTuple

from kohort.errors import DecodeError, ErrorCode, KohortError, for_code
from kohort.protocol.headers import (
    API_VERSIONS_KEY,
    RequestHeader,
    ResponseHeader,
    request_header_version,
    response_header_version,
)
from kohort.protocol.messages import REQUESTS, RESPONSES
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.fetch import FetchResponse
from kohort.protocol.messages.produce import ProduceResponse
from kohort.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kohort.protocol.messages.sasl_handshake import SaslHandshakeRequest
from kohort.protocol.primitives import Reader
from kohort.protocol.records import GatherBuffer, SpliceBuffer
from kohort.protocol.sasl import SaslClient, SaslFailure

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")       # request_api_key, request_api_version, correlation_id
_I16_LEN = struct.Struct(">h")
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


def encode_request_buffers(request, version: int, correlation_id: int, client_id: str | None = "kohort") -> list:
    """The frame of `encode_request` as a list of bytes-likes for a gathering write: the record
    bytes of a RECORDS field (GATHER_MIN bytes or more, e.g. a Produce request's batches) are
    referred to, not copied; the rest is encoded into one small buffer that the list slices. The
    caller keeps the list (and so the record bytes) until it is written."""
    cls = type(request)
    hv = request_header_version(cls, version)
    out = GatherBuffer(4)
    try:
        name = client_id.encode("utf-8") if type(client_id) is str else None
    except UnicodeEncodeError:
        name = None             # the schema's codec reports it
    if hv >= 1 and (client_id is None or name is not None and len(name) <= 0x7FFF):
        # header v1/v2 straight in: the bytes RequestHeader's codec writes
        out += _HEADER_FIXED.pack(cls.API_KEY, version, correlation_id)
        if name is None:
            out += b"\xff\xff"
        else:
            out += _I16_LEN.pack(len(name))
            out += name
        if hv >= 2:
            out.append(0)       # no tagged fields
    else:
        RequestHeader(request_api_key=cls.API_KEY, request_api_version=version,
                      correlation_id=correlation_id, client_id=client_id).encode_into(out, hv)
    request.encode_into(out, version)
    _SIZE.pack_into(out, 0, out.frame_size - 4)
    return out.buffers()


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
    hv = response_header_version(cls.API_KEY, cls, version)
    # response header v0: correlation id; v1: correlation id + an empty tagged-field section
    out = bytearray(8 if hv == 0 else 9)
    _SIZE.pack_into(out, 4, correlation_id)
    response.encode_into(out, version)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return out


def encode_response_spliced(response, version: int, correlation_id: int) -> SpliceBuffer:
    """encode_response_buffer, leaving ExternalRecords out: the buffer's `splices` say where their
    bytes go, and its size prefix already counts them (the broker sends Fetch answers' records with sendfile)."""
    cls = type(response)
    out = SpliceBuffer(4)
    hv = response_header_version(cls.API_KEY, cls, version)
    ResponseHeader(correlation_id=correlation_id).encode_into(out, hv)
    response.encode_into(out, version)
    _SIZE.pack_into(out, 0, out.frame_size - 4)
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


def last_rigid_version(api_key: int, cap: int | None = None) -> int | None:
    """The highest version of `api_key` before its first flexible one (KIP-482), capped by `cap`;
    `cap` unchanged for an API that is flexible from its first version or never."""
    cls = REQUESTS.get(api_key)
    if cls is None:
        return cap
    first_flex = cls._flex[0]
    if first_flex > cls.MAX_VERSION or first_flex <= cls.MIN_VERSION:
        return cap
    return first_flex - 1 if cap is None else min(cap, first_flex - 1)


def decode_response_lenient(payload, api_key: int, version: int, response_class=None):
    """Decode a response frame payload -> (correlation_id, response). Trailing bytes after the body
    are ignored, as Kafka's own clients do (librdkafka's mock cluster appends bytes to some flexible
    responses, e.g. 5 after ApiVersions v3 and 1 after Metadata). `response_class` decodes with a
    class of the same wire layout instead of the registered one."""
    cls = response_class or RESPONSES.get(api_key)
    if cls is None:
        raise DecodeError(f"no response schema for api_key {api_key}")
    r = Reader(payload)
    header = ResponseHeader.read(r, response_header_version(api_key, cls, version))
    return header.correlation_id, cls.decode(r, version, exact=False)


class HandshakeError(KohortError):
    """The ApiVersions handshake failed: the peer's answer is not an ApiVersions response, or an error."""


class ResponseReceived(NamedTuple):
    """A response matched to its request: what `receive_data`/`buffer_updated` return."""

    correlation_id: int
    response: Any
    handle: Any            # what the caller passed to send_request (None if nothing)
    size: int              # bytes of the frame, size prefix included


class ProtocolViolation(DecodeError):
    """The connection's byte stream broke Kafka's protocol (bad size prefix, undecodable response,
    a correlation id that is not the oldest request's, a response with nothing in flight). The
    connection cannot be trusted any more and must be closed. `completed` holds the responses the
    same bytes completed before the violation: the driver delivers them before closing."""

    def __init__(self, message: str, completed: list[ResponseReceived]):
        super().__init__(message)
        self.completed = completed


class TooManyInFlightError(KohortError):
    """send_request with `max_in_flight` requests already awaiting their responses."""


UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION
HANDSHAKE_VERSION = 3
DEFAULT_RECV_BUFFER = 256 * 1024

# connection states of ClientProtocol
IDLE, HANDSHAKE, SASL, READY, CLOSED = "IDLE", "HANDSHAKE", "SASL", "READY", "CLOSED"
SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = SaslHandshakeRequest.API_KEY, SaslAuthenticateRequest.API_KEY


class ClientProtocol:
    """Client side of one Kafka connection, sans I/O, in h11's shape: it owns the frames, the
    correlation ids, the requests in flight and the handshake; its driver only moves bytes. No
    sockets, threads or clocks, so one object can be driven by NetworkClient's selector thread, by
    an asyncio protocol, or by a test feeding plain bytes.

    Sending: `send_request(request, version, handle=...) -> (correlation_id, bytes)`: the bytes are
    what the driver writes (not queued in `data_to_send`, so a driver can batch its own writes);
    `send_request_buffers` gives the same frame as a list of buffers for a gathering write, a
    Produce request's record batches among them by reference rather than copied into it;
    `handle` is any object of the driver's (its future, its request record) given back with the
    response. At most `max_in_flight` requests await responses (None: no limit; `can_send`).

    Receiving, two equivalent ways: `receive_data(bytes) -> [ResponseReceived]`, or, without the
    copy into the protocol, `get_buffer()` -> a writable memoryview to receive into (recv_into, or
    asyncio's BufferedProtocol), then `buffer_updated(nbytes) -> [ResponseReceived]`. Frames are cut
    from one receive buffer (which the driver may share between connections it reads on one thread:
    nothing is left in it after `buffer_updated`); a complete small frame is copied out once; a frame
    larger than what has arrived gets its own bytearray sized from its prefix, and `get_buffer`
    then returns the rest of that bytearray, so a large Fetch response is received in place, never
    concatenated or copied again. The size prefix is checked against `max_frame` before the body.

    Kafka answers one connection's requests in order: a response is matched with the oldest request
    in flight, and a correlation id that is not that request's is a `ProtocolViolation` (as is a
    response with nothing in flight or one that does not decode): the driver closes the connection
    and fails what `connection_lost()` returns. Trailing bytes after a response body are ignored,
    as Kafka's own clients do (librdkafka's mock cluster appends some).

    Handshake (KIP-35, KIP-511): `initiate()` queues ApiVersions v3 in `data_to_send()`. The answer
    is decoded leniently in v3, else in v0 (a broker that does not know our version answers in v0).
    UNSUPPORTED_VERSION makes it ask again in the highest ApiVersions version both sides know (from
    the broker's list, else v0): the driver writes `data_to_send()` after each read. Then `state` is
    READY and `versions` holds the broker's ranges; `pick(api_key, cap)` gives the highest version
    both sides support. A broker that stops at ApiVersions v2 yet lists flexible versions of other
    APIs (librdkafka's mock cluster crashes on flexible SyncGroup) gets only the versions before each
    API's first flexible one, since KIP-482's flexible versions shipped with ApiVersions v3.

    SASL (KIP-43, KIP-152), when `sasl=(mechanism, username, password[, OAUTHBEARER token source])` is
    given: after ApiVersions, SaslHandshake v1, then SaslAuthenticate rounds (highest common version
    <= 2) until the mechanism is done; only then READY. A refusal raises the broker's KafkaError
    (UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED with the broker's message,
    ILLEGAL_SASL_STATE); a SCRAM server whose nonce or signature does not verify raises
    SASL_AUTHENTICATION_FAILED too. These are fatal: the driver must not retry them as connection
    errors. A failed handshake raises (HandshakeError) from the call that fed its answer.
    """

    def __init__(self, client_id: str | None = "kohort", max_frame: int = DEFAULT_MAX_FRAME,
                 software_name: str = "kohort", software_version: str = "0",
                 sasl: tuple | None = None, max_in_flight: int | None = None,
                 recv_buffer: bytearray | None = None):
        self.client_id = client_id
        self.max_frame = max_frame
        self.max_in_flight = max_in_flight
        self.sasl = sasl
        self.session_lifetime_ms = 0        # KIP-368: from the last SaslAuthenticate (0 = unlimited)
        self._sasl_client = None
        self._sasl_key = SASL_HANDSHAKE_KEY
        self._sasl_version = 1
        self.software_name, self.software_version = software_name, software_version
        self.state = IDLE
        self.versions: dict[int, tuple[int, int]] = {}
        self.no_flex = False
        self._hs_version = HANDSHAKE_VERSION
        self._hs_corr = -1
        self._outbox = bytearray()
        self._next_corr = 0
        # (correlation id, api key, version, response class or None, handle), oldest first
        self._in_flight: deque[tuple[int, int, int, Any, Any]] = deque()
        self._recv_view = memoryview(recv_buffer if recv_buffer is not None else bytearray(DEFAULT_RECV_BUFFER))
        self._frame: bytearray | memoryview | None = None   # a frame larger than what has arrived
        self._pool: list[bytearray | mmap.mmap] = []   # buffers of large frames, reused once unreferenced
        self._fill = 0                         # bytes of _frame received so far
        self._head = b""                       # a size prefix split across reads

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def can_send(self) -> bool:
        """False while `max_in_flight` requests await their responses."""
        return self.max_in_flight is None or len(self._in_flight) < self.max_in_flight

    @property
    def ready(self) -> bool:
        return self.state == READY

    def oldest_handle(self) -> Any:
        """The handle of the oldest request in flight (None if nothing is in flight)."""
        return self._in_flight[0][4] if self._in_flight else None

    def in_flight_handles(self) -> list:
        """The handles of the requests in flight, oldest first."""
        return [e[4] for e in self._in_flight]

    def connection_lost(self) -> list:
        """The connection is gone: forget what was in flight and any partial frame, return the
        handles of the requests that will never be answered (oldest first). The object is CLOSED."""
        handles = self.in_flight_handles()
        self._in_flight.clear()
        self._frame, self._fill, self._head = None, 0, b""
        self._outbox = bytearray()
        self.state = CLOSED
        return handles

    # -- handshake ---------------------------------------------------------------------------------
    def initiate(self) -> None:
        """Start the ApiVersions handshake; its request is in `data_to_send()`."""
        self.state = HANDSHAKE
        self._hs_version = HANDSHAKE_VERSION
        self._send_api_versions()

    def data_to_send(self) -> bytes:
        out, self._outbox = bytes(self._outbox), bytearray()
        return out

    def _send_api_versions(self) -> None:
        v = self._hs_version
        req = ApiVersionsRequest(client_software_name=self.software_name,
                                 client_software_version=self.software_version)
        corr = self._take_corr()
        self._hs_corr = corr
        self._outbox += encode_request(req, v, corr, self.client_id)

    def _on_handshake_frame(self, payload) -> None:
        v = self._hs_version
        resp = None
        for dv in ((v, 0) if v else (0,)):
            try:
                corr, resp = decode_response_lenient(payload, API_VERSIONS_KEY, dv)
                break
            except DecodeError:
                continue
        if resp is None:
            # undecodable; an UNSUPPORTED_VERSION error code up front still tells us to step down
            if v > 0 and len(payload) >= 6 and int.from_bytes(payload[4:6], "big") == UNSUPPORTED_VERSION:
                self._hs_version = 0
                self._send_api_versions()
                return
            raise HandshakeError(f"the answer to ApiVersions v{v} is not an ApiVersions response")
        if corr != self._hs_corr:
            raise HandshakeError(f"ApiVersions answered with correlation id {corr}, expected {self._hs_corr}")
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if resp.error_code == UNSUPPORTED_VERSION and v > 0:
            theirs = ranges.get(API_VERSIONS_KEY, (0, 0))
            self._hs_version = max(0, min(theirs[1], v - 1))
            self._send_api_versions()
            return
        if resp.error_code:
            raise HandshakeError(f"ApiVersions failed with error code {resp.error_code}")
        self.versions = ranges
        self.no_flex = ranges.get(API_VERSIONS_KEY, (0, 0))[1] < 3
        if self.sasl is not None:
            self._start_sasl()
            return
        self.state = READY

    # -- SASL ----------------------------------------------------------------------------------------
    def _start_sasl(self) -> None:
        self.state = SASL
        self._sasl_client = SaslClient(*self.sasl)
        try:
            hv = self.pick(SASL_HANDSHAKE_KEY, floor=1)
            self._sasl_auth_version = self.pick(SASL_AUTHENTICATE_KEY, cap=2)
        except UnsupportedVersionError as e:
            raise HandshakeError(f"the broker does not serve SASL (SaslHandshake v1/SaslAuthenticate): {e}") from None
        self._sasl_send(SASL_HANDSHAKE_KEY, hv, SaslHandshakeRequest(mechanism=self._sasl_client.mechanism))

    def start_reauthentication(self) -> None:
        """KIP-368: run the SASL exchange again on this READY connection (nothing may be in flight);
        its requests are in `data_to_send()`, its answers go to `receive_data` as during the handshake,
        and the state is READY again once it is done (session_lifetime_ms renewed)."""
        if self.state != READY or self._in_flight or self.sasl is None:
            raise HandshakeError("re-authentication needs a READY SASL connection with nothing in flight")
        self._start_sasl()

    def _sasl_send(self, key: int, version: int, request) -> None:
        self._sasl_key, self._sasl_version = key, version
        corr = self._take_corr()
        self._hs_corr = corr
        self._outbox += encode_request(request, version, corr, self.client_id)

    def _on_sasl_frame(self, payload) -> None:
        corr, resp = decode_response_lenient(payload, self._sasl_key, self._sasl_version)
        if corr != self._hs_corr:
            raise HandshakeError(f"SASL answer with correlation id {corr}, expected {self._hs_corr}")
        mech = self._sasl_client.mechanism
        if self._sasl_key == SASL_HANDSHAKE_KEY:
            if resp.error_code:
                raise for_code(resp.error_code)(
                    f"SASL mechanism {mech}: the broker enables {', '.join(resp.mechanisms) or 'none'}")
            token = self._sasl_client.initial()
        else:
            if resp.error_code:
                raise for_code(resp.error_code)(f"{mech}: {resp.error_message or 'no reason given'}")
            try:
                token = self._sasl_client.respond(resp.auth_bytes)
            except SaslFailure as e:
                raise for_code(ErrorCode.SASL_AUTHENTICATION_FAILED)(f"{mech}: {e}") from None
            if token is None:
                self._sasl_client = None
                self.session_lifetime_ms = getattr(resp, "session_lifetime_ms", 0) or 0
                self.state = READY
                return
        self._sasl_send(SASL_AUTHENTICATE_KEY, self._sasl_auth_version, SaslAuthenticateRequest(auth_bytes=token))

    # -- versions ----------------------------------------------------------------------------------
    def pick(self, api_key: int, cap: int | None = None, floor: int | None = None) -> int:
        """The version to send `api_key` in: the highest both sides support, <= cap; raises
        UnsupportedVersionError when there is none (or it is below `floor`)."""
        if self.no_flex:
            cap = last_rigid_version(api_key, cap)
        v = pick_version(api_key, self.versions, cap)
        if floor is not None and v < floor:
            raise UnsupportedVersionError(
                f"the broker speaks {_api(api_key)} only up to v{v}; v{floor}+ is needed")
        return v

    def check(self, api_key: int, version: int) -> None:
        """Raise UnsupportedVersionError if the broker does not support `version` of `api_key`."""
        rng = self.versions.get(api_key)
        if rng is not None and not rng[0] <= version <= rng[1]:
            raise UnsupportedVersionError(
                f"{_api(api_key)} v{version} requested but the broker supports v{rng[0]}-v{rng[1]}")

    # -- requests ----------------------------------------------------------------------------------
    def _take_corr(self) -> int:
        corr = self._next_corr
        self._next_corr = (corr + 1) & 0x7FFFFFFF
        return corr

    def send_request(self, request, version: int, *, expect_response: bool = True, handle: Any = None,
                     response_class=None) -> tuple[int, bytes]:
        """Encode `request` in `version` -> (correlation_id, bytes to write). With `expect_response`
        the request is in flight until its response; `response_class` decodes that response instead
        of the registered class (same wire layout). Raises TooManyInFlightError when `can_send` is False."""
        return self._send(encode_request, request, version, expect_response, handle, response_class)

    def send_request_buffers(self, request, version: int, *, expect_response: bool = True, handle: Any = None,
                             response_class=None) -> tuple[int, list]:
        """`send_request` for a gathering writer: -> (correlation_id, list of bytes-likes whose
        concatenation is the frame). Large record bytes (a Produce request's batches) are in the
        list by reference, not copied (`encode_request_buffers`): write them with socket.sendmsg,
        or join them where the transport cannot gather (TLS)."""
        return self._send(encode_request_buffers, request, version, expect_response, handle, response_class)

    def _send(self, encode, request, version: int, expect_response: bool, handle: Any, response_class):
        if expect_response and not self.can_send:
            raise TooManyInFlightError(f"{self.max_in_flight} requests already in flight on this connection")
        corr = self._take_corr()
        data = encode(request, version, corr, self.client_id)
        if expect_response:
            self._in_flight.append((corr, type(request).API_KEY, version, response_class, handle))
        return corr, data

    # -- receiving ---------------------------------------------------------------------------------
    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next bytes read from the connection go (then call `buffer_updated`)."""
        if self._frame is not None:
            return memoryview(self._frame)[self._fill:]
        return self._recv_view

    def buffer_updated(self, nbytes: int) -> list[ResponseReceived]:
        """`nbytes` were written at the start of the last `get_buffer()`: the responses they complete."""
        out: list[ResponseReceived] = []
        try:
            frame = self._frame
            if frame is not None:
                self._fill += nbytes
                if self._fill == len(frame):
                    self._frame, self._fill = None, 0
                    self._on_frame(frame, out)
            else:
                self._cut(self._recv_view, nbytes, out)
        except DecodeError as e:
            self.state = CLOSED
            raise ProtocolViolation(str(e), out) from e
        return out

    def receive_data(self, data) -> list[ResponseReceived]:
        """Feed bytes read from the connection: the responses they complete (see `buffer_updated`)."""
        src = memoryview(data)
        out: list[ResponseReceived] = []
        pos = 0
        while pos < len(src):
            buf = self.get_buffer()
            k = min(len(buf), len(src) - pos)
            buf[:k] = src[pos:pos + k]
            pos += k
            try:
                out += self.buffer_updated(k)
            except ProtocolViolation as e:
                e.completed[:0] = out
                raise
        return out

    def _cut(self, view: memoryview, n: int, out: list) -> None:
        """Hand out the frames in view[:n]; an incomplete one is kept in _frame / _head."""
        pos = 0
        if self._head:
            take = min(4 - len(self._head), n)
            head = self._head + bytes(view[:take])
            pos = take
            if len(head) < 4:
                self._head = head
                return
            self._head = b""
        else:
            head = None
        while True:
            if head is None:
                if n - pos < 4:
                    if pos < n:
                        self._head = bytes(view[pos:n])
                    return
                head = bytes(view[pos:pos + 4])
                pos += 4
            size = frame_size(head, self.max_frame)
            head = None
            if n - pos >= size:
                payload = bytes(view[pos:pos + size])
                pos += size
                self._on_frame(payload, out)
            else:
                frame = self._frame_buffer(size)
                have = n - pos
                frame[:have] = view[pos:n]
                self._frame, self._fill = frame, have
                return

    def _frame_buffer(self, size: int) -> bytearray | memoryview:
        """Where a frame of `size` bytes is received. A large frame (a Fetch answer: about
        max.partition.fetch.bytes per partition; a broker returning whole batches only, as kohort
        broker does, leaves a 1 MiB one a little short of that) goes into a pooled buffer that no
        response refers to any more (its records are views of the frame, held until poll() hands
        them out): fresh memory of that size costs more in page faults than
        receiving into it (about 25 ms per 50 MB). The pool keeps the last _POOL buffers of at least
        _POOL_MIN bytes, so a connection keeps about that much memory after its large answers. A new
        one is anonymous memory mapped with its pages populated at once where the OS can (Linux's
        MAP_POPULATE: about half the cost of faulting them in one by one)."""
        if size < _POOL_MIN:
            return bytearray(size)
        pool = self._pool
        for i in range(len(pool)):
            # two references: the pool's and getrefcount's argument; a view of the buffer holds another
            if len(pool[i]) >= size and sys.getrefcount(pool[i]) == 2:
                return memoryview(pool[i])[:size]
        buf = _new_buffer(size)
        for i in range(len(pool)):
            if sys.getrefcount(pool[i]) == 2:
                pool[i] = buf          # a free buffer too small for this frame
                break
        else:
            if len(pool) >= _POOL:
                del pool[0]            # the oldest (still referenced) leaves the pool
            pool.append(buf)
        return memoryview(buf)[:size]

    def _on_frame(self, payload, out: list) -> None:
        """One complete frame (no size prefix), by the connection's state."""
        state = self.state
        if state == HANDSHAKE:
            self._on_handshake_frame(payload)
            return
        if state == SASL:
            self._on_sasl_frame(payload)
            return
        if state == CLOSED:
            raise DecodeError("bytes received on a closed connection")
        if len(payload) < 4:
            raise DecodeError(f"response frame of {len(payload)} bytes has no correlation id")
        (corr,) = _SIZE.unpack_from(payload, 0)
        if not self._in_flight:
            raise DecodeError(f"response with correlation id {corr} but nothing in flight")
        expected, api_key, version, response_class, handle = self._in_flight[0]
        if corr != expected:
            raise DecodeError(f"response correlation id {corr} does not match the oldest request {expected}")
        self._in_flight.popleft()
        # a Produce or Fetch answer (the clients' hot paths) in one call when it has the common shape
        # (a response_class for Produce is a ProduceResponse variant: OnePartitionProduceResponse)
        if response_class is None:
            fast = _DECODE_FRAME.get(api_key)
        else:
            fast = response_class.decode_frame if api_key == ProduceResponse.API_KEY else None
        resp = fast(payload, version) if fast is not None else None
        if resp is None:
            resp = decode_response_lenient(payload, api_key, version, response_class)[1]
        out.append(ResponseReceived(corr, resp, handle, len(payload) + 4))


_DECODE_FRAME = {ProduceResponse.API_KEY: ProduceResponse.decode_frame,
                 FetchResponse.API_KEY: FetchResponse.decode_frame}

_POOL = 3                   # large frame buffers a connection keeps for reuse
_POOL_MIN = 256 << 10       # frames from this size are received into pooled buffers


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def _new_buffer(size: int) -> bytearray | mmap.mmap:
    """A writable buffer of `size` zero bytes for a large frame (see ClientProtocol._frame_buffer)."""
    if _POPULATE:
        try:
            return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
        except OSError:
            pass
    return bytearray(size)


def _api(api_key: int) -> str:
    cls = REQUESTS.get(api_key)
    return cls.__name__[:-7] if cls is not None else f"api_key {api_key}"


class Versioned:
    """A request whose contents depend on the version negotiated at send time.

    `build(version) -> request object`. Use when fields differ across versions (e.g. FindCoordinator
    v4 batches keys, Fetch v13 names topics by id); `max_version` caps the version it is sent in."""

    __slots__ = ("API_KEY", "build", "max_version")

    def __init__(self, api_key: int, build: Callable[[int], Any], max_version: int | None = None):
        self.API_KEY = api_key
        self.build = build
        self.max_version = max_version      # the highest version `build` can make (None: any)


__all__ = [
    "API_VERSIONS_KEY", "CLOSED", "ClientProtocol", "HANDSHAKE", "HandshakeError", "IDLE", "ProtocolViolation",
    "READY", "ResponseReceived", "TooManyInFlightError",
    "decode_response_lenient", "last_rigid_version", "DEFAULT_MAX_FRAME", "FrameReader", "FrameTooLargeError",
    "UnsupportedRequestError", "UnsupportedVersionError", "Versioned", "decode_request", "decode_response",
    "encode_request", "encode_request_buffers", "encode_response", "encode_response_buffer", "frame", "frame_size", "peek_request_header", "pick_version",
]
