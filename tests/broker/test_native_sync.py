"""The broker's group commit on the native fsync worker (kohort.storage._csync): SyncPump rounds
on a real data directory are datasynced by the C threads and answered through the eventfd, and a
datasync that fails there fails the round's waiters and every later sync."""
from __future__ import annotations

import asyncio
import errno
import os
import sys

import pytest

from kohort.broker import durability
from kohort.broker.durability import SyncPump
from kohort.storage import KafkaStorageError, Storage
from kohort.storage.fs import OsFileHandle
from tests.helpers.storage_helpers import batch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or bool(os.environ.get("KOHORT_NO_EXT")),
                                reason="the native fsync worker is Linux only; KOHORT_NO_EXT=1 turns it off")


@pytest.fixture(autouse=True)
def _built():
    assert durability.SyncWorker is not None, "kohort.storage._csync is not built (make setup builds it)"


def _storage(tmp_path) -> Storage:
    s = Storage(str(tmp_path / "data"), flush_policy="fsync-before-ack", now_ms=0)
    s.create_topic("t", 3)
    return s


def test_rounds_run_on_the_native_worker(tmp_path):
    s = _storage(tmp_path)

    async def main():
        pump = SyncPump(s)
        try:
            waits = []
            for i in range(9):                     # three partitions: rounds of several files
                s.log("t", i % 3).append(batch(b"v%d" % i), leader_epoch=0, now_ms=0)
                waits.append(pump.synced_future(i))
            assert await asyncio.gather(*waits) == list(range(9))
            for i in range(3):                     # and the next rounds, one at a time
                s.log("t", 0).append(batch(b"w%d" % i), leader_epoch=0, now_ms=0)
                await pump.wait_synced()
            return pump.native_rounds, pump.rounds
        finally:
            await pump.close()

    native, rounds = asyncio.run(main())
    assert native == rounds and 2 <= rounds <= 5
    assert [s.log("t", p).recovery_point for p in range(3)] == [6, 3, 3]
    s.close()


def test_a_failed_native_datasync_fails_the_waiters_and_later_syncs(tmp_path, monkeypatch):
    s = _storage(tmp_path)
    r, w = os.pipe()
    take = Storage.begin_sync_round

    def with_a_pipe(self):
        sync_round = take(self)
        if sync_round is not None and sync_round.handles:
            # fdatasync(2) on a pipe fails (EINVAL) in the worker thread
            sync_round.handles.append(OsFileHandle(os.dup(r), "pipe"))
        return sync_round

    async def main():
        pump = SyncPump(s)
        try:
            s.log("t", 0).append(batch(b"a"), leader_epoch=0, now_ms=0)
            failed = []
            answer = pump.synced_future("answer", lambda fut, res, e: (failed.append(e), fut.set_result(res)))
            assert await answer == "answer"
            assert pump.native_rounds == 1
            s.log("t", 0).append(batch(b"b"), leader_epoch=0, now_ms=0)
            with pytest.raises(KafkaStorageError, match="earlier fsync failed"):
                await pump.wait_synced()       # never a success after a lost fsync
            return failed
        finally:
            await pump.close()

    monkeypatch.setattr(Storage, "begin_sync_round", with_a_pipe)
    try:
        failed = asyncio.run(main())
    finally:
        os.close(r)
        os.close(w)
    assert len(failed) == 1 and isinstance(failed[0], KafkaStorageError)
    assert "fsync failed" in str(failed[0])
    assert s.log("t", 0).recovery_point == 0
    s.close()


def test_worker_rounds_back_to_back_lose_no_wakeup(tmp_path):
    """SyncWorker alone: rounds of one and of several descriptors submitted as soon as the last
    is taken (the threads are woken and the eventfd written outside the worker's mutex): every
    round ends, a dirty file's data is synced, and the first failing errno is the round's."""
    import select
    from kohort.storage._csync import SyncWorker
    fds = [os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT) for i in range(3)]
    r, w = os.pipe()
    worker = SyncWorker(4)
    try:
        for n in range(300):
            round_fds = fds[:1] if n % 2 else fds
            for fd in round_fds:
                os.write(fd, b"x")
            worker.submit(round_fds)
            assert select.select([worker.fileno()], [], [], 5)[0], f"round {n} never ended"
            assert worker.result() == 0
        worker.submit([fds[0], r])             # a pipe cannot be datasynced
        assert select.select([worker.fileno()], [], [], 5)[0]
        assert worker.result() == errno.EINVAL
    finally:
        worker.close()
        for fd in (*fds, r, w):
            os.close(fd)


def test_round_answers_call_back_inside_the_round_end(tmp_path):
    """A round's answers are all settled before the first context-free callback runs, in the same
    loop iteration as the round's end (no call_soon hop); a callback that raises is reported to the
    loop's exception handler and the others still run; a Task awaiting an answer is woken as usual."""
    s = _storage(tmp_path)

    async def main():
        loop = asyncio.get_running_loop()
        reported = []
        loop.set_exception_handler(lambda _, ctx: reported.append(ctx["exception"]))
        pump = SyncPump(s)
        try:
            seen = []
            answers = []
            for i in range(3):
                s.log("t", i).append(batch(b"v%d" % i), leader_epoch=0, now_ms=0)
                answers.append(pump.synced_future(i))

            def first(fut):
                # the round has not ended yet (its end calls back before it starts the next or idles)
                seen.append((pump._busy, [a.done() for a in answers]))
                raise ValueError("a failing callback")
            answers[0].add_done_callback(first)
            answers[2].add_done_callback(lambda fut: seen.append(("third", fut.result())))
            awaited = asyncio.ensure_future(answers[1])
            await asyncio.sleep(0)
            results = await awaited
            return seen, reported, results, pump.rounds
        finally:
            await pump.close()

    seen, reported, result, rounds = asyncio.run(main())
    assert rounds == 1 and result == 1
    assert seen == [(True, [True, True, True]), ("third", 2)]
    assert len(reported) == 1 and isinstance(reported[0], ValueError)
    s.close()
