"""The client side of transactions v1 (KIP-98): AddPartitionsToTxn (key 24) v0-v3, AddOffsetsToTxn
(key 25) v0-v4 and EndTxn (key 26) v0-v4, answered by the transaction coordinator
(kohort.broker.txn). AddPartitionsToTxn v4+ (brokers' verification, KIP-890) and EndTxn v5
(transactions v2) are not served: kohort's broker verifies transactional produce with its local
coordinator directly and does not advertise transaction.version 2.

AddPartitionsToTxn answers one code for every partition; a partition of an unknown topic gets
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka. AddOffsetsToTxn adds the
group's `__consumer_offsets` partition (abs(hash(group)) % its partition count).
"""
from __future__ import annotations

from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.consumer_offsets import group_partition
from kohort.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from kohort.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from kohort.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from kohort.storage import StorageError

TopicResult = AddPartitionsToTxnResponse.TopicResult
PartResult = TopicResult.PartitionResult


def _answer(topics, code_of) -> list:
    return [TopicResult(name=t.name, results_by_partition=[
        PartResult(partition_index=p, partition_error_code=code_of(t.name, p)) for p in t.partitions])
        for t in topics]


@handles(AddPartitionsToTxnRequest, "0-3")
async def handle_add_partitions_to_txn(ctx, req):
    storage = ctx.broker.storage
    topics = req.v3_and_below_topics
    unknown = set()
    for t in topics:
        for p in t.partitions:
            try:
                storage.log(t.name, p)
            except StorageError:
                unknown.add((t.name, p))
    if unknown:
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
    tp = ("__consumer_offsets", group_partition(req.group_id, _offsets_partitions(ctx.broker)))
    r = await ctx.broker.txn.call("add_partitions", req.transactional_id, req.producer_id, req.producer_epoch,
                                  [tp], version=ctx.api_version)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=r.error)


@handles(EndTxnRequest, "0-4")
async def handle_end_txn(ctx, req):
    r = await ctx.broker.txn.call("end_txn", req.transactional_id, req.producer_id, req.producer_epoch,
                                  req.committed, version=ctx.api_version)
    return EndTxnResponse(throttle_time_ms=0, error_code=r.error)
