"""KIP-848 consumer-group records of `__consumer_offsets`, in Kafka's formats
(group-coordinator/src/main/resources/common/message/ConsumerGroup*{Key,Value}.json).

Key = int16 record type + key struct at version 0 (non-flexible). Value = int16 version (0) + value
struct (flexible: compact strings/arrays, tagged fields). A null value is a tombstone.

  type 3 ConsumerGroupMetadata              key GroupId            value Epoch
  type 5 ConsumerGroupMemberMetadata        key GroupId, MemberId  value InstanceId?, RackId?, ClientId,
         ClientHost, SubscribedTopicNames[], SubscribedTopicRegex?, RebalanceTimeoutMs, ServerAssignor?
  type 6 ConsumerGroupTargetAssignmentMetadata key GroupId         value AssignmentEpoch
  type 7 ConsumerGroupTargetAssignmentMember   key GroupId, MemberId value TopicPartitions[]{TopicId, Partitions[]}
  type 8 ConsumerGroupCurrentMemberAssignment  key GroupId, MemberId value MemberEpoch, PreviousMemberEpoch,
         State int8, AssignedPartitions[], PartitionsPendingRevocation[] ({TopicId, Partitions[]})

Type 5's tagged ClassicMemberMetadata (tag 0: SessionTimeoutMs, SupportedProtocols) is written for
members using the classic protocol. Tagged fields kohort does not write (MetadataHash of type 3 [4.1+],
AssignmentTimestamp of type 6 [4.3+], AssignmentEpochs of type 8 [4.3+]) are kept as unknown tags
when read. Types 4 (PartitionMetadata, written by Kafka 4.0 only) and 16 (RegularExpression) are
decoded as unknown (DecodeError) and skipped by the loader.
"""
from __future__ import annotations

from kohort.protocol.coordinator_records import RecordCodec, string_key
from kohort.protocol.schema import BYTES, INT8, INT32, STRING, UUID, Array, ArrayOf, Message, Struct, f

VALUE_VERSION = 0


class ConsumerGroupMetadataKey(string_key("group_id")):
    TYPE = 3


class ConsumerGroupMemberMetadataKey(string_key("group_id", "member_id")):
    TYPE = 5


class ConsumerGroupTargetAssignmentMetadataKey(string_key("group_id")):
    TYPE = 6


class ConsumerGroupTargetAssignmentMemberKey(string_key("group_id", "member_id")):
    TYPE = 7


class ConsumerGroupCurrentMemberAssignmentKey(string_key("group_id", "member_id")):
    TYPE = 8


class ConsumerGroupMetadataValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [f("epoch", INT32)]


class ConsumerGroupMemberMetadataValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("instance_id", STRING, nullable="0+", default=None),
        f("rack_id", STRING, nullable="0+", default=None),
        f("client_id", STRING),
        f("client_host", STRING),
        f("subscribed_topic_names", Array(STRING)),
        f("subscribed_topic_regex", STRING, nullable="0+", default=None),
        f("rebalance_timeout_ms", INT32, default=-1),
        f("server_assignor", STRING, nullable="0+", default=None),
        f("classic_member_metadata", Struct("ClassicMemberMetadata", [
            f("session_timeout_ms", INT32),
            f("supported_protocols", ArrayOf("ClassicProtocol", [
                f("name", STRING),
                f("metadata", BYTES),
            ])),
        ]), nullable="0+", tag=0, default=None),
    ]


class ConsumerGroupTargetAssignmentMetadataValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [f("assignment_epoch", INT32)]


_TP = [f("topic_id", UUID), f("partitions", Array(INT32))]


class ConsumerGroupTargetAssignmentMemberValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [f("topic_partitions", ArrayOf("TopicPartition", _TP))]


class ConsumerGroupCurrentMemberAssignmentValue(Message):
    VALID = "0"
    FLEXIBLE = "0+"
    SCHEMA = [
        f("member_epoch", INT32),
        f("previous_member_epoch", INT32),
        f("state", INT8),
        f("assigned_partitions", ArrayOf("TopicPartitions", _TP)),
        f("partitions_pending_revocation", ArrayOf("TopicPartitions", _TP)),
    ]


KEYS = {k.TYPE: k for k in (ConsumerGroupMetadataKey, ConsumerGroupMemberMetadataKey,
                            ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                            ConsumerGroupCurrentMemberAssignmentKey)}
VALUES = {3: ConsumerGroupMetadataValue, 5: ConsumerGroupMemberMetadataValue,
          6: ConsumerGroupTargetAssignmentMetadataValue, 7: ConsumerGroupTargetAssignmentMemberValue,
          8: ConsumerGroupCurrentMemberAssignmentValue}


CODEC = RecordCodec(KEYS, VALUES, "__consumer_offsets record type {kind} is not a consumer-group record "
                    "kohort reads", VALUE_VERSION)
encode_key = CODEC.encode_key
encode_value = CODEC.encode_value
decode = CODEC.decode
