"""kohort.storage — the broker's log behind one narrow interface.

    storage = Storage("/var/lib/kohort")            # disk engine (OsFileSystem)
    storage = MemoryStorage()                       # same engine on in-memory files (tests)
    storage.create_topic("t", 3, {"cleanup.policy": "compact"})
    log = storage.log("t", 0)
    res = log.append(batches, leader_epoch=0, now_ms=now)     # AppendResult
    await loop.run_in_executor(None, storage.sync_dirty)      # before acking acks=1/all
    data = log.read(offset, max_bytes, max_offset=log.high_watermark)

Modules: fs (filesystem seam), config (topic configs, flush policy), errors, index, segment,
epoch (leader-epoch cache), log (one partition), cleaner (compaction), storage (topics, checkpoints,
group commit). Imports only kohort.protocol and kohort.errors.
"""
from kohort.storage.config import FLUSH_POLICIES, TOPIC_CONFIGS, LogConfig
from kohort.storage.epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from kohort.storage.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kohort.storage.fs import FileHandle, FileSystem, MemoryFileSystem, OsFileSystem
from kohort.storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendResult,
    Log,
)
from kohort.storage.storage import MemoryStorage, Storage, TopicInfo, validate_topic_name

__all__ = [
    "AppendResult", "CorruptRecordError", "EARLIEST_TIMESTAMP", "FLUSH_POLICIES", "FileHandle",
    "FileSystem", "InvalidConfigError", "InvalidPartitionsError", "InvalidTopicError",
    "KafkaStorageError", "LATEST_TIMESTAMP", "LogConfig", "Log", "MAX_TIMESTAMP",
    "MemoryFileSystem", "MemoryStorage", "MessageTooLargeError", "OffsetOutOfRangeError",
    "OsFileSystem", "Storage", "StorageError", "TOPIC_CONFIGS", "TopicAlreadyExistsError",
    "TopicInfo", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "UnknownTopicOrPartitionError",
    "validate_topic_name",
]
