"""The group registry: every group id the coordinator knows, its GroupType and the machine that owns
it. Handlers, the console, the metrics and the group events ask it (through `runtime.groups`) and
nothing else about which machine serves a group; the runtime asks it where to send an operation.

A group id is one group: a KIP-848 consumer group (owned by `ConsumerGroups`), a share group (KIP-932,
owned by `ShareGroups`, which has no committed offsets) or a classic group (owned by
`ClassicGroupCoordinator`; a simple group, made by a commit without a generation, is one too).
Committed offsets are kept apart from the groups, by group id, in an OffsetMetadataManager
(kohort.broker.coordinator.offsets) whose operations the classic machine runs for every group: the
registry connects it to the other machines' groups (`other_group`: each group answers for its own
offsets; a share group refuses them) and to the consumer machine's deletion of an Empty group whose
offsets expired. Otherwise pure: reads the machines' state, changes nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping

import kohort.broker.coordinator.codes as C
from .consumer_group import ConsumerGroups
from .consumer_group_model import ConsumerGroup
from .coordinator import ClassicGroupCoordinator
from .group import ClassicGroup, CommittedOffset, GroupState
from .machine import GroupMachine, GroupType
from .model import Outcome
from .offsets import OffsetsGroup

if TYPE_CHECKING:      # the share machine lives in kohort.broker.share, which imports this package
    from kohort.broker.share.machine import ShareGroups


class GroupRegistry:
    def __init__(self, classic: ClassicGroupCoordinator, consumer: ConsumerGroups | None = None,
                 share: "ShareGroups | None" = None) -> None:
        self.classic = classic
        self.consumer = consumer          # None when group.coordinator.rebalance.protocols lacks it
        self.share = share                # None when the share.version feature is 0
        self.machines: tuple[GroupMachine, ...] = tuple(m for m in (classic, consumer, share) if m is not None)
        classic.other_group = self.other_group
        classic.delete_other_group = self._delete_expired_group
        classic.other_group_ids = self.consumer_groups

    # -- serving -----------------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        """loading | active | inactive (the coordinator loads every machine at once)."""
        return self.classic.phase

    @property
    def active(self) -> bool:
        return self.classic.phase == "active"

    def serves(self, group_type: GroupType) -> bool:
        """Whether this broker serves groups of `group_type` at all."""
        return any(m.GROUP_TYPE is group_type for m in self.machines)

    # -- which group, which machine ----------------------------------------------------------------
    def type_of(self, group_id: str) -> GroupType | None:
        """The type of the live group `group_id`; None when there is none (unknown or Dead)."""
        if self.consumer is not None and group_id in self.consumer.groups:
            return GroupType.CONSUMER
        if self.share is not None and group_id in self.share.groups:
            return GroupType.SHARE
        g = self.classic.groups.get(group_id)
        if g is not None and not g.is_(GroupState.DEAD):
            return GroupType.CLASSIC
        return None

    def owner(self, group_id: str) -> GroupMachine:
        """The machine answering group `group_id`'s membership requests: its consumer-group machine
        when it is a consumer group and the coordinator is serving, else the classic coordinator
        (which also answers unknown ids, a loading or an unloaded coordinator)."""
        if self.active and self.consumer is not None and group_id in self.consumer.groups:
            return self.consumer
        return self.classic

    def share_group(self, group_id: str) -> Any:
        """The share group `group_id` (kohort.broker.share.group.ShareGroup), or None."""
        return self.share.groups.get(group_id) if self.share is not None else None

    def share_groups(self) -> Mapping[str, Any]:
        return self.share.groups if self.share is not None else {}

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.consumer.groups.get(group_id) if self.consumer is not None else None

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        """The classic coordinator's group (a Dead one too, while its tombstone is stored)."""
        return self.classic.groups.get(group_id)

    def other_group(self, group_id: str) -> OffsetsGroup | None:
        """The group of `group_id` that is not a classic group, as the offsets ask it: a consumer
        group answers for its members; a share group has no offsets (GROUP_ID_NOT_FOUND, "Group X is
        not a consumer group." in Kafka)."""
        cg = self.consumer_group(group_id)
        if cg is not None:
            return cg
        if self.share is not None and group_id in self.share.groups:
            return _SHARE_GROUP_OFFSETS
        return None

    def _delete_expired_group(self, group_id: str, now_ms: int) -> Outcome:
        """An Empty consumer group whose offsets all expired: its machine tombstones its records."""
        if self.consumer is None or self.consumer_group(group_id) is None:
            return Outcome()
        return self.consumer.delete_group(group_id, now_ms)

    def consumer_groups(self) -> Mapping[str, ConsumerGroup]:
        return self.consumer.groups if self.consumer is not None else {}

    def classic_groups(self) -> Mapping[str, ClassicGroup]:
        """Every group the classic coordinator holds, simple groups and Dead ones included."""
        return self.classic.groups

    def group_ids(self, include_dead: bool = False) -> set[str]:
        """Every group id: consumer, share and classic groups (Dead ones too with `include_dead`)."""
        ids = {gid for gid, g in self.classic.groups.items() if include_dead or not g.is_(GroupState.DEAD)}
        ids.update(self.consumer_groups())
        ids.update(self.share_groups())
        return ids

    # -- what callers read -------------------------------------------------------------------------
    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        """The group's committed offsets, (topic, partition) -> CommittedOffset (any group type)."""
        return dict(self.classic.offsets.of(group_id))

    def all_committed_offsets(self) -> Iterator[tuple[str, Mapping[tuple[str, int], CommittedOffset]]]:
        """(group id, its committed offsets) for every group holding any, by group id."""
        yield from self.classic.offsets.groups()

    def assignor_name(self, group_id: str) -> str | None:
        """The server assignor a consumer group uses (Kafka's vote over its members), or the
        classic group's chosen protocol."""
        cg = self.consumer_group(group_id)
        if cg is not None and self.consumer is not None:
            return self.consumer.assignor_name(cg)
        g = self.classic.groups.get(group_id)
        return g.protocol_name if g is not None else None

    def classic_group_active(self, group_id: str) -> bool:
        """A classic group with members or a rebalance under way (not Empty, not Dead)."""
        g = self.classic.groups.get(group_id)
        return g is not None and not g.is_(GroupState.EMPTY, GroupState.DEAD)


class _ShareGroupOffsets:
    """A share group as the offsets see it: it has none (KIP-932 share groups keep their state in
    `__share_group_state`); every offset operation is GROUP_ID_NOT_FOUND and nothing expires."""

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_or_epoch: int,
                               transactional: bool, api_version: int) -> int:
        return C.GROUP_ID_NOT_FOUND

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int:
        return C.GROUP_ID_NOT_FOUND

    def validate_offset_delete(self) -> int:
        return C.GROUP_ID_NOT_FOUND

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return False

    def offset_expiration_base(self) -> None:
        return None

    def is_empty(self) -> bool:
        return False


_SHARE_GROUP_OFFSETS = _ShareGroupOffsets()
