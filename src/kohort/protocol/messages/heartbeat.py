"""Heartbeat (API key 12), v0-v4. A classic-group member says it is alive in its generation.

v1 adds throttle_time_ms to the response; v2 same as v1 (responses sent before throttling);
v3 group_instance_id (KIP-345); v4 first flexible version (KIP-482).
"""
from kohort.protocol.schema import INT16, INT32, STRING, Message, f


class HeartbeatRequest(Message):
    API_KEY = 12
    VALID = "0-4"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("group_id", STRING),
        f("generation_id", INT32),
        f("member_id", STRING),
        f("group_instance_id", STRING, "3+", nullable="3+", default=None),
    ]


class HeartbeatResponse(Message):
    API_KEY = 12
    VALID = "0-4"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16),
    ]
