"""What a broker-side (KIP-848) partition assignor is given and returns.

A server assignor is a pure function `assign(members, topics) -> {member_id: {topic: frozenset}}`
(`Assign`): `members` maps member id -> `MemberSpec` (subscribed topic names that exist, instance
id, the member's previous *target* assignment, which stickiness is measured against, as in Kafka);
`topics` maps topic name -> partition count. The assignors (`uniform.py`, `server_range.py`) import
these types from here; the registry by name is `server.py`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

Target = dict[str, frozenset[int]]


@dataclass(frozen=True)
class MemberSpec:
    subscribed: frozenset[str]
    instance_id: str | None = None
    previous: Mapping[str, frozenset[int]] = field(default_factory=dict)


Assign = Callable[[Mapping[str, MemberSpec], Mapping[str, int]], dict[str, Target]]


def homogeneous(members: Mapping[str, MemberSpec]) -> bool:
    subs = {m.subscribed for m in members.values()}
    return len(subs) <= 1
