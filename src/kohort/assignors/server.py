"""The registry of broker-side (KIP-848) partition assignors by Kafka's names (`group.consumer.assignors`,
`uniform` and `range`), with the types they share (from `server_spec.py`, re-exported here).

A server assignor is a pure function `assign(members, topics) -> {member_id: {topic: frozenset}}`:
`members` maps member id -> MemberSpec (subscribed topic names that exist, instance id, the member's
previous *target* assignment, which stickiness is measured against, as in Kafka); `topics` maps topic
name -> partition count. Every subscribed partition is assigned to exactly one subscriber; members
with nothing get an empty dict. Kafka iterates hash maps where order is unspecified; kohort sorts
member ids and topic names instead, so results are deterministic.
"""
from __future__ import annotations

from kohort.assignors.server_range import assign as range_assign
from kohort.assignors.server_spec import Assign, MemberSpec, Target, homogeneous  # noqa: F401  (re-exported)
from kohort.assignors.uniform import assign as uniform_assign

_REGISTRY: dict[str, Assign] = {"uniform": uniform_assign, "range": range_assign}


def server_assignor(name: str) -> Assign:
    """The server assignor called `name`; KeyError if kohort has none by that name."""
    return _REGISTRY[name]


SERVER_ASSIGNOR_NAMES = ("uniform", "range")

__all__ = ["Assign", "MemberSpec", "SERVER_ASSIGNOR_NAMES", "Target", "homogeneous", "server_assignor"]
