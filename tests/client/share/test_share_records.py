"""A share consumer's records from ShareFetch bytes (`consumer._decode_acquired`) and the
acknowledgement batches (`acknowledgements.batches_of`, `Acknowledgements.handed_out`), pure:
only the acquired offsets are decoded and handed out, each with its delivery count and once;
contiguous acknowledgements of one type are one batch."""
from __future__ import annotations

import pytest

from kohort.client.share.acknowledgements import (
    ACCEPT, EXPLICIT, GAP, IMPLICIT, REJECT, RELEASE, AckBatch, Acknowledgements, IllegalStateError, batches_of,
)
from kohort.client.share.consumer import _decode_acquired
from kohort.protocol.records import CorruptRecordError, build_batch
from kohort.structs import ConsumerRecord


def _batch(first: int, n: int) -> bytes:
    return build_batch([(b"k%d" % o, b"v%d" % o, [], 1000 + o) for o in range(first, first + n)], base_offset=first)


def test_only_the_acquired_offsets_are_decoded_with_their_delivery_counts():
    data = _batch(0, 100)                       # a leader sends the whole batch
    recs = _decode_acquired("t", 2, data, [(10, 19, 1), (30, 34, 3)], True, None, None)
    assert [r.offset for r in recs] == list(range(10, 20)) + list(range(30, 35))
    assert [r.delivery_count for r in recs] == [1] * 10 + [3] * 5
    r = recs[0]
    assert isinstance(r, ConsumerRecord) and len(r) == 10
    assert (r.topic, r.partition, r.key, r.value, r.timestamp, r.headers) == ("t", 2, b"k10", b"v10", 1010, [])


def test_records_span_batches_and_deserializers_apply():
    data = _batch(0, 5) + _batch(5, 5) + _batch(10, 5)
    recs = _decode_acquired("t", 0, data, [(3, 11, 2)], True, lambda b: b.decode(), lambda b: b.upper())
    assert [(r.offset, r.key, r.value, r.delivery_count) for r in recs] == [
        (o, f"k{o}", b"V%d" % o, 2) for o in range(3, 12)]


def test_a_repeated_batch_gives_each_offset_once_and_missing_offsets_are_left_out():
    data = _batch(0, 4) + _batch(0, 4) + _batch(6, 2)    # offsets 4 and 5 have no record (compacted away)
    recs = _decode_acquired("t", 0, data, [(0, 7, 1)], True, None, None)
    assert [r.offset for r in recs] == [0, 1, 2, 3, 6, 7]


def test_a_corrupt_batch_is_an_error():
    data = bytearray(_batch(0, 10))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        _decode_acquired("t", 0, bytes(data), [(0, 9, 1)], True, None, None)


def test_batches_of_one_type_contiguous_is_one_batch_else_split():
    assert batches_of({}) == []
    assert batches_of(dict.fromkeys(range(5, 505), ACCEPT)) == [AckBatch(5, 504, (ACCEPT,))]
    assert batches_of({1: ACCEPT, 2: ACCEPT, 4: ACCEPT}) == [AckBatch(1, 2, (ACCEPT,)), AckBatch(4, 4, (ACCEPT,))]
    assert batches_of({3: RELEASE, 1: ACCEPT, 2: ACCEPT, 4: GAP}) == [
        AckBatch(1, 2, (ACCEPT,)), AckBatch(3, 3, (RELEASE,)), AckBatch(4, 4, (GAP,))]


def test_handed_out_records_are_accepted_by_the_next_implicit_poll():
    a = Acknowledgements(IMPLICIT)
    a.handed_out("p", range(10, 20))
    a.delivered("p", [(20, 21)], [])            # acquired without records: GAP
    a.before_poll()
    assert a.take("p") == [AckBatch(10, 19, (ACCEPT,)), AckBatch(20, 21, (GAP,))]
    assert not a.has_pending() and a.unacknowledged("p") == set()


def test_handed_out_records_need_acknowledging_in_explicit_mode():
    a = Acknowledgements(EXPLICIT)
    a.handed_out("p", [1, 2, 3])
    with pytest.raises(IllegalStateError):
        a.before_poll()
    for o, t in ((1, ACCEPT), (2, REJECT), (3, ACCEPT)):
        a.acknowledge("p", o, t)
    with pytest.raises(IllegalStateError):
        a.acknowledge("p", 2, ACCEPT)           # already acknowledged
    a.before_poll()
    assert a.take("p") == [AckBatch(1, 1, (ACCEPT,)), AckBatch(2, 2, (REJECT,)), AckBatch(3, 3, (ACCEPT,))]
