"""Share-group offsets (KIP-932): DescribeShareGroupOffsets (90) v0-v1 (lag from v1, KIP-1226),
AlterShareGroupOffsets (91) v0 and DeleteShareGroupOffsets (92) v0, answered by the runtime's share
machine (which share-partitions the group has state for; Empty-group checks) and the leader's share
partitions (kohort.broker.share_leader: start offsets, lag, resetting, forgetting).

DescribeShareGroupOffsets: Topics null = every share-partition the group has state for; a partition
without state on the leader is StartOffset -1 (lag -1); an unknown topic is a zero TopicId with
StartOffset -1; an unknown group answers its topics with StartOffset -1. Alter needs an Empty group
(NON_EMPTY_GROUP; a group that does not exist is made) and sets each partition's share state afresh
at its StartOffset; Delete needs an Empty group and forgets whole topics (UNKNOWN_TOPIC_OR_PARTITION
for a topic without state). Authorization: DESCRIBE (90) / READ (91, 92) on the group, DESCRIBE /
READ on each topic (TOPIC_AUTHORIZATION_FAILED for that topic).
"""
from __future__ import annotations

import uuid as _uuid

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.broker.handlers.groups import group_denied
from kohort.broker.handlers.share_groups import unavailable
from kohort.broker.share_leader import leader_of
from kohort.errors import ErrorCode
from kohort.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse,
)
from kohort.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse,
)
from kohort.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
)

ZERO_ID = _uuid.UUID(int=0)


def _topic(storage, name: str):
    return storage.topic(name) if storage.has_topic(name) else None


@handles(DescribeShareGroupOffsetsRequest, "0-1")
async def handle_describe_share_group_offsets(ctx, req: DescribeShareGroupOffsetsRequest):
    R = DescribeShareGroupOffsetsResponse
    G = R.DescribeShareGroupOffsetsResponseGroup
    T = G.DescribeShareGroupOffsetsResponseTopic
    P = T.DescribeShareGroupOffsetsResponsePartition
    rt, err = unavailable(ctx)
    storage = ctx.broker.storage
    groups = []
    for rg in req.groups:
        gid = rg.group_id
        if group_denied(ctx, gid, AclOperation.DESCRIBE):
            groups.append(G(group_id=gid, topics=[], error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if err:
            groups.append(G(group_id=gid, topics=[], error_code=err[0], error_message=err[1]))
            continue
        sg = rt.groups.share_group(gid)
        if rg.topics is None:
            wanted = [] if sg is None else [(name, sorted(ps)) for _, (name, ps) in
                                            sorted(sg.initialized.items(), key=lambda kv: kv[1][0])]
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in rg.topics]
        allowed = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, [n for n, _ in wanted])
        sl = leader_of(ctx.broker)
        topics = []
        for name, parts in wanted:
            info = _topic(storage, name)
            if name not in allowed:
                topics.append(T(topic_name=name, topic_id=ZERO_ID, partitions=[
                    P(partition_index=p, start_offset=-1, leader_epoch=-1,
                      error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in parts]))
                continue
            if info is None:
                topics.append(T(topic_name=name, topic_id=ZERO_ID, partitions=[
                    P(partition_index=p, start_offset=-1, leader_epoch=-1, error_code=0) for p in parts]))
                continue
            ps = []
            for p in parts:
                start, lag = (sl.offset_and_lag(gid, info.topic_id, name, p)
                              if sg is not None and 0 <= p < info.num_partitions else (-1, -1))
                ps.append(P(partition_index=p, start_offset=start, lag=lag,
                            leader_epoch=ctx.broker.leader_epoch if start >= 0 else -1, error_code=0))
            topics.append(T(topic_name=name, topic_id=info.topic_id, partitions=ps))
        groups.append(G(group_id=gid, topics=topics, error_code=0))
    return R(throttle_time_ms=0, groups=groups)


@handles(AlterShareGroupOffsetsRequest, "0")
async def handle_alter_share_group_offsets(ctx, req: AlterShareGroupOffsetsRequest):
    R = AlterShareGroupOffsetsResponse
    T = R.AlterShareGroupOffsetsResponseTopic
    P = T.AlterShareGroupOffsetsResponsePartition
    rt, err = unavailable(ctx)

    def failed(code, message=None):
        return R(throttle_time_ms=0, error_code=int(code), error_message=message, responses=[])
    if group_denied(ctx, req.group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if err:
        return failed(*err)
    storage = ctx.broker.storage
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, [t.topic_name for t in req.topics])
    answers, todo = [], {}
    for t in req.topics:
        info = _topic(storage, t.topic_name)
        errs = {}
        for p in t.partitions:
            if t.topic_name not in allowed:
                errs[p.partition_index] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p.partition_index < info.num_partitions:
                errs[p.partition_index] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p.start_offset < 0:
                errs[p.partition_index] = ErrorCode.INVALID_REQUEST
            else:
                errs[p.partition_index] = ErrorCode.NONE
                name, have = todo.get(info.topic_id, (t.topic_name, {}))
                have[p.partition_index] = p.start_offset
                todo[info.topic_id] = (name, have)
        answers.append((t.topic_name, info.topic_id if info is not None else ZERO_ID, errs))
    if todo:
        code = await rt.share_alter_offsets(req.group_id, {tid: (name, frozenset(ps)) for tid, (name, ps)
                                                           in todo.items()})
        if code:
            return failed(code, "the share group is not empty" if code == ErrorCode.NON_EMPTY_GROUP else None)
        sl = leader_of(ctx.broker)
        for tid, (_, ps) in todo.items():
            for p, off in ps.items():
                sl.reset(req.group_id, tid, p, off)
    return R(throttle_time_ms=0, error_code=0, responses=[
        T(topic_name=name, topic_id=tid, partitions=[P(partition_index=p, error_code=int(e))
                                                     for p, e in errs.items()]) for name, tid, errs in answers])


@handles(DeleteShareGroupOffsetsRequest, "0")
async def handle_delete_share_group_offsets(ctx, req: DeleteShareGroupOffsetsRequest):
    R = DeleteShareGroupOffsetsResponse
    T = R.DeleteShareGroupOffsetsResponseTopic
    rt, err = unavailable(ctx)

    def failed(code, message=None):
        return R(throttle_time_ms=0, error_code=int(code), error_message=message, responses=[])
    if group_denied(ctx, req.group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if err:
        return failed(*err)
    storage = ctx.broker.storage
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, [t.topic_name for t in req.topics])
    known = {}
    answers = []
    for t in req.topics:
        info = _topic(storage, t.topic_name)
        if t.topic_name not in allowed:
            answers.append((t.topic_name, ZERO_ID, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        elif info is None:
            answers.append((t.topic_name, ZERO_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        else:
            known[info.topic_id] = t.topic_name
            answers.append((t.topic_name, info.topic_id, None))
    code, errors = await rt.share_delete_offsets(req.group_id, list(known))
    if code:
        return failed(code)
    sl = leader_of(ctx.broker)
    for tid, e in errors.items():
        if e == ErrorCode.NONE:
            sl.forget(req.group_id, tid)
    return R(throttle_time_ms=0, error_code=0, responses=[
        T(topic_name=name, topic_id=tid, error_code=int(e if e is not None else errors.get(tid, 0)))
        for name, tid, e in answers])
