"""DescribeShareGroupOffsets (API key 90), v0-v1, flexible. The share-partition start offset (SPSO)
of each partition of share groups (KIP-932); null topics = every initialized partition of the group.
An unknown topic gets a zero topic id and start offset -1.

v1 (Kafka 4.2, KIP-1226) adds Lag per partition (-1 when unknown).
"""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, UUID, Array, ArrayOf, Message, f


class DescribeShareGroupOffsetsRequest(Message):
    API_KEY = 90
    VALID = "0-1"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("groups", ArrayOf("DescribeShareGroupOffsetsRequestGroup", [
            f("group_id", STRING),
            f("topics", ArrayOf("DescribeShareGroupOffsetsRequestTopic", [
                f("topic_name", STRING),
                f("partitions", Array(INT32)),
            ]), nullable="0+", default=None),
        ])),
    ]


class DescribeShareGroupOffsetsResponse(Message):
    API_KEY = 90
    VALID = "0-1"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("groups", ArrayOf("DescribeShareGroupOffsetsResponseGroup", [
            f("group_id", STRING),
            f("topics", ArrayOf("DescribeShareGroupOffsetsResponseTopic", [
                f("topic_name", STRING),
                f("topic_id", UUID),
                f("partitions", ArrayOf("DescribeShareGroupOffsetsResponsePartition", [
                    f("partition_index", INT32),
                    f("start_offset", INT64),
                    f("leader_epoch", INT32),
                    f("lag", INT64, "1+", default=-1),
                    f("error_code", INT16),
                    f("error_message", STRING, nullable="0+", default=None),
                ])),
            ])),
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+", default=None),
        ])),
    ]
