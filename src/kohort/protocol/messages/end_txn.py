"""EndTxn (API key 26), v0-v5. Commit or abort a transaction (KIP-98).

v2 may return PRODUCER_FENCED (KIP-588); v3 first flexible version (KIP-482); v4 may return
TRANSACTION_ABORTABLE (KIP-890); v5 bumps the epoch on every transaction and returns the new
producer_id/producer_epoch (KIP-890 part 2).
"""
from kohort.protocol.schema import BOOL, INT16, INT32, INT64, STRING, Message, f


class EndTxnRequest(Message):
    API_KEY = 26
    VALID = "0-5"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("transactional_id", STRING),
        f("producer_id", INT64),
        f("producer_epoch", INT16),
        f("committed", BOOL),
    ]


class EndTxnResponse(Message):
    API_KEY = 26
    VALID = "0-5"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("producer_id", INT64, "5+", default=-1),
        f("producer_epoch", INT16, "5+", default=-1),
    ]
