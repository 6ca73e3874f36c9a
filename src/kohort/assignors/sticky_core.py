"""The sticky assignment algorithm shared by "sticky" (KIP-54) and "cooperative-sticky" (KIP-429).

This follows Java's AbstractStickyAssignor so a kohort leader hands out what a Java leader would:

1. Collect each member's previous partitions and generation (`MemberData`; where it comes from is the
   concrete assignor's business). A partition claimed by several members goes to the claimant with
   the highest generation; two claimants of the same generation both lose it (KIP-341).
2. If every member subscribes to the same topics, the *constrained* builder runs: each member keeps
   its previous partitions up to its quota (floor or ceil of partitions/members), then the rest are
   dealt round robin to members under quota. It records which partitions move away from a member
   that still owns them ("transferring ownership"), which the cooperative assignor withholds.
3. Otherwise the *general* builder runs: keep every still-valid previous assignment, give each
   unassigned partition to the least-loaded eligible member, then move partitions from the most- to
   the least-loaded eligible members until no move improves balance, preferring moves back to a
   partition's previous owner, and undoing the moves if they did not lower the balance score.

Result: counts differ by at most one where subscriptions allow it, and as few partitions move as
that balance needs. Where Java iterates a HashMap, this module iterates members in Java string
order instead, so results are deterministic. Rack-aware sticky assignment (KIP-881) is not done:
`assign` is not told partition replica racks.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Mapping

from kohort.assignors.base import DEFAULT_GENERATION, AssignorError, TopicPartition, java_order


@dataclass
class MemberData:
    """What a member reports about its past: partitions it had and the generation it had them in."""

    partitions: list[TopicPartition] = field(default_factory=list)
    generation: int | None = None  # None: not reported (Java's Optional.empty())


def _tp_key(tp: TopicPartition) -> tuple:
    return (java_order(tp[0]), tp[1])


def sticky_assign(partition_counts: Mapping[str, int], topics: Mapping[str, list[str]],
                  member_data: Mapping[str, MemberData]) -> tuple[dict[str, list[TopicPartition]],
                                                                  dict[TopicPartition, str] | None]:
    """Run the sticky algorithm.

    partition_counts: topic -> partition count, only topics that are subscribed and exist (count > 0).
    topics:           member -> subscribed topics.
    member_data:      member -> MemberData.
    Returns (member -> partitions, partitions_transferring_ownership). The second is the map the
    constrained builder keeps (partition -> new owner, for partitions taken from a member that still
    owns them) or None after the general builder, where the caller must compute it from owned sets.
    """
    members = sorted(topics, key=java_order)
    if not members:
        return {}, {}
    owned, multi_owned, all_equal, max_generation = _collect_owned(partition_counts, topics, member_data, members)
    if all_equal:
        return _Constrained(partition_counts, members, owned, multi_owned).build()
    builder = _General(partition_counts, topics, members, owned, member_data, max_generation)
    return builder.build(), None


def _collect_owned(partition_counts, topics, member_data, members):
    """Java's allSubscriptionsEqual: previous owners per member, with conflicting claims resolved."""
    first = set(topics[members[0]])
    all_equal = all(set(topics[m]) == first for m in members)
    owned: dict[str, list[TopicPartition]] = {}
    owner_of: dict[TopicPartition, str] = {}
    multi_owned: set[TopicPartition] = set()
    generation_of: dict[str, int] = {}
    max_generation = DEFAULT_GENERATION
    for m in members:
        data = member_data[m]
        gen = DEFAULT_GENERATION if data.generation is None else data.generation
        generation_of[m] = gen
        max_generation = max(max_generation, gen)
        mine: list[TopicPartition] = []
        owned[m] = mine
        seen: set[TopicPartition] = set()
        for tp in data.partitions:
            # Java only checks the topic; a partition number outside the topic is dropped here too so
            # a member's stale metadata cannot put a nonexistent partition into the assignment.
            count = partition_counts.get(tp[0])
            if count is None or not 0 <= tp[1] < count or tp in seen:
                continue
            seen.add(tp)
            other = owner_of.get(tp)
            if other is None:
                mine.append(tp)
                owner_of[tp] = m
            elif gen == generation_of[other]:
                # same generation, two owners: the claim is invalid for both
                multi_owned.add(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = m
            elif gen > generation_of[other]:
                mine.append(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = m
            # else: the other claimant has the newer generation and keeps it
    return owned, multi_owned, all_equal, max_generation


class _Constrained:
    """All members subscribe to the same topics: quota-based sticky fill (Java's ConstrainedAssignmentBuilder)."""

    def __init__(self, partition_counts, members, owned, multi_owned):
        self.counts = partition_counts
        self.members = members
        self.owned = owned
        self.multi_owned = multi_owned
        total = sum(partition_counts.values())
        n = len(members)
        self.min_quota, rem = divmod(total, n)
        self.max_quota = self.min_quota + (1 if rem else 0)
        self.expected_over = rem  # members that must end with max_quota (0 when min == max)
        self.current_over = 0
        self.assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.transferring: dict[TopicPartition, str] = {}
        self.under_min: list[str] = []
        self.exactly_min: list[str] = []

    def build(self):
        assigned = self._assign_owned()
        unassigned = [(t, p) for t in sorted(self.counts, key=java_order) for p in range(self.counts[t])
                      if (t, p) not in assigned]
        self.under_min.sort(key=java_order)
        self.exactly_min.sort(key=java_order)
        self._assign_round_robin(unassigned)
        self._verify()
        return self.assignment, self.transferring

    def _assign_owned(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for m in self.members:
            mine = sorted(self.owned[m], key=lambda tp: (tp[1], java_order(tp[0])))
            mine = [tp for tp in mine if tp not in self.multi_owned]
            target = self.assignment[m]
            if len(mine) < self.min_quota:
                target.extend(mine)
                assigned.update(mine)
                self.under_min.append(m)
            elif len(mine) >= self.max_quota and self.current_over < self.expected_over:
                self.current_over += 1
                if self.current_over == self.expected_over:
                    self.exactly_min.clear()
                target.extend(mine[:self.max_quota])
                assigned.update(mine[:self.max_quota])
                for tp in mine[self.max_quota:]:
                    self.maybe_revoked[tp] = m
            else:
                target.extend(mine[:self.min_quota])
                assigned.update(mine[:self.min_quota])
                for tp in mine[self.min_quota:]:
                    self.maybe_revoked[tp] = m
                if self.current_over < self.expected_over:
                    self.exactly_min.append(m)
        return assigned

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        under = self.under_min
        i = 0  # cursor of Java's iterator over the under-min members (which shrinks as they fill)
        for tp in unassigned:
            if i < len(under):
                member = under[i]
                i += 1
            elif not under and not self.exactly_min:
                raise AssignorError(f"sticky: no member left to take {tp} (quota {self.min_quota}/{self.max_quota})")
            elif not under:
                member = self.exactly_min.pop(0)
            else:
                member = under[0]
                i = 1
            count = self._assign_new(tp, member)
            if count == self.min_quota:
                del under[i - 1]
                i -= 1
                self.exactly_min.append(member)
            elif count == self.max_quota:
                self.current_over += 1

    def _assign_new(self, tp: TopicPartition, member: str) -> int:
        self.assignment[member].append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != member) or tp in self.multi_owned:
            self.transferring[tp] = member
        return len(self.assignment[member])

    def _verify(self) -> None:
        if not self.under_min:
            return
        if self.current_over != self.expected_over:
            raise AssignorError(f"sticky: {self.current_over} members reached the max quota, {self.expected_over} expected")
        for m in self.under_min:
            if len(self.assignment[m]) != self.min_quota:
                raise AssignorError(f"sticky: member {m!r} ended below the min quota {self.min_quota}")


class _SortedMembers:
    """Java's TreeSet of members ordered by (current assignment size, member id)."""

    def __init__(self, sizes):
        self._sizes = sizes  # member -> list (its current assignment)
        self._keys: dict[str, tuple] = {}
        self._list: list[tuple] = []

    def add(self, m: str) -> None:
        if m in self._keys:
            return
        key = (len(self._sizes[m]), java_order(m), m)
        self._keys[m] = key
        bisect.insort(self._list, key)

    def remove(self, m: str) -> None:
        key = self._keys.pop(m, None)
        if key is not None:
            del self._list[bisect.bisect_left(self._list, key)]

    def first(self) -> str:
        return self._list[0][2]

    def last(self) -> str:
        return self._list[-1][2]

    def __iter__(self):
        return iter([k[2] for k in self._list])


class _Movements:
    """Java's PartitionMovements: net movements so far, to undo a move rather than make a new one."""

    def __init__(self):
        self.by_topic: dict[str, dict[tuple[str, str], dict[TopicPartition, None]]] = {}
        self.of_partition: dict[TopicPartition, tuple[str, str]] = {}

    def _remove_record(self, tp):
        pair = self.of_partition.pop(tp)
        per_topic = self.by_topic[tp[0]]
        per_topic[pair].pop(tp)
        if not per_topic[pair]:
            del per_topic[pair]
        if not per_topic:
            del self.by_topic[tp[0]]
        return pair

    def _add_record(self, tp, pair):
        self.of_partition[tp] = pair
        self.by_topic.setdefault(tp[0], {}).setdefault(pair, {})[tp] = None

    def move(self, tp, old, new):
        if tp in self.of_partition:
            src, _dst = self._remove_record(tp)
            if src != new:
                self._add_record(tp, (src, new))
        else:
            self._add_record(tp, (old, new))

    def actual_partition_to_move(self, tp, old, new):
        per_topic = self.by_topic.get(tp[0])
        if per_topic is None:
            return tp
        if tp in self.of_partition:
            old = self.of_partition[tp][0]
        reverse = per_topic.get((new, old))
        if not reverse:
            return tp
        return next(iter(reverse))


class _General:
    """Members subscribe to different topics: Java's GeneralAssignmentBuilder."""

    def __init__(self, partition_counts, topics, members, owned, member_data, max_generation):
        self.counts = partition_counts
        self.members = members
        self.member_data = member_data
        self.max_generation = max_generation
        self.subscribed = {m: set(topics[m]) for m in members}
        self.topic_consumers: dict[str, list[str]] = {t: [] for t in partition_counts}
        self.consumer_topics: dict[str, list[str]] = {}
        for m in members:
            mine = [t for t in dict.fromkeys(topics[m]) if t in partition_counts]
            self.consumer_topics[m] = mine
            for t in mine:
                self.topic_consumers[t].append(m)
        self.current: dict[str, list[TopicPartition]] = {m: list(owned.get(m, [])) for m in members}
        self.owner: dict[TopicPartition, str] = {tp: m for m, tps in self.current.items() for tp in tps}
        topic_order = sorted(partition_counts, key=lambda t: (len(self.topic_consumers[t]), java_order(t)))
        self.sorted_all = [(t, p) for t in topic_order for p in range(partition_counts[t])]
        self.sorted_members = _SortedMembers(self.current)
        self.revocation_required = False
        self.total = sum(partition_counts.values())
        self.movements = _Movements()

    def build(self):
        prev = self._previous_assignment()
        assigned = self._keep_owned()
        unassigned = [tp for tp in self.sorted_all if tp not in assigned]
        for m in self.members:
            self.sorted_members.add(m)
        self._balance(prev, unassigned)
        return self.current

    def _previous_assignment(self) -> dict[TopicPartition, tuple[str, int]]:
        """Partition -> (member, generation) of its latest owner before the current one (KIP-341)."""
        prev: dict[TopicPartition, tuple[str, int]] = {}
        for m in self.members:
            data = self.member_data[m]
            if data.generation is not None and data.generation < self.max_generation:
                gen = data.generation
            elif data.generation is None and self.max_generation > DEFAULT_GENERATION:
                gen = DEFAULT_GENERATION
            else:
                continue
            for tp in data.partitions:
                if tp not in prev or gen > prev[tp][1]:
                    prev[tp] = (m, gen)
        return prev

    def _keep_owned(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for m in self.members:
            keep = []
            for tp in self.current[m]:
                if tp[0] not in self.subscribed[m]:
                    self.revocation_required = True
                    del self.owner[tp]
                else:
                    keep.append(tp)
                    assigned.add(tp)
            self.current[m] = keep
        return assigned

    def _max_size(self, m: str) -> int:
        return sum(self.counts[t] for t in self.consumer_topics[m])

    def _is_balanced(self) -> bool:
        lo = len(self.current[self.sorted_members.first()])
        hi = len(self.current[self.sorted_members.last()])
        if lo >= hi - 1:
            return True
        for m in self.sorted_members:
            mine = self.current[m]
            size = len(mine)
            if size == self._max_size(m):
                continue
            mine_set = set(mine)
            for t in self.consumer_topics[m]:
                for p in range(self.counts[t]):
                    tp = (t, p)
                    if tp not in mine_set and size + 1 < len(self.current[self.owner[tp]]):
                        return False
        return True

    @staticmethod
    def _balance_score(assignment: Mapping[str, list]) -> int:
        sizes = [len(v) for v in assignment.values()]
        return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1:])

    def _assign_to_least_loaded(self, tp: TopicPartition) -> None:
        for m in self.sorted_members:
            if tp[0] in self.subscribed[m] and tp[0] in self.counts:
                self.sorted_members.remove(m)
                self.current[m].append(tp)
                self.owner[tp] = m
                self.sorted_members.add(m)
                return

    def _topic_movable(self, topic: str) -> bool:
        return len(self.topic_consumers[topic]) >= 2

    def _member_movable(self, m: str) -> bool:
        if len(self.current[m]) < self._max_size(m):
            return True
        return any(self._topic_movable(tp[0]) for tp in self.current[m])

    def _balance(self, prev, unassigned: list[TopicPartition]) -> None:
        initializing = not self.current[self.sorted_members.last()]
        for tp in unassigned:
            if self.topic_consumers[tp[0]]:
                self._assign_to_least_loaded(tp)

        fixed_topics = {t for t in self.topic_consumers if not self._topic_movable(t)}
        movable_all = [tp for tp in self.sorted_all if tp[0] not in fixed_topics]
        movable_unassigned = [tp for tp in unassigned if tp[0] not in fixed_topics]

        fixed: dict[str, list[TopicPartition]] = {}
        for m in self.members:
            if not self._member_movable(m):
                self.sorted_members.remove(m)
                fixed[m] = self.current.pop(m)

        before = {m: list(v) for m, v in self.current.items()}
        before_owner = dict(self.owner)

        if not self.revocation_required:
            self._perform_reassignments(movable_unassigned, prev)
        moved = self._perform_reassignments(movable_all, prev)

        if not initializing and moved and self._balance_score(self.current) >= self._balance_score(before):
            self.current.clear()
            self.current.update(before)
            self.owner = before_owner
            self.sorted_members = _SortedMembers(self.current)
            for m in self.current:
                self.sorted_members.add(m)

        for m, tps in fixed.items():
            self.current[m] = tps
            self.sorted_members.add(m)

    def _perform_reassignments(self, partitions: list[TopicPartition], prev) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                owner = self.owner[tp]
                back = prev.get(tp)
                # Java moves a partition back to its previous owner whenever that owner is 2+ lighter;
                # it is only done here when that owner can still take it (still in the balancing set
                # and still subscribed), where Java would throw or hand out an unsubscribed partition.
                if (back is not None and back[0] in self.current and tp[0] in self.subscribed[back[0]]
                        and len(self.current[owner]) > len(self.current[back[0]]) + 1):
                    self._reassign(tp, back[0])
                    performed = modified = True
                    continue
                for other in self.topic_consumers[tp[0]]:
                    if len(self.current[owner]) > len(self.current[other]) + 1:
                        self._reassign(tp, self._least_loaded_for(tp[0]))
                        performed = modified = True
                        break
        return performed

    def _least_loaded_for(self, topic: str) -> str:
        for m in self.sorted_members:
            if topic in self.subscribed[m]:
                return m
        raise AssignorError(f"sticky: no member subscribes to {topic!r}")  # unreachable: topic has consumers

    def _reassign(self, tp: TopicPartition, new: str) -> None:
        old = self.owner[tp]
        tp = self.movements.actual_partition_to_move(tp, old, new)
        old = self.owner[tp]
        self.sorted_members.remove(old)
        self.sorted_members.remove(new)
        self.movements.move(tp, old, new)
        self.current[old].remove(tp)
        self.current[new].append(tp)
        self.owner[tp] = new
        self.sorted_members.add(new)
        self.sorted_members.add(old)
