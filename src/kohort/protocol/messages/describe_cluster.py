"""DescribeCluster (API key 60), v0-v2: cluster id, controller and brokers for admin clients (KIP-700).

Flexible from v0. v1 adds endpoint_type (1 brokers, 2 controllers; KIP-919); v2 include_fenced_brokers
and is_fenced (KIP-1073).
"""
from kohort.protocol.schema import BOOL, INT8, INT16, INT32, STRING, ArrayOf, Message, f


class DescribeClusterRequest(Message):
    API_KEY = 60
    VALID = "0-2"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("include_cluster_authorized_operations", BOOL),
        f("endpoint_type", INT8, "1+", default=1),
        f("include_fenced_brokers", BOOL, "2+"),
    ]


class DescribeClusterResponse(Message):
    API_KEY = 60
    VALID = "0-2"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", default=None),
        f("endpoint_type", INT8, "1+", default=1),
        f("cluster_id", STRING),
        f("controller_id", INT32, default=-1),
        f("brokers", ArrayOf("DescribeClusterBroker", [
            f("broker_id", INT32),
            f("host", STRING),
            f("port", INT32),
            f("rack", STRING, nullable="0+", default=None),
            f("is_fenced", BOOL, "2+"),
        ])),
        f("cluster_authorized_operations", INT32, default=-2147483648),
    ]

