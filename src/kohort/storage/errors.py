"""Exceptions raised by kohort.storage, each carrying the Kafka error code the broker answers with.

They subclass KohortError; `error_code` is Kafka's code as a kohort.errors.ErrorCode member (an int)
and `error_name` its name, so the broker maps them to responses without knowing the storage internals.
"""
from __future__ import annotations

from kohort.errors import ErrorCode, KohortError


class StorageError(KohortError):
    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    @property
    def error_name(self) -> str:
        return self.error_code.name


class OffsetOutOfRangeError(StorageError):
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptRecordError(StorageError):
    error_code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(StorageError):
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class MessageTooLargeError(StorageError):
    error_code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidTopicError(StorageError):
    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION


class InvalidTimestampError(StorageError):
    error_code = ErrorCode.INVALID_TIMESTAMP


class TopicAlreadyExistsError(StorageError):
    error_code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(StorageError):
    error_code = ErrorCode.INVALID_PARTITIONS


class InvalidConfigError(StorageError, ValueError):
    error_code = ErrorCode.INVALID_CONFIG


class KafkaStorageError(StorageError):
    """A disk operation failed (Kafka's KAFKA_STORAGE_ERROR); the log is no longer usable."""
    error_code = ErrorCode.KAFKA_STORAGE_ERROR
