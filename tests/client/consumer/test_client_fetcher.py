"""Fetcher pieces without sockets: record decoding (offsets, control batches, aborted transactions,
compression, leader epochs) and the incremental fetch session (KIP-227)."""
from types import SimpleNamespace

import pytest

from kohort.client.consumer.fetcher import FetchSession, decode_partition
from kohort.protocol.records import COMPRESSION_LZ4, CorruptRecordError, build_batch, build_control_batch
from kohort.structs import ConsumerRecord, TopicPartition


def recs(n, start=0):
    return [(f"k{i}".encode(), f"v{i}".encode(), [("h", b"1")] if i % 2 else [], 1000 + i) for i in range(start, start + n)]


def test_decode_filters_offsets_before_the_fetch_offset_and_keeps_epochs():
    data = build_batch(recs(5), base_offset=10, partition_leader_epoch=3) + \
        build_batch(recs(5, 5), base_offset=15, partition_leader_epoch=4, compression=COMPRESSION_LZ4)
    out, nxt, epoch = decode_partition("t", 2, data, 12)
    assert [r.offset for r in out] == list(range(12, 20))
    assert nxt == 20 and epoch == 4
    r = out[0]
    assert isinstance(r, ConsumerRecord)
    assert (r.topic, r.partition, r.key, r.value, r.timestamp, r.leader_epoch) == ("t", 2, b"k2", b"v2", 1002, 3)
    assert out[1].headers == [("h", b"1")] and r.topic_partition == TopicPartition("t", 2)


def test_decode_partial_trailing_batch_is_ignored():
    data = build_batch(recs(3), base_offset=0) + build_batch(recs(3), base_offset=3)[:-5]
    out, nxt, _ = decode_partition("t", 0, data, 0)
    assert [r.offset for r in out] == [0, 1, 2] and nxt == 3


def test_crc_checked_when_asked():
    data = bytearray(build_batch(recs(3)))
    data[-2] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_partition("t", 0, bytes(data), 0, check_crcs=True)


def test_read_committed_drops_aborted_transactions_and_control_batches():
    pid_a, pid_b = 7, 8
    data = (build_batch(recs(2), base_offset=0, producer_id=pid_a, producer_epoch=0, transactional=True)
            + build_batch(recs(2, 2), base_offset=2, producer_id=pid_b, producer_epoch=0, transactional=True)
            + build_control_batch(False, pid_a, 0, base_offset=4)
            + build_control_batch(True, pid_b, 0, base_offset=5)
            + build_batch(recs(1, 6), base_offset=6, producer_id=pid_a, producer_epoch=0, transactional=True))
    aborted = [SimpleNamespace(producer_id=pid_a, first_offset=0)]
    out, nxt, _ = decode_partition("t", 0, data, 0, aborted=aborted, read_committed=True)
    assert [r.offset for r in out] == [2, 3, 6]   # pid_a's first txn aborted; its later one is not
    assert nxt == 7
    out, _, _ = decode_partition("t", 0, data, 0)  # read_uncommitted: everything but the markers
    assert [r.offset for r in out] == [0, 1, 2, 3, 6]


def test_only_control_batches_still_advance_the_fetch_offset():
    data = build_control_batch(True, 1, 0, base_offset=9)
    out, nxt, _ = decode_partition("t", 0, data, 9)
    assert out == [] and nxt == 10


def test_deserializers():
    out, _, _ = decode_partition("t", 0, build_batch(recs(2)), 0, key_deserializer=bytes.decode,
                                 value_deserializer=lambda b: b.upper())
    assert out[1].key == "k1" and out[1].value == b"V1"


def test_fetch_session_full_then_incremental_then_reset():
    s = FetchSession()
    tp0, tp1 = ("t", 0), ("t", 1)
    send, forgotten, view = s.build({tp0: (0, 1, -1, 100), tp1: (5, 1, -1, 100)})
    assert set(send) == {tp0, tp1} and forgotten == []
    s.on_response(0, 42, view)
    assert (s.session_id, s.epoch) == (42, 1)
    # only the partition whose offset moved is sent; the dropped one is forgotten
    send, forgotten, view = s.build({tp0: (10, 1, -1, 100)})
    assert send == {tp0: (10, 1, -1, 100)} and forgotten == [tp1]
    s.on_response(0, 42, view)
    assert s.epoch == 2
    send, _, view = s.build({tp0: (10, 1, -1, 100)})
    assert send == {}
    s.on_response(71, 0, view)          # INVALID_FETCH_SESSION_EPOCH
    assert (s.session_id, s.epoch) == (0, 0)
    send, _, _ = s.build({tp0: (10, 1, -1, 100)})
    assert send == {tp0: (10, 1, -1, 100)}


def test_fetch_session_broker_without_sessions_stays_full():
    s = FetchSession()
    _, _, view = s.build({("t", 0): (0, -1, -1, 1)})
    s.on_response(0, 0, view)
    assert s.epoch == 0


def _handed_out(payload, fetch_offset, max_records, aborted=None, isolation="read_uncommitted", **conf):
    """What Fetcher.collect hands out of one buffered answer's records for one partition, `max_records`
    per call, no broker (with a Fetch in flight, collect uses neither the fetcher's network nor its
    cluster): (records, position after each call, buffered bytes left)."""
    f, st, nxt = _fetcher_with_answer(payload, fetch_offset, aborted, **{"isolation.level": isolation, **conf})
    tp = TopicPartition("t", 0)
    got, positions = [], []
    while f.has_buffered():
        out = f.collect(max_records)
        assert len(out) <= max_records
        got += out
        positions.append(st.position)
        if out:
            assert positions[-1] == out[-1].offset + 1 or positions[-1] == nxt
    assert positions[-1] == nxt
    return got, positions, f._buffered_bytes.get(tp, 0)


def test_poll_decodes_a_batch_in_parts_resuming_mid_batch():
    """collect() decodes only what it hands out: in any number of parts (mid-batch, across compressed,
    control and legacy entries, read_committed) the records are exactly what one decode of the whole
    gives, the position is the next record to hand out after every call, every byte is released."""
    from kohort.protocol.records import COMPRESSION_ZSTD
    from tests.protocol.test_records import legacy_msg

    def txn(base, n, pid, codec=0):
        return build_batch([(None, b"p%d-%d" % (pid, i), None, 5) for i in range(n)], base_offset=base,
                           producer_id=pid, producer_epoch=0, transactional=True, compression=codec)
    payload = (build_batch(recs(3)) + txn(3, 200, 7) + txn(203, 40, 8, codec=COMPRESSION_ZSTD)
               + build_control_batch(False, 7, 0, 243) + build_control_batch(True, 8, 0, 244)
               + build_batch(recs(90, 245), base_offset=245, compression=COMPRESSION_LZ4))
    aborted = [SimpleNamespace(producer_id=7, first_offset=3)]
    whole = decode_partition("t", 0, payload, 1)[0]
    for n in (1, 7, 500):
        got, positions, left = _handed_out(payload, 1, n)
        assert got == whole and left == 0
        assert len(positions) >= len(whole) // n
    committed = decode_partition("t", 0, payload, 1, aborted=aborted, read_committed=True)[0]
    assert len(committed) == 2 + 40 + 90
    got, _p, left = _handed_out(payload, 1, 9, aborted, "read_committed")
    assert got == committed and left == 0
    old = legacy_msg(0, 1, b"k", b"v", timestamp=3) + legacy_msg(1, 1, None, b"w", timestamp=4)
    legacy = old + build_batch([(None, b"x", None, 9)] * 60, base_offset=2)
    got, _p, _l = _handed_out(legacy, 1, 4)
    assert got == decode_partition("t", 0, legacy, 1)[0] and len(got) == 61
    got, _p, _l = _handed_out(payload, 1, 11, **{"value.deserializer": len})
    assert [r.value for r in got] == [len(r.value) for r in whole]


def _fetcher_with_answer(payload, fetch_offset, aborted=None, **conf):
    """A Fetcher holding `payload` as one buffered answer for partition t-0, as the I/O thread leaves
    it (headers scanned, CRCs not checked), a Fetch to its broker in flight so collect() sends none
    (there is no network here) -> (fetcher, the partition's state, the answer's next fetch offset)."""
    from kohort.client.config import load_config
    from kohort.client.consumer.fetcher import Fetcher, _Completed
    from kohort.client.consumer.offsets import SubscriptionState
    from kohort.protocol.records import DecompressionBudget, scan_batches

    config = load_config("consumer", {"bootstrap.servers": "127.0.0.1:1", **conf})
    subs = SubscriptionState()
    tp = TopicPartition("t", 0)
    subs.assign([tp])
    subs.seek(tp, fetch_offset)
    f = Fetcher(None, None, subs, config)
    view = memoryview(payload)
    nxt, ep, legacy = scan_batches(view, fetch_offset)
    f._buffered_bytes[tp] = len(view)
    f._buffer.append(_Completed(tp, view, fetch_offset, legacy, aborted, DecompressionBudget(1 << 28), nxt, ep,
                                subs.partitions[tp].seek_epoch, len(view), 1))
    f._inflight.add(1)
    return f, subs.partitions[tp], nxt


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_check_crcs_is_applied_as_poll_decodes(isolation):
    """check.crcs is applied as poll() decodes (Java's CompletedFetch), not when the answer arrives:
    a batch whose CRC fails, here a large one (checked by the compiled cursor without the GIL), ends
    the answer there. Records handed out by earlier polls stay handed out; the poll that reaches the
    batch raises a DecodeError naming the partition and the offset its answer was fetched at, the
    position stays where that poll began and the partition is fetched again from it (the error
    again, until the application seeks past); with check.crcs=false the same bytes decode whole."""
    from kohort.protocol.records import DecodeError
    big = [(None, bytes([i]) * 1024, None, 5) for i in range(100)]        # ~100 KiB
    bad = bytearray(build_batch(big, base_offset=3))
    bad[-2] ^= 0xFF
    payload = bytes(build_batch(recs(3)) + bad + build_batch(recs(2), base_offset=103))
    f, st, _ = _fetcher_with_answer(payload, 0, **{"isolation.level": isolation})
    if isolation == "read_uncommitted":      # resumable steps: the first batch before the bad one
        got = f.collect(3)
        assert [r.offset for r in got] == [0, 1, 2] and st.position == 3
    with pytest.raises(DecodeError, match=r"t-0 fetched at offset 0 could not be decoded: .*CRC-32C mismatch"):
        f.collect(1000)
    start = 3 if isolation == "read_uncommitted" else 0
    assert st.position == start and st.fetch_offset == start and not f.has_buffered()
    f, st, _ = _fetcher_with_answer(payload, 0, **{"isolation.level": isolation, "check.crcs": False})
    got = f.collect(1000)
    assert [r.offset for r in got] == list(range(105)) and st.position == 105
