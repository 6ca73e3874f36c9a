"""Group administration, answered by the group coordinator runtime: DescribeGroups (15) v0-v6,
ListGroups (16) v0-v5, DeleteGroups (42) v0-v2.

DescribeGroups v6 reports an unknown group as GROUP_ID_NOT_FOUND with a message (KIP-1043); older
versions describe it as a "Dead" group with no error; authorized_operations (v3+, KIP-430) when asked.
ListGroups filters by state (v4+, KIP-518) and by type (v5+, KIP-848).
Authorization (Kafka's): DescribeGroups needs DESCRIBE on each group, DeleteGroups DELETE, else
GROUP_AUTHORIZATION_FAILED for that group; ListGroups lists every group for DESCRIBE on the cluster,
otherwise only the groups the principal may DESCRIBE (never an error).
KIP-848 consumer groups are listed (by the runtime, over every machine) with type and protocol type
"consumer" and their state (Empty, Assigning, Reconciling, Stable; an Empty one with only offsets left
too), simple groups (made by a commit without a generation) as classic groups with no protocol type.
DescribeGroups answers a consumer group
as Kafka does for a group that is not classic: GROUP_ID_NOT_FOUND (v6) or Dead (v0-v5); use
ConsumerGroupDescribe (a share group the same way). DeleteGroups deletes an empty consumer or share group
(NON_EMPTY_GROUP otherwise).
"""
from __future__ import annotations

from kohort.broker.coordinator.machine import GroupType
from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.broker.handlers.groups import runtime
from kohort.errors import ErrorCode
from kohort.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from kohort.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from kohort.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse

DG = DescribeGroupsResponse.DescribedGroup
DM = DG.DescribedGroupMember


@handles(DescribeGroupsRequest, "0-6")
async def handle_describe_groups(ctx, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    v = ctx.api_version
    rt = runtime(ctx)
    if rt is None:
        return DescribeGroupsResponse(throttle_time_ms=0, groups=[
            DG(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, group_id=g, group_state="", protocol_type="",
               protocol_data="", members=[]) for g in req.groups])
    allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, req.groups)
    res = await rt.describe_groups([g for g in req.groups if g in allowed], api_version=v)
    described = {g.group_id: g for g in res.groups}
    groups = []
    for gid in req.groups:
        g = described.get(gid)
        if g is None:       # not authorized (in the request's order, like the others)
            groups.append(DG(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid, group_state="",
                             protocol_type="", protocol_data="", members=[]))
            continue
        msg = None
        gtype = rt.groups.type_of(g.group_id)
        if gtype in (GroupType.SHARE, GroupType.CONSUMER) and g.error_code in (ErrorCode.NONE,
                                                                             ErrorCode.GROUP_ID_NOT_FOUND):
            groups.append(DG(error_code=ErrorCode.GROUP_ID_NOT_FOUND if v >= 6 else ErrorCode.NONE,
                             error_message=f"Group {g.group_id} is not a classic group." if v >= 6 else None,
                             group_id=g.group_id, group_state="Dead", protocol_type="", protocol_data="",
                             members=[]))
            continue
        if v >= 6 and g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            msg = f"Group {g.group_id} not found."
        groups.append(DG(
            error_code=g.error_code, error_message=msg, group_id=g.group_id, group_state=g.group_state,
            protocol_type=g.protocol_type, protocol_data=g.protocol_data,
            members=[DM(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                        client_host=m.client_host, member_metadata=m.member_metadata,
                        member_assignment=m.member_assignment) for m in g.members],
            authorized_operations=ctx.authorized_operations(
                ResourceType.GROUP, g.group_id, v >= 3 and req.include_authorized_operations and not g.error_code)))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=groups)


@handles(ListGroupsRequest, "0-5")
async def handle_list_groups(ctx, req: ListGroupsRequest) -> ListGroupsResponse:
    v = ctx.api_version
    rt = runtime(ctx)
    if rt is None:
        return ListGroupsResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=[])
    res = await rt.list_groups(states_filter=tuple(req.states_filter or ()) if v >= 4 else (),
                               types_filter=tuple(req.types_filter or ()) if v >= 5 else ())
    LG = ListGroupsResponse.ListedGroup
    listed = list(res.groups)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in listed))
        listed = [g for g in listed if g.group_id in visible]
    return ListGroupsResponse(throttle_time_ms=0, error_code=res.error_code, groups=[
        LG(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.group_state,
           group_type=g.group_type) for g in listed])


@handles(DeleteGroupsRequest, "0-2")
async def handle_delete_groups(ctx, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
    rt = runtime(ctx)
    R = DeleteGroupsResponse.DeletableGroupResult
    if rt is None:
        return DeleteGroupsResponse(throttle_time_ms=0, results=[
            R(group_id=g, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in req.groups_names])
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, req.groups_names)
    names = [g for g in req.groups_names if g in deletable]
    results = dict((await rt.delete_groups(names)).results)
    return DeleteGroupsResponse(throttle_time_ms=0, results=[
        R(group_id=g, error_code=results[g] if g in deletable else ErrorCode.GROUP_AUTHORIZATION_FAILED)
        for g in req.groups_names])
