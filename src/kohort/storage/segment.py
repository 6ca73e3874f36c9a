"""One log segment: `<base offset, 20 digits>.log` of RecordBatch bytes exactly as stored, with its
sparse `.index` and `.timeindex` (kohort.storage.index).

A segment knows its size, next offset, greatest timestamp (and the last offset of the batch that
carried it) and the timestamp segment.ms rolling is measured from (the first batch's MaxTimestamp,
as in Kafka). `recover()` re-reads every batch, checks length and CRC-32C, cuts the file at the
first bad byte and rebuilds both indexes; `load_stats()` trusts the indexes and scans only the tail
after the last offset-index entry.
"""
from __future__ import annotations

import bisect
from typing import Iterator

from kohort.errors import DecodeError
from kohort.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    read_batch_header,
    validate_batch,
)
from kohort.storage.fs import FileSlice, FileSystem
from kohort.storage.index import OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"

_SCAN_CHUNK = 16 * 1024
SLICE_MIN = 64 * 1024      # smaller answers are read: one pread costs less than a sendfile round
_RECOVER_CHUNK = 1024 * 1024
_MAX_RELATIVE_OFFSET = 2**31 - 1


def segment_name(base_offset: int) -> str:
    return "%020d" % base_offset


class Segment:
    def __init__(self, fs: FileSystem, directory: str, base_offset: int,
                 index_interval_bytes: int, suffix: str = ""):
        self.fs = fs
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.suffix = suffix
        stem = fs.join(directory, segment_name(base_offset))
        self.log_path = stem + LOG_SUFFIX + suffix
        self.log = fs.open(self.log_path)
        self.offset_index = OffsetIndex(fs, stem + INDEX_SUFFIX + suffix, base_offset)
        self.time_index = TimeIndex(fs, stem + TIMEINDEX_SUFFIX + suffix, base_offset)
        self.size = self.log.size()
        self.created_ms = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.rolling_timestamp: int | None = None
        self._bytes_since_index = 0

    # -- state --------------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        return self.size == 0

    def can_hold(self, last_offset: int) -> bool:
        """Offsets are stored relative to the base as int32 in the indexes."""
        return last_offset - self.base_offset <= _MAX_RELATIVE_OFFSET

    def _track(self, pos: int, h: BatchHeader) -> None:
        if self.rolling_timestamp is None:
            self.rolling_timestamp = h.max_timestamp
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = h.last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(h.last_offset, pos)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += h.total_size
        self.next_offset = h.next_offset

    # -- writing ------------------------------------------------------------------------------
    def append(self, data, batches: list[tuple[int, BatchHeader]]) -> None:
        """Write `data` (whole batches, offsets assigned) at the end; `batches` are (pos in data,
        header). Indexes are updated only after the write succeeded."""
        start = self.size
        self.log.append(data)
        self.size = start + len(data)
        for pos, h in batches:
            self._track(start + pos, h)

    def append_batch(self, data, last_offset: int, max_timestamp: int) -> None:
        """append() of one batch (offsets assigned) given by its last offset and MaxTimestamp: the
        same write and the same stats and index entries as `_track`, without a header object."""
        start = self.size
        self.log.append(data)
        n = len(data)
        self.size = start + n
        if self.rolling_timestamp is None:
            self.rolling_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(last_offset, start)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += n
        self.next_offset = last_offset + 1

    def truncate_to_position(self, position: int) -> None:
        """Cut the log at `position` (a batch boundary) and bring indexes and stats in line."""
        self.log.truncate(position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        # the time index keeps entries for batches before the cut only
        next_offset = self.offset_index.keys[-1] + 1 if self.offset_index.keys else self.base_offset
        for _, h in self.scan(self.offset_index.last_position()):
            next_offset = h.next_offset
        self.time_index.truncate_to_offset(next_offset)
        self.load_stats()

    # -- reading ------------------------------------------------------------------------------
    def read(self, position: int, size: int) -> bytes:
        return self.log.pread(position, size)

    def scan(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `position` (a batch boundary) to `end`."""
        end = self.size if end is None else end
        chunk, cpos = b"", position
        pos = position
        while pos + BATCH_HEADER_SIZE <= end:
            if pos + BATCH_HEADER_SIZE > cpos + len(chunk):
                cpos = pos
                chunk = self.log.pread(pos, min(_SCAN_CHUNK, end - pos))
            h = read_batch_header(chunk, pos - cpos)
            yield pos, h
            pos += h.total_size

    def read_batches(self, offset: int, max_bytes: int, limit: int, as_slice: bool = False):
        """Whole batches as stored, from the one holding `offset` (or the first after it, if
        compaction removed it): at most `max_bytes`, except that the first batch is whole even if
        larger, and none starting at or beyond offset `limit`. None if no batch here holds `offset`
        or a later one.

        The record bytes are read once, with one pread of exactly the answer: its first batch is
        found by a header walk from the offset index entry at or below `offset`, its end from the
        last index entry inside the byte budget (index entries are batch starts) plus a header
        walk of what follows it -- small reads of at most one scan chunk each, instead of reading
        the answer twice or reading more and copying out a slice. With `as_slice`, an answer of
        at least SLICE_MIN bytes is not read at all: a FileSlice says where it is (sendfile)."""
        found = self.find_position(offset)
        if found is None:
            return None
        start, h = found
        if h.base_offset >= limit:
            return b""
        stop = min(self.size, start + max(max_bytes, h.total_size))
        pos = start + h.total_size                   # the first batch, always whole
        # the last index entry at or before `stop` whose batch starts below `limit`: every batch
        # before it ends before `stop` and starts below `limit` (keys are last offsets)
        idx = self.offset_index
        i = min(bisect.bisect_right(idx.values, stop), bisect.bisect_right(idx.keys, limit)) - 1
        if i >= 0 and idx.values[i] > pos:
            pos = idx.values[i]
        for p, h in self.scan(pos, stop):
            if h.base_offset >= limit or p + h.total_size > stop:
                break
            pos = p + h.total_size
        if as_slice and pos - start >= SLICE_MIN:
            return FileSlice(self.log.dup(), start, pos - start)
        return self.log.pread(start, pos - start)

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The batch containing `offset`, or the first one after it if compaction removed it."""
        _, pos = self.offset_index.lookup(offset)
        for p, h in self.scan(pos):
            if h.last_offset >= offset:
                return p, h
        return None

    # -- loading ------------------------------------------------------------------------------
    def load_stats(self) -> None:
        """Rebuild the in-memory stats from the indexes plus a scan of the tail after the last
        offset-index entry (used on a clean start and after truncation)."""
        self.size = self.log.size()
        self.next_offset = self.base_offset
        self.rolling_timestamp = None
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        if self.time_index.keys:
            self.max_timestamp = self.time_index.keys[-1]
            self.offset_of_max_timestamp = self.time_index.values[-1]
        if self.size >= BATCH_HEADER_SIZE:
            self.rolling_timestamp = read_batch_header(self.log.pread(0, BATCH_HEADER_SIZE)).max_timestamp
        start = self.offset_index.last_position()
        self._bytes_since_index = 0
        if self.offset_index.keys:
            self.next_offset = self.offset_index.keys[-1] + 1
        for pos, h in self.scan(start):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.last_offset
            self._bytes_since_index += h.total_size
            self.next_offset = h.next_offset

    def open_indexes(self) -> bool:
        """Load both index files; False if either is missing or fails the sanity check."""
        ok_o = self.offset_index.load()
        ok_t = self.time_index.load()
        if not (ok_o and ok_t):
            return self.size == 0 and not self.offset_index.keys
        if self.offset_index.keys and (self.offset_index.values[-1] >= max(self.size, 1)):
            return False
        return True

    def recover(self, min_offset: int | None = None) -> int:
        """Validate every batch (length, CRC-32C, offsets increasing and within this segment),
        rebuild both indexes, cut the file at the first invalid byte. Returns the bytes cut."""
        self.offset_index.reset()
        self.time_index.reset()
        self.size = self.log.size()
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        self.rolling_timestamp = None
        self._bytes_since_index = 0
        expected = self.base_offset if min_offset is None else max(self.base_offset, min_offset)
        pos, chunk, cpos = 0, b"", 0
        valid_end = 0
        while pos < self.size:
            if pos + BATCH_HEADER_SIZE > cpos + len(chunk):
                cpos, chunk = pos, self.log.pread(pos, min(_RECOVER_CHUNK, self.size - pos))
            try:
                h = read_batch_header(chunk, pos - cpos)
                if pos + h.total_size > cpos + len(chunk):
                    cpos, chunk = pos, self.log.pread(pos, max(h.total_size, min(_RECOVER_CHUNK, self.size - pos)))
                validate_batch(chunk, pos - cpos)
            except DecodeError:
                break
            if h.base_offset < expected or not self.can_hold(h.last_offset) or h.last_offset_delta < 0:
                break
            self._track(pos, h)
            expected = h.next_offset
            pos += h.total_size
            valid_end = pos
        cut = self.size - valid_end
        if cut:
            self.log.truncate(valid_end)
            self.size = valid_end
        return cut

    # -- files --------------------------------------------------------------------------------
    def flush(self) -> None:
        self.log.fsync()
        self.offset_index.flush()
        self.time_index.flush()

    def change_suffix(self, new_suffix: str) -> None:
        stem = self.fs.join(self.directory, segment_name(self.base_offset))
        new_log = stem + LOG_SUFFIX + new_suffix
        self.fs.rename(self.log_path, new_log)
        self.log_path = new_log
        self.offset_index.rename(stem + INDEX_SUFFIX + new_suffix)
        self.time_index.rename(stem + TIMEINDEX_SUFFIX + new_suffix)
        self.suffix = new_suffix

    def close(self) -> None:
        self.log.close()
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        """Rename the files to .deleted (so a crash leaves a recognisable leftover), then remove."""
        self.close()
        self.change_suffix(DELETED_SUFFIX)
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            if self.fs.exists(path):
                self.fs.remove(path)
