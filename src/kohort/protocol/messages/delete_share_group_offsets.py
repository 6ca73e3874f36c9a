"""DeleteShareGroupOffsets (API key 92), v0, flexible. Deletes the share state of whole topics of an
Empty share group (KIP-932; NON_EMPTY_GROUP otherwise; a topic without initialized state is
UNKNOWN_TOPIC_OR_PARTITION).
"""
from kohort.protocol.schema import INT16, INT32, STRING, UUID, ArrayOf, Message, f


class DeleteShareGroupOffsetsRequest(Message):
    API_KEY = 92
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("group_id", STRING),
        f("topics", ArrayOf("DeleteShareGroupOffsetsRequestTopic", [
            f("topic_name", STRING),
        ])),
    ]


class DeleteShareGroupOffsetsResponse(Message):
    API_KEY = 92
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", default=None),
        f("responses", ArrayOf("DeleteShareGroupOffsetsResponseTopic", [
            f("topic_name", STRING),
            f("topic_id", UUID),
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+", default=None),
        ])),
    ]
