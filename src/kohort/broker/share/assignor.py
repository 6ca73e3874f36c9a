"""The share groups' server-side assignor, "simple" (KIP-932, Kafka 4.3's SimpleAssignor), pure.

Members of a share group may share partitions: every record is still delivered to one member at a
time by the partition leader, so the assignor only spreads the load. With T partitions and M members
each partition gets desiredSharing = ceil(M / T) members, and the desiredSharing * T slots are spread
over the members as evenly as possible (3 members, 2 partitions: 2, 1, 1 partitions). Starting from
the current assignment, it drops partitions no longer subscribed (or gone), trims members holding more
than their quota and partitions shared by more than desiredSharing members, then fills the rest,
least-shared partitions first (a member that already shares every partition still short of sharers
trades with one that does not). Balance beats stickiness. When every member subscribes to the same
topics the partitions are balanced as one set; mixed subscriptions are balanced topic by topic among
the members subscribed to it. Not rack-aware.
"""
from __future__ import annotations

import uuid as _uuid
from typing import Mapping

TopicIdPartition = tuple[_uuid.UUID, int]
Assignment = dict[_uuid.UUID, frozenset[int]]

NAME = "simple"


def assign(subscriptions: Mapping[str, frozenset[_uuid.UUID]], partitions: Mapping[_uuid.UUID, frozenset[int]],
           current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """The target assignment: member id -> {topic id: partitions}.

    `subscriptions`: member -> subscribed topic ids; `partitions`: topic id -> its assignable
    partitions (for share groups: the initialized ones); `current`: the members' current targets."""
    members = sorted(subscriptions)
    out: dict[str, set[TopicIdPartition]] = {m: set() for m in members}
    if not members:
        return {}
    cur = {m: {(t, p) for t, ps in current.get(m, {}).items() for p in ps} for m in members}
    subs = {frozenset(s) for s in subscriptions.values()}
    if len(subs) == 1:
        topics = sorted(next(iter(subs)) & set(partitions), key=str)
        tps = [(t, p) for t in topics for p in sorted(partitions[t])]
        _assign_set(tps, members, cur, out)
    else:
        for t in sorted(set(partitions), key=str):
            who = [m for m in members if t in subscriptions[m]]
            if not who:
                continue
            tps = [(t, p) for p in sorted(partitions[t])]
            _assign_set(tps, who, {m: {tp for tp in cur[m] if tp[0] == t} for m in who}, out)
    result: dict[str, Assignment] = {}
    for m, tps in out.items():
        by_topic: dict[_uuid.UUID, set[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, set()).add(p)
        result[m] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def _assign_set(tps: list[TopicIdPartition], members: list[str], cur: Mapping[str, set[TopicIdPartition]],
                out: dict[str, set[TopicIdPartition]]) -> None:
    if not tps or not members:
        return
    n_p, n_m = len(tps), len(members)
    sharing = -(-n_m // n_p)
    slots = sharing * n_p
    valid = set(tps)
    held = {m: [tp for tp in sorted(cur.get(m, ()), key=_order) if tp in valid] for m in members}
    # quotas: slots spread evenly; the members holding most get the larger quotas (stickiness)
    base, extra = divmod(slots, n_m)
    ranked = sorted(members, key=lambda m: (-len(held[m]), m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
    sharers: dict[TopicIdPartition, list[str]] = {tp: [] for tp in tps}
    mine: dict[str, list[TopicIdPartition]] = {m: [] for m in members}
    for m in ranked:                       # keep what fits the member's quota and the partition's sharing
        for tp in held[m]:
            if len(mine[m]) < quota[m] and len(sharers[tp]) < sharing:
                mine[m].append(tp)
                sharers[tp].append(m)
    order = {tp: i for i, tp in enumerate(tps)}
    for m in ranked:                       # fill: least-shared partitions first
        while len(mine[m]) < quota[m]:
            free = [tp for tp in tps if m not in sharers[tp] and len(sharers[tp]) < sharing]
            if free:
                tp = min(free, key=lambda x: (len(sharers[x]), order[x]))
                mine[m].append(tp)
                sharers[tp].append(m)
            elif not _trade(m, tps, members, sharing, mine, sharers):
                break
    for m in members:
        out[m].update(mine[m])


def _trade(m: str, tps: list[TopicIdPartition], members: list[str], sharing: int,
           mine: dict[str, list[TopicIdPartition]], sharers: dict[TopicIdPartition, list[str]]) -> bool:
    """`m` has quota left but already shares every partition still short of sharers: another member x
    that does not share such a partition p hands `m` one of its partitions q, and takes p instead (x
    keeps its count, m gains one, p gains a sharer). False when no such trade exists."""
    for p in tps:
        if len(sharers[p]) >= sharing:
            continue
        for x in members:
            if x == m or x in sharers[p]:
                continue
            for q in mine[x]:
                if m not in sharers[q]:
                    mine[x].remove(q)
                    sharers[q].remove(x)
                    mine[m].append(q)
                    sharers[q].append(m)
                    mine[x].append(p)
                    sharers[p].append(x)
                    return True
    return False


def _order(tp: TopicIdPartition):
    return (str(tp[0]), tp[1])
