"""Kafka's authorizer, pure (no I/O, no clock): what StandardAuthorizer decides.

The model (ResourceType, PatternType, AclOperation, AclPermissionType, AclBinding, AclBindingFilter)
lives in kohort.protocol.acl, shared with the admin client; the file behind it in broker/acl_store.py.

`Authorizer.authorize(principal, host, op, rtype, name)` follows StandardAuthorizerData:
1. a principal in `super.users` is allowed everything;
2. candidate ACLs: same resource type and LITERAL exact name, LITERAL `*`, or PREFIXED a prefix of it;
3. an ACL applies when its principal is the session's or `User:*`, its host `*` or the client's IP,
   and its operation matches: ALL matches everything; an ALLOW on READ/WRITE/DELETE/ALTER also grants
   DESCRIBE and an ALLOW on ALTER_CONFIGS also grants DESCRIBE_CONFIGS (DENY implies nothing);
4. any applicable DENY denies; else any applicable ALLOW allows;
5. no candidate ACL at all -> `allow.everyone.if.no.acl.found`; otherwise deny.
`authorize_by_resource_type` is KIP-679's "op on any resource of the type" (idempotent producers);
`authorized_operations` the KIP-430 bitfield. ACLs are consulted on every call (no per-connection
cache): a change applies at the next request of every connection.
"""
from __future__ import annotations

import ipaddress
from typing import Iterable

from kohort.protocol.acl import (  # noqa: F401 - the model is part of the authorizer's vocabulary
    CLUSTER_NAME, WILDCARD, WILDCARD_PRINCIPAL, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
    InvalidAclError, PatternType, ResourceType,
)

AUTHORIZED_OPERATIONS_OMITTED = -2147483648     # INT32_MIN: "not requested" (KIP-430)

# `authorizer.class.name` values that turn the authorizer on (KRaft's and the removed ZooKeeper one)
AUTHORIZER_CLASSES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "kafka.security.authorizer.AclAuthorizer")

Op = AclOperation
IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})

# the operations each resource type supports (KIP-430's bitfield ranges over these; AclEntry.java)
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by ';' (Kafka's format), e.g. `User:admin;User:ops`."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


def _host_matches(acl_host: str, host: str) -> bool:
    if acl_host == WILDCARD or acl_host == host:
        return True
    try:        # Java compares getHostAddress() strings; normalise so ::1 and 0:0:0:0:0:0:0:1 agree
        return ipaddress.ip_address(acl_host) == ipaddress.ip_address(host)
    except ValueError:
        return False


def _applies(b: AclBinding, principal: str, host: str, op: AclOperation) -> bool:
    if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
        return False
    if not _host_matches(b.host, host):
        return False
    if b.operation == Op.ALL:
        return True
    if b.permission == AclPermissionType.ALLOW:
        if op == Op.DESCRIBE:
            return b.operation in IMPLIES_DESCRIBE
        if op == Op.DESCRIBE_CONFIGS:
            return b.operation in IMPLIES_DESCRIBE_CONFIGS
    return b.operation == op


class Authorizer:
    """The ACLs in memory and the decision rules. The bindings change only through add/remove.

    Indexed as Kafka's sorted ACL cache is, so one decision costs O(len(name)) dict lookups plus the
    ACLs of its candidate patterns, not a scan of every ACL: LITERAL ACLs by (type, name), PREFIXED
    ones by (type, prefix); a name's candidates are its literal entry, the literal `*` and each of its
    prefixes."""

    def __init__(self, bindings: Iterable[AclBinding] = (), super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._by_type: dict[ResourceType, set[AclBinding]] = {}
        self._literal: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}     # length -> how many patterns
        for b in bindings:
            self.add(b)

    def _candidates(self, rtype: ResourceType, name: str):
        lit = self._literal
        yield from lit.get((rtype, name), ())
        if name != WILDCARD:
            yield from lit.get((rtype, WILDCARD), ())
        pre = self._prefixed
        for n in self._prefix_lengths.get(rtype, ()):
            if n <= len(name):
                yield from pre.get((rtype, name[:n]), ())

    # -- decisions -------------------------------------------------------------------------------
    def authorize(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        found_any = allowed = False
        for b in self._candidates(rtype, name):
            found_any = True
            if _applies(b, principal, host, op):
                if b.permission == AclPermissionType.DENY:
                    return False
                allowed = True
        if allowed:
            return True
        return self.allow_if_no_acl and not found_any

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation,
                                   rtype: ResourceType) -> bool:
        """KIP-679: may `principal` do `op` on at least one resource of `rtype`? An ALLOW on any pattern
        that no DENY covers (a DENY on the literal name, a prefix of it, or `*`)."""
        if principal in self.super_users:
            return True
        acls = [b for b in self._by_type.get(rtype, ()) if b.principal in (principal, WILDCARD_PRINCIPAL)
                and _host_matches(b.host, host) and b.operation in (op, Op.ALL)]
        denies = [b for b in acls if b.permission == AclPermissionType.DENY]
        if any(d.pattern_type == PatternType.LITERAL and d.name == WILDCARD for d in denies):
            return False
        for a in acls:
            if a.permission != AclPermissionType.ALLOW:
                continue
            if a.pattern_type == PatternType.LITERAL and a.name == WILDCARD:
                return True
            if not any(d.pattern_type == PatternType.PREFIXED and a.name.startswith(d.name)
                       or d.pattern_type == PatternType.LITERAL and d.name == a.name
                       and a.pattern_type == PatternType.LITERAL
                       for d in denies):
                return True
        # no ACL of this type at all: the no-ACL default, as a resource without ACLs would get
        return self.allow_if_no_acl and not self._by_type.get(rtype)

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """KIP-430: bit `1 << op` for each supported operation allowed on the resource."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[rtype]:
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << int(op)
        return bits

    # -- the ACLs themselves ---------------------------------------------------------------------
    def bindings(self) -> list[AclBinding]:
        return sorted((b for bs in self._by_type.values() for b in bs),
                      key=lambda b: (b.resource_type, b.name, b.pattern_type, b.principal, b.host,
                                     b.operation, b.permission))

    def describe(self, flt: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.bindings() if flt.matches(b)]

    def add(self, b: AclBinding) -> bool:
        """Add one binding (validated by the caller); False when it was already there."""
        s = self._by_type.setdefault(b.resource_type, set())
        if b in s:
            return False
        s.add(b)
        if b.pattern_type == PatternType.PREFIXED:
            self._prefixed.setdefault((b.resource_type, b.name), set()).add(b)
            lengths = self._prefix_lengths.setdefault(b.resource_type, {})
            lengths[len(b.name)] = lengths.get(len(b.name), 0) + 1
        else:
            self._literal.setdefault((b.resource_type, b.name), set()).add(b)
        return True

    def remove(self, flt: AclBindingFilter) -> list[AclBinding]:
        gone = self.describe(flt)
        for b in gone:
            self._by_type[b.resource_type].discard(b)
            key = (b.resource_type, b.name)
            index = self._prefixed if b.pattern_type == PatternType.PREFIXED else self._literal
            index[key].discard(b)
            if not index[key]:
                del index[key]
            if b.pattern_type == PatternType.PREFIXED:
                lengths = self._prefix_lengths[b.resource_type]
                lengths[len(b.name)] -= 1
                if not lengths[len(b.name)]:
                    del lengths[len(b.name)]
        return gone


def all_operations(rtype: ResourceType) -> int:
    """The bitfield of every operation a resource type supports (what Kafka answers without an
    authorizer)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[rtype]:
        bits |= 1 << int(op)
    return bits
