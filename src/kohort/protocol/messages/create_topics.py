"""CreateTopics (API key 19), v0-v7: create topics with partition counts, replication and configs.

Kafka 4.x accepts only v2+; the schema covers v0-v7. v1 adds validate_only and a per-topic error_message;
v2 throttle_time_ms; v4 lets num_partitions/replication_factor be -1 for broker defaults (KIP-464);
v5 flexible (KIP-482) and returns the created topic's configs (KIP-525); v6 may return
THROTTLING_QUOTA_EXCEEDED (KIP-599); v7 returns topic_id (KIP-516).
"""
from kohort.protocol.schema import BOOL, INT8, INT16, INT32, STRING, UUID, Array, ArrayOf, Message, f


class CreateTopicsRequest(Message):
    API_KEY = 19
    VALID = "0-7"
    FLEXIBLE = "5+"
    SCHEMA = [
        f("topics", ArrayOf("CreatableTopic", [
            f("name", STRING),
            f("num_partitions", INT32),
            f("replication_factor", INT16),
            f("assignments", ArrayOf("CreatableReplicaAssignment", [
                f("partition_index", INT32),
                f("broker_ids", Array(INT32)),
            ])),
            f("configs", ArrayOf("CreatableTopicConfig", [
                f("name", STRING),
                f("value", STRING, nullable="0+"),
            ])),
        ])),
        f("timeout_ms", INT32, default=60000),
        f("validate_only", BOOL, "1+", default=False),
    ]


class CreateTopicsResponse(Message):
    API_KEY = 19
    VALID = "0-7"
    FLEXIBLE = "5+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "2+"),
        f("topics", ArrayOf("CreatableTopicResult", [
            f("name", STRING),
            f("topic_id", UUID, "7+"),
            f("error_code", INT16),
            f("error_message", STRING, "1+", nullable="0+"),
            f("topic_config_error_code", INT16, "5+", tag=0),
            f("num_partitions", INT32, "5+", default=-1),
            f("replication_factor", INT16, "5+", default=-1),
            f("configs", ArrayOf("CreatableTopicConfigs", [
                f("name", STRING, "5+"),
                f("value", STRING, "5+", nullable="5+"),
                f("read_only", BOOL, "5+"),
                f("config_source", INT8, "5+", default=-1),
                f("is_sensitive", BOOL, "5+"),
            ]), "5+", nullable="5+"),
        ])),
    ]

