"""AlterShareGroupOffsets (API key 91), v0, flexible. Sets the share-partition start offset of
partitions of an Empty share group (KIP-932; NON_EMPTY_GROUP otherwise); the group is created when
absent and the partitions' share state re-initialized at that offset.
"""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, UUID, ArrayOf, Message, f


class AlterShareGroupOffsetsRequest(Message):
    API_KEY = 91
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("group_id", STRING),
        f("topics", ArrayOf("AlterShareGroupOffsetsRequestTopic", [
            f("topic_name", STRING),
            f("partitions", ArrayOf("AlterShareGroupOffsetsRequestPartition", [
                f("partition_index", INT32),
                f("start_offset", INT64),
            ])),
        ])),
    ]


class AlterShareGroupOffsetsResponse(Message):
    API_KEY = 91
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", default=None),
        f("responses", ArrayOf("AlterShareGroupOffsetsResponseTopic", [
            f("topic_name", STRING),
            f("topic_id", UUID),
            f("partitions", ArrayOf("AlterShareGroupOffsetsResponsePartition", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+", default=None),
            ])),
        ])),
    ]
