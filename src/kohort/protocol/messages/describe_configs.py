"""DescribeConfigs (API key 32), v0-v4: read broker/topic configuration entries (KIP-133).

Kafka 4.x accepts only v1+; the schema covers v0-v4. v1 adds include_synonyms, config_source and synonyms
and drops is_default (KIP-226); v3 include_documentation, config_type and documentation (KIP-569);
v4 flexible (KIP-482).
"""
from kohort.protocol.schema import BOOL, INT8, INT16, INT32, STRING, Array, ArrayOf, Message, f


class DescribeConfigsRequest(Message):
    API_KEY = 32
    VALID = "0-4"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("resources", ArrayOf("DescribeConfigsResource", [
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("configuration_keys", Array(STRING), nullable="0+"),
        ])),
        f("include_synonyms", BOOL, "1+", default=False),
        f("include_documentation", BOOL, "3+", default=False),
    ]


class DescribeConfigsResponse(Message):
    API_KEY = 32
    VALID = "0-4"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("results", ArrayOf("DescribeConfigsResult", [
            f("error_code", INT16),
            f("error_message", STRING, nullable="0+"),
            f("resource_type", INT8),
            f("resource_name", STRING),
            f("configs", ArrayOf("DescribeConfigsResourceResult", [
                f("name", STRING),
                f("value", STRING, nullable="0+"),
                f("read_only", BOOL),
                f("config_source", INT8, "1+", default=-1),
                f("is_default", BOOL, "0"),
                f("is_sensitive", BOOL),
                f("synonyms", ArrayOf("DescribeConfigsSynonym", [
                    f("name", STRING, "1+"),
                    f("value", STRING, "1+", nullable="0+"),
                    f("source", INT8, "1+"),
                ]), "1+"),
                f("config_type", INT8, "3+"),
                f("documentation", STRING, "3+", nullable="0+"),
            ])),
        ])),
    ]

