"""Per-request context handed to handlers: the broker, the request header, who is asking (the
connection's principal and listener), and the authorization helpers every handler uses:

* `ctx.authorize(op, rtype, name)` -> bool: may this principal, from this host, do `op` on the resource;
* `ctx.authorized(op, rtype, names)` -> the subset of `names` allowed (filters, e.g. Metadata, ListGroups);
* `ctx.authorize_cluster(op)`; `ctx.authorize_any(op, rtype)` (KIP-679, "on some resource of the type");
* `ctx.authorized_operations(rtype, name, requested)` -> KIP-430's bitfield (INT32_MIN when not requested).

Without an authorizer (`authorizer.class.name` unset) everything is allowed, as in Kafka.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from kohort.broker.authorizer import (
    AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_NAME, AclOperation, ResourceType, all_operations,
)


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

    # -- authorization ---------------------------------------------------------------------------
    def _authorizer(self):
        acls = getattr(self.broker, "acls", None)
        return None if acls is None else acls.authorizer

    def authorize(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        a = self._authorizer()
        return a is None or a.authorize(self.principal, self.client_host, op, rtype, name)

    def authorize_cluster(self, op: AclOperation) -> bool:
        return self.authorize(op, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorized(self, op: AclOperation, rtype: ResourceType, names: Iterable[str]) -> set[str]:
        a = self._authorizer()
        names = set(names)
        if a is None:
            return names
        return {n for n in names if a.authorize(self.principal, self.client_host, op, rtype, n)}

    def authorize_any(self, op: AclOperation, rtype: ResourceType) -> bool:
        a = self._authorizer()
        return a is None or a.authorize_by_resource_type(self.principal, self.client_host, op, rtype)

    def authorized_operations(self, rtype: ResourceType, name: str, requested: bool = True) -> int:
        if not requested:
            return AUTHORIZED_OPERATIONS_OMITTED
        a = self._authorizer()
        if a is None:
            return all_operations(rtype)
        return a.authorized_operations(self.principal, self.client_host, rtype, name)
