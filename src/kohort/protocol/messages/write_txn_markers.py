"""WriteTxnMarkers (API key 27), v0-v2. Coordinator-to-leader: write commit/abort markers (KIP-98).

v1 first flexible version (KIP-482); Kafka 4.x brokers accept v1+ only (KIP-896); v2 adds the marker's
transaction_version (KIP-1228).
"""
from kohort.protocol.schema import BOOL, INT8, INT16, INT32, INT64, STRING, Array, ArrayOf, Message, f


class WriteTxnMarkersRequest(Message):
    API_KEY = 27
    VALID = "0-2"
    FLEXIBLE = "1+"
    SCHEMA = [
        f("markers", ArrayOf("WritableTxnMarker", [
            f("producer_id", INT64),
            f("producer_epoch", INT16),
            f("transaction_result", BOOL),
            f("topics", ArrayOf("WritableTxnMarkerTopic", [
                f("name", STRING),
                f("partition_indexes", Array(INT32)),
            ])),
            f("coordinator_epoch", INT32),
            f("transaction_version", INT8, "2+"),
        ])),
    ]


class WriteTxnMarkersResponse(Message):
    API_KEY = 27
    VALID = "0-2"
    FLEXIBLE = "1+"
    SCHEMA = [
        f("markers", ArrayOf("WritableTxnMarkerResult", [
            f("producer_id", INT64),
            f("topics", ArrayOf("WritableTxnMarkerTopicResult", [
                f("name", STRING),
                f("partitions", ArrayOf("WritableTxnMarkerPartitionResult", [
                    f("partition_index", INT32),
                    f("error_code", INT16),
                ])),
            ])),
        ])),
    ]
