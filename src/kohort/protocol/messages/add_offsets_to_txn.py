"""AddOffsetsToTxn (API key 25), v0-v4. Tie a group's offset commits to a transaction (KIP-98).

v2 may return PRODUCER_FENCED (KIP-588); v3 first flexible version (KIP-482); v4 may return
TRANSACTION_ABORTABLE (KIP-890).
"""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, Message, f


class AddOffsetsToTxnRequest(Message):
    API_KEY = 25
    VALID = "0-4"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("transactional_id", STRING),
        f("producer_id", INT64),
        f("producer_epoch", INT16),
        f("group_id", STRING),
    ]


class AddOffsetsToTxnResponse(Message):
    API_KEY = 25
    VALID = "0-4"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
    ]
