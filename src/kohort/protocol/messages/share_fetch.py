"""ShareFetch (API key 78), v1-v2, flexible. Fetches records for a share group member from the
partition leader (KIP-932): the leader acquires records for the member under a time-limited lock and
answers the record batches plus the acquired offset ranges with their delivery counts;
acknowledgements of earlier deliveries ride on the same request. Share sessions: epoch 0 opens one,
-1 closes it, otherwise the epoch increments per request.

v2 (Kafka 4.2) adds ShareAcquireMode (KIP-1206: 0 batch_optimized, 1 record_limit) and IsRenewAck
(KIP-1222: acknowledgement type 4 RENEW present; the fetch limits must then all be 0).
Acknowledge types: 0 GAP, 1 ACCEPT, 2 RELEASE, 3 REJECT, 4 RENEW.
"""
from kohort.protocol.schema import (BOOL, INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, Array,
                                    ArrayOf, Message, Struct, f)

ACQUIRE_MODE_BATCH_OPTIMIZED = 0
ACQUIRE_MODE_RECORD_LIMIT = 1

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

_ACK_BATCH = [
    f("first_offset", INT64),
    f("last_offset", INT64),
    f("acknowledge_types", Array(INT8)),
]


class ShareFetchRequest(Message):
    API_KEY = 78
    VALID = "1-2"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("group_id", STRING, nullable="0+", default=None),
        f("member_id", STRING, nullable="0+", default=None),
        f("share_session_epoch", INT32),
        f("max_wait_ms", INT32),
        f("min_bytes", INT32),
        f("max_bytes", INT32, default=0x7FFFFFFF),
        f("max_records", INT32, "1+"),
        f("batch_size", INT32, "1+"),
        f("share_acquire_mode", INT8, "2+"),
        f("is_renew_ack", BOOL, "2+"),
        f("topics", ArrayOf("FetchTopic", [
            f("topic_id", UUID),
            f("partitions", ArrayOf("FetchPartition", [
                f("partition_index", INT32),
                f("acknowledgement_batches", ArrayOf("AcknowledgementBatch", _ACK_BATCH)),
            ])),
        ])),
        f("forgotten_topics_data", ArrayOf("ForgottenTopic", [
            f("topic_id", UUID),
            f("partitions", Array(INT32)),
        ])),
    ]


class ShareFetchResponse(Message):
    API_KEY = 78
    VALID = "1-2"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", default=None),
        f("acquisition_lock_timeout_ms", INT32, "1+"),
        f("responses", ArrayOf("ShareFetchableTopicResponse", [
            f("topic_id", UUID),
            f("partitions", ArrayOf("PartitionData", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+", default=None),
                f("acknowledge_error_code", INT16),
                f("acknowledge_error_message", STRING, nullable="0+", default=None),
                f("current_leader", Struct("LeaderIdAndEpoch", [
                    f("leader_id", INT32),
                    f("leader_epoch", INT32),
                ])),
                f("records", RECORDS, nullable="0+"),
                f("acquired_records", ArrayOf("AcquiredRecords", [
                    f("first_offset", INT64),
                    f("last_offset", INT64),
                    f("delivery_count", INT16),
                ])),
            ])),
        ])),
        f("node_endpoints", ArrayOf("NodeEndpoint", [
            f("node_id", INT32),
            f("host", STRING),
            f("port", INT32),
            f("rack", STRING, nullable="0+", default=None),
        ])),
    ]
