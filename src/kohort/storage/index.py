"""Sparse per-segment indexes, in Kafka's on-disk layout.

* `OffsetIndex` (`.index`): entries of (relative offset int32, file position int32), one every
  `index.interval.bytes` of log; the offset is the last offset of the batch that starts at the
  position. `lookup(offset)` gives the greatest entry at or below `offset` — where a scan starts.
* `TimeIndex` (`.timeindex`): entries of (timestamp int64, relative offset int32), where timestamp
  is the greatest timestamp seen so far in the segment and the offset the last offset of the batch
  that carried it. `lookup(ts)` gives the greatest entry with timestamp <= ts.

Entries live in memory (lists) and are appended to their file through the filesystem seam in
groups of up to `PENDING_ENTRIES` (one write instead of one per batch), and always before a flush,
close, rename or rewrite. Index files are not fsynced per append: after an unclean stop they are
rebuilt from the log for every segment from the recovery point on; an older segment whose last
entries never reached the file (a killed process) only has a shorter sparse index, which stays
correct (its stats are rebuilt by scanning the log after the last entry), and `load()` rejects
files that fail a sanity check.
"""
from __future__ import annotations

import bisect
import struct

from kohort.storage.fs import FileHandle, FileSystem

PENDING_ENTRIES = 64      # index entries held in memory before they are written to the file


class _Index:
    ENTRY: struct.Struct

    def __init__(self, fs: FileSystem, path: str, base_offset: int):
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self.keys: list[int] = []
        self.values: list[int] = []
        self._h: FileHandle | None = None
        self._pending = bytearray()      # encoded entries not yet written to the file

    def _handle(self) -> FileHandle:
        if self._h is None:
            self._h = self.fs.open(self.path)
        return self._h

    def __len__(self) -> int:
        return len(self.keys)

    def _add(self, entry: bytes) -> None:
        if self._h is None:
            self._handle()               # the file exists from the first entry on
        self._pending += entry
        if len(self._pending) >= PENDING_ENTRIES * self.ENTRY.size:
            self.write_pending()

    def write_pending(self) -> None:
        """Write the entries held in memory to the file (page cache)."""
        if self._pending:
            data, self._pending = self._pending, bytearray()
            self._handle().append(data)

    def load(self) -> bool:
        """Read the file; False (and empty) if missing or not sane."""
        self.keys, self.values = [], []
        self._pending = bytearray()
        if not self.fs.exists(self.path):
            return False
        raw = self.fs.read_file(self.path)
        size = self.ENTRY.size
        if len(raw) % size:
            return False
        entries = [self._decode(*self.ENTRY.unpack_from(raw, i)) for i in range(0, len(raw), size)]
        for (k0, v0), (k1, v1) in zip(entries, entries[1:]):
            if k1 <= k0 or v1 < v0:
                return False
        self.keys = [k for k, _ in entries]
        self.values = [v for _, v in entries]
        return True

    def reset(self) -> None:
        self.keys, self.values = [], []
        self._pending = bytearray()
        self._handle().truncate(0)

    def _write_all(self) -> None:
        self._pending = bytearray()
        h = self._handle()
        h.truncate(0)
        h.append(b"".join(self._encode(k, v) for k, v in zip(self.keys, self.values)))

    def close(self) -> None:
        if self._h is not None:
            self.write_pending()
            self._h.close()
            self._h = None

    def flush(self) -> None:
        self.write_pending()
        self._handle().fsync()

    def rename(self, new_path: str) -> None:
        self.close()
        if self.fs.exists(self.path):
            self.fs.rename(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self._pending = bytearray()
        self.close()
        if self.fs.exists(self.path):
            self.fs.remove(self.path)

    def _decode(self, a, b):
        raise NotImplementedError

    def _encode(self, k, v) -> bytes:
        raise NotImplementedError


_OFFSET_ENTRY = struct.Struct(">iI")     # relative offset, file position
_TIME_ENTRY = struct.Struct(">qi")       # timestamp, relative offset


class OffsetIndex(_Index):
    ENTRY = _OFFSET_ENTRY

    def _decode(self, rel, pos):
        return self.base_offset + rel, pos

    def _encode(self, offset, pos):
        return self.ENTRY.pack(offset - self.base_offset, pos)

    def append(self, offset: int, position: int) -> None:
        keys = self.keys
        if keys and offset <= keys[-1]:
            return
        keys.append(offset)
        self.values.append(position)
        self._add(_OFFSET_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry with offset <= `offset`, else (base, 0)."""
        i = bisect.bisect_right(self.keys, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.keys[i], self.values[i]

    def last_position(self) -> int:
        return self.values[-1] if self.values else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond `position` (the log was cut there)."""
        i = bisect.bisect_left(self.values, position)
        if i < len(self.keys):
            del self.keys[i:], self.values[i:]
            self._write_all()


class TimeIndex(_Index):
    ENTRY = _TIME_ENTRY

    def _decode(self, ts, rel):
        return ts, self.base_offset + rel

    def _encode(self, ts, offset):
        return self.ENTRY.pack(ts, offset - self.base_offset)

    def append(self, timestamp: int, offset: int) -> None:
        keys, values = self.keys, self.values
        if keys and (timestamp <= keys[-1] or offset <= values[-1]):
            return
        keys.append(timestamp)
        values.append(offset)
        self._add(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> int | None:
        """Offset of the greatest entry with timestamp <= `timestamp` (None if there is none)."""
        i = bisect.bisect_right(self.keys, timestamp) - 1
        return self.values[i] if i >= 0 else None

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= `offset`."""
        i = bisect.bisect_left(self.values, offset)
        if i < len(self.keys):
            del self.keys[i:], self.values[i:]
            self._write_all()
