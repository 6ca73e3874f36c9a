"""ShareGroupHeartbeat (API key 76), v1, flexible. The membership RPC of share groups (KIP-932): join
(member_epoch 0, with the subscribed topics), heartbeat, leave (-1); the coordinator answers with the
member epoch, the heartbeat interval and, when it changed, the assignment.

v0 was Kafka 4.0's early access and was removed in 4.1; v1 is the stable version. The member id is
made by the client and kept for its lifetime. Null request fields mean "unchanged since the last
heartbeat". There are no owned partitions, regexes, instance ids or rebalance timeouts.
"""
from kohort.protocol.schema import INT16, INT32, STRING, UUID, Array, ArrayOf, Message, Struct, f

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1


class ShareGroupHeartbeatRequest(Message):
    API_KEY = 76
    VALID = "1"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("group_id", STRING),
        f("member_id", STRING),
        f("member_epoch", INT32),
        f("rack_id", STRING, nullable="0+", default=None),
        f("subscribed_topic_names", Array(STRING), nullable="0+", default=None),
    ]


class ShareGroupHeartbeatResponse(Message):
    API_KEY = 76
    VALID = "1"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", default=None),
        f("member_id", STRING, nullable="0+", default=None),
        f("member_epoch", INT32),
        f("heartbeat_interval_ms", INT32),
        f("assignment", Struct("Assignment", [
            f("topic_partitions", ArrayOf("TopicPartitions", [
                f("topic_id", UUID),
                f("partitions", Array(INT32)),
            ])),
        ]), nullable="0+", default=None),
    ]
