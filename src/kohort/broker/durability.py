"""Group commit at the event-loop level: produce handlers with acks=1/all wait for `synced_future()`
after their append (other callers `await wait_synced()`); one fsync round (run off the loop's thread)
covers every append made before the round started, so concurrent produce requests
share one fsync.

A round is started by a callback (no task or coroutine per round): the first waiter schedules it
with `call_soon`, so every request of the bytes being handled joins it; the waiters arriving while it
runs form the next round, started as soon as it ends.

On Linux with the compiled worker (kohort.storage._csync) and a storage on the OS filesystem, a
round is datasynced by native threads that never take the GIL: the loop takes the round's handles
(Storage.begin_sync_round), hands their file descriptors over with one condition-variable signal,
and learns that the round is done from an eventfd it watches (loop.add_reader), where it finishes
the round (Storage.end_sync_round). Elsewhere -- no extension or KOHORT_NO_EXT=1, another
filesystem, or a round already running on another thread -- the round runs on a Python thread.

A waiter's future is a `RoundAnswer`: an asyncio Future whose done-callbacks registered without a
context (the connection's "answer ready", gather's, shield's) run as soon as the round ends, inside
the round's end, instead of one loop iteration later through call_soon: the answers of a round are
written in the iteration that learns the round is done. A Task awaiting it registers with its
context and is woken through call_soon as usual.

With log.flush.policy=os nothing waits (Kafka's page-cache durability)."""
from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor

from kohort.storage.fs import OsFileHandle

SyncWorker = None          # no compiler at install time, not Linux, or KOHORT_NO_EXT=1: the Python thread
if not os.environ.get("KOHORT_NO_EXT"):
    try:
        from kohort.storage._csync import SyncWorker
    except ImportError:
        pass

_NATIVE_SYNC_THREADS = 4   # files of one round datasynced at once (as Storage's own pool)


class RoundAnswer(asyncio.Future):
    """A group-commit waiter's future. Done-callbacks added without a context run at once when the
    future is settled (set_result, set_exception, cancel, or the round's end), in the order added;
    one added with a context (a Task's wake-up) or after it is done goes through the loop as for
    any Future."""

    _now: list | None = None   # the callbacks to run when done (an instance's own once one is added)

    def add_done_callback(self, fn, *, context=None) -> None:
        if context is not None or self.done():
            super().add_done_callback(fn, context=context)
        elif self._now is None:
            self._now = [fn]
        else:
            self._now.append(fn)

    def remove_done_callback(self, fn) -> int:
        n = 0
        if self._now:
            n = len(self._now)
            self._now = [f for f in self._now if f != fn]
            n -= len(self._now)
        return n + super().remove_done_callback(fn)

    def _run_now(self) -> None:
        """Run the callbacks kept for the moment it is done; one that raises is reported to the
        loop's exception handler (as the loop does for a callback) and the others still run."""
        callbacks, self._now = self._now, None
        if not callbacks:
            return
        for fn in callbacks:
            try:
                fn(self)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as e:         # noqa: BLE001 - as asyncio's Handle reports it
                self.get_loop().call_exception_handler({
                    "message": f"exception in group-commit answer callback {fn!r}",
                    "exception": e, "future": self})

    def set_result(self, result) -> None:
        super().set_result(result)
        self._run_now()

    def set_exception(self, exception) -> None:
        super().set_exception(exception)
        self._run_now()

    def cancel(self, msg=None) -> bool:
        if not super().cancel(msg):
            return False
        self._run_now()
        return True


_SET_RESULT = asyncio.Future.set_result    # the round's end settles its answers without the override's frame


_FDATASYNC = OsFileHandle.datasync


def _native_fds(handles: list) -> list[int] | None:
    """The file descriptors of a round's handles when every one is a plain OS file whose
    datasync is fdatasync on its fd (not replaced, e.g. by a fault-injecting test), else None."""
    if OsFileHandle.datasync is not _FDATASYNC:
        return None
    fds = []
    for h in handles:
        if type(h) is not OsFileHandle:
            return None
        fds.append(h.fd)
    return fds


class SyncPump:
    def __init__(self, storage) -> None:
        self.storage = storage
        self.enabled = storage.flush_policy != "os"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kohort-fsync")
        self._waiting: list[tuple] = []
        self._loop: asyncio.AbstractEventLoop | None = None    # the loop of the latest waiter
        self._busy = False                     # a round is scheduled or running
        self._idle: asyncio.Future | None = None   # close() waits on it while busy
        self._t0 = 0.0
        self._worker = SyncWorker(_NATIVE_SYNC_THREADS) if SyncWorker is not None and self.enabled else None
        self._reader_loop: asyncio.AbstractEventLoop | None = None   # the loop watching its eventfd
        self._native: tuple | None = None      # (waiters, SyncRound) of the round on the worker
        self.native_rounds = 0                 # rounds datasynced by the native worker
        self.rounds = 0
        self.seconds = 0.0          # time spent in fsync rounds
        self.waiters_served = 0

    async def wait_synced(self) -> None:
        """Return once every append made before this call is durable (raises KafkaStorageError)."""
        if not self.enabled:
            return
        await self.synced_future()

    def synced_future(self, result=None, on_error=None) -> asyncio.Future:
        """A future done once every append made before this call is durable: wait_synced without a
        coroutine and task per waiter (the produce path). Its result is `result` (the Produce
        answer itself, so no second future and callback hop per request); a failed round calls
        `on_error(future, result, exception)` when given (it settles the future), else the
        future gets the round's exception. Cancelling it is abandoning the wait; the round still runs.
        It is a RoundAnswer: done-callbacks added without a context run inside the round's end."""
        waiting = self._waiting
        if waiting:                 # the waiters gathered for the next round share its first's loop
            loop = self._loop
        else:                       # (get_running_loop costs a getpid system call on 3.11)
            loop = self._loop = asyncio.get_running_loop()
        fut = RoundAnswer(loop=loop)
        waiting.append((fut, result, on_error))
        if not self._busy:
            self._busy = True
            loop.call_soon(self._start_round)
        return fut

    def _start_round(self) -> None:
        batch, self._waiting = self._waiting, []
        self._t0 = time.perf_counter()
        loop = self._loop
        if self._worker is not None and self._start_native(batch, loop):
            return
        self._on_thread(batch, self.storage.sync_dirty, loop,
                        lambda e: self._round_done(batch, None, e))

    def _on_thread(self, batch: list, work, loop, refused) -> None:
        """Run the round's `work` on the fsync thread; its waiters are answered on the loop when it
        ends. `refused(error)` when the executor is shut down (nothing is synced)."""
        try:
            done = self._executor.submit(work)
        except RuntimeError as e:
            refused(e)
            return

        def finished(f: ThreadFuture) -> None:     # on the fsync thread
            try:
                loop.call_soon_threadsafe(self._round_done, batch, f, None)
            except RuntimeError:               # the loop is closed: nobody waits any more
                pass
        done.add_done_callback(finished)

    def _start_native(self, batch: list, loop) -> bool:
        """Run the round on the native worker; False when it cannot (the Python thread runs it)."""
        storage = self.storage
        try:
            sync_round = storage.begin_sync_round()
        except Exception as e:                 # noqa: BLE001 - an earlier fsync failed
            self._round_done(batch, None, e)
            return True
        if sync_round is None:                 # a round runs on another thread: wait for it there
            return False
        if not sync_round.handles:             # every append is durable already
            try:
                storage.end_sync_round(sync_round, None)
            except Exception as e:             # noqa: BLE001
                self._round_done(batch, None, e)
                return True
            self._round_done(batch, None, None)
            return True
        fds = _native_fds(sync_round.handles)
        if fds is None or loop is None or loop.is_closed():
            # not plain OS files: their own datasync, on the Python thread
            return self._start_thread_round(batch, sync_round, loop)
        if self._reader_loop is not loop:
            self._watch(loop)
        self._native = (batch, sync_round)
        try:
            self._worker.submit(fds)
        except Exception as e:                 # noqa: BLE001 - e.g. no thread could be started
            self._native = None
            self._finish(batch, sync_round, e)
        return True

    def _start_thread_round(self, batch: list, sync_round, loop) -> bool:
        """A round taken with begin_sync_round whose handles datasync in Python, on the thread."""
        self._on_thread(batch, lambda: self.storage.run_sync_round(sync_round), loop,
                        lambda e: self._finish(batch, sync_round, e))
        return True

    def _watch(self, loop) -> None:
        old = self._reader_loop
        if old is not None and not old.is_closed():
            old.remove_reader(self._worker.fileno())
        loop.add_reader(self._worker.fileno(), self._native_done)
        self._reader_loop = loop

    def _native_done(self) -> None:
        """The eventfd is readable: the native round is done; it is ended here (end_sync_round)
        and its waiters answered."""
        native = self._native
        if native is None:
            return
        errno = self._worker.result()
        self._native = None
        self.native_rounds += 1
        self._finish(*native, OSError(errno, os.strerror(errno)) if errno else None)

    def _finish(self, batch: list, sync_round, error: BaseException | None) -> None:
        try:
            self.storage.end_sync_round(sync_round, error)
        except Exception as e:                 # noqa: BLE001 - KafkaStorageError for the waiters
            error = e
        self._round_done(batch, None, error)

    def _round_done(self, batch: list, f: ThreadFuture | None, error: BaseException | None) -> None:
        """Settle the round's waiters, then run their context-free callbacks, then start the next
        round if waiters came meanwhile."""
        if f is not None:
            error = f.exception()
        try:
            if error is None:
                self.rounds += 1
                self.seconds += time.perf_counter() - self._t0
                self.waiters_served += len(batch)
                # every answer first, then the callbacks: a connection's first callback then finds
                # all of its answers of the round done and writes them at once
                set_result = _SET_RESULT
                called = None
                for fut, result, _ in batch:
                    if not fut.done():
                        set_result(fut, result)
                        if fut._now is not None:
                            if called is None:
                                called = [fut]
                            else:
                                called.append(fut)
                if called is not None:
                    for fut in called:
                        fut._run_now()
            else:
                for fut, result, on_error in batch:
                    if not fut.done():
                        if on_error is None:
                            fut.set_exception(error)
                        else:
                            on_error(fut, result, error)
        finally:
            self._next_or_idle()

    def _next_or_idle(self) -> None:
        if self._waiting:
            self._start_round()
            return
        self._busy = False
        idle, self._idle = self._idle, None
        if idle is not None and not idle.done():
            idle.set_result(None)

    async def close(self) -> None:
        if self._busy:
            if self._idle is None:
                self._idle = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._idle)
        self._executor.shutdown(wait=True)
        if self._worker is not None:
            stop_native_worker(self._worker, self._reader_loop)
            self._reader_loop = None


def stop_native_worker(worker, loop: asyncio.AbstractEventLoop | None) -> None:
    """Stop watching a native SyncWorker's eventfd on `loop` (if still open) and join its thread."""
    if loop is not None and not loop.is_closed():
        loop.remove_reader(worker.fileno())
    worker.close()
