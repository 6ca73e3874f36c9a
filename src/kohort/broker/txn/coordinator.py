"""The transaction coordinator (KIP-98) as a pure state machine: time is passed in, producer ids come
from a callable, and every change comes back as a `Result` holding the `__transaction_state` records
to persist and the COMMIT/ABORT markers to write. The driver (kohort.broker.txn.runtime) does the I/O.

States, their persisted ids and Kafka's legal transitions (AK TransactionState.java):
Empty 0 <- Empty, Complete*; Ongoing 1 <- Ongoing, Empty, Complete*; PrepareCommit 2 <- Ongoing;
PrepareAbort 3 <- Ongoing, PrepareEpochFence; CompleteCommit 4 <- PrepareCommit; CompleteAbort 5 <-
PrepareAbort; Dead 6 <- Empty, Complete*; PrepareEpochFence 7 <- Ongoing (never persisted: the
PrepareAbort at the bumped epoch is written instead). `transition` refuses anything else.

Protocols served, chosen per request version as Kafka does: transactions v1 (the client adds
partitions with AddPartitionsToTxn v0-v3 / AddOffsetsToTxn and ends with EndTxn v0-v4) and transactions
v2 (KIP-890 part 2: partitions are added implicitly by Produce v12 / TxnOffsetCommit v5 --
`add_partitions(..., tv2=True)` -- and EndTxn v5 bumps the epoch on every commit and abort: Prepare*
at epoch + 1, the markers at that epoch, the answer carries the new producer id/epoch). Error answers
follow AK TransactionCoordinator.scala in its order of checks (see each method). Epochs are exhausted
at 32766 (one spare for fencing): the next InitProducerId then rotates to a new producer id at epoch 0;
under v2 an EndTxn from epoch 32766 allocates the next producer id (NextProducerId) and the
transaction completes with it at epoch 0.

Transactions v2 EndTxn (AK TransactionCoordinator.handleEndTransaction, the TV2 branch): a request at
the stored epoch ("current") or at the epoch before it right after an EndTxn bump ("retry"; also the
previous producer id after a rotation); anything else is PRODUCER_FENCED. Ongoing + current ->
Prepare* at epoch + 1; Prepare* -> CONCURRENT_TRANSACTIONS for the same result, INVALID_TXN_STATE for
the other; Empty: abort current bumps (an empty PrepareAbort / CompleteAbort), commit current
INVALID_TXN_STATE, a retry PRODUCER_FENCED; CompleteX: a retry of X -> NONE, of the other result ->
INVALID_TXN_STATE; abort current bumps; commit current INVALID_TXN_STATE.

Zombie fencing: InitProducerId on an Ongoing transaction bumps the epoch, aborts the transaction at
the bumped epoch (PrepareAbort persisted, markers, CompleteAbort) and answers CONCURRENT_TRANSACTIONS;
the retry then bumps again. The transaction timeout (`expire_timed_out`) fences and aborts the same
way, so the old producer's next request is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before KIP-588's
versions, and from the partitions on Produce).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Callable

from kohort.broker.txn.log_format import TransactionLogValue
from kohort.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
EPOCH_EXHAUSTED = 32766          # Short.MAX_VALUE - 1: one spare epoch for fencing
DEFAULT_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


S = TxnState
# the names Kafka's admin APIs use (TransactionState.stateName)
STATE_NAMES = {S.EMPTY: "Empty", S.ONGOING: "Ongoing", S.PREPARE_COMMIT: "PrepareCommit",
               S.PREPARE_ABORT: "PrepareAbort", S.COMPLETE_COMMIT: "CompleteCommit",
               S.COMPLETE_ABORT: "CompleteAbort", S.DEAD: "Dead", S.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
LEGAL_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},  # v2
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}
COMPLETE = {S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
PREPARE = {S.PREPARE_COMMIT, S.PREPARE_ABORT}


class IllegalTransition(Exception):
    pass


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = S.EMPTY
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    partitions: set = field(default_factory=set)     # {(topic, partition)}
    start_ms: int = -1
    update_ms: int = -1
    client_tv: int = 1                               # the transaction's protocol: 1, or 2 (KIP-890)
    next_producer_id: int = NO_PRODUCER_ID           # v2: the id Complete* moves to (epoch exhausted)

    def to_value(self) -> TransactionLogValue:
        """The persisted form (PrepareEpochFence is never written)."""
        parts = None
        if self.state != S.EMPTY:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(self.partitions):
                by_topic.setdefault(t, []).append(p)
            parts = [TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()]
        return TransactionLogValue(
            producer_id=self.producer_id, previous_producer_id=self.previous_producer_id,
            producer_epoch=self.producer_epoch, transaction_timeout_ms=self.timeout_ms,
            transaction_status=int(self.state), transaction_partitions=parts,
            transaction_last_update_timestamp_ms=self.update_ms,
            transaction_start_timestamp_ms=self.start_ms, client_transaction_version=self.client_tv,
            next_producer_id=self.next_producer_id)

    @classmethod
    def from_value(cls, tid: str, v: TransactionLogValue) -> "TxnMetadata":
        parts = {(p.topic, i) for p in (v.transaction_partitions or []) for i in p.partition_ids}
        m = cls(tid, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, S(v.transaction_status),
                previous_producer_id=v.previous_producer_id, partitions=parts,
                start_ms=v.transaction_start_timestamp_ms, update_ms=v.transaction_last_update_timestamp_ms,
                client_tv=2 if v.client_transaction_version >= 2 else 1,
                next_producer_id=v.next_producer_id)
        if (m.client_tv == 2 and m.state in PREPARE | COMPLETE and m.producer_epoch > 0
                and m.next_producer_id == NO_PRODUCER_ID):
            m.last_producer_epoch = m.producer_epoch - 1     # an EndTxn v5 retry after a restart is one
        return m


@dataclass
class WriteMarkers:
    """Write a COMMIT (commit=True) or ABORT control batch to each partition, then call
    `TxnCoordinator.markers_written(transactional_id, now)`."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: list


@dataclass
class Result:
    error: int = ErrorCode.NONE
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    records: list = field(default_factory=list)     # [(transactional_id, TransactionLogValue | None)]
    markers: list = field(default_factory=list)     # [WriteMarkers]


def _fenced(version: int, first_pf_version: int) -> int:
    """PRODUCER_FENCED from the request version that may carry it (KIP-588), else INVALID_PRODUCER_EPOCH."""
    return ErrorCode.PRODUCER_FENCED if version >= first_pf_version else ErrorCode.INVALID_PRODUCER_EPOCH


class TxnCoordinator:
    def __init__(self, allocate_pid: Callable[[], int], max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS) -> None:
        self.allocate_pid = allocate_pid
        self.max_timeout_ms = max_timeout_ms
        self.txns: dict[str, TxnMetadata] = {}
        self._by_pid: dict[int, str] = {}

    # -- state changes -------------------------------------------------------------------------------
    def _transition(self, m: TxnMetadata, to: TxnState, now: int, out: Result) -> None:
        if m.state not in LEGAL_PREVIOUS[to]:
            raise IllegalTransition(f"{m.transactional_id}: {m.state.name} -> {to.name}")
        m.state = to
        m.update_ms = now
        self._by_pid[m.producer_id] = m.transactional_id
        if to != S.PREPARE_EPOCH_FENCE:
            out.records.append((m.transactional_id, m.to_value()))

    def load(self, tid: str, value: TransactionLogValue | None) -> None:
        """Replay one `__transaction_state` record (the last per key wins; None = tombstone)."""
        old = self.txns.pop(tid, None)
        if old is not None:
            self._by_pid.pop(old.producer_id, None)
        if value is not None:
            m = self.txns[tid] = TxnMetadata.from_value(tid, value)
            self._by_pid[m.producer_id] = tid

    def recover(self) -> Result:
        """After loading: re-send the markers of every Prepare* transaction (Kafka's loading does)."""
        out = Result()
        for m in self.txns.values():
            if m.state in PREPARE:
                out.markers.append(WriteMarkers(m.transactional_id, m.producer_id, m.producer_epoch,
                                                m.state == S.PREPARE_COMMIT, sorted(m.partitions)))
        return out

    # -- InitProducerId ------------------------------------------------------------------------------
    def init_producer_id(self, tid: str, timeout_ms: int, now: int, *, expected_pid: int = NO_PRODUCER_ID,
                         expected_epoch: int = NO_PRODUCER_EPOCH, version: int = 0) -> Result:
        if tid == "":
            return Result(ErrorCode.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return Result(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        m = self.txns.get(tid)
        out = Result()
        if m is None:
            m = self.txns[tid] = TxnMetadata(tid, self.allocate_pid(), 0, timeout_ms, S.EMPTY, start_ms=-1)
            self._transition(m, S.EMPTY, now, out)
            out.producer_id, out.producer_epoch = m.producer_id, m.producer_epoch
            return out
        if expected_pid != NO_PRODUCER_ID and not (
                expected_pid == m.producer_id
                or (expected_pid == m.previous_producer_id and expected_epoch >= EPOCH_EXHAUSTED)):
            return Result(_fenced(version, 4))
        if m.state in PREPARE or m.state in (S.PREPARE_EPOCH_FENCE, S.DEAD):
            return Result(ErrorCode.CONCURRENT_TRANSACTIONS)
        if m.state == S.ONGOING:
            self._fence_and_abort(m, now, out)
            out.error = ErrorCode.CONCURRENT_TRANSACTIONS
            return out
        # Empty / Complete*
        if m.producer_epoch >= EPOCH_EXHAUSTED and (expected_pid == NO_PRODUCER_ID or expected_epoch == m.producer_epoch
                                                    or expected_epoch == NO_PRODUCER_EPOCH):
            self._by_pid.pop(m.producer_id, None)
            m.previous_producer_id, m.producer_id = m.producer_id, self.allocate_pid()
            m.producer_epoch, m.last_producer_epoch = 0, NO_PRODUCER_EPOCH
        elif expected_pid == NO_PRODUCER_ID:
            m.producer_epoch, m.last_producer_epoch = m.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif expected_epoch in (NO_PRODUCER_EPOCH, m.producer_epoch):       # KIP-360 bump
            m.producer_epoch, m.last_producer_epoch = m.producer_epoch + 1, m.producer_epoch
        elif expected_epoch == m.last_producer_epoch:                         # retry of that bump
            out.producer_id, out.producer_epoch = m.producer_id, m.producer_epoch
            return out
        else:
            return Result(_fenced(version, 4))
        m.timeout_ms = timeout_ms
        m.partitions = set()
        m.start_ms = -1
        self._transition(m, S.EMPTY, now, out)
        out.producer_id, out.producer_epoch = m.producer_id, m.producer_epoch
        return out

    def _fence_and_abort(self, m: TxnMetadata, now: int, out: Result) -> None:
        """Ongoing -> PrepareEpochFence (epoch + 1) -> PrepareAbort at that epoch, with its markers."""
        self._transition(m, S.PREPARE_EPOCH_FENCE, now, out)
        if m.producer_epoch < EPOCH_EXHAUSTED + 1:
            m.producer_epoch += 1
        m.last_producer_epoch = NO_PRODUCER_EPOCH
        self._prepare_end(m, False, now, out)

    def _prepare_end(self, m: TxnMetadata, commit: bool, now: int, out: Result) -> None:
        self._transition(m, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now, out)
        out.markers.append(WriteMarkers(m.transactional_id, m.producer_id, m.producer_epoch, commit,
                                        sorted(m.partitions)))

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------------
    def _check_producer(self, tid, pid: int, epoch: int, version: int, first_pf_version: int):
        """-> (metadata, error) for the Add*/EndTxn checks shared in Kafka's order."""
        if not tid:
            return None, ErrorCode.INVALID_REQUEST
        m = self.txns.get(tid)
        if m is None or m.producer_id != pid:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if m.producer_epoch != epoch:
            return None, _fenced(version, first_pf_version)
        return m, ErrorCode.NONE

    def add_partitions(self, tid: str, pid: int, epoch: int, partitions, now: int, *, version: int = 0,
                       tv2: bool = False) -> Result:
        """AddPartitionsToTxn v0-v3 (PRODUCER_FENCED from v2) and AddOffsetsToTxn (the group's
        `__consumer_offsets` partition); with `tv2` the implicit add of Produce v12 / TxnOffsetCommit
        v5 (transactions v2: the transaction is marked as one ended by EndTxn v5). One error for all
        partitions."""
        m, err = self._check_producer(tid, pid, epoch, 2 if tv2 else version, 2)
        if err:
            return Result(err)
        if m.state in PREPARE or m.state in (S.PREPARE_EPOCH_FENCE, S.DEAD):
            return Result(ErrorCode.CONCURRENT_TRANSACTIONS)
        new = set(partitions)
        out = Result(producer_id=m.producer_id, producer_epoch=m.producer_epoch)
        if m.state == S.ONGOING and new <= m.partitions:
            return out
        if m.state != S.ONGOING:
            m.partitions = set()
            m.start_ms = now
            m.client_tv = 2 if tv2 else 1
        m.partitions |= new
        self._transition(m, S.ONGOING, now, out)
        return out

    # -- EndTxn (transactions v1: v0-v4) ------------------------------------------------------------
    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, now: int, *, version: int = 0) -> Result:
        if version >= 5:
            return self._end_txn_v2(tid, pid, epoch, commit, now)
        m, err = self._check_producer(tid, pid, epoch, version, 2)
        if err:
            return Result(err)
        out = Result(producer_id=m.producer_id, producer_epoch=m.producer_epoch)
        st = m.state
        if st == S.ONGOING:
            self._prepare_end(m, commit, now, out)
        elif st in COMPLETE:
            if (st == S.COMPLETE_COMMIT) != commit:
                out.error = ErrorCode.INVALID_TXN_STATE
        elif st in PREPARE:
            out.error = (ErrorCode.CONCURRENT_TRANSACTIONS if (st == S.PREPARE_COMMIT) == commit
                         else ErrorCode.INVALID_TXN_STATE)
        elif st == S.PREPARE_EPOCH_FENCE:
            out.error = ErrorCode.CONCURRENT_TRANSACTIONS
        else:                               # Empty, Dead
            out.error = ErrorCode.INVALID_TXN_STATE
        return out

    def _end_txn_v2(self, tid: str, pid: int, epoch: int, commit: bool, now: int) -> Result:
        """EndTxn v5 (transactions v2): see the module header for the table."""
        if not tid:
            return Result(ErrorCode.INVALID_REQUEST)
        m = self.txns.get(tid)
        rotated_retry = (m is not None and pid == m.previous_producer_id and m.producer_epoch == 0
                         and m.last_producer_epoch == NO_PRODUCER_EPOCH and epoch >= EPOCH_EXHAUSTED - 1)
        if m is None or (pid != m.producer_id and not rotated_retry):
            return Result(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        current = pid == m.producer_id and epoch == m.producer_epoch
        retry = rotated_retry or (pid == m.producer_id and m.last_producer_epoch != NO_PRODUCER_EPOCH
                                  and epoch == m.last_producer_epoch and epoch == m.producer_epoch - 1)
        if not current and not retry:
            return Result(ErrorCode.PRODUCER_FENCED)
        st = m.state
        ok = Result(producer_id=m.producer_id, producer_epoch=m.producer_epoch)
        if st in PREPARE or st == S.PREPARE_EPOCH_FENCE:
            same = (st == S.PREPARE_COMMIT) == commit
            return Result(ErrorCode.CONCURRENT_TRANSACTIONS if same or st == S.PREPARE_EPOCH_FENCE
                          else ErrorCode.INVALID_TXN_STATE)
        if st == S.ONGOING:
            if retry:
                return Result(ErrorCode.PRODUCER_FENCED)
            return self._bump_and_prepare(m, commit, now)
        if retry:
            if st == S.EMPTY:
                return Result(ErrorCode.PRODUCER_FENCED)
            return ok if (st == S.COMPLETE_COMMIT) == commit else Result(ErrorCode.INVALID_TXN_STATE)
        if not commit and st in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            m.partitions = set()
            return self._bump_and_prepare(m, False, now)
        return Result(ErrorCode.INVALID_TXN_STATE)

    def _bump_and_prepare(self, m: TxnMetadata, commit: bool, now: int) -> Result:
        """v2: Prepare* at epoch + 1 (markers at that epoch); the answer is the producer id/epoch the
        transaction completes with (a new id at epoch 0 once the epoch is exhausted)."""
        out = Result()
        m.last_producer_epoch = m.producer_epoch
        m.producer_epoch += 1
        m.client_tv = 2
        if m.producer_epoch >= EPOCH_EXHAUSTED:
            m.next_producer_id = self.allocate_pid()
        self._prepare_end(m, commit, now, out)
        if m.next_producer_id != NO_PRODUCER_ID:
            out.producer_id, out.producer_epoch = m.next_producer_id, 0
        else:
            out.producer_id, out.producer_epoch = m.producer_id, m.producer_epoch
        return out

    def markers_written(self, tid: str, now: int) -> Result:
        """Every marker of the Prepare* transaction is durable: move to Complete* (under v2 with an
        exhausted epoch, to the next producer id at epoch 0)."""
        m = self.txns[tid]
        to = S.COMPLETE_COMMIT if m.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        m.partitions = set()
        if m.next_producer_id != NO_PRODUCER_ID:
            self._by_pid.pop(m.producer_id, None)
            m.previous_producer_id, m.producer_id = m.producer_id, m.next_producer_id
            m.producer_epoch, m.last_producer_epoch = 0, NO_PRODUCER_EPOCH
            m.next_producer_id = NO_PRODUCER_ID
        out = Result(producer_id=m.producer_id, producer_epoch=m.producer_epoch)
        self._transition(m, to, now, out)
        return out

    # -- timeouts and queries ------------------------------------------------------------------------
    def expire_timed_out(self, now: int) -> Result:
        """Fence and abort every Ongoing transaction older than its timeout (Kafka's abort scan)."""
        out = Result()
        for m in list(self.txns.values()):
            if m.state == S.ONGOING and m.start_ms + m.timeout_ms < now:
                self._fence_and_abort(m, now, out)
        return out

    def expire_ids(self, now: int, expiration_ms: int) -> Result:
        """transactional.id.expiration.ms: an id idle (Empty or Complete*) for longer becomes Dead and
        is deleted with a tombstone (Kafka's TransactionStateManager.removeExpiredTransactionalIds)."""
        out = Result()
        for m in list(self.txns.values()):
            if (m.state == S.EMPTY or m.state in COMPLETE) and m.update_ms + expiration_ms < now:
                m.state = S.DEAD
                m.update_ms = now
                del self.txns[m.transactional_id]
                if self._by_pid.get(m.producer_id) == m.transactional_id:
                    del self._by_pid[m.producer_id]
                out.records.append((m.transactional_id, None))
        return out

    def verify(self, pid: int, epoch: int, topic: str, partition: int) -> int:
        """KIP-890 part 1 check for a transactional batch opening a transaction on a partition:
        NONE when (pid, epoch) has an Ongoing transaction holding the partition."""
        tid = self._by_pid.get(pid)
        m = self.txns.get(tid) if tid is not None else None
        if m is None or m.producer_id != pid:
            return ErrorCode.INVALID_TXN_STATE
        if m.producer_epoch > epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if m.state != S.ONGOING or m.producer_epoch != epoch or (topic, partition) not in m.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE
