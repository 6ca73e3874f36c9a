"""Incremental fetch sessions (KIP-227): the broker side cache of what each consumer fetches.

Request (session_id, session_epoch):
  * (0, -1)  full fetch, no session;            * (0, 0)  full fetch, start a new session;
  * (id, -1) close session id, full fetch;      * (id, 0) close id and start a new one;
  * (id, n>0) incremental: n must be the epoch this session expects, else
    INVALID_FETCH_SESSION_EPOCH; an unknown id is FETCH_SESSION_ID_NOT_FOUND.
An incremental request lists only partitions whose fetch parameters changed (they are added or
updated in the cache) and `forgotten_topics_data` to drop. The response of an incremental fetch
carries only partitions with something new: records, an error, or a changed high watermark, last
stable offset or log start offset.

Pure state with the clock passed in; sessions idle longer than `idle_ms` are evicted, and at most
`max_sessions` exist (least recently used evicted first), as Kafka's FetchSessionCache.
"""
from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from dataclasses import dataclass, field

from kohort.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1


@dataclass
class CachedPartition:
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    # what the last response told the client (for change detection)
    high_watermark: int = -1
    last_stable_offset: int = -1
    sent_log_start_offset: int = -1


@dataclass
class FetchSession:
    session_id: int
    epoch: int          # the epoch the next incremental request must carry
    last_used_ms: int
    # key (topic name, partition) -> CachedPartition; ordered as the client first sent them
    partitions: "OrderedDict[tuple[str, int], CachedPartition]" = field(default_factory=OrderedDict)
    topic_ids: dict = field(default_factory=dict)   # name -> uuid, for v13+ sessions


class FetchSessionError(Exception):
    def __init__(self, code: int):
        super().__init__(ErrorCode(code).name)
        self.code = code


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= (1 << 31) - 1 else epoch + 1


class FetchSessionCache:
    def __init__(self, max_sessions: int = 1000, idle_ms: int = 120_000, seed: int | None = None):
        self.max_sessions = max_sessions
        self.idle_ms = idle_ms
        self._sessions: "OrderedDict[int, FetchSession]" = OrderedDict()
        self._rng = random.Random(seed)
        self._counter = itertools.count(1)

    def __len__(self) -> int:
        return len(self._sessions)

    def _evict(self, now_ms: int) -> None:
        for sid in [s for s, sess in self._sessions.items() if now_ms - sess.last_used_ms > self.idle_ms]:
            del self._sessions[sid]
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)

    def _new_id(self) -> int:
        while True:
            sid = self._rng.randint(1, (1 << 31) - 1)
            if sid not in self._sessions:
                return sid

    def begin(self, session_id: int, session_epoch: int, now_ms: int) -> tuple[FetchSession | None, bool]:
        """Resolve a request's session fields -> (session or None for sessionless, is_full).
        Raises FetchSessionError with the top-level error code."""
        if session_epoch == FINAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            return None, True
        if session_epoch == INITIAL_EPOCH:
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            self._evict(now_ms)
            sess = FetchSession(self._new_id(), next_epoch(INITIAL_EPOCH), now_ms)
            self._sessions[sess.session_id] = sess
            return sess, True
        sess = self._sessions.get(session_id)
        if sess is None:
            raise FetchSessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if sess.epoch != session_epoch:
            raise FetchSessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        sess.epoch = next_epoch(sess.epoch)
        sess.last_used_ms = now_ms
        self._sessions.move_to_end(session_id)
        return sess, False

    def drop(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)
