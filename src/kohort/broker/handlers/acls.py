"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v1-v3 as Kafka 4 serves them (KIP-896 dropped v0).

Authorization: DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER, else
CLUSTER_AUTHORIZATION_FAILED (top level, or on every result). Without an authorizer each answers
SECURITY_DISABLED. A binding Kafka refuses (resource type ANY/UNKNOWN, pattern not LITERAL/PREFIXED,
operation ANY/UNKNOWN, permission not ALLOW/DENY, empty name, a cluster not named kafka-cluster,
a principal without `Type:`) is INVALID_REQUEST for that entry; creating an existing binding succeeds.
Changes are written to `<data dir>/acls.json` (fsynced) before the answer; a failed write undoes them.
"""
from __future__ import annotations

import logging

from kohort.broker.authorizer import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, InvalidAclError, PatternType, ResourceType,
)
from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from kohort.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from kohort.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse

log = logging.getLogger("kohort.broker")
DISABLED = "No Authorizer is configured on the broker"
DENIED = "Cluster authorization failed."


def _enum(cls, v: int):
    try:
        return cls(v)
    except ValueError:
        return cls(0)       # UNKNOWN: refused by validate()


def _filter(req) -> AclBindingFilter:
    return AclBindingFilter(_enum(ResourceType, req.resource_type_filter), req.resource_name_filter,
                            _enum(PatternType, req.pattern_type_filter), req.principal_filter, req.host_filter,
                            _enum(AclOperation, req.operation), _enum(AclPermissionType, req.permission_type))


def _persist(ctx, undo) -> str | None:
    """Write the ACLs; on failure undo the in-memory change and return the error text."""
    try:
        ctx.broker.acls.save()
        return None
    except OSError as e:
        undo()
        log.error("could not write the ACLs: %s", e)
        return f"could not store the ACLs: {e}"


@handles(DescribeAclsRequest, "1-3")
def handle_describe_acls(ctx, req):
    def answer(code, msg=None, resources=()):
        return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=msg,
                                    resources=list(resources))
    if ctx.broker.acls is None:
        return answer(ErrorCode.SECURITY_DISABLED, DISABLED)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, DENIED)
    flt = _filter(req)
    try:
        flt.validate()
    except InvalidAclError as e:
        return answer(ErrorCode.INVALID_REQUEST, str(e))
    R = DescribeAclsResponse.DescribeAclsResource
    A = R.AclDescription
    grouped: dict[tuple, list] = {}
    for b in ctx.broker.acls.authorizer.describe(flt):
        grouped.setdefault((b.resource_type, b.name, b.pattern_type), []).append(
            A(principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission))
    return answer(ErrorCode.NONE, None, [R(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
                                         for (t, n, p), acls in grouped.items()])


@handles(CreateAclsRequest, "1-3")
def handle_create_acls(ctx, req):
    R = CreateAclsResponse.AclCreationResult
    store = ctx.broker.acls
    if store is None or not ctx.authorize_cluster(AclOperation.ALTER):
        code, msg = ((ErrorCode.SECURITY_DISABLED, DISABLED) if store is None
                     else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, DENIED))
        return CreateAclsResponse(throttle_time_ms=0, results=[R(error_code=code, error_message=msg)
                                                               for _ in req.creations])
    results, added = [], []
    for c in req.creations:
        b = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                       _enum(PatternType, c.resource_pattern_type), c.principal, c.host,
                       _enum(AclOperation, c.operation), _enum(AclPermissionType, c.permission_type))
        try:
            b.validate()
        except InvalidAclError as e:
            results.append(R(error_code=ErrorCode.INVALID_REQUEST, error_message=str(e)))
            continue
        if store.authorizer.add(b):
            added.append(b)
        results.append(R(error_code=ErrorCode.NONE, error_message=None))
    if added:
        err = _persist(ctx, lambda: [store.authorizer.remove(AclBindingFilter(
            b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation, b.permission))
            for b in added])
        if err:
            for r in results:
                if r.error_code == ErrorCode.NONE:
                    r.error_code, r.error_message = ErrorCode.UNKNOWN_SERVER_ERROR, err
    return CreateAclsResponse(throttle_time_ms=0, results=results)


@handles(DeleteAclsRequest, "1-3")
def handle_delete_acls(ctx, req):
    FR = DeleteAclsResponse.DeleteAclsFilterResult
    M = FR.DeleteAclsMatchingAcl
    store = ctx.broker.acls
    if store is None or not ctx.authorize_cluster(AclOperation.ALTER):
        code, msg = ((ErrorCode.SECURITY_DISABLED, DISABLED) if store is None
                     else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, DENIED))
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            FR(error_code=code, error_message=msg, matching_acls=[]) for _ in req.filters])
    results, removed = [], []
    for f in req.filters:
        flt = _filter(f)
        try:
            flt.validate()
        except InvalidAclError as e:
            results.append(FR(error_code=ErrorCode.INVALID_REQUEST, error_message=str(e), matching_acls=[]))
            continue
        gone = store.authorizer.remove(flt)
        removed.extend(gone)
        results.append(FR(error_code=ErrorCode.NONE, error_message=None, matching_acls=[
            M(error_code=0, error_message=None, resource_type=b.resource_type, resource_name=b.name,
              pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
              permission_type=b.permission) for b in gone]))
    if removed:
        err = _persist(ctx, lambda: [store.authorizer.add(b) for b in removed])
        if err:
            for r in results:
                if r.error_code == ErrorCode.NONE:
                    r.error_code, r.error_message, r.matching_acls = ErrorCode.UNKNOWN_SERVER_ERROR, err, []
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
