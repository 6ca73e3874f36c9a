"""The transactional producer's state machine (KIP-98), after Java's TransactionManager.

Pure: no socket, thread or clock. Time is an argument (`now_ms`); the driver (client/producer.py's
_Sender) asks `next_request(now_ms, has_incomplete_batches)` for the one transactional request to send
next (a `TxnRequest`: what to send and to whom), sends it, and hands the answer back with
`handle_response` (or `handle_failure` for a broken connection / timeout). The application's calls
(`init_transactions`, `begin_transaction`, `maybe_add_partition`, `send_offsets`, `begin_commit`,
`begin_abort`) change the state and queue requests; each returns a `TxnResult` the driver waits on.

States and their legal previous states are Java's: UNINITIALIZED, INITIALIZING, READY, IN_TRANSACTION,
COMMITTING_TRANSACTION, ABORTING_TRANSACTION, ABORTABLE_ERROR, FATAL_ERROR.

Requests (transactions v1: AddPartitionsToTxn before the first batch of a partition, AddOffsetsToTxn
then TxnOffsetCommit to the group coordinator, EndTxn after every batch is acknowledged) go out one at
a time in priority order: FindCoordinator, InitProducerId, AddPartitions/AddOffsets/TxnOffsetCommit,
EndTxn, then the epoch-bump InitProducerId. EndTxn is skipped when nothing was added. After an
abortable error that leaves the sequence numbers unknown (a failed batch, UNKNOWN_PRODUCER_ID,
INVALID_PRODUCER_ID_MAPPING), aborting also bumps the epoch with InitProducerId(current id, epoch)
(KIP-360), and the driver restarts every partition's sequence at 0.

Transactions v2 (KIP-890 part 2), when the driver has found the broker's finalized
transaction.version >= 2 (`v2_available`; taken per transaction at begin_transaction, as Java 4.x):
no AddPartitionsToTxn (Produce v12 adds a partition itself: `produce_max_version`), no
AddOffsetsToTxn (TxnOffsetCommit v5 adds the offsets partition), and EndTxn v5, whose answer carries
the producer id and epoch of the next transaction (the epoch is bumped by every EndTxn, so an
abortable error needs no InitProducerId bump).

The next transaction starts as soon as EndTxn is answered, as in Java 4.x. Apache Kafka answers EndTxn
once PrepareCommit/PrepareAbort is written, before the markers; a first request of the next transaction
that reaches the coordinator meanwhile gets CONCURRENT_TRANSACTIONS: under v1 the AddPartitionsToTxn
answer (retried here after 20 ms), under v2 the partition leader's implicit add, which the leader
retries itself every add.partitions.to.txn.retry.backoff.ms (20) for up to
add.partitions.to.txn.retry.backoff.max.ms (100) before answering the Produce. No request a producer
sends tells it the markers are written; Kafka writes them within about half a millisecond, and this
client's next first Produce can arrive sooner. So once a transaction's first batch was held like that,
the producer sends the first batches of its next transactions a little after EndTxn's answer
(producer.py's MARKER_GAP_MS; the sender keeps that time, this machine stays pure).

Error classes are Java's (`_classify_*` below): NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE look the
coordinator up again and retry; other retriable codes (COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS, ...) retry after retry.backoff.ms (20 ms for the first AddPartitions of a
transaction); PRODUCER_FENCED and INVALID_PRODUCER_EPOCH are fatal (reported as PRODUCER_FENCED), as are
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE and unexpected codes; TRANSACTION_ABORTABLE,
topic/group authorization and TxnOffsetCommit's member errors are abortable.
"""
from __future__ import annotations

from kohort.errors import (
    AbortableTransactionError,
    ClusterAuthorizationFailedError,
    ErrorCode,
    FatalTransactionError,
    IllegalTransactionStateError,
    IncompatibleBrokerVersionError,
    InvalidProducerIdMappingError,
    KohortError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
    for_code,
    is_authentication_error,
)
from kohort.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from kohort.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from kohort.protocol.messages.end_txn import EndTxnRequest
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest
from kohort.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest

UNINITIALIZED = "UNINITIALIZED"
INITIALIZING = "INITIALIZING"
READY = "READY"
IN_TRANSACTION = "IN_TRANSACTION"
COMMITTING = "COMMITTING_TRANSACTION"
ABORTING = "ABORTING_TRANSACTION"
ABORTABLE_ERROR = "ABORTABLE_ERROR"
FATAL_ERROR = "FATAL_ERROR"

# target state -> legal previous states (FATAL_ERROR is reachable from anywhere)
_VALID_FROM = {
    UNINITIALIZED: {READY, ABORTABLE_ERROR},
    INITIALIZING: {UNINITIALIZED, COMMITTING, ABORTING},
    READY: {INITIALIZING, COMMITTING, ABORTING},
    IN_TRANSACTION: {READY},
    COMMITTING: {IN_TRANSACTION},
    ABORTING: {IN_TRANSACTION, ABORTABLE_ERROR},
    ABORTABLE_ERROR: {IN_TRANSACTION, COMMITTING, ABORTABLE_ERROR, INITIALIZING},
}

COORDINATOR_TRANSACTION = 1
COORDINATOR_GROUP = 0

# request priorities (lower goes first), as Java's TransactionManager.Priority
_P_FIND_COORDINATOR, _P_INIT, _P_ADD, _P_END, _P_BUMP = 0, 1, 2, 3, 4

# transactions v1: the highest versions whose meaning does not switch the broker to KIP-890 v2
MAX_VERSIONS = {InitProducerIdRequest.API_KEY: 5, AddPartitionsToTxnRequest.API_KEY: 3,
                AddOffsetsToTxnRequest.API_KEY: 4, EndTxnRequest.API_KEY: 4, TxnOffsetCommitRequest.API_KEY: 4}
PRODUCE_MAX_VERSION = 11        # v12 implies transactions v2 (the broker adds the partition itself)
# transactions v2 (KIP-890 part 2), when the broker's finalized transaction.version is >= 2: Produce
# v12 and TxnOffsetCommit v5 add their partition to the transaction themselves (no AddPartitionsToTxn,
# no AddOffsetsToTxn), and EndTxn v5 bumps the epoch of every transaction, answering the producer id
# and epoch to use next
V2_MAX_VERSIONS = {**MAX_VERSIONS, EndTxnRequest.API_KEY: 5, TxnOffsetCommitRequest.API_KEY: 5}
PRODUCE_MAX_VERSION_V2 = 12

ADD_PARTITIONS_RETRY_BACKOFF_MS = 20
NO_PRODUCER_ID = -1


class TxnResult:
    """The outcome of one transactional operation; the driver waits until `done`."""

    __slots__ = ("operation", "done", "error", "acked")

    def __init__(self, operation: str):
        self.operation = operation
        self.done = False
        self.error: BaseException | None = None
        self.acked = False          # the application has seen the outcome (Java's isAcked)

    def succeed(self) -> None:
        if not self.done:
            self.done = True

    def fail(self, err: BaseException) -> None:
        if not self.done:
            self.done, self.error = True, err


class TxnRequest:
    """One queued transactional request (Java's TxnRequestHandler): `api` names it, `build(version)`
    makes the protocol request, `coordinator` is the coordinator it goes to (None: any broker),
    `node` is filled in by next_request."""

    __slots__ = ("api", "priority", "result", "coordinator", "key", "fields", "retry", "not_before_ms", "seq",
                 "node", "epoch_bump", "v2")

    def __init__(self, api: str, priority: int, result: TxnResult, coordinator, key: str | None, **fields):
        self.api, self.priority, self.result = api, priority, result
        self.coordinator, self.key = coordinator, key
        self.fields = fields
        self.retry = False
        self.not_before_ms = 0
        self.seq = 0
        self.node = None
        self.epoch_bump = False
        self.v2 = False             # a transactions v2 request (KIP-890): V2_MAX_VERSIONS

    @property
    def api_key(self) -> int:
        return _API_KEYS[self.api]

    @property
    def max_version(self) -> int | None:
        return (V2_MAX_VERSIONS if self.v2 else MAX_VERSIONS).get(self.api_key)

    def build(self, version: int):
        f = self.fields
        if self.api == "FindCoordinator":
            if version >= 4:
                return FindCoordinatorRequest(key_type=f["key_type"], coordinator_keys=[f["find_key"]])
            return FindCoordinatorRequest(key=f["find_key"], key_type=f["key_type"])
        if self.api == "InitProducerId":
            return InitProducerIdRequest(transactional_id=f["transactional_id"],
                                         transaction_timeout_ms=f["transaction_timeout_ms"],
                                         producer_id=f["producer_id"], producer_epoch=f["producer_epoch"])
        if self.api == "AddPartitionsToTxn":
            T = AddPartitionsToTxnRequest.Topic
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(f["partitions"]):
                by_topic.setdefault(t, []).append(p)
            return AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=f["transactional_id"], v3_and_below_producer_id=f["producer_id"],
                v3_and_below_producer_epoch=f["producer_epoch"],
                v3_and_below_topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()])
        if self.api == "AddOffsetsToTxn":
            return AddOffsetsToTxnRequest(transactional_id=f["transactional_id"], producer_id=f["producer_id"],
                                          producer_epoch=f["producer_epoch"], group_id=f["group_id"])
        if self.api == "TxnOffsetCommit":
            R = TxnOffsetCommitRequest
            by_topic = {}
            for (t, p), (off, meta, le) in sorted(f["offsets"].items()):
                by_topic.setdefault(t, []).append(R.Topic.Partition(
                    partition_index=p, committed_offset=off, committed_leader_epoch=-1 if le is None else le,
                    committed_metadata=meta))
            return R(transactional_id=f["transactional_id"], group_id=f["group_id"], producer_id=f["producer_id"],
                     producer_epoch=f["producer_epoch"], generation_id=f["generation_id"],
                     member_id=f["member_id"], group_instance_id=f["group_instance_id"],
                     topics=[R.Topic(name=t, partitions=ps) for t, ps in by_topic.items()])
        if self.api == "EndTxn":
            return EndTxnRequest(transactional_id=f["transactional_id"], producer_id=f["producer_id"],
                                 producer_epoch=f["producer_epoch"], committed=f["committed"])
        raise KohortError(f"unknown transactional request {self.api}")

    def __repr__(self) -> str:
        return f"TxnRequest({self.api}, retry={self.retry})"


_API_KEYS = {"FindCoordinator": FindCoordinatorRequest.API_KEY, "InitProducerId": InitProducerIdRequest.API_KEY,
             "AddPartitionsToTxn": AddPartitionsToTxnRequest.API_KEY,
             "AddOffsetsToTxn": AddOffsetsToTxnRequest.API_KEY,
             "TxnOffsetCommit": TxnOffsetCommitRequest.API_KEY, "EndTxn": EndTxnRequest.API_KEY}


class _Pending:
    """A started user operation that may be retried after its caller timed out (Java's pending transition)."""

    __slots__ = ("result", "state", "operation")

    def __init__(self, result, state, operation):
        self.result, self.state, self.operation = result, state, operation


class TransactionManager:
    """See the module docstring. Not thread-safe: the driver serialises every call."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int = 60000, retry_backoff_ms: int = 100):
        if not transactional_id:
            raise KohortError("transactional.id must be a non-empty string")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = UNINITIALIZED
        self.last_error: BaseException | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self.coordinators: dict[int, object] = {}        # key type -> node (whatever the driver uses)
        self.coordinator_supports_bump = True            # InitProducerId v3+ (KIP-360) on the coordinator
        self.epoch_bump_required = False
        self.transaction_started = False
        self.new_partitions: set = set()
        self.pending_partitions: set = set()
        self.partitions: set = set()                     # added to the transaction (may be produced to)
        # (topic, partition)s a record may be queued for now without asking maybe_add_partition (which
        # put them here): emptied by every state transition and every pending operation, never
        # rebound (the compiled produce() holds this very set, records.producer_twin)
        self.sendable: set = set()
        self.pending_offsets: dict = {}
        self._queue: list[TxnRequest] = []
        self._seq = 0
        self.in_flight: TxnRequest | None = None
        self._pending: _Pending | None = None
        self.v2_available = False        # the broker finalized transaction.version >= 2 (set by the driver)
        self.v2 = False                  # this transaction speaks v2 (taken from v2_available when it begins)

    # -- views ------------------------------------------------------------------------------------------
    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    def has_error(self) -> bool:
        return self.state in (ABORTABLE_ERROR, FATAL_ERROR)

    def has_fatal_error(self) -> bool:
        return self.state == FATAL_ERROR

    def has_abortable_error(self) -> bool:
        return self.state == ABORTABLE_ERROR

    def is_aborting(self) -> bool:
        return self.state == ABORTING

    def is_completing(self) -> bool:
        return self.state in (COMMITTING, ABORTING)

    def has_ongoing_transaction(self) -> bool:
        return self.state in (IN_TRANSACTION, COMMITTING, ABORTING, ABORTABLE_ERROR)

    def is_send_to_partition_allowed(self, tp) -> bool:
        return self.state != FATAL_ERROR and tp in self.partitions

    def has_pending_requests(self) -> bool:
        return bool(self._queue) or self.in_flight is not None

    # -- the application's calls ------------------------------------------------------------------------
    def init_transactions(self) -> TxnResult:
        """InitProducerId (after FindCoordinator): UNINITIALIZED -> INITIALIZING -> READY."""
        return self._initialize(bump=False)

    def _initialize(self, bump: bool) -> TxnResult:
        self._maybe_fail_with_error()

        def start():
            if not bump:
                self._transition(INITIALIZING)
            result = TxnResult("init_transactions")
            req = TxnRequest("InitProducerId", _P_BUMP if bump else _P_INIT, result, COORDINATOR_TRANSACTION,
                             self.transactional_id, transactional_id=self.transactional_id,
                             transaction_timeout_ms=self.transaction_timeout_ms,
                             producer_id=self.producer_id if bump else -1,
                             producer_epoch=self.producer_epoch if bump else -1)
            req.epoch_bump = bump
            self._enqueue(req)
            return result
        return self._cached(start, INITIALIZING, "init_transactions")

    def begin_transaction(self) -> None:
        self._throw_if_pending("begin_transaction")
        self._maybe_fail_with_error()
        self._transition(IN_TRANSACTION)
        self.v2 = self.v2_available      # decided per transaction, as Java's TransactionManager does

    @property
    def produce_max_version(self) -> int:
        return PRODUCE_MAX_VERSION_V2 if self.v2 else PRODUCE_MAX_VERSION

    def maybe_add_partition(self, tp) -> None:
        """Before a record is queued for `tp` (Java's maybeAddPartition): remember to add it."""
        self._maybe_fail_with_error()
        self._throw_if_pending("send")
        if not self.has_producer_id:
            raise IllegalTransactionStateError(
                f"cannot add partition {tp} to a transaction before init_transactions() has completed")
        if self.state != IN_TRANSACTION:
            raise IllegalTransactionStateError(
                f"cannot add partition {tp} to a transaction in state {self.state} (call begin_transaction())")
        if tp in self.partitions or tp in self.new_partitions or tp in self.pending_partitions:
            self.sendable.add(tp)
            return
        if self.v2:                      # Produce v12 adds the partition itself
            self.partitions.add(tp)
            self.transaction_started = True
        else:
            self.new_partitions.add(tp)
        self.sendable.add(tp)

    def send_offsets(self, offsets: dict, group) -> TxnResult:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator. `offsets`: {(topic, partition):
        (offset, metadata, leader_epoch)}; `group`: a ConsumerGroupMetadata."""
        self._throw_if_pending("send_offsets_to_transaction")
        self._maybe_fail_with_error()
        if self.state != IN_TRANSACTION:
            raise IllegalTransactionStateError(
                f"cannot send offsets when no transaction is in progress (state {self.state})")
        result = TxnResult("send_offsets_to_transaction")
        if self.v2:                      # TxnOffsetCommit v5 adds the offsets partition itself
            self._enqueue_offset_commit(result, dict(offsets), group)
            return result
        self._enqueue(TxnRequest("AddOffsetsToTxn", _P_ADD, result, COORDINATOR_TRANSACTION, self.transactional_id,
                                 transactional_id=self.transactional_id, producer_id=self.producer_id,
                                 producer_epoch=self.producer_epoch, group_id=group.group_id,
                                 offsets=dict(offsets), group=group))
        return result

    def begin_commit(self) -> TxnResult:
        def start():
            self._maybe_fail_with_error()
            self._transition(COMMITTING)
            return self._begin_completing(True)
        return self._cached(start, COMMITTING, "commit_transaction")

    def begin_abort(self) -> TxnResult:
        def start():
            if self.state != ABORTABLE_ERROR:
                self._maybe_fail_with_error()
            self._transition(ABORTING)
            self.new_partitions.clear()    # aborting: nothing more to add
            return self._begin_completing(False)
        return self._cached(start, ABORTING, "abort_transaction")

    def _begin_completing(self, commit: bool) -> TxnResult:
        if self.new_partitions:
            self._enqueue(self._add_partitions_request())
        if not isinstance(self._cause(self.last_error), InvalidProducerIdMappingError):
            result = TxnResult("commit_transaction" if commit else "abort_transaction")
            req = TxnRequest("EndTxn", _P_END, result, COORDINATOR_TRANSACTION, self.transactional_id,
                             transactional_id=self.transactional_id, producer_id=self.producer_id,
                             producer_epoch=self.producer_epoch, committed=commit)
            req.v2 = self.v2
            self._enqueue(req)
            if not self.epoch_bump_required or self.v2:     # v2: EndTxn itself bumps the epoch
                return result
        return self._initialize(bump=True)

    # -- batches (the driver tells) ---------------------------------------------------------------------
    def handle_failed_batch(self, err: BaseException) -> None:
        """A batch of this transaction failed for good (Java's maybeTransitionToErrorState)."""
        if isinstance(err, (ClusterAuthorizationFailedError, TransactionalIdAuthorizationFailedError,
                            ProducerFencedError, UnsupportedVersionError)):
            self._to_fatal(err)
        else:
            if self.coordinator_supports_bump and not self.is_completing():
                self.epoch_bump_required = True
            self._to_abortable(err)

    # -- the driver's loop ------------------------------------------------------------------------------
    def next_request(self, now_ms: int, has_incomplete_batches: bool) -> TxnRequest | None:
        """The next request to send now, or None (nothing due, one in flight, or waiting for batches).
        Its `node` is the coordinator node to send to (None: any broker)."""
        if self.in_flight is not None:
            return None
        if self.new_partitions:
            self._enqueue(self._add_partitions_request())
        while self._queue:
            req = min(self._queue, key=lambda r: (r.priority, r.seq))
            if req.api == "EndTxn" and has_incomplete_batches:
                return None                         # EndTxn only after every batch is acknowledged
            if req.not_before_ms > now_ms:
                return None
            self._queue.remove(req)
            if self.has_error() and not (self.state == ABORTABLE_ERROR and req.api == "FindCoordinator"):
                req.result.fail(self.last_error)    # Java's maybeTerminateRequestWithError
                continue
            if req.api == "EndTxn" and not self.transaction_started:
                req.result.succeed()                # nothing was added: nothing to end
                if self.state != FATAL_ERROR:
                    self._complete_transaction()
                continue
            if req.coordinator is not None:
                node = self.coordinators.get(req.coordinator)
                if node is None:                    # find it first, then this request
                    self._enqueue(req)
                    self._lookup(req.coordinator, req.key)
                    continue
                req.node = node
            else:
                req.node = None
            self.in_flight = req
            return req
        return None

    def next_wakeup_ms(self, now_ms: int) -> int:
        """How long until a request backing off becomes due (for the driver's poll timeout; call it
        after next_request). A request already due but held back -- EndTxn waiting for batches -- needs
        no timer: the answers it waits for wake the driver."""
        later = [r.not_before_ms for r in self._queue if r.not_before_ms > now_ms]
        if self.in_flight is not None or not later:
            return 100
        return max(0, min(min(later) - now_ms, 100))

    def handle_failure(self, req: TxnRequest, err: BaseException, now_ms: int) -> None:
        """No answer (disconnected, timed out): find the coordinator again and retry; a version the
        broker cannot speak is fatal."""
        self.in_flight = None
        if isinstance(err, IncompatibleBrokerVersionError) or is_authentication_error(err):
            self._fatal(req, err)
            return
        if req.coordinator is not None:
            self._lookup(req.coordinator, req.key)
        self._reenqueue(req, now_ms)

    def handle_response(self, req: TxnRequest, resp, now_ms: int) -> None:
        self.in_flight = None
        getattr(self, "_on_" + req.api)(req, resp, now_ms)

    # -- answers ----------------------------------------------------------------------------------------
    def _on_FindCoordinator(self, req, resp, now_ms):
        if getattr(resp, "coordinators", None):
            c = resp.coordinators[0]
            code, node = c.error_code, (c.node_id, c.host, c.port)
        else:
            code, node = resp.error_code, (resp.node_id, resp.host, resp.port)
        kind = req.fields["key_type"]
        if code == 0:
            self.coordinators[kind] = node
            req.result.succeed()
        elif for_code(code).retriable:
            self._reenqueue(req, now_ms)
        elif code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            self._fatal(req, for_code(code)(f"transactional.id {self.transactional_id!r}"))
        elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            self._abortable(req, for_code(code)(f"group {req.fields['find_key']!r}"))
        elif code == ErrorCode.TRANSACTION_ABORTABLE:
            self._abortable(req, for_code(code)())
        else:
            self._fatal(req, for_code(code)(f"FindCoordinator for {req.fields['find_key']!r}"))

    def _on_InitProducerId(self, req, resp, now_ms):
        code = resp.error_code
        if code == 0:
            self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
            self._transition(READY)
            self.last_error = None
            req.result.succeed()
        elif code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self._lookup(COORDINATOR_TRANSACTION, self.transactional_id)
            self._reenqueue(req, now_ms)
        elif for_code(code).retriable:
            self._reenqueue(req, now_ms)
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            self._abortable(req, for_code(code)(f"transactional.id {self.transactional_id!r}"))
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self._fatal(req, self._fenced(code))
        elif code == ErrorCode.TRANSACTION_ABORTABLE:
            self._abortable(req, for_code(code)())
        else:
            self._fatal(req, for_code(code)("unexpected error in InitProducerId"))

    def _on_AddPartitionsToTxn(self, req, resp, now_ms):
        errors = {(t.name, r.partition_index): r.partition_error_code
                  for t in resp.results_by_topic_v3_and_below for r in t.results_by_partition}
        unauthorized, partition_errors = set(), {}
        for tp, code in errors.items():
            if code == 0:
                continue
            if code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
                self._lookup(COORDINATOR_TRANSACTION, self.transactional_id)
                self._reenqueue(req, now_ms)
                return
            if code == ErrorCode.CONCURRENT_TRANSACTIONS:
                # the previous transaction is still completing: retry soon (Java: 20 ms for a first add)
                self._reenqueue(req, now_ms, ADD_PARTITIONS_RETRY_BACKOFF_MS if not self.partitions else None)
                return
            if for_code(code).retriable:
                self._reenqueue(req, now_ms)
                return
            if code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
                self._fatal(req, self._fenced(code))
                return
            if code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_TXN_STATE):
                self._fatal(req, for_code(code)(f"AddPartitionsToTxn {tp[0]}[{tp[1]}]"))
                return
            if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                unauthorized.add(tp[0])
            elif code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
                self._abortable_if_possible(req, for_code(code)(f"AddPartitionsToTxn {tp[0]}[{tp[1]}]"))
                return
            elif code == ErrorCode.TRANSACTION_ABORTABLE:
                self._abortable(req, for_code(code)(f"AddPartitionsToTxn {tp[0]}[{tp[1]}]"))
                return
            else:                                   # OPERATION_NOT_ATTEMPTED and the unexpected
                partition_errors[tp] = code
        added = set(errors)
        self.pending_partitions -= added
        if unauthorized:
            self._abortable(req, for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED)(
                "topics " + ", ".join(sorted(unauthorized))))
        elif partition_errors:
            self._abortable(req, KohortError("could not add partitions to the transaction: " + ", ".join(
                f"{t}[{p}]: {for_code(c).name}" for (t, p), c in sorted(partition_errors.items()))))
        else:
            self.partitions |= added
            self.transaction_started = True
            req.result.succeed()

    def _on_AddOffsetsToTxn(self, req, resp, now_ms):
        code = resp.error_code
        f = req.fields
        if code == 0:
            # the offsets go to the group coordinator next, with the same result
            self._enqueue_offset_commit(req.result, f["offsets"], f["group"])
        elif code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
            self._lookup(COORDINATOR_TRANSACTION, self.transactional_id)
            self._reenqueue(req, now_ms)
        elif for_code(code).retriable:
            self._reenqueue(req, now_ms)
        elif code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
            self._abortable_if_possible(req, for_code(code)("AddOffsetsToTxn"))
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self._fatal(req, self._fenced(code))
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_TXN_STATE):
            self._fatal(req, for_code(code)("AddOffsetsToTxn"))
        elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            self._abortable(req, for_code(code)(f"group {f['group_id']!r}"))
        elif code == ErrorCode.TRANSACTION_ABORTABLE:
            self._abortable(req, for_code(code)())
        else:
            self._fatal(req, for_code(code)("unexpected error in AddOffsetsToTxn"))

    def _on_TxnOffsetCommit(self, req, resp, now_ms):
        group = req.fields["group_id"]
        reloaded = False
        for t in resp.topics:
            for p in t.partitions:
                tp, code = (t.name, p.partition_index), p.error_code
                if code == 0:
                    self.pending_offsets.pop(tp, None)
                elif code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                              ErrorCode.REQUEST_TIMED_OUT):
                    if not reloaded:
                        reloaded = True
                        self._lookup(COORDINATOR_GROUP, group)
                elif for_code(code).retriable:
                    continue
                elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                    self._abortable(req, for_code(code)(f"group {group!r}"))
                    break
                elif code in (ErrorCode.FENCED_INSTANCE_ID, ErrorCode.TRANSACTION_ABORTABLE):
                    self._abortable(req, for_code(code)(f"TxnOffsetCommit for group {group!r}"))
                    break
                elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                    self._abortable(req, for_code(code)(
                        f"TxnOffsetCommit for group {group!r}: the consumer group metadata is stale "
                        f"(the consumer was rebalanced out)"))
                    break
                elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
                    self._fatal(req, self._fenced(code))
                    break
                elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                              ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT):
                    self._fatal(req, for_code(code)(f"TxnOffsetCommit for group {group!r}"))
                    break
                else:
                    self._fatal(req, for_code(code)(f"unexpected error in TxnOffsetCommit for group {group!r}"))
                    break
            else:
                continue
            break
        if req.result.done:
            self.pending_offsets.clear()
        elif not self.pending_offsets:
            req.result.succeed()
        else:
            req.fields["offsets"] = dict(self.pending_offsets)
            self._reenqueue(req, now_ms)

    def _on_EndTxn(self, req, resp, now_ms):
        code = resp.error_code
        if code == 0:
            if req.v2 and resp.producer_id >= 0 and resp.producer_epoch >= 0:
                # KIP-890: the epoch (or, once exhausted, the producer id) to use from now on
                self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
            if req.v2:
                self.epoch_bump_required = False
            self._complete_transaction()
            req.result.succeed()
        elif code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
            self._lookup(COORDINATOR_TRANSACTION, self.transactional_id)
            self._reenqueue(req, now_ms)
        elif for_code(code).retriable:
            self._reenqueue(req, now_ms)
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self._fatal(req, self._fenced(code))
        elif code in (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_TXN_STATE):
            self._fatal(req, for_code(code)("EndTxn"))
        elif code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING):
            self._abortable_if_possible(req, for_code(code)("EndTxn"))
        elif code == ErrorCode.TRANSACTION_ABORTABLE:
            self._abortable(req, for_code(code)())
        else:
            self._fatal(req, for_code(code)("unexpected error in EndTxn"))

    # -- helpers ----------------------------------------------------------------------------------------
    def _fenced(self, code: int):
        # Java reports INVALID_PRODUCER_EPOCH from a coordinator API as PRODUCER_FENCED
        return ProducerFencedError(f"transactional.id {self.transactional_id!r} (producer id {self.producer_id}, "
                                   f"epoch {self.producer_epoch}) was fenced by a newer producer"
                                   + ("" if code == ErrorCode.PRODUCER_FENCED else " (INVALID_PRODUCER_EPOCH)"))

    def _enqueue(self, req: TxnRequest) -> None:
        self._seq += 1
        req.seq = self._seq
        self._queue.append(req)

    def _reenqueue(self, req: TxnRequest, now_ms: int, backoff_ms: int | None = None) -> None:
        req.retry = True
        req.not_before_ms = now_ms + (self.retry_backoff_ms if backoff_ms is None
                                      else min(backoff_ms, self.retry_backoff_ms))
        self._enqueue(req)

    def _lookup(self, key_type: int, key: str) -> None:
        self.coordinators.pop(key_type, None)
        if any(r.api == "FindCoordinator" and r.fields["key_type"] == key_type for r in self._queue):
            return
        self._enqueue(TxnRequest("FindCoordinator", _P_FIND_COORDINATOR, TxnResult("find_coordinator"), None, None,
                                 key_type=key_type, find_key=key))

    def _enqueue_offset_commit(self, result: TxnResult, offsets: dict, g) -> None:
        for tp, om in offsets.items():
            self.pending_offsets[tp] = om
        req = TxnRequest("TxnOffsetCommit", _P_ADD, result, COORDINATOR_GROUP, g.group_id,
                         transactional_id=self.transactional_id, group_id=g.group_id,
                         producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                         generation_id=g.generation_id, member_id=g.member_id,
                         group_instance_id=g.group_instance_id, offsets=dict(self.pending_offsets))
        req.v2 = self.v2
        self._enqueue(req)
        self.transaction_started = True

    def _add_partitions_request(self) -> TxnRequest:
        self.pending_partitions |= self.new_partitions
        self.new_partitions.clear()
        return TxnRequest("AddPartitionsToTxn", _P_ADD, TxnResult("add_partitions"), COORDINATOR_TRANSACTION,
                          self.transactional_id, transactional_id=self.transactional_id,
                          producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                          partitions=set(self.pending_partitions))

    def _complete_transaction(self) -> None:
        self._transition(INITIALIZING if self.epoch_bump_required else READY)
        self.last_error = None
        self.epoch_bump_required = False
        self.transaction_started = False
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.partitions.clear()

    def _fatal(self, req: TxnRequest, err: BaseException) -> None:
        req.result.fail(err)
        self._to_fatal(err)

    def _abortable(self, req: TxnRequest, err: BaseException) -> None:
        req.result.fail(err)
        self._to_abortable(err)

    def _abortable_if_possible(self, req: TxnRequest, err: BaseException) -> None:
        if self.coordinator_supports_bump:
            self.epoch_bump_required = True
            self._abortable(req, err)
        else:
            self._fatal(req, err)

    def _to_abortable(self, err: BaseException) -> None:
        if self.state in (ABORTING, FATAL_ERROR):
            return                                  # already aborting (or beyond help)
        self._transition(ABORTABLE_ERROR, err)

    def _to_fatal(self, err: BaseException) -> None:
        self._transition(FATAL_ERROR, err)
        if self._pending is not None:
            self._pending.result.fail(err)

    def _transition(self, target: str, error: BaseException | None = None) -> None:
        if target != FATAL_ERROR and self.state not in _VALID_FROM[target]:
            raise IllegalTransactionStateError(
                f"transactional.id {self.transactional_id!r}: invalid transition from {self.state} to {target}")
        self.last_error = error if target in (FATAL_ERROR, ABORTABLE_ERROR) else None
        self.state = target
        self.sendable.clear()

    @staticmethod
    def _cause(err):
        return getattr(err, "cause", None) or err

    def wrap(self, err: BaseException) -> BaseException:
        """The error an application call raises for `err`: Abortable/FatalTransactionError by the state."""
        if isinstance(err, (AbortableTransactionError, FatalTransactionError, IllegalTransactionStateError)):
            return err
        if self.state == FATAL_ERROR:
            return FatalTransactionError(f"transactional.id {self.transactional_id!r}: {err}; the producer "
                                         f"cannot be used any more: close it", err)
        return AbortableTransactionError(f"transactional.id {self.transactional_id!r}: {err}; abort the "
                                         f"transaction (abort_transaction()) to go on", err)

    def _maybe_fail_with_error(self) -> None:
        if self.has_error():
            raise self.wrap(self.last_error)

    def _throw_if_pending(self, operation: str) -> None:
        p = self._pending
        if p is not None:
            if p.result.acked:
                self._pending = None
            else:
                raise IllegalTransactionStateError(
                    f"cannot {operation}: the previous {p.operation}() timed out and must be called again")

    def _cached(self, start, state: str, operation: str) -> TxnResult:
        p = self._pending
        if p is not None:
            if p.result.acked:
                self._pending = None
            elif p.state != state:
                raise IllegalTransactionStateError(
                    f"cannot {operation}: the previous {p.operation}() timed out and must be called again")
            else:
                return p.result                     # a retry after a timeout gets the same outcome
        result = start()
        self._pending = _Pending(result, state, operation)
        self.sendable.clear()
        return result

    def fail_all(self, err: BaseException) -> None:
        """The producer is closing: every queued request and the pending operation fail."""
        for r in self._queue:
            r.result.fail(err)
        self._queue.clear()
        if self.in_flight is not None:
            self.in_flight.result.fail(err)
        if self._pending is not None:
            self._pending.result.fail(err)


__all__ = ["ABORTABLE_ERROR", "ABORTING", "COMMITTING", "FATAL_ERROR", "INITIALIZING", "IN_TRANSACTION",
           "PRODUCE_MAX_VERSION", "PRODUCE_MAX_VERSION_V2", "READY", "UNINITIALIZED", "TransactionManager", "TxnRequest", "TxnResult"]
