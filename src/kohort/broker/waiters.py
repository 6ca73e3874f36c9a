"""Per-partition data wakeups for Fetch long polls: `notify(topic, partition)` after an append wakes
every fetch waiting on that partition (asyncio futures, no polling)."""
from __future__ import annotations

import asyncio


class DataWaiters:
    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}

    def notify(self, topic: str, partition: int) -> None:
        futs = self._waiters.pop((topic, partition), None)
        if futs:
            for f in futs:
                if not f.done():
                    f.set_result(None)

    def notify_topic(self, topic: str) -> None:
        for tp in [tp for tp in self._waiters if tp[0] == topic]:
            self.notify(*tp)

    def notify_all(self) -> None:
        for tp in list(self._waiters):
            self.notify(*tp)

    async def wait(self, partitions, timeout: float) -> bool:
        """Wait until one of `partitions` ((topic, partition) pairs) gets data or `timeout` seconds
        pass. True if woken by data."""
        if timeout <= 0:
            return False
        fut = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for tp in keys:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            done, _ = await asyncio.wait((fut,), timeout=timeout)
            return bool(done)
        finally:
            if not fut.done():
                fut.cancel()
            for tp in keys:
                s = self._waiters.get(tp)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[tp]
