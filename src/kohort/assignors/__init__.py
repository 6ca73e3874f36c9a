"""Client-side partition assignors of the classic consumer group protocol, as pure functions.

`range`, `roundrobin`, `sticky` (KIP-54) and `cooperative-sticky` (KIP-429), each wire-compatible
with the Java client's and librdkafka's of the same name, so kohort members can share a group with
them (whichever member is leader). ASSIGNORS maps protocol name -> class; get_assignor(name) gives
an instance.
"""
from __future__ import annotations

from kohort.assignors.base import (
    COOPERATIVE, DEFAULT_GENERATION, EAGER, Assignment, Assignor, AssignorError, Subscription, TopicPartition,
)
from kohort.assignors.cooperative_sticky import CooperativeStickyAssignor
from kohort.assignors.range import RangeAssignor
from kohort.assignors.roundrobin import RoundRobinAssignor
from kohort.assignors.sticky import StickyAssignor, decode_sticky_user_data, encode_sticky_user_data

ASSIGNORS: dict[str, type[Assignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def get_assignor(name: str) -> Assignor:
    """A fresh assignor for a protocol name ("range", "roundrobin", "sticky", "cooperative-sticky")."""
    try:
        return ASSIGNORS[name]()
    except (KeyError, TypeError):
        raise AssignorError(f"unknown partition assignor {name!r}; known: {', '.join(sorted(ASSIGNORS))}") from None


__all__ = [
    "ASSIGNORS", "COOPERATIVE", "DEFAULT_GENERATION", "EAGER", "Assignment", "Assignor", "AssignorError",
    "CooperativeStickyAssignor", "RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "Subscription",
    "TopicPartition", "decode_sticky_user_data", "encode_sticky_user_data", "get_assignor",
]
