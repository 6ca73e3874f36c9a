"""DeleteTopics (API key 20), v0-v6: delete topics by name (or, from v6, by ID).

Kafka 4.x accepts only v1+; the schema covers v0-v6. v1 adds throttle_time_ms; v3 may return
TOPIC_DELETION_DISABLED; v4 flexible (KIP-482); v5 error_message and THROTTLING_QUOTA_EXCEEDED (KIP-599);
v6 replaces topic_names with topics carrying name or topic_id (KIP-516).
"""
from kohort.protocol.schema import INT16, INT32, STRING, UUID, Array, ArrayOf, Message, f


class DeleteTopicsRequest(Message):
    API_KEY = 20
    VALID = "0-6"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("topics", ArrayOf("DeleteTopicState", [
            f("name", STRING, "6+", nullable="6+", default=None),
            f("topic_id", UUID, "6+"),
        ]), "6+"),
        f("topic_names", Array(STRING), "0-5"),
        f("timeout_ms", INT32),
    ]


class DeleteTopicsResponse(Message):
    API_KEY = 20
    VALID = "0-6"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("responses", ArrayOf("DeletableTopicResult", [
            f("name", STRING, nullable="6+"),
            f("topic_id", UUID, "6+"),
            f("error_code", INT16),
            f("error_message", STRING, "5+", nullable="5+", default=None),
        ])),
    ]

