"""Transactional offsets in the pure group coordinator (fake clock, no I/O): TxnOffsetCommit holds
offsets pending per producer; OffsetFetch hides them (require_stable: UNSTABLE_OFFSET_COMMIT); the
transaction's marker on the group's `__consumer_offsets` partition materialises (COMMIT, only if
written after the current offset) or drops (ABORT) them; KIP-447 member checks; deletion, expiry and
replay (AK OffsetMetadataManager)."""
from __future__ import annotations

from kohort.broker.coordinator import CommitPartition, CoordinatorConfig, OffsetDeleteParams, OffsetFetchParams
from kohort.broker.coordinator.model import OffsetRecord, TxnMarkerRecord, TxnOffsetCommitParams
from kohort.errors import ErrorCode as E

from tests.helpers.coordinator_harness import Harness

TP = ("in", 0)


def txn_commit(h: Harness, pid: int, offsets: dict, group="g", generation=-1, member="", instance=None, epoch=0):
    topics = {}
    for (t, p), off in offsets.items():
        topics.setdefault(t, []).append(CommitPartition(p, off))
    r = h.reply()
    h.apply(h.c.txn_offset_commit(TxnOffsetCommitParams(
        group, pid, epoch, tuple((t, tuple(ps)) for t, ps in topics.items()), generation, member, instance),
        h.now, r))
    return r


def codes(h: Harness, r) -> set:
    return set(h.commit_errors(r).values())


def marker(h: Harness, pid: int, commit: bool, groups=lambda g: True, error: int = 0):
    r = h.reply()
    h.apply(h.c.write_txn_marker(TxnMarkerRecord(0, pid, 0, commit, 0), groups, h.now, r))
    if not h.auto_store:
        h.store_next(error)
    return h.result(r)


def fetch(h: Harness, group="g", stable=False, topics=((TP[0], (TP[1],)),)) -> dict:
    """{(topic, partition): offset or the partition's error name}."""
    r = h.reply()
    h.apply(h.c.offset_fetch(OffsetFetchParams(group, topics, stable), h.now, r))
    res = h.result(r)
    assert res.error_code == 0
    return {(t, p.partition_index): E(p.error_code).name if p.error_code else p.committed_offset
            for t, ps in res.topics for p in ps}


def test_pending_until_commit_marker_dropped_on_abort():
    h = Harness()
    assert set(h.commit_errors(h.commit("g", {TP: 5})).values()) == {E.NONE}
    r = txn_commit(h, 7, {TP: 10})
    assert codes(h, r) == {E.NONE}
    # invisible: the old value without require_stable, UNSTABLE_OFFSET_COMMIT with it (KIP-447)
    assert fetch(h) == {TP: 5}
    assert fetch(h, stable=True) == {TP: "UNSTABLE_OFFSET_COMMIT"}
    assert fetch(h, stable=True, topics=None) == {TP: "UNSTABLE_OFFSET_COMMIT"}
    assert marker(h, 7, True) == E.NONE
    assert fetch(h, stable=True) == {TP: 10}
    # aborted: the committed value stays
    assert codes(h, txn_commit(h, 7, {TP: 20})) == {E.NONE}
    assert fetch(h, stable=True) == {TP: "UNSTABLE_OFFSET_COMMIT"}
    assert marker(h, 7, False) == E.NONE
    assert fetch(h, stable=True) == {TP: 10}
    # a marker of a producer with nothing pending changes nothing
    assert marker(h, 8, True) == E.NONE and fetch(h) == {TP: 10}
    assert not h.c.pending_txn.by_producer and not h.c.pending_txn.by_group


def test_pending_only_once_stored_and_lost_with_a_failed_append():
    h = Harness(auto_store=False)
    r = txn_commit(h, 7, {TP: 10})
    assert fetch(h, stable=True) == {TP: -1}          # not stored yet: nothing pending
    h.store_next(E.KAFKA_STORAGE_ERROR)
    assert codes(h, r) == {E.NOT_COORDINATOR}
    assert fetch(h, stable=True) == {TP: -1} and "g" not in h.c.groups
    r = txn_commit(h, 7, {TP: 10})
    h.store_next()
    assert codes(h, r) == {E.NONE} and fetch(h, stable=True) == {TP: "UNSTABLE_OFFSET_COMMIT"}
    # a marker whose append fails leaves the offsets pending (the transaction coordinator retries)
    assert marker(h, 7, True, error=E.KAFKA_STORAGE_ERROR) == E.KAFKA_STORAGE_ERROR
    assert fetch(h, stable=True) == {TP: "UNSTABLE_OFFSET_COMMIT"}
    assert marker(h, 7, True) == E.NONE and fetch(h, stable=True) == {TP: 10}


def test_commit_materialises_only_offsets_written_after_the_current_one():
    h = Harness()
    txn_commit(h, 7, {TP: 10})
    h.commit("g", {TP: 15})                           # written after the transactional one
    assert fetch(h) == {TP: 15}
    marker(h, 7, True)
    assert fetch(h, stable=True) == {TP: 15}
    h.commit("g", {TP: 16})
    txn_commit(h, 7, {TP: 30})                        # written after: wins
    marker(h, 7, True)
    assert fetch(h) == {TP: 30}


def test_two_producers_and_the_marker_partition_filter():
    h = Harness()
    txn_commit(h, 7, {TP: 10})
    txn_commit(h, 8, {TP: 12})
    txn_commit(h, 7, {("in", 1): 3}, group="other")
    marker(h, 7, False, groups=lambda g: g == "g")     # only "g" lives on the marker's partition
    assert fetch(h, stable=True) == {TP: "UNSTABLE_OFFSET_COMMIT"}   # producer 8 still open
    assert fetch(h, "other", stable=True, topics=(("in", (1,)),)) == {("in", 1): "UNSTABLE_OFFSET_COMMIT"}
    marker(h, 8, True, groups=lambda g: g == "g")
    assert fetch(h, stable=True) == {TP: 12}
    marker(h, 7, True, groups=lambda g: g == "other")
    assert fetch(h, "other", stable=True, topics=(("in", (1,)),)) == {("in", 1): 3}


def test_kip447_member_checks():
    h = Harness()
    # an unknown group: generation >= 0 is ILLEGAL_GENERATION, -1 makes a simple group
    assert codes(h, txn_commit(h, 7, {TP: 1}, group="x", generation=3, member="m")) == {E.ILLEGAL_GENERATION}
    assert "x" not in h.c.groups
    assert codes(h, txn_commit(h, 7, {TP: 1}, group="y")) == {E.NONE}
    r, mid = h.join_single("g")
    h.advance(5000)                                    # the initial rebalance delay
    assert h.result(r).error_code == 0
    gen = h.result(r).generation_id
    # CompletingRebalance: transactional commits are not refused with REBALANCE_IN_PROGRESS
    assert codes(h, txn_commit(h, 7, {TP: 2}, generation=gen, member=mid)) == {E.NONE}
    assert codes(h, txn_commit(h, 7, {TP: 2}, generation=gen, member="nobody")) == {E.UNKNOWN_MEMBER_ID}
    assert codes(h, txn_commit(h, 7, {TP: 2}, generation=gen + 1, member=mid)) == {E.ILLEGAL_GENERATION}
    assert codes(h, txn_commit(h, 7, {TP: 2}, generation=gen, member=mid, instance="i")) == {E.UNKNOWN_MEMBER_ID}
    # v0-v2 carry no member: accepted on a non-empty group (transactional commits only)
    assert codes(h, txn_commit(h, 7, {TP: 2})) == {E.NONE}
    # a static member replaced by a newer instance is fenced
    r1 = h.join("s", group_instance_id="inst")
    h.advance(5000)
    sid = h.result(r1).member_id
    g = h.result(r1).generation_id
    assert codes(h, txn_commit(h, 7, {TP: 2}, group="s", generation=g, member=sid, instance="inst")) == {E.NONE}
    assert codes(h, txn_commit(h, 7, {TP: 2}, group="s", generation=g, member="old", instance="inst")) \
        == {E.FENCED_INSTANCE_ID}


def test_metadata_too_large_and_loading():
    h = Harness(CoordinatorConfig(offset_metadata_max_bytes=3))
    r = h.reply()
    h.apply(h.c.txn_offset_commit(TxnOffsetCommitParams("g", 7, 0, (("in", (
        CommitPartition(0, 1, -1, "abcd"), CommitPartition(1, 1, -1, "ab"))),)), h.now, r))
    assert h.commit_errors(r) == {("in", 0): E.OFFSET_METADATA_TOO_LARGE, ("in", 1): E.NONE}
    h2 = Harness(loading=True)
    assert codes(h2, txn_commit(h2, 7, {TP: 1})) == {E.COORDINATOR_LOAD_IN_PROGRESS}


def test_delete_and_expiry_with_pending_offsets():
    h = Harness(CoordinatorConfig(offsets_retention_minutes=1))
    txn_commit(h, 7, {TP: 10})
    txn_commit(h, 7, {TP: 11}, group="h")
    h.commit("h", {("in", 1): 1})
    # expiry: neither the pending partition's offset nor the group goes while a transaction is open
    h.advance(120_000)
    h.apply(h.c.expire_offsets(h.now))
    assert "g" in h.c.groups and fetch(h, stable=True) == {TP: "UNSTABLE_OFFSET_COMMIT"}
    # OffsetDelete writes a tombstone for a pending-only partition and drops the pending offset
    r = h.reply()
    h.apply(h.c.offset_delete(OffsetDeleteParams("g", (("in", (0,)),)), h.now, r))
    assert h.result(r).error_code == 0
    assert any(isinstance(x, OffsetRecord) and x.tombstone and x.group == "g" for x in h.log)
    assert fetch(h, stable=True) == {TP: -1}
    marker(h, 7, True, groups=lambda g: g == "g")
    assert fetch(h) == {TP: -1}
    # DeleteGroups tombstones pending offsets too
    r = h.reply()
    h.apply(h.c.delete_groups(["h"], h.now, r))
    assert dict(h.result(r).results) == {"h": 0}
    assert not h.c.pending_txn.has_group("h")
    marker(h, 7, True)
    assert "h" not in h.c.groups or fetch(h, "h") == {TP: -1}


def test_replay_rebuilds_pending_and_markers():
    h = Harness()
    c = h.c
    c.replay(OffsetRecord("g", "in", 0, 5))
    c.replay(OffsetRecord("g", "in", 0, 10), producer_id=7)
    c.replay(OffsetRecord("g", "in", 1, 3), producer_id=8)
    c.replay(OffsetRecord("g", "in", 1, tombstone=True))            # drops producer 8's pending offset
    h.apply(c.on_loaded(h.now))
    assert fetch(h, stable=True, topics=(("in", (0, 1)),)) == {TP: "UNSTABLE_OFFSET_COMMIT", ("in", 1): -1}
    marker(h, 7, True)
    assert fetch(h, stable=True) == {TP: 10}
