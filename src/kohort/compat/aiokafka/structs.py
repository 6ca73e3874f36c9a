"""aiokafka 0.14's value types: TopicPartition (a named tuple of topic and partition, equal to and
hashing as kohort's),
OffsetAndMetadata (offset, metadata), OffsetAndTimestamp (offset, timestamp), RecordMetadata and the
ConsumerRecord dataclass, with the fields and order aiokafka gives them."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple



class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int | None


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int | None
    timestamp_type: int
    log_start_offset: int | None


@dataclass
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    headers: Sequence[tuple[str, bytes]]


__all__ = ["ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp", "RecordMetadata", "TopicPartition"]
