"""Share-group membership APIs (KIP-932), answered by the runtime's ShareGroups machine
(kohort.broker.share.machine): ShareGroupHeartbeat (76) v1 and ShareGroupDescribe (77) v1.

Both stay advertised when the broker's `share.version` feature is 0 and then answer
UNSUPPORTED_VERSION, as Kafka does. Authorization as Kafka checks it: the heartbeat needs READ on the
group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every subscribed topic (TOPIC_AUTHORIZATION_FAILED);
ShareGroupDescribe needs DESCRIBE on each group; authorized_operations (KIP-430) when asked.
"""
from __future__ import annotations

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.coordinator.machine import GroupType
from kohort.broker.handlers import handles
from kohort.broker.handlers.groups import client_host, group_denied, runtime
from kohort.errors import ErrorCode
from kohort.protocol.messages.share_group_describe import ShareGroupDescribeRequest, ShareGroupDescribeResponse
from kohort.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse


def unavailable(ctx) -> tuple[object, tuple[int, str | None] | None]:
    """(runtime, None) when share groups are served now; else (runtime, (error code, message))."""
    rt = runtime(ctx)
    if rt is None:
        return rt, (ErrorCode.COORDINATOR_NOT_AVAILABLE, "no group coordinator on this broker")
    if not rt.groups.serves(GroupType.SHARE):
        return rt, (ErrorCode.UNSUPPORTED_VERSION, "share groups are not enabled (share.version is 0)")
    phase = rt.groups.phase
    if phase == "loading":
        return rt, (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None)
    if phase != "active":
        return rt, (ErrorCode.NOT_COORDINATOR, None)
    return rt, None


def _error(code: int, message: str | None = None) -> ShareGroupHeartbeatResponse:
    return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=int(code), error_message=message,
                                       member_id=None, member_epoch=-1, heartbeat_interval_ms=0)


@handles(ShareGroupHeartbeatRequest, "1")
async def handle_share_group_heartbeat(ctx, req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    rt, err = unavailable(ctx)
    if err and err[0] == ErrorCode.UNSUPPORTED_VERSION:
        return _error(*err)
    if group_denied(ctx, req.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    names = req.subscribed_topic_names or ()
    hidden = set(names) - ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    if hidden:
        return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                      f"The client is not authorized to describe topics: {', '.join(sorted(hidden))}")
    if err:
        return _error(*err)
    res = await rt.share_group_heartbeat(req, ctx.client_id or "", client_host(ctx))
    res.throttle_time_ms = 0
    return res


@handles(ShareGroupDescribeRequest, "1")
async def handle_share_group_describe(ctx, req: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    DG = ShareGroupDescribeResponse.DescribedGroup
    rt, err = unavailable(ctx)
    allowed, denied = [], {}
    for gid in req.group_ids:
        if group_denied(ctx, gid, AclOperation.DESCRIBE):
            denied[gid] = DG(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid, group_state="",
                             group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[])
        elif err:
            denied[gid] = DG(error_code=err[0], error_message=err[1], group_id=gid, group_state="",
                             group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[])
        else:
            allowed.append(gid)
    described = {d.group_id: d for d in (await rt.share_group_describe(allowed) if allowed else [])}
    groups = []
    for gid in req.group_ids:
        d = denied.get(gid) or described[gid]
        if not d.error_code:
            d.authorized_operations = ctx.authorized_operations(ResourceType.GROUP, gid,
                                                                req.include_authorized_operations)
        groups.append(d)
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=groups)
