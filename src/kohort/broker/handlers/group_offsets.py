"""Committed offsets, answered by the group coordinator runtime: OffsetCommit (8) v2-v9, OffsetFetch
(9) v1-v9, OffsetDelete (47) v0, TxnOffsetCommit (28) v0-v5.

OffsetCommit: Kafka 4 serves v2-v9 (KIP-896 dropped v0/v1); retention_time_ms only in v2-v4;
partitions of topics this broker does not have get UNKNOWN_TOPIC_OR_PARTITION (as Kafka's request
layer does), the rest go to the coordinator and are answered once stored and fsynced.
OffsetFetch: v1-v7 ask for one group (a null topic list, v2+, means every committed offset); v8+ ask
for several groups at once (KIP-709); v1 has no top-level error, so a group error is reported on every
requested partition. With require_stable (v7+) a partition with pending transactional offsets answers
UNSTABLE_OFFSET_COMMIT (KIP-447).
TxnOffsetCommit (v0-v5; v5 is transactions v2 and adds the group's `__consumer_offsets` partition to
the transaction itself, as AddOffsetsToTxn would): unknown partitions get UNKNOWN_TOPIC_OR_PARTITION;
then the transaction coordinator verifies that the group's `__consumer_offsets` partition is in the
producer's Ongoing transaction at its epoch (KIP-890 part 1 as Kafka's verification:
INVALID_TXN_STATE, TRANSACTION_ABORTABLE from v4, or INVALID_PRODUCER_EPOCH for a fenced producer;
CONCURRENT_TRANSACTIONS while the previous transaction completes), so no offset of a finished or
fenced transaction is ever held pending; then the group's machine checks (KIP-447, v3+ carry
generation/member/instance; a KIP-848 consumer group checks member and epoch, a stale epoch being
ILLEGAL_GENERATION) and the offsets are held pending until the transaction's marker.

Authorization (Kafka's): OffsetCommit needs READ on the group (else GROUP_AUTHORIZATION_FAILED on every
partition) and READ on each topic (else TOPIC_AUTHORIZATION_FAILED, checked before existence);
OffsetFetch DESCRIBE on the group (group-level GROUP_AUTHORIZATION_FAILED) and on each named topic
(TOPIC_AUTHORIZATION_FAILED, offset -1; an all-topics fetch leaves such topics out); OffsetDelete DELETE
on the group and READ on each topic; TxnOffsetCommit WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (GROUP_AUTHORIZATION_FAILED) and READ on each
topic (TOPIC_AUTHORIZATION_FAILED), on every partition / per topic as Kafka.
"""
from __future__ import annotations

import asyncio
import dataclasses

from kohort.broker.coordinator.model import (
    CommitPartition, FetchedPartition, OffsetCommitParams, OffsetCommitResult, OffsetDeleteParams,
    OffsetFetchParams, OffsetFetchResult, TxnOffsetCommitParams,
)
from kohort.broker.handlers import handles
from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers.groups import group_denied, runtime
from kohort.errors import ErrorCode
from kohort.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from kohort.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from kohort.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse

CTopic = OffsetCommitResponse.Topic
CPart = CTopic.Partition


def _partition_exists(broker, topic: str, partition: int) -> bool:
    storage = broker.storage
    return storage.has_topic(topic) and 0 <= partition < storage.topic(topic).num_partitions


def _split_known(broker, topics, convert):
    """The requested partitions split into those this broker has, `[(topic, (convert(p), ...))]` for
    the coordinator, and the others, `{topic: [partition_index]}`."""
    known: list[tuple[str, tuple]] = []
    unknown: dict[str, list[int]] = {}
    for t in topics:
        parts = []
        for p in t.partitions:
            if _partition_exists(broker, t.name, p.partition_index):
                parts.append(convert(p))
            else:
                unknown.setdefault(t.name, []).append(p.partition_index)
        if parts:
            known.append((t.name, tuple(parts)))
    return known, unknown


def _split_authorized(ctx, op: AclOperation, topics) -> tuple[list, dict[str, list[int]]]:
    """The request's topics the principal may `op`, and the others as `{topic: [partition_index]}`."""
    ok = ctx.authorized(op, ResourceType.TOPIC, (t.name for t in topics))
    denied: dict[str, list[int]] = {}
    for t in topics:
        if t.name not in ok:
            denied.setdefault(t.name, []).extend(p.partition_index for p in t.partitions)
    return [t for t in topics if t.name in ok], denied


def _add_unknown(results: dict, unknown: dict, partition_cls, code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) -> None:
    """Append a `code` (UNKNOWN_TOPIC_OR_PARTITION) answer to `results` for every partition in `unknown`."""
    for name, idxs in unknown.items():
        results.setdefault(name, []).extend(partition_cls(partition_index=i, error_code=code) for i in idxs)


# -- OffsetCommit --------------------------------------------------------------------------------
@handles(OffsetCommitRequest, "2-9")
async def handle_offset_commit(ctx, req: OffsetCommitRequest) -> OffsetCommitResponse:
    v, b = ctx.api_version, ctx.broker
    rt = runtime(ctx)
    if group_denied(ctx, req.group_id):
        return OffsetCommitResponse(throttle_time_ms=0, topics=[CTopic(name=t.name, partitions=[
            CPart(partition_index=p.partition_index, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
            for p in t.partitions]) for t in req.topics])
    topics, denied = _split_authorized(ctx, AclOperation.READ, req.topics)
    known, unknown = _split_known(b, topics, lambda p: CommitPartition(
        p.partition_index, p.committed_offset, p.committed_leader_epoch if v >= 6 else -1, p.committed_metadata))
    results: dict[str, list[CPart]] = {}
    if known:
        if rt is None:
            for name, parts in known:
                results.setdefault(name, []).extend(
                    CPart(partition_index=p.partition_index, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
                    for p in parts)
        else:
            params = OffsetCommitParams(
                group_id=req.group_id, topics=tuple(known),
                generation_id=req.generation_id_or_member_epoch, member_id=req.member_id,
                group_instance_id=req.group_instance_id if v >= 7 else None,
                retention_time_ms=req.retention_time_ms if v <= 4 else -1, api_version=v)
            res = await rt.offset_commit(params)
            for name, prs in res.topics:
                results.setdefault(name, []).extend(
                    CPart(partition_index=pr.partition_index, error_code=pr.error_code) for pr in prs)
    _add_unknown(results, unknown, CPart)
    _add_unknown(results, denied, CPart, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return OffsetCommitResponse(throttle_time_ms=0,
                                topics=[CTopic(name=n, partitions=ps) for n, ps in results.items()])


# -- OffsetFetch ---------------------------------------------------------------------------------
async def _fetch_group(rt, group_id: str, topics, require_stable: bool, member_id: str | None = None,
                       member_epoch: int = -1) -> OffsetFetchResult:
    if rt is None:
        return OffsetFetchResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    tps = None if topics is None else tuple((t.name, tuple(t.partition_indexes)) for t in topics)
    return await rt.offset_fetch(OffsetFetchParams(group_id, tps, require_stable), member_id, member_epoch)


async def _fetch_authorized(ctx, rt, group_id: str, topics, require_stable: bool, member_id: str | None = None,
                            member_epoch: int = -1) -> OffsetFetchResult:
    """_fetch_group with Kafka's checks: DESCRIBE on the group, then on each topic."""
    if group_denied(ctx, group_id, AclOperation.DESCRIBE):
        return OffsetFetchResult(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    denied: dict[str, list[int]] = {}
    if topics is not None:
        ok = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics))
        denied = {t.name: list(t.partition_indexes) for t in topics if t.name not in ok}
        topics = [t for t in topics if t.name in ok]
    res = await _fetch_group(rt, group_id, topics, require_stable, member_id, member_epoch)
    if res.error_code:
        return res
    if topics is None:      # all committed offsets: silently without the topics it may not describe
        ok = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (n for n, _ in res.topics))
        return dataclasses.replace(res, topics=tuple((n, ps) for n, ps in res.topics if n in ok))
    return dataclasses.replace(res, topics=res.topics + tuple(
        (n, tuple(FetchedPartition(i, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for i in idxs))
        for n, idxs in denied.items()))


def _fetched_topics(res: OffsetFetchResult, topic_cls, partition_cls) -> list:
    """The coordinator's committed offsets as response topics (v8+ and older use different classes)."""
    return [topic_cls(name=name, partitions=[
        partition_cls(partition_index=fp.partition_index, committed_offset=fp.committed_offset,
                      committed_leader_epoch=fp.committed_leader_epoch, metadata=fp.metadata,
                      error_code=fp.error_code) for fp in fps]) for name, fps in res.topics]


@handles(OffsetFetchRequest, "1-9")
async def handle_offset_fetch(ctx, req: OffsetFetchRequest) -> OffsetFetchResponse:
    v = ctx.api_version
    rt = runtime(ctx)
    stable = bool(req.require_stable) if v >= 7 else False
    if v >= 8:
        results = await asyncio.gather(*(
            _fetch_authorized(ctx, rt, g.group_id, g.topics, stable, g.member_id if v >= 9 else None,
                         g.member_epoch if v >= 9 else -1) for g in req.groups))
        G = OffsetFetchResponse.Group
        T, P = G.Topics, G.Topics.Partitions
        groups = []
        for g, res in zip(req.groups, results):
            topics = [] if res.error_code else _fetched_topics(res, T, P)
            groups.append(G(group_id=g.group_id, topics=topics, error_code=res.error_code))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    topics_req = req.topics if v >= 2 else (req.topics or [])
    res = await _fetch_authorized(ctx, rt, req.group_id, topics_req, stable)
    T = OffsetFetchResponse.Topic
    P = T.Partition
    if res.error_code:
        if v >= 2:
            return OffsetFetchResponse(throttle_time_ms=0, topics=[], error_code=res.error_code)
        # v1: no top-level error field; Kafka reports it on each requested partition
        return OffsetFetchResponse(topics=[
            T(name=t.name, partitions=[P(partition_index=i, committed_offset=-1, metadata="",
                                         error_code=res.error_code) for i in t.partition_indexes])
            for t in topics_req])
    return OffsetFetchResponse(throttle_time_ms=0, topics=_fetched_topics(res, T, P), error_code=ErrorCode.NONE)


# -- OffsetDelete --------------------------------------------------------------------------------
@handles(OffsetDeleteRequest, "0")
async def handle_offset_delete(ctx, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    rt = runtime(ctx)
    if rt is None:
        return OffsetDeleteResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, throttle_time_ms=0,
                                    topics=[])
    if group_denied(ctx, req.group_id, AclOperation.DELETE):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    topics, denied = _split_authorized(ctx, AclOperation.READ, req.topics)
    known, unknown = _split_known(ctx.broker, topics, lambda p: p.partition_index)
    T = OffsetDeleteResponse.Topic
    P = T.Partition
    results: dict[str, list] = {}
    res = await rt.offset_delete(OffsetDeleteParams(req.group_id, tuple(known)))
    if res.error_code:
        return OffsetDeleteResponse(error_code=res.error_code, throttle_time_ms=0, topics=[])
    for name, prs in res.topics:
        results.setdefault(name, []).extend(P(partition_index=pr.partition_index, error_code=pr.error_code)
                                            for pr in prs)
    _add_unknown(results, unknown, P)
    _add_unknown(results, denied, P, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return OffsetDeleteResponse(error_code=ErrorCode.NONE, throttle_time_ms=0,
                                topics=[T(name=n, partitions=ps) for n, ps in results.items()])


# -- TxnOffsetCommit -----------------------------------------------------------------------------
@handles(TxnOffsetCommitRequest, "0-5")
async def handle_txn_offset_commit(ctx, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    v, b = ctx.api_version, ctx.broker
    rt = runtime(ctx)
    TT = TxnOffsetCommitResponse.Topic
    TP = TT.Partition
    denied_all = (ErrorCode.NONE if ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                  req.transactional_id)
                  else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) or group_denied(ctx, req.group_id)
    if denied_all:
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[TT(name=t.name, partitions=[
            TP(partition_index=p.partition_index, error_code=denied_all) for p in t.partitions]) for t in req.topics])
    topics, denied = _split_authorized(ctx, AclOperation.READ, req.topics)
    known, unknown = _split_known(b, topics, lambda p: CommitPartition(
        p.partition_index, p.committed_offset, p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata))
    results: dict[str, list] = {}

    def all_known(code: int) -> None:
        for name, parts in known:
            results.setdefault(name, []).extend(TP(partition_index=p.partition_index, error_code=code)
                                                for p in parts)
    generation = req.generation_id if v >= 3 else -1
    member = req.member_id if v >= 3 else ""
    instance = req.group_instance_id if v >= 3 else None
    if not known:
        pass
    elif rt is None:
        all_known(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    elif not req.group_id:
        all_known(ErrorCode.INVALID_GROUP_ID)
    else:
        tp = ("__consumer_offsets", rt.partition_for(req.group_id))
        code = b.txn.coordinator.verify(req.producer_id, req.producer_epoch, *tp)
        if code == ErrorCode.INVALID_TXN_STATE and v >= 5:         # transactions v2: add it
            code = await b.txn.implicit_add(req.transactional_id, req.producer_id, req.producer_epoch, [tp])
        if code == ErrorCode.INVALID_TXN_STATE and v >= 4:
            code = ErrorCode.TRANSACTION_ABORTABLE
        if code:
            all_known(code)
        else:
            res: OffsetCommitResult = await rt.txn_offset_commit(TxnOffsetCommitParams(
                req.group_id, req.producer_id, req.producer_epoch, tuple(known), generation, member, instance))
            for name, prs in res.topics:
                results.setdefault(name, []).extend(
                    TP(partition_index=pr.partition_index, error_code=pr.error_code) for pr in prs)
    _add_unknown(results, unknown, TP)
    _add_unknown(results, denied, TP, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[TT(name=n, partitions=ps) for n, ps in results.items()])
