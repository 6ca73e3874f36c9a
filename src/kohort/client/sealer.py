"""Compressing producer batches off the thread that calls produce().

Two ways, one per producer, chosen when it starts:

`native_sealer(codec)`: the compiled twin's `NativeSealer` (protocol/_crecords.c), for gzip, lz4
and zstd where their shared libraries (libz.so.1, liblz4.so.1, libzstd.so.1) load with dlopen: a
pthread that never takes the GIL compresses and seals each batch (header, CRC-32C) into a fresh
bytearray. The producer's I/O step submits the batches of a request (`_Sender._send_batches`) and,
at every step, collects what is finished and sends the requests whose batches are all sealed, in
the order it made them (one FIFO: a partition's sequence numbers reach the wire in order, KIP-98).
Outside a transaction the producer drains up to `SEAL_AHEAD` requests beyond max.in.flight, their
batches sealed without producer id/epoch and sequence: a request takes its slot, and its batches
their numbers (`records.set_batch_producer`), when it leaves the FIFO (`_Sender._release_sealed`).
The sealer wakes the network client's select() when a batch is done. A codec whose library is
missing (said once at DEBUG in the producer's log), snappy, and a build without the extension
(or KOHORT_NO_EXT=1) take the `Sealer` below. KOHORT_NATIVE_CODECS, read at import, names the
codecs the native sealer may take (comma-separated, default "gzip,lz4,zstd"; "" for none): the
others behave as if their library were absent (tests of the fallback set it).

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

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from kohort.errors import ConfigError
from kohort.protocol.compression import CODEC_IDS, CODEC_NAMES, COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_ZSTD
from kohort.protocol.records import producer_twin

log = logging.getLogger("kohort.client.producer")

# The shared libraries tried for each codec, first to last (Linux sonames, then the unversioned
# and macOS names).
LIBRARIES = {
    COMPRESSION_GZIP: ("libz.so.1", "libz.so", "libz.1.dylib", "libz.dylib"),
    COMPRESSION_LZ4: ("liblz4.so.1", "liblz4.so", "liblz4.1.dylib", "liblz4.dylib"),
    COMPRESSION_ZSTD: ("libzstd.so.1", "libzstd.so", "libzstd.1.dylib", "libzstd.dylib"),
}
# The codec libraries' levels at Kafka's default settings (gzip: Java's Deflater default; lz4: the
# frame API's fast mode, which Java's default level 9 means; zstd: Kafka's default, KIP-390); they
# are also compression.compress's defaults, so both ways give equal batches.
LEVELS = {COMPRESSION_GZIP: 6, COMPRESSION_LZ4: 0, COMPRESSION_ZSTD: 3}
_LEVEL_KEYS = {COMPRESSION_GZIP: "compression.gzip.level", COMPRESSION_LZ4: "compression.lz4.level",
               COMPRESSION_ZSTD: "compression.zstd.level"}
_JAVA_LZ4_DEFAULT = 9

NATIVE_CODECS = frozenset(CODEC_IDS[name.strip()] for name in
                          os.environ.get("KOHORT_NATIVE_CODECS", "gzip,lz4,zstd").split(",")
                          if name.strip() in CODEC_IDS) & frozenset(LIBRARIES)
_said: set[int] = set()          # codecs whose absence was logged already


def codec_level(codec: int, config: Any) -> int | None:
    """The codec library's level for a producer's `compression.<codec>.level` (KIP-390), as Java's
    producer applies it: gzip -1 is Deflater's default (6), 1-9 as given (0 is refused, as Java does);
    lz4 9 (the default) is LZ4's fast compressor, any other level LZ4 HC at that level (the frame API
    caps HC at 12 and treats 1-2 as its fast mode); zstd as given. None for none and snappy."""
    key = _LEVEL_KEYS.get(codec)
    if key is None:
        return None
    level = config[key]
    if codec == COMPRESSION_GZIP:
        if level == 0:
            raise ConfigError(f"{key} must be between 1 and 9 or equal to -1, got 0")
        return LEVELS[codec] if level == -1 else level
    if codec == COMPRESSION_LZ4:
        return LEVELS[codec] if level == _JAVA_LZ4_DEFAULT else level
    return level


def native_sealer(codec: int, level: int | None = None) -> Any:
    """A started `_crecords.NativeSealer` for `codec` at the codec library's `level` (None: `LEVELS`),
    or None (the Python `Sealer` then seals)."""
    ext = producer_twin()
    why = None
    if codec not in LIBRARIES:
        return None
    if ext is None or not hasattr(ext, "NativeSealer"):
        why = "the compiled twin is not in use"
    elif codec not in NATIVE_CODECS:
        why = "not in KOHORT_NATIVE_CODECS"
    else:
        why = ext.sealer_library(codec, LIBRARIES[codec])
    if why is None:
        try:
            return ext.NativeSealer(codec, LEVELS[codec] if level is None else level)
        except OSError as e:            # no thread could be started
            why = f"its thread did not start: {e}"
    if codec not in _said:
        _said.add(codec)
        log.debug("kohort producer: %s batches are compressed on the Python path, not the native "
                  "sealer (%s)", CODEC_NAMES[codec], why)
    return None


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


__all__ = ["LEVELS", "LIBRARIES", "NATIVE_CODECS", "Sealer", "codec_level", "native_sealer"]
