"""The "consumer" embedded protocol: what a classic-group consumer puts in JoinGroup metadata
(ConsumerProtocolSubscription) and what the leader returns through SyncGroup (ConsumerProtocolAssignment).

Wire form: int16 version, then the struct in that version; never flexible (these payloads predate
KIP-482). Versions: subscription v1 adds owned_partitions (KIP-429, cooperative rebalancing), v2
generation_id (KIP-792), v3 rack_id (KIP-881); the assignment's layout is the same in v0-v3.

Kafka's rule for these embedded payloads: a reader that meets a HIGHER version than it knows parses the
fields it knows (new versions may only append fields) and ignores the rest. Like Java's ConsumerProtocol,
decoding ignores trailing bytes in every version. A negative version is an error.
"""
from __future__ import annotations

from kohort.errors import DecodeError, EncodeError
from kohort.protocol import primitives as P
from kohort.protocol.primitives import Reader
from kohort.protocol.schema import BYTES, INT32, STRING, Array, ArrayOf, Message, f

PROTOCOL_TYPE = "consumer"


class ConsumerProtocolSubscription(Message):
    VALID = "0-3"
    FLEXIBLE = "none"
    SCHEMA = [
        f("topics", Array(STRING)),
        f("user_data", BYTES, nullable="0+", default=None),
        f("owned_partitions", ArrayOf("TopicPartition", [
            f("topic", STRING, "1+"),
            f("partitions", Array(INT32), "1+"),
        ]), "1+"),
        f("generation_id", INT32, "2+", default=-1),
        f("rack_id", STRING, "3+", nullable="3+", default=None),
    ]


class ConsumerProtocolAssignment(Message):
    VALID = "0-3"
    FLEXIBLE = "none"
    SCHEMA = [
        f("assigned_partitions", ArrayOf("TopicPartition", [
            f("topic", STRING),
            f("partitions", Array(INT32)),
        ])),
        f("user_data", BYTES, nullable="0+", default=None),
    ]


SUBSCRIPTION_VERSION = ConsumerProtocolSubscription.MAX_VERSION
ASSIGNMENT_VERSION = ConsumerProtocolAssignment.MAX_VERSION


def _encode(cls, obj, version: int) -> bytes:
    if not isinstance(obj, cls):
        raise EncodeError(f"expected {cls.__name__}, got {type(obj).__name__}")
    out = bytearray()
    P.w_int16(out, version)
    obj.encode_into(out, version)
    return bytes(out)


def _decode(cls, data):
    if data is None:
        raise DecodeError(f"{cls.__name__}: no bytes (null)")
    r = Reader(data)
    version = r.int16()
    if version < 0:
        raise DecodeError(f"{cls.__name__}: unsupported version {version}")
    return cls.decode(r, min(version, cls.MAX_VERSION), exact=False)


def payload_version(data) -> int:
    """The int16 version at the head of a subscription or assignment payload."""
    if data is None:
        raise DecodeError("consumer protocol payload: no bytes (null)")
    return Reader(data).int16()


def encode_subscription(sub: ConsumerProtocolSubscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """JoinGroup protocol metadata for `sub` (int16 version + struct)."""
    return _encode(ConsumerProtocolSubscription, sub, version)


def decode_subscription(data) -> ConsumerProtocolSubscription:
    """Parse JoinGroup metadata; a version above 3 is read as v3 and its extra bytes ignored
    (`payload_version` tells the version on the wire)."""
    return _decode(ConsumerProtocolSubscription, data)


def encode_assignment(assignment: ConsumerProtocolAssignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    """SyncGroup assignment bytes for `assignment` (int16 version + struct)."""
    return _encode(ConsumerProtocolAssignment, assignment, version)


def decode_assignment(data) -> ConsumerProtocolAssignment:
    """Parse SyncGroup assignment bytes; a version above 3 is read as v3, extra bytes ignored."""
    return _decode(ConsumerProtocolAssignment, data)
