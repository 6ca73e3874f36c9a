"""Group commit at the event-loop level: produce handlers with acks=1/all wait for `synced_future()`
after their append (other callers `await wait_synced()`); one fsync round (Storage.sync_dirty, run on a dedicated thread) covers every append
made before the round started, so concurrent produce requests share one fsync.

With log.flush.policy=os nothing waits (Kafka's page-cache durability)."""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor


class SyncPump:
    def __init__(self, storage) -> None:
        self.storage = storage
        self.enabled = storage.flush_policy != "os"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kohort-fsync")
        self._waiting: list[asyncio.Future] = []
        self._task: asyncio.Task | None = None
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
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting.append((fut, result, on_error))
        if self._task is None:
            self._task = loop.create_task(self._run())
        return fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                t0 = time.perf_counter()
                try:
                    await loop.run_in_executor(self._executor, self.storage.sync_dirty)
                    self.rounds += 1
                    self.seconds += time.perf_counter() - t0
                    self.waiters_served += len(batch)
                except Exception as e:   # noqa: BLE001 - handed to every waiter
                    for f, result, on_error in batch:
                        if not f.done():
                            if on_error is None:
                                f.set_exception(e)
                            else:
                                on_error(f, result, e)
                    continue
                for f, result, _ in batch:
                    if not f.done():
                        f.set_result(result)
        finally:
            self._task = None

    async def close(self) -> None:
        if self._task is not None:
            try:
                await self._task
            except Exception:   # noqa: BLE001
                pass
        self._executor.shutdown(wait=True)
