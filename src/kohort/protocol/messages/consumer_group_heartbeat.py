"""ConsumerGroupHeartbeat (API key 68), v0-v1, flexible from v0. The single RPC of the KIP-848 consumer
protocol: join (member_epoch 0), heartbeat, leave (-1) or static temporary leave (-2); the broker
answers with the member epoch, heartbeat interval and (when changed) the assignment.

v1 adds subscribed_topic_regex (KIP-848) and has the client generate its own member id (KIP-1082).
Null request fields mean "unchanged since the last heartbeat".
"""
import copy

from kohort.errors import IncompatibleBrokerVersionError
from kohort.protocol.schema import INT16, INT32, STRING, UUID, Array, ArrayOf, Message, Struct, f

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class ConsumerGroupHeartbeatRequest(Message):
    API_KEY = 68
    VALID = "0-1"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("group_id", STRING),
        f("member_id", STRING),
        f("member_epoch", INT32),
        f("instance_id", STRING, nullable="0+", default=None),
        f("rack_id", STRING, nullable="0+", default=None),
        f("rebalance_timeout_ms", INT32, default=-1),
        f("subscribed_topic_names", Array(STRING), nullable="0+", default=None),
        f("subscribed_topic_regex", STRING, "1+", nullable="1+", default=None),
        f("server_assignor", STRING, nullable="0+", default=None),
        f("topic_partitions", ArrayOf("TopicPartitions", [
            f("topic_id", UUID),
            f("partitions", Array(INT32)),
        ]), nullable="0+", default=None),
    ]


class ConsumerGroupHeartbeatResponse(Message):
    API_KEY = 68
    VALID = "0-1"
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


def heartbeat_for_version(req: ConsumerGroupHeartbeatRequest, version: int) -> ConsumerGroupHeartbeatRequest:
    """`req` as it can be sent in `version`: v0 has no regex (IncompatibleBrokerVersionError) and the
    broker makes the member id, so a v0 join (epoch 0) is sent with "" (KIP-1082 came with v1)."""
    if version >= 1:
        return req
    if req.subscribed_topic_regex:
        raise IncompatibleBrokerVersionError("ConsumerGroupHeartbeat", (1, 1), (0, 0))
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        req = copy.copy(req)
        req.member_id = ""
    return req
