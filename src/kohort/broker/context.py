"""Per-request context handed to handlers: the broker, the request header, who is asking (the
connection's principal and listener)."""
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
    principal: str = "User:ANONYMOUS"   # User:<SASL name>, User:<TLS subject DN> or User:ANONYMOUS
    listener: Any = None                # kohort.broker.security.Listener the request came in on

    def advertised(self) -> tuple[str, int]:
        """The broker's address as told to this client: that of the listener it connected to."""
        lst = self.listener
        if lst is not None and lst.advertised is not None:
            return lst.advertised
        return self.broker.host, self.broker.port
