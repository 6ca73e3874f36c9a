"""JoinGroup (API key 11), v0-v9. Classic group membership: join and (for the leader) get members.

v1 adds rebalance_timeout_ms; v2 throttle_time_ms; v4 MEMBER_ID_REQUIRED (KIP-394); v5 group_instance_id
(KIP-345); v6 flexible; v7 protocol_type/name in the response; v8 reason (KIP-800); v9 skip_assignment.
"""
from kohort.protocol.schema import BOOL, BYTES, INT16, INT32, STRING, ArrayOf, Message, f


class JoinGroupRequest(Message):
    API_KEY = 11
    VALID = "0-9"
    FLEXIBLE = "6+"
    SCHEMA = [
        f("group_id", STRING),
        f("session_timeout_ms", INT32),
        f("rebalance_timeout_ms", INT32, "1+", default=-1),
        f("member_id", STRING),
        f("group_instance_id", STRING, "5+", nullable="5+", default=None),
        f("protocol_type", STRING),
        f("protocols", ArrayOf("Protocol", [
            f("name", STRING),
            f("metadata", BYTES),
        ])),
        f("reason", STRING, "8+", nullable="8+", default=None),
    ]


class JoinGroupResponse(Message):
    API_KEY = 11
    VALID = "0-9"
    FLEXIBLE = "6+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "2+"),
        f("error_code", INT16),
        f("generation_id", INT32, default=-1),
        f("protocol_type", STRING, "7+", nullable="7+", default=None),
        f("protocol_name", STRING, nullable="7+"),
        f("leader", STRING),
        f("skip_assignment", BOOL, "9+"),
        f("member_id", STRING),
        f("members", ArrayOf("Member", [
            f("member_id", STRING),
            f("group_instance_id", STRING, "5+", nullable="5+", default=None),
            f("metadata", BYTES),
        ])),
    ]
