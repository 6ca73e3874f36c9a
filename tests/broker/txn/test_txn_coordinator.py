"""Pure tests of the transaction coordinator state machine (kohort.broker.txn.coordinator): every
transition and the error answers of InitProducerId / AddPartitionsToTxn / EndTxn, with a fake clock."""
import itertools

import pytest

from kohort.broker.txn.coordinator import (
    EPOCH_EXHAUSTED, IllegalTransition, TxnCoordinator, TxnMetadata, TxnState as S,
)
from kohort.broker.txn.log_format import decode_key, decode_value, encode_key, encode_value, txn_partition
from kohort.errors import ErrorCode as E

TP = ("t", 0)


@pytest.fixture
def c():
    pids = itertools.count(1000)
    return TxnCoordinator(lambda: next(pids), max_timeout_ms=60_000)


def init(c, tid="tx", now=0, **kw):
    return c.init_producer_id(tid, 10_000, now, **kw)


def ongoing(c, tid="tx", now=0):
    r = init(c, tid, now)
    assert c.add_partitions(tid, r.producer_id, r.producer_epoch, [TP], now, version=3).error == E.NONE
    return r.producer_id, r.producer_epoch


def test_init_new_id_then_bump():
    c = TxnCoordinator(lambda: 7)
    r = init(c)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, 7, 0)
    assert [(t, v.transaction_status) for t, v in r.records] == [("tx", S.EMPTY)]
    r = init(c, now=5)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, 7, 1)


def test_init_argument_errors(c):
    assert init(c, tid="").error == E.INVALID_REQUEST
    assert c.init_producer_id("tx", 0, 0).error == E.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id("tx", 60_001, 0).error == E.INVALID_TRANSACTION_TIMEOUT


def test_init_kip360_bump_retry_and_fenced(c):
    r = init(c)
    pid = r.producer_id
    r2 = init(c, expected_pid=pid, expected_epoch=0, version=4)
    assert (r2.error, r2.producer_epoch) == (E.NONE, 1)
    r3 = init(c, expected_pid=pid, expected_epoch=0, version=4)      # retry: unchanged
    assert (r3.error, r3.producer_epoch, r3.records) == (E.NONE, 1, [])
    assert init(c, expected_pid=pid, expected_epoch=5, version=4).error == E.PRODUCER_FENCED
    assert init(c, expected_pid=pid, expected_epoch=5, version=3).error == E.INVALID_PRODUCER_EPOCH
    assert init(c, expected_pid=pid + 77, expected_epoch=1, version=4).error == E.PRODUCER_FENCED


def test_epoch_exhaustion_rotates_producer_id(c):
    r = init(c)
    c.txns["tx"].producer_epoch = EPOCH_EXHAUSTED
    r2 = init(c)
    assert r2.producer_id != r.producer_id and r2.producer_epoch == 0
    assert c.txns["tx"].previous_producer_id == r.producer_id


def test_add_partitions_transitions_and_errors(c):
    r = init(c)
    pid, ep = r.producer_id, r.producer_epoch
    assert c.add_partitions("", pid, ep, [TP], 1).error == E.INVALID_REQUEST
    assert c.add_partitions("nope", pid, ep, [TP], 1).error == E.INVALID_PRODUCER_ID_MAPPING
    assert c.add_partitions("tx", pid + 1, ep, [TP], 1).error == E.INVALID_PRODUCER_ID_MAPPING
    assert c.add_partitions("tx", pid, ep + 1, [TP], 1, version=2).error == E.PRODUCER_FENCED
    assert c.add_partitions("tx", pid, ep + 1, [TP], 1, version=1).error == E.INVALID_PRODUCER_EPOCH
    a = c.add_partitions("tx", pid, ep, [TP], 1)
    assert a.error == E.NONE and c.txns["tx"].state == S.ONGOING and c.txns["tx"].start_ms == 1
    assert a.records[0][1].transaction_partitions[0].partition_ids == [0]
    again = c.add_partitions("tx", pid, ep, [TP], 2)
    assert again.error == E.NONE and again.records == []            # already in: no write
    more = c.add_partitions("tx", pid, ep, [("t", 1)], 3)
    assert len(more.records) == 1 and c.txns["tx"].partitions == {TP, ("t", 1)}
    assert c.txns["tx"].start_ms == 1


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_commit_abort_path(c, commit):
    pid, ep = ongoing(c)
    r = c.end_txn("tx", pid, ep, commit, 10, version=1)
    prep = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
    assert r.error == E.NONE and c.txns["tx"].state == prep
    assert [(m.producer_id, m.producer_epoch, m.commit, m.partitions) for m in r.markers] == [(pid, ep, commit, [TP])]
    # while Prepare*: same result -> CT, other -> ITS; Add* -> CT; Init -> CT
    assert c.end_txn("tx", pid, ep, commit, 11).error == E.CONCURRENT_TRANSACTIONS
    assert c.end_txn("tx", pid, ep, not commit, 11).error == E.INVALID_TXN_STATE
    assert c.add_partitions("tx", pid, ep, [TP], 11).error == E.CONCURRENT_TRANSACTIONS
    assert init(c, now=11).error == E.CONCURRENT_TRANSACTIONS
    done = c.markers_written("tx", 12)
    complete = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
    assert c.txns["tx"].state == complete and done.records[0][1].transaction_status == complete
    assert done.records[0][1].transaction_partitions == []
    assert c.end_txn("tx", pid, ep, commit, 13).error == E.NONE          # retry
    assert c.end_txn("tx", pid, ep, not commit, 13).error == E.INVALID_TXN_STATE
    # Complete* -> Ongoing again, start time reset
    assert c.add_partitions("tx", pid, ep, [("t", 2)], 20).error == E.NONE
    assert c.txns["tx"].partitions == {("t", 2)} and c.txns["tx"].start_ms == 20


def test_end_txn_errors(c):
    r = init(c)
    pid, ep = r.producer_id, r.producer_epoch
    assert c.end_txn("tx", pid, ep, True, 1).error == E.INVALID_TXN_STATE      # Empty
    assert c.end_txn("tx", pid, ep, False, 1).error == E.INVALID_TXN_STATE
    assert c.end_txn("zz", pid, ep, True, 1).error == E.INVALID_PRODUCER_ID_MAPPING
    assert c.end_txn("tx", pid + 1, ep, True, 1).error == E.INVALID_PRODUCER_ID_MAPPING
    assert c.end_txn("tx", pid, ep + 1, True, 1, version=2).error == E.PRODUCER_FENCED
    assert c.end_txn("tx", pid, ep + 1, True, 1, version=1).error == E.INVALID_PRODUCER_EPOCH


def test_zombie_fencing(c):
    pid, ep = ongoing(c)
    r = init(c, now=5)                        # a second producer with the same transactional.id
    assert r.error == E.CONCURRENT_TRANSACTIONS
    m = c.txns["tx"]
    assert m.state == S.PREPARE_ABORT and m.producer_epoch == ep + 1
    assert [v.transaction_status for _, v in r.records] == [S.PREPARE_ABORT]   # fence state not persisted
    assert [(w.commit, w.producer_epoch, w.partitions) for w in r.markers] == [(False, ep + 1, [TP])]
    c.markers_written("tx", 6)
    r = init(c, now=7)                        # the new producer's retry
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, ep + 2)
    # the zombie is fenced everywhere
    assert c.add_partitions("tx", pid, ep, [TP], 8, version=3).error == E.PRODUCER_FENCED
    assert c.end_txn("tx", pid, ep, True, 8, version=3).error == E.PRODUCER_FENCED
    assert c.end_txn("tx", pid, ep, True, 8, version=0).error == E.INVALID_PRODUCER_EPOCH
    assert c.verify(pid, ep, *TP) == E.INVALID_PRODUCER_EPOCH


def test_timeout_aborts(c):
    pid, ep = ongoing(c, now=100)
    assert c.expire_timed_out(100 + 10_000).markers == []          # not yet past
    r = c.expire_timed_out(100 + 10_001)
    assert [(w.commit, w.producer_epoch) for w in r.markers] == [(False, ep + 1)]
    assert c.txns["tx"].state == S.PREPARE_ABORT
    c.markers_written("tx", 10_200)
    assert c.txns["tx"].state == S.COMPLETE_ABORT
    assert c.end_txn("tx", pid, ep, True, 10_300, version=3).error == E.PRODUCER_FENCED
    assert init(c, now=10_400).producer_epoch == ep + 2


def test_verify():
    c = TxnCoordinator(lambda: 1)
    assert c.verify(1, 0, *TP) == E.INVALID_TXN_STATE
    pid, ep = ongoing(c)
    assert c.verify(pid, ep, *TP) == E.NONE
    assert c.verify(pid, ep, "t", 9) == E.INVALID_TXN_STATE


def test_illegal_transitions_refused():
    c = TxnCoordinator(lambda: 1)
    init(c)
    m = c.txns["tx"]
    # (Empty -> PrepareAbort is legal: transactions v2's EndTxn(abort) on an empty transaction)
    for to in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.PREPARE_EPOCH_FENCE):
        with pytest.raises(IllegalTransition):
            c._transition(m, to, 0, type(c.recover())())


def test_load_replay_and_recover(c):
    pid, ep = ongoing(c)
    r = c.end_txn("tx", pid, ep, True, 5)
    records = [rec for rec in r.records]
    c2 = TxnCoordinator(lambda: 9999)
    for tid, v in records:    # through the wire format
        c2.load(decode_key(encode_key(tid)), decode_value(encode_value(v)))
    assert c2.txns["tx"].state == S.PREPARE_COMMIT and c2.txns["tx"].partitions == {TP}
    rec = c2.recover()
    assert [(w.commit, w.partitions, w.producer_id) for w in rec.markers] == [(True, [TP], pid)]
    c2.load("tx", None)
    assert "tx" not in c2.txns


def test_log_format_v0_and_partition():
    m = TxnMetadata("x", 5, 2, 1000, S.ONGOING, partitions={TP}, start_ms=3, update_ms=4)
    for version in (0, 1):
        v = decode_value(encode_value(m.to_value(), version))
        assert TxnMetadata.from_value("x", v).partitions == {TP}
    assert decode_value(None) is None
    assert 0 <= txn_partition("some-id") < 50


def test_transactional_id_expiry(c):
    pid, ep = ongoing(c, now=0)
    assert c.expire_ids(10**9, 1000).records == []                 # Ongoing never expires
    c.end_txn("tx", pid, ep, True, 10)
    assert c.expire_ids(10**9, 1000).records == []                 # nor Prepare*
    c.markers_written("tx", 20)
    assert c.expire_ids(1020, 1000).records == []                  # not idle long enough
    r = c.expire_ids(1021, 1000)
    assert r.records == [("tx", None)] and "tx" not in c.txns
    assert c.verify(pid, ep, *TP) == E.INVALID_TXN_STATE
    r = init(c, now=2000)                                          # a fresh start: new producer id
    assert r.producer_id != pid and r.producer_epoch == 0


# -- transactions v2 (KIP-890 part 2): EndTxn v5 --------------------------------------------------
def ongoing_v2(c, tid="tx", now=0, pid=None, epoch=None):
    if pid is None:
        r = init(c, tid, now)
        pid, epoch = r.producer_id, r.producer_epoch
    r = c.add_partitions(tid, pid, epoch, [TP], now, tv2=True)      # Produce v12's implicit add
    assert r.error == E.NONE
    assert c.txns[tid].client_tv == 2
    return pid, epoch


@pytest.mark.parametrize("commit", [True, False])
def test_v2_end_txn_bumps_the_epoch(c, commit):
    pid, ep = ongoing_v2(c)
    r = c.end_txn("tx", pid, ep, commit, 5, version=5)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, ep + 1)
    assert [(w.producer_epoch, w.commit, w.partitions) for w in r.markers] == [(ep + 1, commit, [TP])]
    assert c.txns["tx"].state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    assert r.records[-1][1].client_transaction_version == 2
    # while the markers are written: the same result is CONCURRENT_TRANSACTIONS, the other ITS
    assert c.end_txn("tx", pid, ep, commit, 6, version=5).error == E.CONCURRENT_TRANSACTIONS
    assert c.end_txn("tx", pid, ep, not commit, 6, version=5).error == E.INVALID_TXN_STATE
    done = c.markers_written("tx", 7)
    assert (done.producer_id, done.producer_epoch) == (pid, ep + 1)
    # a retry (the old epoch) of the same result: NONE with the new epoch; of the other: ITS
    r = c.end_txn("tx", pid, ep, commit, 8, version=5)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, ep + 1)
    assert c.end_txn("tx", pid, ep, not commit, 8, version=5).error == E.INVALID_TXN_STATE
    # at the new epoch: commit with nothing open is ITS, abort bumps again (an empty transaction)
    assert c.end_txn("tx", pid, ep + 1, True, 9, version=5).error == E.INVALID_TXN_STATE
    r = c.end_txn("tx", pid, ep + 1, False, 9, version=5)
    assert (r.error, r.producer_epoch, r.markers[0].partitions) == (E.NONE, ep + 2, [])
    c.markers_written("tx", 10)
    # an older epoch still is fenced; an unknown producer id is a mapping error
    assert c.end_txn("tx", pid, ep, False, 11, version=5).error == E.PRODUCER_FENCED
    assert c.end_txn("tx", pid + 1, ep + 2, False, 11, version=5).error == E.INVALID_PRODUCER_ID_MAPPING
    # the next transaction at the bumped epoch
    ongoing_v2(c, pid=pid, epoch=ep + 2)
    assert c.add_partitions("tx", pid, ep + 1, [TP], 12, tv2=True).error == E.PRODUCER_FENCED


def test_v2_empty_state_table(c):
    r = init(c)
    pid, ep = r.producer_id, r.producer_epoch
    assert c.end_txn("tx", pid, ep, True, 1, version=5).error == E.INVALID_TXN_STATE
    assert c.end_txn("tx", pid, ep - 1, False, 1, version=5).error == E.PRODUCER_FENCED
    r = c.end_txn("tx", pid, ep, False, 1, version=5)               # abort current in Empty: bump
    assert (r.error, r.producer_epoch) == (E.NONE, ep + 1)
    c.markers_written("tx", 2)
    assert c.txns["tx"].state == S.COMPLETE_ABORT


def test_v2_ongoing_retry_is_fenced_and_timeout_abort_fences(c):
    pid, ep = ongoing_v2(c)
    r = c.end_txn("tx", pid, ep, True, 1, version=5)
    c.markers_written("tx", 2)
    pid, ep = ongoing_v2(c, pid=pid, epoch=ep + 1)
    assert c.end_txn("tx", pid, ep - 1, True, 3, version=5).error == E.PRODUCER_FENCED
    r = c.expire_timed_out(10_000 + 100)                            # the 10 s timeout: fenced, aborted
    assert [(w.producer_epoch, w.commit) for w in r.markers] == [(ep + 1, False)]
    c.markers_written("tx", 10_200)
    assert c.end_txn("tx", pid, ep, True, 10_300, version=5).error == E.PRODUCER_FENCED


def test_v2_epoch_exhaustion_moves_to_the_next_producer_id():
    pids = itertools.count(1000)
    c = TxnCoordinator(lambda: next(pids), max_timeout_ms=60_000)
    r = init(c)
    pid = r.producer_id
    m = c.txns["tx"]
    m.producer_epoch = EPOCH_EXHAUSTED - 1
    ongoing_v2(c, pid=pid, epoch=EPOCH_EXHAUSTED - 1)
    r = c.end_txn("tx", pid, EPOCH_EXHAUSTED - 1, True, 1, version=5)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, 1001, 0)
    assert r.markers[0].producer_id == pid and r.markers[0].producer_epoch == EPOCH_EXHAUSTED
    assert r.records[-1][1].next_producer_id == 1001
    done = c.markers_written("tx", 2)
    assert (done.producer_id, done.producer_epoch, m.previous_producer_id) == (1001, 0, pid)
    # a retry from the old producer id: NONE with the new one
    r = c.end_txn("tx", pid, EPOCH_EXHAUSTED - 1, True, 3, version=5)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, 1001, 0)
    ongoing_v2(c, pid=1001, epoch=0)


def test_v2_state_survives_replay(c):
    pid, ep = ongoing_v2(c)
    r = c.end_txn("tx", pid, ep, True, 5, version=5)
    c2 = TxnCoordinator(lambda: 1)
    for tid, v in r.records:
        c2.load(tid, decode_value(encode_value(v)))
    m = c2.txns["tx"]
    assert (m.state, m.producer_epoch, m.client_tv) == (S.PREPARE_COMMIT, ep + 1, 2)
    assert [(w.producer_epoch, w.commit) for w in c2.recover().markers] == [(ep + 1, True)]
    c2.markers_written("tx", 6)
    r = c2.end_txn("tx", pid, ep, True, 7, version=5)        # the client's retry after a restart
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, ep + 1)
