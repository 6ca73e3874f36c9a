"""Share-group records of `__consumer_offsets` (KIP-932), in Kafka 4.x's formats
(group-coordinator's ShareGroup*{Key,Value} message specs).

Key = int16 record type + key struct at version 0 (non-flexible). Value = int16 version (0) + value
struct (flexible). A null value is a tombstone.

  type 10 ShareGroupMemberMetadata          key GroupId, MemberId  value RackId?, ClientId, ClientHost,
          SubscribedTopicNames[]
  type 11 ShareGroupMetadata                key GroupId            value Epoch, MetadataHash int64
  type 12 ShareGroupTargetAssignmentMetadata key GroupId           value AssignmentEpoch,
          [tag 0] AssignmentTimestamp (Kafka 4.3; default 0)
  type 13 ShareGroupTargetAssignmentMember  key GroupId, MemberId  value TopicPartitions[]{TopicId, Partitions[]}
  type 14 ShareGroupCurrentMemberAssignment key GroupId, MemberId  value MemberEpoch, PreviousMemberEpoch,
          State int8, AssignedPartitions[]{TopicId, Partitions[]}
  type 15 ShareGroupStatePartitionMetadata  key GroupId            value InitializingTopics[],
          InitializedTopics[] ({TopicId, TopicName, Partitions[]}), DeletingTopics[]{TopicId, TopicName}

Type 9 (ShareGroupPartitionMetadata) was written by Kafka 4.0 only and is not read here (DecodeError,
as any other type).
"""
from __future__ import annotations

from kohort.errors import DecodeError
from kohort.protocol import primitives as P
from kohort.protocol.primitives import Reader
from kohort.protocol.schema import INT8, INT32, INT64, STRING, UUID, Array, ArrayOf, Message, f

VALUE_VERSION = 0


def _key(*names):
    class K(Message):
        VALID = "0"
        FLEXIBLE = "none"
        SCHEMA = [f(n, STRING) for n in names]
    return K


class ShareGroupMemberMetadataKey(_key("group_id", "member_id")):
    TYPE = 10


class ShareGroupMetadataKey(_key("group_id")):
    TYPE = 11


class ShareGroupTargetAssignmentMetadataKey(_key("group_id")):
    TYPE = 12


class ShareGroupTargetAssignmentMemberKey(_key("group_id", "member_id")):
    TYPE = 13


class ShareGroupCurrentMemberAssignmentKey(_key("group_id", "member_id")):
    TYPE = 14


class ShareGroupStatePartitionMetadataKey(_key("group_id")):
    TYPE = 15


class ShareGroupMemberMetadataValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("rack_id", STRING, nullable="0+", default=None),
        f("client_id", STRING),
        f("client_host", STRING),
        f("subscribed_topic_names", Array(STRING)),
    ]


class ShareGroupMetadataValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("epoch", INT32),
        f("metadata_hash", INT64),
    ]


class ShareGroupTargetAssignmentMetadataValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("assignment_epoch", INT32),
        f("assignment_timestamp", INT64, tag=0, default=0),
    ]


_TP = [f("topic_id", UUID), f("partitions", Array(INT32))]


class ShareGroupTargetAssignmentMemberValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [f("topic_partitions", ArrayOf("TopicPartition", _TP))]


# MemberState of a share member: always STABLE (share groups have no reconciliation states).
MEMBER_STATE_STABLE = 0


class ShareGroupCurrentMemberAssignmentValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("member_epoch", INT32),
        f("previous_member_epoch", INT32),
        f("state", INT8),
        f("assigned_partitions", ArrayOf("TopicPartitions", _TP)),
    ]


_TOPIC_PARTITIONS_INFO = [f("topic_id", UUID), f("topic_name", STRING), f("partitions", Array(INT32))]


class ShareGroupStatePartitionMetadataValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("initializing_topics", ArrayOf("TopicPartitionsInfo", _TOPIC_PARTITIONS_INFO)),
        f("initialized_topics", ArrayOf("TopicPartitionsInfo", _TOPIC_PARTITIONS_INFO)),
        f("deleting_topics", ArrayOf("TopicInfo", [f("topic_id", UUID), f("topic_name", STRING)])),
    ]


KEYS = {k.TYPE: k for k in (ShareGroupMemberMetadataKey, ShareGroupMetadataKey,
                            ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMemberKey,
                            ShareGroupCurrentMemberAssignmentKey, ShareGroupStatePartitionMetadataKey)}
VALUES = {10: ShareGroupMemberMetadataValue, 11: ShareGroupMetadataValue,
          12: ShareGroupTargetAssignmentMetadataValue, 13: ShareGroupTargetAssignmentMemberValue,
          14: ShareGroupCurrentMemberAssignmentValue, 15: ShareGroupStatePartitionMetadataValue}


def encode_key(key: Message) -> bytes:
    out = bytearray()
    P.w_int16(out, key.TYPE)
    key.encode_into(out, 0)
    return bytes(out)


def encode_value(value: Message | None) -> bytes | None:
    if value is None:
        return None
    out = bytearray()
    P.w_int16(out, VALUE_VERSION)
    value.encode_into(out, VALUE_VERSION)
    return bytes(out)


def decode(key_bytes, value_bytes):
    """(key, value or None) of a share-group record; DecodeError for other record types."""
    r = Reader(key_bytes)
    kind = r.int16()
    kcls = KEYS.get(kind)
    if kcls is None:
        raise DecodeError(f"__consumer_offsets record type {kind} is not a share-group record kohort reads")
    key = kcls.decode(r, 0)
    if value_bytes is None:
        return key, None
    vr = Reader(value_bytes)
    version = vr.int16()
    if version != VALUE_VERSION:
        raise DecodeError(f"{VALUES[kind].__name__} version {version} unknown (valid 0)")
    return key, VALUES[kind].decode(vr, version)
