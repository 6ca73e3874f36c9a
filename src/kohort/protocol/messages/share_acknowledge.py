"""ShareAcknowledge (API key 79), v1-v2, flexible. Acknowledges records a share group member
acquired (KIP-932) without fetching more: per partition, batches of offset ranges with one
acknowledge type for the range or one per offset (0 GAP, 1 ACCEPT, 2 RELEASE, 3 REJECT, 4 RENEW).
Epoch -1 closes the share session after applying the acknowledgements.

v2 (Kafka 4.2, KIP-1222) adds IsRenewAck to the request and AcquisitionLockTimeoutMs to the response.
"""
from kohort.protocol.schema import BOOL, INT8, INT16, INT32, INT64, STRING, UUID, Array, ArrayOf, Message, Struct, f


class ShareAcknowledgeRequest(Message):
    API_KEY = 79
    VALID = "1-2"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("group_id", STRING, nullable="0+", default=None),
        f("member_id", STRING, nullable="0+", default=None),
        f("share_session_epoch", INT32),
        f("is_renew_ack", BOOL, "2+"),
        f("topics", ArrayOf("AcknowledgeTopic", [
            f("topic_id", UUID),
            f("partitions", ArrayOf("AcknowledgePartition", [
                f("partition_index", INT32),
                f("acknowledgement_batches", ArrayOf("AcknowledgementBatch", [
                    f("first_offset", INT64),
                    f("last_offset", INT64),
                    f("acknowledge_types", Array(INT8)),
                ])),
            ])),
        ])),
    ]


class ShareAcknowledgeResponse(Message):
    API_KEY = 79
    VALID = "1-2"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("error_message", STRING, nullable="0+", default=None),
        f("acquisition_lock_timeout_ms", INT32, "2+"),
        f("responses", ArrayOf("ShareAcknowledgeTopicResponse", [
            f("topic_id", UUID),
            f("partitions", ArrayOf("PartitionData", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+", default=None),
                f("current_leader", Struct("LeaderIdAndEpoch", [
                    f("leader_id", INT32),
                    f("leader_epoch", INT32),
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
