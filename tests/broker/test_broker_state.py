"""Pure broker state: idempotent-producer sequence checks (KIP-98) and the fetch-session cache
(KIP-227), with time passed in."""
from __future__ import annotations

import pytest

from kohort.broker.fetch_sessions import FetchSessionCache, FetchSessionError
from kohort.broker.producer_state import (NUM_BATCHES_TO_RETAIN, PartitionProducers, ProducerIdAllocator,
                                          in_sequence, last_sequence)
from kohort.errors import ErrorCode as E

MAX = (1 << 31) - 1


def test_sequence_arithmetic_wraps_like_kafka():
    assert last_sequence(10, 4) == 14
    assert last_sequence(MAX - 1, 3) == 1                   # MAX-1, MAX, 0, 1
    assert in_sequence(MAX, 0) and in_sequence(4, 5)
    assert not in_sequence(4, 6) and not in_sequence(4, 4)


def test_duplicates_gaps_and_epochs():
    p = PartitionProducers()
    assert p.check(7, 0, 0, 4) == (E.NONE, None)             # unknown producer: any start accepted
    p.update(7, 0, 0, 4, first_offset=100, timestamp=1)
    assert p.check(7, 0, 5, 2) == (E.NONE, None)
    p.update(7, 0, 5, 2, first_offset=105, timestamp=2)
    v = p.check(7, 0, 0, 4)                                  # a retry of the first batch
    assert v.error == E.NONE and (v.duplicate.first_offset, v.duplicate.last_offset) == (100, 104)
    assert p.check(7, 0, 0, 3).error == E.OUT_OF_ORDER_SEQUENCE_NUMBER   # overlapping, not equal
    assert p.check(7, 0, 9, 0).error == E.OUT_OF_ORDER_SEQUENCE_NUMBER   # gap
    assert p.check(7, 1, 3, 0).error == E.OUT_OF_ORDER_SEQUENCE_NUMBER   # new epoch must start at 0
    assert p.check(7, 1, 0, 0) == (E.NONE, None)
    p.update(7, 1, 0, 0, first_offset=108, timestamp=3)
    assert p.check(7, 0, 8, 0).error == E.INVALID_PRODUCER_EPOCH
    assert p.check(-1, -1, -1, 5) == (E.NONE, None)          # not idempotent: no checks


def test_only_the_last_five_batches_are_remembered():
    p = PartitionProducers()
    seq = 0
    for i in range(NUM_BATCHES_TO_RETAIN + 2):
        p.update(1, 0, seq, 1, first_offset=2 * i, timestamp=0)
        seq += 2
    assert p.check(1, 0, 0, 1).error == E.OUT_OF_ORDER_SEQUENCE_NUMBER     # too old to recognise
    assert p.check(1, 0, 4, 1).duplicate.first_offset == 4


def test_producer_ids_are_reserved_in_persisted_blocks():
    saved = []
    a = ProducerIdAllocator(lambda: 0, saved.append, block_size=3)
    assert [a.allocate() for _ in range(4)] == [0, 1, 2, 3]
    assert saved == [3, 6]
    b = ProducerIdAllocator(lambda: saved[-1], saved.append, block_size=3)   # "restart"
    assert b.allocate() == 6


def test_fetch_session_lifecycle():
    c = FetchSessionCache(max_sessions=2, idle_ms=1000, seed=1)
    assert c.begin(0, -1, 0) == (None, True)                 # sessionless full fetch
    s, full = c.begin(0, 0, 0)
    assert full and s.session_id != 0 and s.epoch == 1
    s2, full = c.begin(s.session_id, 1, 10)
    assert s2 is s and not full and s.epoch == 2
    with pytest.raises(FetchSessionError) as ei:
        c.begin(s.session_id, 1, 20)
    assert ei.value.code == E.INVALID_FETCH_SESSION_EPOCH
    with pytest.raises(FetchSessionError) as ei:
        c.begin(424242, 1, 20)
    assert ei.value.code == E.FETCH_SESSION_ID_NOT_FOUND
    assert c.begin(s.session_id, -1, 30) == (None, True)    # close
    assert len(c) == 0


def test_fetch_sessions_are_evicted_when_idle_or_full():
    c = FetchSessionCache(max_sessions=2, idle_ms=1000, seed=2)
    a, _ = c.begin(0, 0, 0)
    b, _ = c.begin(0, 0, 100)
    c.begin(a.session_id, 1, 200)                            # a used more recently than b
    d, _ = c.begin(0, 0, 300)                                # full: least recently used (b) goes
    assert len(c) == 2
    with pytest.raises(FetchSessionError):
        c.begin(b.session_id, 1, 300)
    c.begin(0, 0, 5000)                                      # a and d idle for > 1 s: evicted
    with pytest.raises(FetchSessionError):
        c.begin(d.session_id, 1, 5000)


def test_silent_producers_expire():
    p = PartitionProducers()
    p.update(1, 0, 0, 0, first_offset=0, timestamp=0, append_ms=1000)
    p.update(2, 0, 0, 0, first_offset=1, timestamp=0, append_ms=5000)
    assert p.expire(now_ms=7000, expiration_ms=3000) == 1
    assert set(p.entries) == {2}
    assert p.check(1, 0, 9, 0) == (E.NONE, None)            # forgotten: starts afresh


def test_sequences_after_markers_and_during_verification():
    """ProducerAppendInfo.checkSequence's rules around transaction markers and KIP-890 verification."""
    p = PartitionProducers()
    # transactions v2: the marker takes the bumped epoch, whose first batch must be sequence 0
    p.update(7, 0, 0, 4, first_offset=0, timestamp=1, transactional=True)
    p.complete(7, 1, True, marker_offset=5, coordinator_epoch=0, timestamp=2)
    assert p.check(7, 1, 5, 4, transactional=True).error == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.check(7, 1, 0, 4, transactional=True) == (E.NONE, None)
    # transactions v1: a marker of the same epoch keeps the history; the sequences go on
    p.update(8, 3, 0, 4, first_offset=6, timestamp=1, transactional=True)
    p.complete(8, 3, True, marker_offset=11, coordinator_epoch=0, timestamp=2)
    assert p.check(8, 3, 0, 0, transactional=True).error == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.check(8, 3, 0, 4, transactional=True).duplicate.first_offset == 6
    assert p.check(8, 3, 5, 0, transactional=True) == (E.NONE, None)
    # a verification in progress for sequence 0 (the add is being retried): 5 may not overtake it,
    # even for a producer the partition has never seen; a lower sequence or epoch bump restarts it
    p.start_verification(9, 0, 3, now_ms=100)
    p.start_verification(9, 0, 0, now_ms=110)
    p.start_verification(9, 0, 5, now_ms=120)
    assert p.check(9, 0, 5, 4, transactional=True).error == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.check(9, 0, 0, 4, transactional=True) == (E.NONE, None)
    p.update(9, 0, 0, 4, first_offset=12, timestamp=3, transactional=True)      # appended: ends it
    assert p.verifying == {} and p.check(9, 0, 5, 4, transactional=True) == (E.NONE, None)
    p.start_verification(10, 0, 0, now_ms=100)
    p.start_verification(10, 1, 4, now_ms=130)
    assert p.verifying[10][:2] == [1, 4]
    p.complete(10, 1, False, marker_offset=20, coordinator_epoch=0, timestamp=4)    # a marker ends it too
    assert 10 not in p.verifying
    p.start_verification(11, 0, 0, now_ms=100)
    p.expire(now_ms=200, expiration_ms=100)
    assert 11 not in p.verifying
