"""The broker-side `uniform` assignor of KIP-848 (Kafka's UniformAssignor: the default of
`group.consumer.assignors`), sticky against each member's previous target.

Homogeneous subscriptions (every member subscribes to the same topics): N partitions over M members,
quota N // M and N % M members get one more. Pass 1: each member keeps its previous partitions up to
its quota; the extra slot is kept only by a member that already filled it, while extra slots remain
(Kafka's KAFKA-18688 rule, so a balanced target never moves). Pass 2: the freed and new partitions,
in (topic, partition) order, go to members still under their quota (fewest first, then member id).

Heterogeneous subscriptions: (1) members keep previous partitions of topics they still subscribe to;
(2) topics ordered by partitions-per-subscriber descending, subscriber count ascending, name; each
unassigned partition goes to the least-loaded subscriber (ties: member id); (3) per topic with >= 2
subscribers, partitions move from the most- to the least-loaded subscriber until their total loads
differ by at most one (at most 16 passes). Like Kafka, balance is per topic, not global.
"""
from __future__ import annotations

import heapq
from typing import Mapping

from kohort.assignors.server_spec import MemberSpec, Target, homogeneous

MAX_BALANCE_PASSES = 16


def assign(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, Target]:
    if not members:
        return {}
    if homogeneous(members):
        res = _homogeneous(members, topics)
    else:
        res = _heterogeneous(members, topics)
    return {mid: {t: frozenset(ps) for t, ps in tgt.items() if ps} for mid, tgt in res.items()}


def _homogeneous(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, dict]:
    ids = sorted(members)
    subscribed = next(iter(members.values())).subscribed
    counts = {t: topics[t] for t in sorted(subscribed) if t in topics}
    quota, extra = divmod(sum(counts.values()), len(ids))
    out: dict[str, dict[str, set[int]]] = {}
    size: dict[str, int] = {}
    taken: dict[str, set[int]] = {t: set() for t in counts}
    # pass 1: keep previous partitions up to the quota (the lowest (topic, partition) first); who
    # already holds more keeps one extra slot. A member at or under its quota keeps them all, so
    # only the ones above it sort theirs.
    over: list[tuple[str, tuple[str, int]]] = []
    for mid in ids:
        previous = members[mid].previous
        n, whole = 0, True
        for t, ps in previous.items():
            c = counts.get(t)
            if c is None or (ps and (min(ps) < 0 or max(ps) >= c)):
                whole = False
                break
            n += len(ps)
        if whole and n <= quota:
            # the usual case: every previous partition still exists and fits the quota, so the
            # member keeps its previous target as it is (its frozensets shared, copied on a change)
            out[mid] = {t: frozenset(ps) for t, ps in previous.items() if ps}
            for t, ps in out[mid].items():
                taken[t].update(ps)
            size[mid] = n
            continue
        kept: dict[str, set[int]] = {}
        out[mid] = kept
        prev = [(t, p) for t, ps in previous.items() if t in counts
                for p in ps if 0 <= p < counts[t]]
        if len(prev) > quota:
            prev.sort()
            over.append((mid, prev[quota]))
            del prev[quota:]
        for t, p in prev:
            kept.setdefault(t, set()).add(p)
            taken[t].add(p)
        size[mid] = len(prev)
    for mid, (t, p) in over:
        if extra > 0 and p not in taken[t]:
            _add(out[mid], t, p)
            taken[t].add(p)
            size[mid] += 1
            extra -= 1
    # pass 2: the rest, in (topic, partition) order, each to the member with the fewest partitions
    # (then the smallest id): while partitions are free no member is above its quota, so that is
    # one under its quota while any is, else one at it. A heap of (size, member id): handing out F
    # partitions costs O(F log M), not O(F * M).
    heap = [(size[mid], mid) for mid in ids]
    heapq.heapify(heap)
    for t, n in counts.items():
        held = taken[t]
        free = range(n) if not held else sorted(set(range(n)).difference(held))
        for p in free:
            k, mid = heapq.heappop(heap)
            _add(out[mid], t, p)
            heapq.heappush(heap, (k + 1, mid))
    return out


def _add(target: dict, t: str, p: int) -> None:
    """Partition `p` of `t` added to a target being built (a kept frozenset copied first)."""
    ps = target.get(t)
    if ps is None:
        target[t] = {p}
    else:
        if isinstance(ps, frozenset):
            ps = target[t] = set(ps)
        ps.add(p)


def _heterogeneous(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, dict]:
    ids = sorted(members)
    out: dict[str, dict[str, set[int]]] = {mid: {} for mid in ids}
    load = {mid: 0 for mid in ids}
    subscribers: dict[str, list[str]] = {}
    for mid in ids:
        for t in members[mid].subscribed:
            if t in topics:
                subscribers.setdefault(t, []).append(mid)
    taken: set[tuple[str, int]] = set()
    for mid in ids:                                          # (1) stickiness
        for t, ps in sorted(members[mid].previous.items()):
            if t not in subscribers or mid not in subscribers[t]:
                continue
            for p in sorted(ps):
                if p < topics[t] and (t, p) not in taken:
                    out[mid].setdefault(t, set()).add(p)
                    taken.add((t, p))
                    load[mid] += 1
    order = sorted(subscribers, key=lambda t: (-topics[t] / len(subscribers[t]), len(subscribers[t]), t))
    for t in order:                                          # (2) the rest to the least loaded
        for p in range(topics[t]):
            if (t, p) in taken:
                continue
            mid = min(subscribers[t], key=lambda m: (load[m], m))
            out[mid].setdefault(t, set()).add(p)
            taken.add((t, p))
            load[mid] += 1
    for _ in range(MAX_BALANCE_PASSES):                      # (3) per-topic balancing
        moved = False
        for t in order:
            subs = subscribers[t]
            if len(subs) < 2:
                continue
            while True:
                hi = max(subs, key=lambda m: (load[m], m))
                lo = min(subs, key=lambda m: (load[m], m))
                if load[hi] - load[lo] <= 1 or not out[hi].get(t):
                    break
                p = max(out[hi][t])
                out[hi][t].discard(p)
                out[lo].setdefault(t, set()).add(p)
                load[hi] -= 1
                load[lo] += 1
                moved = True
        if not moved:
            break
    return out
