"""Group commit at the event-loop level: produce handlers with acks=1/all wait for `synced_future()`
after their append (other callers `await wait_synced()`); one fsync round (Storage.sync_dirty, run on a
dedicated thread) covers every append made before the round started, so concurrent produce requests
share one fsync.

A round is started by a callback (no task or coroutine per round): the first waiter schedules it
with `call_soon`, so every request of the bytes being handled joins it; the waiters arriving while it
runs form the next round, started as soon as it ends.

With log.flush.policy=os nothing waits (Kafka's page-cache durability)."""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor


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
        future gets the round's exception. Cancelling it is abandoning the wait; the round still runs."""
        loop = self._loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting.append((fut, result, on_error))
        if not self._busy:
            self._busy = True
            loop.call_soon(self._start_round)
        return fut

    def _start_round(self) -> None:
        batch, self._waiting = self._waiting, []
        self._t0 = time.perf_counter()
        loop = self._loop
        try:
            done = self._executor.submit(self.storage.sync_dirty)
        except RuntimeError as e:              # the executor is shut down: nothing is synced
            self._round_done(batch, None, e)
            return

        def finished(f: ThreadFuture) -> None:     # on the fsync thread
            try:
                loop.call_soon_threadsafe(self._round_done, batch, f, None)
            except RuntimeError:               # the loop is closed: nobody waits any more
                pass
        done.add_done_callback(finished)

    def _round_done(self, batch: list, f: ThreadFuture | None, error: BaseException | None) -> None:
        if f is not None:
            error = f.exception()
        try:
            if error is None:
                self.rounds += 1
                self.seconds += time.perf_counter() - self._t0
                self.waiters_served += len(batch)
                for fut, result, _ in batch:
                    if not fut.done():
                        fut.set_result(result)
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
