"""FindCoordinator (API key 10), v0-v6. Which broker coordinates a group (or transactional id).

v1 key_type (0 group, 1 transaction, 2 share) plus throttle_time_ms/error_message in the response;
v3 first flexible version (KIP-482); v4 batches several keys: `coordinator_keys` in, `coordinators` out
(KIP-699); v5 may return TRANSACTION_ABORTABLE (KIP-890); v6 share-group keys "group:topicId:partition"
(KIP-932).
"""
from kohort.protocol.schema import INT8, INT16, INT32, STRING, Array, ArrayOf, Message, f

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


class FindCoordinatorRequest(Message):
    API_KEY = 10
    VALID = "0-6"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("key", STRING, "0-3"),
        f("key_type", INT8, "1+", default=KEY_TYPE_GROUP),
        f("coordinator_keys", Array(STRING), "4+"),
    ]


class FindCoordinatorResponse(Message):
    API_KEY = 10
    VALID = "0-6"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16, "0-3"),
        f("error_message", STRING, "1-3", nullable="1-3"),
        f("node_id", INT32, "0-3"),
        f("host", STRING, "0-3"),
        f("port", INT32, "0-3"),
        f("coordinators", ArrayOf("Coordinator", [
            f("key", STRING, "4+"),
            f("node_id", INT32, "4+"),
            f("host", STRING, "4+"),
            f("port", INT32, "4+"),
            f("error_code", INT16, "4+"),
            f("error_message", STRING, "4+", nullable="4+"),
        ]), "4+"),
    ]
