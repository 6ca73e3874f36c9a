"""Each group machine's records <-> the key/value bytes of `__consumer_offsets`, in Kafka's formats.

A `RecordSerde` names the record types (Kafka's CoordinatorRecordType: the key's leading version) it
reads, the record classes it writes, and converts both ways. KIP-848 records name topics by id on
disk and by name in the machine: the serde is handed `TopicIds` (the runtime's lookups into storage;
a topic gone since is left out). Pure: bytes in, records out, no I/O of its own.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol

from kohort.errors import DecodeError
from kohort.protocol import consumer_group_records as CGR
from kohort.protocol.consumer_offsets import (
    GroupMember, GroupMetadataKey, OffsetCommitKey, decode_record, group_metadata_record,
    group_metadata_tombstone, offset_commit_record, offset_commit_tombstone,
)

from .consumer_group_model import (
    ClassicMeta, ConsumerGroupRecord, ConsumerRecordKind as K, CurrentAssignment, MemberMeta,
)
from .model import GroupRecord, MemberRecord, OffsetRecord, Record


class ClassicRecordKind(enum.IntEnum):
    """The classic record types of `__consumer_offsets` (Kafka's CoordinatorRecordType)."""
    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2


class TopicIds(Protocol):
    def topic_id(self, name: str) -> Any: ...          # None for a topic that does not exist
    def topic_name(self, topic_id: Any) -> str | None: ...   # None for an unknown id


class RecordSerde(Protocol):
    KINDS: ClassVar[frozenset[int]]                    # record types (key versions) it reads
    RECORD_CLASSES: ClassVar[tuple[type, ...]]         # record classes it writes

    def encode(self, record: Any, topics: TopicIds) -> tuple[bytes, bytes | None]: ...
    def decode(self, key: bytes, value: bytes | None, topics: TopicIds) -> Any: ...


def encode_classic_record(r: Record) -> tuple[bytes, bytes | None]:
    """(key, value) bytes of a coordinator record (value None = tombstone)."""
    if isinstance(r, OffsetRecord):
        if r.tombstone:
            return offset_commit_tombstone(r.group, r.topic, r.partition)
        return offset_commit_record(r.group, r.topic, r.partition, r.offset, r.leader_epoch,
                                    r.metadata or "", r.commit_timestamp, r.expire_timestamp)
    if isinstance(r, GroupRecord):
        if r.tombstone:
            return group_metadata_tombstone(r.group)
        members = [GroupMember(m.member_id, m.client_id, m.client_host, m.session_timeout,
                               m.rebalance_timeout, m.subscription, m.assignment, m.group_instance_id)
                   for m in r.members]
        return group_metadata_record(r.group, r.protocol_type, r.generation, r.protocol, r.leader,
                                     r.current_state_timestamp, members)
    raise TypeError(f"not a coordinator record: {r!r}")


def decode_classic_record(key: bytes, value: bytes | None) -> Record:
    """The coordinator record stored as (key, value); raises DecodeError for what it cannot read
    (e.g. KIP-848 consumer-group records, key versions 3+)."""
    k, v = decode_record(key, value)
    if isinstance(k, OffsetCommitKey):
        if v is None:
            return OffsetRecord(k.group, k.topic, k.partition, tombstone=True)
        expire = v.expire_timestamp if v.expire_timestamp is not None and v.expire_timestamp >= 0 else None
        return OffsetRecord(k.group, k.topic, k.partition, v.offset, v.leader_epoch, v.metadata or "",
                            v.commit_timestamp, expire)
    if isinstance(k, GroupMetadataKey):
        if v is None:
            return GroupRecord(k.group, tombstone=True)
        members = tuple(MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.rebalance_timeout, m.session_timeout, bytes(m.subscription),
                                     bytes(m.assignment)) for m in v.members)
        return GroupRecord(k.group, v.protocol_type or "", v.generation, v.protocol, v.leader,
                           v.current_state_timestamp, members)
    raise DecodeError(f"not a classic-group record key: {type(k).__name__}")


def encode_consumer_group_record(r: ConsumerGroupRecord, topic_id: Callable[[str], Any]) -> tuple[bytes, bytes | None]:
    """(key, value) bytes of a consumer-group record; `topic_id(name)` gives a topic's id (None for a
    topic that no longer exists: its partitions are left out)."""
    kcls = CGR.KEYS[r.kind]
    if r.kind in (K.CONSUMER_GROUP_METADATA, K.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA):
        key = kcls(group_id=r.group)
    else:
        key = kcls(group_id=r.group, member_id=r.member_id)
    if r.value is None:
        return CGR.encode_key(key), None

    def tps(cls, frozen):
        out = []
        for name, parts in frozen:
            tid = topic_id(name)
            if tid is not None:
                out.append(cls(topic_id=tid, partitions=list(parts)))
        return out
    v = r.value
    if r.kind == K.CONSUMER_GROUP_METADATA:
        value = CGR.ConsumerGroupMetadataValue(epoch=v)
    elif r.kind == K.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        value = CGR.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=v)
    elif r.kind == K.CONSUMER_GROUP_MEMBER_METADATA:
        value = CGR.ConsumerGroupMemberMetadataValue(
            instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
            subscribed_topic_names=list(v.subscribed_topic_names), subscribed_topic_regex=v.subscribed_topic_regex,
            rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor)
        if v.classic is not None:
            CM = CGR.ConsumerGroupMemberMetadataValue.ClassicMemberMetadata
            value.classic_member_metadata = CM(
                session_timeout_ms=v.classic.session_timeout_ms,
                supported_protocols=[CM.ClassicProtocol(name=n, metadata=md) for n, md in v.classic.protocols])
    elif r.kind == K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        V = CGR.ConsumerGroupTargetAssignmentMemberValue
        value = V(topic_partitions=tps(V.TopicPartition, v))
    else:
        V = CGR.ConsumerGroupCurrentMemberAssignmentValue
        value = V(member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch, state=v.state,
                  assigned_partitions=tps(V.TopicPartitions, v.assigned),
                  partitions_pending_revocation=tps(V.TopicPartitions, v.pending_revocation))
    return CGR.encode_key(key), CGR.encode_value(value)


def decode_consumer_group_record(key: bytes, value: bytes | None,
                                 topic_name: Callable[[Any], str | None]) -> ConsumerGroupRecord:
    """The ConsumerGroupRecord stored as (key, value); `topic_name(id)` gives a topic's name (None for
    an unknown id: those partitions are dropped). DecodeError for what it cannot read."""
    k, v = CGR.decode(key, value)
    kind = K(type(k).TYPE)
    mid = getattr(k, "member_id", None)
    if v is None:
        return ConsumerGroupRecord(kind, k.group_id, mid)

    def frozen(tps):
        out = {}
        for tp in tps:
            name = topic_name(tp.topic_id)
            if name is not None:
                out[name] = tuple(sorted(set(out.get(name, ())) | set(tp.partitions)))
        return tuple(sorted(out.items()))
    if kind == K.CONSUMER_GROUP_METADATA:
        val = v.epoch
    elif kind == K.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        val = v.assignment_epoch
    elif kind == K.CONSUMER_GROUP_MEMBER_METADATA:
        cm = v.classic_member_metadata
        classic = None if cm is None else ClassicMeta(
            cm.session_timeout_ms, tuple((sp.name, bytes(sp.metadata)) for sp in cm.supported_protocols))
        val = MemberMeta(v.instance_id, v.rack_id, v.client_id, v.client_host,
                         tuple(v.subscribed_topic_names), v.subscribed_topic_regex, v.rebalance_timeout_ms,
                         v.server_assignor, classic)
    elif kind == K.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        val = frozen(v.topic_partitions)
    else:
        val = CurrentAssignment(v.member_epoch, v.previous_member_epoch, v.state,
                                frozen(v.assigned_partitions), frozen(v.partitions_pending_revocation))
    return ConsumerGroupRecord(kind, k.group_id, mid, val)


@dataclass(frozen=True)
class ClassicRecordSerde:
    """Offset commits (types 0, 1) and classic group metadata (type 2)."""
    KINDS: ClassVar[frozenset[int]] = frozenset(ClassicRecordKind)
    RECORD_CLASSES: ClassVar[tuple[type, ...]] = (OffsetRecord, GroupRecord)

    def encode(self, record: Record, topics: TopicIds) -> tuple[bytes, bytes | None]:
        return encode_classic_record(record)

    def decode(self, key: bytes, value: bytes | None, topics: TopicIds) -> Record:
        return decode_classic_record(key, value)


@dataclass(frozen=True)
class ConsumerGroupRecordSerde:
    """KIP-848 consumer-group records (types 3, 5, 6, 7, 8)."""
    KINDS: ClassVar[frozenset[int]] = frozenset(K)
    RECORD_CLASSES: ClassVar[tuple[type, ...]] = (ConsumerGroupRecord,)

    def encode(self, record: ConsumerGroupRecord, topics: TopicIds) -> tuple[bytes, bytes | None]:
        return encode_consumer_group_record(record, topics.topic_id)

    def decode(self, key: bytes, value: bytes | None, topics: TopicIds) -> ConsumerGroupRecord:
        return decode_consumer_group_record(key, value, topics.topic_name)
