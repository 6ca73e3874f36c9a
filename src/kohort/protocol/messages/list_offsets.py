"""ListOffsets (API key 2), v0-v11: look up offsets by timestamp (earliest -2, latest -1, ...).

Kafka 4.x accepts only v1+; the schema covers v0-v11. v0 returns old_style_offsets (up to max_num_offsets);
v1 a single timestamp/offset pair (KIP-79); v2 isolation_level and response throttle_time_ms (KIP-98);
v4 current_leader_epoch and leader_epoch (KIP-320); v5 OFFSET_NOT_AVAILABLE; v6 flexible (KIP-482);
v7 max-timestamp lookups (KIP-734); v8 local log start (KIP-405); v9 last tiered offset (KIP-1005);
v10 timeout_ms for async remote lookups (KIP-1075); v11 earliest pending upload offset (KIP-1023).
"""
from kohort.protocol.schema import INT8, INT16, INT32, INT64, STRING, Array, ArrayOf, Message, f


class ListOffsetsRequest(Message):
    API_KEY = 2
    VALID = "0-11"
    FLEXIBLE = "6+"
    SCHEMA = [
        f("replica_id", INT32, default=-1),   # -1 = a consumer (the spec gives no default)
        f("isolation_level", INT8, "2+"),
        f("topics", ArrayOf("ListOffsetsTopic", [
            f("name", STRING),
            f("partitions", ArrayOf("ListOffsetsPartition", [
                f("partition_index", INT32),
                f("current_leader_epoch", INT32, "4+", default=-1),
                f("timestamp", INT64),
                f("max_num_offsets", INT32, "0", default=1),
            ])),
        ])),
        f("timeout_ms", INT32, "10+"),
    ]


class ListOffsetsResponse(Message):
    API_KEY = 2
    VALID = "0-11"
    FLEXIBLE = "6+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "2+"),
        f("topics", ArrayOf("ListOffsetsTopicResponse", [
            f("name", STRING),
            f("partitions", ArrayOf("ListOffsetsPartitionResponse", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("old_style_offsets", Array(INT64), "0"),
                f("timestamp", INT64, "1+", default=-1),
                f("offset", INT64, "1+", default=-1),
                f("leader_epoch", INT32, "4+", default=-1),
            ])),
        ])),
    ]

