"""LeaveGroup (API key 13), v0-v5. Members leave a classic group.

v1 adds throttle_time_ms; v3 batches members with group_instance_id (KIP-345), replacing the single
member_id, and returns a per-member error; v4 first flexible version (KIP-482); v5 reason (KIP-800).
"""
from kohort.protocol.schema import INT16, INT32, STRING, ArrayOf, Message, f


class LeaveGroupRequest(Message):
    API_KEY = 13
    VALID = "0-5"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("group_id", STRING),
        f("member_id", STRING, "0-2"),
        f("members", ArrayOf("MemberIdentity", [
            f("member_id", STRING, "3+"),
            f("group_instance_id", STRING, "3+", nullable="3+", default=None),
            f("reason", STRING, "5+", nullable="5+", default=None),
        ]), "3+"),
    ]


class LeaveGroupResponse(Message):
    API_KEY = 13
    VALID = "0-5"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16),
        f("members", ArrayOf("MemberResponse", [
            f("member_id", STRING, "3+"),
            f("group_instance_id", STRING, "3+", nullable="3+"),
            f("error_code", INT16, "3+"),
        ]), "3+"),
    ]
