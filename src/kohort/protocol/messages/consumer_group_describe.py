"""ConsumerGroupDescribe (API key 69), v0-v1, flexible from v0. Describe KIP-848 consumer groups:
epochs, assignor, and each member's current and target assignment.

v1 adds the member's member_type (-1 unknown, 0 classic, 1 consumer) in the response (KIP-1099);
the request is unchanged.
"""
from kohort.protocol.schema import BOOL, INT8, INT16, INT32, STRING, UUID, Array, ArrayOf, Message, Struct, f

AUTHORIZED_OPERATIONS_OMITTED = -2147483648   # Integer.MIN_VALUE: "not requested"


class ConsumerGroupDescribeRequest(Message):
    API_KEY = 69
    VALID = "0-1"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("group_ids", Array(STRING)),
        f("include_authorized_operations", BOOL),
    ]


_ASSIGNMENT = Struct("Assignment", [
    f("topic_partitions", ArrayOf("TopicPartitions", [
        f("topic_id", UUID),
        f("topic_name", STRING),
        f("partitions", Array(INT32)),
    ])),
])


class ConsumerGroupDescribeResponse(Message):
    API_KEY = 69
    VALID = "0-1"
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
                f("instance_id", STRING, nullable="0+", default=None),
                f("rack_id", STRING, nullable="0+", default=None),
                f("member_epoch", INT32),
                f("client_id", STRING),
                f("client_host", STRING),
                f("subscribed_topic_names", Array(STRING)),
                f("subscribed_topic_regex", STRING, nullable="0+", default=None),
                f("assignment", _ASSIGNMENT),
                f("target_assignment", _ASSIGNMENT),
                f("member_type", INT8, "1+", default=-1),
            ])),
            f("authorized_operations", INT32, default=AUTHORIZED_OPERATIONS_OMITTED),
        ])),
    ]
