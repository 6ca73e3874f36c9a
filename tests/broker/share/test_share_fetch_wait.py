"""When a ShareFetch answers (kohort.broker.share.fetch_wait, Kafka's DelayedShareFetch and
PartitionMaxBytesStrategy), with a fake clock; and the share partition's can_acquire_records."""
from __future__ import annotations

import pytest

from kohort.broker.share.fetch_wait import (
    PartitionReadiness as R,
    ShareFetchWait,
    WaitDecision,
    min_bytes_satisfied,
    partition_max_bytes,
)
from kohort.broker.share.partition import LogBatch, SharePartition, SharePartitionConfig

ANSWER, WAIT = WaitDecision.ANSWER, WaitDecision.WAIT


def test_max_bytes_is_split_evenly_with_the_remainder_on_the_first_partition():
    assert partition_max_bytes(300, 3) == [100, 100, 100]
    assert partition_max_bytes(302, 3) == [102, 100, 100]
    assert partition_max_bytes(1, 1) == [1]
    assert partition_max_bytes(2, 5) == [1, 1, 0, 0, 0]      # fewer bytes than partitions
    assert partition_max_bytes(10, 0) == []
    with pytest.raises(ValueError):
        partition_max_bytes(0, 2)


def test_min_bytes_sums_each_partitions_bytes_capped_by_its_budget():
    parts = [R(bytes_available=500), R(bytes_available=30)]
    assert min_bytes_satisfied(parts, [100, 100], 130)       # 100 (capped) + 30
    assert not min_bytes_satisfied(parts, [100, 100], 131)
    assert min_bytes_satisfied(parts, [1000, 1000], 530)
    assert min_bytes_satisfied([R()], [100], 0)               # MinBytes 0: always met
    assert not min_bytes_satisfied([R()], [100], 1)
    with pytest.raises(ValueError):
        min_bytes_satisfied(parts, [100], 1)


def test_an_older_segment_or_a_fetch_offset_past_the_end_satisfies_at_once():
    assert min_bytes_satisfied([R(), R(older_segment=True)], [10, 10], 1 << 20)
    assert min_bytes_satisfied([R(past_end=True)], [10], 1 << 20)


def test_the_wait_answers_once_min_bytes_is_met_and_not_before():
    w = ShareFetchWait(now_ms=1000, max_wait_ms=500, min_bytes=200, max_bytes=1 << 20)
    assert w.decide(1000, [R(bytes_available=150)]) is WAIT
    assert w.left_ms(1100) == 400
    assert w.decide(1100, [R(bytes_available=150), R(bytes_available=49)]) is WAIT
    assert w.decide(1200, [R(bytes_available=150), R(bytes_available=50)]) is ANSWER


def test_the_wait_answers_at_max_wait_with_whatever_there_is():
    w = ShareFetchWait(now_ms=0, max_wait_ms=500, min_bytes=1 << 20, max_bytes=1 << 20)
    assert w.decide(499, [R(bytes_available=10)]) is WAIT
    assert w.decide(500, [R(bytes_available=10)]) is ANSWER
    assert w.decide(500, [R()]) is ANSWER
    assert w.left_ms(700) == 0


def test_max_wait_zero_answers_at_once_even_with_nothing():
    w = ShareFetchWait(now_ms=5, max_wait_ms=0, min_bytes=1, max_bytes=100)
    assert w.decide(5, [R()]) is ANSWER


def test_partitions_at_their_in_flight_limit_are_left_out_and_the_wait_goes_on_while_none_can_acquire():
    w = ShareFetchWait(now_ms=0, max_wait_ms=1000, min_bytes=100, max_bytes=1000)
    # a full partition's bytes do not count
    assert w.decide(10, [R(acquirable=False, bytes_available=5000), R(bytes_available=99)]) is WAIT
    assert w.decide(10, [R(acquirable=False, bytes_available=5000), R(bytes_available=100)]) is ANSWER
    assert w.decide(10, [R(acquirable=False), R(acquirable=False)]) is WAIT
    assert w.decide(1000, [R(acquirable=False)]) is ANSWER
    # budgets: MaxBytes split over the partitions that can acquire only
    assert w.budgets([R(acquirable=False), R(), R()]) == [0, 500, 500]


def test_the_budget_caps_a_partitions_bytes_toward_min_bytes():
    w = ShareFetchWait(now_ms=0, max_wait_ms=1000, min_bytes=600, max_bytes=1000)
    # each partition counts for at most 500 (1000 split over 2)
    assert w.decide(1, [R(bytes_available=10_000), R(bytes_available=99)]) is WAIT
    assert w.decide(1, [R(bytes_available=10_000), R(bytes_available=100)]) is ANSWER


def test_a_read_error_answers_at_once_and_no_partition_answers_at_once():
    w = ShareFetchWait(now_ms=0, max_wait_ms=1000, min_bytes=1 << 20, max_bytes=1000)
    assert w.decide(1, [R(), R(error=True)]) is ANSWER
    assert w.decide(1, []) is ANSWER


def test_max_bytes_must_be_positive():
    with pytest.raises(ValueError):
        ShareFetchWait(now_ms=0, max_wait_ms=10, min_bytes=1, max_bytes=0)


def test_can_acquire_records_follows_the_in_flight_window():
    sp = SharePartition(0, SharePartitionConfig(max_in_flight_records=3))
    assert sp.can_acquire_records()
    res = sp.acquire("m", [LogBatch(0, 2)], now_ms=0, max_records=10)
    assert [(a.first_offset, a.last_offset) for a in res.acquired] == [(0, 2)]
    assert not sp.can_acquire_records()               # the window SPSO..SPSO+2 is all acquired
    sp.release_member("m")
    assert sp.can_acquire_records()                   # released records inside the window come back
    sp.acquire("m", [LogBatch(0, 2)], now_ms=0, max_records=10)
    from kohort.broker.share.partition import AckBatch, AcknowledgeType
    sp.acknowledge("m", [AckBatch(0, 2, (AcknowledgeType.ACCEPT,))], now_ms=1)
    assert sp.can_acquire_records()                   # SPSO moved past the accepted records
