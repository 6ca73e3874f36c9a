"""ListOffsets (API key 2), v1-v10 (Kafka 4 dropped v0): the offset for a timestamp per partition.

Special timestamps: -1 latest (the high watermark; with READ_COMMITTED, v2+, the last stable offset,
which also caps timestamp lookups), -2 earliest (log start offset), -3 the record with the
greatest timestamp (KIP-734, v7+), -4 earliest local (KIP-1005, v8+; no tiered storage, so the log
start offset), -5 earliest pending upload (KIP-1023; none, so -1). A timestamp with no record at or
after it answers offset -1.
"""
from __future__ import annotations

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.broker.handlers._util import check_leader_epoch
from kohort.errors import ErrorCode
from kohort.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from kohort.storage import StorageError

TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
PartResp = TopicResp.ListOffsetsPartitionResponse


def _one(broker, topic: str, p, read_committed: bool) -> PartResp:
    idx = p.partition_index
    try:
        log = broker.storage.log(topic, idx)
        log.become_leader(broker.leader_epoch)
    except StorageError:
        return PartResp(partition_index=idx, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    code = check_leader_epoch(broker, p.current_leader_epoch)
    if code:
        return PartResp(partition_index=idx, error_code=code)
    ts = p.timestamp
    epoch = broker.leader_epoch
    if ts == -4:
        ts = -2
    if ts == -5:
        return PartResp(partition_index=idx, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
    if ts < -3:
        return PartResp(partition_index=idx, error_code=ErrorCode.INVALID_REQUEST)
    if ts == -1 and read_committed:
        lso = broker.producers.partition(topic, idx, log).last_stable_offset(log.high_watermark)
        return PartResp(partition_index=idx, error_code=0, timestamp=-1, offset=lso, leader_epoch=epoch)
    try:
        found = log.offset_for_timestamp(ts)
    except StorageError as e:
        return PartResp(partition_index=idx, error_code=e.error_code)
    if found is None:
        return PartResp(partition_index=idx, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
    offset, timestamp = found
    if read_committed and ts >= 0 and offset >= broker.producers.partition(topic, idx, log).last_stable_offset(
            log.high_watermark):
        # read_committed: a timestamp lookup answers only offsets below the last stable offset
        return PartResp(partition_index=idx, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
    return PartResp(partition_index=idx, error_code=0, timestamp=timestamp, offset=offset, leader_epoch=epoch)


@handles(ListOffsetsRequest, "1-10")
def handle_list_offsets(ctx, req: ListOffsetsRequest) -> ListOffsetsResponse:
    rc = ctx.api_version >= 2 and req.isolation_level == 1
    ok = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in req.topics))
    topics = [TopicResp(name=t.name, partitions=[
        _one(ctx.broker, t.name, p, rc) if t.name in ok
        else PartResp(partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        for p in t.partitions]) for t in req.topics]
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)
