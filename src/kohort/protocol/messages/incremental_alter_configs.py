"""IncrementalAlterConfigs (API key 44), v0-v1: set/delete/append/subtract single configs (KIP-339).

config_operation: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT. v1 is flexible (KIP-482).
"""
from kohort.protocol.schema import BOOL, INT8, INT16, INT32, STRING, ArrayOf, Message, f


class IncrementalAlterConfigsRequest(Message):
    API_KEY = 44
    VALID = "0-1"
    FLEXIBLE = "1+"
    SCHEMA = [
        f("resources", ArrayOf("AlterConfigsResource", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("configs", ArrayOf("AlterableConfig", [
                f("name", STRING),
                f("config_operation", INT8),
                f("value", STRING, nullable="0+"),
            ])),
        ])),
        f("validate_only", BOOL),
    ]


class IncrementalAlterConfigsResponse(Message):
    API_KEY = 44
    VALID = "0-1"
    FLEXIBLE = "1+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("responses", ArrayOf("AlterConfigsResourceResponse", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("resource_type", INT8),
            f("resource_name", STRING),
        ])),
    ]

