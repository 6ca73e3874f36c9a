"""Durability of the group coordinator's own appends: `OffsetsLogSync`, a group commit that datasyncs
only the `__consumer_offsets` segments the coordinator wrote.

The broker's shared round (kohort.broker.durability) datasyncs every dirty segment of every
partition, so under a producer writing many partitions a coordinator append waits for the round in
progress and then a whole round over all of them (hundreds of milliseconds on a busy disk) before
a SyncGroup, heartbeat or commit is answered. Here the runtime hands over a duplicated handle of
each segment it appended to and they are datasynced at once when no round runs; the appends made
while one runs form the next round, started as soon as it ends. The same guarantee -- the record is
on disk before its effect is visible -- at the cost of the coordinator's own files only.

A round runs on a native SyncWorker thread of its own (kohort.storage._csync: no GIL, done when its
eventfd turns readable on the loop) when the handles are plain OS files, else (no extension, the
in-memory filesystem, a replaced datasync) on a Python thread. A failed datasync fails its round's
appends with KAFKA_STORAGE_ERROR and every later one too (after a failed fsync Linux may drop the
dirty pages and report the next fsync as clean), as Storage does for its rounds. With
log.flush.policy=os nothing waits.
"""
from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

from kohort.storage import FileHandle, KafkaStorageError

from kohort.broker.durability import SyncWorker, _native_fds, stop_native_worker


class OffsetsLogSync:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._executor: ThreadPoolExecutor | None = None
        self._worker = None                    # the native worker, made at the first native round
        self._reader_loop: asyncio.AbstractEventLoop | None = None
        self._waiting: list[tuple[list[FileHandle], asyncio.Future]] = []
        self._running: tuple[list, list[FileHandle]] | None = None   # (futures, handles) of the round
        self._error: BaseException | None = None
        self._closed = False
        self.rounds = 0

    def synced_future(self, handles: list[FileHandle]) -> asyncio.Future:
        """A future done once `handles` (duplicated handles this call owns and closes) are
        datasynced; failed with KafkaStorageError when the datasync failed (now or earlier)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not self.enabled:
            _close(handles)
            fut.set_result(None)
            return fut
        self._waiting.append((handles, fut))
        if self._running is None:
            self._start_round(loop)
        return fut

    # -- a round ---------------------------------------------------------------------------------------
    def _start_round(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._waiting = self._waiting, []
        futures = [f for _, f in batch]
        handles = _distinct([h for hs, _ in batch for h in hs])
        self._running = (futures, handles)
        if self._error is not None or self._closed:
            self._end_round(loop, self._error or RuntimeError("the coordinator is closing"))
            return
        fds = _native_fds(handles) if SyncWorker is not None else None
        if fds is not None:
            try:
                if self._worker is None:
                    self._worker = SyncWorker(1)
                if self._reader_loop is not loop:
                    self._watch(loop)
                self._worker.submit(fds)
                return
            except Exception:                  # noqa: BLE001 - no native thread: the Python one
                pass
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kohort-offsets-sync")

        def on_thread() -> None:
            for h in handles:
                h.datasync()

        def finished(f) -> None:               # on the sync thread
            try:
                loop.call_soon_threadsafe(self._end_round, loop, f.exception())
            except RuntimeError:               # the loop is closed: nobody waits any more
                pass
        try:
            self._executor.submit(on_thread).add_done_callback(finished)
        except RuntimeError as e:              # shut down (the broker is closing)
            self._end_round(loop, e)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        old = self._reader_loop
        if old is not None and not old.is_closed():
            old.remove_reader(self._worker.fileno())
        loop.add_reader(self._worker.fileno(), self._native_done, loop)
        self._reader_loop = loop

    def _native_done(self, loop: asyncio.AbstractEventLoop) -> None:
        """The worker's eventfd is readable: its round is done."""
        if self._running is None:
            return
        errno = self._worker.result()
        self._end_round(loop, OSError(errno, os.strerror(errno)) if errno else None)

    def _end_round(self, loop: asyncio.AbstractEventLoop, error: BaseException | None) -> None:
        futures, handles = self._running
        self._running = None
        _close(handles)
        if error is not None and not isinstance(error, KafkaStorageError):
            if self._error is None and not self._closed:
                self._error = error            # sticky: later datasyncs prove nothing
            error = KafkaStorageError(f"fsync of the coordinator's log failed: {error}")
        self.rounds += 1
        for fut in futures:
            if fut.done():
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
        if self._waiting:
            self._start_round(loop)

    def close(self) -> None:
        """Stop: rounds not started are refused; a native round in progress is waited for (its
        thread is joined)."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        if self._worker is not None:
            stop_native_worker(self._worker, self._reader_loop)
            self._reader_loop = None
            if self._running is not None:
                loop = asyncio.get_running_loop()
                self._end_round(loop, RuntimeError("the coordinator closed during the datasync"))


def _distinct(handles: list[FileHandle]) -> list[FileHandle]:
    """One handle per file (the others closed): the segments of several appends in one round."""
    seen: set = set()
    keep = []
    for h in handles:
        key = getattr(h, "path", h)
        if key in seen:
            h.close()
        else:
            seen.add(key)
            keep.append(h)
    return keep


def _close(handles: list[FileHandle]) -> None:
    for h in handles:
        try:
            h.close()
        except OSError:
            pass
