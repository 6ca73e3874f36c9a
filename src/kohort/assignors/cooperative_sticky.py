"""The "cooperative-sticky" assignor (KIP-429 over KIP-54, Java's CooperativeStickyAssignor).

Same placement as "sticky", but under the COOPERATIVE rebalance protocol members keep their
partitions while rejoining and report them in ConsumerProtocolSubscription.owned_partitions (v1+),
with the generation they were assigned in as generation_id (v2+, KIP-341 semantics). The leader
computes the sticky target, then withholds every partition that would move from a member that still
owns it: the owner sees it gone from its assignment, revokes it, and rejoins; in that follow-up
rebalance nobody owns it any more and it goes to its new member. So no partition is ever given to a
member while another member still owns it.

User data: like Java, the member also sends its generation as a bare INT32 in user data, which is
what leaders that read ConsumerProtocolSubscription v1 (no generation_id field) look at.
"""
from __future__ import annotations

import struct
from typing import Mapping

from kohort.assignors.base import (
    COOPERATIVE, DEFAULT_GENERATION, EAGER, Assignment, Assignor, Subscription, subscribed_partition_counts,
    validate,
)
from kohort.assignors.sticky_core import MemberData, sticky_assign
from kohort.errors import DecodeError, EncodeError
from kohort.protocol.primitives import Reader, w_int32


def encode_cooperative_user_data(generation: int) -> bytes:
    out = bytearray()
    try:
        w_int32(out, generation)
    except struct.error as e:           # not an int32
        raise EncodeError(f"cooperative-sticky user data: bad generation {generation!r}: {e}") from None
    return bytes(out)


def decode_cooperative_user_data(data: bytes) -> int:
    """The generation in cooperative-sticky user data (trailing bytes ignored, as Java does)."""
    return Reader(data).int32()


def cooperative_member_data(subscription: Subscription) -> MemberData:
    if subscription.generation_id >= 0:
        return MemberData(list(subscription.owned_partitions), subscription.generation_id)
    if subscription.user_data is None:
        generation = None
    else:
        try:
            generation = decode_cooperative_user_data(subscription.user_data)
        except DecodeError:
            generation = DEFAULT_GENERATION
    return MemberData(list(subscription.owned_partitions), generation)


class CooperativeStickyAssignor(Assignor):
    name = "cooperative-sticky"
    protocol = COOPERATIVE
    supported_protocols = (COOPERATIVE, EAGER)

    def subscription_user_data(self, topics, current_assignment, generation):
        return encode_cooperative_user_data(DEFAULT_GENERATION if generation is None else generation)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        validate(partitions_per_topic, subscriptions)
        counts = subscribed_partition_counts(partitions_per_topic, subscriptions)
        topics = {m: list(s.topics) for m, s in subscriptions.items()}
        data = {m: cooperative_member_data(s) for m, s in subscriptions.items()}
        result, transferring = sticky_assign(counts, topics, data)
        if transferring is None:
            transferring = _transferring_ownership(subscriptions, result)
        for tp, new_owner in transferring.items():
            result[new_owner].remove(tp)
        return {m: Assignment(list(result.get(m, []))) for m in subscriptions}


def _transferring_ownership(subscriptions, result):
    """Partitions the target gives to a member other than one that still reports owning them."""
    added = {}
    revoked = set()
    for m, target in result.items():
        owned = set(subscriptions[m].owned_partitions)
        target_set = set(target)
        for tp in target:
            if tp not in owned:
                added[tp] = m
        revoked.update(tp for tp in owned if tp not in target_set)
    return {tp: m for tp, m in added.items() if tp in revoked}
