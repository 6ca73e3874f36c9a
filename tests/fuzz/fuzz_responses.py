"""Fuzz target `responses`: every response decoder of kohort's client, as a malicious broker would
feed it (protocol/framing.py's decode_response_lenient, what ClientProtocol uses, and the strict
decode_response).

Invariants: only DecodeError escapes; a response the strict decoder accepts, the lenient one
decodes to the same message (compared by re-encoding).
"""
from __future__ import annotations

from kohort.errors import DecodeError
from kohort.protocol.framing import decode_response, decode_response_lenient
from kohort.protocol.messages import RESPONSES
from tests.fuzz.common import Finding, default_bodies, response_payload, response_versions, split

NAME = "responses"
TABLE = response_versions()


def seeds() -> list[bytes]:
    return default_bodies(TABLE, RESPONSES)


def check(data: bytes) -> None:
    k, v, body = split(data, TABLE)
    payload = response_payload(k, v, body)
    try:
        _, strict = decode_response(payload, k, v)
    except DecodeError:
        strict = None
    try:
        _, lenient = decode_response_lenient(payload, k, v)
    except DecodeError:
        if strict is not None:
            raise Finding(f"api_key {k} v{v}: strict decode accepted what the lenient decoder refused")
        return
    if strict is not None and strict.encode(v) != lenient.encode(v):
        raise Finding(f"api_key {k} v{v}: strict and lenient decoders disagree")
