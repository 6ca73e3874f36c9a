"""Compressing producer batches off the thread that calls produce().

`Sealer`: one daemon thread per producer with a compression codec, fed in order by the producer's
I/O step (`_Sender._send_batches`): it seals the batches of a Produce request (records compressed by
lz4/zstd/gzip/snappy with the GIL released, CRC, header) and hands the request to the NetworkClient,
whose `send` is thread-safe. The producing thread, which also drives the I/O while it produces, so
goes on appending records while the other core compresses. One thread and one FIFO queue: requests
reach the network in the order the I/O step made them, so a partition's sequence numbers (KIP-98)
stay in order on the wire.

Uncompressed batches are not handed over: sealing them is a copy and a CRC (~0.2 ms per MB), less
than the hand-over of the GIL to another thread would cost.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable


class Sealer:
    """Runs submitted jobs, in order, on its own thread; `stop()` runs what is queued, then ends."""

    def __init__(self, name: str = "kohort-producer-sealer"):
        self._jobs: deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("the sealer is stopped")
            self._jobs.append(job)
            self._cond.notify()

    def pending(self) -> int:
        return len(self._jobs)

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stopping:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            job()       # a job handles its own errors (the producer fails its batches)


__all__ = ["Sealer"]
