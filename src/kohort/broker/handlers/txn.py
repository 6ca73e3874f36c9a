"""The client side of transactions (KIP-98): AddPartitionsToTxn (key 24) v0-v3, AddOffsetsToTxn
(key 25) v0-v4 and EndTxn (key 26) v0-v5, answered by the transaction coordinator (kohort.broker.txn).
EndTxn v5 is transactions v2 (KIP-890 part 2: the epoch is bumped on every commit/abort and the answer
carries the producer id/epoch to use next). AddPartitionsToTxn v4+ (brokers' verification) is not
served: kohort's broker verifies transactional produce with its local coordinator directly.

AddPartitionsToTxn answers one code for every partition; a partition of an unknown topic gets
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka. AddOffsetsToTxn adds the
group's `__consumer_offsets` partition (abs(hash(group)) % its partition count).

Admin (KIP-664): DescribeTransactions (key 65) v0, ListTransactions (key 66) v0-v2 from the
coordinator's state; DescribeProducers (key 61) v0 from the partitions' producer state;
WriteTxnMarkers (key 27) v1 -- what Kafka's Admin.abortTransaction sends to a partition's leader to
close a hanging transaction (kafka-transactions.sh abort): each marker is appended with the same checks
as the coordinator's own (an epoch below the producer's is INVALID_PRODUCER_EPOCH, a coordinator
epoch below its last marker's TRANSACTION_COORDINATOR_FENCED; `__consumer_offsets` through the group
coordinator) and answered once fsynced.

Authorization (Kafka's): WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
(AddPartitionsToTxn: on every partition; then WRITE on each topic, else TOPIC_AUTHORIZATION_FAILED
and OPERATION_NOT_ATTEMPTED for the rest); AddOffsetsToTxn also READ on the group, else
GROUP_AUTHORIZATION_FAILED. DescribeTransactions/ListTransactions need DESCRIBE on the id (the list is
filtered), DescribeProducers READ on the topic; WriteTxnMarkers (a broker's or an admin's
request) CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every marker.
"""
from __future__ import annotations

import re

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.broker.handlers._util import now_ms
from kohort.broker.txn.coordinator import STATE_NAMES, TxnState, WriteMarkers
from kohort.errors import ErrorCode
from kohort.protocol.consumer_offsets import group_partition
from kohort.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from kohort.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from kohort.protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from kohort.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest, DescribeTransactionsResponse,
)
from kohort.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from kohort.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from kohort.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from kohort.storage import StorageError

TopicResult = AddPartitionsToTxnResponse.TopicResult
PartResult = TopicResult.PartitionResult


def _txn_denied(ctx, transactional_id: str) -> int:
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED unless the principal may WRITE the transactional id."""
    if ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.NONE
    return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _group_denied(ctx, group_id: str) -> int:
    if ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.NONE
    return ErrorCode.GROUP_AUTHORIZATION_FAILED


def _answer(topics, code_of) -> list:
    return [TopicResult(name=t.name, results_by_partition=[
        PartResult(partition_index=p, partition_error_code=code_of(t.name, p)) for p in t.partitions])
        for t in topics]


@handles(AddPartitionsToTxnRequest, "0-3")
async def handle_add_partitions_to_txn(ctx, req):
    storage = ctx.broker.storage
    topics = req.v3_and_below_topics
    unknown = set()
    denied = _txn_denied(ctx, req.v3_and_below_transactional_id)
    if denied:
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_answer(
            topics, lambda t, p: denied))
    writable = ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in topics))
    for t in topics:
        for p in t.partitions:
            try:
                storage.log(t.name, p)
            except StorageError:
                unknown.add((t.name, p))
    if len(writable) < len({t.name for t in topics}):
        results = _answer(topics, lambda t, p: ErrorCode.TOPIC_AUTHORIZATION_FAILED if t not in writable
                          else ErrorCode.OPERATION_NOT_ATTEMPTED)
    elif unknown:
        results = _answer(topics, lambda t, p: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (t, p) in unknown
                          else ErrorCode.OPERATION_NOT_ATTEMPTED)
    else:
        parts = [(t.name, p) for t in topics for p in t.partitions]
        r = await ctx.broker.txn.call("add_partitions", req.v3_and_below_transactional_id,
                                      req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, parts,
                                      version=ctx.api_version)
        results = _answer(topics, lambda t, p: r.error)
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=results)


def _offsets_partitions(broker) -> int:
    if broker.storage.has_topic("__consumer_offsets"):
        return broker.storage.topic("__consumer_offsets").num_partitions
    return broker.config["offsets.topic.num.partitions"]


@handles(AddOffsetsToTxnRequest, "0-4")
async def handle_add_offsets_to_txn(ctx, req):
    denied = _txn_denied(ctx, req.transactional_id) or _group_denied(ctx, req.group_id)
    if denied:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=denied)
    tp = ("__consumer_offsets", group_partition(req.group_id, _offsets_partitions(ctx.broker)))
    r = await ctx.broker.txn.call("add_partitions", req.transactional_id, req.producer_id, req.producer_epoch,
                                  [tp], version=ctx.api_version)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=r.error)


@handles(EndTxnRequest, "0-5")
async def handle_end_txn(ctx, req):
    denied = _txn_denied(ctx, req.transactional_id)
    if denied:
        return EndTxnResponse(throttle_time_ms=0, error_code=denied)
    r = await ctx.broker.txn.call("end_txn", req.transactional_id, req.producer_id, req.producer_epoch,
                                  req.committed, version=ctx.api_version)
    if r.error:
        return EndTxnResponse(throttle_time_ms=0, error_code=r.error)
    return EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=r.producer_id,
                          producer_epoch=r.producer_epoch)


# -- admin (KIP-664) -------------------------------------------------------------------------------
def _coordinator(ctx):
    return ctx.broker.txn.coordinator


@handles(DescribeTransactionsRequest, "0")
def handle_describe_transactions(ctx, req):
    """Unknown (or Dead) ids answer TRANSACTIONAL_ID_NOT_FOUND."""
    DS = DescribeTransactionsResponse.TransactionState
    out = []
    for tid in req.transactional_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            out.append(DS(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=tid,
                          transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                          producer_id=-1, producer_epoch=-1, topics=[]))
            continue
        m = _coordinator(ctx).txns.get(tid)
        if m is None or m.state == TxnState.DEAD:
            out.append(DS(error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=tid,
                          transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                          producer_id=-1, producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(m.partitions):
            by_topic.setdefault(t, []).append(p)
        out.append(DS(error_code=0, transactional_id=tid, transaction_state=STATE_NAMES[m.state],
                      transaction_timeout_ms=m.timeout_ms, transaction_start_time_ms=m.start_ms,
                      producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                      topics=[DS.TopicData(name=t, partition_indexes=ps) for t, ps in by_topic.items()]))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=out)


@handles(ListTransactionsRequest, "0-2")
def handle_list_transactions(ctx, req):
    """State names are Kafka's; unknown ones are echoed in unknown_state_filters. duration_filter
    (v1) keeps transactions started at least that long ago; transactional_id_pattern (v2) is a
    regular expression the whole id must match."""
    by_name = {n: s for s, n in STATE_NAMES.items()}
    unknown = [n for n in req.state_filters if n not in by_name]
    states = {by_name[n] for n in req.state_filters if n in by_name}
    pids = set(req.producer_id_filters)
    pattern = None
    if req.transactional_id_pattern:
        try:
            pattern = re.compile(req.transactional_id_pattern)
        except re.error:
            return ListTransactionsResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                                            unknown_state_filters=unknown, transaction_states=[])
    now = now_ms()
    LS = ListTransactionsResponse.TransactionState
    out = []
    for tid, m in sorted(_coordinator(ctx).txns.items()):
        if (states and m.state not in states) or (pids and m.producer_id not in pids) or m.state == TxnState.DEAD:
            continue
        if req.duration_filter >= 0 and (m.start_ms < 0 or now - m.start_ms < req.duration_filter):
            continue
        if pattern is not None and not pattern.fullmatch(tid):
            continue
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            continue
        out.append(LS(transactional_id=tid, producer_id=m.producer_id, transaction_state=STATE_NAMES[m.state]))
    return ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                                    transaction_states=out)


@handles(DescribeProducersRequest, "0")
def handle_describe_producers(ctx, req):
    """Each partition's producer state: epoch, last sequence and timestamp of its newest retained
    batch, coordinator epoch of its last marker, first offset of its open transaction."""
    broker = ctx.broker
    R = DescribeProducersResponse.TopicResponse
    P = R.PartitionResponse
    topics = []
    for t in req.topics:
        parts = []
        for idx in t.partition_indexes:
            if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name):
                parts.append(P(partition_index=idx, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                               active_producers=[]))
                continue
            try:
                lg = broker.storage.log(t.name, idx)
            except StorageError:
                parts.append(P(partition_index=idx, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               active_producers=[]))
                continue
            ps = broker.producers.partition(t.name, idx, lg)
            active = []
            for pid, e in sorted(ps.entries.items()):
                last = e.batches[-1] if e.batches else None
                active.append(P.ProducerState(
                    producer_id=pid, producer_epoch=e.epoch, last_sequence=last.last_seq if last else -1,
                    last_timestamp=last.timestamp if last else e.last_append_ms,
                    coordinator_epoch=e.coordinator_epoch, current_txn_start_offset=ps.ongoing.get(pid, -1)))
            parts.append(P(partition_index=idx, error_code=0, active_producers=active))
        topics.append(R(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


@handles(WriteTxnMarkersRequest, "1")
async def handle_write_txn_markers(ctx, req):
    txn = ctx.broker.txn
    MR = WriteTxnMarkersResponse.WritableTxnMarkerResult
    TR = MR.WritableTxnMarkerTopicResult
    PR = TR.WritableTxnMarkerPartitionResult
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return WriteTxnMarkersResponse(markers=[MR(producer_id=m.producer_id, topics=[
            TR(name=t.name, partitions=[PR(partition_index=p, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                                        for p in t.partition_indexes]) for t in m.topics]) for m in req.markers])
    results = []
    for m in req.markers:
        w = WriteMarkers("", m.producer_id, m.producer_epoch, m.transaction_result, [])
        topics = []
        for t in m.topics:
            parts = []
            for p in t.partition_indexes:
                try:
                    code = await txn.write_marker_async(t.name, p, w, m.coordinator_epoch)
                except StorageError as e:
                    code = e.error_code if e.error_code != ErrorCode.UNKNOWN_SERVER_ERROR \
                        else ErrorCode.KAFKA_STORAGE_ERROR
                parts.append(PR(partition_index=p, error_code=code))
            topics.append(TR(name=t.name, partitions=parts))
        results.append(MR(producer_id=m.producer_id, topics=topics))
    sync = ctx.broker.sync
    if sync.enabled:
        try:
            await sync.wait_synced()
        except StorageError as e:
            for r in results:
                for t in r.topics:
                    for p in t.partitions:
                        if p.error_code == 0:
                            p.error_code = e.error_code
    return WriteTxnMarkersResponse(markers=results)
