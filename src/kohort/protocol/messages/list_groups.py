"""ListGroups (API key 16), v0-v5. The groups a broker coordinates.

v1 adds throttle_time_ms; v3 first flexible version (KIP-482); v4 states_filter / group_state
(KIP-518); v5 types_filter / group_type (KIP-848).
"""
from kohort.protocol.schema import INT16, INT32, STRING, Array, ArrayOf, Message, f


class ListGroupsRequest(Message):
    API_KEY = 16
    VALID = "0-5"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("states_filter", Array(STRING), "4+"),
        f("types_filter", Array(STRING), "5+"),
    ]


class ListGroupsResponse(Message):
    API_KEY = 16
    VALID = "0-5"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16),
        f("groups", ArrayOf("ListedGroup", [
            f("group_id", STRING),
            f("protocol_type", STRING),
            f("group_state", STRING, "4+"),
            f("group_type", STRING, "5+"),
        ])),
    ]
