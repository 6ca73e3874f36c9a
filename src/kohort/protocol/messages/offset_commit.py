"""OffsetCommit (API key 8), v0-v10. Store committed offsets for a group.

v1 adds generation_id_or_member_epoch, member_id and a per-partition commit_timestamp; v2 replaces
commit_timestamp with retention_time_ms; v3 adds throttle_time_ms; v5 drops retention_time_ms (retention
is broker config only); v6 committed_leader_epoch (KIP-320); v7 group_instance_id (KIP-345); v8 first
flexible version (KIP-482); v9 usable by KIP-848 consumer-protocol members (STALE_MEMBER_EPOCH,
GROUP_ID_NOT_FOUND); v10 topic ids replace topic names (KIP-848). Kafka 4.x brokers accept v2+ (KIP-896).
"""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, UUID, ArrayOf, Message, f


class OffsetCommitRequest(Message):
    API_KEY = 8
    VALID = "0-10"
    FLEXIBLE = "8+"
    SCHEMA = [
        f("group_id", STRING),
        f("generation_id_or_member_epoch", INT32, "1+", default=-1),
        f("member_id", STRING, "1+"),
        f("group_instance_id", STRING, "7+", nullable="7+", default=None),
        f("retention_time_ms", INT64, "2-4", default=-1),
        f("topics", ArrayOf("Topic", [
            f("name", STRING, "0-9"),
            f("topic_id", UUID, "10+"),
            f("partitions", ArrayOf("Partition", [
                f("partition_index", INT32),
                f("committed_offset", INT64),
                f("committed_leader_epoch", INT32, "6+", default=-1),
                f("commit_timestamp", INT64, "1", default=-1),
                f("committed_metadata", STRING, nullable="0+"),
            ])),
        ])),
    ]


class OffsetCommitResponse(Message):
    API_KEY = 8
    VALID = "0-10"
    FLEXIBLE = "8+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "3+"),
        f("topics", ArrayOf("Topic", [
            f("name", STRING, "0-9"),
            f("topic_id", UUID, "10+"),
            f("partitions", ArrayOf("Partition", [
                f("partition_index", INT32),
                f("error_code", INT16),
            ])),
        ])),
    ]
