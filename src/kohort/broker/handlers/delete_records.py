"""DeleteRecords (API key 21), v0-v2: move a partition's log start offset up (offset -1 = the high
watermark); answers the new low watermark. Beyond the high watermark is OFFSET_OUT_OF_RANGE.
DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED."""
from __future__ import annotations

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from kohort.storage import StorageError

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartResult = TopicResult.DeleteRecordsPartitionResult


@handles(DeleteRecordsRequest, "0-2")
def handle_delete_records(ctx, req):
    storage = ctx.broker.storage
    topics = []
    ok = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in req.topics))
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.name not in ok:
                parts.append(PartResult(partition_index=p.partition_index, low_watermark=-1,
                                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                log = storage.log(t.name, p.partition_index)
                offset = log.high_watermark if p.offset == -1 else p.offset
                if offset < 0:
                    parts.append(PartResult(partition_index=p.partition_index, low_watermark=-1,
                                            error_code=ErrorCode.OFFSET_OUT_OF_RANGE))
                    continue
                low = storage.delete_records(t.name, p.partition_index, offset)
                parts.append(PartResult(partition_index=p.partition_index, low_watermark=low, error_code=0))
            except StorageError as e:
                parts.append(PartResult(partition_index=p.partition_index, low_watermark=-1,
                                        error_code=e.error_code))
        topics.append(TopicResult(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
