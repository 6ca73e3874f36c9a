"""A fake runtime for the pure group coordinator: fake clock, timer wheel, an in-memory
`__consumer_offsets` (a list of records) and response capture. Used by the coordinator tests."""
from __future__ import annotations

import itertools
from collections import deque

from kohort.broker.coordinator import (
    CancelTimer, CommitPartition, CoordinatorConfig, ClassicGroupCoordinator, HeartbeatParams, JoinParams,
    LeaveMember, LeaveParams, OffsetCommitParams, OffsetFetchParams, SetTimer, SyncParams,
)

PROTOCOLS = (("range", b"meta"),)


class Harness:
    def __init__(self, config: CoordinatorConfig | None = None, *, auto_store: bool = True,
                 now: int = 1_000_000, loading: bool = False, decoder=None) -> None:
        ids = itertools.count(1)
        self.c = ClassicGroupCoordinator(config, id_factory=lambda: f"u{next(ids)}",
                                  subscription_decoder=decoder, loading=loading)
        self.now = now
        self.timers: dict[tuple, int] = {}
        self.responses: dict[int, list] = {}
        self.appends: deque = deque()
        self.auto_store = auto_store
        self.log: list = []                      # stored records, in order
        self._replies = itertools.count(1)

    # -- runtime -----------------------------------------------------------------------------
    def apply(self, out):
        for r in out.responses:
            self.responses.setdefault(r.reply_to, []).append(r.result)
        for t in out.timers:
            if isinstance(t, SetTimer):
                self.timers[t.key] = t.deadline_ms
            else:
                assert isinstance(t, CancelTimer)
                self.timers.pop(t.key, None)
        self.appends.extend(out.appends)
        assert self.timers == self.c.timer_deadlines(), "runtime timer view diverged"
        if self.auto_store:
            self.store_all()
        return out

    def store_next(self, error: int = 0):
        a = self.appends.popleft()
        if not error:
            self.log.extend(a.records)
        return self.apply(self.c.on_append_done(a.token, error, self.now))

    def store_all(self, error: int = 0):
        while self.appends:
            self.store_next(error)

    def advance(self, ms: int):
        target = self.now + ms
        while True:
            due = [(d, k) for k, d in self.timers.items() if d <= target]
            if not due:
                break
            d, k = min(due, key=lambda x: x[0])
            self.now = max(self.now, d)
            del self.timers[k]
            out = self.c.fire_timer(k, self.now)
            # the coordinator dropped the key: re-sync our view before applying
            self.apply(out)
        self.now = target

    def reply(self) -> int:
        return next(self._replies)

    def result(self, r):
        got = self.responses.get(r, [])
        assert len(got) <= 1, f"reply {r} answered {len(got)} times: {got}"
        return got[0] if got else None

    # -- operations ----------------------------------------------------------------------------
    def join(self, group="g", member_id="", **kw):
        kw.setdefault("client_id", "c")
        kw.setdefault("session_timeout_ms", 10_000)
        kw.setdefault("rebalance_timeout_ms", 30_000)
        kw.setdefault("protocols", PROTOCOLS)
        r = self.reply()
        self.apply(self.c.join_group(JoinParams(group, member_id, **kw), self.now, r))
        return r

    def sync(self, group, generation, member_id, assignments=(), **kw):
        r = self.reply()
        self.apply(self.c.sync_group(SyncParams(group, generation, member_id,
                                                assignments=tuple(assignments), **kw), self.now, r))
        return r

    def heartbeat(self, group, generation, member_id, instance=None):
        r = self.reply()
        self.apply(self.c.heartbeat(HeartbeatParams(group, generation, member_id, instance), self.now, r))
        return self.result(r).error_code

    def leave(self, group, *members):
        r = self.reply()
        ms = tuple(m if isinstance(m, LeaveMember) else LeaveMember(m) for m in members)
        self.apply(self.c.leave_group(LeaveParams(group, ms), self.now, r))
        return r

    def commit(self, group, offsets: dict, generation=-1, member_id="", instance=None, **kw):
        topics = {}
        for (t, p), off in offsets.items():
            topics.setdefault(t, []).append(
                off if isinstance(off, CommitPartition) else CommitPartition(p, off))
        r = self.reply()
        self.apply(self.c.offset_commit(OffsetCommitParams(
            group, tuple((t, tuple(ps)) for t, ps in topics.items()), generation, member_id,
            instance, **kw), self.now, r))
        return r

    def commit_errors(self, r) -> dict:
        res = self.result(r)
        return None if res is None else {(t, p.partition_index): p.error_code
                                         for t, ps in res.topics for p in ps}

    def fetch(self, group, topics=None, require_stable=False) -> dict:
        r = self.reply()
        tps = None if topics is None else tuple((t, tuple(ps)) for t, ps in topics.items())
        self.apply(self.c.offset_fetch(OffsetFetchParams(group, tps, require_stable), self.now, r))
        res = self.result(r)
        assert res.error_code == 0, res
        return {(t, p.partition_index): p.committed_offset for t, ps in res.topics for p in ps}

    def group(self, gid="g"):
        return self.c.groups.get(gid)

    def join_single(self, group="g", **kw):
        """MEMBER_ID_REQUIRED round trip, then the real join; returns (reply, member_id)."""
        r0 = self.join(group, **kw)
        mid = self.result(r0).member_id
        assert self.result(r0).error_code == 79
        return self.join(group, mid, **kw), mid
