"""`Storage`: the broker's view of its logs — topics, partitions, per-topic configs, checkpoints,
clean shutdown, and the group-commit fsync.

Layout of a data directory (Kafka's names where Kafka has one):

    <data_dir>/
      .lock                           held (flock) by the one process that has the directory open
      .kohort_cleanshutdown           present only between a clean close() and the next open
      recovery-point-offset-checkpoint   "0", count, "topic partition offset" lines
      log-start-offset-checkpoint        same layout
      <topic>-<partition>/
        partition.metadata            JSON: version, topic, partition, topic_id (UUID), configs
        leader-epoch-checkpoint
        00000000000000000000.log / .index / .timeindex ...
      <topic>-<partition>.<hex>-delete/   a deleted partition not yet removed (removed at open)

Durability (`log.flush.policy`, see kohort.storage.config): appends are write()s. With
"fsync-before-ack" the broker calls `sync_dirty()` (blocking; run it in an executor thread) before
acknowledging acks=1/all: it fdatasyncs every segment written since the last sync (several files at
once on a few threads), once, for all callers waiting at that moment — a caller arriving while an
fsync is running waits for it and, if its own writes came after that fsync started, for the next one
(group commit). With "os", `sync_dirty()` returns at once and only `checkpoint()`/`close()` fsync.
A caller that datasyncs on its own threads (the broker's native worker) takes a round instead:
`begin_sync_round()` hands over the dirty segments' handles without blocking, `end_sync_round()`
records the outcome; both share sync_dirty's bookkeeping, so the two ways mix.

If an fsync fails the storage refuses every later `sync_dirty()` (KafkaStorageError): after a
failed fsync the kernel may have dropped the dirty pages, so a retry could report success for
data that is gone.

On a real disk (OsFileSystem) the directory is locked before anything in it is read or written
(kohort.storage.lock, Kafka's `.lock`): a second Storage on the same directory, in this process or
another, raises DataDirLockedError; close() releases the lock.

`MemoryStorage` is the same engine on a MemoryFileSystem: the in-memory engine for broker unit
tests, whose `fs.crash()` simulates a machine crash.
"""
from __future__ import annotations

import json
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, NamedTuple

from kohort.storage.cleaner import compact
from kohort.storage.config import (
    DEFAULT_FLUSH_POLICY,
    TOPIC_CONFIGS,
    LogConfig,
    check_flush_policy,
    validate_name,
)
from kohort.storage.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kohort.storage.fs import WRITEBACK_MIN, FileSystem, MemoryFileSystem, OsFileSystem
from kohort.storage.lock import DataDirLock
from kohort.storage.log import Log
from kohort.storage.segment import LOG_SUFFIX

CLEAN_SHUTDOWN_FILE = ".kohort_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"

_SYNC_THREADS = 4       # files datasynced at once in one group-commit round
_CREATE_THREADS = 8     # partitions created at once by CreateTopics / CreatePartitions on a real disk
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249


def validate_topic_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'")


class TopicInfo(NamedTuple):
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    config: LogConfig


class _Topic:
    __slots__ = ("name", "topic_id", "overrides", "config", "logs")

    def __init__(self, name: str, topic_id: uuid.UUID, overrides: dict, config: LogConfig):
        self.name = name
        self.topic_id = topic_id
        self.overrides = overrides
        self.config = config
        self.logs: list[Log] = []


def _read_checkpoint(fs: FileSystem, path: str) -> dict[tuple[str, int], int]:
    if not fs.exists(path):
        return {}
    try:
        lines = fs.read_file(path).decode().split("\n")
        count = int(lines[1])
        out = {}
        for line in lines[2:2 + count]:
            topic, part, off = line.rsplit(" ", 2)
            out[(topic, int(part))] = int(off)
        return out
    except (ValueError, IndexError, UnicodeDecodeError):
        return {}   # a damaged checkpoint only means more recovery work


def _write_checkpoint(fs: FileSystem, path: str, entries: dict[tuple[str, int], int]) -> None:
    body = "0\n%d\n" % len(entries) + "".join(
        "%s %d %d\n" % (t, p, o) for (t, p), o in sorted(entries.items()))
    fs.write_file_atomic(path, body.encode())


class SyncRound:
    """One group-commit round: the write sequence it covers, the duplicated handles of the dirty
    segments to datasync (the round owns and closes them), and each log with the end offset that
    becomes its recovery point. `taken`: the round holds the storage's one running-round slot
    (false for the empty round of "everything is already durable")."""

    __slots__ = ("seq", "handles", "work", "taken")

    def __init__(self, seq: int, handles: list, work: list, taken: bool = True) -> None:
        self.seq = seq
        self.handles = handles
        self.work = work
        self.taken = taken


def _file_size(fs: FileSystem, path: str) -> int:
    h = fs.open(path, create=False)
    try:
        return h.size()
    finally:
        h.close()


class Storage:
    """All logs of one broker in one data directory."""

    def __init__(self, data_dir: str, *, fs: FileSystem | None = None,
                 flush_policy: str = DEFAULT_FLUSH_POLICY, topic_defaults: dict | None = None,
                 now_ms: int | None = None):
        self.flush_policy = check_flush_policy(flush_policy)
        # fsync-before-ack: appends start their writeback early, so each round's fdatasync waits less
        self.fs = fs or OsFileSystem(
            writeback_min=WRITEBACK_MIN if self.flush_policy == "fsync-before-ack" else 0)
        self.close_error: Exception | None = None       # what made close() skip the clean-shutdown marker
        self.data_dir = data_dir
        for name in topic_defaults or {}:
            validate_name(name)
        self.topic_defaults = dict(topic_defaults or {})
        LogConfig.from_overrides(self.topic_defaults)
        self._topics: dict[str, _Topic] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        # group commit state
        # one lock for the group-commit state and every log's dirty segments: taken directly on the
        # hot paths (an append, a round's start and end), through the condition only by a blocking
        # sync_dirty that waits for a running round (`_blocked` counts those, so a round's end
        # notifies only when someone waits)
        self._mutex = threading.Lock()
        self._cv = threading.Condition(self._mutex)
        self._blocked = 0
        self._write_seq = 0
        self._synced_seq = 0
        self._round_thread: int | None = None   # the thread ending a begin_sync_round round
        self._syncing = False
        self._dirty_logs: dict[Log, None] = {}
        self._sync_error: BaseException | None = None
        self._sync_pool: ThreadPoolExecutor | None = None   # started when a round has 2+ files
        self.fsyncs = 0               # number of group fsync rounds done (for tests and metrics)
        self.closed = False
        self._lock: DataDirLock | None = None
        if isinstance(self.fs, OsFileSystem):
            self.fs.makedirs(self.data_dir)
            self._lock = DataDirLock(self.data_dir)
        try:
            self._open(int(time.time() * 1000) if now_ms is None else now_ms)
        except BaseException:
            self._release_lock()
            raise

    def _release_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    # =========================================================================================
    # open / close

    def _path(self, *parts: str) -> str:
        return self.fs.join(self.data_dir, *parts)

    def _open(self, now_ms: int) -> None:
        fs = self.fs
        fs.makedirs(self.data_dir)
        marker = self._path(CLEAN_SHUTDOWN_FILE)
        clean = fs.exists(marker)
        recovery = _read_checkpoint(fs, self._path(RECOVERY_POINT_FILE))
        starts = _read_checkpoint(fs, self._path(LOG_START_OFFSET_FILE))
        partitions: dict[str, list[tuple[int, str, dict]]] = {}
        for name in fs.listdir(self.data_dir):
            path = self._path(name)
            if not fs.isdir(path):
                continue
            if name.endswith("-delete"):
                fs.rmtree(path)
                continue
            topic, dash, part = name.rpartition("-")
            if not dash or not part.isdigit():
                continue
            meta_path = fs.join(path, PARTITION_METADATA_FILE)
            if not fs.exists(meta_path):
                # a creation interrupted before its metadata was written holds no data
                fs.rmtree(path)
                continue
            try:
                meta = json.loads(fs.read_file(meta_path))
            except (ValueError, UnicodeDecodeError) as e:
                raise KafkaStorageError(f"{meta_path} is unreadable: {e}") from None
            partitions.setdefault(topic, []).append((int(part), path, meta))
        for topic, parts in sorted(partitions.items()):
            parts.sort()
            parts = self._drop_interrupted_creation(topic, parts)
            if not parts:                # partition 0 itself never reached the disk
                continue
            meta0 = parts[0][2]
            t = self._new_topic(topic, uuid.UUID(meta0["topic_id"]), meta0.get("configs", {}))
            for p, path, _ in parts:
                t.logs.append(Log.open(
                    fs, path, topic, p, t.config, clean=clean,
                    recovery_point=recovery.get((topic, p), 0),
                    log_start_offset=starts.get((topic, p), 0), now_ms=now_ms,
                    lock=self._mutex, on_dirty=self._note_dirty))
        if clean:
            fs.remove(marker)
            fs.fsync_dir(self.data_dir)
        self._write_checkpoints()

    def _drop_interrupted_creation(self, topic: str, parts: list) -> list:
        """A topic's partitions must be 0..n-1. Partitions are created several at once, so a crash
        during CreateTopics / CreatePartitions (never answered) can leave a gap: the partitions
        above it are removed if none holds a record, otherwise the directory is refused."""
        gap = next((i for i, (p, _, _) in enumerate(parts) if p != i), len(parts))
        above = parts[gap:]
        if not above:
            return parts
        fs = self.fs
        for _, path, _ in above:
            for name in fs.listdir(path):
                if name.endswith(LOG_SUFFIX) and _file_size(fs, fs.join(path, name)):
                    raise KafkaStorageError(
                        f"topic {topic} has partitions {[p for p, _, _ in parts]}")
        for _, path, _ in above:
            fs.rmtree(path)
        fs.fsync_dir(self.data_dir)
        return parts[:gap]

    def _new_topic(self, name: str, topic_id: uuid.UUID, overrides: dict) -> _Topic:
        config = LogConfig.from_overrides({**self.topic_defaults, **overrides})
        t = _Topic(name, topic_id, dict(LogConfig.from_overrides(overrides).overrides), config)
        self._topics[name] = t
        self._by_id[topic_id] = name
        return t

    def _write_checkpoints(self) -> None:
        logs = list(self.logs())
        _write_checkpoint(self.fs, self._path(RECOVERY_POINT_FILE),
                          {(l.topic, l.partition): l.recovery_point for l in logs})
        _write_checkpoint(self.fs, self._path(LOG_START_OFFSET_FILE),
                          {(l.topic, l.partition): l.log_start_offset for l in logs})

    def checkpoint(self) -> None:
        """fsync every dirty segment, then persist recovery points and log start offsets
        (Kafka's log.flush.offset.checkpoint.interval.ms job; blocking — run it in a thread)."""
        self._flush_dirty(force=True)
        self._write_checkpoints()

    def close(self) -> None:
        """Clean shutdown: flush everything, write checkpoints and the clean-shutdown marker. A disk
        error on the way (a full disk, a failing fsync) leaves the marker out, so the next start
        recovers the logs from their files; the files are closed and the lock released all the
        same, and `close_error` keeps what failed."""
        if self.closed:
            return
        try:
            for log in self.logs():
                log.flush()
            self._write_checkpoints()
        except (OSError, KafkaStorageError) as e:
            self.close_error = e
        for log in self.logs():
            log.close()
        if self.close_error is None:
            try:
                self.fs.write_file_atomic(self._path(CLEAN_SHUTDOWN_FILE), b"")
            except OSError as e:
                self.close_error = e
        self.closed = True
        with self._mutex:
            pool, self._sync_pool = self._sync_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._release_lock()

    # =========================================================================================
    # topics and partitions

    def create_topic(self, name: str, num_partitions: int, configs: dict | None = None, *,
                     topic_id: uuid.UUID | None = None, now_ms: int | None = None) -> uuid.UUID:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got {num_partitions}")
        overrides = dict(configs or {})
        LogConfig.from_overrides({**self.topic_defaults, **overrides})   # validate first
        t = self._new_topic(name, topic_id or uuid.uuid4(), overrides)
        self._add_partitions(t, num_partitions, now_ms)
        return t.topic_id

    def _add_partitions(self, t: _Topic, total: int, now_ms: int | None) -> None:
        """Create partitions len(t.logs)..total-1, each durable (its directory, partition.metadata and
        first segment fsynced) before this returns. On a real disk the partitions are created on a
        few threads at once: creating a file costs the kernel CPU (inode allocation) and each
        partition's fsyncs wait on the disk, and both overlap across partitions. If one fails, the
        partitions below the first failure are kept (a topic's partitions stay 0..n-1), those
        created beyond it are closed and removed, and the first error is raised."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        new = range(len(t.logs), total)
        if isinstance(self.fs, OsFileSystem) and len(new) > 1:
            with ThreadPoolExecutor(max_workers=min(_CREATE_THREADS, len(new)),
                                    thread_name_prefix="kohort-create") as pool:
                futures = [pool.submit(self._create_partition, t, p, now) for p in new]
            error: BaseException | None = None
            for p, f in zip(new, futures):
                e = f.exception()
                if error is None and e is None:
                    t.logs.append(f.result())
                    continue
                error = error or e
                if e is None:
                    log = f.result()
                    log.close()
                    self.fs.rmtree(log.directory)
            if error is not None:
                self.fs.fsync_dir(self.data_dir)
                raise error
        else:
            for p in new:
                t.logs.append(self._create_partition(t, p, now))
        self.fs.fsync_dir(self.data_dir)

    def _create_partition(self, t: _Topic, p: int, now_ms: int) -> Log:
        """One new partition's directory, partition.metadata and first segment, all fsynced (the
        directory once, by Log.open after it created the segment); the data directory is the
        caller's to fsync. Runs on a creation thread: it touches nothing shared."""
        path = self._path(f"{t.name}-{p}")
        self.fs.makedirs(path)
        self._write_metadata(t, p, sync_dir=False)
        return Log.open(self.fs, path, t.name, p, t.config, clean=True, now_ms=now_ms,
                        lock=self._mutex, on_dirty=self._note_dirty)

    def _write_metadata(self, t: _Topic, partition: int, sync_dir: bool = True) -> None:
        meta = {"version": 0, "topic": t.name, "partition": partition,
                "topic_id": str(t.topic_id), "configs": t.overrides}
        self.fs.write_file_atomic(self.fs.join(self._path(f"{t.name}-{partition}"),
                                               PARTITION_METADATA_FILE),
                                  json.dumps(meta, sort_keys=True).encode(), sync_dir=sync_dir)

    def create_partitions(self, name: str, total: int, *, now_ms: int | None = None) -> None:
        """CreatePartitions: grow topic `name` to `total` partitions."""
        t = self._topic(name)
        if total <= len(t.logs):
            raise InvalidPartitionsError(
                f"topic {name!r} has {len(t.logs)} partitions; the new count {total} must be larger")
        self._add_partitions(t, total, now_ms)

    def delete_topic(self, name: str) -> None:
        t = self._topic(name)
        del self._topics[name]
        self._by_id.pop(t.topic_id, None)
        with self._mutex:
            for log in t.logs:
                self._dirty_logs.pop(log, None)
        for log in t.logs:
            log.close()
            gone = self._path(f"{name}-{log.partition}.{uuid.uuid4().hex}-delete")
            self.fs.rename(log.directory, gone)
        self.fs.fsync_dir(self.data_dir)
        for log in t.logs:
            for entry in self.fs.listdir(self.data_dir):
                if entry.startswith(f"{name}-{log.partition}.") and entry.endswith("-delete"):
                    self.fs.rmtree(self._path(entry))
        self._write_checkpoints()

    def _topic(self, name: str) -> _Topic:
        t = self._topics.get(name)
        if t is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return t

    def has_topic(self, name: str) -> bool:
        return name in self._topics

    def topics(self) -> list[TopicInfo]:
        return [TopicInfo(t.name, t.topic_id, len(t.logs), t.config)
                for t in sorted(self._topics.values(), key=lambda t: t.name)]

    def topic(self, name: str) -> TopicInfo:
        t = self._topic(name)
        return TopicInfo(t.name, t.topic_id, len(t.logs), t.config)

    def topic_name(self, topic_id: uuid.UUID) -> str:
        name = self._by_id.get(topic_id)
        if name is None:
            raise UnknownTopicOrPartitionError(f"unknown topic id {topic_id}")
        return name

    def log(self, topic: str, partition: int) -> Log:
        t = self._topics.get(topic)
        if t is None or not 0 <= partition < len(t.logs):
            raise UnknownTopicOrPartitionError(f"unknown topic partition {topic}-{partition}")
        return t.logs[partition]

    def logs(self) -> Iterator[Log]:
        for t in list(self._topics.values()):
            yield from t.logs

    # =========================================================================================
    # configs

    def describe_configs(self, name: str) -> list[tuple[str, str, bool]]:
        """(name, value, is_default) for every topic config; is_default = not set on the topic."""
        t = self._topic(name)
        return [(n, v, n not in t.overrides) for n, v, _ in t.config.describe()]

    def alter_configs(self, name: str, changes: dict, *, incremental: bool = True) -> LogConfig:
        """IncrementalAlterConfigs (value None = DELETE) or, with incremental=False, AlterConfigs
        (the overrides become exactly `changes`). Validates before changing anything."""
        t = self._topic(name)
        if incremental:
            overrides = dict(t.overrides)
            for n, v in changes.items():
                validate_name(n)
                if v is None:
                    overrides.pop(n, None)
                else:
                    overrides[n] = v
        else:
            overrides = {n: v for n, v in changes.items() if v is not None}
        config = LogConfig.from_overrides({**self.topic_defaults, **overrides})
        t.overrides = dict(LogConfig.from_overrides(overrides).overrides)
        t.config = config
        for log in t.logs:
            log.config = config
            self._write_metadata(t, log.partition)
        return config

    # =========================================================================================
    # maintenance

    def run_maintenance(self, now_ms: int) -> dict:
        """Retention (delete policy) and compaction (compact policy) over every log; the broker
        calls it periodically (log.retention.check.interval.ms). Returns counters."""
        segments_deleted = bytes_compacted = 0
        for log in list(self.logs()):
            segments_deleted += log.enforce_retention(now_ms)
            bytes_compacted += compact(log, now_ms)
        if segments_deleted:
            self._write_checkpoints()
        return {"segments_deleted": segments_deleted, "bytes_compacted": bytes_compacted}

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """DeleteRecords; the new log start offset is checkpointed before returning."""
        low = self.log(topic, partition).delete_records(before_offset)
        self._write_checkpoints()
        return low

    # =========================================================================================
    # durability: group commit

    def _note_dirty(self, log: Log, segment=None) -> None:
        """An append wrote to `segment` of `log`: both are dirty until the next sync round, and the
        write sequence the round's waiters compare against moves on (one lock acquisition)."""
        with self._mutex:
            if segment is not None:
                log._dirty[segment] = None
            self._dirty_logs[log] = None
            self._write_seq += 1

    def sync_dirty(self) -> None:
        """Make every append that returned before this call durable (policy fsync-before-ack);
        concurrent callers share fsyncs. Blocking: the asyncio broker runs it in an executor.
        With policy "os" it returns at once."""
        if self.flush_policy == "os":
            return
        self._flush_dirty()

    def _flush_dirty(self, force: bool = False) -> None:
        with self._cv:
            if self._sync_error is not None:
                raise KafkaStorageError(f"an earlier fsync failed: {self._sync_error}")
            target = self._write_seq
            while self._synced_seq < target or force:
                if not self._syncing:
                    break
                if self._round_thread == threading.get_ident():
                    raise RuntimeError("a blocking sync on the thread that must end the running "
                                       "sync round (begin_sync_round) would wait forever")
                self._blocked += 1
                try:
                    self._cv.wait()
                finally:
                    self._blocked -= 1
                if self._sync_error is not None:
                    raise KafkaStorageError(f"an earlier fsync failed: {self._sync_error}")
            else:
                return
            sync_round = self._take_round()
        self.run_sync_round(sync_round)

    def run_sync_round(self, sync_round: "SyncRound") -> None:
        """Datasync a taken round's handles on this thread and end it (`end_sync_round`: raises
        KafkaStorageError when the datasync failed)."""
        error: BaseException | None = None
        try:
            self._sync_files(sync_round.handles)
        except BaseException as e:   # noqa: BLE001 - a round that did not finish syncs nothing
            error = e
        self.end_sync_round(sync_round, error)

    def begin_sync_round(self) -> "SyncRound | None":
        """The non-blocking start of a group-commit round, for a caller that datasyncs the round's
        handles itself (the broker's native fsync worker) and then calls `end_sync_round`.
        Returns None when another round is running (the caller falls back to `sync_dirty()` on a
        thread), a round with no handles when every append is already durable. Raises
        KafkaStorageError once an fsync has failed."""
        with self._mutex:
            if self._sync_error is not None:
                raise KafkaStorageError(f"an earlier fsync failed: {self._sync_error}")
            if self._syncing:
                return None
            if self._synced_seq >= self._write_seq:
                return SyncRound(self._write_seq, [], [], taken=False)
            sync_round = self._take_round()
            self._round_thread = threading.get_ident()    # the thread that ends it
            return sync_round

    def _take_round(self) -> "SyncRound":
        """Under the lock: the dirty segments' handles become the round's, the round is running."""
        self._syncing = True
        work = []
        handles = []
        for log in self._dirty_logs:
            if not log.closed:
                log_handles, leo = log._take_dirty()
                work.append((log, leo))
                handles.extend(log_handles)
        self._dirty_logs.clear()
        return SyncRound(self._write_seq, handles, work)

    def end_sync_round(self, sync_round: "SyncRound", error: BaseException | None) -> None:
        """Finish a round from `begin_sync_round` (error: its datasync's failure, if any): its
        handles are closed, and the appends it covers count as durable, or on an error every
        later sync is refused. Raises KafkaStorageError for an error."""
        for h in sync_round.handles:
            try:
                h.close()
            except OSError:
                pass
        if sync_round.taken:
            with self._mutex:
                self._syncing = False
                self._round_thread = None
                if error is None:
                    self._synced_seq = max(self._synced_seq, sync_round.seq)
                    self.fsyncs += 1
                    for log, leo in sync_round.work:
                        log.recovery_point = max(log.recovery_point, leo)
                else:
                    self._sync_error = error
                    for log, _ in sync_round.work:
                        log._restore_dirty()
                        self._dirty_logs[log] = None
                if self._blocked:
                    self._cv.notify_all()
        if error is not None:
            if not isinstance(error, Exception):
                raise error
            raise KafkaStorageError(f"fsync failed: {error}") from error

    def _sync_files(self, handles: list) -> None:
        """datasync every handle; several files are synced at once on a few threads (the
        filesystem can fold them into one journal commit), and all of them are waited for before
        the first error, if any, is raised."""
        if len(handles) <= 1:
            for h in handles:
                h.datasync()
            return
        with self._mutex:
            if self._sync_pool is None:
                self._sync_pool = ThreadPoolExecutor(max_workers=_SYNC_THREADS,
                                                     thread_name_prefix="kohort-datasync")
            pool = self._sync_pool
        futures = [pool.submit(h.datasync) for h in handles[1:]]
        first: BaseException | None = None
        try:
            handles[0].datasync()            # this thread takes one file itself
        except BaseException as e:           # noqa: BLE001 - raised below, after the others
            first = e
        for f in futures:
            e = f.exception()
            if e is not None and first is None:
                first = e
        if first is not None:
            raise first


class MemoryStorage(Storage):
    """The in-memory engine: Storage on a MemoryFileSystem (pass `fs=` to reopen the same
    files, e.g. after `fs.crash()`)."""

    def __init__(self, *, fs: MemoryFileSystem | None = None, data_dir: str = "/kohort",
                 flush_policy: str = DEFAULT_FLUSH_POLICY, topic_defaults: dict | None = None,
                 now_ms: int | None = None):
        super().__init__(data_dir, fs=fs or MemoryFileSystem(), flush_policy=flush_policy,
                         topic_defaults=topic_defaults, now_ms=now_ms)


__all__ = ["Storage", "MemoryStorage", "TopicInfo", "validate_topic_name", "TOPIC_CONFIGS"]
