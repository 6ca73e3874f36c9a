"""Fetch (API key 1), v0-v18: read record batches from a partition leader (or follower, KIP-392).

Kafka 4.x accepts only v4+; the schema covers v0-v18. v1 adds throttle_time_ms; v3 max_bytes; v4
isolation_level, last_stable_offset and aborted_transactions (KIP-98); v5 log_start_offset; v7 fetch
sessions and forgotten_topics_data (KIP-227); v9 current_leader_epoch (KIP-320); v10 allows ZStandard
(KIP-110); v11 rack_id and preferred_read_replica (KIP-392); v12 flexible (KIP-482) with last_fetched_epoch,
and the tagged diverging_epoch/current_leader/snapshot_id (KIP-595) and cluster_id; v13 topic IDs (KIP-516);
v14 OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405); v15 replica_state replaces replica_id (KIP-903); v16
node_endpoints (KIP-951); v17 replica_directory_id (KIP-853); v18 high_watermark in the request (KIP-1166).
"""
from kohort.protocol.schema import (INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, Array, ArrayOf, Message,
                                    Struct, f)


class FetchRequest(Message):
    API_KEY = 1
    VALID = "0-18"
    FLEXIBLE = "12+"
    SCHEMA = [
        f("cluster_id", STRING, "12+", nullable="12+", tag=0, default=None),
        f("replica_id", INT32, "0-14", default=-1),
        f("replica_state", Struct("ReplicaState", [
            f("replica_id", INT32, "15+", default=-1),
            f("replica_epoch", INT64, "15+", default=-1),
        ]), "15+", tag=1),
        f("max_wait_ms", INT32),
        f("min_bytes", INT32),
        f("max_bytes", INT32, "3+", default=0x7FFFFFFF),
        f("isolation_level", INT8, "4+"),
        f("session_id", INT32, "7+"),
        f("session_epoch", INT32, "7+", default=-1),
        f("topics", ArrayOf("FetchTopic", [
            f("topic", STRING, "0-12"),
            f("topic_id", UUID, "13+"),
            f("partitions", ArrayOf("FetchPartition", [
                f("partition", INT32),
                f("current_leader_epoch", INT32, "9+", default=-1),
                f("fetch_offset", INT64),
                f("last_fetched_epoch", INT32, "12+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("partition_max_bytes", INT32),
                f("replica_directory_id", UUID, "17+", tag=0),
                f("high_watermark", INT64, "18+", tag=1, default=(1 << 63) - 1),
            ])),
        ])),
        f("forgotten_topics_data", ArrayOf("ForgottenTopic", [
            f("topic", STRING, "7-12"),
            f("topic_id", UUID, "13+"),
            f("partitions", Array(INT32), "7+"),
        ]), "7+"),
        f("rack_id", STRING, "11+"),
    ]


class FetchResponse(Message):
    API_KEY = 1
    VALID = "0-18"
    FLEXIBLE = "12+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16, "7+"),
        f("session_id", INT32, "7+"),
        f("responses", ArrayOf("FetchableTopicResponse", [
            f("topic", STRING, "0-12"),
            f("topic_id", UUID, "13+"),
            f("partitions", ArrayOf("PartitionData", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("high_watermark", INT64),
                f("last_stable_offset", INT64, "4+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("diverging_epoch", Struct("EpochEndOffset", [
                    f("epoch", INT32, "12+", default=-1),
                    f("end_offset", INT64, "12+", default=-1),
                ]), "12+", tag=0),
                f("current_leader", Struct("LeaderIdAndEpoch", [
                    f("leader_id", INT32, "12+", default=-1),
                    f("leader_epoch", INT32, "12+", default=-1),
                ]), "12+", tag=1),
                f("snapshot_id", Struct("SnapshotId", [
                    f("end_offset", INT64, default=-1),
                    f("epoch", INT32, default=-1),
                ]), "12+", tag=2),
                f("aborted_transactions", ArrayOf("AbortedTransaction", [
                    f("producer_id", INT64, "4+"),
                    f("first_offset", INT64, "4+"),
                ]), "4+", nullable="4+"),
                f("preferred_read_replica", INT32, "11+", default=-1),
                f("records", RECORDS, nullable="0+"),
            ])),
        ])),
        f("node_endpoints", ArrayOf("NodeEndpoint", [
            f("node_id", INT32, "16+"),
            f("host", STRING, "16+"),
            f("port", INT32, "16+"),
            f("rack", STRING, "16+", nullable="16+", default=None),
        ]), "16+", tag=0),
    ]

