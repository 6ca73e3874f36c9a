"""The data-directory lock: one process at a time owns a data directory.

Kafka's LogManager locks every log directory with a `.lock` file (an exclusive OS file lock) and
refuses to start when another process holds it; two brokers writing one log would each believe
they own its offsets, and what one acknowledged the other overwrites. kohort does the same:
`DataDirLock(path)` creates `<path>/.lock`, takes `fcntl.flock(LOCK_EX | LOCK_NB)` on it and keeps
the file open until `release()`. The OS drops the lock when the process dies (SIGKILL included), so a
crash never leaves a stale lock behind; the file itself stays and means nothing on its own.
"""
from __future__ import annotations

import errno
import fcntl
import os

from kohort.storage.errors import KafkaStorageError

LOCK_FILE = ".lock"


class DataDirLockedError(KafkaStorageError):
    """Another process (or another Storage in this one) holds the data directory's lock."""


class DataDirLock:
    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, LOCK_FILE)
        self._fd: int | None = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirLockedError(
                    f"the data directory {data_dir} is in use by another broker process "
                    f"(it holds the lock on {self.path}); give each broker its own --data-dir") from None
            raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)           # closing the descriptor releases the flock

    @property
    def held(self) -> bool:
        return self._fd is not None
