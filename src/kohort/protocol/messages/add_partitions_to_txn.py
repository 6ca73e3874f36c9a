"""AddPartitionsToTxn (API key 24), v0-v5. Add partitions to a producer's ongoing transaction.

v2 may return PRODUCER_FENCED (KIP-588); v3 first flexible version (KIP-482); v4 batches several
transactions with verify_only, used broker-to-coordinator (KIP-890), so the v0-v3 fields are kept
under `v3_and_below_*`; v5 may return TRANSACTION_ABORTABLE (KIP-890). Clients send v3 and below.
"""
from kohort.protocol.schema import BOOL, INT16, INT32, INT64, STRING, Array, ArrayOf, Message, f

_TOPICS = ArrayOf("Topic", [
    f("name", STRING),
    f("partitions", Array(INT32)),
])


class AddPartitionsToTxnRequest(Message):
    API_KEY = 24
    VALID = "0-5"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("transactions", ArrayOf("Transaction", [
            f("transactional_id", STRING, "4+"),
            f("producer_id", INT64, "4+"),
            f("producer_epoch", INT16, "4+"),
            f("verify_only", BOOL, "4+"),
            f("topics", _TOPICS, "4+"),
        ]), "4+"),
        f("v3_and_below_transactional_id", STRING, "0-3"),
        f("v3_and_below_producer_id", INT64, "0-3"),
        f("v3_and_below_producer_epoch", INT16, "0-3"),
        f("v3_and_below_topics", _TOPICS, "0-3"),
    ]


_TOPIC_RESULTS = ArrayOf("TopicResult", [
    f("name", STRING),
    f("results_by_partition", ArrayOf("PartitionResult", [
        f("partition_index", INT32),
        f("partition_error_code", INT16),
    ])),
])


class AddPartitionsToTxnResponse(Message):
    API_KEY = 24
    VALID = "0-5"
    FLEXIBLE = "3+"
    SCHEMA = [
        f("throttle_time_ms", INT32),
        f("error_code", INT16, "4+"),
        f("results_by_transaction", ArrayOf("Result", [
            f("transactional_id", STRING, "4+"),
            f("topic_results", _TOPIC_RESULTS, "4+"),
        ]), "4+"),
        f("results_by_topic_v3_and_below", _TOPIC_RESULTS, "0-3"),
    ]
