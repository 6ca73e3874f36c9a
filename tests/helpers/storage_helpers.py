"""Shared helpers for the storage tests: both engines behind one fixture, batch builders, raw file
surgery through the filesystem seam."""
from __future__ import annotations

import pytest

from kohort.protocol.records import build_batch, decode_batch, iter_batches
from kohort.storage import MemoryFileSystem, MemoryStorage, OsFileSystem, Storage


class Engine:
    """Opens (and re-opens) a Storage of one kind on the same files. Re-opening without close()
    models a process that died: its data-directory lock goes with it (the OS drops a dead
    process's flock), so the previous Storage's lock is released first."""

    def __init__(self, kind: str, tmp_path):
        self.kind = kind
        self.fs = MemoryFileSystem() if kind == "memory" else OsFileSystem()
        self.data_dir = "/kohort" if kind == "memory" else str(tmp_path / "data")
        self.last: Storage | None = None

    def open(self, **kw) -> Storage:
        kw.setdefault("now_ms", 0)
        if self.last is not None:
            self.last._release_lock()
        if self.kind == "memory":
            self.last = MemoryStorage(fs=self.fs, data_dir=self.data_dir, **kw)
        else:
            self.last = Storage(self.data_dir, fs=self.fs, **kw)
        return self.last


@pytest.fixture(params=["disk", "memory"])
def engine(request, tmp_path):
    return Engine(request.param, tmp_path)


def batch(*records, ts: int = 1000, producer_id: int = -1, base_sequence: int = -1,
          compression: int = 0) -> bytes:
    """records: values (bytes) or (key, value) pairs; timestamps ts, ts+1, ..."""
    recs = []
    for i, r in enumerate(records):
        key, value = r if isinstance(r, tuple) else (None, r)
        recs.append((key, value, None, ts + i))
    return build_batch(recs, compression=compression, producer_id=producer_id,
                       producer_epoch=0 if producer_id >= 0 else -1, base_sequence=base_sequence)


def records_of(data: bytes):
    """[(offset, key, value)] of every record in a read result."""
    out = []
    for pos, _ in iter_batches(data):
        _, recs = decode_batch(data, pos)
        out.extend((r.offset, r.key, r.value) for r in recs)
    return out


def read_all(log, start: int | None = None):
    """Every record from `start` (default: log start) to the end, following segment ends."""
    off = log.log_start_offset if start is None else start
    out = []
    while off < log.log_end_offset:
        data = log.read(off, 1 << 20)
        if not data:
            break
        for pos, h in iter_batches(data):
            _, recs = decode_batch(data, pos)
            out.extend((r.offset, r.key, r.value) for r in recs if r.offset >= off)
            off = h.next_offset
    return out


def file_bytes(fs, path: str) -> bytes:
    return fs.read_file(path)


def overwrite(fs, path: str, data: bytes) -> None:
    h = fs.open(path, create=False)
    try:
        h.truncate(0)
        h.append(data)
    finally:
        h.close()
