"""DescribeProducers (API key 61), v0 (KIP-664): the active producers of partitions, as the
partition leader's producer state holds them (ProducerEpoch is int32 on the wire)."""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, Array, ArrayOf, Message, f


class DescribeProducersRequest(Message):
    API_KEY = 61
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("topics", ArrayOf("TopicRequest", [
            f("name", STRING),
            f("partition_indexes", Array(INT32)),
        ])),
    ]


class DescribeProducersResponse(Message):
    API_KEY = 61
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("topics", ArrayOf("TopicResponse", [
            f("name", STRING),
            f("partitions", ArrayOf("PartitionResponse", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("error_message", STRING, nullable="0+", default=None),
                f("active_producers", ArrayOf("ProducerState", [
                    f("producer_id", INT64),
                    f("producer_epoch", INT32),
                    f("last_sequence", INT32, default=-1),
                    f("last_timestamp", INT64, default=-1),
                    f("coordinator_epoch", INT32),
                    f("current_txn_start_offset", INT64, default=-1),
                ])),
            ])),
        ])),
    ]
