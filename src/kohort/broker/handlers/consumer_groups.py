"""KIP-848 consumer-protocol group APIs, answered by the runtime's ConsumerGroups machine
(kohort.broker.coordinator.consumer_group): ConsumerGroupHeartbeat (68) v0-v1 and
ConsumerGroupDescribe (69) v0-v1.

Topic ids on the wire are mapped to names for the coordinator (which keys topics by name) and back;
an owned partition of a topic id this broker does not know is dropped from TopicPartitions. When
`group.coordinator.rebalance.protocols` lacks "consumer", both APIs answer UNSUPPORTED_VERSION, as
Kafka does (they stay advertised). ConsumerGroupDescribe reports groups that are not consumer groups
(unknown or classic) as GROUP_ID_NOT_FOUND per entry; authorized_operations (KIP-430) when asked.
Authorization (Kafka 4's): the heartbeat needs READ on the group (GROUP_AUTHORIZATION_FAILED) and
DESCRIBE on every subscribed topic name (TOPIC_AUTHORIZATION_FAILED); a regex subscription is not
filtered by ACLs (Kafka 4 filters it). ConsumerGroupDescribe needs DESCRIBE on each group, and a group
whose members' (target) assignments name a topic the principal may not DESCRIBE is answered
TOPIC_AUTHORIZATION_FAILED without its details (KAFKA-18813, Kafka 4.0).
"""
from __future__ import annotations

from kohort.broker.coordinator.consumer_group import ConsumerHeartbeatParams
from kohort.broker.handlers import handles
from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.coordinator.machine import GroupType
from kohort.broker.handlers.groups import client_host, group_denied, runtime
from kohort.errors import ErrorCode
from kohort.storage import StorageError
from kohort.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
)
from kohort.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
)

HB = ConsumerGroupHeartbeatResponse


def _owned_by_name(storage, tps):
    if tps is None:
        return None
    owned: dict[str, frozenset[int]] = {}
    for tp in tps:
        try:
            name = storage.topic_name(tp.topic_id)
        except StorageError:      # an unknown or deleted topic id: not owned any more
            continue
        owned[name] = owned.get(name, frozenset()) | frozenset(tp.partitions)
    return owned


def _by_id(storage, assignment, cls, with_name=False):
    out = []
    for name in sorted(assignment):
        if not storage.has_topic(name) or not assignment[name]:
            continue
        kw = dict(topic_id=storage.topic(name).topic_id, partitions=sorted(assignment[name]))
        if with_name:
            kw["topic_name"] = name
        out.append(cls(**kw))
    return out


def _error(code: int, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
    return HB(throttle_time_ms=0, error_code=code, error_message=message, member_id=None, member_epoch=-1,
              heartbeat_interval_ms=0, assignment=None)


def _unavailable(ctx):
    rt = runtime(ctx)
    if rt is None:
        return rt, (ErrorCode.COORDINATOR_NOT_AVAILABLE, "no group coordinator on this broker")
    if not rt.groups.serves(GroupType.CONSUMER):
        return rt, (ErrorCode.UNSUPPORTED_VERSION, "the consumer group protocol is not enabled "
                    "(group.coordinator.rebalance.protocols)")
    phase = rt.groups.phase
    if phase == "loading":
        return rt, (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None)
    if phase != "active":
        return rt, (ErrorCode.NOT_COORDINATOR, None)
    return rt, None


@handles(ConsumerGroupHeartbeatRequest, "0-1")
async def handle_consumer_group_heartbeat(ctx, req: ConsumerGroupHeartbeatRequest):
    rt, err = _unavailable(ctx)
    if group_denied(ctx, req.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    names = req.subscribed_topic_names or ()
    hidden = set(names) - ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    if hidden:
        return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                      f"The client is not authorized to describe topics: {', '.join(sorted(hidden))}")
    if err:
        return _error(*err)
    storage = ctx.broker.storage
    v = ctx.api_version
    p = ConsumerHeartbeatParams(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names),
        subscribed_topic_regex=req.subscribed_topic_regex if v >= 1 else None,
        server_assignor=req.server_assignor, owned=_owned_by_name(storage, req.topic_partitions),
        client_id=ctx.client_id or "", client_host=client_host(ctx), api_version=v)
    res = await rt.consumer_group_heartbeat(p)
    assignment = None
    if res.assignment is not None:
        assignment = HB.Assignment(topic_partitions=_by_id(storage, res.assignment,
                                                           HB.Assignment.TopicPartitions))
    return HB(throttle_time_ms=0, error_code=res.error_code, error_message=res.error_message,
              member_id=res.member_id, member_epoch=res.member_epoch,
              heartbeat_interval_ms=res.heartbeat_interval_ms, assignment=assignment)


@handles(ConsumerGroupDescribeRequest, "0-1")
async def handle_consumer_group_describe(ctx, req: ConsumerGroupDescribeRequest):
    R = ConsumerGroupDescribeResponse
    DG = R.DescribedGroup
    M = DG.Member
    A = M.Assignment
    rt, err = _unavailable(ctx)
    groups = []
    storage = ctx.broker.storage
    for gid in req.group_ids:
        base = dict(group_id=gid, group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                    members=[])
        if group_denied(ctx, gid, AclOperation.DESCRIBE):
            groups.append(DG(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None, **base))
            continue
        if err:
            groups.append(DG(error_code=err[0], error_message=err[1], **base))
            continue
        g = rt.groups.consumer_group(gid)
        if g is None:
            msg = (f"Group {gid} is not a consumer group." if rt.groups.classic_group(gid) is not None
                   else f"Group {gid} not found.")
            groups.append(DG(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=msg, **base))
            continue
        members = []
        for m in g.members.values():
            asg = A(topic_partitions=_by_id(storage, m.assigned, A.TopicPartitions, True))
            tgt = A(topic_partitions=_by_id(storage, g.target.get(m.member_id, {}), A.TopicPartitions, True))
            members.append(M(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                             member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                             subscribed_topic_names=list(m.subscribed_topic_names),
                             subscribed_topic_regex=m.subscribed_topic_regex, assignment=asg,
                             target_assignment=tgt, member_type=0 if m.classic is not None else 1))
        topics = {tp.topic_name for m in members for a in (m.assignment, m.target_assignment)
                  for tp in a.topic_partitions}
        hidden = topics - ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, topics)
        if hidden:
            groups.append(DG(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=(
                f"The described group uses topics that the client is not authorized to describe: "
                f"{sorted(hidden)}"), **base))
            continue
        groups.append(DG(error_code=ErrorCode.NONE, error_message=None, group_id=gid,
                         group_state=g.state.value, group_epoch=g.group_epoch,
                         assignment_epoch=g.assignment_epoch,
                         assignor_name=rt.groups.assignor_name(gid), members=members,
                         authorized_operations=ctx.authorized_operations(ResourceType.GROUP, gid,
                                                                         req.include_authorized_operations)))
    return R(throttle_time_ms=0, groups=groups)
