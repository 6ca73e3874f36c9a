"""Per-request context handed to handlers: the broker, the request header, who is asking."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class RequestContext:
    broker: Any             # kohort.broker.server.Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    connection_id: int
