"""`Log`: one partition's log on a FileSystem — append, read by byte ranges, offset and time
lookups, DeleteRecords (KIP-107: moving the log start offset), truncation, rolling, retention,
recovery.

The directory `<topic>-<partition>/` holds segments named by base offset (kohort.storage.segment),
`leader-epoch-checkpoint` (kohort.storage.epoch) and `partition.metadata` (written by Storage).
Batches are stored exactly as produced; the append path patches BaseOffset and
PartitionLeaderEpoch in place (outside the CRC) and, for message.timestamp.type=LogAppendTime,
MaxTimestamp and the CRC.

Threading: every method runs on one thread (the broker's event loop) except the fsync of dirty
segments, which Storage performs on duplicated file handles from any thread under its lock; the
log only records which segments are dirty (`_dirty`) under that lock.
"""
from __future__ import annotations

import bisect
import struct
import threading
from typing import Callable, NamedTuple

from kohort.errors import DecodeError
from kohort.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    decode_batch,
    patch_base_offset,
    patch_leader_epoch,
    read_batch_header,
    set_log_append_time,
)
from kohort.storage.config import LogConfig
from kohort.storage.epoch import LeaderEpochCache
from kohort.storage.errors import (
    CorruptRecordError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from kohort.storage.fs import FileSystem
from kohort.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    Segment,
)

_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")    # BaseOffset, Length, PartitionLeaderEpoch (outside the CRC)

# ListOffsets special timestamps
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3          # KIP-734


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time: int     # -1 unless the topic uses LogAppendTime
    log_start_offset: int


_new_result = tuple.__new__


class Log:
    """One partition. Build with `Log.open(...)` (Storage does this)."""

    def __init__(self, fs: FileSystem, directory: str, topic: str, partition: int,
                 config: LogConfig, *, lock: threading.Lock | None = None,
                 on_dirty: Callable[["Log", Segment], None] | None = None):
        self.fs = fs
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[Segment] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.first_dirty_offset = 0          # the cleaner's progress (not persisted)
        self.epochs = LeaderEpochCache(fs, directory)
        self._lock = lock or threading.Lock()
        self._on_dirty = on_dirty
        self._dirty: dict[Segment, None] = {}  # segments with bytes not yet fsynced
        self._failed: Exception | None = None
        self.closed = False

    # =========================================================================================
    # opening and recovery

    @classmethod
    def open(cls, fs: FileSystem, directory: str, topic: str, partition: int, config: LogConfig,
             *, clean: bool, recovery_point: int = 0, log_start_offset: int = 0, now_ms: int = 0,
             lock: threading.Lock | None = None,
             on_dirty: Callable[["Log", Segment], None] | None = None) -> "Log":
        log = cls(fs, directory, topic, partition, config, lock=lock, on_dirty=on_dirty)
        log._load(clean, recovery_point, log_start_offset, now_ms)
        return log

    def _segment_files(self) -> dict[str, list[int]]:
        """Suffix kind -> sorted base offsets found in the directory."""
        found: dict[str, list[int]] = {}
        for name in self.fs.listdir(self.directory):
            stem, dot, rest = name.partition(".")
            if not (dot and len(stem) == 20 and stem.isdigit()):
                continue
            found.setdefault("." + rest, []).append(int(stem))
        for v in found.values():
            v.sort()
        return found

    def _load(self, clean: bool, recovery_point: int, log_start_offset: int, now_ms: int) -> None:
        fs, d = self.fs, self.directory
        files = self._segment_files()
        # 1. leftovers of interrupted deletes, compactions and atomic writes (KAFKA-6264 rules)
        changed_dir = False
        for kind, bases in files.items():
            if kind.endswith(DELETED_SUFFIX) or kind.endswith(CLEANED_SUFFIX):
                for b in bases:
                    fs.remove(fs.join(d, "%020d%s" % (b, kind)))
                    changed_dir = True
        for name in fs.listdir(d):
            if name.endswith(".tmp"):
                fs.remove(fs.join(d, name))
                changed_dir = True
        swapped: set[int] = set()
        for b in files.get(LOG_SUFFIX + SWAP_SUFFIX, []):
            swap = Segment(fs, d, b, self.config.index_interval_bytes, suffix=SWAP_SUFFIX)
            swap.recover()
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                p = fs.join(d, "%020d%s%s" % (b, suffix, SWAP_SUFFIX))
                if fs.exists(p):
                    fs.remove(p)
            if swap.empty:             # never written that way; keep the originals
                swap.close()
                fs.remove(swap.log_path)
                continue
            last = swap.next_offset - 1
            for old in self._segment_files().get(LOG_SUFFIX, []):
                if b <= old <= last:
                    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                        p = fs.join(d, "%020d%s" % (old, suffix))
                        if fs.exists(p):
                            fs.remove(p)
            swap.change_suffix("")
            swap.close()
            swapped.add(b)
        if changed_dir or files.get(LOG_SUFFIX + SWAP_SUFFIX):
            fs.fsync_dir(d)            # the removals and renames above (a new partition has none)

        # 2. open segments; recover those from the recovery point on (or all after a crash
        #    without a checkpoint), or whose indexes fail the sanity check
        bases = self._segment_files().get(LOG_SUFFIX, [])
        first_to_recover = len(bases)
        if not clean:
            first_to_recover = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        truncated = False
        segments: list[Segment] = []
        for i, b in enumerate(bases):
            seg = Segment(fs, d, b, self.config.index_interval_bytes)
            seg.created_ms = now_ms
            if truncated:              # everything after a torn/corrupt point is gone
                seg.delete()
                continue
            min_offset = segments[-1].next_offset if segments else None
            if i >= first_to_recover or b in swapped or not seg.open_indexes():
                # a cut file, or an empty segment followed by others (its bytes never reached
                # the disk), ends the valid log: everything after it is dropped
                if seg.recover(min_offset) or (seg.empty and i < len(bases) - 1):
                    truncated = True
                seg.flush()
            else:
                seg.load_stats()
            segments.append(seg)
        if not segments:
            seg = Segment(fs, d, max(log_start_offset, 0), self.config.index_interval_bytes)
            seg.created_ms = now_ms
            segments.append(seg)
            fs.fsync_dir(d)
        self.segments = segments
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
        self.first_dirty_offset = self.log_start_offset

        # 3. leader epochs: the checkpoint, plus what the recovered batches say
        self.epochs.load()
        changed = False
        for seg in segments[first_to_recover:]:
            for _, h in seg.scan():
                changed |= self.epochs.assign(h.partition_leader_epoch, h.base_offset)
        changed |= self.epochs.truncate_from_end(self.log_end_offset)
        changed |= self.epochs.truncate_from_start(self.log_start_offset)
        if changed:
            self.epochs.save()
        # everything recovered was validated and fsynced above
        self.recovery_point = self.log_end_offset

    # =========================================================================================
    # state

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """One node, no replicas: everything appended is committed."""
        return self.log_end_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def _check_usable(self) -> None:
        if self.closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")
        if self._failed is not None:
            raise KafkaStorageError(
                f"log {self.topic}-{self.partition} is offline after a disk error: {self._failed}")

    def _segment_for(self, offset: int) -> int:
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        return max(i, 0)

    def _mark_dirty(self, seg: Segment) -> None:
        on_dirty = self._on_dirty
        if on_dirty is None:
            with self._lock:
                self._dirty[seg] = None
        else:                     # Storage records the segment under the same lock (one acquisition)
            on_dirty(self, seg)

    # =========================================================================================
    # append

    def append(self, records, *, leader_epoch: int, now_ms: int,
               header: BatchHeader | None = None) -> AppendResult:
        """Append whole v2 batches (already validated by the broker: CRC, sizes, producer state).
        Offsets are assigned from the log end offset, PartitionLeaderEpoch set to `leader_epoch`.
        The bytes are written to the segment file before this returns; durability on a machine
        crash needs Storage.sync_dirty().

        `header`: `records` is exactly one batch and this is its header, already read and
        validated by the caller (the Produce path): nothing is parsed again."""
        if header is not None:
            return self._append_batch(records, header, leader_epoch, now_ms)
        self._check_usable()
        buf = bytearray(records)
        if not buf:
            raise CorruptRecordError("produce request carries no record batch")
        lat = self.config.log_append_time
        max_bytes = self.config.max_message_bytes
        next_offset = self.log_end_offset
        batches = []
        pos = 0
        while pos < len(buf):
            try:
                h = read_batch_header(buf, pos)
            except DecodeError as e:
                raise CorruptRecordError(str(e)) from None
            if pos + h.total_size > len(buf):
                raise CorruptRecordError(f"record batch at byte {pos} is truncated")
            if h.total_size > max_bytes:
                raise MessageTooLargeError(
                    f"record batch of {h.total_size} bytes exceeds max.message.bytes={max_bytes}")
            patch_base_offset(buf, pos, next_offset)
            patch_leader_epoch(buf, pos, leader_epoch)
            if lat:
                set_log_append_time(buf, pos, now_ms)
                h = read_batch_header(buf, pos)
            else:       # the patched header without parsing it again
                h = h._replace(base_offset=next_offset, partition_leader_epoch=leader_epoch)
            batches.append((pos, h))
            next_offset = h.next_offset
            pos += h.total_size
        first, last = batches[0][1], batches[-1][1]
        seg = self._maybe_roll(len(buf), first.max_timestamp, last.last_offset, now_ms)
        size_before = seg.size
        try:
            seg.append(buf, batches)
        except OSError as e:
            self._undo_write(seg, size_before, e)
            raise KafkaStorageError(f"write to {seg.log_path} failed: {e}") from e
        self._mark_dirty(seg)
        if self.epochs.assign(leader_epoch, first.base_offset):
            self.epochs.save()
        return AppendResult(first.base_offset, last.last_offset, now_ms if lat else -1,
                            self.log_start_offset)

    def _append_batch(self, records, h: BatchHeader, leader_epoch: int, now_ms: int) -> AppendResult:
        """append() of one validated batch: BaseOffset and PartitionLeaderEpoch packed in place
        (in `records` itself when it is a writable memoryview, e.g. a slice of the broker's frame
        buffer; otherwise in one copy), one write, the segment's stats and indexes updated from
        the header's fields."""
        if self.closed or self._failed is not None:
            self._check_usable()
        size = h.batch_length + LOG_OVERHEAD
        if size != len(records):
            raise CorruptRecordError(f"record batch declares {size} bytes, {len(records)} given")
        cfg = self.config
        if size > cfg.max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {size} bytes exceeds max.message.bytes={cfg.max_message_bytes}")
        if type(records) is memoryview and not records.readonly and records.c_contiguous \
                and records.format == "B":
            buf = records          # the request's own writable copy (the broker's frame): patched in place
        else:
            buf = bytearray(records)
        base = self.segments[-1].next_offset
        last = base + h.last_offset_delta
        _OFFSET_LENGTH_EPOCH.pack_into(buf, 0, base, h.batch_length, leader_epoch)
        lat = cfg.log_append_time
        if lat:
            set_log_append_time(buf, 0, now_ms)
            max_ts = now_ms
        else:
            max_ts = h.max_timestamp
        seg = self._maybe_roll(size, max_ts, last, now_ms)
        size_before = seg.size
        try:
            seg.append_batch(buf, last, max_ts)
        except OSError as e:
            self._undo_write(seg, size_before, e)
            raise KafkaStorageError(f"write to {seg.log_path} failed: {e}") from e
        self._mark_dirty(seg)
        if self.epochs.assign(leader_epoch, base):
            self.epochs.save()
        # tuple.__new__: the NamedTuple without its Python-level __new__ (once per request)
        return _new_result(AppendResult, (base, last, now_ms if lat else -1, self.log_start_offset))

    def _undo_write(self, seg: Segment, size_before: int, err: Exception) -> None:
        """A failed write may have left part of the bytes: cut them, or take the log offline."""
        try:
            seg.log.truncate(size_before)
            seg.size = size_before
        except OSError:
            self._failed = err

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int, now_ms: int) -> Segment:
        seg = self.active_segment
        if seg.empty:
            return seg
        cfg = self.config
        if seg.rolling_timestamp is not None and seg.rolling_timestamp >= 0 and max_timestamp >= 0:
            waited = max_timestamp - seg.rolling_timestamp
        else:
            waited = now_ms - seg.created_ms
        if (seg.size + size > cfg.segment_bytes or waited > cfg.segment_ms
                or not seg.can_hold(last_offset)):
            return self.roll(now_ms)
        return seg

    def roll(self, now_ms: int) -> Segment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        old = self.active_segment
        if old.empty:
            return old
        if old.max_timestamp >= 0:   # as Kafka: the closed segment's time index ends at its max
            old.time_index.append(old.max_timestamp, old.offset_of_max_timestamp)
        old.offset_index.write_pending()     # its index entries held in memory go to the files
        old.time_index.write_pending()
        seg = Segment(self.fs, self.directory, self.log_end_offset, self.config.index_interval_bytes)
        seg.created_ms = now_ms
        self.segments.append(seg)
        self.fs.fsync_dir(self.directory)
        return seg

    # =========================================================================================
    # read

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, as_slice: bool = False):
        """Whole batches from the one containing `offset`, as stored, up to `max_bytes` (the first
        batch is returned even if larger) and not starting at or beyond `max_offset` (the high
        watermark or last stable offset). Reads stop at a segment end. b"" at the log end.
        `as_slice`: a large answer comes as a FileSlice (read when sent; Segment.read_batches)."""
        self._check_usable()
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {leo}] of "
                f"{self.topic}-{self.partition}")
        limit = leo if max_offset is None else min(max_offset, leo)
        if offset >= limit:
            return b""
        for seg in self.segments[self._segment_for(offset):]:
            data = seg.read_batches(offset, max_bytes, limit, as_slice)
            if data is not None:
                return data
        return b""

    # =========================================================================================
    # lookups

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) of the first record with timestamp >= `timestamp`, or
        None if there is none. -1 = latest (log end offset), -2 = earliest (log start offset),
        -3 = the record with the greatest timestamp (KIP-734); these report timestamp -1 except -3."""
        self._check_usable()
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if timestamp == MAX_TIMESTAMP:
            return self.max_timestamp_offset()
        if timestamp < 0:
            raise ValueError(f"invalid ListOffsets timestamp {timestamp}")
        lso = self.log_start_offset
        for seg in self.segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= lso:
                continue
            at = seg.time_index.lookup(timestamp)
            start = max(seg.base_offset if at is None else at, lso)
            _, pos = seg.offset_index.lookup(start)
            for p, h in seg.scan(pos):
                if h.max_timestamp < timestamp or h.last_offset < lso:
                    continue
                _, records = decode_batch(seg.read(p, h.total_size), 0, check_crc=False)
                for r in records:
                    if r.timestamp >= timestamp and r.offset >= lso:
                        return r.offset, r.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the greatest timestamp (KIP-734)."""
        best = None
        for seg in self.segments:
            if seg.max_timestamp >= 0 and seg.next_offset > self.log_start_offset and (
                    best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        found = best.find_position(best.offset_of_max_timestamp)
        if found is None:
            return None
        p, h = found
        _, records = decode_batch(best.read(p, h.total_size), 0, check_crc=False)
        for r in records:
            if r.timestamp == best.max_timestamp and r.offset >= self.log_start_offset:
                return r.offset, r.timestamp
        return max(h.last_offset, self.log_start_offset), h.max_timestamp

    def become_leader(self, leader_epoch: int) -> None:
        """Record that `leader_epoch` starts at the log end offset, as Kafka's makeLeader does when a
        broker (re)gains leadership: OffsetForLeaderEpoch and Fetch's last_fetched_epoch check then
        know the current epoch before anything is appended in it (otherwise, after a restart, the
        broker's epoch is unknown to its logs and every Fetch naming it is OFFSET_OUT_OF_RANGE)."""
        if leader_epoch > self.epochs.latest_epoch and self.epochs.assign(leader_epoch, self.log_end_offset):
            self.epochs.save()

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101/279): (leader_epoch, end_offset), (-1, -1) if unknown."""
        return self.epochs.end_offset_for(leader_epoch, self.log_end_offset)

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    # =========================================================================================
    # DeleteRecords, truncation, retention

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: move the log start offset up to `before_offset` (the log end offset at
        most) and drop segments wholly below it. Returns the new log start offset (low watermark)."""
        self._check_usable()
        if before_offset < 0 or before_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {before_offset}: log end offset is {self.log_end_offset}")
        if before_offset > self.log_start_offset:
            self.log_start_offset = before_offset
            self.first_dirty_offset = max(self.first_dirty_offset, before_offset)
            self._delete_below_start()
            if self.epochs.truncate_from_start(before_offset):
                self.epochs.save()
        return self.log_start_offset

    def _delete_below_start(self) -> int:
        n = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._delete_segment(self.segments[0])
            n += 1
        return n

    def _delete_segment(self, seg: Segment) -> None:
        self.segments.remove(seg)
        with self._lock:
            self._dirty.pop(seg, None)
        seg.delete()

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= `offset` (the whole batch containing it, as
        Kafka does). Returns the new log end offset."""
        self._check_usable()
        if offset >= self.log_end_offset:
            return self.log_end_offset
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self._delete_segment(self.segments[-1])
        seg = self.segments[-1]
        if seg.base_offset >= offset:             # before the whole log: start afresh at offset
            self._delete_segment(seg)
            new = Segment(self.fs, self.directory, max(offset, 0), self.config.index_interval_bytes)
            self.segments.append(new)
            self.log_start_offset = new.base_offset
        else:
            found = seg.find_position(offset)
            if found is not None:
                seg.truncate_to_position(found[0])
            self._mark_dirty(seg)
        self.fs.fsync_dir(self.directory)
        leo = self.log_end_offset
        self.log_start_offset = min(self.log_start_offset, leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.first_dirty_offset = min(self.first_dirty_offset, leo)
        if self.epochs.truncate_from_end(leo):
            self.epochs.save()
        return leo

    def enforce_retention(self, now_ms: int) -> int:
        """cleanup.policy=delete: drop the oldest segments past retention.ms (by their greatest
        timestamp) or beyond retention.bytes, and any below the log start offset. Returns the
        number of segments deleted."""
        self._check_usable()
        deleted = 0
        cfg = self.config
        if cfg.delete and cfg.retention_ms >= 0:
            deleted += self._delete_leading(lambda s: now_ms - s.max_timestamp > cfg.retention_ms,
                                            now_ms)
        if cfg.delete and cfg.retention_bytes >= 0:
            excess = [self.size_in_bytes - cfg.retention_bytes]

            def over(s: Segment) -> bool:
                if excess[0] - s.size >= 0:
                    excess[0] -= s.size
                    return True
                return False
            deleted += self._delete_leading(over, now_ms)
        deleted += self._delete_below_start()
        return deleted

    def _delete_leading(self, predicate, now_ms: int) -> int:
        doomed = []
        for seg in self.segments:
            if seg.empty or not predicate(seg):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            self.roll(now_ms)          # the active segment goes too: keep an empty one at the end
        for seg in doomed:
            self._delete_segment(seg)
        if self.segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
            self.first_dirty_offset = max(self.first_dirty_offset, self.log_start_offset)
            if self.epochs.truncate_from_start(self.log_start_offset):
                self.epochs.save()
        return len(doomed)

    # =========================================================================================
    # durability

    def _take_dirty(self) -> tuple[list, int]:
        """Called by Storage under its lock: duplicated handles of the dirty segments and the log
        end offset they cover."""
        handles = [seg.log.dup() for seg in self._dirty]
        self._dirty.clear()
        return handles, self.log_end_offset

    def _restore_dirty(self) -> None:
        """A sync failed: every live segment is dirty again."""
        for seg in self.segments:
            self._dirty[seg] = None

    def flush(self) -> None:
        """fsync every segment (log and indexes) and the epoch cache; advance the recovery point."""
        with self._lock:
            self._dirty.clear()
        for seg in self.segments:
            seg.flush()
        self.recovery_point = self.log_end_offset

    def close(self) -> None:
        if self.closed:
            return
        for seg in self.segments:
            seg.close()
        self.closed = True

    def delete_files(self) -> None:
        self.close()
        self.fs.rmtree(self.directory)
