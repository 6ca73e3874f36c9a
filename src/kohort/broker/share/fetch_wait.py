"""When a ShareFetch (KIP-932) answers, and how many bytes each of its partitions may read: the
decisions of Kafka's DelayedShareFetch and PartitionMaxBytesStrategy, pure (time passed in, no I/O).

* Byte budgets (`partition_max_bytes`): a request's MaxBytes is split evenly over the partitions
  that can acquire records now, the remainder going to the first of them (Kafka gives it to one
  chosen at random); a MaxBytes smaller than the partition count gives one byte to as many
  partitions as it covers and none to the rest.
* Min bytes (`min_bytes_satisfied`): the log bytes each such partition could hand out, from the
  whole batch holding its next fetch offset up to its end offset (the high watermark, or the last
  stable offset with share.isolation.level read_committed), each capped by its budget, summed over
  the partitions and compared with MinBytes. Like Kafka, this assumes every byte past the next
  fetch offset is acquirable. A partition whose fetch offset lies in an older log segment than
  its end offset (it fell behind, or the log just rolled) or past its end offset (truncated)
  satisfies the request at once, as does a log read error on any partition.
* The wait (`ShareFetchWait`): the request answers as soon as min bytes is satisfied by the
  partitions that can acquire records; it waits while none can (every one at its in-flight
  limit) or while too few bytes are there, until MaxWaitMs has passed, then answers with whatever
  can be acquired (possibly nothing, possibly fewer than MinBytes). A request with no partition
  left to fetch answers at once.
"""
from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionReadiness:
    """What one partition of the request offers now. `acquirable` False: the share partition is at
    its in-flight record limit (Kafka's canAcquireRecords), so it is left out of this attempt."""
    acquirable: bool = True
    bytes_available: int = 0          # whole batches from the next fetch offset's up to the end offset
    older_segment: bool = False       # records wait below the end offset, from an older segment than its
    past_end: bool = False            # the next fetch offset is beyond the end offset
    error: bool = False               # reading the partition's log failed


def partition_max_bytes(max_bytes: int, partitions: int) -> list[int]:
    """Kafka's uniform PartitionMaxBytesStrategy: the byte budget of each of `partitions`
    partitions out of the request's `max_bytes` (> 0)."""
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    if partitions <= 0:
        return []
    if max_bytes < partitions:
        return [1 if i < max_bytes else 0 for i in range(partitions)]
    out = [max_bytes // partitions] * partitions
    out[0] += max_bytes % partitions
    return out


def min_bytes_satisfied(parts: Sequence[PartitionReadiness], budgets: Sequence[int], min_bytes: int) -> bool:
    """Whether the acquirable `parts` (with their `budgets`, in the same order) hold at least
    `min_bytes` bytes, by Kafka's DelayedShareFetch.isMinBytesSatisfied."""
    if len(parts) != len(budgets):
        raise ValueError(f"{len(parts)} partitions but {len(budgets)} budgets")
    total = 0
    for part, budget in zip(parts, budgets):
        if part.past_end or part.older_segment:
            return True
        total += min(part.bytes_available, budget)
    return total >= min_bytes


class WaitDecision(enum.Enum):
    ANSWER = "answer"        # acquire now and answer
    WAIT = "wait"            # wait for a change on a partition, at most `ShareFetchWait.left_ms`


class ShareFetchWait:
    """One ShareFetch's long poll: made when the request arrives (`now_ms`) with its MaxWaitMs,
    MinBytes and MaxBytes; `decide(now_ms, parts)` is asked at arrival and after every change on
    one of its partitions (an append, an acknowledgement, a release, an expired lock)."""

    def __init__(self, now_ms: int, max_wait_ms: int, min_bytes: int, max_bytes: int):
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.deadline_ms = now_ms + max(0, max_wait_ms)
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes

    def left_ms(self, now_ms: int) -> int:
        return max(0, self.deadline_ms - now_ms)

    def budgets(self, parts: Sequence[PartitionReadiness]) -> list[int]:
        """The byte budget of each of `parts` (0 for one that cannot acquire now)."""
        ready = [i for i, p in enumerate(parts) if p.acquirable]
        out = [0] * len(parts)
        for i, b in zip(ready, partition_max_bytes(self.max_bytes, len(ready))):
            out[i] = b
        return out

    def decide(self, now_ms: int, parts: Sequence[PartitionReadiness]) -> WaitDecision:
        if not parts or now_ms >= self.deadline_ms:
            return WaitDecision.ANSWER
        ready = [p for p in parts if p.acquirable]
        if not ready:
            return WaitDecision.WAIT
        if any(p.error for p in ready):
            return WaitDecision.ANSWER
        budgets = partition_max_bytes(self.max_bytes, len(ready))
        if min_bytes_satisfied(ready, budgets, self.min_bytes):
            return WaitDecision.ANSWER
        return WaitDecision.WAIT


__all__ = ["PartitionReadiness", "ShareFetchWait", "WaitDecision", "min_bytes_satisfied", "partition_max_bytes"]
