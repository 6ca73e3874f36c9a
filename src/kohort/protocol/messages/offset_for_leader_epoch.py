"""OffsetForLeaderEpoch (API key 23), v0-v4: end offset of a leader epoch, for log truncation checks.

Kafka 4.x accepts only v2+; the schema covers v0-v4. v1 returns leader_epoch (KIP-279); v2 adds
current_leader_epoch fencing (KIP-320) and throttle_time_ms; v3 replica_id (-2 = debug consumer);
v4 flexible (KIP-482).
"""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, ArrayOf, Message, f


class OffsetForLeaderEpochRequest(Message):
    API_KEY = 23
    VALID = "0-4"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("replica_id", INT32, "3+", default=-2),
        f("topics", ArrayOf("OffsetForLeaderTopic", [
            f("topic", STRING),
            f("partitions", ArrayOf("OffsetForLeaderPartition", [
                f("partition", INT32),
                f("current_leader_epoch", INT32, "2+", default=-1),
                f("leader_epoch", INT32),
            ])),
        ])),
    ]


class OffsetForLeaderEpochResponse(Message):
    API_KEY = 23
    VALID = "0-4"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "2+"),
        f("topics", ArrayOf("OffsetForLeaderTopicResult", [
            f("topic", STRING),
            f("partitions", ArrayOf("EpochEndOffset", [
                f("error_code", INT16),
                f("partition", INT32),
                f("leader_epoch", INT32, "1+", default=-1),
                f("end_offset", INT64, default=-1),
            ])),
        ])),
    ]

