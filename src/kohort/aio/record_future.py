"""RecordFuture: the handle `AIOProducer.send()` returns for one record, backed by its batch's future.

A batch holds one `asyncio.Future` (`BatchResult`) completed once with the batch's base offset, append
time and log start offset, or with its error. A record's handle keeps only that shared future, its offset
delta and its timestamp; its `RecordMetadata` is built when asked for. So the producer keeps no per-record
object alive while records wait for their answer: a handle the application drops is freed at once, and
CPython's full garbage collections (which run on the loop) do not grow with the records in flight.

The handle behaves as an asyncio future for `await`, `asyncio.wait`, `asyncio.gather` and
`add_done_callback`; `cancel()` returns False (a queued record cannot be taken back out of its batch).
Done callbacks of a batch's records are kept in one list per batch, behind one callback on the shared
future, and run `CALLBACK_SLICE` at a time with a turn of the loop between: a batch of thousands of
records with a callback each does not hold the loop for all of them at once. Subclasses (the compat
layers' futures) change what `result()` and `exception()` give. Its fields live in the compiled
`_crecords.AIORecord` when the extension is built (else in `_PyRecordFields`), so that the producer's
compiled send (`_crecords.AIOSend`) makes one without running Python.
"""
from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable, Generator, NamedTuple

from kohort.protocol.records import producer_twin

CALLBACK_SLICE = 256                # record callbacks run per turn of the loop


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


class _PyRecordFields:
    """RecordFuture's fields, as the compiled `_crecords.AIORecord` holds them."""

    __slots__ = ("_shared", "_tp", "_delta", "_ts")

    def __init__(self, shared: asyncio.Future, tp: tuple[str, int], delta: int, ts: int):
        self._shared, self._tp, self._delta, self._ts = shared, tp, delta, ts


_twin = producer_twin()
# the compiled fields when built: AIOProducer.send()'s compiled common case (`_crecords.AIOSend`) then
# fills a RecordFuture without running Python
_RecordFields = getattr(_twin, "AIORecord", None) or _PyRecordFields
COMPILED = _RecordFields is not _PyRecordFields


class RecordFuture(_RecordFields):
    """One record's result: see the module docstring. Built as RecordFuture(shared, tp, delta, ts):
    the batch's shared future, (topic, partition), the offset delta and the timestamp."""

    __slots__ = ()
    _asyncio_future_blocking = False      # asyncio.isfuture() accepts it (wait, gather, ensure_future)

    @classmethod
    def of(cls, other: "RecordFuture") -> Any:
        """The same record's handle as a `cls` (a subclass giving its own result type)."""
        return cls(other._shared, other._tp, other._delta, other._ts)

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

    def add_done_callback(self, fn: Callable[[Any], Any], *, context: contextvars.Context | None = None) -> None:
        shared = self._shared
        if context is None:
            context = contextvars.copy_context()
        if shared.done():
            shared.get_loop().call_soon(fn, self, context=context)
            return
        waiting = _callbacks.get(shared)
        if waiting is None:
            waiting = _callbacks[shared] = []
            shared.add_done_callback(_batch_done)
        waiting.append((fn, self, context))

    def remove_done_callback(self, fn: Callable) -> int:
        return 0                        # callbacks wait in their batch's list: never removed

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self._shared.done():
            # shielded: cancelling the awaiting task must not cancel the whole batch's future
            yield from asyncio.shield(self._shared).__await__()
        return self.result()

    __iter__ = __await__

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self.exception() else "done")
        return f"<RecordFuture {self._tp[0]}[{self._tp[1]}] +{self._delta} {state}>"


# shared batch future -> [(callback, record handle, context)] waiting for it
_callbacks: dict[asyncio.Future, list[tuple[Callable[[Any], Any], RecordFuture, contextvars.Context]]] = {}


def _batch_done(shared: asyncio.Future) -> None:
    _run_callbacks(shared.get_loop(), _callbacks.pop(shared, []), 0)


def _run_callbacks(loop: asyncio.AbstractEventLoop, waiting: list, start: int) -> None:
    end = start + CALLBACK_SLICE
    for fn, rf, ctx in waiting[start:end]:
        try:
            ctx.run(fn, rf)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as e:
            loop.call_exception_handler({"message": f"Exception in callback {fn!r} of {rf!r}",
                                         "exception": e, "future": rf})
    if end < len(waiting):
        loop.call_soon(_run_callbacks, loop, waiting, end)
