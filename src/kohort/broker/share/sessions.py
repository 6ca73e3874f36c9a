"""Share sessions on a partition leader (KIP-932), pure: the ShareFetch / ShareAcknowledge session
epochs per (group id, member id) and the partitions each session holds (Kafka's ShareSessionCache).

* Epoch 0 (ShareFetch): any old session of that key is dropped WITHOUT releasing its records, and a
  new one is made holding the request's partitions, expecting epoch 1. Acknowledgements on it are
  INVALID_REQUEST; a full cache (group.share.max.share.sessions) is SHARE_SESSION_LIMIT_REACHED.
* Epoch n > 0 must be the session's expected epoch (INVALID_SHARE_SESSION_EPOCH; no session:
  SHARE_SESSION_NOT_FOUND); a ShareFetch adds its Topics and removes its ForgottenTopicsData; the
  next expected epoch is n + 1 (after Integer.MAX_VALUE: 1). Every partition of the session is fetched.
* Epoch -1 (either RPC) closes the session after the acknowledgements are applied: the caller then
  releases what the member holds (`release` in the result). ShareAcknowledge at epoch 0 is
  INVALID_SHARE_SESSION_EPOCH.
* A connection closing ends the sessions opened on it and releases their members' records.
"""
from __future__ import annotations

import uuid as _uuid
from dataclasses import dataclass, field
from typing import Hashable, Iterable

from kohort.errors import ErrorCode

TopicIdPartition = tuple[_uuid.UUID, int]
SessionKey = tuple[str, str]                 # (group id, member id)
INT32_MAX = (1 << 31) - 1


@dataclass
class ShareSession:
    key: SessionKey
    epoch: int                                # the epoch the next request must carry
    partitions: set[TopicIdPartition] = field(default_factory=set)
    connection: Hashable = None


@dataclass
class SessionResult:
    error: ErrorCode | None
    partitions: frozenset[TopicIdPartition] = frozenset()     # what to fetch
    release: bool = False                                     # the session closed: release the member's records
    message: str | None = None


def _next(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2000):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def fetch(self, group_id: str, member_id: str, epoch: int, added: Iterable[TopicIdPartition],
              forgotten: Iterable[TopicIdPartition], has_acknowledgements: bool,
              connection: Hashable = None) -> SessionResult:
        key = (group_id, member_id)
        if epoch == 0:
            if has_acknowledgements:
                return SessionResult(ErrorCode.INVALID_REQUEST,
                                     message="acknowledgements are not allowed when opening a share session")
            self.sessions.pop(key, None)
            if len(self.sessions) >= self.max_sessions:
                return SessionResult(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                                     message=f"the broker holds {len(self.sessions)} share sessions")
            s = ShareSession(key, 1, set(added), connection)
            self.sessions[key] = s
            return SessionResult(None, frozenset(s.partitions))
        s = self.sessions.get(key)
        if s is None:
            return SessionResult(ErrorCode.SHARE_SESSION_NOT_FOUND, message=f"no share session for {key}")
        if epoch == -1:
            del self.sessions[key]
            return SessionResult(None, release=True)
        if epoch != s.epoch:
            return SessionResult(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                 message=f"share session epoch {epoch}, expected {s.epoch}")
        s.partitions |= set(added)
        s.partitions -= set(forgotten)
        s.epoch = _next(epoch)
        return SessionResult(None, frozenset(s.partitions))

    def acknowledge(self, group_id: str, member_id: str, epoch: int) -> SessionResult:
        key = (group_id, member_id)
        if epoch == 0:
            return SessionResult(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                 message="ShareAcknowledge cannot open a share session")
        s = self.sessions.get(key)
        if s is None:
            return SessionResult(ErrorCode.SHARE_SESSION_NOT_FOUND, message=f"no share session for {key}")
        if epoch == -1:
            del self.sessions[key]
            return SessionResult(None, release=True)
        if epoch != s.epoch:
            return SessionResult(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                 message=f"share session epoch {epoch}, expected {s.epoch}")
        s.epoch = _next(epoch)
        return SessionResult(None, frozenset(s.partitions))

    def connection_closed(self, connection: Hashable) -> list[SessionKey]:
        """The sessions opened on `connection` end: their members' records are to be released."""
        gone = [k for k, s in self.sessions.items() if s.connection == connection]
        for k in gone:
            del self.sessions[k]
        return gone

    def has_sessions(self, group_id: str) -> bool:
        """False once a group has no session left (its share partitions may then be evicted)."""
        return any(k[0] == group_id for k in self.sessions)
