"""Transactional offsets held by the group coordinator (KIP-98, KIP-447): the pure store behind
TxnOffsetCommit. Pure data, no I/O, no clock.

An offset committed inside a transaction is written to `__consumer_offsets` in a transactional batch
of the producer, and kept here, per producer id, as *pending*: OffsetFetch does not show it, and
with require_stable (KIP-447) answers UNSTABLE_OFFSET_COMMIT for its partition. The transaction's
COMMIT marker on the group's `__consumer_offsets` partition materialises the producer's pending
offsets of the groups living there -- each one only if it was written after the group's current
offset for that partition (Kafka compares record offsets; kohort the write order, `record_seq`) --
and an ABORT marker drops them (AK OffsetMetadataManager.replay / replayEndTransactionMarker). A
tombstone for an offset (OffsetDelete, DeleteGroups, expiry) drops the pending offsets of that
partition of every producer.
"""
from __future__ import annotations

from typing import Callable, Iterator

from .group import CommittedOffset

Key = tuple[str, str, int]      # (group id, topic, partition)


class PendingTxnOffsets:
    def __init__(self) -> None:
        self.by_producer: dict[int, dict[Key, CommittedOffset]] = {}
        self.by_group: dict[str, set[int]] = {}     # group id -> producer ids with pending offsets

    def put(self, producer_id: int, key: Key, co: CommittedOffset) -> None:
        self.by_producer.setdefault(producer_id, {})[key] = co
        self.by_group.setdefault(key[0], set()).add(producer_id)

    def has(self, group_id: str, topic: str, partition: int) -> bool:
        key = (group_id, topic, partition)
        return any(key in self.by_producer.get(pid, ()) for pid in self.by_group.get(group_id, ()))

    def has_group(self, group_id: str) -> bool:
        return group_id in self.by_group

    def group_ids(self) -> list[str]:
        """The groups with pending offsets."""
        return sorted(self.by_group)

    def keys_of_group(self, group_id: str) -> set[tuple[str, int]]:
        return {(k[1], k[2]) for pid in self.by_group.get(group_id, ())
                for k in self.by_producer.get(pid, {}) if k[0] == group_id}

    def discard(self, group_id: str, topic: str, partition: int) -> None:
        """A tombstone for the offset: every producer's pending offset of that partition goes."""
        key = (group_id, topic, partition)
        for pid in list(self.by_group.get(group_id, ())):
            offs = self.by_producer.get(pid)
            if offs is not None:
                offs.pop(key, None)
                if not offs:
                    del self.by_producer[pid]
                if offs is None or not any(k[0] == group_id for k in offs):
                    self._unlink(group_id, pid)

    def take(self, producer_id: int, group_filter: Callable[[str], bool]) -> Iterator[tuple[Key, CommittedOffset]]:
        """Remove and yield the producer's pending offsets of the groups `group_filter` accepts
        (those whose `__consumer_offsets` partition got the marker)."""
        offs = self.by_producer.get(producer_id)
        if not offs:
            return iter(())
        taken = [(k, co) for k, co in offs.items() if group_filter(k[0])]
        for k, _ in taken:
            del offs[k]
        if not offs:
            del self.by_producer[producer_id]
        for g in {k[0] for k, _ in taken}:
            if not any(k[0] == g for k in offs):
                self._unlink(g, producer_id)
        return iter(taken)

    def producers(self) -> list[int]:
        return sorted(self.by_producer)

    def _unlink(self, group_id: str, producer_id: int) -> None:
        pids = self.by_group.get(group_id)
        if pids is not None:
            pids.discard(producer_id)
            if not pids:
                del self.by_group[group_id]
