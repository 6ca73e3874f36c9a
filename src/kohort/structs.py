"""Small value types shared by the client layers: TopicPartition, OffsetAndMetadata, ConsumerRecord,
ConsumerGroupMetadata.

They are deliberately plain: TopicPartition is a named tuple (so it also compares equal to a
``(topic, partition)`` tuple, which is what the assignors use), OffsetAndMetadata a named tuple, and
ConsumerRecord a slotted tuple subclass built in bulk by the fetcher with no per-record Python
``__init__`` call.
"""
from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

TIMESTAMP_NOT_AVAILABLE = -1
TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed position: the offset of the NEXT record to consume (Kafka's convention)."""

    offset: int
    metadata: str | None = ""
    leader_epoch: int | None = None


class ConsumerGroupMetadata(NamedTuple):
    """What a transactional producer needs to commit a consumer's offsets (Consumer.group_metadata(),
    Producer.send_offsets_to_transaction): the broker fences a member no longer in the group (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


_tuple_new = tuple.__new__
_get = itemgetter


class ConsumerRecord(tuple):
    """One consumed record. A tuple (cheap to build in bulk) with named read-only fields:

    topic, partition, offset, timestamp, timestamp_type, key, value, headers, leader_epoch,
    delivery_count.
    `headers` is a list of (str key, bytes|None value); `leader_epoch` is None when unknown.
    `delivery_count` is set on records a share consumer received (KIP-932: 1 on the first
    acquisition, +1 on each redelivery) and None otherwise; only then is the tuple ten fields long,
    so records of the ordinary consumer (built nine fields long by the decoders) compare as before.
    """

    __slots__ = ()
    _fields = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
               "leader_epoch")

    def __new__(cls, topic: str, partition: int, offset: int, timestamp: int, timestamp_type: int,
                key: bytes | None, value: bytes | None, headers: Any = (),
                leader_epoch: int | None = None, delivery_count: int | None = None) -> ConsumerRecord:
        if delivery_count is None:
            return _tuple_new(cls, (topic, partition, offset, timestamp, timestamp_type, key, value,
                                    list(headers), leader_epoch))
        return _tuple_new(cls, (topic, partition, offset, timestamp, timestamp_type, key, value,
                                list(headers), leader_epoch, delivery_count))

    @classmethod
    def _make(cls, values):
        return _tuple_new(cls, values)

    if TYPE_CHECKING:   # the fields' types; at run time they are the item getters below
        @property
        def topic(self) -> str: ...
        @property
        def partition(self) -> int: ...
        @property
        def offset(self) -> int: ...
        @property
        def timestamp(self) -> int: ...
        @property
        def timestamp_type(self) -> int: ...
        @property
        def key(self) -> bytes | None: ...
        @property
        def value(self) -> bytes | None: ...
        @property
        def headers(self) -> list[tuple[str, bytes | None]]: ...
        @property
        def leader_epoch(self) -> int | None: ...
    else:
        topic = property(_get(0))
        partition = property(_get(1))
        offset = property(_get(2))
        timestamp = property(_get(3))
        timestamp_type = property(_get(4))
        key = property(_get(5))
        value = property(_get(6))
        headers = property(_get(7))
        leader_epoch = property(_get(8))

    @property
    def delivery_count(self) -> int | None:
        return self[9] if len(self) > 9 else None

    def with_delivery_count(self, delivery_count: int) -> "ConsumerRecord":
        """This record as a share consumer hands it out (first nine fields + the delivery count)."""
        return _tuple_new(ConsumerRecord, (*self[:9], delivery_count))

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self[0], self[1])

    def __repr__(self) -> str:
        return (f"ConsumerRecord(topic={self[0]!r}, partition={self[1]}, offset={self[2]}, "
                f"timestamp={self[3]}, key={self[5]!r}, value={self[6]!r}"
                + (f", delivery_count={self[9]})" if len(self) > 9 else ")"))

    def __reduce__(self):
        return (ConsumerRecord._make, (tuple(self),))


__all__ = ["ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp", "TopicPartition",
           "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE"]
