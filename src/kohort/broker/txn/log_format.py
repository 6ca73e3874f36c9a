"""Records of the `__transaction_state` topic in Kafka's formats (AK TransactionLogKey.json,
TransactionLogValue.json) and which partition holds a transactional id.

* Key: int16 version 0 + TransactionalId (string).
* Value: int16 version + v0 (not flexible): ProducerId i64, ProducerEpoch i16, TransactionTimeoutMs
  i32, TransactionStatus i8, TransactionPartitions nullable [{Topic, [Partition i32]}] (null when
  Empty), TransactionLastUpdateTimestampMs i64, TransactionStartTimestampMs i64; v1 (flexible, KIP-890
  transaction.version >= 1) adds the tagged fields 0 PreviousProducerId, 1 NextProducerId,
  2 ClientTransactionVersion, 3 NextProducerEpoch. kohort writes v1, reads both.
* A null value is a tombstone (the id expired).

`txn_partition(transactional_id, n)` is Kafka's `Utils.abs(transactionalId.hashCode()) % n`.
"""
from __future__ import annotations

from kohort.errors import DecodeError
from kohort.protocol import primitives as P
from kohort.protocol.consumer_offsets import java_string_hash, java_utils_abs
from kohort.protocol.primitives import Reader
from kohort.protocol.schema import INT8, INT16, INT32, INT64, STRING, Array, ArrayOf, Message, f

TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_NUM_PARTITIONS = 50          # transaction.state.log.num.partitions
KEY_VERSION = 0
VALUE_VERSION = 1


class TransactionLogKey(Message):
    VALID = "0"
    FLEXIBLE = "none"
    SCHEMA = [f("transactional_id", STRING)]


class TransactionLogValue(Message):
    VALID = "0-1"
    FLEXIBLE = "1+"
    SCHEMA = [
        f("producer_id", INT64),
        f("previous_producer_id", INT64, "1+", tag=0, default=-1),
        f("next_producer_id", INT64, "1+", tag=1, default=-1),
        f("producer_epoch", INT16),
        f("next_producer_epoch", INT16, "1+", tag=3, default=-1),
        f("transaction_timeout_ms", INT32),
        f("transaction_status", INT8),
        f("transaction_partitions", ArrayOf("PartitionsSchema", [
            f("topic", STRING),
            f("partition_ids", Array(INT32)),
        ]), nullable="0+", default=None),
        f("transaction_last_update_timestamp_ms", INT64),
        f("transaction_start_timestamp_ms", INT64),
        f("client_transaction_version", INT16, "1+", tag=2, default=0),
    ]


def txn_partition(transactional_id: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    return java_utils_abs(java_string_hash(transactional_id)) % num_partitions


def encode_key(transactional_id: str) -> bytes:
    out = bytearray()
    P.w_int16(out, KEY_VERSION)
    TransactionLogKey(transactional_id=transactional_id).encode_into(out, KEY_VERSION)
    return bytes(out)


def encode_value(value: TransactionLogValue | None, version: int = VALUE_VERSION) -> bytes | None:
    if value is None:
        return None
    out = bytearray()
    P.w_int16(out, version)
    value.encode_into(out, version)
    return bytes(out)


def decode_key(data) -> str:
    r = Reader(bytes(data))
    v = r.int16()
    if v != KEY_VERSION:
        raise DecodeError(f"unknown TransactionLogKey version {v}")
    return TransactionLogKey.decode(r, v).transactional_id


def decode_value(data) -> TransactionLogValue | None:
    """None for a tombstone; unknown versions raise DecodeError (the loader skips them, as Kafka)."""
    if data is None:
        return None
    r = Reader(bytes(data))
    v = r.int16()
    if v not in (0, 1):
        raise DecodeError(f"unknown TransactionLogValue version {v}")
    return TransactionLogValue.decode(r, v, exact=False)
