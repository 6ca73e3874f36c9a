"""InitProducerId (API key 22), v0-v6: get a producer id/epoch for idempotence or transactions (KIP-98).

v2 is flexible (KIP-482); v3 adds producer_id/producer_epoch so a producer can bump its epoch (KIP-360);
v4 may return PRODUCER_FENCED (KIP-588); v5 TRANSACTION_ABORTABLE (KIP-890); v6 two-phase commit
fields enable_2pc/keep_prepared_txn and the ongoing_txn_* response fields (KIP-939).
"""
from kohort.protocol.schema import BOOL, INT16, INT32, INT64, STRING, Message, f


class InitProducerIdRequest(Message):
    API_KEY = 22
    VALID = "0-6"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("transactional_id", STRING, nullable="0+"),
        f("transaction_timeout_ms", INT32),
        f("producer_id", INT64, "3+", default=-1),
        f("producer_epoch", INT16, "3+", default=-1),
        f("enable_2pc", BOOL, "6+", default=False),
        f("keep_prepared_txn", BOOL, "6+", default=False),
    ]


class InitProducerIdResponse(Message):
    API_KEY = 22
    VALID = "0-6"
    FLEXIBLE = "2+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("producer_id", INT64, default=-1),
        f("producer_epoch", INT16),
        f("ongoing_txn_producer_id", INT64, "6+", default=-1),
        f("ongoing_txn_producer_epoch", INT16, "6+", default=-1),
    ]

