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

from kohort.protocol.coordinator_records import RecordCodec, string_key
from kohort.protocol.schema import INT8, INT32, INT64, STRING, UUID, Array, ArrayOf, Message, f

VALUE_VERSION = 0


class ShareGroupMemberMetadataKey(string_key("group_id", "member_id")):
    TYPE = 10


class ShareGroupMetadataKey(string_key("group_id")):
    TYPE = 11


class ShareGroupTargetAssignmentMetadataKey(string_key("group_id")):
    TYPE = 12


class ShareGroupTargetAssignmentMemberKey(string_key("group_id", "member_id")):
    TYPE = 13


class ShareGroupCurrentMemberAssignmentKey(string_key("group_id", "member_id")):
    TYPE = 14


class ShareGroupStatePartitionMetadataKey(string_key("group_id")):
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


CODEC = RecordCodec(KEYS, VALUES, "__consumer_offsets record type {kind} is not a share-group record "
                    "kohort reads", VALUE_VERSION)
encode_key = CODEC.encode_key
encode_value = CODEC.encode_value
decode = CODEC.decode
