"""OffsetDelete (API key 47), v0 only, never flexible. Delete a group's offsets for partitions it no
longer consumes (KIP-496)."""
from kohort.protocol.schema import INT16, INT32, STRING, ArrayOf, Message, f


class OffsetDeleteRequest(Message):
    API_KEY = 47
    VALID = "0"
    FLEXIBLE = "none"
    SCHEMA = [
        f("group_id", STRING),
        f("topics", ArrayOf("Topic", [
            f("name", STRING),
            f("partitions", ArrayOf("Partition", [
                f("partition_index", INT32),
            ])),
        ])),
    ]


class OffsetDeleteResponse(Message):
    API_KEY = 47
    VALID = "0"
    FLEXIBLE = "none"
    SCHEMA = [
        f("error_code", INT16),
        f("throttle_time_ms", INT32),
        f("topics", ArrayOf("Topic", [
            f("name", STRING),
            f("partitions", ArrayOf("Partition", [
                f("partition_index", INT32),
                f("error_code", INT16),
            ])),
        ])),
    ]
