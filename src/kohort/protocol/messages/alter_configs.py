"""AlterConfigs (API key 33), v0-v2: replace a resource's whole configuration (KIP-133).

v1 is v0 with throttle-before-response semantics; v2 is flexible (KIP-482). Prefer IncrementalAlterConfigs.
"""
from kohort.protocol.schema import BOOL, INT8, INT16, INT32, STRING, ArrayOf, Message, f


class AlterConfigsRequest(Message):
    API_KEY = 33
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("resources", ArrayOf("AlterConfigsResource", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("configs", ArrayOf("AlterableConfig", [
                f("name", STRING),
                f("value", STRING, nullable="0+"),
            ])),
        ])),
        f("validate_only", BOOL),
    ]


class AlterConfigsResponse(Message):
    API_KEY = 33
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("responses", ArrayOf("AlterConfigsResourceResponse", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("resource_type", INT8),
            f("resource_name", STRING),
        ])),
    ]

