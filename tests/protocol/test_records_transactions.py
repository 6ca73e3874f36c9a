"""read_committed filtering (KIP-98) lives once, in protocol/records.py; the consumer's fetcher and the
Spark source's ColumnBuilder both use it, so they drop exactly the same records."""
from types import SimpleNamespace

import pytest

from kohort.client.consumer.fetcher import decode_partition
from kohort.protocol import records as R
from kohort.spark.arrow import ColumnBuilder

PID = 7


def _txn(base, n, pid=PID):
    return R.build_batch([(None, b"v%d" % (base + i), None, 1000) for i in range(n)], base_offset=base,
                         producer_id=pid, producer_epoch=0, base_sequence=base, transactional=True)


def _stream(coordinator_epoch):
    """pid 7: an aborted transaction (0-1), its ABORT marker (2), then a committed one (3-4) + COMMIT (5)."""
    return (_txn(0, 2)
            + R.build_control_batch(False, PID, 0, base_offset=2, coordinator_epoch=coordinator_epoch)
            + _txn(3, 2)
            + R.build_control_batch(True, PID, 0, base_offset=5, coordinator_epoch=coordinator_epoch))


@pytest.mark.parametrize("coordinator_epoch", [0, 3])
def test_consumer_and_spark_drop_the_same_aborted_records(coordinator_epoch):
    # a marker written after a transaction-coordinator move carries coordinator_epoch > 0; the Spark
    # source used to read the epoch as the marker type, kept pid 7 "aborted" and dropped offsets 3-4
    d = _stream(coordinator_epoch)
    out, nxt, _ = decode_partition("t", 0, d, 0, aborted=[SimpleNamespace(producer_id=PID, first_offset=0)],
                                   read_committed=True)
    assert [r.offset for r in out] == [3, 4] and nxt == 6
    cb = ColumnBuilder("t", 0, read_committed=True)
    assert cb.add_payload(d, 0, 6, [(PID, 0)]) == 6
    assert cb.to_record_batch().column("offset").to_pylist() == [3, 4]


def test_aborted_filter_carries_over_payloads():
    f = R.AbortedTransactions()
    f.add([(PID, 0)])
    kept = [h.base_offset for pos, h in R.iter_batches(_txn(0, 2)) if f.keep(_txn(0, 2), pos, h)]
    assert kept == []
    d2 = R.build_control_batch(False, PID, 0, base_offset=2, coordinator_epoch=5) + _txn(3, 2)
    assert [h.base_offset for pos, h in R.iter_batches(d2) if f.keep(d2, pos, h)] == [3]


def test_scan_batches():
    d = _stream(0)
    assert R.scan_batches(d) == (6, None, False)
    assert R.scan_batches(d[:-5]) == (5, None, False)
    assert R.scan_batches(b"") == (-1, None, False)
