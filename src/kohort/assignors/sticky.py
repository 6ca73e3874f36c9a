"""The "sticky" assignor (KIP-54, Java's StickyAssignor) and its subscription user data.

An EAGER assignor: members give up everything before each rebalance, so the only memory of who had
what is the user data each member sends in its subscription, in Java's StickyAssignor schema:

    StickyAssignorUserData v1 => [previous_assignment] generation
      previous_assignment => topic [partitions]
        topic      => STRING  (int16 length + UTF-8)
        partitions => INT32
      generation => INT32     (KIP-341; absent in v0)

The same bytes are written by librdkafka's sticky assignor. A member that never had an assignment
sends no user data. Decoding is as tolerant as Java's: v1 is tried and, if the generation is missing,
the data is read as v0 (no generation); bytes after the generation are ignored; bytes that do not
decode at all make the leader treat the member as having no previous assignment (generation -1).
One extra over Java: kafka-python (3.x) writes the same struct behind an INT16 version prefix, which
Java cannot read; when the plain form does not decode, the prefixed form is tried, so a kohort leader
stays sticky for kafka-python members too.
"""
from __future__ import annotations

import struct
from typing import Iterable, Mapping

from kohort.assignors.base import (
    DEFAULT_GENERATION, EAGER, Assignment, Assignor, Subscription, TopicPartition, subscribed_partition_counts,
    validate,
)
from kohort.assignors.sticky_core import MemberData, sticky_assign
from kohort.errors import DecodeError, EncodeError
from kohort.protocol.primitives import Reader, w_int32, w_string


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """StickyAssignorUserData v1 (v0 when generation is None), topics in first-seen order."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int)):
            raise EncodeError(f"sticky user data: partition must be (topic, partition), got {tp!r}")
        by_topic.setdefault(tp[0], []).append(tp[1])
    out = bytearray()
    try:
        w_int32(out, len(by_topic))
        for topic, parts in by_topic.items():
            w_string(out, topic)
            w_int32(out, len(parts))
            for p in parts:
                w_int32(out, p)
        if generation is not None:
            w_int32(out, generation)
    except (struct.error, ValueError) as e:  # out-of-range ints; strings that cannot be encoded
        raise EncodeError(f"sticky user data: cannot encode: {e}") from None
    return bytes(out)


def decode_sticky_user_data(data: bytes) -> MemberData:
    """Parse StickyAssignorUserData (v1, else v0). Raises DecodeError (only) on malformed bytes."""
    try:
        return _decode_sticky(Reader(data))
    except DecodeError:
        if len(data) >= 2 and data[0] == 0 and data[1] in (0, 1):  # kafka-python's version-prefixed form
            try:
                return _decode_sticky(Reader(data, 2))
            except DecodeError:
                pass
        raise


def _decode_sticky(r: Reader) -> MemberData:
    n = r.array_len()
    if n < 0:
        raise DecodeError("sticky user data: previous_assignment array is null")
    partitions: list[TopicPartition] = []
    for _ in range(n):
        topic = r.string()
        count = r.array_len()
        if count < 0:
            raise DecodeError(f"sticky user data: partitions array of topic {topic!r} is null")
        for _ in range(count):
            partitions.append((topic, r.int32()))
    generation = r.int32() if r.remaining() >= 4 else None
    return MemberData(partitions, generation)


def sticky_member_data(subscription: Subscription) -> MemberData:
    """The leader's view of a sticky member's past, from its user data only (eager members own nothing)."""
    if not subscription.user_data:
        return MemberData([], None)
    try:
        return decode_sticky_user_data(subscription.user_data)
    except DecodeError:
        return MemberData([], DEFAULT_GENERATION)


class StickyAssignor(Assignor):
    name = "sticky"
    protocol = EAGER
    supported_protocols = (EAGER,)

    def subscription_user_data(self, topics, current_assignment, generation):
        if current_assignment is None:
            return None
        return encode_sticky_user_data(current_assignment, generation)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        validate(partitions_per_topic, subscriptions)
        counts = subscribed_partition_counts(partitions_per_topic, subscriptions)
        topics = {m: list(s.topics) for m, s in subscriptions.items()}
        data = {m: sticky_member_data(s) for m, s in subscriptions.items()}
        result, _ = sticky_assign(counts, topics, data)
        return {m: Assignment(list(result.get(m, []))) for m in subscriptions}
