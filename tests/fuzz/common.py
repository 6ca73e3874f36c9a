"""What the fuzz targets share: the input layout of the protocol targets, the tables of API versions
they pick from, and the checks every target applies.

Input layout of the request/response targets: two bytes choose one (api_key, version) of a table
(big-endian, modulo its length), the rest is the message body; the target builds the header itself,
so the fuzzer spends its time inside the body decoders rather than on unknown API keys.
"""
from __future__ import annotations

import struct
from typing import Callable

from kohort.protocol.headers import RequestHeader, ResponseHeader, request_header_version, response_header_version
from kohort.protocol.messages import REQUESTS, RESPONSES

# a seed / corpus input
Input = bytes
# a target's check: returns normally, or raises a Finding (or any other exception, which is one too)
Check = Callable[[bytes], None]


class Finding(AssertionError):
    """An invariant of a target broken by one input (what the fuzzer reports as a crash)."""


def served_versions() -> list[tuple[int, int]]:
    """Every (api_key, version) the broker serves (what its ApiVersions answer advertises)."""
    from kohort.broker.handlers import load_all
    return [(k, v) for k, h in sorted(load_all().items()) for v in range(h.min_version, h.max_version + 1)]


def response_versions() -> list[tuple[int, int]]:
    """Every (api_key, version) of a response kohort's client can decode."""
    return [(k, v) for k, cls in sorted(RESPONSES.items()) for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]


def split(data: bytes, table: list[tuple[int, int]]) -> tuple[int, int, bytes]:
    """(api_key, version, body) of one input under the layout above."""
    if len(data) < 2:
        k, v = table[0]
        return k, v, b""
    k, v = table[struct.unpack_from(">H", data)[0] % len(table)]
    return k, v, data[2:]


def index_of(table: list[tuple[int, int]], api_key: int, version: int) -> bytes:
    return struct.pack(">H", table.index((api_key, version)))


def request_payload(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    """A request frame payload (no size prefix): a well-formed header for (api_key, version), then body."""
    out = bytearray()
    RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                  client_id="fuzz").encode_into(out, request_header_version(REQUESTS[api_key], version))
    return bytes(out) + body


def response_payload(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    """A response frame payload (no size prefix) for (api_key, version): header, then body."""
    out = bytearray()
    ResponseHeader(correlation_id=correlation_id).encode_into(
        out, response_header_version(api_key, RESPONSES[api_key], version))
    return bytes(out) + body


def default_bodies(table: list[tuple[int, int]], registry: dict) -> list[Input]:
    """Seeds: each message of the table built with its defaults and encoded."""
    out = []
    for k, v in table:
        try:
            out.append(index_of(table, k, v) + registry[k]().encode(v))
        except Exception:       # a message whose defaults do not encode in this version: no seed
            continue
    return out
