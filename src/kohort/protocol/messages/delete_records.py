"""DeleteRecords (API key 21), v0-v2: move a partition's log start offset forward (KIP-107).

v1 is v0 with throttle-before-response semantics; v2 is flexible (KIP-482).
"""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, ArrayOf, Message, f


class DeleteRecordsRequest(Message):
    API_KEY = 21
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("topics", ArrayOf("DeleteRecordsTopic", [
            f("name", STRING),
            f("partitions", ArrayOf("DeleteRecordsPartition", [
                f("partition_index", INT32),
                f("offset", INT64),
            ])),
        ])),
        f("timeout_ms", INT32),
    ]


class DeleteRecordsResponse(Message):
    API_KEY = 21
    VALID = "0-2"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("topics", ArrayOf("DeleteRecordsTopicResult", [
            f("name", STRING),
            f("partitions", ArrayOf("DeleteRecordsPartitionResult", [
                f("partition_index", INT32),
                f("low_watermark", INT64),
                f("error_code", INT16),
            ])),
        ])),
    ]

