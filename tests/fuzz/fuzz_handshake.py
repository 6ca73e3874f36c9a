"""Fuzz target `handshake`: kohort's client connection (protocol/framing.py's ClientProtocol) facing a
malicious broker: the ApiVersions handshake, then a Metadata request and a Fetch request in flight,
every byte of the broker's side chosen by the fuzzer and cut into reads where it says.

Input layout: one byte chooses SASL (its top two bits: none, PLAIN or SCRAM-SHA-256, KIP-43/KIP-84)
and the cut sizes' scale (the rest), the rest is what the broker sends.
Invariants: only DecodeError (ProtocolViolation and FrameTooLargeError are DecodeErrors),
HandshakeError, the KafkaError a SASL refusal raises, or UnsupportedVersionError from our own sends
escapes; the
connection never claims more responses than requests were sent; a frame buffer is never larger than
max_frame (kept small here, so a huge size prefix cannot make the client allocate).
"""
from __future__ import annotations

from kohort.errors import DecodeError, KafkaError
from kohort.protocol.framing import (
    ClientProtocol, HandshakeError, ResponseReceived, UnsupportedVersionError, encode_response,
)
from kohort.protocol.messages.api_versions import ApiVersionsResponse
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.metadata import MetadataRequest, MetadataResponse
from kohort.protocol.messages.sasl_authenticate import SaslAuthenticateResponse
from kohort.protocol.messages.sasl_handshake import SaslHandshakeResponse
from tests.fuzz.common import Finding

NAME = "handshake"
MAX_FRAME = 1 << 20
_SERVED = [(0, 0, 11), (1, 4, 16), (3, 0, 12), (17, 0, 1), (18, 0, 4), (36, 0, 2)]
_SASL = [None, ("PLAIN", "u", "p"), ("SCRAM-SHA-256", "u", "p"), None]


def _api_versions(version: int, corr: int) -> bytes:
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in _SERVED]
    return encode_response(ApiVersionsResponse(error_code=0, api_keys=keys), version, corr)


def seeds() -> list[bytes]:
    # the handshake answered in v3 and v0, then a Metadata answer (correlation ids 0 and 1)
    out = []
    for v in (3, 0):
        meta = encode_response(MetadataResponse(brokers=[], topics=[]), 12, 1)
        out.append(b"\x10" + _api_versions(v, 0) + meta)
    out.append(b"\x01" + _api_versions(3, 0)[:9])
    # SASL PLAIN: handshake, one SaslAuthenticate round, then Metadata (correlation ids 0-3)
    hs = encode_response(SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]), 1, 1)
    auth = encode_response(SaslAuthenticateResponse(error_code=0, auth_bytes=b"", session_lifetime_ms=0), 2, 2)
    meta = encode_response(MetadataResponse(brokers=[], topics=[]), 12, 3)
    out.append(b"\x50" + _api_versions(3, 0) + hs + auth + meta)
    # SCRAM: the server-first message answered
    first = encode_response(SaslAuthenticateResponse(error_code=0, auth_bytes=b"r=abc,s=c2FsdA==,i=4096"), 2, 2)
    out.append(b"\x90" + _api_versions(3, 0) + hs + first)
    return out


def check(data: bytes) -> None:
    if not data:
        return
    scale, wire = data[0] % 64 + 1, memoryview(data[1:])
    p = ClientProtocol(max_frame=MAX_FRAME, max_in_flight=5, sasl=_SASL[data[0] >> 6])
    p.initiate()
    p.data_to_send()
    sent = 0
    got: list[ResponseReceived] = []
    pos, i = 0, 0
    try:
        while pos < len(wire):
            n = max(1, (wire[pos] % scale) if i % 2 else scale)
            i += 1
            got += p.receive_data(wire[pos:pos + n])
            pos += n
            p.data_to_send()
            if p._frame is not None and len(p._frame) > MAX_FRAME:
                raise Finding(f"a frame buffer of {len(p._frame)} bytes over max_frame {MAX_FRAME}")
            if p.ready and sent == 0:
                p.send_request(MetadataRequest(topics=[]), p.pick(3), handle="metadata")
                p.send_request(FetchRequest(max_wait_ms=10, min_bytes=1, topics=[]), p.pick(1), handle="fetch")
                sent = 2
    except (DecodeError, HandshakeError, KafkaError, UnsupportedVersionError):
        return
    if len(got) > sent:
        raise Finding(f"{len(got)} responses for {sent} requests")
