"""Exceptions raised by kohort.storage, each carrying the Kafka error code the broker answers with.

They subclass KohortError; `error_code` is Kafka's numeric code and `error_name` its name, so the
broker maps them to responses without knowing the storage internals.
"""
from __future__ import annotations

from kohort.errors import KohortError


class StorageError(KohortError):
    error_code = -1
    error_name = "UNKNOWN_SERVER_ERROR"


class OffsetOutOfRangeError(StorageError):
    error_code = 1
    error_name = "OFFSET_OUT_OF_RANGE"


class CorruptRecordError(StorageError):
    error_code = 2
    error_name = "CORRUPT_MESSAGE"


class UnknownTopicOrPartitionError(StorageError):
    error_code = 3
    error_name = "UNKNOWN_TOPIC_OR_PARTITION"


class MessageTooLargeError(StorageError):
    error_code = 10
    error_name = "MESSAGE_TOO_LARGE"


class InvalidTopicError(StorageError):
    error_code = 17
    error_name = "INVALID_TOPIC_EXCEPTION"


class InvalidTimestampError(StorageError):
    error_code = 32
    error_name = "INVALID_TIMESTAMP"


class TopicAlreadyExistsError(StorageError):
    error_code = 36
    error_name = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(StorageError):
    error_code = 37
    error_name = "INVALID_PARTITIONS"


class InvalidConfigError(StorageError, ValueError):
    error_code = 40
    error_name = "INVALID_CONFIG"


class KafkaStorageError(StorageError):
    """A disk operation failed (Kafka's KAFKA_STORAGE_ERROR); the log is no longer usable."""
    error_code = 56
    error_name = "KAFKA_STORAGE_ERROR"
