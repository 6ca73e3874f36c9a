"""Per-partition consumer state, and the offset APIs' request/response shapes.

`SubscriptionState` holds what the consumer knows about each assigned partition: the position
(next offset to hand to the application, with the leader epoch of the record before it, KIP-320),
the committed offset (tracked apart from the position), whether it is paused, whether its position
must be reset (auto.offset.reset) or validated after a leader change, and the last high watermark /
last stable offset / log start offset seen, from which lag is derived. Every seek bumps the
partition's `seek_epoch`, which makes data fetched for the old position stale.

Helpers at the bottom build OffsetCommit/OffsetFetch/ListOffsets requests for a version and read
their responses into plain dicts.
"""
from __future__ import annotations

import threading

from kohort.errors import KohortError
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest
from kohort.structs import OffsetAndMetadata, TopicPartition

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


class NoOffsetForPartitionError(KohortError):
    """auto.offset.reset=none and a partition has no committed offset (or its offset is out of range)."""

    retriable = False

    def __init__(self, partitions, why: str = "no committed offset"):
        self.partitions = sorted(partitions)
        names = ", ".join(str(TopicPartition(*tp)) for tp in self.partitions)
        super().__init__(f"{why} for partition(s) {names} and auto.offset.reset=none; "
                         f"seek() them or set auto.offset.reset to earliest or latest")


class PartitionState:
    __slots__ = ("position", "position_epoch", "committed", "paused", "reset_strategy", "awaiting_validation",
                 "high_watermark", "last_stable_offset", "log_start_offset", "seek_epoch", "fetch_offset",
                 "fetch_epoch", "preferred_read_replica")

    def __init__(self):
        self.position: int | None = None       # next offset to hand to the app
        self.position_epoch: int | None = None  # leader epoch of the record before `position`
        self.committed: OffsetAndMetadata | None = None
        self.paused = False
        self.reset_strategy: str | None = None  # "earliest"/"latest"/"none" while a reset is pending
        self.awaiting_validation = False
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.seek_epoch = 0
        self.fetch_offset: int | None = None    # next offset to FETCH (runs ahead of position: pipelining)
        self.fetch_epoch: int | None = None     # leader epoch of the last fetched record

    @property
    def has_valid_position(self) -> bool:
        return self.position is not None and self.reset_strategy is None and not self.awaiting_validation


class SubscriptionState:
    """Assigned partitions and their state. Guarded by `lock` (the app thread and the I/O thread share it)."""

    def __init__(self, default_reset: str = "latest", isolation_level: int = READ_UNCOMMITTED):
        self.lock = threading.RLock()
        self.default_reset = default_reset
        self.isolation_level = isolation_level
        self.partitions: dict[TopicPartition, PartitionState] = {}

    # -- assignment ---------------------------------------------------------------------------------
    def assign(self, tps) -> None:
        """Replace the assignment; state of partitions kept across the change survives."""
        with self.lock:
            new = {}
            for tp in tps:
                tp = TopicPartition(*tp)
                new[tp] = self.partitions.get(tp) or PartitionState()
            self.partitions = new

    def add(self, tps) -> None:
        with self.lock:
            for tp in tps:
                tp = TopicPartition(*tp)
                if tp not in self.partitions:
                    self.partitions[tp] = PartitionState()

    def remove(self, tps) -> None:
        with self.lock:
            for tp in tps:
                self.partitions.pop(TopicPartition(*tp), None)

    def assigned(self) -> set[TopicPartition]:
        return set(self.partitions)

    def state(self, tp) -> PartitionState:
        try:
            return self.partitions[tp]
        except KeyError:
            raise _not_assigned(tp) from None

    # -- positions ----------------------------------------------------------------------------------
    def seek(self, tp, offset: int, epoch: int | None = None) -> None:
        with self.lock:
            st = self.state(tp)
            st.position = offset
            st.position_epoch = epoch
            st.fetch_offset = offset
            st.fetch_epoch = epoch
            st.reset_strategy = None
            st.awaiting_validation = False
            st.seek_epoch += 1

    def request_reset(self, tps, strategy: str | None = None) -> None:
        with self.lock:
            for tp in tps:
                st = self.partitions.get(tp)
                if st is not None:
                    st.reset_strategy = strategy or self.default_reset
                    st.seek_epoch += 1

    def needs_reset(self) -> dict[TopicPartition, str]:
        with self.lock:
            return {tp: st.reset_strategy for tp, st in self.partitions.items() if st.reset_strategy}

    def missing_position(self) -> list[TopicPartition]:
        with self.lock:
            return [tp for tp, st in self.partitions.items() if st.position is None and not st.reset_strategy]

    def fetchable(self) -> list[TopicPartition]:
        with self.lock:
            return [tp for tp, st in self.partitions.items() if not st.paused and st.has_valid_position]

    def positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Consumed positions worth committing (partitions with a valid position)."""
        with self.lock:
            return {tp: OffsetAndMetadata(st.position, "", st.position_epoch)
                    for tp, st in self.partitions.items() if st.position is not None and st.reset_strategy is None}

    def lag(self, tp) -> int | None:
        st = self.partitions.get(tp)
        if st is None or st.position is None:
            return None
        end = st.last_stable_offset if self.isolation_level == READ_COMMITTED else st.high_watermark
        if end is None or end < 0:
            return None
        return max(0, end - st.position)


class NotAssignedError(KohortError, ValueError):
    """An operation named a partition that is not assigned to this consumer."""


def _not_assigned(tp):
    return NotAssignedError(f"partition {TopicPartition(*tp)} is not assigned to this consumer")


# -- request builders -------------------------------------------------------------------------------
def group_by_topic(tps) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


def list_offsets_request(version: int, timestamps: dict, isolation_level: int, epochs: dict | None = None):
    topics = []
    for topic, parts in group_by_topic(timestamps).items():
        topics.append(ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=p, timestamp=timestamps[(topic, p)],
                current_leader_epoch=(epochs or {}).get((topic, p), -1))
            for p in parts]))
    return ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=topics)


# OffsetCommit v10 and OffsetFetch v10 name topics by topic id only (Kafka 4.x); the builders here name
# topics, so requests are capped at v9 (Kafka 4.x serves 2-10 / 1-10): a v10 request naming topics
# gets UNKNOWN_TOPIC_ID for every partition from Apache Kafka 4.3.
OFFSETS_BY_NAME_MAX_VERSION = 9


def offset_fetch_request(version: int, group_id: str, tps, member_id: str | None = None,
                         member_epoch: int = -1, require_stable: bool = True):
    by_topic = group_by_topic(tps) if tps is not None else None
    if version >= 8:
        G = OffsetFetchRequest.Group
        topics = None if by_topic is None else [G.Topics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        return OffsetFetchRequest(groups=[G(group_id=group_id, topics=topics)], require_stable=require_stable)
    T = OffsetFetchRequest.Topic
    topics = None if by_topic is None else [T(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
    return OffsetFetchRequest(group_id=group_id, topics=topics, require_stable=require_stable)


def parse_offset_fetch(version: int, resp) -> tuple[int, dict[TopicPartition, tuple[int, OffsetAndMetadata | None]]]:
    """(group error code, {tp: (partition error code, OffsetAndMetadata or None when nothing committed)})."""
    out = {}
    if version >= 8:
        g = resp.groups[0] if resp.groups else None
        if g is None:
            return 0, out
        top_err = g.error_code
        topics = g.topics
    else:
        top_err = resp.error_code
        topics = resp.topics
    for t in topics:
        for p in t.partitions:
            if p.committed_offset < 0:
                om = None
            else:
                om = OffsetAndMetadata(p.committed_offset, p.metadata,
                                       p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None)
            out[TopicPartition(t.name, p.partition_index)] = (p.error_code, om)
    return top_err, out


def offset_commit_request(version: int, group_id: str, generation_id: int, member_id: str,
                          group_instance_id: str | None, offsets: dict):
    T = OffsetCommitRequest.Topic
    topics = []
    for topic, parts in group_by_topic(offsets).items():
        topics.append(T(name=topic, partitions=[
            T.Partition(partition_index=p, committed_offset=offsets[(topic, p)].offset,
                        committed_leader_epoch=_epoch(offsets[(topic, p)].leader_epoch),
                        committed_metadata=offsets[(topic, p)].metadata or "")
            for p in parts]))
    return OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=generation_id,
                               member_id=member_id, group_instance_id=group_instance_id, topics=topics)


def _epoch(e):
    return -1 if e is None else e


__all__ = ["EARLIEST_TIMESTAMP", "NotAssignedError", "LATEST_TIMESTAMP", "NoOffsetForPartitionError", "OFFSETS_BY_NAME_MAX_VERSION", "PartitionState",
           "READ_COMMITTED", "READ_UNCOMMITTED", "SubscriptionState", "group_by_topic", "list_offsets_request",
           "offset_commit_request", "offset_fetch_request", "parse_offset_fetch"]
