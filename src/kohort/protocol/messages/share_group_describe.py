"""ShareGroupDescribe (API key 77), v1, flexible. Describes share groups (KIP-932): state, group and
assignment epochs, the assignor ("simple") and every member with its subscription and assignment
(topic ids and names). An unknown group is answered GROUP_ID_NOT_FOUND in its entry.

v0 was Kafka 4.0's early access and was removed in 4.1.
"""
from kohort.protocol.schema import BOOL, INT16, INT32, STRING, UUID, Array, ArrayOf, Message, Struct, f

AUTHORIZED_OPERATIONS_OMITTED = -(1 << 31)


class ShareGroupDescribeRequest(Message):
    API_KEY = 77
    VALID = "1"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("group_ids", Array(STRING)),
        f("include_authorized_operations", BOOL),
    ]


class ShareGroupDescribeResponse(Message):
    API_KEY = 77
    VALID = "1"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("groups", ArrayOf("DescribedGroup", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+", default=None),
            f("group_id", STRING),
            f("group_state", STRING),
            f("group_epoch", INT32),
            f("assignment_epoch", INT32),
            f("assignor_name", STRING),
            f("members", ArrayOf("Member", [
                f("member_id", STRING),
                f("rack_id", STRING, nullable="0+", default=None),
                f("member_epoch", INT32),
                f("client_id", STRING),
                f("client_host", STRING),
                f("subscribed_topic_names", Array(STRING)),
                f("assignment", Struct("Assignment", [
                    f("topic_partitions", ArrayOf("TopicPartitions", [
                        f("topic_id", UUID),
                        f("topic_name", STRING),
                        f("partitions", Array(INT32)),
                    ])),
                ])),
            ])),
            f("authorized_operations", INT32, default=AUTHORIZED_OPERATIONS_OMITTED),
        ])),
    ]
