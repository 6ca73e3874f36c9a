"""The filesystem seam: every file operation of kohort.storage goes through a `FileSystem`.

Two implementations live here:

* `OsFileSystem` — the real thing (os.open with O_APPEND / os.write / os.fsync / os.replace ...).
* `MemoryFileSystem` — files held in memory. It backs the in-memory storage engine and it models
  the page cache: each file keeps the bytes written (`data`) apart from the bytes made durable by
  `fsync` (`durable`), so `crash()` can simulate a machine crash that loses everything not yet
  fsynced, while a process kill (just dropping the Storage object) loses nothing.

`FileSlice` is a byte range of a file read only when sent (Fetch answers served with sendfile).

Tests subclass either one to inject faults (torn writes, failing fsyncs). Paths are plain `str`s,
joined with `join()`; a FileSystem never interprets file contents.
"""
from __future__ import annotations

import json
import os
import posixpath
import tempfile
import threading

from kohort.protocol.records import ExternalRecords


class FileHandle:
    """An open file: positional reads, appends at the end, truncate, fsync."""

    def size(self) -> int:
        raise NotImplementedError

    def pread(self, pos: int, n: int) -> bytes:
        raise NotImplementedError

    def append(self, data) -> None:
        """Write all of `data` at the end of the file (page cache; not durable until fsync)."""
        raise NotImplementedError

    def truncate(self, size: int) -> None:
        raise NotImplementedError

    def fsync(self) -> None:
        raise NotImplementedError

    def datasync(self) -> None:
        """Make the file's bytes (and its size) durable; what the group commit calls. The default
        is fsync(); the OS handle uses fdatasync, which skips metadata not needed to read the data
        back (timestamps) but always includes a changed file size."""
        self.fsync()

    def start_writeback(self, offset: int, length: int) -> None:
        """Start writing the given bytes to the disk without waiting (a hint: the next datasync has
        less left to do). The default does nothing."""

    def dup(self) -> "FileHandle":
        """A second handle on the same open file, closable independently (used to fsync from
        another thread while the log may close or delete the segment)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class FileSlice(ExternalRecords):
    """`size` bytes at `position` of a file, read only when sent: the broker's writer
    hands them to sendfile when the handle has a file descriptor (`fileno()`), else calls `read()`.
    It holds a handle of its own (FileHandle.dup), so its bytes stay readable after the segment is
    closed or deleted; `close()` (or garbage collection) lets the handle go."""

    __slots__ = ("handle", "position")

    def __init__(self, handle: FileHandle, position: int, size: int):
        super().__init__(size)
        self.handle = handle
        self.position = position

    def read(self) -> bytes:
        return self.handle.pread(self.position, self.size)

    def fileno(self) -> int:
        fd = getattr(self.handle, "fd", None)
        if fd is None or fd < 0:
            raise OSError("no file descriptor (in-memory file or closed)")
        return fd

    def close(self) -> None:
        h, self.handle = self.handle, None
        if h is not None:
            h.close()

    def __del__(self):
        self.close()


class FileSystem:
    """The operations kohort.storage needs. Subclass to inject faults."""

    def join(self, *parts: str) -> str:
        return posixpath.join(*parts)

    def open(self, path: str, create: bool = True) -> FileHandle:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def isdir(self, path: str) -> bool:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str]:
        raise NotImplementedError

    def makedirs(self, path: str) -> None:
        raise NotImplementedError

    def rename(self, src: str, dst: str) -> None:
        """Atomic rename, replacing `dst` if it exists."""
        raise NotImplementedError

    def remove(self, path: str) -> None:
        raise NotImplementedError

    def rmtree(self, path: str) -> None:
        raise NotImplementedError

    def fsync_dir(self, path: str) -> None:
        raise NotImplementedError

    # -- helpers built on the primitives above --------------------------------------------------

    def read_file(self, path: str) -> bytes:
        h = self.open(path, create=False)
        try:
            return h.pread(0, h.size())
        finally:
            h.close()

    def write_file_atomic(self, path: str, data: bytes, sync_dir: bool = True) -> None:
        """Write `data` to `path` via a fsynced temporary file and an atomic rename; the directory is
        fsynced too unless the caller does that itself after more changes in it (`sync_dir=False`)."""
        tmp = path + ".tmp"
        h = self.open(tmp)
        try:
            h.truncate(0)
            h.append(data)
            h.fsync()
        finally:
            h.close()
        self.rename(tmp, path)
        if sync_dir:
            self.fsync_dir(posixpath.dirname(path) or ".")


def write_json_atomic(path: str, data, mode: int | None = None) -> None:
    """Durably replace the small JSON file `path` (the broker's SCRAM credentials, ACLs): a fsynced
    temporary file in the same directory (`mode` set before it becomes visible), an atomic rename, the
    directory fsynced. A crash leaves the old file or the new one, never a torn one."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + "-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# ---------------------------------------------------------------------------------------------
# The real filesystem


def _keep_size_fallocate():
    """fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length) from the C library, or None where there
    is none (not Linux): blocks are reserved past the end of the file without changing its size."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.fallocate
    except (ImportError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return lambda fd, offset, length: fn(fd, 1, offset, length)


_FALLOCATE = _keep_size_fallocate() if hasattr(os, "posix_fallocate") else None


def _sync_file_range_write():
    """sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) from the C library, or None where
    there is none (not Linux): starts writeback of a file's dirty pages in that range, no waiting."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
    except (ImportError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return lambda fd, offset, length: fn(fd, offset, length, 2)


_WRITEBACK = _sync_file_range_write()
# With log.flush.policy=fsync-before-ack, a file opened by an OsFileSystem(writeback_min=WRITEBACK_MIN)
# starts the writeback of its appends every WRITEBACK_MIN bytes: the disk writes them while the
# broker waits for the running group-commit round, and the next round's fdatasync has only the rest
# and the cache flush to wait for (a round with 2-3 MB appended took ~3 ms, ~1 ms kicked ahead here).
# The call costs ~30-60 µs on the appending thread, so small appends share one.
WRITEBACK_MIN = 256 * 1024
PREALLOC_MIN = 256 * 1024       # appends at least this large reserve blocks ahead of them ...
PREALLOC_AHEAD = 4              # ... for this many more appends of their size ...
PREALLOC_MAX = 8 << 20          # ... at most this many bytes: a write into blocks already reserved
                                # skips the filesystem's per-page block reservation (ext4 delayed
                                # allocation), about 30% of the kernel time of a 1 MB write


class OsFileHandle(FileHandle):
    """An open file. Large appends reserve the blocks of the next few ahead of the end
    (fallocate with FALLOC_FL_KEEP_SIZE: the size, reads and recovery see nothing of it); truncate()
    and close() give back what was reserved past the end. With `writeback_min` > 0, appends start
    their writeback (start_writeback) each time that many bytes have been appended since the last."""
    __slots__ = ("fd", "path", "reserved", "writeback_min", "unsent")

    def __init__(self, fd: int, path: str, writeback_min: int = 0):
        self.fd = fd
        self.path = path
        self.reserved = 0           # end of the blocks reserved by appends (0: none)
        self.writeback_min = writeback_min
        self.unsent = 0             # bytes appended since the last start_writeback

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def pread(self, pos: int, n: int) -> bytes:
        out = os.pread(self.fd, n, pos)
        if len(out) < n:  # pread may return short reads only at EOF for regular files
            rest = n - len(out)
            while rest > 0:
                more = os.pread(self.fd, rest, pos + len(out))
                if not more:
                    break
                out += more
                rest -= len(more)
        return out

    def append(self, data) -> None:
        # the file is opened O_APPEND: every write lands at the current end, no fstat needed
        # (but for a large one, to reserve blocks ahead); a regular file takes the whole buffer
        # in one write, a short write is continued
        size = len(data)
        if size >= PREALLOC_MIN and _FALLOCATE is not None:
            end = os.fstat(self.fd).st_size + size
            if end > self.reserved:
                ahead = min(PREALLOC_MAX, PREALLOC_AHEAD * size)
                # ENOSPC or a filesystem without fallocate: the write below goes as it would anyway
                if _FALLOCATE(self.fd, end - size, size + ahead) == 0:
                    self.reserved = end + ahead
        n = os.write(self.fd, data)
        if n < len(data):
            view = memoryview(data)[n:]
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        if self.writeback_min:
            self.unsent += size
            if self.unsent >= self.writeback_min:
                # O_APPEND: after the write the file offset is the end of the file
                self.start_writeback(os.lseek(self.fd, 0, os.SEEK_CUR) - self.unsent, self.unsent)
                self.unsent = 0

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)     # also frees blocks reserved past the new end
        self.reserved = 0
        self.unsent = 0

    def start_writeback(self, offset: int, length: int) -> None:
        # errors are left to the datasync that follows (the bytes are in the page cache either way)
        if _WRITEBACK is not None:
            _WRITEBACK(self.fd, offset, length)

    def fsync(self) -> None:
        os.fsync(self.fd)

    def datasync(self) -> None:
        os.fdatasync(self.fd)

    def dup(self) -> "OsFileHandle":
        return OsFileHandle(os.dup(self.fd), self.path)

    def close(self) -> None:
        if self.fd >= 0:
            if self.reserved:           # blocks reserved past the end go back
                try:
                    os.ftruncate(self.fd, os.fstat(self.fd).st_size)
                except OSError:
                    pass
            os.close(self.fd)
            self.fd = -1


class OsFileSystem(FileSystem):
    """The real filesystem. `writeback_min`: what every file it opens starts its writeback after
    (see WRITEBACK_MIN; 0: never, the kernel writes back when it likes)."""

    def __init__(self, writeback_min: int = 0):
        self.writeback_min = writeback_min

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def open(self, path: str, create: bool = True) -> OsFileHandle:
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        return OsFileHandle(os.open(path, flags, 0o644), path, self.writeback_min)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def rmtree(self, path: str) -> None:
        for root, dirs, files in os.walk(path, topdown=False):
            for f in files:
                os.remove(os.path.join(root, f))
            for d in dirs:
                os.rmdir(os.path.join(root, d))
        os.rmdir(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------------------------
# Files in memory, with a page-cache model


class _MemFile:
    __slots__ = ("data", "durable")

    def __init__(self):
        self.data = bytearray()      # what readers see (page cache)
        self.durable = bytearray()   # what survives a machine crash


class MemoryFileHandle(FileHandle):
    __slots__ = ("fs", "file", "closed")

    def __init__(self, fs: "MemoryFileSystem", file: _MemFile):
        self.fs = fs
        self.file = file
        self.closed = False

    def _check(self):
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def size(self) -> int:
        self._check()
        return len(self.file.data)

    def pread(self, pos: int, n: int) -> bytes:
        self._check()
        return bytes(self.file.data[pos:pos + n])

    def append(self, data) -> None:
        self._check()
        with self.fs.lock:
            self.file.data += data

    def truncate(self, size: int) -> None:
        self._check()
        with self.fs.lock:
            d = self.file.data
            if size < len(d):
                del d[size:]
            else:
                d += bytes(size - len(d))

    def fsync(self) -> None:
        self._check()
        with self.fs.lock:
            self.file.durable = bytearray(self.file.data)
            self.fs.fsync_count += 1

    def dup(self) -> "MemoryFileHandle":
        self._check()
        return MemoryFileHandle(self.fs, self.file)

    def close(self) -> None:
        self.closed = True


class MemoryFileSystem(FileSystem):
    """Files and directories in memory. Directory entries (create/rename/remove) are treated as
    durable at once (a journaling filesystem's metadata, simplified); file *contents* are durable
    only after fsync. `crash()` drops every non-durable byte."""

    def __init__(self):
        self.lock = threading.RLock()
        self.files: dict[str, _MemFile] = {}
        self.dirs: set[str] = {"/"}
        self.fsync_count = 0

    @staticmethod
    def _norm(path: str) -> str:
        return posixpath.normpath("/" + path)

    def open(self, path: str, create: bool = True) -> MemoryFileHandle:
        p = self._norm(path)
        with self.lock:
            f = self.files.get(p)
            if f is None:
                if not create:
                    raise FileNotFoundError(path)
                if posixpath.dirname(p) not in self.dirs:
                    raise FileNotFoundError(posixpath.dirname(p))
                f = self.files[p] = _MemFile()
            return MemoryFileHandle(self, f)

    def exists(self, path: str) -> bool:
        p = self._norm(path)
        return p in self.files or p in self.dirs

    def isdir(self, path: str) -> bool:
        return self._norm(path) in self.dirs

    def listdir(self, path: str) -> list[str]:
        p = self._norm(path)
        if p not in self.dirs:
            raise FileNotFoundError(path)
        with self.lock:
            names = {posixpath.basename(q) for q in list(self.files) + list(self.dirs)
                     if q != p and posixpath.dirname(q) == p}
        return sorted(names)

    def makedirs(self, path: str) -> None:
        p = self._norm(path)
        with self.lock:
            while p not in self.dirs:
                self.dirs.add(p)
                p = posixpath.dirname(p)

    def rename(self, src: str, dst: str) -> None:
        s, d = self._norm(src), self._norm(dst)
        with self.lock:
            if s in self.files:
                self.files[d] = self.files.pop(s)
            elif s in self.dirs:
                prefix = s + "/"
                self.dirs.discard(s)
                self.dirs.add(d)
                for q in [q for q in self.dirs if q.startswith(prefix)]:
                    self.dirs.discard(q)
                    self.dirs.add(d + q[len(s):])
                for q in [q for q in self.files if q.startswith(prefix)]:
                    self.files[d + q[len(s):]] = self.files.pop(q)
            else:
                raise FileNotFoundError(src)

    def remove(self, path: str) -> None:
        with self.lock:
            if self.files.pop(self._norm(path), None) is None:
                raise FileNotFoundError(path)

    def rmtree(self, path: str) -> None:
        p = self._norm(path)
        prefix = p + "/"
        with self.lock:
            for q in [q for q in self.files if q.startswith(prefix)]:
                del self.files[q]
            for q in [q for q in self.dirs if q.startswith(prefix) or q == p]:
                self.dirs.discard(q)

    def fsync_dir(self, path: str) -> None:
        pass

    def crash(self) -> None:
        """Simulate a machine crash: every file loses the bytes written since its last fsync."""
        with self.lock:
            for f in self.files.values():
                f.data = bytearray(f.durable)
