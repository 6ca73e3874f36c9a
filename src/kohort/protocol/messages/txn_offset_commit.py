"""TxnOffsetCommit (API key 28), v0-v5. Commit offsets inside a transaction (KIP-98).

v2 adds committed_leader_epoch (KIP-320); v3 generation_id/member_id/group_instance_id for fencing
zombie members (KIP-447) and the first flexible version (KIP-482); v4 may return TRANSACTION_ABORTABLE
(KIP-890); v5 same as v4 but implies AddOffsetsToTxn under transactions V2 (KIP-890 part 2).
"""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, ArrayOf, Message, f


class TxnOffsetCommitRequest(Message):
    API_KEY = 28
    VALID = "0-5"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("transactional_id", STRING),
        f("group_id", STRING),
        f("producer_id", INT64),
        f("producer_epoch", INT16),
        f("generation_id", INT32, "3+", default=-1),
        f("member_id", STRING, "3+"),
        f("group_instance_id", STRING, "3+", nullable="3+", default=None),
        f("topics", ArrayOf("Topic", [
            f("name", STRING),
            f("partitions", ArrayOf("Partition", [
                f("partition_index", INT32),
                f("committed_offset", INT64),
                f("committed_leader_epoch", INT32, "2+", default=-1),
                f("committed_metadata", STRING, nullable="0+"),
            ])),
        ])),
    ]


class TxnOffsetCommitResponse(Message):
    API_KEY = 28
    VALID = "0-5"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("topics", ArrayOf("Topic", [
            f("name", STRING),
            f("partitions", ArrayOf("Partition", [
                f("partition_index", INT32),
                f("error_code", INT16),
            ])),
        ])),
    ]
