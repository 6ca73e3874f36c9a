"""OffsetForLeaderEpoch (API key 23), v2-v4 (the Kafka 4 range; KIP-101/279/320): the end offset of
a leader epoch, from the log's leader-epoch cache. Consumers use it to detect log truncation.
DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED."""
from __future__ import annotations

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.broker.handlers._util import check_leader_epoch
from kohort.errors import ErrorCode
from kohort.protocol.messages.offset_for_leader_epoch import (OffsetForLeaderEpochRequest,
                                                               OffsetForLeaderEpochResponse)
from kohort.storage import StorageError

TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEnd = TopicResult.EpochEndOffset


@handles(OffsetForLeaderEpochRequest, "2-4")
def handle_offset_for_leader_epoch(ctx, req):
    broker = ctx.broker
    topics = []
    ok = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in req.topics))
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.topic not in ok:
                parts.append(EpochEnd(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partition=p.partition))
                continue
            try:
                log = broker.storage.log(t.topic, p.partition)
                log.become_leader(broker.leader_epoch)
            except StorageError:
                parts.append(EpochEnd(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, partition=p.partition))
                continue
            code = check_leader_epoch(broker, p.current_leader_epoch)
            if code:
                parts.append(EpochEnd(error_code=code, partition=p.partition))
                continue
            epoch, end = log.end_offset_for_epoch(p.leader_epoch)
            parts.append(EpochEnd(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=end))
        topics.append(TopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
