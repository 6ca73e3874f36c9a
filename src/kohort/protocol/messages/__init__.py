"""One module per Kafka API: its Request and Response classes, all versions in one definition each.

`REQUESTS[api_key]` / `RESPONSES[api_key]` are discovered from the modules of this package, so adding
an API is adding a module.
"""
from __future__ import annotations

import importlib
import pkgutil

from kohort.protocol.schema import Message

REQUESTS: dict[int, type[Message]] = {}
RESPONSES: dict[int, type[Message]] = {}


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Message) and obj.__module__ == mod.__name__:
                if obj.API_KEY < 0:
                    continue
                # a module's first Request and Response classes are its API's; a later one is a
                # variant of the same wire layout a client may decode with (LenientSyncGroupResponse)
                if obj.__name__.endswith("Request"):
                    REQUESTS.setdefault(obj.API_KEY, obj)
                elif obj.__name__.endswith("Response"):
                    RESPONSES.setdefault(obj.API_KEY, obj)


_discover()


def api_name(api_key: int) -> str:
    cls = REQUESTS.get(api_key)
    return cls.__name__[: -len("Request")] if cls else f"Unknown({api_key})"
