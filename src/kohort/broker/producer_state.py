"""Idempotent and transactional producer state (KIP-98): producer id allocation, the per-partition
sequence checks of the append path, and each partition's open transactions, last stable offset and
aborted-transactions index. Pure state, no I/O except through the callbacks
given to `ProducerIdAllocator` and the log scan in `PartitionProducers.recover`.

Per partition and producer id the broker keeps the current epoch and the last five batches
(first/last sequence, first/last offset), as Kafka does (ProducerStateEntry, NUM_BATCHES_TO_RETAIN):

* a batch equal (epoch, first and last sequence) to one of those five is a retried duplicate and is
  answered with the original offsets, nothing appended;
* a lower epoch is INVALID_PRODUCER_EPOCH; a higher epoch must restart at sequence 0;
* otherwise the first sequence must follow the last one (wrapping after 2**31-1), else
  OUT_OF_ORDER_SEQUENCE_NUMBER. An epoch with no batch recorded (a marker of transactions v2 took
  the bumped epoch and cleared the history) has last sequence -1: only 0 follows it
  (ProducerAppendInfo.checkSequence). A marker of the same epoch (transactions v1) keeps the history,
  so the next transaction's sequences continue after it.

A producer id the partition has never seen (or silent for longer than producer.id.expiration.ms) is
accepted at any sequence: its state starts there. After a restart the state is rebuilt by scanning
the batch headers of the log (`recover`, through `update` and `complete` as live appends), so
retries of batches written before the restart are still recognised.

Verification state (KIP-890, Kafka's VerificationStateEntry): while the first transactional batch of
a producer with no open transaction on the partition is being verified or added to the transaction
(`start_verification`), the lowest first sequence seen for it is kept (a higher epoch restarts it),
and any batch of that producer with a higher first sequence is OUT_OF_ORDER_SEQUENCE_NUMBER: a later
batch of the new transaction cannot overtake the first one while the add is retried. A transactional
append (data or marker) ends it; so does producer.id.expiration.ms.

Transactions (AK ProducerStateManager, ProducerAppendInfo): the first transactional batch of a
producer opens a transaction at its offset (`ongoing`); a non-transactional batch from a producer with
one open is INVALID_TXN_STATE. A COMMIT/ABORT marker (`check_marker` / `complete`) with an epoch below
the stored one is INVALID_PRODUCER_EPOCH, a lower coordinator epoch TRANSACTION_COORDINATOR_FENCED; it
takes the marker's epoch (a new epoch clears the batch history) and closes the open transaction; an
abort adds AbortedTxn(pid, first offset, marker offset, last stable offset) to the index (commits are
not indexed). The first unstable offset is the least first offset of the open transactions; the last
stable offset is min(it, high watermark). All of it is rebuilt by `recover` from the log (kohort keeps
no .txnindex or snapshot files). Producers with an open transaction never expire (KAFKA-9144).
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple

from kohort.errors import ErrorCode
from kohort.protocol.records import (  # noqa: F401  (marker_key, marker_value: coordinator_runtime imports them here)
    CONTROL_COMMIT, decode_batch, marker_key, marker_value, parse_marker,
)

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


_new_meta = tuple.__new__


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int            # the ABORT marker's offset
    last_stable_offset: int


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_append_ms", "coordinator_epoch")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.coordinator_epoch = -1
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
        self.ongoing: dict[int, int] = {}          # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []        # in marker order
        # producer id -> [epoch, lowest first sequence, start ms] of a verification in progress
        self.verifying: dict[int, list[int]] = {}
        self.recovered = False

    def check(self, producer_id: int, producer_epoch: int, base_sequence: int,
              last_offset_delta: int, transactional: bool = False) -> Verdict:
        if producer_id < 0:
            return OK
        if not transactional and producer_id in self.ongoing:
            return Verdict(ErrorCode.INVALID_TXN_STATE, None)
        e = self.entries.get(producer_id)
        if e is not None:
            if producer_epoch < e.epoch:
                return Verdict(ErrorCode.INVALID_PRODUCER_EPOCH, None)
            if producer_epoch == e.epoch:
                last = last_sequence(base_sequence, last_offset_delta)
                for b in e.batches:
                    if b.first_seq == base_sequence and b.last_seq == last:
                        return Verdict(ErrorCode.NONE, b)
        v = self.verifying.get(producer_id) if self.verifying else None
        if v is not None and base_sequence > v[1]:
            return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        if e is None:
            return OK
        if producer_epoch > e.epoch:
            if base_sequence != 0 and e.epoch >= 0:
                return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
            return OK
        if e.epoch >= 0 and not in_sequence(e.batches[-1].last_seq if e.batches else -1, base_sequence):
            return Verdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        return OK

    def start_verification(self, producer_id: int, producer_epoch: int, base_sequence: int,
                           now_ms: int) -> None:
        """A transactional batch of a producer with no open transaction here is being verified or
        added to its transaction (Kafka's maybeCreateVerificationStateEntry): keep the lowest first
        sequence of its epoch, restarting at a higher epoch."""
        if self.is_open(producer_id, producer_epoch):
            return
        v = self.verifying.get(producer_id)
        if v is None:
            self.verifying[producer_id] = [producer_epoch, base_sequence, now_ms]
        elif producer_epoch > v[0]:
            v[0], v[1] = producer_epoch, base_sequence
        elif producer_epoch == v[0] and base_sequence < v[1]:
            v[1] = base_sequence

    def update(self, producer_id: int, producer_epoch: int, base_sequence: int,
               last_offset_delta: int, first_offset: int, timestamp: int,
               append_ms: int | None = None, transactional: bool = False) -> None:
        """Record an appended batch (also used when replaying the log, where the batch's
        timestamp stands in for the append time)."""
        if producer_id < 0:
            return
        if transactional:
            if producer_id not in self.ongoing:
                self.ongoing[producer_id] = first_offset
            if self.verifying:
                self.verifying.pop(producer_id, None)
        e = self.entries.get(producer_id)
        if e is None or producer_epoch != e.epoch:
            if e is not None and producer_epoch < e.epoch:
                return
            e = self.entries[producer_id] = ProducerEntry(producer_epoch)
        t = timestamp if append_ms is None else append_ms
        if t > e.last_append_ms:
            e.last_append_ms = t
        if base_sequence < 0:
            return
        last = base_sequence + last_offset_delta
        if last > _I32_MAX:
            last -= _I32_MAX + 1
        # tuple.__new__: the NamedTuple without its Python-level __new__ (once per batch)
        e.batches.append(_new_meta(BatchMeta, (base_sequence, last, first_offset,
                                               first_offset + last_offset_delta, timestamp)))

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for longer than producer.id.expiration.ms (Kafka's
        removeExpiredProducers). Returns how many were dropped."""
        old = [pid for pid, e in self.entries.items()
               if now_ms - e.last_append_ms > expiration_ms and pid not in self.ongoing]
        for pid in old:
            del self.entries[pid]
        for pid in [pid for pid, v in self.verifying.items() if now_ms - v[2] >= expiration_ms]:
            del self.verifying[pid]
        return len(old)

    # -- transactions --------------------------------------------------------------------------------
    def is_open(self, producer_id: int, producer_epoch: int | None = None) -> bool:
        """Whether the producer has a transaction open here; given an epoch, one of that epoch (a
        batch of a newer epoch belongs to the next transaction, which needs its own verification:
        Kafka's hasOngoingTransaction(producerId, producerEpoch))."""
        if producer_id not in self.ongoing:
            return False
        if producer_epoch is None:
            return True
        e = self.entries.get(producer_id)
        return e is not None and e.epoch == producer_epoch

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> int:
        e = self.entries.get(producer_id)
        if e is None:
            return ErrorCode.NONE
        if producer_epoch < e.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < e.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return ErrorCode.NONE

    def complete(self, producer_id: int, producer_epoch: int, commit: bool, marker_offset: int,
                 coordinator_epoch: int, timestamp: int) -> AbortedTxn | None:
        """Apply an appended marker; returns the AbortedTxn indexed for an abort."""
        e = self.entries.get(producer_id)
        if e is None or e.epoch != producer_epoch:
            # a new epoch forgets the batches; the same epoch (transactions v1) keeps them, so the
            # next transaction's first sequence must follow the last one
            e = self.entries[producer_id] = ProducerEntry(producer_epoch)
        if self.verifying:
            self.verifying.pop(producer_id, None)
        e.coordinator_epoch = coordinator_epoch
        e.last_append_ms = max(e.last_append_ms, timestamp)
        first = self.ongoing.pop(producer_id, None)
        if first is None or commit:
            return None
        fu = self.first_unstable_offset()
        a = AbortedTxn(producer_id, first, marker_offset, min(fu, marker_offset + 1) if fu is not None
                       else marker_offset + 1)
        self.aborted.append(a)
        return a

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset(self, high_watermark: int) -> int:
        fu = self.first_unstable_offset()
        return high_watermark if fu is None else min(fu, high_watermark)

    def aborted_in(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap [fetch_offset, upper_bound) (Fetch read_committed)."""
        return [a for a in self.aborted if a.last_offset >= fetch_offset and a.first_offset < upper_bound]

    def recover(self, log) -> None:
        """Rebuild from `log` (a kohort.storage Log): batch headers, and the control records of
        marker batches (the producer state, open transactions and the aborted index)."""
        self.entries.clear()
        self.ongoing.clear()
        self.aborted.clear()
        self.verifying.clear()
        for seg in list(log.segments):
            for pos, h in seg.scan(0):
                if h.producer_id < 0:
                    continue
                if h.is_control:
                    _, recs = decode_batch(seg.log.pread(pos, h.total_size), 0, check_crc=False)
                    t = parse_marker(recs[0].key) if recs else None
                    if t is not None and h.is_transactional:
                        cepoch = int.from_bytes(recs[0].value[2:6], "big", signed=True) if recs[0].value else -1
                        self.complete(h.producer_id, h.producer_epoch, t == CONTROL_COMMIT, h.base_offset,
                                      cepoch, h.max_timestamp)
                    continue
                self.update(h.producer_id, h.producer_epoch, h.base_sequence,
                            h.last_offset_delta, h.base_offset, h.max_timestamp,
                            transactional=h.is_transactional)
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
