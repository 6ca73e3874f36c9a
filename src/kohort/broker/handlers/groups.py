"""Group membership APIs, answered by the group coordinator runtime (`broker.coordinator`,
kohort.broker.coordinator_runtime): FindCoordinator (10) v0-v6, JoinGroup (11) v0-v9, SyncGroup (14)
v0-v5, Heartbeat (12) v0-v4, LeaveGroup (13) v0-v5.

FindCoordinator: this node coordinates every group and transactional id (key_type 0 and 1); v4+
answers each of the batched `coordinator_keys` (KIP-699). Other key types get INVALID_REQUEST.
JoinGroup v0 has no rebalance timeout (the session timeout is used); v4+ gets MEMBER_ID_REQUIRED for
an unknown member (KIP-394); protocol_name is nullable from v7 ("" before). The runtime sends
JoinGroup, SyncGroup, Heartbeat and LeaveGroup to the group's owner (`runtime.groups.owner`): a KIP-848
consumer group's machine answers its classic members (kohort.broker.coordinator.classic_members), and
a JoinGroup for an empty consumer group deletes it first (Kafka converts empty groups). LeaveGroup
v0-v2 carry one member_id and report its error at the top level; v3+ batch members (KIP-345).

Authorization (Kafka's): FindCoordinator needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or
the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key from v4; JoinGroup, SyncGroup,
Heartbeat and LeaveGroup READ on the group, else GROUP_AUTHORIZATION_FAILED before anything else.
"""
from __future__ import annotations

from kohort.broker.coordinator.model import (
    HeartbeatParams, JoinParams, LeaveMember, LeaveParams, SyncParams,
)
from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.find_coordinator import (
    KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, FindCoordinatorRequest, FindCoordinatorResponse,
)
from kohort.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from kohort.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from kohort.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from kohort.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse


def runtime(ctx):
    """The coordinator runtime, or None when this broker runs without one."""
    return getattr(ctx.broker, "coordinator", None)


def group_denied(ctx, group_id: str, op: AclOperation = AclOperation.READ) -> int:
    """GROUP_AUTHORIZATION_FAILED unless the principal may do `op` on the group, else NONE."""
    return ErrorCode.NONE if ctx.authorize(op, ResourceType.GROUP, group_id) else ErrorCode.GROUP_AUTHORIZATION_FAILED


def client_host(ctx) -> str:
    return "/" + (ctx.client_host or "")      # Kafka's InetAddress.toString() form


# -- FindCoordinator -----------------------------------------------------------------------------
@handles(FindCoordinatorRequest, "0-6")
def handle_find_coordinator(ctx, req: FindCoordinatorRequest) -> FindCoordinatorResponse:
    b, v = ctx.broker, ctx.api_version
    key_type = req.key_type if v >= 1 else KEY_TYPE_GROUP

    # every key gets the same answer: this node coordinates all groups and transactional ids
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        where = dict(error_code=ErrorCode.INVALID_REQUEST, error_message=f"unsupported key type {key_type}")
    elif key_type == KEY_TYPE_GROUP and runtime(ctx) is None:
        where = dict(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     error_message="no group coordinator on this broker")
    else:
        where = dict(error_code=ErrorCode.NONE, error_message=None, node_id=b.node_id, host=ctx.advertised()[0],
                     port=ctx.advertised()[1])
    if where["error_code"]:
        where.update(node_id=-1, host="", port=-1)
    if v >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            FindCoordinatorResponse.Coordinator(key=key, **_find_denied(ctx, key_type, key, where))
            for key in req.coordinator_keys])
    return FindCoordinatorResponse(throttle_time_ms=0, **_find_denied(ctx, key_type, req.key, where))


def _find_denied(ctx, key_type: int, key: str, where: dict) -> dict:
    """`where`, or the authorization error when the principal may not DESCRIBE the key."""
    if key_type == KEY_TYPE_GROUP and group_denied(ctx, key, AclOperation.DESCRIBE):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif key_type == KEY_TYPE_TRANSACTION and not ctx.authorize(AclOperation.DESCRIBE,
                                                                ResourceType.TRANSACTIONAL_ID, key):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        return where
    return dict(error_code=code, error_message=None, node_id=-1, host="", port=-1)


# -- JoinGroup -----------------------------------------------------------------------------------
def _join_response(v: int, res) -> JoinGroupResponse:
    name = res.protocol_name if v >= 7 else (res.protocol_name or "")
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=res.error_code, generation_id=res.generation_id,
        protocol_type=res.protocol_type, protocol_name=name, leader=res.leader,
        skip_assignment=res.skip_assignment, member_id=res.member_id,
        members=[JoinGroupResponse.Member(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                          metadata=m.metadata) for m in res.members])


@handles(JoinGroupRequest, "0-9")
async def handle_join_group(ctx, req: JoinGroupRequest) -> JoinGroupResponse:
    v = ctx.api_version
    rt = runtime(ctx)
    if group_denied(ctx, req.group_id):
        return JoinGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                 generation_id=-1, protocol_name=None if v >= 7 else "", leader="",
                                 member_id=req.member_id, members=[])
    if rt is None:
        return JoinGroupResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 generation_id=-1, protocol_name=None if v >= 7 else "", leader="",
                                 member_id=req.member_id, members=[])
    p = JoinParams(
        group_id=req.group_id, member_id=req.member_id,
        group_instance_id=req.group_instance_id if v >= 5 else None,
        client_id=ctx.client_id or "", client_host=client_host(ctx),
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms if v >= 1 else -1,
        protocol_type=req.protocol_type,
        protocols=tuple((pr.name, bytes(pr.metadata)) for pr in req.protocols),
        reason=req.reason if v >= 8 else None, api_version=v)
    return _join_response(v, await rt.join_group(p))


# -- SyncGroup -----------------------------------------------------------------------------------
@handles(SyncGroupRequest, "0-5")
async def handle_sync_group(ctx, req: SyncGroupRequest) -> SyncGroupResponse:
    v = ctx.api_version
    rt = runtime(ctx)
    if group_denied(ctx, req.group_id):
        return SyncGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    if rt is None:
        return SyncGroupResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 assignment=b"")
    p = SyncParams(
        group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
        group_instance_id=req.group_instance_id if v >= 3 else None,
        protocol_type=req.protocol_type if v >= 5 else None,
        protocol_name=req.protocol_name if v >= 5 else None,
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments), api_version=v)
    res = await rt.sync_group(p)
    return SyncGroupResponse(throttle_time_ms=0, error_code=res.error_code, protocol_type=res.protocol_type,
                             protocol_name=res.protocol_name, assignment=res.assignment)


# -- Heartbeat -----------------------------------------------------------------------------------
@handles(HeartbeatRequest, "0-4")
async def handle_heartbeat(ctx, req: HeartbeatRequest) -> HeartbeatResponse:
    rt = runtime(ctx)
    if group_denied(ctx, req.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if rt is None:
        return HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    p = HeartbeatParams(req.group_id, req.generation_id, req.member_id,
                        req.group_instance_id if ctx.api_version >= 3 else None)
    res = await rt.heartbeat(p)
    return HeartbeatResponse(throttle_time_ms=0, error_code=res.error_code)


# -- LeaveGroup ----------------------------------------------------------------------------------
@handles(LeaveGroupRequest, "0-5")
async def handle_leave_group(ctx, req: LeaveGroupRequest) -> LeaveGroupResponse:
    v = ctx.api_version
    rt = runtime(ctx)
    if group_denied(ctx, req.group_id):
        return LeaveGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    if rt is None:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                  members=[])
    if v >= 3:
        members = tuple(LeaveMember(m.member_id, m.group_instance_id, m.reason if v >= 5 else None)
                        for m in req.members)
    else:
        members = (LeaveMember(req.member_id),)
    res = await rt.leave_group(LeaveParams(req.group_id, members))
    if v < 3:
        code = res.error_code or (res.members[0].error_code if res.members else ErrorCode.NONE)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    return LeaveGroupResponse(
        throttle_time_ms=0, error_code=res.error_code,
        members=[LeaveGroupResponse.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                                   error_code=m.error_code) for m in res.members])
