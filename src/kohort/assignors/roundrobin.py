"""The "roundrobin" assignor (Java's RoundRobinAssignor, librdkafka's roundrobin).

All subscribed partitions, sorted by topic then partition, are dealt one at a time to members in
MemberInfo order (static members by group.instance.id first, then member id), cycling; a member not
subscribed to the partition's topic is skipped and the deal continues from the next one. With
identical subscriptions the counts differ by at most one; with differing ones they may not.
"""
from __future__ import annotations

from typing import Mapping

from kohort.assignors.base import EAGER, Assignment, DealingAssignor, Subscription, java_order, sorted_members


class RoundRobinAssignor(DealingAssignor):
    name = "roundrobin"
    protocol = EAGER
    supported_protocols = (EAGER,)

    def deal(self, counts: Mapping[str, int], subscriptions: Mapping[str, Subscription],
             result: dict[str, Assignment]) -> None:
        members = sorted_members(subscriptions)
        topic_sets = {m: set(subscriptions[m].topics) for m in members}
        pos = 0  # the circular iterator's cursor into `members`
        for topic in sorted(counts, key=java_order):
            for p in range(counts[topic]):
                # some member subscribes to `topic` (counts only holds subscribed topics): this ends
                while topic not in topic_sets[members[pos]]:
                    pos = (pos + 1) % len(members)
                result[members[pos]].partitions.append((topic, p))
                pos = (pos + 1) % len(members)
