"""The share-partition state machine (broker/share/partition.py) and the share coordinator's persisted
state (broker/share/state.py), with a fake clock: every transition and error, and a hypothesis rule
machine over acquisitions, acknowledgements, lock expiries, member releases and restarts (replay of
the `__share_group_state` records, through their bytes).

Invariants of the machine: a record is acquired by at most one member at a time; the delivery count
never passes the limit; the start offset never passes a record that is not ACKNOWLEDGED/ARCHIVED;
replaying the persisted records rebuilds the state (in-flight records become deliverable again); and
in the end every record is ACKNOWLEDGED or ARCHIVED."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kohort.broker.share.partition import (
    AckBatch, AcknowledgeType as T, AcquireMode, LogBatch, RecordState as S, SharePartition,
    SharePartitionConfig, StateBatch, StateWrite, validate_acknowledgement_batches,
)
from kohort.broker.share.state import ShareStateStore, WriteRefused, merge_batches
from kohort.errors import ErrorCode
from kohort.protocol import share_state_records as R

LOCK = 1000


def cfg(**kw) -> SharePartitionConfig:
    base = dict(record_lock_duration_ms=LOCK, delivery_count_limit=3, max_in_flight_records=100)
    base.update(kw)
    return SharePartitionConfig(**base)


def ranges(res) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in res.acquired]


def ack(sp, member, first, last, *types, now=0):
    return sp.acknowledge(member, [AckBatch(first, last, tuple(types))], now)


def states(sp, lo, hi):
    rs = sp.record_states()
    return [rs[o][0] for o in range(lo, hi + 1)]


LOG = [LogBatch(0, 4), LogBatch(5, 9), LogBatch(10, 14)]


# -- acquisition ---------------------------------------------------------------------------------
def test_new_records_are_acquired_with_count_one_under_a_lock():
    sp = SharePartition(0, cfg())
    res = sp.acquire("a", LOG[:1], 100, max_records=10)
    assert ranges(res) == [(0, 4, 1)] and res.write is None
    assert states(sp, 0, 4) == [S.ACQUIRED] * 5
    assert sp.next_deadline_ms() == 100 + LOCK
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (0, 4, 5)
    assert sp.in_flight_count() == 5


def test_batch_optimized_takes_whole_log_batches_record_limit_stops_exactly():
    sp = SharePartition(0, cfg())
    assert ranges(sp.acquire("a", LOG, 0, max_records=6)) == [(0, 9, 1)]        # two whole batches
    sp2 = SharePartition(0, cfg())
    assert ranges(sp2.acquire("a", LOG, 0, max_records=6, mode=AcquireMode.RECORD_LIMIT)) == [(0, 5, 1)]
    assert sp2.next_fetch_offset() == 6


def test_batch_size_splits_acquired_ranges_at_log_batch_boundaries():
    sp = SharePartition(0, cfg())
    assert ranges(sp.acquire("a", LOG, 0, max_records=100, batch_size=5)) == [(0, 4, 1), (5, 9, 1), (10, 14, 1)]
    sp2 = SharePartition(0, cfg())
    assert ranges(sp2.acquire("a", LOG, 0, max_records=100, batch_size=10)) == [(0, 9, 1), (10, 14, 1)]


def test_acquired_records_are_not_acquired_again_by_another_member():
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:1], 0, max_records=10)
    assert ranges(sp.acquire("b", LOG[:2], 0, max_records=10)) == [(5, 9, 1)]


def test_in_flight_window_stalls_until_the_start_offset_moves():
    sp = SharePartition(0, cfg(max_in_flight_records=7))
    assert ranges(sp.acquire("a", LOG, 0, max_records=100)) == [(0, 6, 1)]
    assert ranges(sp.acquire("b", [LogBatch(5, 9)], 0, max_records=100)) == []      # window full
    ack(sp, "a", 1, 6, T.ACCEPT)           # an unacknowledged record at SPSO still stalls
    assert sp.start_offset == 0
    assert ranges(sp.acquire("b", [LogBatch(5, 9)], 0, max_records=100)) == []
    ack(sp, "a", 0, 0, T.RELEASE)          # released inside the window: re-acquired
    assert sp.next_fetch_offset() == 0
    assert ranges(sp.acquire("b", LOG, 0, max_records=100)) == [(0, 0, 2)]
    ack(sp, "b", 0, 0, T.ACCEPT)
    assert sp.start_offset == 7
    assert ranges(sp.acquire("b", [LogBatch(5, 9), LogBatch(10, 14)], 0, max_records=100)) == [(7, 13, 1)]


def test_holes_past_the_cache_are_acquired_for_the_client_to_gap():
    sp = SharePartition(0, cfg())
    sp.acquire("a", [LogBatch(0, 1)], 0, max_records=10)
    # the log read from 2 returned a batch at 5 (compaction): 2-4 are acquired too and GAP-acked
    assert ranges(sp.acquire("a", [LogBatch(5, 6)], 0, max_records=10)) == [(2, 6, 1)]
    ack(sp, "a", 0, 1, T.ACCEPT)
    assert sp.acknowledge("a", [AckBatch(2, 4, (T.GAP,)), AckBatch(5, 6, (T.ACCEPT,))], 0).error is None
    assert (sp.start_offset, sp.batches()) == (7, [])


def test_read_committed_archives_aborted_ranges_read_uncommitted_does_not():
    rc = SharePartition(0, cfg(read_committed=True))
    res = rc.acquire("a", LOG[:2], 0, max_records=100, aborted=[(0, 2), (7, 7)])
    assert ranges(res) == [(3, 6, 1), (8, 9, 1)]
    assert res.write is not None and rc.start_offset == 3
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in res.write.state_batches] == [
        (7, 7, S.ARCHIVED)]
    ru = SharePartition(0, cfg())
    assert ranges(ru.acquire("a", LOG[:2], 0, max_records=100, aborted=[(0, 2)])) == [(0, 9, 1)]


def test_bad_log_batches_are_refused_and_zero_max_records_takes_nothing():
    sp = SharePartition(0, cfg())
    assert ranges(sp.acquire("a", LOG, 0, max_records=0)) == []
    with pytest.raises(ValueError):
        sp.acquire("a", [LogBatch(5, 4)], 0, max_records=1)
    with pytest.raises(ValueError):
        sp.acquire("a", [LogBatch(0, 5), LogBatch(3, 9)], 0, max_records=1)
    with pytest.raises(ValueError):
        sp.acquire("", LOG, 0, max_records=1)
    with pytest.raises(ValueError):
        SharePartition(-1)
    with pytest.raises(ValueError):
        SharePartitionConfig(delivery_count_limit=0)


# -- acknowledgement ------------------------------------------------------------------------------
def test_accept_release_reject_gap_transitions_and_persisted_writes():
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:1], 0, max_records=10)
    res = sp.acknowledge("a", [AckBatch(0, 3, (T.ACCEPT, T.RELEASE, T.REJECT, T.GAP))], 10)
    assert res.error is None
    assert states(sp, 0, 4) == [S.ACKNOWLEDGED, S.AVAILABLE, S.ARCHIVED, S.ARCHIVED, S.ACQUIRED]
    assert sp.start_offset == 1
    assert res.write == StateWrite(1, (StateBatch(1, 1, S.AVAILABLE, 1), StateBatch(2, 3, S.ARCHIVED, 1)), 2)


def test_renew_restarts_the_lock_and_persists_nothing():
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:1], 0, max_records=10)
    res = ack(sp, "a", 0, 4, T.RENEW, now=900)
    assert res.error is None and res.write is None
    assert sp.next_deadline_ms() == 900 + LOCK
    assert sp.expire_locks(LOCK) is None
    off = SharePartition(0, cfg(renew_enabled=False))
    off.acquire("a", LOG[:1], 0, max_records=10)
    assert ack(off, "a", 0, 4, T.RENEW).error == ErrorCode.INVALID_RECORD_STATE


@pytest.mark.parametrize("batches,reason", [
    ([AckBatch(5, 4, (1,))], "after last offset"),
    ([AckBatch(0, 2, (1,)), AckBatch(2, 3, (1,))], "overlaps"),
    ([AckBatch(0, 2, ())], "without acknowledge types"),
    ([AckBatch(0, 2, (1, 1))], "2 acknowledge types for 3 offsets"),
    ([AckBatch(0, 0, (5,))], "not 0-4"),
])
def test_request_level_checks_are_invalid_request(batches, reason):
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:1], 0, max_records=10)
    res = sp.acknowledge("a", batches, 0)
    assert res.error == ErrorCode.INVALID_REQUEST and reason in res.message
    assert states(sp, 0, 4) == [S.ACQUIRED] * 5


def test_renew_needs_is_renew_ack_at_the_request_level():
    assert "RENEW" in validate_acknowledgement_batches([AckBatch(0, 0, (4,))], renew_allowed=False)
    assert validate_acknowledgement_batches([AckBatch(0, 0, (4,))], renew_allowed=True) is None


def test_invalid_record_state_cases_leave_everything_unchanged():
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:1], 0, max_records=10)
    sp.acquire("b", LOG[:2], 0, max_records=10)
    before = sp.record_states()
    # another member's records, atomically with a valid one
    res = sp.acknowledge("a", [AckBatch(0, 0, (1,)), AckBatch(5, 5, (1,))], 0)
    assert res.error == ErrorCode.INVALID_RECORD_STATE and "another member" in res.message
    assert sp.record_states() == before
    # past the cached records
    assert ack(sp, "a", 20, 20, T.ACCEPT).error == ErrorCode.INVALID_REQUEST
    # double acknowledgement
    assert ack(sp, "a", 3, 3, T.ACCEPT).error is None
    assert ack(sp, "a", 3, 3, T.ACCEPT).error == ErrorCode.INVALID_RECORD_STATE
    # after the lock expired
    sp.expire_locks(LOCK)
    assert ack(sp, "a", 2, 2, T.ACCEPT).error == ErrorCode.INVALID_RECORD_STATE


def test_offsets_below_the_start_offset_are_skipped():
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:1], 0, max_records=10)
    ack(sp, "a", 0, 1, T.ACCEPT)
    assert sp.start_offset == 2
    assert ack(sp, "a", 0, 2, T.ACCEPT).error is None
    assert sp.start_offset == 3


def test_a_partial_acknowledgement_splits_the_batch_a_whole_one_keeps_it():
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:2], 0, max_records=10)
    ack(sp, "a", 5, 9, T.RELEASE)
    assert [b.offsets is None for b in sp.batches()] == [False]    # one cached batch 0-9, split once touched
    sp2 = SharePartition(0, cfg())
    sp2.acquire("a", LOG[:1], 0, max_records=10)
    sp2.acquire("a", LOG[1:2], 0, max_records=10)
    ack(sp2, "a", 5, 9, T.RELEASE)
    assert [b.offsets is None for b in sp2.batches()] == [True, True]


def test_a_batch_released_whole_is_acquired_again_whole():
    sp = SharePartition(0, cfg(delivery_count_limit=5))
    sp.acquire("a", LOG[:2], 0, max_records=10)
    sp.expire_locks(LOCK)
    assert ranges(sp.acquire("b", LOG[:2], LOCK, max_records=10)) == [(0, 9, 2)]
    assert [b.offsets is None for b in sp.batches()] == [True]
    sp.expire_locks(2 * LOCK)
    # record_limit cannot take the whole cached batch (count 3 halves MaxRecords 4 to 2): it is split
    res = sp.acquire("c", LOG[:2], 2 * LOCK, max_records=4, mode=AcquireMode.RECORD_LIMIT)
    assert ranges(res) == [(0, 1, 3)]
    assert [b.offsets is None for b in sp.batches()] == [False]
    assert states(sp, 0, 3) == [S.ACQUIRED, S.ACQUIRED, S.AVAILABLE, S.AVAILABLE]


# -- locks, releases, delivery counts -------------------------------------------------------------
def test_lock_expiry_makes_records_available_and_redelivers_with_count_two():
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:1], 0, max_records=10)
    assert sp.expire_locks(LOCK - 1) is None
    w = sp.expire_locks(LOCK)
    assert w.state_batches == (StateBatch(0, 4, S.AVAILABLE, 1),)
    assert ranges(sp.acquire("b", LOG[:1], LOCK, max_records=10)) == [(0, 4, 2)]


def test_release_each_time_delivers_exactly_limit_times_then_archives():
    sp = SharePartition(0, cfg(delivery_count_limit=4))
    counts = []
    for _ in range(6):
        res = sp.acquire("a", [LogBatch(0, 0)], 0, max_records=10)
        if not res.acquired:
            break
        counts.append(res.acquired[0].delivery_count)
        ack(sp, "a", 0, 0, T.RELEASE)
    assert counts == [1, 2, 3, 4]
    assert sp.start_offset == 1 and sp.batches() == []


def test_last_attempt_goes_out_alone_and_high_counts_halve_the_records():
    sp = SharePartition(0, cfg(delivery_count_limit=4))
    sp.acquire("a", LOG[:1], 0, max_records=10)
    ack(sp, "a", 0, 4, T.RELEASE)
    sp.acquire("a", LOG[:1], 0, max_records=10)                   # count 2 = max(2, ceil(4/2)): halved
    ack(sp, "a", 0, 4, T.RELEASE)
    res = sp.acquire("a", LOG[:1], 0, max_records=4, mode=AcquireMode.RECORD_LIMIT)
    assert ranges(res) == [(0, 1, 3)]                           # 4 // 2
    ack(sp, "a", 0, 1, T.RELEASE)
    assert ranges(sp.acquire("a", LOG[:1], 0, max_records=10)) == [(0, 0, 4)]    # the last attempt: alone
    assert ranges(sp.acquire("b", LOG[:1], 0, max_records=10)) == [(1, 1, 4)]


def test_release_member_releases_only_its_records_archiving_at_the_limit():
    sp = SharePartition(0, cfg(delivery_count_limit=2))
    sp.acquire("a", LOG[:1], 0, max_records=10)
    ack(sp, "a", 0, 0, T.RELEASE)
    sp.acquire("a", [LogBatch(0, 0)], 0, max_records=1, mode=AcquireMode.RECORD_LIMIT)      # 0 at count 2
    sp.acquire("b", LOG[:2], 0, max_records=10)
    w = sp.release_member("a")
    assert states(sp, 1, 9) == [S.AVAILABLE] * 4 + [S.ACQUIRED] * 5
    assert StateBatch(1, 4, S.AVAILABLE, 1) in w.state_batches
    assert sp.start_offset == 1                                  # 0 archived at the limit
    assert sp.release_member("nobody") is None


def test_log_start_movement_archives_available_records_below_it():
    sp = SharePartition(0, cfg())
    sp.acquire("a", LOG[:2], 0, max_records=10)
    ack(sp, "a", 0, 6, T.RELEASE)
    w = sp.update_log_start_offset(3)
    assert sp.start_offset == 3 and w.start_offset == 3
    assert sp.next_fetch_offset() == 3
    assert sp.update_log_start_offset(2) is None
    sp.update_log_start_offset(50)
    assert (sp.start_offset, sp.batches(), sp.next_fetch_offset()) == (50, [], 50)


# -- persistence -----------------------------------------------------------------------------------
def test_rebuild_from_state_redelivers_the_unwritten_hole():
    batches = [StateBatch(5, 7, S.ACKNOWLEDGED, 1), StateBatch(8, 9, S.AVAILABLE, 2)]
    sp = SharePartition.from_state(3, batches, cfg())
    assert sp.start_offset == 3 and sp.next_fetch_offset() == 3
    # 3-4 were in flight when the state was written: new again; 8 is on its last attempt: it waits
    assert ranges(sp.acquire("a", LOG[:2], 0, max_records=100)) == [(3, 4, 1)]
    assert ranges(sp.acquire("b", LOG[1:2], 0, max_records=100)) == [(8, 8, 3)]
    assert ranges(sp.acquire("b", LOG[1:3], 0, max_records=100)) == [(9, 9, 3)]
    assert ranges(sp.acquire("b", LOG[1:3], 0, max_records=100)) == [(10, 14, 1)]
    ack(sp, "a", 3, 4, T.ACCEPT)
    assert sp.start_offset == 8
    with pytest.raises(ValueError):
        SharePartition.from_state(0, [StateBatch(0, 0, S.ACQUIRED, 1)])


def test_merge_batches_newer_wins_and_start_offset_trims():
    old = [StateBatch(0, 9, S.AVAILABLE, 1)]
    new = [StateBatch(3, 4, S.ACKNOWLEDGED, 1)]
    assert merge_batches(old, new, 2) == [StateBatch(2, 2, S.AVAILABLE, 1), StateBatch(3, 4, S.ACKNOWLEDGED, 1),
                                          StateBatch(5, 9, S.AVAILABLE, 1)]
    assert merge_batches([StateBatch(0, 1, S.ARCHIVED, 1)], [StateBatch(2, 3, S.ARCHIVED, 1)], 0) == [
        StateBatch(0, 3, S.ARCHIVED, 1)]


KEY = ("g", uuid.UUID(int=7), 0)


def test_store_writes_updates_then_a_snapshot_and_replays_from_bytes():
    store = ShareStateStore(updates_per_snapshot=2)
    recs = [store.initialize(KEY, 0, 0, 1000)]
    assert isinstance(recs[0][1], R.ShareSnapshotValue) and recs[0][1].delivery_complete_count == 0
    for i in range(3):
        w = StateWrite(i + 1, (StateBatch(i, i, S.ACKNOWLEDGED, 1),), 0)
        recs.append(store.write(KEY, w, state_epoch=0, leader_epoch=1, now_ms=2000 + i))
    kinds = [type(v).__name__ for _, v in recs]
    assert kinds == ["ShareSnapshotValue", "ShareUpdateValue", "ShareUpdateValue", "ShareSnapshotValue"]
    assert recs[-1][1].snapshot_epoch == 1 and recs[-1][1].start_offset == 3
    again = ShareStateStore()
    for k, v in recs:
        again.replay(*R.decode(R.encode_key(k), R.encode_value(v)))
    st = again.read(KEY)
    assert (st.start_offset, st.batches, st.leader_epoch) == (3, [], 1)
    k, v = store.delete(KEY)
    again.replay(*R.decode(R.encode_key(k), R.encode_value(v)))
    assert KEY not in again.states


def test_store_fences_old_epochs_and_refuses_unknown_keys():
    store = ShareStateStore()
    w = StateWrite(-1, (), -1)
    with pytest.raises(WriteRefused) as e:
        store.write(KEY, w, 0, 0, 0)
    assert e.value.error == ErrorCode.INVALID_REQUEST
    store.initialize(KEY, 2, -1, 0)
    assert store.read(KEY, leader_epoch=5).leader_epoch == 5
    with pytest.raises(WriteRefused) as e:
        store.write(KEY, w, 2, 4, 0)
    assert e.value.error == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(WriteRefused) as e:
        store.write(KEY, w, 1, 5, 0)
    assert e.value.error == ErrorCode.FENCED_STATE_EPOCH
    with pytest.raises(WriteRefused) as e:
        store.initialize(KEY, 1, 0, 0)
    assert e.value.error == ErrorCode.FENCED_STATE_EPOCH
    store.write(KEY, StateWrite(-1, (StateBatch(0, 0, S.ARCHIVED, 1),), 1), -1, -1, 0)
    assert store.read(KEY).start_offset == -1                    # -1 leaves it unchanged
    with pytest.raises(ValueError):
        ShareStateStore(updates_per_snapshot=501)


# -- the rule machine ---------------------------------------------------------------------------------
MEMBERS = ("a", "b", "c")
LIMIT = 3


class SharePartitionMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        self.config = SharePartitionConfig(record_lock_duration_ms=LOCK, delivery_count_limit=LIMIT,
                                           max_in_flight_records=12)
        self.sp = SharePartition(0, self.config)
        self.store = ShareStateStore(updates_per_snapshot=3)
        self.records = [self.store.initialize(KEY, 0, 0, 0)]
        self.now = 0
        self.log: list[LogBatch] = []
        self.holding = {m: set() for m in MEMBERS}       # offsets each member validly holds
        self.terminal: set[int] = set()
        self.max_count: dict[int, int] = {}

    def _log_end(self):
        return self.log[-1].last_offset + 1 if self.log else 0

    def _persist(self, write):
        if write is None:
            return
        for b in write.state_batches:
            assert b.delivery_state is not S.ACQUIRED
            if b.delivery_state in (S.ACKNOWLEDGED, S.ARCHIVED):
                self.terminal.update(range(b.first_offset, b.last_offset + 1))
        self.records.append(self.store.write(KEY, write, 0, 0, self.now))

    def _released(self, offsets):
        """Records going back to the partition: at the delivery limit they are archived."""
        for o in offsets:
            if self.max_count.get(o, 0) >= LIMIT:
                self.terminal.add(o)

    def _forget_released(self):
        rs = self.sp.record_states()
        for m in MEMBERS:
            still = {o for o in self.holding[m] if rs.get(o, (None, 0, None))[2] == m and rs[o][0] is S.ACQUIRED}
            self._released(self.holding[m] - still)
            self.holding[m] = still

    @rule(n=st.integers(1, 5))
    def produce(self, n):
        end = self._log_end()
        self.log.append(LogBatch(end, end + n - 1))

    @rule(m=st.sampled_from(MEMBERS), max_records=st.integers(1, 8), mode=st.sampled_from(list(AcquireMode)))
    def acquire(self, m, max_records, mode):
        start = self.sp.next_fetch_offset()
        batches = [b for b in self.log if b.last_offset >= start]
        res = self.sp.acquire(m, batches, self.now, max_records=max_records, mode=mode)
        self._persist(res.write)
        for a in res.acquired:
            assert 1 <= a.delivery_count <= LIMIT
            for o in range(a.first_offset, a.last_offset + 1):
                assert o not in self.terminal, f"terminal offset {o} acquired again"
                for other in MEMBERS:
                    assert o not in self.holding[other], f"offset {o} acquired by {m} while {other} holds it"
                self.holding[m].add(o)
                assert a.delivery_count > self.max_count.get(o, 0) or a.delivery_count == 1
                self.max_count[o] = max(self.max_count.get(o, 0), a.delivery_count)

    @rule(m=st.sampled_from(MEMBERS), data=st.data(), t=st.sampled_from([T.ACCEPT, T.RELEASE, T.REJECT, T.GAP, T.RENEW]))
    def acknowledge(self, m, data, t):
        if not self.holding[m]:
            return
        o = data.draw(st.sampled_from(sorted(self.holding[m])))
        hi = o
        while hi + 1 in self.holding[m] and data.draw(st.booleans()):
            hi += 1
        res = ack(self.sp, m, o, hi, t, now=self.now)
        assert res.error is None, res
        self._persist(res.write)
        if t is T.RENEW:
            return
        for x in range(o, hi + 1):
            self.holding[m].discard(x)
            if t in (T.ACCEPT, T.REJECT, T.GAP):
                self.terminal.add(x)
            else:
                self._released([x])

    @rule(m=st.sampled_from(MEMBERS), o=st.integers(0, 40))
    def foreign_ack_is_refused(self, m, o):
        if o in self.holding[m]:
            return
        before = self.sp.record_states()
        res = ack(self.sp, m, o, o, T.ACCEPT, now=self.now)
        if o < self.sp.start_offset:
            assert res.error is None
        else:
            assert res.error in (ErrorCode.INVALID_RECORD_STATE, ErrorCode.INVALID_REQUEST)
            assert self.sp.record_states() == before

    @rule(ms=st.integers(1, 1500))
    def tick(self, ms):
        self.now += ms
        self._persist(self.sp.expire_locks(self.now))
        self._forget_released()

    @rule(m=st.sampled_from(MEMBERS))
    def member_leaves(self, m):
        self._persist(self.sp.release_member(m))
        assert not any(r[2] == m for r in self.sp.record_states().values())
        self._released(self.holding[m])
        self.holding[m].clear()

    @rule()
    def restart(self):
        """The broker dies: the state topic is read back (through its bytes) and the partition rebuilt."""
        store = ShareStateStore()
        for k, v in self.records:
            store.replay(*R.decode(R.encode_key(k), R.encode_value(v)))
        st_ = store.read(KEY)
        rebuilt = SharePartition.from_state(st_.start_offset, st_.batches, self.config)
        old = self.sp.record_states()
        new = rebuilt.record_states()
        assert rebuilt.start_offset == self.sp.start_offset
        for o, (state, count, _) in old.items():
            if o < self.sp.start_offset:
                continue
            got = new.get(o)
            if state in (S.ACKNOWLEDGED, S.ARCHIVED):
                assert got is not None and got[0] is state, (o, state, got)
            elif state is S.AVAILABLE:
                assert got is not None and got[:2] == (S.AVAILABLE, count), (o, count, got)
            else:
                assert got is None or (got[0] is S.AVAILABLE and got[1] <= count), (o, count, got)
        self.sp = rebuilt
        self.holding = {m: set() for m in MEMBERS}
        # delivery count increments never written are lost with the broker
        self.max_count = {o: c for o, (_, c, _) in new.items()}

    @invariant()
    def invariants(self):
        rs = self.sp.record_states()
        owners: dict[int, str] = {}
        for o, (state, count, member) in rs.items():
            assert 0 <= count <= LIMIT
            if state is S.ACQUIRED:
                assert member is not None and o not in owners
                owners[o] = member
            else:
                assert member is None
        for o in range(0, self.sp.start_offset):
            if o < self._log_end():
                assert o in self.terminal or rs.get(o, (None,))[0] in (S.ACKNOWLEDGED, S.ARCHIVED), \
                    f"start offset {self.sp.start_offset} passed {o}, never acknowledged or archived"
        assert self.sp.end_offset - self.sp.start_offset + 1 <= self.config.max_in_flight_records or not rs

    def teardown(self):
        if not hasattr(self, "sp"):
            return
        # drain: one member accepts everything; every record ends ACKNOWLEDGED or ARCHIVED
        for step in range(200):
            if self.sp.start_offset >= self._log_end():
                break
            self.now += LOCK
            self.sp.expire_locks(self.now)
            self.sp.release_member("a")
            start = self.sp.next_fetch_offset()
            res = self.sp.acquire("z", [b for b in self.log if b.last_offset >= start], self.now,
                                  max_records=50)
            for a in res.acquired:
                assert ack(self.sp, "z", a.first_offset, a.last_offset, T.ACCEPT, now=self.now).error is None
        assert self.sp.start_offset == self._log_end()
        assert all(s in (S.ACKNOWLEDGED, S.ARCHIVED) for s, _, _ in self.sp.record_states().values())


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
