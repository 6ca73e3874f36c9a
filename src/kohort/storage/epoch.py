"""The leader-epoch cache of one partition (Kafka's LeaderEpochFileCache), for
OffsetForLeaderEpoch (KIP-101, KIP-279) and for fencing fetches by leader epoch (KIP-320).

Entries are (epoch, start_offset), both strictly increasing. The file `leader-epoch-checkpoint`
uses Kafka's text layout: a version line "0", a count line, then "epoch start_offset" lines.
"""
from __future__ import annotations

import bisect

from kohort.storage.fs import FileSystem

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    FILE = "leader-epoch-checkpoint"

    def __init__(self, fs: FileSystem, directory: str):
        self.fs = fs
        self.path = fs.join(directory, self.FILE)
        self.entries: list[tuple[int, int]] = []

    def load(self) -> None:
        self.entries = []
        if not self.fs.exists(self.path):
            return
        lines = self.fs.read_file(self.path).decode().split("\n")
        try:
            count = int(lines[1])
            entries = [tuple(int(x) for x in line.split()) for line in lines[2:2 + count]]
        except (ValueError, IndexError):
            return  # a damaged cache is rebuilt from the batches during recovery
        self.entries = [(e, o) for e, o in entries]

    def save(self) -> None:
        body = "0\n%d\n" % len(self.entries) + "".join("%d %d\n" % e for e in self.entries)
        self.fs.write_file_atomic(self.path, body.encode())

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` if it is newer than the latest; True if the
        cache changed (the caller saves it)."""
        if epoch < 0:
            return False
        if self.entries and epoch <= self.entries[-1][0]:
            return False
        # a new epoch starting at or before existing entries replaces them (truncated divergence)
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(leader_epoch, end_offset) for OffsetForLeaderEpoch: the end offset of the largest
        epoch <= `requested_epoch`, i.e. the start offset of the first epoch after it; the log end
        offset for the latest epoch; (-1, -1) when unknown."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.entries[-1][0]:
            return requested_epoch, log_end_offset
        epochs = [e for e, _ in self.entries]
        hi = bisect.bisect_right(epochs, requested_epoch)
        if hi >= len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET   # newer than anything we know
        higher_start = self.entries[hi][1]
        if hi == 0:
            return requested_epoch, higher_start              # older than the first epoch
        return self.entries[hi - 1][0], higher_start

    def epoch_for_offset(self, offset: int) -> int:
        starts = [o for _, o in self.entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self.entries[i][0] if i >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop epochs starting at or after `end_offset` (the log was truncated there)."""
        n = len(self.entries)
        self.entries = [(e, o) for e, o in self.entries if o < end_offset]
        return len(self.entries) != n

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: drop epochs wholly before it and move the start of
        the one containing it up to it."""
        keep = [(e, o) for e, o in self.entries if o >= start_offset]
        older = [(e, o) for e, o in self.entries if o < start_offset]
        if older and (not keep or keep[0][1] > start_offset):
            keep.insert(0, (older[-1][0], start_offset))
        changed = keep != self.entries
        self.entries = keep
        return changed
