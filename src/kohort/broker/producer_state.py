"""Idempotent producer state (KIP-98), non-transactional: producer id allocation and the
per-partition sequence checks of the append path. Pure state, no I/O except through the callbacks
given to `ProducerIdAllocator` and the log scan in `PartitionProducers.recover`.

Per partition and producer id the broker keeps the current epoch and the last five batches
(first/last sequence, first/last offset), as Kafka does (ProducerStateEntry, NUM_BATCHES_TO_RETAIN):

* a batch equal (epoch, first and last sequence) to one of those five is a retried duplicate and is
  answered with the original offsets, nothing appended;
* a lower epoch is INVALID_PRODUCER_EPOCH; a higher epoch must restart at sequence 0;
* otherwise the first sequence must follow the last one (wrapping after 2**31-1), else
  OUT_OF_ORDER_SEQUENCE_NUMBER.

A producer id the partition has never seen (or whose batches retention removed, or silent for
longer than producer.id.expiration.ms) is accepted at any sequence: its state starts there. After a restart the state is rebuilt by scanning the batch headers
of the log (`recover`), so retries of batches written before the restart are still recognised.
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple

from kohort.errors import ErrorCode

NUM_BATCHES_TO_RETAIN = 5
_I32_MAX = (1 << 31) - 1
PRODUCER_ID_BLOCK_SIZE = 1000


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    s = base_sequence + last_offset_delta
    return s - _I32_MAX - 1 if s > _I32_MAX else s


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _I32_MAX)


class BatchMeta(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_append_ms")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.batches: deque[BatchMeta] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_append_ms = -1


class Verdict(NamedTuple):
    error: int                  # ErrorCode.NONE when the batch may be appended
    duplicate: BatchMeta | None  # set when the batch is a retried duplicate


OK = Verdict(ErrorCode.NONE, None)


class PartitionProducers:
    """Producer state of one partition."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.recovered = False

    def check(self, producer_id: int, producer_epoch: int, base_sequence: int,
              last_offset_delta: int) -> Verdict:
        if producer_id < 0:
            return OK
        e = self.entries.get(producer_id)
        if e is None:
            return OK
        if producer_epoch < e.epoch:
            return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH, None)
        if producer_epoch > e.epoch:
            if base_sequence != 0:
                return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
            return OK
        last = last_sequence(base_sequence, last_offset_delta)
        for b in e.batches:
            if b.first_seq == base_sequence and b.last_seq == last:
                return Verdict(ErrorCode.NONE, b)
        if e.batches and not in_sequence(e.batches[-1].last_seq, base_sequence):
            return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        return OK

    def update(self, producer_id: int, producer_epoch: int, base_sequence: int,
               last_offset_delta: int, first_offset: int, timestamp: int,
               append_ms: int | None = None) -> None:
        """Record an appended batch (also used when replaying the log, where the batch's
        timestamp stands in for the append time)."""
        if producer_id < 0:
            return
        e = self.entries.get(producer_id)
        if e is None or producer_epoch != e.epoch:
            if e is not None and producer_epoch < e.epoch:
                return
            e = self.entries[producer_id] = ProducerEntry(producer_epoch)
        e.last_append_ms = max(e.last_append_ms, timestamp if append_ms is None else append_ms)
        if base_sequence < 0:
            return
        e.batches.append(BatchMeta(base_sequence, last_sequence(base_sequence, last_offset_delta),
                                   first_offset, first_offset + last_offset_delta, timestamp))

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for longer than producer.id.expiration.ms (Kafka's
        removeExpiredProducers). Returns how many were dropped."""
        old = [pid for pid, e in self.entries.items() if now_ms - e.last_append_ms > expiration_ms]
        for pid in old:
            del self.entries[pid]
        return len(old)

    def recover(self, log) -> None:
        """Rebuild from the batch headers of `log` (a kohort.storage Log)."""
        self.entries.clear()
        for seg in list(log.segments):
            for _, h in seg.scan(0):
                if h.producer_id >= 0 and not h.is_control:
                    self.update(h.producer_id, h.producer_epoch, h.base_sequence,
                                h.last_offset_delta, h.base_offset, h.max_timestamp)
        self.recovered = True


class ProducerStates:
    """All partitions' producer state, recovered lazily on first use of a partition."""

    def __init__(self, storage) -> None:
        self.storage = storage
        self._parts: dict[tuple[str, int], PartitionProducers] = {}

    def partition(self, topic: str, partition: int, log) -> PartitionProducers:
        key = (topic, partition)
        p = self._parts.get(key)
        if p is None:
            p = self._parts[key] = PartitionProducers()
            p.recover(log)
        return p

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        return sum(p.expire(now_ms, expiration_ms) for p in self._parts.values())

    def forget_topic(self, topic: str) -> None:
        for k in [k for k in self._parts if k[0] == topic]:
            del self._parts[k]


class ProducerIdAllocator:
    """Hands out producer ids; reserves them in persisted blocks so ids are never reused after a
    restart (Kafka allocates blocks of 1000 from the controller the same way). `load()` returns the
    first id not yet reserved (0 if none), `save(n)` must durably record n."""

    def __init__(self, load, save, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self._save = save
        self.block_size = block_size
        self.next_id = load()
        self.block_end = self.next_id

    def allocate(self) -> int:
        if self.next_id >= self.block_end:
            self.block_end = self.next_id + self.block_size
            self._save(self.block_end)
        pid = self.next_id
        self.next_id += 1
        return pid
