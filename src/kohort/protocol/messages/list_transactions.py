"""ListTransactions (API key 66), v0-v2 (KIP-664): v1 adds DurationFilter (KIP-994), v2
TransactionalIdPattern (a regular expression, KIP-1152)."""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, Array, ArrayOf, Message, f


class ListTransactionsRequest(Message):
    API_KEY = 66
    VALID = "0-2"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("state_filters", Array(STRING)),
        f("producer_id_filters", Array(INT64)),
        f("duration_filter", INT64, "1+", default=-1),
        f("transactional_id_pattern", STRING, "2+", nullable="2+", default=None),
    ]


class ListTransactionsResponse(Message):
    API_KEY = 66
    VALID = "0-2"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16),
        f("unknown_state_filters", Array(STRING)),
        f("transaction_states", ArrayOf("TransactionState", [
            f("transactional_id", STRING),
            f("producer_id", INT64),
            f("transaction_state", STRING),
        ])),
    ]
