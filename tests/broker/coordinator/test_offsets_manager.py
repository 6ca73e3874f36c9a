"""Committed offsets of every group type (kohort.broker.coordinator.offsets, run by the classic machine
for every group and validated by the group of the id), on the real pure machines with a fake clock:
a KIP-848 consumer group's commits, fetches, deletions and expiry without any classic group standing
in for it, the simple group Kafka makes for a commit without a generation (and drops for a consumer
group of the same id), DeleteGroups' records, and the state rebuilt by replaying the stored records."""
from __future__ import annotations

import kohort.broker.coordinator.codes as C
from kohort.broker.coordinator import ClassicGroupCoordinator, CommitPartition, CoordinatorConfig, GroupType
from kohort.broker.coordinator.consumer_group import ConsumerGroupConfig, ConsumerGroups, ConsumerHeartbeatParams
from kohort.broker.coordinator.consumer_group_model import ConsumerGroupRecord
from kohort.broker.coordinator.model import (
    GroupRecord, OffsetCommitParams, OffsetDeleteParams, OffsetFetchParams, OffsetRecord, Outcome,
    TxnOffsetCommitParams,
)
from kohort.broker.coordinator.registry import GroupRegistry

TOPICS = {"t": 2, "u": 1}
RETENTION_MS = 60_000


class Machines:
    """The classic and consumer-group machines tied by a registry as the runtime ties them; every
    append is stored at once (records kept in `log`) and reported to the machine of its token."""

    def __init__(self, log: list | None = None) -> None:
        self.now = 1_000_000
        cfg = CoordinatorConfig(offsets_retention_minutes=RETENTION_MS // 60_000)
        self.classic = ClassicGroupCoordinator(cfg, loading=log is not None)
        ccfg = ConsumerGroupConfig()
        self.consumer = ConsumerGroups(
            ccfg, classic_group_active=lambda gid: self.registry.classic_group_active(gid),
            classic_upgrade=lambda gid, now: self.classic.release_for_upgrade(gid, now, ccfg.max_size),
            classic_downgrade=lambda snap, now: self.classic.adopt_from_consumer(snap, now),
            classic_release_empty=self.classic.release_empty)
        self.registry = GroupRegistry(self.classic, self.consumer)
        self.log: list = []
        self.answers: dict[int, object] = {}
        self._next = 0
        if log is not None:                      # a restart: replay what was stored, then serve
            for r in log:
                (self.consumer if isinstance(r, ConsumerGroupRecord) else self.classic).replay(r)
            for m in self.registry.machines:
                self.apply(m.on_loaded(self.now, TOPICS))

    def apply(self, out: Outcome) -> Outcome:
        for r in out.responses:
            self.answers[r.reply_to] = r.result
        for a in out.appends:
            self.log.extend(a.records)
            owner = self.classic if a.token.namespace == self.classic.TIMER_NAMESPACE else self.consumer
            self.apply(owner.on_append_done(a.token, 0, self.now))
        return out

    def run(self, step, *args, **kw):
        self._next += 1
        reply = self._next
        self.apply(step(*args, self.now, reply, **kw))
        return self.answers.get(reply)

    def join(self, gid: str, member: str, topics=("t",)):
        res = self.run(self.consumer.heartbeat, ConsumerHeartbeatParams(
            gid, member, 0, subscribed_topic_names=tuple(topics), owned={}, rebalance_timeout_ms=1000), TOPICS)
        assert res.error_code == 0, res
        return res

    def leave(self, gid: str, member: str) -> None:
        assert self.run(self.consumer.heartbeat, ConsumerHeartbeatParams(gid, member, -1), TOPICS).error_code == 0

    def commit(self, gid: str, offsets: dict, epoch: int = -1, member: str = "", version: int = 9) -> dict:
        topics: dict[str, list] = {}
        for (t, p), off in offsets.items():
            topics.setdefault(t, []).append(CommitPartition(p, off))
        res = self.run(self.classic.offset_commit, OffsetCommitParams(
            gid, tuple((t, tuple(ps)) for t, ps in topics.items()), epoch, member, api_version=version))
        return {(t, p.partition_index): p.error_code for t, ps in res.topics for p in ps}

    def fetch(self, gid: str, member: str | None = None, epoch: int = -1):
        res = self.run(self.classic.offset_fetch, OffsetFetchParams(gid, (("t", (0, 1)),)),
                       member_id=member, member_epoch=epoch)
        return res.error_code, {(t, p.partition_index): p.committed_offset for t, ps in res.topics for p in ps}


def test_a_consumer_group_commits_with_no_classic_group_for_it():
    m = Machines()
    epoch = m.join("cg", "a").member_epoch
    assert m.commit("cg", {("t", 0): 5}, epoch, "a") == {("t", 0): C.NONE}
    assert "cg" not in m.classic.groups
    assert m.registry.type_of("cg") is GroupType.CONSUMER
    assert m.registry.group_ids(include_dead=True) == {"cg"}
    assert dict(m.registry.committed_offsets("cg"))[("t", 0)].offset == 5
    assert not [r for r in m.log if isinstance(r, GroupRecord)]          # no GroupMetadata record
    assert m.fetch("cg", "a", epoch) == (C.NONE, {("t", 0): 5, ("t", 1): -1})


def test_a_consumer_group_validates_its_commits_and_fetches():
    m = Machines()
    epoch = m.join("cg", "a").member_epoch
    assert m.commit("cg", {("t", 0): 5}, epoch + 1, "a") == {("t", 0): C.STALE_MEMBER_EPOCH}
    assert m.commit("cg", {("t", 0): 5}, epoch, "zz") == {("t", 0): C.UNKNOWN_MEMBER_ID}
    assert m.commit("cg", {("t", 0): 5}, epoch, "a", version=8) == {("t", 0): C.UNSUPPORTED_VERSION}
    assert m.commit("cg", {("t", 0): 5}) == {("t", 0): C.UNKNOWN_MEMBER_ID}       # no epoch, members present
    txn = m.run(m.classic.txn_offset_commit, TxnOffsetCommitParams(
        "cg", 7, 0, (("t", (CommitPartition(0, 5),)),), epoch + 1, "a"))
    assert txn.topics[0][1][0].error_code == C.ILLEGAL_GENERATION               # STALE, as Kafka words it here
    assert m.fetch("cg", "a", epoch + 1)[0] == C.STALE_MEMBER_EPOCH
    assert m.fetch("cg", "zz", epoch)[0] == C.UNKNOWN_MEMBER_ID
    assert m.fetch("cg") == (C.NONE, {("t", 0): -1, ("t", 1): -1})             # admin: no member, no epoch
    assert not m.registry.committed_offsets("cg") and "cg" not in m.classic.groups
    m.leave("cg", "a")
    assert m.commit("cg", {("t", 1): 9}) == {("t", 1): C.NONE}                  # admin commit to an empty group
    assert "cg" not in m.classic.groups and m.registry.type_of("cg") is GroupType.CONSUMER


def test_a_commit_without_a_generation_makes_a_simple_group_that_a_consumer_group_replaces():
    m = Machines()
    assert m.commit("g", {("t", 0): 3}) == {("t", 0): C.NONE}
    assert m.classic.groups["g"].is_simple() and m.registry.type_of("g") is GroupType.CLASSIC
    assert m.commit("nobody", {("t", 0): 3}, epoch=2) == {("t", 0): C.GROUP_ID_NOT_FOUND}
    assert m.commit("nobody", {("t", 0): 3}, epoch=2, version=8) == {("t", 0): C.ILLEGAL_GENERATION}
    assert "nobody" not in m.classic.groups
    before = len(m.log)
    m.join("g", "a")
    # Kafka's maybeDeleteEmptyClassicGroup: the Empty classic group's tombstone, then the consumer group's records
    assert m.log[before] == GroupRecord("g", tombstone=True)
    assert all(isinstance(r, ConsumerGroupRecord) for r in m.log[before + 1:])
    assert "g" not in m.classic.groups and m.registry.type_of("g") is GroupType.CONSUMER
    assert dict(m.registry.committed_offsets("g"))[("t", 0)].offset == 3      # the offsets stay the id's


def test_offsets_of_a_consumer_group_expire_unless_subscribed_then_the_empty_group_goes():
    m = Machines()
    epoch = m.join("cg", "a").member_epoch
    assert m.commit("cg", {("t", 0): 5, ("u", 0): 6}, epoch, "a") == {("t", 0): 0, ("u", 0): 0}
    m.now += RETENTION_MS
    m.apply(m.classic.expire_offsets(m.now))
    # with a member: the subscribed topic's offset stays, the other one expires (from its commit)
    assert set(m.registry.committed_offsets("cg")) == {("t", 0)}
    assert OffsetRecord("cg", "u", 0, tombstone=True) in m.log
    m.leave("cg", "a")
    assert m.registry.type_of("cg") is GroupType.CONSUMER                   # Empty, with its offsets
    before = len(m.log)
    m.apply(m.classic.expire_offsets(m.now))
    assert not m.registry.committed_offsets("cg") and m.registry.type_of("cg") is None
    written = m.log[before:]
    assert OffsetRecord("cg", "t", 0, tombstone=True) in written
    assert any(isinstance(r, ConsumerGroupRecord) and r.tombstone for r in written)
    assert not [r for r in written if isinstance(r, GroupRecord)]


def test_offset_delete_asks_the_consumer_group_which_topics_it_subscribes_to():
    m = Machines()
    epoch = m.join("cg", "a").member_epoch
    m.commit("cg", {("t", 0): 5, ("u", 0): 6}, epoch, "a")
    res = m.run(m.classic.offset_delete, OffsetDeleteParams("cg", (("t", (0,)), ("u", (0,)))))
    assert res.error_code == 0
    assert {t: [p.error_code for p in ps] for t, ps in res.topics} == {"t": [C.GROUP_SUBSCRIBED_TO_TOPIC],
                                                                       "u": [C.NONE]}
    assert set(m.registry.committed_offsets("cg")) == {("t", 0)}
    res = m.run(m.classic.offset_delete, OffsetDeleteParams("nobody", (("t", (0,)),)))
    assert res.error_code == C.GROUP_ID_NOT_FOUND


def test_deleting_a_consumer_group_tombstones_its_offsets_and_no_group_metadata():
    m = Machines()
    m.join("cg", "a")
    m.leave("cg", "a")
    m.commit("cg", {("t", 0): 5})
    assert m.run(m.consumer.delete_group, "cg") == C.NONE
    before = len(m.log)
    res = m.run(m.classic.delete_groups, [], deleted_elsewhere=["cg"])
    assert dict(res.results) == {"cg": C.NONE}
    assert m.log[before:] == [OffsetRecord("cg", "t", 0, tombstone=True)]
    assert not m.registry.committed_offsets("cg") and m.registry.group_ids(include_dead=True) == set()


def test_replay_rebuilds_offsets_by_group_id_without_a_classic_group_for_a_consumer_group():
    m = Machines()
    epoch = m.join("cg", "a").member_epoch
    m.commit("cg", {("t", 0): 5}, epoch, "a")
    m.commit("simple", {("t", 1): 7})
    m.commit("g", {("t", 0): 1})
    m.join("g", "b")                                  # the simple group "g" becomes a consumer group
    # offset records before the group's records, as compaction may leave them
    log = sorted(m.log, key=lambda r: not isinstance(r, OffsetRecord))
    for records in (m.log, log):
        r = Machines(records)
        assert set(r.classic.groups) == {"simple"} and r.classic.groups["simple"].is_simple()
        assert r.registry.type_of("cg") is GroupType.CONSUMER and r.registry.type_of("g") is GroupType.CONSUMER
        assert {gid: {tp: co.offset for tp, co in offs.items()} for gid, offs in r.registry.all_committed_offsets()} \
            == {"cg": {("t", 0): 5}, "g": {("t", 0): 1}, "simple": {("t", 1): 7}}
