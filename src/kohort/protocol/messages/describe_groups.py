"""DescribeGroups (API key 15), v0-v6. State, protocol and members of classic groups.

v1 adds throttle_time_ms; v3 include_authorized_operations / authorized_operations (KIP-430);
v4 members' group_instance_id (KIP-345); v5 first flexible version (KIP-482); v6 error_message and
GROUP_ID_NOT_FOUND for unknown groups (KIP-1043).
"""
from kohort.protocol.schema import BOOL, BYTES, INT16, INT32, STRING, Array, ArrayOf, Message, f

AUTHORIZED_OPERATIONS_OMITTED = -2147483648   # Integer.MIN_VALUE: "not requested"


class DescribeGroupsRequest(Message):
    API_KEY = 15
    VALID = "0-6"
    FLEXIBLE = "5+"
    SCHEMA = [
        f("groups", Array(STRING)),
        f("include_authorized_operations", BOOL, "3+"),
    ]


class DescribeGroupsResponse(Message):
    API_KEY = 15
    VALID = "0-6"
    FLEXIBLE = "5+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("groups", ArrayOf("DescribedGroup", [
            f("error_code", INT16),
            f("error_message", STRING, "6+", nullable="6+", default=None),
            f("group_id", STRING),
            f("group_state", STRING),
            f("protocol_type", STRING),
            f("protocol_data", STRING),
            f("members", ArrayOf("DescribedGroupMember", [
                f("member_id", STRING),
                f("group_instance_id", STRING, "4+", nullable="4+", default=None),
                f("client_id", STRING),
                f("client_host", STRING),
                f("member_metadata", BYTES),
                f("member_assignment", BYTES),
            ])),
            f("authorized_operations", INT32, "3+", default=AUTHORIZED_OPERATIONS_OMITTED),
        ])),
    ]
