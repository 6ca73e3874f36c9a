"""RecordFuture: the handle `AIOProducer.send()` returns for one record, backed by its batch's future.

A batch holds one `asyncio.Future` (`BatchResult`) completed once with the batch's base offset, append
time and log start offset, or with its error. A record's handle keeps only that shared future, its offset
delta and its timestamp; its `RecordMetadata` is built when asked for. So the producer keeps no per-record
object alive while records wait for their answer: a handle the application drops is freed at once, and
CPython's full garbage collections (which run on the loop) do not grow with the records in flight.

The handle behaves as an asyncio future for `await`, `asyncio.wait`, `asyncio.gather` and
`add_done_callback`; `cancel()` returns False (a queued record cannot be taken back out of its batch).
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Generator, NamedTuple


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int                  # create time given or chosen; log append time when the topic uses it
    timestamp_type: int             # 0 create time, 1 log append time
    log_start_offset: int


class BatchResult(NamedTuple):
    """What a completed batch's shared future holds."""
    base_offset: int
    append_time: int                # -1 unless the topic uses log append time
    log_start_offset: int


class RecordFuture:
    """One record's result: see the module docstring."""

    __slots__ = ("_shared", "_tp", "_delta", "_ts")
    _asyncio_future_blocking = False      # asyncio.isfuture() accepts it (wait, gather, ensure_future)

    def __init__(self, shared: asyncio.Future, tp: tuple[str, int], delta: int, ts: int):
        self._shared, self._tp, self._delta, self._ts = shared, tp, delta, ts

    def done(self) -> bool:
        return self._shared.done()

    def cancelled(self) -> bool:
        return self._shared.cancelled()

    def cancel(self, msg: Any = None) -> bool:
        return False

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._shared.get_loop()

    def exception(self) -> BaseException | None:
        return self._shared.exception()

    def result(self) -> RecordMetadata:
        r: BatchResult = self._shared.result()
        topic, partition = self._tp
        off = r.base_offset + self._delta if r.base_offset >= 0 else -1
        if r.append_time is not None and r.append_time >= 0:
            return RecordMetadata(topic, partition, off, r.append_time, 1, r.log_start_offset)
        return RecordMetadata(topic, partition, off, self._ts, 0, r.log_start_offset)

    def add_done_callback(self, fn: Callable[["RecordFuture"], Any], *, context=None) -> None:
        self._shared.add_done_callback(lambda _f: fn(self), context=context)

    def remove_done_callback(self, fn: Callable) -> int:
        return 0                        # callbacks are wrapped on the shared future: never removed

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self._shared.done():
            # shielded: cancelling the awaiting task must not cancel the whole batch's future
            yield from asyncio.shield(self._shared).__await__()
        return self.result()

    __iter__ = __await__

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self.exception() else "done")
        return f"<RecordFuture {self._tp[0]}[{self._tp[1]}] +{self._delta} {state}>"
