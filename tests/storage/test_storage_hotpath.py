"""The storage hot paths stay correct after their speed-ups: `Log.read` reading once (checked
against a reference walk of the stored batches, also across compaction gaps), O_APPEND writes on the
OS filesystem, index entries written in groups, and the group commit syncing several files at once
(datasync)."""
from __future__ import annotations

import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohort.protocol.framing import encode_response, encode_response_buffer
from kohort.protocol.messages.fetch import FetchResponse
from kohort.protocol.records import iter_batches
from kohort.storage import KafkaStorageError, MemoryFileSystem, MemoryStorage, OsFileSystem
from kohort.storage.cleaner import compact
from kohort.storage.fs import MemoryFileHandle
from kohort.storage.index import PENDING_ENTRIES
from kohort.storage.segment import _SCAN_CHUNK as SCAN_CHUNK
from tests.helpers.storage_helpers import batch, engine, read_all  # noqa: F401


def reference_read(log, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
    """Log.read's contract, computed the slow way: a header walk of the segment from its start,
    then a separate read of the chosen range."""
    limit = log.log_end_offset if max_offset is None else min(max_offset, log.log_end_offset)
    if offset >= limit:
        return b""
    for seg in log.segments:
        if seg.next_offset <= offset:
            continue
        start = total = None
        for pos, h in seg.scan(0):
            if start is None:
                if h.last_offset < offset:
                    continue
                if h.base_offset >= limit:
                    return b""
                start, total = pos, h.total_size
                continue
            if h.base_offset >= limit or total + h.total_size > max_bytes:
                break
            total += h.total_size
        if start is not None:
            return seg.read(start, total)
    return b""


def _fill(log, sizes: list[int], ts0: int = 0) -> None:
    for i, n in enumerate(sizes):
        log.append(batch(*[os.urandom(v) for v in [n] * (1 + i % 3)], ts=ts0 + i),
                   leader_epoch=0, now_ms=ts0 + i)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(0, 700), min_size=1, max_size=40),
       interval=st.integers(1, 3000), segment_bytes=st.integers(300, 20000),
       reads=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 6000), st.none() | st.floats(0, 1)),
                      min_size=1, max_size=12))
def test_read_matches_the_reference_walk(sizes, interval, segment_bytes, reads):
    s = MemoryStorage(now_ms=0)
    s.create_topic("t", 1, {"index.interval.bytes": str(interval), "segment.bytes": str(segment_bytes)})
    log = s.log("t", 0)
    _fill(log, sizes)
    leo = log.log_end_offset
    for where, max_bytes, cap in reads:
        offset = int(where * leo)
        max_offset = None if cap is None else offset + int(cap * (leo - offset))
        assert log.read(offset, max_bytes, max_offset) == reference_read(log, offset, max_bytes, max_offset)


def test_read_across_compaction_gaps_matches_the_reference(engine):  # noqa: F811
    s = engine.open()
    s.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "700",
                            "index.interval.bytes": "90", "min.cleanable.dirty.ratio": "0.01"})
    log = s.log("c", 0)
    for i in range(120):
        key = b"u%d" % i if i % 5 == 0 else b"k%d" % (i % 7)       # some keys never repeat
        log.append(batch((key, b"v" * (i % 60)), ts=i), leader_epoch=0, now_ms=i)
    log.roll(now_ms=200)
    assert compact(log, now_ms=200, force=True) > 0
    served = {h.base_offset for seg in log.segments for _, h in seg.scan(0)}
    assert len(served) < 120                                   # there are gaps now
    for offset in range(log.log_start_offset, log.log_end_offset + 1):
        for max_bytes in (1, 150, 400, 5000):
            assert log.read(offset, max_bytes) == reference_read(log, offset, max_bytes), (offset, max_bytes)


class _CountingFS(MemoryFileSystem):
    def __init__(self):
        super().__init__()
        self.preads: list[tuple[int, int]] = []

    def open(self, path, create=True):
        h = super().open(path, create)
        h.__class__ = _CountingHandle
        return h


class _CountingHandle(MemoryFileHandle):
    def pread(self, pos, n):
        self.fs.preads.append((pos, n))
        return super().pread(pos, n)


def test_read_reads_the_answer_once_with_small_header_reads_around_it():
    fs = _CountingFS()
    s = MemoryStorage(fs=fs, now_ms=0)
    s.create_topic("t", 1, {"index.interval.bytes": "3000"})
    log = s.log("t", 0)
    _fill(log, [1000] * 300)
    seg = log.active_segment
    for offset, max_bytes in ((0, 1 << 20), (37, 100_000), (55, 1), (80, 300_000), (500, 200_000)):
        del fs.preads[:]
        data = log.read(offset, max_bytes)
        reads = list(fs.preads)
        assert data == reference_read(log, offset, max_bytes)
        start = seg.find_position(offset)[0]
        big = [r for r in reads if r[1] > SCAN_CHUNK]
        assert big == ([(start, len(data))] if len(data) > SCAN_CHUNK else []), (offset, max_bytes)
        assert (start, len(data)) in reads
        assert len(reads) <= 3                         # the answer and two header walks at most


def test_os_appends_land_at_the_end_for_every_handle(tmp_path):
    fs = OsFileSystem()
    path = str(tmp_path / "f")
    a = fs.open(path)
    b = fs.open(path)
    try:
        a.append(b"ab")
        b.append(b"cd")                 # another handle: after what the first wrote
        a.append(memoryview(b"ef"))
        assert a.size() == 6 and a.pread(0, 6) == b"abcdef"
        a.truncate(1)
        b.append(b"X")                  # after the cut, not at b's old position
        c = b.dup()
        c.append(bytearray(b"Y"))
        c.datasync()
        c.close()
        assert fs.read_file(path) == b"aXY"
    finally:
        a.close()
        b.close()


def test_large_appends_reserve_blocks_ahead_without_changing_the_file(tmp_path):
    """Appends of PREALLOC_MIN or more reserve blocks past the end (FALLOC_FL_KEEP_SIZE): the size
    and the bytes are those written; truncate and close give the reservation back."""
    from kohort.storage import fs as fsmod
    fs = OsFileSystem()
    path = str(tmp_path / "seg.log")
    part = os.urandom(fsmod.PREALLOC_MIN)
    h = fs.open(path)
    h.append(part)
    h.append(b"small")
    h.append(part)
    assert h.size() == 2 * len(part) + 5 and fs.read_file(path) == part + b"small" + part
    if fsmod._FALLOCATE is not None and h.reserved:     # the filesystem supports fallocate
        assert os.stat(path).st_blocks * 512 >= h.reserved > h.size()
    h.truncate(len(part))
    assert h.reserved == 0 and os.stat(path).st_blocks * 512 < len(part) + 65536
    h.append(part)
    h.close()
    st = os.stat(path)
    assert st.st_size == 2 * len(part) and st.st_blocks * 512 < st.st_size + 65536
    assert fs.read_file(path) == part + part


def test_index_entries_reach_the_file_on_flush_and_close(engine):  # noqa: F811
    s = engine.open()
    s.create_topic("t", 1, {"index.interval.bytes": "1"})       # an entry for every batch
    log = s.log("t", 0)
    n = PENDING_ENTRIES + 10
    _fill(log, [20] * n)
    seg = log.active_segment
    assert len(seg.offset_index) == n - 1                       # the first batch has no entry
    on_file = len(engine.fs.read_file(seg.offset_index.path)) // 8
    assert PENDING_ENTRIES <= on_file < n - 1                   # a group written, the rest held
    log.flush()
    assert len(engine.fs.read_file(seg.offset_index.path)) // 8 == n - 1
    expect = read_all(log)
    s.close()
    log2 = engine.open().log("t", 0)                            # clean start trusts the files
    assert len(log2.active_segment.offset_index) == n - 1
    assert read_all(log2) == expect


def test_a_rolled_segment_has_all_its_index_entries_on_file(engine):  # noqa: F811
    s = engine.open()
    s.create_topic("t", 1, {"index.interval.bytes": "1"})
    log = s.log("t", 0)
    _fill(log, [20] * 10)
    old = log.active_segment
    log.roll(now_ms=100)
    assert len(engine.fs.read_file(old.offset_index.path)) // 8 == len(old.offset_index) == 9
    assert len(engine.fs.read_file(old.time_index.path)) // 12 == len(old.time_index)


def test_killed_process_with_unwritten_index_entries_still_reads_everything():
    fs = MemoryFileSystem()
    s = MemoryStorage(fs=fs, now_ms=0)
    s.create_topic("t", 1, {"index.interval.bytes": "1", "segment.bytes": "3000"})
    log = s.log("t", 0)
    _fill(log, [30] * 150)
    s.checkpoint()                   # recovery point at the end: old segments will be trusted
    _fill(log, [30] * 5, ts0=1000)
    expect = read_all(log)
    assert len(log.segments) > 2
    del s, log                       # a process kill: page cache kept, held index entries lost
    log2 = MemoryStorage(fs=fs, now_ms=0).log("t", 0)
    assert read_all(log2) == expect
    for offset in range(0, log2.log_end_offset, 7):
        assert log2.read(offset, 500) == reference_read(log2, offset, 500)


# ---------------------------------------------------------------------------------------------
# group commit over several files


class _BarrierFS(MemoryFileSystem):
    """Each fsync waits until `parties` fsyncs run at the same time (or fails)."""

    def __init__(self, parties: int):
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=5)
        self.armed = False
        self.fail_path: str | None = None
        self.synced: list[str] = []
        self.paths: dict[int, str] = {}      # id of an open file's _MemFile -> its path

    def open(self, path, create=True):
        h = super().open(path, create)
        h.__class__ = _BarrierHandle
        self.paths[id(h.file)] = self._norm(path)
        return h


class _BarrierHandle(MemoryFileHandle):
    def fsync(self):
        fs = self.fs
        if fs.armed:
            fs.barrier.wait()                # raises BrokenBarrierError if syncs run one by one
            path = fs.paths[id(self.file)]
            with fs.lock:
                fs.synced.append(path)
            if path == fs.fail_path:
                raise OSError(5, "Input/output error")
        super().fsync()

    def dup(self):
        h = super().dup()
        h.__class__ = _BarrierHandle
        return h


def test_group_commit_syncs_dirty_files_at_the_same_time():
    fs = _BarrierFS(parties=3)
    s = MemoryStorage(fs=fs, flush_policy="fsync-before-ack", now_ms=0)
    s.create_topic("t", 3)
    for p in range(3):
        s.log("t", p).append(batch(b"x%d" % p), leader_epoch=0, now_ms=0)
    fs.armed = True
    rounds = s.fsyncs
    s.sync_dirty()
    assert s.fsyncs == rounds + 1
    assert sorted(fs.synced) == sorted(fs._norm(s.log("t", p).active_segment.log_path) for p in range(3))
    fs.armed = False
    fs.crash()
    after = MemoryStorage(fs=fs, flush_policy="fsync-before-ack", now_ms=0)
    assert [after.log("t", p).log_end_offset for p in range(3)] == [1, 1, 1]


def test_one_failed_file_fails_the_round_and_stays_failed():
    fs = _BarrierFS(parties=2)
    s = MemoryStorage(fs=fs, flush_policy="fsync-before-ack", now_ms=0)
    s.create_topic("t", 2)
    for p in range(2):
        s.log("t", p).append(batch(b"x"), leader_epoch=0, now_ms=0)
    fs.fail_path = fs._norm(s.log("t", 1).active_segment.log_path)
    fs.armed = True
    with pytest.raises(KafkaStorageError, match="fsync failed"):
        s.sync_dirty()
    assert len(fs.synced) == 2                         # the other file was still synced
    assert all(s.log("t", p)._dirty for p in range(2))  # both dirty again
    with pytest.raises(KafkaStorageError, match="earlier fsync failed"):
        s.sync_dirty()


# ---------------------------------------------------------------------------------------------
# framing


def test_encode_response_buffer_is_the_same_frame():
    T = FetchResponse.FetchableTopicResponse
    records = batch(b"a" * 3000, b"b")
    resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=7, responses=[
        T(topic="t", partitions=[T.PartitionData(
            partition_index=0, error_code=0, high_watermark=2, last_stable_offset=2,
            log_start_offset=0, aborted_transactions=[], preferred_read_replica=-1,
            records=memoryview(records))])])
    for v in (4, 12, 16):
        buf = encode_response_buffer(resp, v, 42)
        assert isinstance(buf, bytearray)
        assert bytes(buf) == encode_response(resp, v, 42)
        assert int.from_bytes(buf[:4], "big") == len(buf) - 4


def test_a_round_broken_by_any_error_acknowledges_nothing():
    fs = _BarrierFS(parties=1)
    s = MemoryStorage(fs=fs, flush_policy="fsync-before-ack", now_ms=0)
    s.create_topic("t", 2)
    for p in range(2):
        s.log("t", p).append(batch(b"x"), leader_epoch=0, now_ms=0)
    rounds = s.fsyncs
    fs.barrier = _Exploding()
    fs.armed = True
    with pytest.raises(KafkaStorageError, match="fsync failed"):
        s.sync_dirty()
    assert s.fsyncs == rounds
    assert all(s.log("t", p)._dirty for p in range(2))
    assert all(s.log("t", p).recovery_point == 0 for p in range(2))


class _Exploding:
    def wait(self):
        raise RuntimeError("not an OSError")


@pytest.mark.parametrize("lat", [False, True])
def test_validated_batch_append_in_place_and_copied(lat):
    """Log.append(header=...) (the Produce path): a writable memoryview (a slice of the broker's
    frame buffer) is patched in place and written as is; bytes are copied first. Both store the
    same bytes as the general append, with offsets, leader epoch (and LogAppendTime) assigned."""
    from kohort.protocol.records import read_batch_header, validate_batch
    configs = {"message.timestamp.type": "LogAppendTime"} if lat else {}
    stores = []
    for how in ("general", "bytes", "view"):
        s = MemoryStorage()
        s.create_topic("t", 1, configs)
        log = s.log("t", 0)
        log.append(batch(b"first", ts=1), leader_epoch=3, now_ms=50)
        b = batch(b"a", b"bb", (b"k", b"ccc"), ts=7)
        if how == "general":
            log.append(b, leader_epoch=4, now_ms=99)
        elif how == "bytes":
            log.append(b, leader_epoch=4, now_ms=99, header=validate_batch(b))
        else:
            frame = bytearray(b"\x00" * 5 + b + b"\x01" * 3)
            view = memoryview(frame)[5:5 + len(b)]
            res = log.append(view, leader_epoch=4, now_ms=99, header=validate_batch(view))
            h = read_batch_header(frame, 5)        # patched where it lies: nothing copied
            assert (h.base_offset, h.partition_leader_epoch) == (1, 4) and res.base_offset == 1
            assert frame[:5] == b"\x00" * 5 and frame[-3:] == b"\x01" * 3
            validate_batch(frame, 5)               # the CRC still holds (LogAppendTime: recomputed)
        stores.append((log.read(0, 1 << 20), read_all(log), log.log_end_offset, log.segments[-1].max_timestamp))
    assert stores[0] == stores[1] == stores[2]
    assert stores[0][2] == 4
    assert stores[0][3] == (99 if lat else 9)
