"""Records of the `__consumer_offsets` topic for classic groups, and which partition holds a group.

Key and value are each an int16 version followed by the struct in that version. The KEY version says
what the record is: 0/1 = an offset commit (OffsetCommitKey -> OffsetCommitValue), 2 = group metadata
(GroupMetadataKey -> GroupMetadataValue). A null value is a tombstone (the offset / group is deleted).
KIP-848 consumer-group records use key versions 3-8 and are not defined here (`decode_key` reports them
as unknown with a DecodeError).

Value versions: OffsetCommitValue v1 carries expire_timestamp (explicit retention, OffsetCommit v1-v4),
v3 adds leader_epoch (KIP-320), v4 is flexible (KIP-915); GroupMetadataValue v1 adds the members'
rebalance_timeout, v2 current_state_timestamp, v3 members' group_instance_id (KIP-345), v4 is flexible
(KIP-915). Readers must accept every version; writers follow Kafka's GroupCoordinator: offset key
version 1, offset value version 3 (or 1 when an expire timestamp is set), group key version 2, group
value version 3 -- the highest NON-flexible versions, per Kafka's note "serialize with the highest
supported non-flexible version until a tagged field is introduced". v4 is written only when asked for.

`group_partition(group_id, n)` is Kafka's `Utils.abs(groupId.hashCode()) % n`.
"""
from __future__ import annotations

from dataclasses import dataclass

from kohort.errors import DecodeError, EncodeError
from kohort.protocol.coordinator_records import encode_versioned
from kohort.protocol.primitives import Reader
from kohort.protocol.schema import BYTES, INT32, INT64, STRING, ArrayOf, Message, f

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_NUM_PARTITIONS = 50          # offsets.topic.num.partitions

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3


# -- schemas -----------------------------------------------------------------------------------------
class OffsetCommitKey(Message):
    VALID = "0-1"
    FLEXIBLE = "none"
    SCHEMA = [
        f("group", STRING),
        f("topic", STRING),
        f("partition", INT32),
    ]


class OffsetCommitValue(Message):
    VALID = "0-4"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("offset", INT64),
        f("leader_epoch", INT32, "3+", default=-1),
        f("metadata", STRING),
        f("commit_timestamp", INT64),
        f("expire_timestamp", INT64, "1", default=-1),
    ]


class GroupMetadataKey(Message):
    VALID = "2"
    FLEXIBLE = "none"
    SCHEMA = [
        f("group", STRING),
    ]


class GroupMetadataValue(Message):
    VALID = "0-4"
    FLEXIBLE = "4+"
    SCHEMA = [
        f("protocol_type", STRING),
        f("generation", INT32),
        f("protocol", STRING, nullable="0+", default=None),
        f("leader", STRING, nullable="0+", default=None),
        f("current_state_timestamp", INT64, "2+", default=-1),
        f("members", ArrayOf("MemberMetadata", [
            f("member_id", STRING),
            f("group_instance_id", STRING, "3+", nullable="3+", default=None),
            f("client_id", STRING),
            f("client_host", STRING),
            f("rebalance_timeout", INT32, "1+", default=-1),
            f("session_timeout", INT32),
            f("subscription", BYTES),
            f("assignment", BYTES),
        ])),
    ]


MemberMetadata = GroupMetadataValue.MemberMetadata
_KEY_CLASSES = {0: OffsetCommitKey, 1: OffsetCommitKey, 2: GroupMetadataKey}


# -- versioned encoding ------------------------------------------------------------------------------
def encode_offset_commit_key(key: OffsetCommitKey, version: int = OFFSET_COMMIT_KEY_VERSION) -> bytes:
    return encode_versioned(key, version)


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """Default version as Kafka writes it: 1 if `expire_timestamp` is set (!= -1), else 3."""
    if version is None:
        version = (OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp != -1
                   else OFFSET_COMMIT_VALUE_VERSION)
    elif value.expire_timestamp != -1 and version != 1:
        raise EncodeError(f"expire_timestamp exists only in OffsetCommitValue v1, not v{version}")
    return encode_versioned(value, version)


def encode_group_metadata_key(key: GroupMetadataKey, version: int = GROUP_METADATA_KEY_VERSION) -> bytes:
    return encode_versioned(key, version)


def encode_group_metadata_value(value: GroupMetadataValue,
                                version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    return encode_versioned(value, version)


def _read_version(data, what: str) -> tuple[Reader, int]:
    if data is None:
        raise DecodeError(f"{what}: no bytes (null)")
    r = Reader(data)
    return r, r.int16()


def decode_key(data) -> OffsetCommitKey | GroupMetadataKey:
    """An OffsetCommitKey (key version 0/1) or GroupMetadataKey (2). Other versions raise DecodeError
    (3-8 are KIP-848 consumer-group records, 9+ share groups); use `key_version` to skip those."""
    r, version = _read_version(data, "__consumer_offsets key")
    cls = _KEY_CLASSES.get(version)
    if cls is None:
        raise DecodeError(f"__consumer_offsets key version {version} is not a classic offset/group record")
    return cls.decode(r, version)


def key_version(data) -> int:
    """The record type of a `__consumer_offsets` key (its leading int16)."""
    return _read_version(data, "__consumer_offsets key")[1]


def decode_value(key: OffsetCommitKey | GroupMetadataKey, data) -> OffsetCommitValue | GroupMetadataValue | None:
    """The value for `key` (as returned by decode_key); None for a tombstone (null value)."""
    if data is None:
        return None
    if isinstance(key, OffsetCommitKey):
        cls = OffsetCommitValue
    elif isinstance(key, GroupMetadataKey):
        cls = GroupMetadataValue
    else:
        raise DecodeError(f"not a __consumer_offsets key: {type(key).__name__}")
    r, version = _read_version(data, f"{cls.__name__}")
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise DecodeError(f"{cls.__name__} version {version} unknown (valid {cls.MIN_VERSION}-{cls.MAX_VERSION})")
    return cls.decode(r, version)


def decode_record(key_bytes, value_bytes) -> tuple[OffsetCommitKey | GroupMetadataKey,
                                                   OffsetCommitValue | GroupMetadataValue | None]:
    key = decode_key(key_bytes)
    return key, decode_value(key, value_bytes)


# -- record builders for the coordinator -------------------------------------------------------------
def offset_commit_record(group: str, topic: str, partition: int, offset: int, leader_epoch: int = -1,
                         metadata: str = "", commit_timestamp: int = 0,
                         expire_timestamp: int | None = None) -> tuple[bytes, bytes]:
    """(key, value) bytes of a committed offset, versions as Kafka writes them (key v1; value v3, or
    v1 when `expire_timestamp` is given -- v1 has no leader_epoch, so it is dropped then, as in Kafka)."""
    key = encode_offset_commit_key(OffsetCommitKey(group=group, topic=topic, partition=partition))
    value = OffsetCommitValue(offset=offset, leader_epoch=leader_epoch,
                              metadata="" if metadata is None else metadata,
                              commit_timestamp=commit_timestamp,
                              expire_timestamp=-1 if expire_timestamp is None else expire_timestamp)
    return key, encode_offset_commit_value(value)


def offset_commit_tombstone(group: str, topic: str, partition: int) -> tuple[bytes, None]:
    return encode_offset_commit_key(OffsetCommitKey(group=group, topic=topic, partition=partition)), None


@dataclass(frozen=True)
class GroupMember:
    """One member as persisted in GroupMetadataValue (subscription = JoinGroup metadata of the chosen
    protocol, assignment = SyncGroup bytes)."""
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


def group_metadata_record(group: str, protocol_type: str, generation: int, protocol: str | None,
                          leader: str | None, current_state_timestamp: int,
                          members: list[GroupMember] | tuple = ()) -> tuple[bytes, bytes]:
    """(key, value) bytes of a classic group's metadata (key v2, value v3). An empty group is
    protocol_type "", generation 0, protocol/leader None, no members (Kafka's empty-group record)."""
    key = encode_group_metadata_key(GroupMetadataKey(group=group))
    value = GroupMetadataValue(
        protocol_type=protocol_type, generation=generation, protocol=protocol, leader=leader,
        current_state_timestamp=current_state_timestamp,
        members=[MemberMetadata(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                client_id=m.client_id, client_host=m.client_host,
                                rebalance_timeout=m.rebalance_timeout, session_timeout=m.session_timeout,
                                subscription=bytes(m.subscription), assignment=bytes(m.assignment))
                 for m in members])
    return key, encode_group_metadata_value(value)


def group_metadata_tombstone(group: str) -> tuple[bytes, None]:
    return encode_group_metadata_key(GroupMetadataKey(group=group)), None


# -- partitioning ------------------------------------------------------------------------------------
def java_string_hash(s: str) -> int:
    """Java's String.hashCode(): s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_utils_abs(n: int) -> int:
    """Kafka's Utils.abs: Math.abs, except Integer.MIN_VALUE maps to 0 (not to itself)."""
    return 0 if n == -(1 << 31) else abs(n)


def group_partition(group_id: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """The `__consumer_offsets` partition of `group_id`: Utils.abs(groupId.hashCode()) % n."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return java_utils_abs(java_string_hash(group_id)) % num_partitions
