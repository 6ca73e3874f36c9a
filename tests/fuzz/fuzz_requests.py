"""Fuzz target `requests`: every request decoder the broker serves, both the strict one of
protocol/framing.py and the broker's lenient one (broker/connection.py, trailing bytes ignored).

Invariants: only DecodeError escapes; both decoders agree (a body the strict decoder accepts, the
lenient one decodes to the same message); a decoded request encodes, and that encoding decodes and encodes to itself
(compared as bytes: a NaN float is not equal to itself).
"""
from __future__ import annotations

from kohort.broker.connection import decode_request as broker_decode
from kohort.errors import DecodeError
from kohort.protocol.framing import decode_request
from kohort.protocol.messages import REQUESTS
from tests.fuzz.common import Finding, default_bodies, request_payload, served_versions, split

NAME = "requests"
TABLE = served_versions()


def seeds() -> list[bytes]:
    return default_bodies(TABLE, REQUESTS)


def check(data: bytes) -> None:
    k, v, body = split(data, TABLE)
    payload = request_payload(k, v, body)
    try:
        _, strict = decode_request(payload)
    except DecodeError:
        strict = None
    try:
        _, lenient = broker_decode(payload)
    except DecodeError:
        if strict is not None:
            raise Finding(f"api_key {k} v{v}: strict decode accepted what the broker's decoder refused")
        return
    encoded = lenient.encode(v)
    if strict is not None and strict.encode(v) != encoded:
        raise Finding(f"api_key {k} v{v}: strict and lenient decoders disagree")
    if REQUESTS[k].decode(encoded, v).encode(v) != encoded:
        raise Finding(f"api_key {k} v{v}: a decoded request does not survive encode + decode")
