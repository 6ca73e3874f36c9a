"""Committed offsets of every group, after Kafka's OffsetMetadataManager: a pure store keyed by group
id (not held inside any group object), the transactional offsets pending per producer until their
marker (kohort.broker.coordinator.txn_offsets), and what every offset operation needs from it:

* which group may commit or fetch: `OffsetsGroup` is the part of Kafka's Group interface the offsets
  ask (a classic group, a KIP-848 consumer group, a share group each answer for themselves), and
  `validate_offset_commit` / `validate_offset_fetch` are Kafka's OffsetMetadataManager rules around
  them (no group: a commit without a generation makes a simple group, else GROUP_ID_NOT_FOUND from
  v9, ILLEGAL_GENERATION before; a transactional commit's STALE_MEMBER_EPOCH is ILLEGAL_GENERATION);
* the records of an OffsetCommit / TxnOffsetCommit (OFFSET_METADATA_TOO_LARGE past
  offset.metadata.max.bytes) and the committed offsets they become once stored, in write order
  (`record_seq`: a committed transactional offset replaces the current one only if written after it);
* replaying offset records and COMMIT/ABORT markers at load;
* OffsetFetch's answer (read committed; with require_stable, UNSTABLE_OFFSET_COMMIT for a partition
  with a pending transactional offset, KIP-447);
* what OffsetDelete, DeleteGroups and expiration tombstone.

The group lifecycle that offsets imply -- the simple classic group (no protocol type, Empty) a commit
without a generation makes when no group of any type has the id, an Empty group deleted once its last
offset expired -- is the owning machine's, as in Kafka's GroupMetadataManager. Pure: no clock, no I/O.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping, Protocol

import kohort.broker.coordinator.codes as C
from .config import CoordinatorConfig
from .group import CommittedOffset
from .model import CommitPartition, FetchedPartition, OffsetRecord, PartitionResult
from .txn_offsets import PendingTxnOffsets

TopicPartition = tuple[str, int]
_EMPTY: Mapping[TopicPartition, CommittedOffset] = {}


class OffsetsGroup(Protocol):
    """What the offsets ask a group of any type (Kafka's Group: validateOffsetCommit/Fetch/Delete,
    isSubscribedToTopic, offsetExpirationCondition, isEmpty). Each validation answers an error code,
    NONE when allowed."""

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_or_epoch: int,
                               transactional: bool, api_version: int) -> int: ...

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> int: ...

    def validate_offset_delete(self) -> int: ...

    def is_subscribed_to_topic(self, topic: str) -> bool: ...

    def offset_expiration_base(self) -> Callable[[CommittedOffset], int] | None:
        """The time an offset's retention runs from; None when the group's offsets do not expire now."""

    def is_empty(self) -> bool: ...


def validate_offset_commit(group: OffsetsGroup | None, member_id: str, instance_id: str | None,
                           generation_or_epoch: int, transactional: bool, api_version: int) -> tuple[int, bool]:
    """(error code, make a simple group) for an OffsetCommit (or TxnOffsetCommit when `transactional`)
    to `group` (None: no group of any type has the id)."""
    if group is None:
        if generation_or_epoch < 0:      # an admin or assign() commit: Kafka makes a simple group
            return C.NONE, True
        return (C.ILLEGAL_GENERATION if transactional or api_version < 9 else C.GROUP_ID_NOT_FOUND), False
    err = group.validate_offset_commit(member_id, instance_id, generation_or_epoch, transactional, api_version)
    if transactional and err == C.STALE_MEMBER_EPOCH:
        err = C.ILLEGAL_GENERATION
    return err, False


def validate_offset_fetch(group: OffsetsGroup | None, member_id: str | None, member_epoch: int) -> tuple[int, bool]:
    """(error code, offsets visible) for an OffsetFetch: no group, or one refusing with
    GROUP_ID_NOT_FOUND (a Dead classic group, a share group), is answered as if nothing were
    committed and without an error, as Kafka's fetchOffsets; any other refusal is the group's error."""
    if group is None:
        return C.NONE, False
    err = group.validate_offset_fetch(member_id, member_epoch)
    if err == C.GROUP_ID_NOT_FOUND:
        return C.NONE, False
    return err, err == C.NONE


class OffsetMetadataManager:
    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self._committed: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.pending_txn = PendingTxnOffsets()
        self._record_seq = 0        # write order of offset records

    # -- the store -----------------------------------------------------------------------------------
    def of(self, group_id: str) -> Mapping[TopicPartition, CommittedOffset]:
        """The group's committed offsets (read-only view; empty when it has none)."""
        return self._committed.get(group_id, _EMPTY)

    def has(self, group_id: str) -> bool:
        return bool(self._committed.get(group_id))

    def groups(self) -> Iterator[tuple[str, Mapping[TopicPartition, CommittedOffset]]]:
        """(group id, its committed offsets) for every group holding any, by group id."""
        for gid in sorted(self._committed):
            yield gid, self._committed[gid]

    def put(self, group_id: str, tp: TopicPartition, co: CommittedOffset) -> None:
        self._committed.setdefault(group_id, {})[tp] = co

    def remove(self, group_id: str, tp: TopicPartition, co: CommittedOffset | None = None) -> None:
        """Drop the group's offset of `tp` (only if it is still `co`, when given)."""
        offsets = self._committed.get(group_id)
        if offsets is None or tp not in offsets or (co is not None and offsets[tp] is not co):
            return
        del offsets[tp]
        if not offsets:
            del self._committed[group_id]

    def clear(self) -> None:
        self._committed.clear()

    def _next_seq(self) -> int:
        self._record_seq += 1
        return self._record_seq

    def _committed_offset(self, r: OffsetRecord, expire_timestamp: int | None) -> CommittedOffset:
        return CommittedOffset(r.offset, r.leader_epoch, r.metadata or "", r.commit_timestamp, expire_timestamp,
                               self._next_seq())

    # -- commits -------------------------------------------------------------------------------------
    def commit_records(self, group_id: str, topics: Iterable[tuple[str, Iterable[CommitPartition]]],
                       now_ms: int, expire: int | None) -> tuple[list[tuple[str, list[PartitionResult]]],
                                                                 list[OffsetRecord]]:
        """Per partition of an (Txn)OffsetCommit: its result (OFFSET_METADATA_TOO_LARGE past
        offset.metadata.max.bytes, else NONE) and, for the accepted ones, the record to append."""
        max_md = self.config.offset_metadata_max_bytes
        results: list[tuple[str, list[PartitionResult]]] = []
        records: list[OffsetRecord] = []
        for topic, parts in topics:
            rs = []
            for pp in parts:
                if pp.committed_metadata is not None and len(pp.committed_metadata) > max_md:
                    rs.append(PartitionResult(pp.partition_index, C.OFFSET_METADATA_TOO_LARGE))
                else:
                    rs.append(PartitionResult(pp.partition_index, C.NONE))
                    records.append(OffsetRecord(
                        group_id, topic, pp.partition_index, pp.committed_offset,
                        pp.committed_leader_epoch, pp.committed_metadata or "", now_ms, expire))
            results.append((topic, rs))
        return results, records

    def stored(self, records: Iterable[OffsetRecord]) -> None:
        """An OffsetCommit's records were stored: they are the groups' committed offsets now."""
        for r in records:
            self.put(r.group, (r.topic, r.partition), self._committed_offset(r, r.expire_timestamp))

    def stored_pending(self, producer_id: int, records: Iterable[OffsetRecord]) -> None:
        """A TxnOffsetCommit's records were stored: pending for the producer until its marker."""
        for r in records:
            self.pending_txn.put(producer_id, (r.group, r.topic, r.partition), self._committed_offset(r, None))

    # -- load ----------------------------------------------------------------------------------------
    def replay(self, record: OffsetRecord, producer_id: int = -1) -> None:
        """One stored offset record (log order); `producer_id` >= 0: in a transactional batch of that
        producer whose transaction has no marker yet -- a pending offset."""
        if record.tombstone:
            self.remove(record.group, (record.topic, record.partition))
            self.pending_txn.discard(record.group, record.topic, record.partition)
            return
        co = self._committed_offset(record, record.expire_timestamp)
        if producer_id >= 0:
            self.pending_txn.put(producer_id, (record.group, record.topic, record.partition), co)
        else:
            self.put(record.group, (record.topic, record.partition), co)

    def replay_marker(self, producer_id: int, commit: bool, group_filter: Callable[[str], bool]) -> list[str]:
        """A COMMIT/ABORT marker of `producer_id` on the `__consumer_offsets` partition holding the
        groups `group_filter` accepts: its pending offsets materialised (if written after the current
        one) or dropped. -> the ids of the groups that got offsets, in the order of their offsets."""
        touched: dict[str, None] = {}
        for (gid, topic, part), co in self.pending_txn.take(producer_id, group_filter):
            if not commit:
                continue
            touched[gid] = None
            cur = self.of(gid).get((topic, part))
            if cur is None or co.record_seq > cur.record_seq:
                self.put(gid, (topic, part), co)
        return list(touched)

    # -- reads ---------------------------------------------------------------------------------------
    def fetch(self, group_id: str, topics: tuple | None, require_stable: bool,
              visible: bool = True) -> tuple[tuple[str, tuple[FetchedPartition, ...]], ...]:
        """OffsetFetch's topics for `topics` ((topic, partitions) pairs; None = every committed
        offset); `visible` False (a Dead group) answers as if nothing were committed."""
        offsets = self.of(group_id) if visible else _EMPTY
        pending = self.pending_txn

        def unstable(t: str, pt: int) -> bool:
            return require_stable and pending.has(group_id, t, pt)

        if topics is None:
            by_topic: dict[str, list[FetchedPartition]] = {}
            for (topic, part), co in sorted(offsets.items()):
                by_topic.setdefault(topic, []).append(
                    FetchedPartition(part, error_code=C.UNSTABLE_OFFSET_COMMIT) if unstable(topic, part) else
                    FetchedPartition(part, co.offset, co.leader_epoch, co.metadata))
            return tuple((t, tuple(ps)) for t, ps in by_topic.items())
        out = []
        for topic, parts in topics:
            ps = []
            for part in parts:
                held = offsets.get((topic, part))
                ps.append(FetchedPartition(part, error_code=C.UNSTABLE_OFFSET_COMMIT)
                          if unstable(topic, part) else FetchedPartition(part) if held is None else
                          FetchedPartition(part, held.offset, held.leader_epoch, held.metadata))
            out.append((topic, tuple(ps)))
        return tuple(out)

    # -- deletions -----------------------------------------------------------------------------------
    def tombstones(self, group_id: str) -> list[OffsetRecord]:
        """The tombstones that delete every offset of the group, committed or pending."""
        offsets = self.of(group_id)
        records = [OffsetRecord(group_id, t, pt, tombstone=True) for (t, pt) in offsets]
        records.extend(OffsetRecord(group_id, t, pt, tombstone=True)
                       for t, pt in sorted(self.pending_txn.keys_of_group(group_id)) if (t, pt) not in offsets)
        return records

    def deleted(self, group_id: str, doomed: Iterable[tuple[TopicPartition, CommittedOffset | None]]) -> None:
        """The tombstones of `doomed` were stored: drop those offsets (unless committed again since)
        and the pending ones of those partitions."""
        for tp, co in doomed:
            if co is not None:
                self.remove(group_id, tp, co)
            self.pending_txn.discard(group_id, *tp)

    def discard_pending_group(self, group_id: str) -> None:
        for t, pt in list(self.pending_txn.keys_of_group(group_id)):
            self.pending_txn.discard(group_id, t, pt)

    def expired(self, group_id: str, now_ms: int, base: Callable[[CommittedOffset], int],
                kept: Callable[[str], bool]) -> list[tuple[TopicPartition, CommittedOffset]]:
        """The group's offsets past their retention: an explicit expire timestamp, else
        offsets.retention.ms after `base(offset)`; never those of topics `kept` or with pending
        transactional offsets."""
        retention = self.config.offsets_retention_ms
        out = []
        for (topic, part), co in self.of(group_id).items():
            if kept(topic) or self.pending_txn.has(group_id, topic, part):
                continue
            if (now_ms >= co.expire_timestamp if co.expire_timestamp is not None
                    else now_ms - base(co) >= retention):
                out.append(((topic, part), co))
        return out
