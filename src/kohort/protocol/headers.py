"""Request header v0/v1/v2 and response header v0/v1, and which one each API version uses.

Rules (KIP-482): a flexible request version uses request header v2 (client_id stays a non-compact
nullable string, then a tagged-field section); a flexible response version uses response header v1 --
except ApiVersions, whose response always uses header v0 so any client can read it.
"""
from __future__ import annotations

import struct

from kohort.protocol.primitives import Reader
from kohort.protocol.schema import INT16, INT32, LEGACY_NULLABLE_STRING, Message, f

API_VERSIONS_KEY = 18
_FIXED = struct.Struct(">hhih")     # api key, api version, correlation id, client_id length
_new = object.__new__


class RequestHeader(Message):
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("request_api_key", INT16),
        f("request_api_version", INT16),
        f("correlation_id", INT32),
        f("client_id", LEGACY_NULLABLE_STRING, "1+", default=None),
    ]

    @classmethod
    def read(cls, r: Reader, version: int):
        """Header v1/v2 without tagged fields read in one go (every request passes here); v0,
        tagged fields and malformed bytes through the schema's codec."""
        buf, p, end = r.buf, r.pos, r.end
        if version >= 1 and end - p >= 10:
            key, ver, corr, n = _FIXED.unpack_from(buf, p)
            p += 10
            if n < 0:
                client_id = None
            elif p + n <= end:
                try:
                    client_id = str(buf[p:p + n], "utf-8")
                except UnicodeDecodeError:
                    return super().read(r, version)
                p += n
            else:
                return super().read(r, version)
            if version >= 2:
                if p >= end or buf[p] != 0:
                    return super().read(r, version)
                p += 1
            obj = _new(cls)
            obj.__dict__.update(request_api_key=key, request_api_version=ver, correlation_id=corr,
                                client_id=client_id)
            r.pos = p
            return obj
        return super().read(r, version)


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
