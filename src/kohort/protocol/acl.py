"""Kafka's ACL model as values (clients' `resource/` and `acl/` packages), shared by the broker's
authorizer and the admin client: ResourceType, PatternType, AclOperation, AclPermissionType (Kafka's
codes), `AclBinding` (a resource pattern plus an access-control entry: principal `Type:name`, host,
operation, permission) with Kafka's validity rules for CreateAcls, and `AclBindingFilter` (DescribeAcls,
DeleteAcls): None and ANY match anything; pattern MATCH = the literal name, the literal `*` and
PREFIXED patterns that are prefixes of the name; ANY = that exact name under any pattern type.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"

class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class InvalidAclError(ValueError):
    """A binding or filter Kafka refuses (INVALID_REQUEST per entry)."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def validate(self) -> None:
        """Kafka's checks for CreateAcls (AclControlManager.validateNewAcl)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAclError(f"Invalid resourceType {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"Invalid patternType {self.pattern_type.name}")
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise InvalidAclError(f"Invalid operation {self.operation.name}")
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"Invalid permissionType {self.permission.name}")
        if not self.name:
            raise InvalidAclError("Resource name should not be empty")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        ptype, sep, pname = (self.principal or "").partition(":")
        if not sep or not ptype or not pname:
            raise InvalidAclError(f"Could not parse principal from `{self.principal}` (no colon is present "
                                  f"separating the principal type from the principal name)")
        if not self.host:
            raise InvalidAclError("Invalid host: it must be an IP address or '*'")

    def to_json(self) -> dict:
        return {"resource_type": self.resource_type.name, "name": self.name,
                "pattern_type": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.name, "permission": self.permission.name}

    @classmethod
    def from_json(cls, d: dict) -> "AclBinding":
        return cls(ResourceType[d["resource_type"]], d["name"], PatternType[d["pattern_type"]], d["principal"],
                   d["host"], AclOperation[d["operation"]], AclPermissionType[d["permission"]])


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """None (or ANY) matches anything in that field."""
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        for what, v in (("resourceType", self.resource_type), ("patternType", self.pattern_type),
                        ("operation", self.operation), ("permissionType", self.permission)):
            if v == 0:
                raise InvalidAclError(f"Invalid {what} UNKNOWN in the filter")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        pt = self.pattern_type
        if pt == PatternType.MATCH:
            if self.name is not None and not (
                    (b.pattern_type == PatternType.LITERAL and b.name in (self.name, WILDCARD))
                    or (b.pattern_type == PatternType.PREFIXED and self.name.startswith(b.name))):
                return False
            if self.name is None and b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
                return False
        else:
            if pt != PatternType.ANY and pt != b.pattern_type:
                return False
            if self.name is not None and self.name != b.name:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        if self.permission != AclPermissionType.ANY and self.permission != b.permission:
            return False
        return True
