"""Produce (API key 0), v0-v13: write record batches to partition leaders.

Kafka 4.x accepts only v3+ but still advertises v0 (KAFKA-18659, for librdkafka); the schema covers v0-v13.
v1 adds throttle_time_ms to the response; v2 log_append_time_ms; v3 transactional_id and the v2 record
format (KIP-98); v5 log_start_offset; v7 allows ZStandard (KIP-110); v8 record_errors/error_message (KIP-467);
v9 flexible (KIP-482); v10 current_leader and node_endpoints tagged fields (KIP-951); v11 may return
TRANSACTION_ABORTABLE and v12 implies AddPartitionsToTxn (KIP-890); v13 topic IDs instead of names (KIP-516).
"""
from kohort.protocol.schema import INT16, INT32, INT64, RECORDS, STRING, UUID, ArrayOf, Message, Struct, f


class ProduceRequest(Message):
    API_KEY = 0
    VALID = "0-13"
    FLEXIBLE = "9+"
    SCHEMA = [
        f("transactional_id", STRING, "3+", nullable="3+", default=None),
        f("acks", INT16),
        f("timeout_ms", INT32),
        f("topic_data", ArrayOf("TopicProduceData", [
            f("name", STRING, "0-12"),
            f("topic_id", UUID, "13+"),
            f("partition_data", ArrayOf("PartitionProduceData", [
                f("index", INT32),
                f("records", RECORDS, nullable="0+"),
            ])),
        ])),
    ]


class ProduceResponse(Message):
    API_KEY = 0
    VALID = "0-13"
    FLEXIBLE = "9+"
    SCHEMA = [
        f("responses", ArrayOf("TopicProduceResponse", [
            f("name", STRING, "0-12"),
            f("topic_id", UUID, "13+"),
            f("partition_responses", ArrayOf("PartitionProduceResponse", [
                f("index", INT32),
                f("error_code", INT16),
                f("base_offset", INT64),
                f("log_append_time_ms", INT64, "2+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("record_errors", ArrayOf("BatchIndexAndErrorMessage", [
                    f("batch_index", INT32, "8+"),
                    f("batch_index_error_message", STRING, "8+", nullable="8+", default=None),
                ]), "8+"),
                f("error_message", STRING, "8+", nullable="8+", default=None),
                f("current_leader", Struct("LeaderIdAndEpoch", [
                    f("leader_id", INT32, "10+", default=-1),
                    f("leader_epoch", INT32, "10+", default=-1),
                ]), "10+", tag=0),
            ])),
        ])),
        f("throttle_time_ms", INT32, "1+"),
        f("node_endpoints", ArrayOf("NodeEndpoint", [
            f("node_id", INT32, "10+"),
            f("host", STRING, "10+"),
            f("port", INT32, "10+"),
            f("rack", STRING, "10+", nullable="10+", default=None),
        ]), "10+", tag=0),
    ]

