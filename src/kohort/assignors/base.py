"""What every client-side partition assignor shares: Subscription/Assignment, the Assignor base, ordering.

The group leader decodes each member's ConsumerProtocolSubscription into a `Subscription`, runs the
group's chosen assignor over them, and encodes each resulting `Assignment` as a
ConsumerProtocolAssignment. Assignors are pure: no I/O, no clock, no state between calls. Whatever a
member must remember between rebalances (its last assignment and generation) the caller passes in.

Ordering follows the Java client, because several clients must agree on nothing but the bytes, yet a
kohort leader should hand out what a Java leader would: member ids and topics compare like
`java.lang.String.compareTo` (UTF-16 code units, see `java_order`), and members sort like Java's
`MemberInfo` (static members, KIP-345, by group.instance.id first, then dynamic members by member id).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Iterable, Mapping

from kohort.errors import KohortError

TopicPartition = tuple[str, int]

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"

# Java's AbstractStickyAssignor.DEFAULT_GENERATION / ConsumerProtocolSubscription GenerationId default.
DEFAULT_GENERATION = -1


class AssignorError(KohortError, ValueError):
    """The input to an assignor is unusable (bad partition counts, bad subscriptions, unknown name)."""


@dataclass
class Subscription:
    """One member's decoded ConsumerProtocolSubscription plus its JoinGroup identity.

    generation_id < 0 means "not sent" (ConsumerProtocolSubscription v0/v1, or a member that never
    had an assignment), exactly as Java turns a negative GenerationId into Optional.empty().
    rack_id None or "" means no rack.
    """

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    group_instance_id: str | None = None


@dataclass
class Assignment:
    """One member's share: partitions in the order the assignor produced them, and assignor user data."""

    partitions: list[TopicPartition] = field(default_factory=list)
    user_data: bytes | None = None


def java_order(s: str) -> bytes:
    """Sort key that orders strings like java.lang.String.compareTo (by UTF-16 code unit)."""
    return s.encode("utf-16-be", "surrogatepass")


def member_order_key(member_id: str, subscription: Subscription) -> tuple:
    """Java's AbstractPartitionAssignor.MemberInfo ordering: static members (by instance id) first."""
    if subscription.group_instance_id is not None:
        return (0, java_order(subscription.group_instance_id), java_order(member_id))
    return (1, java_order(member_id), b"")


def sorted_members(subscriptions: Mapping[str, Subscription], member_ids: Iterable[str] | None = None) -> list[str]:
    ids = subscriptions.keys() if member_ids is None else member_ids
    return sorted(ids, key=lambda m: member_order_key(m, subscriptions[m]))


def validate(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> None:
    """Reject input no assignor can make sense of, with a message that names the culprit."""
    if not isinstance(partitions_per_topic, Mapping):
        raise AssignorError(f"partitions_per_topic must be a mapping, got {type(partitions_per_topic).__name__}")
    if not isinstance(subscriptions, Mapping):
        raise AssignorError(f"subscriptions must be a mapping, got {type(subscriptions).__name__}")
    for topic, count in partitions_per_topic.items():
        if not isinstance(topic, str):
            raise AssignorError(f"topic name must be a str, got {topic!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise AssignorError(f"partition count of topic {topic!r} must be an int >= 0, got {count!r}")
    for member_id, sub in subscriptions.items():
        if not isinstance(member_id, str):
            raise AssignorError(f"member id must be a str, got {member_id!r}")
        if not isinstance(sub, Subscription):
            raise AssignorError(f"subscription of member {member_id!r} must be a Subscription, got {type(sub).__name__}")
        if isinstance(sub.topics, str) or not all(isinstance(t, str) for t in sub.topics):
            raise AssignorError(f"topics of member {member_id!r} must be a list of str, got {sub.topics!r}")
        for tp in sub.owned_partitions:
            if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int)):
                raise AssignorError(f"owned partition of member {member_id!r} must be (topic, partition), got {tp!r}")


def subscribed_partition_counts(partitions_per_topic: Mapping[str, int],
                                subscriptions: Mapping[str, Subscription]) -> dict[str, int]:
    """The topics worth assigning: subscribed by someone and known with at least one partition.

    Like Java's AbstractPartitionAssignor, subscribed topics missing from metadata are skipped.
    """
    subscribed = set()
    for sub in subscriptions.values():
        subscribed.update(sub.topics)
    return {t: n for t, n in partitions_per_topic.items() if t in subscribed and n > 0}


class Assignor(ABC):
    """A client-side (classic group protocol) partition assignor.

    name       the protocol name members put in JoinGroup (and the leader matches on);
    protocol   the rebalance protocol it runs under, EAGER or COOPERATIVE (KIP-429);
    supported_protocols  every protocol it can run under (a member picks the highest all share);
    version    Java's ConsumerPartitionAssignor.version(); 0 for all built-in assignors.
    """

    name: ClassVar[str]
    protocol: ClassVar[str] = EAGER
    supported_protocols: ClassVar[tuple[str, ...]] = (EAGER,)
    version: ClassVar[int] = 0

    def subscription_user_data(self, topics: Iterable[str], current_assignment: Iterable[TopicPartition] | None,
                               generation: int) -> bytes | None:
        """User data this member sends in its subscription. `current_assignment` is None before the
        member's first assignment. Built-ins without state send none."""
        return None

    @abstractmethod
    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        """Leader side: give every member in `subscriptions` an Assignment (possibly empty)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class DealingAssignor(Assignor):
    """An eager assignor that deals the subscribed partitions out in one pass (range, roundrobin):
    `assign` validates its input and hands `deal` the partition count of every subscribed topic and
    an empty Assignment per member to fill."""

    @abstractmethod
    def deal(self, counts: Mapping[str, int], subscriptions: Mapping[str, Subscription],
             result: dict[str, Assignment]) -> None:
        """Fill `result` from `counts` (subscribed topic -> partition count)."""

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        validate(partitions_per_topic, subscriptions)
        result = {m: Assignment() for m in subscriptions}
        self.deal(subscribed_partition_counts(partitions_per_topic, subscriptions), subscriptions, result)
        return result
