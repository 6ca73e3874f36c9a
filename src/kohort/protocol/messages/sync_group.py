"""SyncGroup (API key 14), v0-v5. The leader hands out assignments; every member gets its own.

v1 adds throttle_time_ms; v3 group_instance_id (KIP-345); v4 first flexible version (KIP-482);
v5 protocol_type/protocol_name both ways, checked by the broker (KIP-559).
"""
from kohort.protocol.schema import BYTES, INT16, INT32, STRING, ArrayOf, Message, f


class SyncGroupRequest(Message):
    API_KEY = 14
    VALID = "0-5"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("group_id", STRING),
        f("generation_id", INT32),
        f("member_id", STRING),
        f("group_instance_id", STRING, "3+", nullable="3+", default=None),
        f("protocol_type", STRING, "5+", nullable="5+", default=None),
        f("protocol_name", STRING, "5+", nullable="5+", default=None),
        f("assignments", ArrayOf("Assignment", [
            f("member_id", STRING),
            f("assignment", BYTES),
        ])),
    ]


class SyncGroupResponse(Message):
    API_KEY = 14
    VALID = "0-5"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16),
        f("protocol_type", STRING, "5+", nullable="5+", default=None),
        f("protocol_name", STRING, "5+", nullable="5+", default=None),
        f("assignment", BYTES),
    ]


class LenientSyncGroupResponse(Message):
    """SyncGroupResponse whose assignment may be null: librdkafka's mock cluster sends null to a
    member the leader gave nothing; kohort's client decodes SyncGroup answers with this class and
    reads that as an empty assignment."""

    API_KEY = SyncGroupResponse.API_KEY
    VALID = SyncGroupResponse.VALID
    FLEXIBLE = SyncGroupResponse.FLEXIBLE
    SCHEMA = [fl for fl in SyncGroupResponse.SCHEMA if fl.name != "assignment"] + [
        f("assignment", BYTES, nullable="0+", default=b"")]
