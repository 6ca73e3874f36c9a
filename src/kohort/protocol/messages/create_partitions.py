"""CreatePartitions (API key 37), v0-v3: add partitions to existing topics (KIP-195).

v1 is v0 with throttle-before-response semantics; v2 flexible (KIP-482); v3 may return
THROTTLING_QUOTA_EXCEEDED (KIP-599).
"""
from kohort.protocol.schema import BOOL, INT16, INT32, STRING, Array, ArrayOf, Message, f


class CreatePartitionsRequest(Message):
    API_KEY = 37
    VALID = "0-3"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("topics", ArrayOf("CreatePartitionsTopic", [
            f("name", STRING),
            f("count", INT32),
            f("assignments", ArrayOf("CreatePartitionsAssignment", [
                f("broker_ids", Array(INT32)),
            ]), nullable="0+"),
        ])),
        f("timeout_ms", INT32),
        f("validate_only", BOOL),
    ]


class CreatePartitionsResponse(Message):
    API_KEY = 37
    VALID = "0-3"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("results", ArrayOf("CreatePartitionsTopicResult", [
            f("name", STRING),
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+", default=None),
        ])),
    ]

