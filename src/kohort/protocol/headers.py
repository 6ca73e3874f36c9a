"""Request header v0/v1/v2 and response header v0/v1, and which one each API version uses.

Rules (KIP-482): a flexible request version uses request header v2 (client_id stays a non-compact
nullable string, then a tagged-field section); a flexible response version uses response header v1 --
except ApiVersions, whose response always uses header v0 so any client can read it.
"""
from __future__ import annotations

from kohort.protocol.schema import INT16, INT32, LEGACY_NULLABLE_STRING, Message, f

API_VERSIONS_KEY = 18


class RequestHeader(Message):
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("request_api_key", INT16),
        f("request_api_version", INT16),
        f("correlation_id", INT32),
        f("client_id", LEGACY_NULLABLE_STRING, "1+", default=None),
    ]


class ResponseHeader(Message):
    VALID = "0-1"
    FLEXIBLE = "1+"
    SCHEMA = [f("correlation_id", INT32)]


def request_header_version(request_cls, version: int) -> int:
    return 2 if request_cls.is_flexible(version) else 1


def response_header_version(api_key: int, response_cls, version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if response_cls.is_flexible(version) else 0
