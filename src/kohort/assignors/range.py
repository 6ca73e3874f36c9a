"""The "range" assignor (Java's RangeAssignor, librdkafka's range): per topic, contiguous ranges.

For each topic, partitions in numeric order are split into len(consumers) contiguous ranges; the
first `count % len(consumers)` consumers get one extra. Consumers of a topic are ordered like Java's
MemberInfo: static members (KIP-345) by group.instance.id first, then the rest by member id, so a
static member keeps its range across restarts. Co-partitioned topics therefore line up: partition i
of every topic with the same subscribers and count lands on the same member.

Rack-aware range (KIP-881) needs each partition's replica racks, which `assign` is not given; it
assigns as Java does when no partition rack is known.
"""
from __future__ import annotations

from typing import Mapping

from kohort.assignors.base import EAGER, Assignment, DealingAssignor, Subscription, java_order, sorted_members


class RangeAssignor(DealingAssignor):
    name = "range"
    protocol = EAGER
    supported_protocols = (EAGER,)

    def deal(self, counts: Mapping[str, int], subscriptions: Mapping[str, Subscription],
             result: dict[str, Assignment]) -> None:
        for topic in sorted(counts, key=java_order):
            n = counts[topic]
            consumers = sorted_members(subscriptions, (m for m, s in subscriptions.items() if topic in s.topics))
            per_consumer, extra = divmod(n, len(consumers))
            start = 0
            for i, member in enumerate(consumers):
                length = per_consumer + (1 if i < extra else 0)
                result[member].partitions.extend((topic, p) for p in range(start, start + length))
                start += length
