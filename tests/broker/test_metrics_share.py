"""Share groups (KIP-932) in the broker's metrics and group events: a real kohort.ShareConsumer reads
from an in-process kohort broker over loopback; the metrics text the broker serves on /metrics
(`Metrics.render`) and the runtime's group event history are checked number by number after each
step: acquisitions, acknowledgements by type, redeliveries, delivery-count-limit archives, lock
expiries, SPSO / lag / in-flight gauges, group counts by type and state, failed share requests, and
the group's events from the first heartbeat to the member's leave."""
from __future__ import annotations

import logging
import time
import uuid

from kohort import Admin, Producer, ShareConsumer
from kohort.broker.group_events import log_message
from kohort.broker.share.partition import (
    AckBatch, AcknowledgeType as T, LogBatch, SharePartition, SharePartitionConfig, SharePartitionCounters,
)
from kohort.client.share.consumer import AcknowledgeType
from kohort.protocol.messages.share_acknowledge import ShareAcknowledgeRequest
from kohort.protocol.messages.share_fetch import ShareFetchRequest
from kohort.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from kohort.testing.inprocess import broker
from tests.helpers.rawclient import RawClient

CONFIG = {"group.share.assignment.interval.ms": 0, "group.share.heartbeat.interval.ms": 200,
          "group.share.session.timeout.ms": 6000, "group.share.min.record.lock.duration.ms": 1000}


def _metrics(kb) -> dict[str, float]:
    async def render():
        return kb._broker.metrics.render()
    out = {}
    for line in kb._run(render()).splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _events(kb, group: str) -> list:
    async def read():
        return kb._broker.coordinator.events.history(group)
    return kb._run(read())


def _setup(kb, topic: str, group: str, per_partition: int, partitions: int, **group_configs) -> None:
    kb.create_topic(topic, partitions)
    with Admin({"bootstrap.servers": kb.bootstrap_servers}) as a:
        a.alter_configs(("group", group), {"share.auto.offset.reset": "earliest", **group_configs})
    with Producer({"bootstrap.servers": kb.bootstrap_servers}) as p:
        for part in range(partitions):
            for i in range(per_partition):
                p.send(topic, value=b"v%d" % i, partition=part)
        p.flush()


def _poll(c, n: int, timeout: float = 30.0) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += c.poll(0.3)
    assert len(got) == n, f"{len(got)} of {n} records"
    return got


def _committed(c) -> None:
    res = c.commit_sync(10)
    assert res and all(e is None for e in res.values()), res


def test_share_partition_counters_with_a_fake_clock():
    """The pure share partition's counters: acquisitions, redeliveries, lock expiries and the records
    archived at the delivery count limit, whichever way they reach it (RELEASE, lock expiry, the
    member's release). With a limit of 2 a record's second (last) delivery goes out alone."""
    log = [LogBatch(0, 4), LogBatch(5, 9)]
    sp = SharePartition(0, SharePartitionConfig(record_lock_duration_ms=1000, delivery_count_limit=2))
    sp.acquire("a", log, 0, max_records=100)
    assert sp.counters == SharePartitionCounters(acquired=10)
    assert (sp.in_flight_message_count(), sp.in_flight_batch_count(), sp.delivery_count_histogram()) == (
        10, 1, {1: 10})
    sp.expire_locks(999)                                     # not yet
    assert sp.counters.lock_timeouts == 0
    sp.expire_locks(1000)                                    # all ten expire: available again, count 1
    assert sp.counters == SharePartitionCounters(acquired=10, lock_timeouts=10)
    got = sp.acquire("b", log, 2000, max_records=100).acquired
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in got] == [(0, 0, 2)]
    sp.acknowledge("b", [AckBatch(0, 0, (int(T.RELEASE),))], 2000)          # released at the limit: archived
    assert sp.counters == SharePartitionCounters(acquired=11, redelivered=1, lock_timeouts=10,
                                                 delivery_limit_archived=1)
    sp.acquire("c", log, 2100, max_records=100)             # offset 1, alone
    sp.expire_locks(3100)                                    # expires at the limit: archived
    sp.acquire("d", log, 3200, max_records=100)             # offset 2, alone
    sp.release_member("d")                                   # its session closed: archived
    assert sp.counters == SharePartitionCounters(acquired=13, redelivered=3, lock_timeouts=11,
                                                 delivery_limit_archived=3)
    assert (sp.start_offset, sp.in_flight_message_count(), sp.delivery_count_histogram()) == (3, 7, {1: 7})


def test_share_partition_gauges_and_counters_follow_a_real_share_group():
    with broker(CONFIG) as kb:
        _setup(kb, "t", "sg", 10, 3, **{"share.delivery.count.limit": "2"})
        c = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "sg",
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe(["t"])
        try:
            recs = _poll(c, 30)
            m = _metrics(kb)
            assert m['kohort_group_count{protocol="share"}'] == 1
            assert m['kohort_share_group_count{state="Stable"}'] == 1
            assert m['kohort_share_group_count{state="Empty"}'] == 0
            assert m['kohort_group_state{group="sg",type="share",state="Stable"}'] == 1
            assert m['kohort_group_members{group="sg"}'] == 1
            epoch = m['kohort_group_generation{group="sg"}']
            assert epoch == m['kohort_group_target_assignment_epoch{group="sg"}'] >= 1
            assert m['kohort_group_rebalances_total{group="sg"}'] >= 1
            for p in range(3):
                lbl = f'group="sg",topic="t",partition="{p}"'
                assert m[f"kohort_share_partition_acquired_records{{{lbl}}}"] == 10
                assert m[f"kohort_share_partition_in_flight_messages{{{lbl}}}"] == 10
                assert m[f"kohort_share_partition_in_flight_batches{{{lbl}}}"] >= 1
                assert m[f"kohort_share_partition_records_acquired_total{{{lbl}}}"] == 10
                assert m[f"kohort_share_partition_records_redelivered_total{{{lbl}}}"] == 0
                assert m[f"kohort_share_partition_start_offset{{{lbl}}}"] == 0
                assert m[f"kohort_share_partition_lag{{{lbl}}}"] == 10
                assert m[f'kohort_share_partition_records_by_delivery_count{{{lbl},delivery_count="1"}}'] == 10
            assert [m[f'kohort_share_record_acknowledgements_total{{ack_type="{t}"}}']
                    for t in ("Accept", "Release", "Reject", "Renew")] == [0, 0, 0, 0]

            # partition 0 accepted; partition 1: 0-4 released, 5-9 accepted; partition 2: 0-4 rejected
            for r in recs:
                if r.partition == 1 and r.offset < 5:
                    c.acknowledge(r, AcknowledgeType.RELEASE)
                elif r.partition == 2 and r.offset < 5:
                    c.acknowledge(r, AcknowledgeType.REJECT)
                else:
                    c.acknowledge(r, AcknowledgeType.ACCEPT)
            _committed(c)
            m = _metrics(kb)
            assert [m[f'kohort_share_record_acknowledgements_total{{ack_type="{t}"}}']
                    for t in ("Accept", "Release", "Reject", "Renew")] == [20, 5, 5, 0]
            view = {p: tuple(m[f'kohort_share_partition_{n}{{group="sg",topic="t",partition="{p}"}}']
                             for n in ("start_offset", "lag", "in_flight_messages", "acquired_records"))
                    for p in range(3)}
            assert view == {0: (10, 0, 0, 0), 1: (0, 5, 10, 0), 2: (10, 0, 0, 0)}
            p1 = 'group="sg",topic="t",partition="1"'
            assert m[f'kohort_share_partition_records_by_delivery_count{{{p1},delivery_count="1"}}'] == 5

            # the five released records come back with delivery count 2, their last delivery under
            # share.delivery.count.limit=2: each goes out alone, and released again each is archived
            again = []
            deadline = time.monotonic() + 15
            while len(again) < 5 and time.monotonic() < deadline:
                for r in c.poll(0.3):
                    again.append(r)
                    c.acknowledge(r, AcknowledgeType.RELEASE)
            _committed(c)
            assert sorted((r.partition, r.offset, r.delivery_count) for r in again) == [(1, o, 2) for o in range(5)]
            m = _metrics(kb)
            assert m[f"kohort_share_partition_records_acquired_total{{{p1}}}"] == 15
            assert m[f"kohort_share_partition_records_redelivered_total{{{p1}}}"] == 5
            assert m[f"kohort_share_partition_delivery_limit_archived_total{{{p1}}}"] == 5
            assert m[f"kohort_share_partition_acquired_records{{{p1}}}"] == 0
            assert m['kohort_share_record_acknowledgements_total{ack_type="Release"}'] == 10
            assert (m[f"kohort_share_partition_start_offset{{{p1}}}"], m[f"kohort_share_partition_lag{{{p1}}}"],
                    m[f"kohort_share_partition_in_flight_messages{{{p1}}}"]) == (10, 0, 0)
            assert all(m[f'kohort_share_partition_{n}{{group="sg",topic="t",partition="{p}"}}'] == 0
                       for p in (0, 2) for n in ("delivery_limit_archived_total", "acquisition_lock_timeouts_total"))
            # the share requests' rates and times are the per-API series; none failed
            fetches = m['kohort_requests_total{api="ShareFetch"}']
            assert fetches == m['kohort_request_seconds_count{api="ShareFetch"}'] > 0
            assert m['kohort_requests_total{api="ShareGroupHeartbeat"}'] > 0
            assert m['kohort_share_requests_failed_total{api="ShareFetch"}'] == 0
            assert m['kohort_share_requests_failed_total{api="ShareAcknowledge"}'] == 0
        finally:
            c.close(timeout=5)
        m = _metrics(kb)
        assert m['kohort_share_group_count{state="Empty"}'] == 1
        assert m['kohort_group_state{group="sg",type="share",state="Empty"}'] == 1
        assert m['kohort_group_members{group="sg"}'] == 0


def test_lock_expiry_and_failed_share_requests_are_counted():
    with broker(CONFIG) as kb:
        _setup(kb, "u", "sl", 4, 1, **{"share.record.lock.duration.ms": "1000"})
        c = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "sl",
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe(["u"])
        lbl = 'group="sl",topic="u",partition="0"'
        try:
            _poll(c, 4)
            # not acknowledged: the locks expire after 1 s and the four records are available again
            deadline = time.monotonic() + 10
            while _metrics(kb)[f"kohort_share_partition_acquisition_lock_timeouts_total{{{lbl}}}"] < 4:
                assert time.monotonic() < deadline, "the locks did not expire"
                time.sleep(0.1)
            m = _metrics(kb)
            assert m[f"kohort_share_partition_acquisition_lock_timeouts_total{{{lbl}}}"] == 4
            assert m[f"kohort_share_partition_acquired_records{{{lbl}}}"] == 0
            assert m[f'kohort_share_partition_records_by_delivery_count{{{lbl},delivery_count="1"}}'] == 4
            assert m[f"kohort_share_partition_lag{{{lbl}}}"] == 4
        finally:
            c.close(timeout=5)
        # a member without a share session: its ShareFetch (epoch 3) and ShareAcknowledge are refused
        raw = RawClient(kb.bootstrap_servers)
        try:
            member = str(uuid.uuid4())
            f = raw.request(ShareFetchRequest(group_id="sl", member_id=member, share_session_epoch=3, max_wait_ms=0,
                                              min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500,
                                              share_acquire_mode=0, is_renew_ack=False, topics=[],
                                              forgotten_topics_data=[]), 2)
            a = raw.request(ShareAcknowledgeRequest(group_id="sl", member_id=member, share_session_epoch=3,
                                                    is_renew_ack=False, topics=[]), 2)
            assert f.error_code != 0 and a.error_code != 0
        finally:
            raw.close()
        m = _metrics(kb)
        assert m['kohort_share_requests_failed_total{api="ShareFetch"}'] == 1
        assert m['kohort_share_requests_failed_total{api="ShareAcknowledge"}'] == 1


def test_share_group_events_from_join_to_leave():
    with broker(CONFIG) as kb:
        _setup(kb, "e", "se", 3, 2)
        a = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "se", "client.id": "ca"})
        b = ShareConsumer({"bootstrap.servers": kb.bootstrap_servers, "group.id": "se", "client.id": "cb"})
        try:
            a.subscribe(["e"])
            _poll(a, 6)
            a_id = a.member_id
            evs = _events(kb, "se")
            kinds = [e.kind for e in evs]
            assert kinds[:2] == ["GroupCreated", "MemberJoined"], kinds
            assert evs[0].reason == "share group created by ShareGroupHeartbeat"
            assert evs[1].member_id == a_id and evs[1].reason == (
                f"Member {a_id} joins the share group using the share protocol (client id ca, subscribed to e)")
            assert {"GroupEpochBumped", "TargetAssignmentComputed", "MemberAssignmentChanged",
                    "StateChanged"} <= set(kinds)
            assert all(e.type == "share" for e in evs)
            assert next(e for e in evs if e.kind == "StateChanged").reason == "Empty -> Stable"
            last = [e for e in evs if e.kind == "MemberAssignmentChanged"][-1]
            assert last.member_id == a_id and last.reason.endswith("assignedPartitions=[e-0, e-1]")

            b.subscribe(["e"])
            b.poll(0.5)
            deadline = time.monotonic() + 10
            while not any(e.kind == "MemberJoined" and e.member_id == b.member_id for e in _events(kb, "se")):
                assert time.monotonic() < deadline, "b never joined"
                b.poll(0.2)
            b_id = b.member_id
            joined = [e for e in _events(kb, "se") if e.kind == "MemberJoined" and e.member_id == b_id][0]
            assert joined.members == 2 and joined.state == "Stable"
            assert log_message(joined) == (
                logging.INFO, f"[GroupId se] Member {b_id} joins the share group using the share protocol.")
            bumps = [e for e in _events(kb, "se") if e.kind == "GroupEpochBumped"]
            assert bumps[-1].reason.endswith(f"Member {b_id} joins the share group using the share protocol "
                                             f"(client id cb, subscribed to e)")
        finally:
            b.close(timeout=5)
        left = [e for e in _events(kb, "se") if e.member_id == b_id and e.kind == "MemberLeft"]
        assert [e.reason for e in left] == [f"Member {b_id} left the share group"]
        assert log_message(left[0]) == (logging.INFO, f"[GroupId se] Member {b_id} left the share group.")
        a.close(timeout=5)
        evs = _events(kb, "se")
        assert [e.reason for e in evs if e.kind == "MemberLeft" and e.member_id == a_id] == [
            f"Member {a_id} left the share group"]
        assert evs[-1].kind == "StateChanged" and evs[-1].reason == "Stable -> Empty" and evs[-1].members == 0
        # the metrics count the group's epoch bumps as its rebalances
        m = _metrics(kb)
        assert m['kohort_group_rebalances_total{group="se"}'] == sum(1 for e in evs if e.kind == "GroupEpochBumped")

        with Admin({"bootstrap.servers": kb.bootstrap_servers}) as adm:
            assert adm.delete_share_groups(["se"]) == {"se": None}
        assert _events(kb, "se")[-1].kind == "GroupDeleted"


def test_a_share_member_whose_session_expires_is_fenced_in_the_events():
    with broker({**CONFIG, "group.share.session.timeout.ms": 1500}) as kb:
        kb.create_topic("x", 1)
        raw = RawClient(kb.bootstrap_servers)
        member = str(uuid.uuid4())
        try:
            r = raw.request(ShareGroupHeartbeatRequest(group_id="sx", member_id=member, member_epoch=0,
                                                       subscribed_topic_names=["x"]), 1)
            assert r.error_code == 0, r
        finally:
            raw.close()
        deadline = time.monotonic() + 10      # no further heartbeat: fenced after 1.5 s
        while not any(e.kind == "MemberExpired" for e in _events(kb, "sx")):
            assert time.monotonic() < deadline, _events(kb, "sx")
            time.sleep(0.1)
        ev = [e for e in _events(kb, "sx") if e.kind == "MemberExpired"]
        assert [(e.member_id, e.reason, e.members, e.state) for e in ev] == [
            (member, f"Member {member} fenced from the group because the member session expired", 0, "Empty")]
        assert log_message(ev[0]) == (
            logging.INFO, f"[GroupId sx] Member {member} fenced from the group because the member session expired.")
        m = _metrics(kb)
        assert m['kohort_group_members{group="sx"}'] == 0
        assert m['kohort_share_group_count{state="Empty"}'] == 1
