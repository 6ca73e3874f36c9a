"""The transactional producer's state machine (client/txn_manager.py) with a fake clock and scripted
answers: every state transition, the order of requests, and Java's split of errors into retried,
abortable and fatal, one API and error code at a time."""
from __future__ import annotations

import pytest

from kohort.client import txn_manager as tm
from kohort.client.txn_manager import TransactionManager
from kohort.errors import (
    AbortableTransactionError,
    ErrorCode,
    FatalTransactionError,
    IllegalTransactionStateError,
    InvalidProducerIdMappingError,
    KafkaConnectionError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
)
from kohort.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnResponse
from kohort.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnResponse
from kohort.protocol.messages.end_txn import EndTxnResponse
from kohort.protocol.messages.find_coordinator import FindCoordinatorResponse
from kohort.protocol.messages.init_producer_id import InitProducerIdResponse
from kohort.protocol.messages.txn_offset_commit import TxnOffsetCommitResponse
from kohort.structs import ConsumerGroupMetadata

TP = ("out", 0)
GROUP = ConsumerGroupMetadata("g", 3, "member-1", None)


def find(code=0, node=1):
    return FindCoordinatorResponse(error_code=code, node_id=node, host="h", port=9092, coordinators=[])


def init_resp(code=0, pid=7, epoch=0):
    return InitProducerIdResponse(error_code=code, producer_id=pid if code == 0 else -1,
                                  producer_epoch=epoch if code == 0 else -1)


def add_parts(code=0, parts=(TP,)):
    R = AddPartitionsToTxnResponse
    by = {}
    for t, p in parts:
        by.setdefault(t, []).append(R.TopicResult.PartitionResult(partition_index=p, partition_error_code=code))
    return R(results_by_topic_v3_and_below=[R.TopicResult(name=t, results_by_partition=ps) for t, ps in by.items()])


def add_offsets(code=0):
    return AddOffsetsToTxnResponse(error_code=code)


def txn_commit(code=0, parts=(("in", 0),)):
    R = TxnOffsetCommitResponse
    return R(topics=[R.Topic(name=t, partitions=[R.Topic.Partition(partition_index=p, error_code=code)])
                     for t, p in parts])


def end(code=0):
    return EndTxnResponse(error_code=code)


class Driver:
    """Plays the producer's I/O: asks for the next request, answers it."""

    def __init__(self):
        self.m = TransactionManager("tid", 60000, retry_backoff_ms=100)
        self.now = 1000
        self.incomplete = False
        self.sent = []
        self.auto_ack = True

    def next(self):
        req = self.m.next_request(self.now, self.incomplete)
        if req is not None:
            self.sent.append(req.api)
        self._ack()
        return req

    def _ack(self):
        """The producer returns each finished operation's outcome to the application (acked)."""
        p = self.m._pending
        if self.auto_ack and p is not None and p.result.done:
            p.result.acked = True

    def expect(self, api):
        req = self.next()
        assert req is not None and req.api == api, (req, api, self.m.state)
        req.build(99 if api == "FindCoordinator" else 3)     # the request encodes
        return req

    def answer(self, api, resp):
        self.m.handle_response(self.expect(api), resp, self.now)
        self._ack()

    def ready(self):
        r = self.m.init_transactions()
        self.answer("FindCoordinator", find())
        self.answer("InitProducerId", init_resp())
        assert r.done and r.error is None and self.m.state == tm.READY
        return self

    def in_txn_with_partition(self):
        self.ready()
        self.m.begin_transaction()
        self.m.maybe_add_partition(TP)
        self.answer("AddPartitionsToTxn", add_parts())
        assert self.m.is_send_to_partition_allowed(TP)
        return self


def test_init_find_coordinator_then_init_producer_id():
    d = Driver()
    r = d.m.init_transactions()
    assert d.m.state == tm.INITIALIZING
    find_req = d.expect("FindCoordinator")
    assert find_req.fields["key_type"] == 1 and find_req.fields["find_key"] == "tid"
    assert find_req.node is None                           # any broker
    d.m.handle_response(find_req, find(node=4), d.now)
    init = d.expect("InitProducerId")
    assert init.node == (4, "h", 9092)
    assert init.fields["transactional_id"] == "tid" and init.fields["transaction_timeout_ms"] == 60000
    assert init.fields["producer_id"] == -1 and init.fields["producer_epoch"] == -1
    d.m.handle_response(init, init_resp(pid=7, epoch=2), d.now)
    assert r.done and r.error is None
    assert (d.m.state, d.m.producer_id, d.m.producer_epoch) == (tm.READY, 7, 2)


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_init_coordinator_moved_finds_it_again(code):
    d = Driver()
    d.m.init_transactions()
    d.answer("FindCoordinator", find())
    d.answer("InitProducerId", init_resp(code))
    d.now += 100
    d.answer("FindCoordinator", find(node=2))
    assert d.expect("InitProducerId").node[0] == 2


@pytest.mark.parametrize("code", [ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])
def test_init_retriable_waits_retry_backoff(code):
    d = Driver()
    r = d.m.init_transactions()
    d.answer("FindCoordinator", find())
    d.answer("InitProducerId", init_resp(code))
    assert d.next() is None                                 # backing off
    assert d.m.next_wakeup_ms(d.now) == 100
    d.now += 100
    d.answer("InitProducerId", init_resp())
    assert r.done and r.error is None


@pytest.mark.parametrize("code,fatal", [
    (ErrorCode.PRODUCER_FENCED, True), (ErrorCode.INVALID_PRODUCER_EPOCH, True),
    (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, False),   # Java: abortable from InitProducerId
    (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, False),
    (ErrorCode.TRANSACTION_ABORTABLE, False),
    (ErrorCode.INVALID_TRANSACTION_TIMEOUT, True),              # unexpected: fatal
])
def test_init_errors(code, fatal):
    d = Driver()
    r = d.m.init_transactions()
    d.answer("FindCoordinator", find())
    d.answer("InitProducerId", init_resp(code))
    assert r.done and r.error is not None
    assert d.m.state == (tm.FATAL_ERROR if fatal else tm.ABORTABLE_ERROR)
    if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
        assert isinstance(r.error, ProducerFencedError)     # IPE from a coordinator reads as fenced
    wrapped = d.m.wrap(r.error)
    assert isinstance(wrapped, FatalTransactionError if fatal else AbortableTransactionError)
    assert wrapped.cause is r.error


def test_call_order_is_enforced():
    d = Driver()
    with pytest.raises(IllegalTransactionStateError):
        d.m.begin_transaction()                             # before init
    with pytest.raises(IllegalTransactionStateError):
        d.m.maybe_add_partition(TP)
    d.ready()
    with pytest.raises(IllegalTransactionStateError):
        d.m.init_transactions()                             # twice
    with pytest.raises(IllegalTransactionStateError):
        d.m.maybe_add_partition(TP)                         # not in a transaction
    with pytest.raises(IllegalTransactionStateError):
        d.m.send_offsets({("in", 0): (5, "", None)}, GROUP)
    with pytest.raises(IllegalTransactionStateError):
        d.m.begin_commit()
    d.m.begin_transaction()
    with pytest.raises(IllegalTransactionStateError):
        d.m.begin_transaction()                             # twice


def test_commit_adds_partitions_first_and_ends_after_batches():
    d = Driver().ready()
    d.m.begin_transaction()
    d.m.maybe_add_partition(TP)
    d.m.maybe_add_partition(TP)                             # once
    assert not d.m.is_send_to_partition_allowed(TP)         # records wait for AddPartitionsToTxn
    req = d.expect("AddPartitionsToTxn")
    assert req.fields["partitions"] == {TP} and req.fields["producer_id"] == 7
    d.m.handle_response(req, add_parts(), d.now)
    assert d.m.is_send_to_partition_allowed(TP)
    r = d.m.begin_commit()
    assert d.m.state == tm.COMMITTING
    d.incomplete = True
    assert d.next() is None                                 # EndTxn only after every batch
    d.incomplete = False
    req = d.expect("EndTxn")
    assert req.fields["committed"] is True
    d.m.handle_response(req, end(), d.now)
    assert r.done and r.error is None and d.m.state == tm.READY
    assert not d.m.is_send_to_partition_allowed(TP)         # a new transaction adds it again


def test_empty_transaction_sends_no_end_txn():
    d = Driver().ready()
    d.m.begin_transaction()
    r = d.m.begin_commit()
    assert d.next() is None
    assert r.done and r.error is None and d.m.state == tm.READY
    assert d.sent == ["FindCoordinator", "InitProducerId"]


def test_send_offsets_add_offsets_then_txn_offset_commit_to_group_coordinator():
    d = Driver().ready()
    d.m.begin_transaction()
    r = d.m.send_offsets({("in", 0): (42, "meta", 3)}, GROUP)
    ao = d.expect("AddOffsetsToTxn")
    assert ao.fields["group_id"] == "g"
    d.m.handle_response(ao, add_offsets(), d.now)
    assert not r.done
    fc = d.expect("FindCoordinator")                        # the group's coordinator this time
    assert fc.fields == {"key_type": 0, "find_key": "g"}
    d.m.handle_response(fc, find(node=5), d.now)
    toc = d.expect("TxnOffsetCommit")
    assert toc.node[0] == 5
    built = toc.build(3)
    assert (built.generation_id, built.member_id, built.group_instance_id) == (3, "member-1", None)
    p = built.topics[0].partitions[0]
    assert (p.partition_index, p.committed_offset, p.committed_metadata, p.committed_leader_epoch) == (0, 42, "meta", 3)
    d.m.handle_response(toc, txn_commit(), d.now)
    assert r.done and r.error is None
    c = d.m.begin_commit()
    d.answer("EndTxn", end())                               # offsets alone start the transaction
    assert c.done and c.error is None


def test_txn_offset_commit_retries_only_the_failed_partitions():
    d = Driver().ready()
    d.m.begin_transaction()
    r = d.m.send_offsets({("in", 0): (1, "", None), ("in", 1): (2, "", None)}, GROUP)
    d.answer("AddOffsetsToTxn", add_offsets())
    d.answer("FindCoordinator", find())
    R = TxnOffsetCommitResponse
    d.answer("TxnOffsetCommit", R(topics=[R.Topic(name="in", partitions=[
        R.Topic.Partition(partition_index=0, error_code=0),
        R.Topic.Partition(partition_index=1, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)])]))
    assert not r.done
    d.now += 100
    again = d.expect("TxnOffsetCommit")
    assert set(again.fields["offsets"]) == {("in", 1)}
    d.m.handle_response(again, txn_commit(parts=(("in", 1),)), d.now)
    assert r.done and r.error is None


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                                  ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                  ErrorCode.TRANSACTION_ABORTABLE])
def test_txn_offset_commit_abortable(code):
    d = Driver().ready()
    d.m.begin_transaction()
    r = d.m.send_offsets({("in", 0): (1, "", None)}, GROUP)
    d.answer("AddOffsetsToTxn", add_offsets())
    d.answer("FindCoordinator", find())
    d.answer("TxnOffsetCommit", txn_commit(code))
    assert r.error is not None and d.m.state == tm.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError):
        d.m.begin_commit()                                  # cannot commit now
    a = d.m.begin_abort()
    d.answer("EndTxn", end())
    assert a.done and a.error is None and d.m.state == tm.READY


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                                  ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                  ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.INVALID_REQUEST])
def test_txn_offset_commit_fatal(code):
    d = Driver().ready()
    d.m.begin_transaction()
    d.m.send_offsets({("in", 0): (1, "", None)}, GROUP)
    d.answer("AddOffsetsToTxn", add_offsets())
    d.answer("FindCoordinator", find())
    d.answer("TxnOffsetCommit", txn_commit(code))
    assert d.m.state == tm.FATAL_ERROR
    with pytest.raises(FatalTransactionError):
        d.m.begin_abort()


def test_txn_offset_commit_coordinator_moved():
    d = Driver().ready()
    d.m.begin_transaction()
    r = d.m.send_offsets({("in", 0): (1, "", None)}, GROUP)
    d.answer("AddOffsetsToTxn", add_offsets())
    d.answer("FindCoordinator", find(node=1))
    d.answer("TxnOffsetCommit", txn_commit(ErrorCode.NOT_COORDINATOR))
    d.answer("FindCoordinator", find(node=2))
    d.now += 100
    assert d.expect("TxnOffsetCommit").node[0] == 2


# (api, code) -> "fatal" | "abortable" | "bump" (abortable + epoch bump on abort) | "retry" | "find"
TABLE = [
    ("AddPartitionsToTxn", ErrorCode.PRODUCER_FENCED, "fatal"),
    ("AddPartitionsToTxn", ErrorCode.INVALID_PRODUCER_EPOCH, "fatal"),
    ("AddPartitionsToTxn", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "fatal"),
    ("AddPartitionsToTxn", ErrorCode.INVALID_TXN_STATE, "fatal"),
    ("AddPartitionsToTxn", ErrorCode.TOPIC_AUTHORIZATION_FAILED, "abortable"),
    ("AddPartitionsToTxn", ErrorCode.OPERATION_NOT_ATTEMPTED, "abortable"),
    ("AddPartitionsToTxn", ErrorCode.TRANSACTION_ABORTABLE, "abortable"),
    ("AddPartitionsToTxn", ErrorCode.UNKNOWN_PRODUCER_ID, "bump"),
    ("AddPartitionsToTxn", ErrorCode.INVALID_PRODUCER_ID_MAPPING, "bump"),
    ("AddPartitionsToTxn", ErrorCode.CONCURRENT_TRANSACTIONS, "retry"),
    ("AddPartitionsToTxn", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "retry"),
    ("AddPartitionsToTxn", ErrorCode.NOT_COORDINATOR, "find"),
    ("AddOffsetsToTxn", ErrorCode.PRODUCER_FENCED, "fatal"),
    ("AddOffsetsToTxn", ErrorCode.INVALID_PRODUCER_EPOCH, "fatal"),
    ("AddOffsetsToTxn", ErrorCode.INVALID_TXN_STATE, "fatal"),
    ("AddOffsetsToTxn", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "fatal"),
    ("AddOffsetsToTxn", ErrorCode.GROUP_AUTHORIZATION_FAILED, "abortable"),
    ("AddOffsetsToTxn", ErrorCode.TRANSACTION_ABORTABLE, "abortable"),
    ("AddOffsetsToTxn", ErrorCode.UNKNOWN_PRODUCER_ID, "bump"),
    ("AddOffsetsToTxn", ErrorCode.CONCURRENT_TRANSACTIONS, "retry"),
    ("AddOffsetsToTxn", ErrorCode.COORDINATOR_NOT_AVAILABLE, "find"),
    ("AddOffsetsToTxn", ErrorCode.UNKNOWN_SERVER_ERROR, "fatal"),
    ("EndTxn", ErrorCode.PRODUCER_FENCED, "fatal"),
    ("EndTxn", ErrorCode.INVALID_PRODUCER_EPOCH, "fatal"),
    ("EndTxn", ErrorCode.INVALID_TXN_STATE, "fatal"),
    ("EndTxn", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "fatal"),
    ("EndTxn", ErrorCode.TRANSACTION_ABORTABLE, "abortable"),
    ("EndTxn", ErrorCode.UNKNOWN_PRODUCER_ID, "bump"),
    ("EndTxn", ErrorCode.INVALID_PRODUCER_ID_MAPPING, "bump"),
    ("EndTxn", ErrorCode.CONCURRENT_TRANSACTIONS, "retry"),
    ("EndTxn", ErrorCode.NOT_COORDINATOR, "find"),
    ("EndTxn", ErrorCode.UNKNOWN_SERVER_ERROR, "fatal"),
]


def _reach(d: Driver, api: str):
    """Bring the driver to the point where `api` is the next request."""
    d.ready()
    d.m.begin_transaction()
    if api == "AddPartitionsToTxn":
        d.m.maybe_add_partition(TP)
    elif api == "AddOffsetsToTxn":
        return d.m.send_offsets({("in", 0): (1, "", None)}, GROUP)
    else:
        d.m.maybe_add_partition(TP)
        d.answer("AddPartitionsToTxn", add_parts())
        return d.m.begin_commit()
    return None


_RESP = {"AddPartitionsToTxn": add_parts, "AddOffsetsToTxn": add_offsets, "EndTxn": end}


@pytest.mark.parametrize("api,code,kind", TABLE, ids=[f"{a}-{ErrorCode(c).name}" for a, c, _ in TABLE])
def test_error_classes(api, code, kind):
    d = Driver()
    _reach(d, api)
    d.answer(api, _RESP[api](code))
    if kind == "fatal":
        assert d.m.state == tm.FATAL_ERROR
        if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
            assert isinstance(d.m.last_error, ProducerFencedError)
        with pytest.raises(FatalTransactionError):
            d.m.begin_abort()
        return
    if kind in ("retry", "find"):
        if kind == "find":
            d.answer("FindCoordinator", find(node=3))
        d.now += 100
        req = d.expect(api)
        assert req.retry
        return
    assert d.m.state == tm.ABORTABLE_ERROR
    assert d.m.epoch_bump_required == (kind == "bump")
    with pytest.raises(AbortableTransactionError):
        d.m.begin_commit()
    a = d.m.begin_abort()
    if api == "EndTxn":
        d.answer("EndTxn", end())      # a failed first Add* added nothing: no EndTxn then
    elif kind != "bump":
        assert d.next() is None
    if kind == "bump":
        bump = d.expect("InitProducerId")                   # KIP-360: same id, next epoch
        assert (bump.fields["producer_id"], bump.fields["producer_epoch"]) == (7, 0)
        d.m.handle_response(bump, init_resp(pid=7, epoch=1), d.now)
        d._ack()
        assert (d.m.producer_id, d.m.producer_epoch) == (7, 1)
    assert a.done and a.error is None and d.m.state == tm.READY
    d.m.begin_transaction()                                 # and the producer goes on


def test_failed_batch_is_abortable():
    d = Driver().in_txn_with_partition()
    d.m.handle_failed_batch(OutOfOrderSequenceNumberError("out[0]"))
    assert d.m.state == tm.ABORTABLE_ERROR and d.m.epoch_bump_required
    with pytest.raises(AbortableTransactionError) as ei:
        d.m.maybe_add_partition(("out", 1))                # produce() raises too
    assert isinstance(ei.value.cause, OutOfOrderSequenceNumberError)


def test_failed_batch_abort_sequence():
    d = Driver().in_txn_with_partition()
    d.m.handle_failed_batch(OutOfOrderSequenceNumberError("out[0]"))
    a = d.m.begin_abort()
    e = d.expect("EndTxn")
    assert e.fields["committed"] is False
    d.m.handle_response(e, end(), d.now)
    assert d.m.state == tm.INITIALIZING and not a.done
    bump = d.expect("InitProducerId")
    assert (bump.fields["producer_id"], bump.fields["producer_epoch"]) == (7, 0)
    d.m.handle_response(bump, init_resp(pid=7, epoch=1), d.now)
    assert a.done and a.error is None and d.m.state == tm.READY and d.m.producer_epoch == 1


def test_fenced_batch_is_fatal():
    d = Driver().in_txn_with_partition()
    d.m.handle_failed_batch(ProducerFencedError("out[0]"))
    assert d.m.state == tm.FATAL_ERROR


def test_timed_out_commit_is_retried_not_restarted():
    d = Driver().in_txn_with_partition()
    d.auto_ack = False                                      # the application's wait timed out
    r1 = d.m.begin_commit()
    assert d.m.begin_commit() is r1                         # the app called commit again after a timeout
    with pytest.raises(IllegalTransactionStateError):
        d.m.begin_abort()                                   # another operation must wait
    d.answer("EndTxn", end())                               # it completes in the background
    assert r1.done and r1.error is None
    with pytest.raises(IllegalTransactionStateError):
        d.m.begin_transaction()                             # the app has not seen the outcome yet
    assert d.m.begin_commit() is r1                         # calling commit again gets it
    r1.acked = True                                         # (the producer marks what it returned)
    d.m.begin_transaction()                                 # seen: free again


def test_disconnect_finds_the_coordinator_again_and_retries():
    d = Driver().ready()
    d.m.begin_transaction()
    d.m.maybe_add_partition(TP)
    req = d.expect("AddPartitionsToTxn")
    d.m.handle_failure(req, KafkaConnectionError("gone"), d.now)
    d.answer("FindCoordinator", find(node=9))
    d.now += 100
    assert d.expect("AddPartitionsToTxn").node[0] == 9


def test_one_request_in_flight_at_a_time():
    d = Driver().ready()
    d.m.begin_transaction()
    d.m.maybe_add_partition(TP)
    d.expect("AddPartitionsToTxn")
    d.m.maybe_add_partition(("out", 1))
    assert d.next() is None


def test_abort_clears_partitions_not_yet_added():
    d = Driver().ready()
    d.m.begin_transaction()
    d.m.maybe_add_partition(TP)
    a = d.m.begin_abort()
    assert d.next() is None                                 # nothing was added: no EndTxn either
    assert a.done and a.error is None and d.m.state == tm.READY


def test_the_state_machine_imports_no_io():
    from tests.test_layering import closure
    assert closure("kohort.client.txn_manager") == {}


def test_end_txn_waiting_for_batches_sets_no_timer():
    # the driver's poll must not spin while EndTxn waits for produce answers (they wake it)
    d = Driver().in_txn_with_partition()
    d.m.begin_commit()
    d.incomplete = True
    assert d.next() is None
    assert d.m.next_wakeup_ms(d.now) == 100


def test_sendable_holds_only_what_maybe_add_partition_let_through():
    """`sendable` (the partitions the compiled produce() may queue for without asking) is filled by
    maybe_add_partition and emptied by every transition and pending operation, so no record reaches
    a batch the Python produce would have refused."""
    d = Driver().ready()
    assert d.m.sendable == set()
    d.m.begin_transaction()
    d.m.maybe_add_partition(TP)                             # v1: to be added, may be queued already
    assert d.m.sendable == {TP}
    d.answer("AddPartitionsToTxn", add_parts())
    d.m.maybe_add_partition(TP)
    assert d.m.sendable == {TP}
    d.m.begin_commit()
    assert d.m.sendable == set()                            # committing: produce() asks again (and fails)
    with pytest.raises(IllegalTransactionStateError):
        d.m.maybe_add_partition(TP)
    assert d.m.sendable == set()
    d.answer("EndTxn", end())
    d.m.begin_transaction()
    d.m.maybe_add_partition(TP)
    assert d.m.sendable == {TP}
    d.m.handle_failed_batch(OutOfOrderSequenceNumberError("x"))   # abortable
    assert d.m.sendable == set() and d.m.state == tm.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError):
        d.m.maybe_add_partition(TP)
    assert d.m.sendable == set()
