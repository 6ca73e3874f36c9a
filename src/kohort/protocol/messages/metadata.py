"""Metadata (API key 3), v0-v13: brokers, controller, topics and partition leaders.

In v0 an empty topic list means all topics; from v1 null means all topics and empty means none. v1 adds
rack, controller_id and is_internal; v2 cluster_id (KIP-78); v3 throttle_time_ms; v4
allow_auto_topic_creation; v5 offline_replicas (KIP-112); v7 leader_epoch (KIP-320); v8 authorized
operations (KIP-430); v9 flexible (KIP-482); v10 topic IDs (KIP-516); v11 drops cluster authorized
operations in favour of DescribeCluster (KIP-700); v12 nullable topic names for ID lookups; v13 a
top-level error_code.
"""
from kohort.protocol.schema import BOOL, INT16, INT32, STRING, UUID, Array, ArrayOf, Message, f


class MetadataRequest(Message):
    API_KEY = 3
    VALID = "0-13"
    FLEXIBLE = "9+"
    SCHEMA = [
        f("topics", ArrayOf("MetadataRequestTopic", [
            f("topic_id", UUID, "10+"),
            f("name", STRING, nullable="10+"),
        ]), nullable="1+"),
        f("allow_auto_topic_creation", BOOL, "4+", default=True),
        f("include_cluster_authorized_operations", BOOL, "8-10"),
        f("include_topic_authorized_operations", BOOL, "8+"),
    ]


class MetadataResponse(Message):
    API_KEY = 3
    VALID = "0-13"
    FLEXIBLE = "9+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "3+"),
        f("brokers", ArrayOf("MetadataResponseBroker", [
            f("node_id", INT32),
            f("host", STRING),
            f("port", INT32),
            f("rack", STRING, "1+", nullable="1+", default=None),
        ])),
        f("cluster_id", STRING, "2+", nullable="2+", default=None),
        f("controller_id", INT32, "1+", default=-1),
        f("topics", ArrayOf("MetadataResponseTopic", [
            f("error_code", INT16),
            f("name", STRING, nullable="12+"),
            f("topic_id", UUID, "10+"),
            f("is_internal", BOOL, "1+", default=False),
            f("partitions", ArrayOf("MetadataResponsePartition", [
                f("error_code", INT16),
                f("partition_index", INT32),
                f("leader_id", INT32),
                f("leader_epoch", INT32, "7+", default=-1),
                f("replica_nodes", Array(INT32)),
                f("isr_nodes", Array(INT32)),
                f("offline_replicas", Array(INT32), "5+"),
            ])),
            f("topic_authorized_operations", INT32, "8+", default=-2147483648),
        ])),
        f("cluster_authorized_operations", INT32, "8-10", default=-2147483648),
        f("error_code", INT16, "13+"),
    ]

