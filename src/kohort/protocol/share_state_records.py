"""`__share_group_state` records of the share coordinator (KIP-932), in Kafka's formats
(share-coordinator's ShareSnapshot*/ShareUpdate* message specs).

Key = int16 record type + key struct at version 0 (non-flexible): GroupId, TopicId, Partition.
Value = int16 version (0) + value struct (flexible). A null value is a tombstone (the share state of
that partition deleted).

  type 0 ShareSnapshot  value SnapshotEpoch, StateEpoch, LeaderEpoch, StartOffset,
                        [tag 0] DeliveryCompleteCount (-1 unknown; Kafka 4.2+, KIP-1226),
                        CreateTimestamp, WriteTimestamp, StateBatches[]
  type 1 ShareUpdate    value SnapshotEpoch, LeaderEpoch, StartOffset (-1 = unchanged),
                        [tag 0] DeliveryCompleteCount, StateBatches[]
  StateBatch = FirstOffset, LastOffset, DeliveryState int8 (0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED),
               DeliveryCount int16

The state of one share-partition is its newest snapshot with the updates written after it applied in
order (newer batches override overlapping older ones; batches below the start offset dropped).
`state_partition(group, topic_id, partition, n)` is the `__share_group_state` partition of that key:
Utils.abs(String.hashCode("group:topicId:partition")) % n with the topic id in Kafka's base64 form.
"""
from __future__ import annotations

import base64
import uuid as _uuid

from kohort.protocol.consumer_offsets import java_string_hash, java_utils_abs
from kohort.protocol.coordinator_records import RecordCodec
from kohort.protocol.schema import INT8, INT16, INT32, INT64, STRING, UUID, ArrayOf, Message, f

SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
VALUE_VERSION = 0
DEFAULT_NUM_PARTITIONS = 50      # share.coordinator.state.topic.num.partitions


class _ShareKey(Message):
    VALID = "0"
    FLEXIBLE = "none"
    SCHEMA = [f("group_id", STRING), f("topic_id", UUID), f("partition", INT32)]


class ShareSnapshotKey(_ShareKey):
    TYPE = SNAPSHOT_TYPE


class ShareUpdateKey(_ShareKey):
    TYPE = UPDATE_TYPE


_STATE_BATCH = [
    f("first_offset", INT64),
    f("last_offset", INT64),
    f("delivery_state", INT8),
    f("delivery_count", INT16),
]


class ShareSnapshotValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("snapshot_epoch", INT32),
        f("state_epoch", INT32),
        f("leader_epoch", INT32),
        f("start_offset", INT64),
        f("delivery_complete_count", INT32, tag=0, default=-1),
        f("create_timestamp", INT64),
        f("write_timestamp", INT64),
        f("state_batches", ArrayOf("StateBatch", _STATE_BATCH)),
    ]


class ShareUpdateValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("snapshot_epoch", INT32),
        f("leader_epoch", INT32),
        f("start_offset", INT64),
        f("delivery_complete_count", INT32, tag=0, default=-1),
        f("state_batches", ArrayOf("StateBatch", _STATE_BATCH)),
    ]


KEYS = {SNAPSHOT_TYPE: ShareSnapshotKey, UPDATE_TYPE: ShareUpdateKey}
VALUES = {SNAPSHOT_TYPE: ShareSnapshotValue, UPDATE_TYPE: ShareUpdateValue}


CODEC = RecordCodec(KEYS, VALUES, "__share_group_state record type {kind} unknown (valid 0, 1)",
                    VALUE_VERSION)
encode_key = CODEC.encode_key
encode_value = CODEC.encode_value
decode = CODEC.decode


def kafka_uuid_str(u: _uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def coordinator_key(group_id: str, topic_id: _uuid.UUID, partition: int) -> str:
    return f"{group_id}:{kafka_uuid_str(topic_id)}:{partition}"


def state_partition(group_id: str, topic_id: _uuid.UUID, partition: int,
                    num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """The `__share_group_state` partition holding the share state of (group, topic, partition)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return java_utils_abs(java_string_hash(coordinator_key(group_id, topic_id, partition))) % num_partitions
