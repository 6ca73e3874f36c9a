"""DeleteGroups (API key 42), v0-v2. Delete empty groups and their offsets (KIP-229).

v1 same as v0 (responses sent before throttling); v2 first flexible version (KIP-482).
"""
from kohort.protocol.schema import INT16, INT32, STRING, Array, ArrayOf, Message, f


class DeleteGroupsRequest(Message):
    API_KEY = 42
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("groups_names", Array(STRING)),
    ]


class DeleteGroupsResponse(Message):
    API_KEY = 42
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("results", ArrayOf("DeletableGroupResult", [
            f("group_id", STRING),
            f("error_code", INT16),
        ])),
    ]
