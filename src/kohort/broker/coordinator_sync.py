"""Durability of the group coordinator's own appends: `OffsetsLogSync`, a group commit that datasyncs
only the `__consumer_offsets` segments the coordinator wrote.

The broker's shared round (kohort.broker.durability) datasyncs every dirty segment of every
partition, so under a producer writing many partitions a coordinator append waits for the round in
progress and then a whole round over all of them (hundreds of milliseconds on a busy disk) before
a SyncGroup, heartbeat or commit is answered. Here the runtime hands over a duplicated handle of
each segment it appended to; one worker thread datasyncs them, every append made before a round
starts is covered by it (those arriving meanwhile form the next round, as in the shared group
commit), and the round's futures are settled on the loop. The same guarantee -- the record is on
disk before its effect is visible -- at the cost of the coordinator's own files only.

A failed datasync fails its round's appends with KAFKA_STORAGE_ERROR and every later one too (after
a failed fsync Linux may drop the dirty pages and report the next fsync as clean), as Storage does
for its rounds. With log.flush.policy=os nothing waits.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor

from kohort.storage import FileHandle, KafkaStorageError


class OffsetsLogSync:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._executor: ThreadPoolExecutor | None = None
        self._waiting: list[tuple[list[FileHandle], asyncio.Future]] = []
        self._busy = False
        self._error: BaseException | None = None
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
        if not self._busy:
            self._busy = True
            loop.call_soon(self._start_round, loop)
        return fut

    def _start_round(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._waiting = self._waiting, []
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kohort-offsets-sync")
        handles = [h for hs, _ in batch for h in hs]
        try:
            done = self._executor.submit(self._sync, handles)
        except RuntimeError as e:          # the executor was shut down (broker closing)
            _close(handles)
            self._end_round(loop, batch, e)
            return
        done.add_done_callback(
            lambda f: loop.call_soon_threadsafe(self._end_round, loop, batch, _exception(f)))

    def _sync(self, handles: list[FileHandle]) -> None:
        try:
            if self._error is not None:
                raise KafkaStorageError(f"an earlier fsync of the coordinator's log failed: {self._error}")
            seen: set = set()
            for h in handles:
                key = getattr(h, "path", h)
                if key in seen:
                    continue
                seen.add(key)
                try:
                    h.datasync()
                except BaseException as e:   # noqa: BLE001 - sticky, as Storage's rounds
                    self._error = e
                    raise KafkaStorageError(f"fsync failed: {e}") from e
        finally:
            _close(handles)

    def _end_round(self, loop: asyncio.AbstractEventLoop, batch: list, error: BaseException | None) -> None:
        self.rounds += 1
        for _, fut in batch:
            if fut.done():
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)
        if self._waiting:
            loop.call_soon(self._start_round, loop)
        else:
            self._busy = False

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)


def _exception(f: ThreadFuture) -> BaseException | None:
    return f.exception()


def _close(handles: list[FileHandle]) -> None:
    for h in handles:
        try:
            h.close()
        except OSError:
            pass
