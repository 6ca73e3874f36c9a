"""Lag over time for the console: every `interval_ms` the sampler computes each group's per-partition
lag (console/state.py's `group_offsets`, the admin client's computation) and appends one point to the
group's ring buffer: (time, total lag, {"topic-partition": lag}). Bounded: `points` per group (oldest
dropped), and a group that no longer exists keeps its buffer only until `max_groups` is exceeded
(least recently sampled first out). Memory: points x partitions x groups small ints.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time

import kohort.broker.console.state as state

log = logging.getLogger("kohort.broker.console")

DEFAULT_POINTS = 720          # one hour at the default 5 s interval
DEFAULT_MAX_GROUPS = 1000


class LagHistory:
    def __init__(self, interval_ms: int = 5000, points: int = DEFAULT_POINTS,
                 max_groups: int = DEFAULT_MAX_GROUPS) -> None:
        if interval_ms <= 0:
            raise ValueError(f"console.lag.sample.ms must be > 0, got {interval_ms}")
        self.interval_ms = interval_ms
        self.points = points
        self.max_groups = max_groups
        self._series: collections.OrderedDict[str, collections.deque] = collections.OrderedDict()

    def sample(self, broker, now_ms: int | None = None) -> int:
        """Take one point for every group with a committed offset; returns how many groups."""
        rt = getattr(broker, "coordinator", None)
        if rt is None:
            return 0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        n = 0
        for gid in state.group_ids(rt):
            rows = state.group_offsets(broker, gid)
            lags = {f"{r['topic']}-{r['partition']}": r["lag"] for r in rows if r["lag"] is not None}
            if not lags:
                continue
            s = self._series.get(gid)
            if s is None:
                s = self._series[gid] = collections.deque(maxlen=self.points)
                while len(self._series) > self.max_groups:
                    self._series.popitem(last=False)
            else:
                self._series.move_to_end(gid)
            s.append((now, sum(lags.values()), lags))
            n += 1
        return n

    def series(self, group_id: str) -> list[dict]:
        return [{"ts_ms": ts, "total": total, "partitions": parts}
                for ts, total, parts in self._series.get(group_id, ())]

    async def run(self, broker) -> None:
        """Sample forever (a broker background task, cancelled on stop)."""
        while True:
            try:
                self.sample(broker)
            except Exception:   # noqa: BLE001 - the console must never take the broker down
                log.exception("console lag sampling failed")
            await asyncio.sleep(self.interval_ms / 1000)
