"""The persisted share state of share-partitions, as the share coordinator keeps it in
`__share_group_state` (KIP-932), as a PURE machine: no I/O, no clock (timestamps passed in).

Per key (group id, topic id, partition) it holds the state a ReadShareGroupState answers: state
epoch, leader epoch, start offset (SPSO), the merged state batches, the delivery-complete count
(KIP-1226) and the snapshot epoch. Each write returns the record to append: a ShareUpdate until
`snapshot_update_records` updates have accumulated since the last snapshot, then a ShareSnapshot
(SnapshotEpoch + 1) holding the whole merged state (share.coordinator.snapshot.update.records.per.snapshot).
Merging: a newer batch overrides the overlapping parts of older ones; batches below the start offset
are dropped; a start offset of -1 in a write means unchanged. `replay` applies the records read back
from the topic in order (a null value deletes the key), so the state after a restart is the state
before it. Fencing as Kafka's ShareCoordinatorShard: a stored leader epoch above the write's is
FENCED_LEADER_EPOCH, a stored state epoch above it FENCED_STATE_EPOCH; an unknown key is INVALID_REQUEST.
"""
from __future__ import annotations

import uuid as _uuid
from dataclasses import dataclass, field
from typing import Iterable

from kohort.broker.share.partition import RecordState, StateBatch, StateWrite
from kohort.errors import ErrorCode
from kohort.protocol import share_state_records as R

StateKey = tuple[str, _uuid.UUID, int]

DEFAULT_UPDATES_PER_SNAPSHOT = 500


@dataclass
class PersistedShareState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = -1
    snapshot_epoch: int = 0
    updates_since_snapshot: int = 0
    create_timestamp: int = 0


def merge_batches(old: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    """`new` over `old`: the overlapping parts of older batches are replaced; everything below
    `start_offset` is dropped; adjacent batches with equal state and count are joined."""
    out = sorted(old, key=lambda b: b.first_offset)
    for nb in sorted(new, key=lambda b: b.first_offset):
        kept: list[StateBatch] = []
        for b in out:
            if b.last_offset < nb.first_offset or b.first_offset > nb.last_offset:
                kept.append(b)
                continue
            if b.first_offset < nb.first_offset:
                kept.append(StateBatch(b.first_offset, nb.first_offset - 1, b.delivery_state, b.delivery_count))
            if b.last_offset > nb.last_offset:
                kept.append(StateBatch(nb.last_offset + 1, b.last_offset, b.delivery_state, b.delivery_count))
        kept.append(nb)
        out = sorted(kept, key=lambda b: b.first_offset)
    joined: list[StateBatch] = []
    for b in out:
        if b.last_offset < start_offset:
            continue
        if b.first_offset < start_offset:
            b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        if joined and joined[-1].last_offset + 1 == b.first_offset and \
                (joined[-1].delivery_state, joined[-1].delivery_count) == (b.delivery_state, b.delivery_count):
            joined[-1] = StateBatch(joined[-1].first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        else:
            joined.append(b)
    return joined


def _batches_out(cls, batches: Iterable[StateBatch]):
    return [cls.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                           delivery_state=int(b.delivery_state), delivery_count=b.delivery_count)
            for b in batches]


def _batches_in(values) -> list[StateBatch]:
    return [StateBatch(v.first_offset, v.last_offset, RecordState(v.delivery_state), v.delivery_count)
            for v in values]


class WriteRefused(Exception):
    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error


class ShareStateStore:
    """The share coordinator's state of every share-partition it owns."""

    def __init__(self, updates_per_snapshot: int = DEFAULT_UPDATES_PER_SNAPSHOT):
        if not 0 <= updates_per_snapshot <= 500:
            raise ValueError(f"updates_per_snapshot must be within [0, 500], got {updates_per_snapshot}")
        self.updates_per_snapshot = updates_per_snapshot
        self.states: dict[StateKey, PersistedShareState] = {}

    # -- requests (each returns the record to append: (key, value or None)) -----------------------
    def initialize(self, key: StateKey, state_epoch: int, start_offset: int, now_ms: int):
        """InitializeShareGroupState: a fresh snapshot. Start offset -1 leaves it to the leader's
        share.auto.offset.reset at first load (delivery-complete count then unknown, -1)."""
        old = self.states.get(key)
        if old is not None and old.state_epoch > state_epoch:
            raise WriteRefused(ErrorCode.FENCED_STATE_EPOCH,
                               f"state epoch {state_epoch} is older than the stored {old.state_epoch}")
        st = PersistedShareState(state_epoch=state_epoch, leader_epoch=-1, start_offset=start_offset,
                                 delivery_complete_count=-1 if start_offset < 0 else 0,
                                 snapshot_epoch=(old.snapshot_epoch + 1) if old else 0, create_timestamp=now_ms)
        self.states[key] = st
        return self._snapshot_record(key, st, now_ms)

    def write(self, key: StateKey, write: StateWrite, state_epoch: int, leader_epoch: int, now_ms: int):
        """WriteShareGroupState from the partition leader: an update, or a snapshot when due."""
        st = self.states.get(key)
        if st is None:
            raise WriteRefused(ErrorCode.INVALID_REQUEST, f"share state of {key} was never initialized")
        if leader_epoch != -1 and st.leader_epoch > leader_epoch:
            raise WriteRefused(ErrorCode.FENCED_LEADER_EPOCH,
                               f"leader epoch {leader_epoch} is older than the stored {st.leader_epoch}")
        if state_epoch != -1 and st.state_epoch > state_epoch:
            raise WriteRefused(ErrorCode.FENCED_STATE_EPOCH,
                               f"state epoch {state_epoch} is older than the stored {st.state_epoch}")
        if leader_epoch != -1:
            st.leader_epoch = leader_epoch
        if write.start_offset != -1:
            st.start_offset = write.start_offset
        st.batches = merge_batches(st.batches, write.state_batches, st.start_offset)
        st.delivery_complete_count = write.delivery_complete_count
        if st.updates_since_snapshot >= self.updates_per_snapshot:
            st.snapshot_epoch += 1
            st.updates_since_snapshot = 0
            return self._snapshot_record(key, st, now_ms)
        st.updates_since_snapshot += 1
        k = R.ShareUpdateKey(group_id=key[0], topic_id=key[1], partition=key[2])
        v = R.ShareUpdateValue(snapshot_epoch=st.snapshot_epoch, leader_epoch=st.leader_epoch,
                               start_offset=write.start_offset,
                               delivery_complete_count=write.delivery_complete_count,
                               state_batches=_batches_out(R.ShareUpdateValue, write.state_batches))
        return k, v

    def read(self, key: StateKey, leader_epoch: int = -1) -> PersistedShareState:
        """ReadShareGroupState: the state, recording a newer leader epoch."""
        st = self.states.get(key)
        if st is None:
            raise WriteRefused(ErrorCode.INVALID_REQUEST, f"share state of {key} was never initialized")
        if leader_epoch != -1 and st.leader_epoch > leader_epoch:
            raise WriteRefused(ErrorCode.FENCED_LEADER_EPOCH,
                               f"leader epoch {leader_epoch} is older than the stored {st.leader_epoch}")
        if leader_epoch > st.leader_epoch:
            st.leader_epoch = leader_epoch
        return st

    def delete(self, key: StateKey):
        """DeleteShareGroupState: a tombstone for the snapshot key."""
        self.states.pop(key, None)
        return R.ShareSnapshotKey(group_id=key[0], topic_id=key[1], partition=key[2]), None

    def _snapshot_record(self, key: StateKey, st: PersistedShareState, now_ms: int):
        k = R.ShareSnapshotKey(group_id=key[0], topic_id=key[1], partition=key[2])
        v = R.ShareSnapshotValue(snapshot_epoch=st.snapshot_epoch, state_epoch=st.state_epoch,
                                 leader_epoch=st.leader_epoch, start_offset=st.start_offset,
                                 delivery_complete_count=st.delivery_complete_count,
                                 create_timestamp=st.create_timestamp, write_timestamp=now_ms,
                                 state_batches=_batches_out(R.ShareSnapshotValue, st.batches))
        return k, v

    # -- replay ---------------------------------------------------------------------------------------
    def replay(self, key, value) -> None:
        """Apply one record read back from `__share_group_state` (decoded key and value)."""
        sk: StateKey = (key.group_id, key.topic_id, key.partition)
        if value is None:
            self.states.pop(sk, None)
            return
        if isinstance(value, R.ShareSnapshotValue):
            self.states[sk] = PersistedShareState(
                state_epoch=value.state_epoch, leader_epoch=value.leader_epoch, start_offset=value.start_offset,
                batches=merge_batches([], _batches_in(value.state_batches), value.start_offset),
                delivery_complete_count=value.delivery_complete_count, snapshot_epoch=value.snapshot_epoch,
                create_timestamp=value.create_timestamp)
            return
        st = self.states.get(sk)
        if st is None:
            return                      # an update whose snapshot was pruned or deleted
        st.leader_epoch = value.leader_epoch
        if value.start_offset != -1:
            st.start_offset = value.start_offset
        st.batches = merge_batches(st.batches, _batches_in(value.state_batches), st.start_offset)
        st.delivery_complete_count = value.delivery_complete_count
        st.snapshot_epoch = value.snapshot_epoch
        st.updates_since_snapshot += 1
