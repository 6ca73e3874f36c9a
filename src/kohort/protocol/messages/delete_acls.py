"""DeleteAcls (API key 31), v0-v3: remove ACL bindings matching filters (KIP-140).

Kafka 4.x accepts only v1+; the schema covers v0-v3. v1 adds pattern types (KIP-290); v2 flexible
(KIP-482); v3 the USER resource type (KIP-554).
"""
from kohort.protocol.schema import INT8, INT16, INT32, STRING, ArrayOf, Message, f


class DeleteAclsRequest(Message):
    API_KEY = 31
    VALID = "0-3"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("filters", ArrayOf("DeleteAclsFilter", [
            f("resource_type_filter", INT8),
            f("resource_name_filter", STRING, nullable="0+"),
            f("pattern_type_filter", INT8, "1+", default=3),
            f("principal_filter", STRING, nullable="0+"),
            f("host_filter", STRING, nullable="0+"),
            f("operation", INT8),
            f("permission_type", INT8),
        ])),
    ]


class DeleteAclsResponse(Message):
    API_KEY = 31
    VALID = "0-3"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("filter_results", ArrayOf("DeleteAclsFilterResult", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("matching_acls", ArrayOf("DeleteAclsMatchingAcl", [
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+"),
                f("resource_type", INT8),
                f("resource_name", STRING),
                f("pattern_type", INT8, "1+", default=3),
                f("principal", STRING),
                f("host", STRING),
                f("operation", INT8),
                f("permission_type", INT8),
            ])),
        ])),
    ]

