"""`kohort acls`: a broker's ACLs, with kafka-acls.sh's option names (kohort broker or Apache Kafka).

    kohort acls add    -b HOST:PORT [-X ...] (--allow-principal P | --deny-principal P)... [--operation OP]...
                       RESOURCE... [--resource-pattern-type literal|prefixed] [--allow-host H] [--deny-host H]
                       [--producer | --consumer] [--idempotent]
    kohort acls list   -b HOST:PORT [-X ...] [RESOURCE...] [--resource-pattern-type any|match|literal|prefixed]
                       [--principal P]
    kohort acls remove -b HOST:PORT [-X ...] RESOURCE... [the add options; none = every ACL of the resource]

RESOURCE is --topic NAME, --group NAME, --cluster, --transactional-id NAME, --delegation-token NAME or
--user-principal NAME (each repeatable; `*` is every resource of the type). As kafka-acls.sh: every
combination of resource, principal, host and operation is one ACL; hosts default to `*`; --producer
means WRITE, DESCRIBE and CREATE on the topics (+ WRITE and DESCRIBE on --transactional-id, + cluster
IDEMPOTENT_WRITE with --idempotent), --consumer READ and DESCRIBE on the topics and READ on the groups.
Unlike kafka-acls.sh, remove does not ask for confirmation. Through CreateAcls/DescribeAcls/DeleteAcls.
"""
from __future__ import annotations

import json

from kohort.errors import KohortError
from kohort.protocol.acl import (
    CLUSTER_NAME, AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType,
)

OPERATIONS = [o.name for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)]


def _operation(text: str) -> AclOperation:
    key = text.strip().upper().replace("-", "_")
    key = {"DESCRIBECONFIGS": "DESCRIBE_CONFIGS", "ALTERCONFIGS": "ALTER_CONFIGS",
           "IDEMPOTENTWRITE": "IDEMPOTENT_WRITE", "CLUSTERACTION": "CLUSTER_ACTION",
           "CREATETOKENS": "CREATE_TOKENS", "DESCRIBETOKENS": "DESCRIBE_TOKENS"}.get(key, key)
    if key not in OPERATIONS:
        raise KohortError(f"--operation {text!r}: use one of {', '.join(o.title() for o in OPERATIONS)}")
    return AclOperation[key]


def _principal(p: str) -> str:
    if ":" not in p or not p.split(":", 1)[1]:
        raise KohortError(f"principal {p!r}: expected TYPE:NAME, e.g. User:alice")
    return p


def _resources(args) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, n) for n in args.topic] + [(ResourceType.GROUP, n) for n in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id]
    out += [(ResourceType.DELEGATION_TOKEN, n) for n in args.delegation_token]
    out += [(ResourceType.USER, n) for n in args.user_principal]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _operations_by_resource(args, resources) -> dict[tuple, list[AclOperation]]:
    """Each resource's operations: --operation for all, or what --producer/--consumer mean."""
    ops = [_operation(o) for o in args.operation]
    if not (args.producer or args.consumer):
        if not ops:
            raise KohortError("give --operation (e.g. --operation Read), --producer or --consumer")
        return {r: ops for r in resources}
    out: dict[tuple, list[AclOperation]] = {}
    for r in resources:
        t = r[0]
        want = []
        if args.producer and t == ResourceType.TOPIC:
            want += [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
        if args.producer and t == ResourceType.TRANSACTIONAL_ID:
            want += [AclOperation.WRITE, AclOperation.DESCRIBE]
        if args.consumer and t == ResourceType.TOPIC:
            want += [AclOperation.READ, AclOperation.DESCRIBE]
        if args.consumer and t == ResourceType.GROUP:
            want += [AclOperation.READ]
        out[r] = list(dict.fromkeys(want + ops))
    if args.producer and args.idempotent:
        out[(ResourceType.CLUSTER, CLUSTER_NAME)] = [AclOperation.IDEMPOTENT_WRITE]
    if args.consumer and not args.group:
        raise KohortError("--consumer needs --group")
    return out


def _pattern(args, default: str) -> PatternType:
    name = (args.resource_pattern_type or default).upper()
    if name not in ("LITERAL", "PREFIXED", "ANY", "MATCH"):
        raise KohortError(f"--resource-pattern-type {args.resource_pattern_type!r}: "
                          f"use literal, prefixed, any or match")
    return PatternType[name]


def bindings_to_add(args) -> list[AclBinding]:
    resources = _resources(args)
    if not resources:
        raise KohortError("name a resource: --topic, --group, --cluster, --transactional-id, ...")
    pattern = _pattern(args, "literal")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise KohortError("ACLs are added with --resource-pattern-type literal or prefixed")
    if not (args.allow_principal or args.deny_principal):
        raise KohortError("give --allow-principal or --deny-principal")
    out = []
    for (rtype, name), ops in _operations_by_resource(args, resources).items():
        for perm, principals, hosts in ((AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
                                        (AclPermissionType.DENY, args.deny_principal, args.deny_host)):
            for p in principals:
                for h in hosts or ["*"]:
                    for op in ops:
                        out.append(AclBinding(rtype, name, pattern, _principal(p), h, op, perm))
    return out


def filters_to_remove(args) -> list[AclBindingFilter]:
    resources = _resources(args)
    if not resources:
        raise KohortError("name the resource(s) whose ACLs to remove: --topic, --group, --cluster, ...")
    if not (args.allow_principal or args.deny_principal or args.operation or args.producer or args.consumer):
        # kafka-acls.sh --remove with only a resource: every ACL of that resource pattern
        pattern = _pattern(args, "literal")
        return [AclBindingFilter(rtype, name, pattern) for rtype, name in resources]
    return [AclBindingFilter(b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation,
                             b.permission) for b in bindings_to_add(args)]


def filters_to_list(args) -> list[AclBindingFilter]:
    principal = _principal(args.principal) if args.principal else None
    pattern = _pattern(args, "any")
    resources = _resources(args)
    if not resources:
        return [AclBindingFilter(ResourceType.ANY, None, pattern, principal)]
    return [AclBindingFilter(rtype, name, pattern, principal) for rtype, name in resources]


def _text(b: AclBinding) -> str:
    return (f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
            f"permissionType={b.permission.name})")


def _json(b: AclBinding) -> dict:
    return {"resource_type": b.resource_type.name, "name": b.name, "pattern_type": b.pattern_type.name,
            "principal": b.principal, "host": b.host, "operation": b.operation.name,
            "permission": b.permission.name}


def _print(bindings, as_json: bool, title: str = "Current ACLs for resource") -> None:
    if as_json:
        print(json.dumps([_json(b) for b in bindings]))
        return
    grouped: dict[tuple, list] = {}
    for b in bindings:
        grouped.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for (t, n, p), bs in grouped.items():
        print(f"{title} `ResourcePattern(resourceType={t.name}, name={n}, patternType={p.name})`:")
        for b in bs:
            print(f" \t{_text(b)}")
        print()


def run(args) -> int:
    from kohort.cli.common import admin_client
    if args.action == "add":
        todo = bindings_to_add(args)
    elif args.action == "remove":
        todo = filters_to_remove(args)
    else:
        todo = filters_to_list(args)
    with admin_client(args, admin_keys_only=True) as admin:
        if args.action == "add":
            admin.create_acls(todo, timeout=args.timeout)
            _print(todo, args.json, "Adding ACLs for resource")
        elif args.action == "remove":
            removed = admin.delete_acls(todo, timeout=args.timeout)
            _print(removed, args.json, "Removed ACLs for resource")
            if not removed and not args.json:
                print("no ACL matched")
        else:
            found = []
            for f in todo:
                found += [b for b in admin.describe_acls(f, timeout=args.timeout) if b not in found]
            _print(found, args.json)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("acls", help="manage the broker's ACLs (like kafka-acls.sh)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["add", "list", "remove"])
    many = dict(action="append", default=[])
    p.add_argument("--topic", metavar="NAME", **many)
    p.add_argument("--group", metavar="NAME", **many)
    p.add_argument("--transactional-id", metavar="NAME", **many)
    p.add_argument("--delegation-token", metavar="NAME", **many)
    p.add_argument("--user-principal", metavar="NAME", **many)
    p.add_argument("--cluster", action="store_true", help=f"the cluster resource ({CLUSTER_NAME})")
    p.add_argument("--resource-pattern-type", metavar="TYPE",
                   help="literal (default for add/remove), prefixed, any (default for list), match")
    p.add_argument("--allow-principal", metavar="TYPE:NAME", **many)
    p.add_argument("--deny-principal", metavar="TYPE:NAME", **many)
    p.add_argument("--allow-host", metavar="IP", **many)
    p.add_argument("--deny-host", metavar="IP", **many)
    p.add_argument("--principal", metavar="TYPE:NAME", help="list: only this principal's ACLs")
    p.add_argument("--operation", metavar="OP", **many,
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, All")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs (with --group)")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh compatibility")
    from kohort.cli.common import add_connection_args
    add_connection_args(p)
    p.set_defaults(func=run)
