"""ApiVersions (API key 18), v0-v4: which API versions (and features) a broker supports.

v1 adds throttle_time_ms; v3 flexible (KIP-482) with client_software_name/version (KIP-511) and the
tagged supported/finalized features (KIP-584) plus zk_migration_ready (KIP-866); v4 lets
SupportedFeatures.min_version be 0 (KAFKA-17011). The response header stays v0 even in flexible
versions, and since KIP-511 an UNSUPPORTED_VERSION response still fills api_keys.
"""
from kohort.protocol.schema import BOOL, INT16, INT32, INT64, STRING, ArrayOf, Message, f


class ApiVersionsRequest(Message):
    API_KEY = 18
    VALID = "0-4"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("client_software_name", STRING, "3+"),
        f("client_software_version", STRING, "3+"),
    ]


class ApiVersionsResponse(Message):
    API_KEY = 18
    VALID = "0-4"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("error_code", INT16),
        f("api_keys", ArrayOf("ApiVersion", [
            f("api_key", INT16),
            f("min_version", INT16),
            f("max_version", INT16),
        ])),
        f("throttle_time_ms", INT32, "1+"),
        f("supported_features", ArrayOf("SupportedFeatureKey", [
            f("name", STRING, "3+"),
            f("min_version", INT16, "3+"),
            f("max_version", INT16, "3+"),
        ]), "3+", tag=0),
        f("finalized_features_epoch", INT64, "3+", tag=1, default=-1),
        f("finalized_features", ArrayOf("FinalizedFeatureKey", [
            f("name", STRING, "3+"),
            f("max_version_level", INT16, "3+"),
            f("min_version_level", INT16, "3+"),
        ]), "3+", tag=2),
        f("zk_migration_ready", BOOL, "3+", tag=3, default=False),
    ]

