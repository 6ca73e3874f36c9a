"""What the broker-side (KIP-848) partition assignors share: the member spec they are given and the
registry of server assignors by Kafka's names (`group.consumer.assignors`, `uniform` and `range`).

A server assignor is a pure function `assign(members, topics) -> {member_id: {topic: frozenset}}`:
`members` maps member id -> MemberSpec (subscribed topic names that exist, instance id, the member's
previous *target* assignment, which stickiness is measured against, as in Kafka); `topics` maps topic
name -> partition count. Every subscribed partition is assigned to exactly one subscriber; members
with nothing get an empty dict. Kafka iterates hash maps where order is unspecified; kohort sorts
member ids and topic names instead, so results are deterministic.
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


def _registry() -> dict[str, Assign]:
    from kohort.assignors.server_range import assign as range_assign
    from kohort.assignors.uniform import assign as uniform_assign
    return {"uniform": uniform_assign, "range": range_assign}


def server_assignor(name: str) -> Assign:
    """The server assignor called `name`; KeyError if kohort has none by that name."""
    return _registry()[name]


SERVER_ASSIGNOR_NAMES = ("uniform", "range")
