"""Group commit at the event-loop level: produce handlers with acks=1/all `await wait_synced()` after
their append; one fsync round (Storage.sync_dirty, run on a dedicated thread) covers every append
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

    def synced_future(self) -> asyncio.Future:
        """A future done once every append made before this call is durable (its exception the
        round's error): wait_synced without a coroutine and task per waiter (the produce path).
        Cancelling it is abandoning the wait; the round still runs."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting.append(fut)
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
                    for f in batch:
                        if not f.done():
                            f.set_exception(e)
                    continue
                for f in batch:
                    if not f.done():
                        f.set_result(None)
        finally:
            self._task = None

    async def close(self) -> None:
        if self._task is not None:
            try:
                await self._task
            except Exception:   # noqa: BLE001
                pass
        self._executor.shutdown(wait=True)
