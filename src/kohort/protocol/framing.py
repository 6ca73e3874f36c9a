"""Size-prefixed framing, request/response encoding with headers, and version negotiation. Sans I/O.

A Kafka frame is an int32 size followed by that many bytes: a header then a body. `FrameReader`
splits a byte stream into frames and refuses an oversize frame from its 4-byte prefix alone, before
any of its body is buffered. `ClientProtocol` is the client side of one connection and the only place
its handshake lives: ApiVersions negotiation with fallback, version choice and capping, the leniency
real brokers need (trailing bytes after a response body), correlation ids and in-order matching --
no sockets involved, so tests drive it with plain bytes. Every client stack (NetworkClient, and so
the producer, consumer, admin and the Spark source) connects through it. `pick_version` chooses the
highest version both sides support from the broker's ApiVersions ranges (KIP-35).
"""
from __future__ import annotations

import struct
from collections import OrderedDict

from kohort.errors import DecodeError, ErrorCode, KohortError
from kohort.protocol.headers import (
    API_VERSIONS_KEY,
    RequestHeader,
    ResponseHeader,
    request_header_version,
    response_header_version,
)
from kohort.protocol.messages import REQUESTS, RESPONSES
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from kohort.protocol.messages.sasl_handshake import SaslHandshakeRequest
from kohort.protocol.primitives import Reader
from kohort.protocol.records import SpliceBuffer

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
    hv = response_header_version(cls.API_KEY, cls, version)
    # response header v0: correlation id; v1: correlation id + an empty tagged-field section
    out = bytearray(8 if hv == 0 else 9)
    _SIZE.pack_into(out, 4, correlation_id)
    response.encode_into(out, version)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return out


def encode_response_spliced(response, version: int, correlation_id: int) -> SpliceBuffer:
    """encode_response_buffer, leaving ExternalRecords out: the buffer's `splices` say where their
    bytes go, and its size prefix already counts them (issue 17: Fetch answers sent with sendfile)."""
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


UNSUPPORTED_VERSION = ErrorCode.UNSUPPORTED_VERSION
HANDSHAKE_VERSION = 3

# connection states of ClientProtocol
IDLE, HANDSHAKE, SASL, READY = "IDLE", "HANDSHAKE", "SASL", "READY"
SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36


class ClientProtocol:
    """Client side of one Kafka connection, sans I/O: the ApiVersions handshake, version choice,
    correlation ids, in-order response matching. No sockets, threads or clocks: the caller writes
    what `data_to_send()` returns and feeds what it reads to `receive_data()`.

    Handshake (KIP-35, KIP-511): `initiate()` queues ApiVersions v3. The answer is decoded leniently
    (trailing bytes ignored) in v3, else in v0 (a broker that does not know our version answers in
    v0). UNSUPPORTED_VERSION makes it ask again in the highest ApiVersions version both sides know
    (from the broker's list, else v0). Then `state` is READY and `versions` holds the broker's
    ranges; `pick(api_key, cap)` gives the highest version both sides support. A broker that stops at
    ApiVersions v2 yet lists flexible versions of other APIs (librdkafka's mock cluster crashes on
    flexible SyncGroup) gets only the versions before each API's first flexible one, since KIP-482's
    flexible versions shipped with ApiVersions v3.

    SASL (KIP-43, KIP-152), when `sasl=(mechanism, username, password[, OAUTHBEARER token source])` is
    given: after ApiVersions, SaslHandshake v1, then SaslAuthenticate rounds (highest common version
    <= 2) until the mechanism is done; only then READY. A refusal raises the broker's KafkaError (UNSUPPORTED_SASL_MECHANISM,
    SASL_AUTHENTICATION_FAILED with the broker's message, ILLEGAL_SASL_STATE); a SCRAM server whose
    nonce or signature does not verify raises SASL_AUTHENTICATION_FAILED too. These are fatal: the
    driver must not retry them as connection errors.

    `send(request, version) -> (correlation_id, bytes)` (the bytes are also what the caller writes;
    they are not queued in `data_to_send`, so a driver can batch its own writes);
    `receive_data(bytes) -> [(correlation_id, response)]`. Kafka answers the requests of one
    connection in order, so a response for an unexpected correlation id is an error. A driver that
    splits frames itself uses `expect(corr)` / `decode_frame(payload, api_key, version)` instead.
    """

    def __init__(self, client_id: str | None = "kohort", max_frame: int = DEFAULT_MAX_FRAME,
                 software_name: str = "kohort", software_version: str = "0",
                 sasl: tuple | None = None):
        self.client_id = client_id
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
        self._frames = FrameReader(max_frame)
        self._next_corr = 0
        self._in_flight: OrderedDict[int, tuple[int, int]] = OrderedDict()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def ready(self) -> bool:
        return self.state == READY

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
        from kohort.protocol.sasl import SaslClient
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
        from kohort.errors import for_code
        from kohort.protocol.sasl import SaslFailure
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

    # -- requests and responses --------------------------------------------------------------------
    def _take_corr(self) -> int:
        corr = self._next_corr
        self._next_corr = (corr + 1) & 0x7FFFFFFF
        return corr

    def send(self, request, version: int, expect_response: bool = True) -> tuple[int, bytes]:
        corr = self._take_corr()
        data = encode_request(request, version, corr, self.client_id)
        if expect_response:
            self._in_flight[corr] = (type(request).API_KEY, version)
        return corr, data

    def receive_data(self, data) -> list:
        out = []
        for payload in self._frames.feed(data):
            if self.state == HANDSHAKE:
                self._on_handshake_frame(payload)
                continue
            if self.state == SASL:
                self._on_sasl_frame(payload)
                continue
            if len(payload) < 4:
                raise DecodeError("response frame shorter than its correlation id")
            (corr,) = _SIZE.unpack_from(payload, 0)
            if not self._in_flight:
                raise DecodeError(f"response with correlation id {corr} but nothing in flight")
            expected, (api_key, version) = next(iter(self._in_flight.items()))
            if corr != expected:
                raise DecodeError(f"response correlation id {corr} does not match the oldest request {expected}")
            del self._in_flight[corr]
            _, resp = decode_response_lenient(payload, api_key, version)
            out.append((corr, resp))
        return out

    def on_handshake_data(self, data) -> None:
        """Feed bytes during the handshake (a driver that splits READY frames itself). Bytes after
        the ApiVersions response are an error: nothing else is in flight yet."""
        self.receive_data(data)
        if self.state == READY and self._frames.buffered:
            raise HandshakeError("unexpected bytes after the ApiVersions response")


def _api(api_key: int) -> str:
    cls = REQUESTS.get(api_key)
    return cls.__name__[:-7] if cls is not None else f"api_key {api_key}"


__all__ = [
    "API_VERSIONS_KEY", "ClientProtocol", "HANDSHAKE", "HandshakeError", "IDLE", "READY",
    "decode_response_lenient", "last_rigid_version", "DEFAULT_MAX_FRAME", "FrameReader", "FrameTooLargeError",
    "UnsupportedRequestError", "UnsupportedVersionError", "decode_request", "decode_response",
    "encode_request", "encode_response", "encode_response_buffer", "frame", "frame_size", "peek_request_header", "pick_version",
]
