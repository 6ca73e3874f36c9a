"""DescribeTransactions (API key 65), v0 (KIP-664): the coordinator's state of transactional ids."""
from kohort.protocol.schema import INT16, INT32, INT64, STRING, Array, ArrayOf, Message, f


class DescribeTransactionsRequest(Message):
    API_KEY = 65
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [f("transactional_ids", Array(STRING))]


class DescribeTransactionsResponse(Message):
    API_KEY = 65
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("transaction_states", ArrayOf("TransactionState", [
            f("error_code", INT16),
            f("transactional_id", STRING),
            f("transaction_state", STRING),
            f("transaction_timeout_ms", INT32),
            f("transaction_start_time_ms", INT64),
            f("producer_id", INT64),
            f("producer_epoch", INT16),
            f("topics", ArrayOf("TopicData", [
                f("name", STRING),
                f("partition_indexes", Array(INT32)),
            ])),
        ])),
    ]
