"""Group commit: sync_dirty() shares fsyncs between concurrent callers, runs from executor threads
under asyncio, and refuses to continue after a failed fsync."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from kohort.storage import InvalidConfigError, KafkaStorageError, MemoryFileSystem, MemoryStorage
from kohort.storage.fs import MemoryFileHandle
from tests.helpers.storage_helpers import batch, read_all


class SlowFsyncFS(MemoryFileSystem):
    """fsync takes `delay` seconds and is counted; optionally fails."""

    def __init__(self, delay: float = 0.05):
        super().__init__()
        self.delay = delay
        self.fail = False
        self.calls = 0

    def open(self, path, create=True):
        h = super().open(path, create)
        h.__class__ = _SlowHandle
        return h


class _SlowHandle(MemoryFileHandle):
    def fsync(self):
        fs = self.fs
        fs.calls += 1
        time.sleep(fs.delay)
        if fs.fail:
            raise OSError(5, "Input/output error")
        super().fsync()

    def dup(self):
        h = super().dup()
        h.__class__ = _SlowHandle
        return h


def test_concurrent_callers_share_fsyncs():
    fs = SlowFsyncFS(delay=0.05)
    s = MemoryStorage(fs=fs, now_ms=0)
    s.create_topic("t", 1)
    log = s.log("t", 0)
    append_lock = threading.Lock()        # stands in for the broker's single event-loop thread
    n = 16
    start = threading.Barrier(n)
    errors = []

    def producer(i):
        try:
            start.wait()
            with append_lock:
                log.append(batch(b"m%d" % i), leader_epoch=0, now_ms=0)
            s.sync_dirty()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    rounds_before = s.fsyncs
    threads = [threading.Thread(target=producer, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    rounds = s.fsyncs - rounds_before
    assert 1 <= rounds <= 4 < n            # 16 acks, a handful of fsync rounds
    fs.crash()                             # every acknowledged append survives a machine crash
    log2 = MemoryStorage(fs=fs, now_ms=0).log("t", 0)
    assert sorted(v for _, _, v in read_all(log2)) == sorted(b"m%d" % i for i in range(n))


def test_sync_with_nothing_dirty_does_not_fsync():
    fs = SlowFsyncFS(delay=0)
    s = MemoryStorage(fs=fs, now_ms=0)
    s.create_topic("t", 1)
    s.log("t", 0).append(batch(b"a"), leader_epoch=0, now_ms=0)
    s.sync_dirty()
    calls = fs.calls
    s.sync_dirty()
    s.sync_dirty()
    assert fs.calls == calls
    assert s.log("t", 0).recovery_point == 1


def test_sync_from_asyncio_executor():
    fs = SlowFsyncFS(delay=0.02)
    s = MemoryStorage(fs=fs, now_ms=0)
    s.create_topic("t", 4)

    async def produce(p, i):
        res = s.log("t", p).append(batch(b"%d-%d" % (p, i)), leader_epoch=0, now_ms=0)
        await asyncio.get_running_loop().run_in_executor(None, s.sync_dirty)
        return res.base_offset

    async def main():
        return await asyncio.gather(*(produce(p, i) for p in range(4) for i in range(5)))

    offsets = asyncio.run(main())
    assert sorted(offsets) == sorted(list(range(5)) * 4)
    assert s.fsyncs < 20
    fs.crash()
    s2 = MemoryStorage(fs=fs, now_ms=0)
    assert [s2.log("t", p).log_end_offset for p in range(4)] == [5, 5, 5, 5]


def test_os_policy_never_fsyncs_on_sync_dirty():
    fs = SlowFsyncFS(delay=0)
    s = MemoryStorage(fs=fs, flush_policy="os", now_ms=0)
    s.create_topic("t", 1)
    s.log("t", 0).append(batch(b"a"), leader_epoch=0, now_ms=0)   # a new epoch is checkpointed
    calls = fs.calls
    s.log("t", 0).append(batch(b"b"), leader_epoch=0, now_ms=0)
    s.sync_dirty()
    assert fs.calls == calls
    s.checkpoint()
    assert fs.calls > calls


def test_unknown_flush_policy_is_rejected():
    with pytest.raises(InvalidConfigError, match="log.flush.policy"):
        MemoryStorage(flush_policy="sometimes")


def test_failed_fsync_is_sticky():
    fs = SlowFsyncFS(delay=0)
    s = MemoryStorage(fs=fs, now_ms=0)
    s.create_topic("t", 1)
    s.log("t", 0).append(batch(b"a"), leader_epoch=0, now_ms=0)
    fs.fail = True
    with pytest.raises(KafkaStorageError, match="fsync failed"):
        s.sync_dirty()
    fs.fail = False
    s.log("t", 0).append(batch(b"b"), leader_epoch=0, now_ms=0)
    with pytest.raises(KafkaStorageError, match="earlier fsync failed"):
        s.sync_dirty()       # never report success after a lost fsync
