"""CreateAcls (API key 30), v0-v3: add ACL bindings (KIP-140).

Kafka 4.x accepts only v1+; the schema covers v0-v3. v1 adds resource_pattern_type (KIP-290); v2 flexible
(KIP-482); v3 the USER resource type (KIP-554).
"""
from kohort.protocol.schema import INT8, INT16, INT32, STRING, ArrayOf, Message, f


class CreateAclsRequest(Message):
    API_KEY = 30
    VALID = "0-3"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("creations", ArrayOf("AclCreation", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("resource_pattern_type", INT8, "1+", default=3),
            f("principal", STRING),
            f("host", STRING),
            f("operation", INT8),
            f("permission_type", INT8),
        ])),
    ]


class CreateAclsResponse(Message):
    API_KEY = 30
    VALID = "0-3"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("results", ArrayOf("AclCreationResult", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
        ])),
    ]

