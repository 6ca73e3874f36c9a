"""The broker's request handlers: one module per API (or small family), registered by `@handles`.

A handler is `fn(ctx, request) -> response | NO_RESPONSE` or an `async def` of the same shape; the
server answers in request order per connection either way. The ApiVersions response is derived from
this registry, so the broker advertises exactly what is implemented.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

from kohort.protocol.schema import parse_versions

NO_RESPONSE = object()   # e.g. Produce with acks=0


@dataclass
class Handler:
    fn: Callable
    request_cls: type
    min_version: int
    max_version: int
    advertised_min: int   # Kafka 4 advertises Produce from 0 but rejects v0-2 (KAFKA-18659)


HANDLERS: dict[int, Handler] = {}


def handles(request_cls, versions: str, advertised_min: int | None = None):
    lo, hi = parse_versions(versions)
    hi = min(hi, request_cls.MAX_VERSION)

    def deco(fn):
        HANDLERS[request_cls.API_KEY] = Handler(fn, request_cls, lo, hi,
                                                lo if advertised_min is None else advertised_min)
        return fn
    return deco


def load_all() -> dict[int, Handler]:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return HANDLERS
