"""The broker-side `range` assignor of KIP-848 (Kafka's RangeAssignor in group-coordinator).

Per topic, its subscribers in order (static members first by instance id, then the others by member
id) get contiguous ranges: quota = partitions // subscribers, the first partitions % subscribers get
one more. Recomputed from scratch every time (Kafka's code is order-deterministic, not sticky): with
equal subscriptions and equal partition counts the topics are co-partitioned.
"""
from __future__ import annotations

from typing import Mapping

from kohort.assignors.server_spec import MemberSpec, Target


def _order(item: tuple[str, MemberSpec]):
    mid, spec = item
    return (0, spec.instance_id, mid) if spec.instance_id is not None else (1, "", mid)


def assign(members: Mapping[str, MemberSpec], topics: Mapping[str, int]) -> dict[str, Target]:
    ordered = [mid for mid, _ in sorted(members.items(), key=_order)]
    out: dict[str, dict[str, frozenset[int]]] = {mid: {} for mid in members}
    for topic in sorted(topics):
        n = topics[topic]
        subs = [mid for mid in ordered if topic in members[mid].subscribed]
        if not subs or n <= 0:
            continue
        quota, extra = divmod(n, len(subs))
        start = 0
        for i, mid in enumerate(subs):
            size = quota + (1 if i < extra else 0)
            if size:
                out[mid][topic] = frozenset(range(start, start + size))
            start += size
    return out
