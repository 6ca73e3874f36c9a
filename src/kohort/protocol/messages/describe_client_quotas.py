"""DescribeClientQuotas (API key 48), v0-v1: read client quota entries (KIP-546).

v1 is flexible (KIP-482). Its presence in ApiVersions is how aiokafka 0.12 infers "broker >= 2.6".
"""
from kohort.protocol.schema import BOOL, FLOAT64, INT8, INT16, INT32, STRING, ArrayOf, Message, f


class DescribeClientQuotasRequest(Message):
    API_KEY = 48
    VALID = "0-1"
    FLEXIBLE = "1+"
    SCHEMA = [
        f("components", ArrayOf("ComponentData", [
            f("entity_type", STRING),
            f("match_type", INT8),
            f("match", STRING, nullable="0+"),
        ])),
        f("strict", BOOL),
    ]


class DescribeClientQuotasResponse(Message):
    API_KEY = 48
    VALID = "0-1"
    FLEXIBLE = "1+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+"),
        f("entries", ArrayOf("EntryData", [
            f("entity", ArrayOf("EntityData", [
                f("entity_type", STRING),
                f("entity_name", STRING, nullable="0+"),
            ])),
            f("values", ArrayOf("ValueData", [
                f("key", STRING),
                f("value", FLOAT64),
            ])),
        ]), nullable="0+"),
    ]

