"""The share-partition state of one (share group, topic-partition) on its leader (KIP-932), as a PURE
state machine: no I/O, no clock; every entry point that depends on time takes `now_ms`.

What lives here (Kafka's SharePartition, 4.3 behaviour):
* the in-flight cache: an ordered map first offset -> InFlightBatch. A batch keeps one state for all
  its offsets until a request touches part of it (a partial acknowledgement, per-offset types, a
  partial release); then it is tracked per offset. Record states: AVAILABLE 0, ACQUIRED 1,
  ACKNOWLEDGED 2, ARCHIVING 3 (defined, unused), ARCHIVED 4.
* the share-partition start offset (SPSO, `start_offset`) and end offset (SPEO, `end_offset`, the
  last cached offset; equal to SPSO while the cache is empty). SPSO moves past the longest prefix of
  terminal (ACKNOWLEDGED/ARCHIVED) records; wholly terminal batches below it are dropped.
* acquisition: `acquire(member, log_batches, ...)` turns the batches a log read returned into
  records acquired by that member under a lock of `record_lock_duration_ms`, from the first
  AVAILABLE offset (re-deliveries) and past the cache end (new records), bounded by the in-flight
  window (`max_in_flight_records`, group.share.partition.max.record.locks: SPEO - SPSO + 1 never
  passes it, acknowledged records included) and by MaxRecords: `batch_optimized` takes whole log
  batches (may pass MaxRecords), `record_limit` stops at exactly MaxRecords. Each acquisition adds
  one to the delivery count; from a count of max(2, ceil(limit / 2)) the records handed out per call
  are halved, and a record on its last attempt goes out alone (Kafka 4.2+). read_committed: the
  aborted ranges given by the caller are archived and never handed out.
* acknowledgement (`acknowledge`): ACCEPT -> ACKNOWLEDGED, RELEASE -> AVAILABLE, REJECT and GAP ->
  ARCHIVED, RENEW -> the lock restarts (state unchanged, nothing persisted; INVALID_RECORD_STATE
  when the group disables renewal). A request's batches are checked first and applied all or
  nothing: INVALID_RECORD_STATE for offsets not cached, not ACQUIRED or another member's;
  INVALID_REQUEST past the cached records; offsets below SPSO are skipped.
* locks: `expire_locks(now_ms)` releases every record whose lock passed; `next_deadline_ms()` is
  the earliest lock deadline, for the driver's timer. `release_member` releases all a member holds
  (share session closed). A record going back to AVAILABLE with count >= share.delivery.count.limit
  is ARCHIVED instead.
* counters (`counters`, a `SharePartitionCounters`): records acquired and re-acquired, records
  released by lock expiry (Kafka's AcquisitionLockTimeoutPerSec), records archived because they
  reached share.delivery.count.limit; cumulative ints the broker's metrics read, nothing else.
* persistence: every change that Kafka persists returns a `StateWrite` (start offset + the changed
  ranges with state and delivery count, never ACQUIRED; acquisitions are not written), which
  `kohort.broker.share.state` turns into ShareUpdate/ShareSnapshot records; `from_state` rebuilds a
  partition from the persisted state (in-flight records are fetchable again, unwritten delivery
  count increments are lost).

Errors are Kafka's ErrorCode values, returned, never raised, for request-level problems.
"""
from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from kohort.errors import ErrorCode


class RecordState(enum.IntEnum):
    """Delivery states of a share-partition record (the ids Kafka persists)."""
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3
    ARCHIVED = 4


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AcknowledgeType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types (KIP-932; RENEW from KIP-1222)."""
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AcquireMode(enum.IntEnum):
    """ShareFetch v2's ShareAcquireMode (KIP-1206)."""
    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


_ACK_TARGET = {AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED, AcknowledgeType.RELEASE: RecordState.AVAILABLE,
               AcknowledgeType.REJECT: RecordState.ARCHIVED, AcknowledgeType.GAP: RecordState.ARCHIVED}


@dataclass(frozen=True)
class SharePartitionConfig:
    """The group's share settings as they apply to one partition (group config over broker default)."""
    record_lock_duration_ms: int = 30000          # share.record.lock.duration.ms
    delivery_count_limit: int = 5                 # share.delivery.count.limit
    max_in_flight_records: int = 2000             # share.partition.max.record.locks
    read_committed: bool = False                  # share.isolation.level
    renew_enabled: bool = True                    # share.renew.acknowledge.enable

    def __post_init__(self):
        if self.record_lock_duration_ms <= 0:
            raise ValueError(f"record_lock_duration_ms must be positive, got {self.record_lock_duration_ms}")
        if self.delivery_count_limit < 1:
            raise ValueError(f"delivery_count_limit must be at least 1, got {self.delivery_count_limit}")
        if self.max_in_flight_records < 1:
            raise ValueError(f"max_in_flight_records must be at least 1, got {self.max_in_flight_records}")


@dataclass(frozen=True)
class LogBatch:
    """A record batch as the log read returned it: offsets first..last inclusive."""
    first_offset: int
    last_offset: int


@dataclass(frozen=True)
class AcquiredRecords:
    """One AcquiredRecords entry of a ShareFetch answer."""
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class AckBatch:
    """One AcknowledgementBatch: one type for the range, or one type per offset."""
    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


@dataclass(frozen=True)
class StateBatch:
    """A persisted range: offsets first..last share one delivery state and count."""
    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int


@dataclass(frozen=True)
class StateWrite:
    """What one change persists (a WriteShareGroupState / ShareUpdate): the start offset and the
    ranges whose state changed, in offset order."""
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int


@dataclass
class SharePartitionCounters:
    """Cumulative record counts of one share partition (read by kohort.broker.metrics)."""
    acquired: int = 0                 # acquisitions (each delivery of a record counts once)
    redelivered: int = 0              # acquisitions with a delivery count above 1
    lock_timeouts: int = 0            # ACQUIRED records released because their lock expired
    delivery_limit_archived: int = 0  # records ARCHIVED on reaching share.delivery.count.limit


@dataclass
class AcknowledgeResult:
    error: ErrorCode | None
    write: StateWrite | None = None
    message: str | None = None


@dataclass
class AcquireResult:
    acquired: list[AcquiredRecords]
    write: StateWrite | None = None      # set when read_committed archived aborted records


class _Rec:
    """The state of one offset, or of a whole batch while it is tracked as one."""
    __slots__ = ("state", "count", "member", "deadline")

    def __init__(self, state: RecordState, count: int, member: str | None = None, deadline: int | None = None):
        self.state, self.count, self.member, self.deadline = state, count, member, deadline

    def copy(self) -> "_Rec":
        return _Rec(self.state, self.count, self.member, self.deadline)

    def key(self) -> tuple:
        return (self.state, self.count, self.member, self.deadline)


@dataclass
class InFlightBatch:
    first_offset: int
    last_offset: int
    whole: _Rec | None                               # one state for the batch, or
    offsets: dict[int, _Rec] | None = None           # per-offset states once touched partially

    def split(self) -> dict[int, _Rec]:
        if self.offsets is None:
            w = self.whole
            self.offsets = {o: w.copy() for o in range(self.first_offset, self.last_offset + 1)}
            self.whole = None
        return self.offsets

    def recs(self) -> Iterator[tuple[int, int, _Rec]]:
        """(first, last, state) runs of this batch."""
        if self.offsets is None:
            yield self.first_offset, self.last_offset, self.whole
        else:
            for o in range(self.first_offset, self.last_offset + 1):
                yield o, o, self.offsets[o]


def validate_acknowledgement_batches(batches: Sequence[AckBatch], renew_allowed: bool) -> str | None:
    """The request-level checks of one partition's acknowledgement batches (Kafka's KafkaApis):
    a reason for INVALID_REQUEST, or None."""
    prev_last = None
    for b in batches:
        if b.first_offset > b.last_offset:
            return f"first offset {b.first_offset} is after last offset {b.last_offset}"
        if prev_last is not None and b.first_offset <= prev_last:
            return f"acknowledgement batch at {b.first_offset} overlaps or precedes the one ending at {prev_last}"
        if not b.acknowledge_types:
            return "acknowledgement batch without acknowledge types"
        n = b.last_offset - b.first_offset + 1
        if len(b.acknowledge_types) != 1 and len(b.acknowledge_types) != n:
            return f"{len(b.acknowledge_types)} acknowledge types for {n} offsets"
        for t in b.acknowledge_types:
            if not 0 <= t <= 4:
                return f"acknowledge type {t} is not 0-4"
            if t == AcknowledgeType.RENEW and not renew_allowed:
                return "acknowledge type 4 (RENEW) without IsRenewAck"
        prev_last = b.last_offset
    return None


class SharePartition:
    """The share state of one topic-partition for one share group."""

    def __init__(self, start_offset: int, config: SharePartitionConfig | None = None):
        if start_offset < 0:
            raise ValueError(f"start_offset must be resolved (>= 0), got {start_offset}")
        self.config = config or SharePartitionConfig()
        self.start_offset = start_offset
        self._firsts: list[int] = []                      # sorted first offsets of cached batches
        self._cache: dict[int, InFlightBatch] = {}
        self.counters = SharePartitionCounters()

    # -- views ------------------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        """SPEO: the last cached offset, or SPSO while the cache is empty."""
        if not self._firsts:
            return self.start_offset
        return self._cache[self._firsts[-1]].last_offset

    def _next_new_offset(self) -> int:
        return self.end_offset + 1 if self._firsts else self.start_offset

    def next_fetch_offset(self) -> int:
        """Where the next log read starts: the first AVAILABLE cached offset, else past the cache."""
        expect = self.start_offset
        for first in self._firsts:
            if first > expect:
                return expect                     # a hole (records in flight when the state was written)
            for lo, hi, r in self._cache[first].recs():
                if r.state is RecordState.AVAILABLE and hi >= self.start_offset:
                    return max(lo, self.start_offset)
            expect = max(expect, self._cache[first].last_offset + 1)
        return self._next_new_offset()

    def can_acquire_records(self) -> bool:
        """Whether an acquisition could hand out anything now (Kafka's canAcquireRecords): the next
        fetch offset lies inside the in-flight window (SPEO - SPSO + 1 at most
        max_in_flight_records), so a cached AVAILABLE record or a new one may be taken."""
        return self.next_fetch_offset() <= self.start_offset + self.config.max_in_flight_records - 1

    def batches(self) -> list[InFlightBatch]:
        return [self._cache[f] for f in self._firsts]

    def record_states(self) -> dict[int, tuple[RecordState, int, str | None]]:
        """offset -> (state, delivery count, member) of every cached offset (tests, console)."""
        out = {}
        for b in self.batches():
            for lo, hi, r in b.recs():
                for o in range(lo, hi + 1):
                    out[o] = (r.state, r.count, r.member)
        return out

    def in_flight_count(self) -> int:
        return sum(hi - lo + 1 for b in self.batches() for lo, hi, r in b.recs()
                   if r.state is RecordState.ACQUIRED)

    def in_flight_message_count(self) -> int:
        """Kafka's InFlightMessageCount: SPEO - SPSO + 1 while records are cached, else 0."""
        return self.end_offset - self.start_offset + 1 if self._firsts else 0

    def in_flight_batch_count(self) -> int:
        """Kafka's InFlightBatchCount: the cached batches."""
        return len(self._firsts)

    def delivery_count_histogram(self) -> dict[int, int]:
        """delivery count -> records AVAILABLE or ACQUIRED at or past SPSO with that count."""
        out: dict[int, int] = {}
        for b in self.batches():
            for lo, hi, r in b.recs():
                if r.state in (RecordState.AVAILABLE, RecordState.ACQUIRED) and hi >= self.start_offset:
                    out[r.count] = out.get(r.count, 0) + hi - max(lo, self.start_offset) + 1
        return out

    def delivery_complete_count(self) -> int:
        """Terminal records at or past SPSO (KIP-1226's DeliveryCompleteCount)."""
        n = 0
        for b in self.batches():
            for lo, hi, r in b.recs():
                if r.state in TERMINAL:
                    n += max(0, hi - max(lo, self.start_offset) + 1)
        return n

    def next_deadline_ms(self) -> int | None:
        best = None
        for b in self.batches():
            for _, _, r in b.recs():
                if r.state is RecordState.ACQUIRED and (best is None or r.deadline < best):
                    best = r.deadline
        return best

    # -- acquisition --------------------------------------------------------------------------------
    def acquire(self, member_id: str, log_batches: Sequence[LogBatch], now_ms: int, *, max_records: int,
                batch_size: int | None = None, mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED,
                aborted: Sequence[tuple[int, int]] = ()) -> AcquireResult:
        """Acquire for `member_id` records of `log_batches` (what a log read from
        `next_fetch_offset()` returned, in offset order). `aborted` are the offset ranges of aborted
        transactions (read_committed only): archived, never handed out."""
        if not member_id:
            raise ValueError("member_id must not be empty")
        if max_records <= 0:
            return AcquireResult([])
        cfg = self.config
        limit = cfg.delivery_count_limit
        throttle_from = max(2, -(-limit // 2))
        deadline = now_ms + cfg.record_lock_duration_ms
        window_end = self.start_offset + cfg.max_in_flight_records - 1     # last offset the window allows
        cap = max_records
        taken = 0
        runs: list[list[int]] = []             # [first, last, count, log batch id]
        archived: list[int] = []
        aborted_sorted = sorted(aborted) if cfg.read_committed else []

        def is_aborted(o: int) -> bool:
            i = bisect.bisect_right(aborted_sorted, (o, float("inf"))) - 1
            return i >= 0 and aborted_sorted[i][0] <= o <= aborted_sorted[i][1]

        def take(o: int, count: int, bid: int) -> None:
            if runs and runs[-1][1] == o - 1 and runs[-1][2] == count and runs[-1][3] == bid:
                runs[-1][1] = o
            else:
                runs.append([o, o, count, bid])

        if not log_batches:
            return AcquireResult([])
        firsts = [lb.first_offset for lb in log_batches]
        for lb in log_batches:
            if lb.first_offset > lb.last_offset:
                raise ValueError(f"log batch {lb.first_offset}..{lb.last_offset} is empty")
        if any(a.last_offset >= b.first_offset for a, b in zip(log_batches, log_batches[1:])):
            raise ValueError("log batches must be in offset order and must not overlap")
        begin = max(self.start_offset, log_batches[0].first_offset)
        # offsets the log skipped past the cache end (compaction) are acquired too; the client GAPs them
        begin = min(begin, max(self._next_new_offset(), self.start_offset))
        new_recs: list[int] = []
        prev_bid = 0
        last = log_batches[-1].last_offset
        o = begin - 1
        while o < last:
            o += 1
            bid = max(0, bisect.bisect_right(firsts, o) - 1)
            if bid != prev_bid:
                if mode is AcquireMode.BATCH_OPTIMIZED and taken >= cap:
                    break
                prev_bid = bid
            if mode is AcquireMode.RECORD_LIMIT and taken >= cap:
                break
            batch = self._batch_at(o)
            if batch is None:
                if o > window_end:
                    break
                if aborted_sorted and is_aborted(o):
                    archived.append(o)
                    continue
                new_recs.append(o)
                take(o, 1, bid)
                taken += 1
                continue
            rec = batch.whole if batch.offsets is None else batch.offsets[o]
            if rec.state is not RecordState.AVAILABLE:
                if batch.offsets is None:
                    o = batch.last_offset          # the whole batch is in one state: skip it
                continue
            nxt = rec.count + 1
            if nxt >= throttle_from:
                cap = min(cap, max(1, max_records // 2))
            if nxt >= limit and taken:               # the last attempt goes out alone
                break
            size = batch.last_offset - batch.first_offset + 1
            if (batch.offsets is None and o == batch.first_offset and batch.last_offset <= last and nxt < limit
                    and (mode is AcquireMode.BATCH_OPTIMIZED or taken + size <= cap)):
                # a cached batch released as a whole is acquired again as a whole
                batch.whole = _Rec(RecordState.ACQUIRED, nxt, member_id, deadline)
                for x in range(o, batch.last_offset + 1):
                    take(x, nxt, bid)
                taken += size
                o = batch.last_offset
                continue
            self._set(o, _Rec(RecordState.ACQUIRED, nxt, member_id, deadline))
            take(o, nxt, bid)
            taken += 1
            if nxt >= limit:
                break
        if new_recs:
            self._insert_new(new_recs, member_id, deadline)
        write = None
        if archived:
            for lo, hi in _coalesce(archived):
                self._insert_batch(InFlightBatch(lo, hi, _Rec(RecordState.ARCHIVED, 0)))
            moved = self._advance_start()
            write = self._write(list(_coalesce(archived)), moved)
        for first, last_o, count, _bid in runs:
            self.counters.acquired += last_o - first + 1
            if count > 1:
                self.counters.redelivered += last_o - first + 1
        return AcquireResult(self._acquired_ranges(runs, batch_size), write)

    @staticmethod
    def _acquired_ranges(runs: list[list[int]], batch_size: int | None) -> list[AcquiredRecords]:
        out: list[AcquiredRecords] = []
        for first, last, count, _bid in runs:
            if out and out[-1].last_offset == first - 1 and out[-1].delivery_count == count and (
                    not batch_size or out[-1].last_offset - out[-1].first_offset + 1 < batch_size):
                prev = out.pop()            # runs of consecutive log batches join until BatchSize
                first = prev.first_offset
            out.append(AcquiredRecords(first, last, count))
        return out

    # -- acknowledgement ----------------------------------------------------------------------------
    def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> AcknowledgeResult:
        """Apply one partition's acknowledgement batches for `member_id`, all or nothing."""
        reason = validate_acknowledgement_batches(batches, renew_allowed=True)
        if reason:
            return AcknowledgeResult(ErrorCode.INVALID_REQUEST, message=reason)
        plan: list[tuple[int, AcknowledgeType]] = []
        end = self.end_offset if self._firsts else self.start_offset - 1
        for b in batches:
            types = b.acknowledge_types
            for i, o in enumerate(range(b.first_offset, b.last_offset + 1)):
                t = AcknowledgeType(types[0] if len(types) == 1 else types[i])
                if o < self.start_offset:
                    continue
                if o > end:
                    return AcknowledgeResult(ErrorCode.INVALID_REQUEST,
                                             message=f"offset {o} is past the cached records (end {end})")
                rec = self._lookup(o)
                if rec is None or rec.state is not RecordState.ACQUIRED:
                    return AcknowledgeResult(ErrorCode.INVALID_RECORD_STATE,
                                             message=f"offset {o} is not acquired")
                if rec.member != member_id:
                    return AcknowledgeResult(ErrorCode.INVALID_RECORD_STATE,
                                             message=f"offset {o} is acquired by another member")
                if t is AcknowledgeType.RENEW and not self.config.renew_enabled:
                    return AcknowledgeResult(ErrorCode.INVALID_RECORD_STATE,
                                             message="renew acknowledgements are disabled for this group")
                plan.append((o, t))
        changed: list[int] = []
        deadline = now_ms + self.config.record_lock_duration_ms
        limit = self.config.delivery_count_limit
        self.counters.delivery_limit_archived += sum(
            1 for o, t in plan if t is AcknowledgeType.RELEASE and self._lookup(o).count >= limit)
        for (lo, hi), t in _runs_by_type(plan):
            if t is AcknowledgeType.RENEW:
                for rec in self._touch(lo, hi):
                    rec.deadline = deadline
                continue
            target = _ACK_TARGET[t]
            for rec in self._touch(lo, hi):
                state = target
                if state is RecordState.AVAILABLE and rec.count >= limit:
                    state = RecordState.ARCHIVED
                rec.state, rec.member, rec.deadline = state, None, None
            changed.extend(range(lo, hi + 1))
        moved = self._advance_start()
        if not changed and not moved:
            return AcknowledgeResult(None)
        return AcknowledgeResult(None, self._write(list(_coalesce(changed)), moved))

    # -- releases -----------------------------------------------------------------------------------
    def expire_locks(self, now_ms: int) -> StateWrite | None:
        """Release every ACQUIRED record whose lock deadline is at or before `now_ms`."""
        return self._release(lambda r: r.deadline is not None and r.deadline <= now_ms, expired=True)

    def release_member(self, member_id: str) -> StateWrite | None:
        """Release every record `member_id` holds (its share session closed or it left)."""
        return self._release(lambda r: r.member == member_id)

    def _release(self, which, expired: bool = False) -> StateWrite | None:
        limit = self.config.delivery_count_limit
        changed: list[int] = []
        counters = self.counters
        for b in self.batches():
            for lo, hi, r in list(b.recs()):
                if r.state is RecordState.ACQUIRED and which(r):
                    r.state = RecordState.ARCHIVED if r.count >= limit else RecordState.AVAILABLE
                    r.member = r.deadline = None
                    n = hi - lo + 1
                    if expired:
                        counters.lock_timeouts += n
                    if r.state is RecordState.ARCHIVED:
                        counters.delivery_limit_archived += n
                    changed.extend(range(max(lo, self.start_offset), hi + 1))
        moved = self._advance_start()
        if not changed and not moved:
            return None
        return self._write(list(_coalesce(changed)), moved)

    def update_log_start_offset(self, log_start_offset: int) -> StateWrite | None:
        """The log's start moved (retention, DeleteRecords): records below it can no longer be
        delivered. AVAILABLE ones are archived; SPSO moves to at least the log start."""
        if log_start_offset <= self.start_offset:
            return None
        changed: list[int] = []
        for b in self.batches():
            if b.first_offset >= log_start_offset:
                break
            for lo, hi, r in list(b.recs()):
                if lo < log_start_offset and r.state is RecordState.AVAILABLE:
                    hi2 = min(hi, log_start_offset - 1)
                    for rec in self._touch(lo, hi2):
                        rec.state = RecordState.ARCHIVED
                    changed.extend(range(lo, hi2 + 1))
        self.start_offset = log_start_offset
        if self._firsts and self.end_offset < log_start_offset:
            self._firsts.clear()
            self._cache.clear()
        self._advance_start()
        return self._write([], True)

    # -- persistence --------------------------------------------------------------------------------
    def _write(self, ranges: Iterable[tuple[int, int]], start_moved: bool) -> StateWrite:
        out: list[StateBatch] = []
        for lo, hi in ranges:
            lo = max(lo, self.start_offset)
            o = lo
            while o <= hi:
                rec = self._lookup(o)
                if rec is None or rec.state is RecordState.ACQUIRED:
                    o += 1
                    continue
                state, count = rec.state, rec.count
                if out and out[-1].last_offset == o - 1 and out[-1].delivery_state == state \
                        and out[-1].delivery_count == count:
                    out[-1] = StateBatch(out[-1].first_offset, o, state, count)
                else:
                    out.append(StateBatch(o, o, state, count))
                o += 1
        return StateWrite(self.start_offset, tuple(out), self.delivery_complete_count())

    def persisted_batches(self) -> list[StateBatch]:
        """Every non-ACQUIRED cached range at or past SPSO (what a snapshot of this partition holds)."""
        end = self.end_offset if self._firsts else self.start_offset - 1
        return list(self._write([(self.start_offset, end)], False).state_batches)

    @classmethod
    def from_state(cls, start_offset: int, batches: Iterable[StateBatch],
                   config: SharePartitionConfig | None = None) -> "SharePartition":
        """Rebuild from the persisted state (ReadShareGroupState): ACQUIRED is never persisted, so
        every cached record is AVAILABLE, ACKNOWLEDGED or ARCHIVED."""
        sp = cls(start_offset, config)
        for b in sorted(batches, key=lambda b: b.first_offset):
            if b.last_offset < start_offset:
                continue
            if b.delivery_state is RecordState.ACQUIRED:
                raise ValueError(f"persisted state has ACQUIRED records at {b.first_offset}")
            first = max(b.first_offset, start_offset)
            state = RecordState(b.delivery_state)
            if state is RecordState.AVAILABLE and b.delivery_count >= sp.config.delivery_count_limit:
                state = RecordState.ARCHIVED
            sp._insert_batch(InFlightBatch(first, b.last_offset, _Rec(state, b.delivery_count)))
        sp._advance_start()
        return sp

    # -- cache internals ------------------------------------------------------------------------------
    def _batch_at(self, o: int) -> InFlightBatch | None:
        i = bisect.bisect_right(self._firsts, o) - 1
        if i < 0:
            return None
        b = self._cache[self._firsts[i]]
        return b if b.first_offset <= o <= b.last_offset else None

    def _lookup(self, o: int) -> _Rec | None:
        b = self._batch_at(o)
        if b is None:
            return None
        return b.whole if b.offsets is None else b.offsets[o]

    def _set(self, o: int, rec: _Rec) -> None:
        b = self._batch_at(o)
        if b.offsets is None and b.first_offset == b.last_offset:
            b.whole = rec
        else:
            b.split()[o] = rec

    def _touch(self, lo: int, hi: int) -> Iterator[_Rec]:
        """The states covering lo..hi: a whole batch's one state when the range covers it, else the
        batch is split and each offset's state is yielded."""
        o = lo
        while o <= hi:
            b = self._batch_at(o)
            if b is None:
                o += 1
                continue
            if b.offsets is None and lo <= b.first_offset and b.last_offset <= hi:
                yield b.whole
                o = b.last_offset + 1
                continue
            offs = b.split()
            stop = min(hi, b.last_offset)
            for x in range(o, stop + 1):
                yield offs[x]
            o = stop + 1

    def _insert_batch(self, b: InFlightBatch) -> None:
        bisect.insort(self._firsts, b.first_offset)
        self._cache[b.first_offset] = b

    def _insert_new(self, offsets: list[int], member: str, deadline: int) -> None:
        for lo, hi in _coalesce(offsets):
            self._insert_batch(InFlightBatch(lo, hi, _Rec(RecordState.ACQUIRED, 1, member, deadline)))

    def _advance_start(self) -> bool:
        """Move SPSO past the terminal prefix; drop wholly terminal batches below it. A hole at SPSO
        (records never written before a restart) stops it: those records are still to deliver."""
        old = self.start_offset
        while self._firsts:
            b = self._cache[self._firsts[0]]
            if b.first_offset > self.start_offset:
                break
            whole = True
            for lo, hi, r in b.recs():
                if hi < self.start_offset:
                    continue
                if r.state not in TERMINAL:
                    whole = False
                    break
                self.start_offset = hi + 1
            if not whole:
                break
            self.start_offset = max(self.start_offset, b.last_offset + 1)
            self._firsts.pop(0)
            del self._cache[b.first_offset]
        return self.start_offset != old


def _coalesce(offsets: Iterable[int]) -> Iterator[tuple[int, int]]:
    lo = hi = None
    for o in sorted(set(offsets)):
        if hi is not None and o == hi + 1:
            hi = o
            continue
        if lo is not None:
            yield lo, hi
        lo = hi = o
    if lo is not None:
        yield lo, hi


def _runs_by_type(plan: list[tuple[int, AcknowledgeType]]) -> Iterator[tuple[tuple[int, int], AcknowledgeType]]:
    run = None
    for o, t in plan:
        if run and run[1] == o - 1 and run[2] is t:
            run[1] = o
            continue
        if run:
            yield (run[0], run[1]), run[2]
        run = [o, o, t]
    if run:
        yield (run[0], run[1]), run[2]
