"""Issue 12's group divergences from Java's KafkaConsumer, one scenario per function, each taking a
bootstrap string (plus a restart callable where the broker must bounce) so the same scenario runs on
kohort broker (tests/client/consumer/test_group_divergences.py) and on Apache Kafka (the main session's test bed).

Each returns nothing and raises AssertionError when kohort's consumer behaves unlike Java's.
Those taking `protocol` also run with group.protocol=consumer (KIP-848, issue 14:
tests/client/consumer/test_kip848_client.py), where Java's AsyncKafkaConsumer behaves the same way.
"""
from __future__ import annotations

import threading
import time

from kohort import Consumer
from kohort.client.admin import Admin
from kohort.structs import OffsetAndMetadata, TopicPartition
from tests.helpers.peers import create_topic, produce

BASE = {"auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "enable.auto.commit": False}


def _conf(bs: str, group: str, protocol: str, **extra) -> dict:
    """BASE for a classic member; for a KIP-848 member the broker times the group (no session or
    heartbeat keys, which Java refuses with group.protocol=consumer)."""
    if protocol == "classic":
        return {"bootstrap.servers": bs, "group.id": group, **BASE, **extra}
    base = {k: v for k, v in BASE.items() if k not in ("session.timeout.ms", "heartbeat.interval.ms")}
    return {"bootstrap.servers": bs, "group.id": group, **base, "group.protocol": protocol, **extra}


def _poll_until(c, cond, timeout=15.0, what="condition"):
    got = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got.extend(c.poll(0.1))
        if cond(got):
            return got
    raise AssertionError(f"{what} not met in {timeout}s; got {len(got)} records, health {c.health()}, "
                         f"assignment {sorted(c.assignment())}")


def _tps(topic, n):
    return {TopicPartition(topic, p) for p in range(n)}


def metadata_driven_rejoin(bs: str, tag: str, protocol: str = "classic") -> None:
    """(1) A subscribed topic that does not exist yet does not hold the group up: the leader assigns
    from the metadata it has at once; once the topic is created (and later grown) the leader's
    metadata changes and the group rebalances to take its partitions."""
    have, later = f"md-{tag}-have", f"md-{tag}-later"
    assert create_topic(bs, have, 2) == 2
    conf = _conf(bs, f"md-{tag}", protocol, **{"metadata.max.age.ms": 500, "allow.auto.create.topics": False})
    with Consumer(conf) as c, Admin({"bootstrap.servers": bs}) as admin:
        c.subscribe([have, later])
        # Java: assigned from what it has within the initial rebalance (kohort before: 10 s wait per
        # rebalance without heartbeats, evicted with session.timeout.ms=6000, never stable)
        _poll_until(c, lambda g: c.assignment() == _tps(have, 2), timeout=8, what="assignment of the existing topic")
        assert create_topic(bs, later, 3) == 3
        _poll_until(c, lambda g: c.assignment() == _tps(have, 2) | _tps(later, 3), timeout=15,
                    what="the created topic's partitions")
        errs = admin.create_partitions({later: 5})
        assert all(e is None for e in errs.values()), errs
        _poll_until(c, lambda g: c.assignment() == _tps(have, 2) | _tps(later, 5), timeout=15,
                    what="the grown topic's partitions")


def coordinator_restart_during_processing(bs: str, restart, tag: str) -> None:
    """(2) The coordinator restarts while the member processes one batch for longer than
    session.timeout.ms: the heartbeat side finds the coordinator again and keeps the membership.
    As Java's and librdkafka's members, no rebalance callback runs (neither during the processing nor
    in the polls after it), the member keeps its id, generation and partitions, and the commit
    afterwards succeeds in that generation."""
    topic = f"cr-{tag}"
    assert create_topic(bs, topic, 2) == 2
    produce(bs, topic, 40, partitions=2)
    conf = {"bootstrap.servers": bs, "group.id": f"cr-{tag}", **BASE, "max.poll.interval.ms": 60000,
            "max.poll.records": 5}
    calls: list = []
    with Consumer(conf) as c:
        c.subscribe([topic], on_assign=lambda _c, tps: calls.append(("assign", sorted(tps))),
                     on_revoke=lambda _c, tps: calls.append(("revoke", sorted(tps))),
                     on_lost=lambda _c, tps: calls.append(("lost", sorted(tps))))
        got = _poll_until(c, lambda g: len(g) > 0)
        before = c.health()
        assert calls == [("assign", sorted(_tps(topic, 2)))], calls
        restart()
        time.sleep(9)                       # "processing": longer than session.timeout.ms after the restart
        for _ in range(20):                 # a rejoin requested meanwhile would run in these polls
            got.extend(c.poll(0.1))
        c.commit()                          # kohort before: UNKNOWN_MEMBER_ID (evicted meanwhile)
        after = c.health()
        assert calls == [("assign", sorted(_tps(topic, 2)))], f"rebalance callbacks after the restart: {calls[1:]}"
        assert after["member_id"] == before["member_id"], (before, after)
        assert after["generation_id"] == before["generation_id"], (before, after)
        assert c.assignment() == _tps(topic, 2)
        committed = c.committed(sorted(_tps(topic, 2)), 10)
        for tp, om in committed.items():
            assert om is not None and om.offset == c.position(tp, 10), (tp, om)


def ck_coordinator_restart_during_processing(bs: str, restart, tag: str) -> None:
    """(2) with confluent-kafka (librdkafka), the reference: the same scenario, the same expectations
    (no callback after the first assignment, a synchronous commit that succeeds)."""
    from confluent_kafka import Consumer as CkConsumer, TopicPartition as CkTP
    topic = f"crck-{tag}"
    assert create_topic(bs, topic, 2) == 2
    produce(bs, topic, 40, partitions=2)
    calls: list = []
    c = CkConsumer({"bootstrap.servers": bs, "group.id": f"crck-{tag}", "auto.offset.reset": "earliest",
                    "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
                    "max.poll.interval.ms": 60000})
    try:
        c.subscribe([topic], on_assign=lambda _c, ps: calls.append(("assign", sorted((p.topic, p.partition) for p in ps))),
                    on_revoke=lambda _c, ps: calls.append(("revoke", sorted((p.topic, p.partition) for p in ps))),
                    on_lost=lambda _c, ps: calls.append(("lost", sorted((p.topic, p.partition) for p in ps))))
        end = time.monotonic() + 20
        msg = None
        while msg is None and time.monotonic() < end:
            msg = c.poll(0.2)
        assert msg is not None and msg.error() is None, msg and msg.error()
        first = [("assign", [(topic, 0), (topic, 1)])]
        assert calls == first, calls
        restart()
        time.sleep(9)
        for _ in range(20):
            m = c.poll(0.1)
            assert m is None or m.error() is None, m.error()
        c.commit(asynchronous=False)
        assert calls == first, f"rebalance callbacks after the restart: {calls[1:]}"
        assert sorted((p.topic, p.partition) for p in c.assignment()) == [(topic, 0), (topic, 1)]
        positions = {(p.topic, p.partition): p.offset for p in c.position([CkTP(topic, 0), CkTP(topic, 1)])}
        for p in c.committed([CkTP(topic, 0), CkTP(topic, 1)], timeout=10):
            assert p.offset == positions[(p.topic, p.partition)], (p, positions)
    finally:
        c.close()


def commit_after_rebalance(bs: str, tag: str, protocol: str = "classic") -> None:
    """(3) After a rebalance completes, commit() succeeds (Java checks only that the generation is
    stable), even though no records were handed out in the new generation."""
    topic = f"car-{tag}"
    assert create_topic(bs, topic, 2) == 2
    produce(bs, topic, 20, partitions=2)
    group = f"car-{tag}"
    conf = _conf(bs, group, protocol)
    with Consumer(conf) as a:
        a.subscribe([topic])
        _poll_until(a, lambda g: len(g) >= 20)
        a.commit()                          # so that the next generation hands out no records
        gen = a.health()["generation_id"]
        stop = threading.Event()
        with Consumer(conf) as b:
            b.subscribe([topic])
            t = threading.Thread(target=lambda: [b.poll(0.1) for _ in iter(stop.is_set, True)], daemon=True)
            t.start()
            try:
                _poll_until(a, lambda g: a.health()["generation_id"] > gen and a.health()["member_state"] == "STABLE"
                            and len(a.assignment()) == 1, timeout=20, what="a rebalance to two members")
                for tp in a.assignment():
                    assert a.position(tp, 10) == 10
                a.commit()                  # kohort before: CommitFailedError "handed out in generation"
            finally:
                stop.set()
                t.join(10)


def join_retried_after_fatal_error(bs: str, tag: str) -> None:
    """(4) JoinGroup answered GROUP_MAX_SIZE_REACHED raises from poll(), but a later poll tries again
    and joins once there is room. Needs a broker with group.max.size=1."""
    from kohort.errors import GroupMaxSizeReachedError
    topic = f"gms-{tag}"
    assert create_topic(bs, topic, 2) == 2
    conf = {"bootstrap.servers": bs, "group.id": f"gms-{tag}", **BASE}
    a = Consumer(conf)
    try:
        a.subscribe([topic])
        _poll_until(a, lambda g: len(a.assignment()) == 2)
        with Consumer(conf) as b:
            b.subscribe([topic])
            raised = False
            end = time.monotonic() + 15
            while not raised and time.monotonic() < end:
                try:
                    b.poll(0.1)
                    a.poll(0)
                except GroupMaxSizeReachedError:
                    raised = True
            assert raised, "the second member never saw GROUP_MAX_SIZE_REACHED"
            a.close()
            # Java: the next polls join once the first member left (kohort before: never again)
            end = time.monotonic() + 20
            while time.monotonic() < end and len(b.assignment()) != 2:
                try:
                    b.poll(0.1)
                except GroupMaxSizeReachedError:
                    pass
            assert b.assignment() == _tps(topic, 2), b.health()
    finally:
        a.close()


def poll_after_max_poll_interval(bs: str, tag: str, protocol: str = "classic") -> None:
    """(5) After max.poll.interval.ms without poll(): commit() fails (the lost generation), the next
    poll() does not raise but calls on_partitions_lost and rejoins; commits work again afterwards."""
    from kohort.client.consumer.group import CommitFailedError
    topic = f"mpi-{tag}"
    assert create_topic(bs, topic, 2) == 2
    produce(bs, topic, 20, partitions=2)
    conf = _conf(bs, f"mpi-{tag}", protocol, **{"max.poll.interval.ms": 1500})
    lost = []
    with Consumer(conf) as c:
        c.subscribe([topic], on_lost=lambda cons, tps: lost.extend(tps))
        _poll_until(c, lambda g: len(g) > 0)
        gen = c.health()["generation_id"]
        time.sleep(2.5)
        try:
            c.commit()
        except CommitFailedError:
            pass
        else:
            raise AssertionError("a commit of the lost generation succeeded")
        c.poll(0.1)                         # kohort before: MaxPollIntervalExceededError
        assert set(lost) == _tps(topic, 2)
        _poll_until(c, lambda g: c.health()["member_state"] == "STABLE" and c.assignment() == _tps(topic, 2)
                    and c.health()["generation_id"] > gen, timeout=15, what="the rejoin")
        c.commit()


def slow_member_survives_rebalance(bs: str, tag: str) -> None:
    """(6) A cooperative member processing each batch for longer than session.timeout.ms stays in
    the group through a rebalance: heartbeats go on while its JoinGroup/SyncGroup are in flight and
    their answers are handled while it processes."""
    topic = f"slow-{tag}"
    assert create_topic(bs, topic, 4) == 4
    produce(bs, topic, 400, partitions=4)
    group = f"slow-{tag}"
    conf = {"bootstrap.servers": bs, "group.id": group, **BASE, "max.poll.interval.ms": 30000,
            "max.poll.records": 5, "partition.assignment.strategy": "cooperative-sticky"}
    lost = []
    with Consumer(conf) as a:
        a.subscribe([topic], on_lost=lambda cons, tps: lost.extend(tps))
        _poll_until(a, lambda g: len(g) > 0 and len(a.assignment()) == 4)
        member = a.health()["member_id"]
        stop = threading.Event()
        with Consumer(conf) as b:
            b.subscribe([topic])
            t = threading.Thread(target=lambda: [b.poll(0.1) for _ in iter(stop.is_set, True)], daemon=True)
            t.start()
            try:
                end = time.monotonic() + 30
                while time.monotonic() < end:
                    if a.poll(0.2):
                        time.sleep(7)       # processing: longer than session.timeout.ms (6 s)
                    if a.assignment() and b.assignment() and len(a.assignment() | b.assignment()) == 4 \
                            and a.health()["member_state"] == "STABLE":
                        break
                assert not lost, f"partitions lost: {lost}"
                assert a.health()["member_id"] == member
                assert a.assignment() and b.assignment() and not (a.assignment() & b.assignment())
            finally:
                stop.set()
                t.join(10)


def illegal_generation_keeps_member_id(bs: str, tag: str) -> None:
    """(7) A Heartbeat answered ILLEGAL_GENERATION resets the generation only: the member rejoins
    with its member id, so the group never holds a ghost of it."""
    topic = f"ig-{tag}"
    assert create_topic(bs, topic, 2) == 2
    group = f"ig-{tag}"
    conf = {"bootstrap.servers": bs, "group.id": group, **BASE}
    with Consumer(conf) as c, Admin({"bootstrap.servers": bs}) as admin:
        c.subscribe([topic])
        _poll_until(c, lambda g: len(c.assignment()) == 2)
        h = c.health()
        _stale_generation(c)                # the next heartbeat carries a generation the group is not at
        _poll_until(c, lambda g: c.health()["generation_id"] > h["generation_id"]
                    and c.health()["member_state"] == "STABLE", timeout=15, what="the rejoin")
        assert c.health()["member_id"] == h["member_id"]
        members = admin.describe_groups([group])[0].members
        assert [m.member_id for m in members] == [h["member_id"]], members


def _stale_generation(c) -> None:
    g = c._group
    if hasattr(g, "m"):
        from kohort.client.consumer.membership import Generation
        with g._lock:
            gen = g.m.generation
            g.m.generation = Generation(gen.generation_id + 10, gen.member_id, gen.protocol_name)
    else:   # the consumer before issue 12
        g.generation_id += 10


def committed_offset_validated_after_restart(bs: str, tag: str) -> None:
    """(8) A restarted member validates the committed offset's leader epoch (OffsetForLeaderEpoch,
    KIP-320) before fetching: an offset past the end of its epoch is a truncation and the member
    resumes at the epoch's end offset instead of resetting to auto.offset.reset."""
    topic = f"val-{tag}"
    assert create_topic(bs, topic, 1) == 1
    produce(bs, topic, 10, partitions=1)
    tp = TopicPartition(topic, 0)
    conf = {"bootstrap.servers": bs, "group.id": f"val-{tag}", **BASE}
    with Consumer(conf) as c:
        c.subscribe([topic])
        got = _poll_until(c, lambda g: len(g) >= 10)
        epoch = got[-1].leader_epoch
        assert epoch is not None and epoch >= 0, got[-1]
        # as if records 10..14 had been consumed and then lost with an unclean leader change
        c.commit({tp: OffsetAndMetadata(15, "", epoch)})
    with Consumer(conf) as c:
        c.subscribe([topic])
        # Java: OffsetForLeaderEpoch says the epoch ends at 10 < 15: truncation, resume at 10
        early = _poll_until(c, lambda g: c.position(tp) == 10 if c.assignment() else False, what="position 10")
        produce(bs, topic, 10, partitions=1, start=10)
        got = early + _poll_until(c, lambda g: len(g) > 0)
        # kohort before: no validation; fetching 15 is out of range and auto.offset.reset rewinds to 0
        assert got[0].offset == 10, [r.offset for r in got[:5]]


def fetch_diverging_epoch(bs: str, tag: str) -> None:
    """(8, broker) A Fetch whose last_fetched_epoch ends before its fetch offset is answered with the
    diverging epoch and its end offset (KIP-320), not OFFSET_OUT_OF_RANGE."""
    from kohort.client.network import NetworkClient
    from kohort.protocol.framing import Versioned
    from kohort.protocol.messages.fetch import FetchRequest
    topic = f"div-{tag}"
    assert create_topic(bs, topic, 1) == 1
    produce(bs, topic, 10, partitions=1)
    nc = NetworkClient({"bootstrap.servers": bs}, role="consumer")
    try:
        from kohort.protocol.messages.metadata import MetadataRequest
        md = nc.send(None, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).result(10)
        nc.update_brokers({b.node_id: (b.host, b.port) for b in md.brokers})
        part = md.topics[0].partitions[0]
        leader, epoch = part.leader_id, part.leader_epoch

        def build(v):
            FP = FetchRequest.FetchTopic.FetchPartition
            return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                                    topic=topic, topic_id=md.topics[0].topic_id, partitions=[FP(
                                        partition=0, current_leader_epoch=epoch, fetch_offset=15,
                                        last_fetched_epoch=epoch, partition_max_bytes=1 << 20)])],
                                forgotten_topics_data=[], rack_id="")
        fut = nc.send(leader, Versioned(FetchRequest.API_KEY, build), max_version=12)
        resp = fut.result(10)
        p = resp.responses[0].partitions[0]
        assert p.error_code == 0, p
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (epoch, 10), p.diverging_epoch
    finally:
        nc.close()


def leader_epoch_bumps_on_restart(bs: str, restart, tag: str) -> None:
    """(8, broker) A restarted single-node cluster leads its partitions in a new leader epoch (KRaft
    elects it again); records keep the epoch they were written in, OffsetForLeaderEpoch answers the
    old epoch's end, and a consumer that read through the restart sees every record once."""
    from kohort.client.network import NetworkClient
    from kohort.protocol.messages.metadata import MetadataRequest
    from kohort.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest as R
    topic = f"epoch-{tag}"
    assert create_topic(bs, topic, 1) == 1
    produce(bs, topic, 5, partitions=1)

    def leader_epoch():
        nc = NetworkClient({"bootstrap.servers": bs}, role="consumer")
        try:
            md = nc.send(None, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])).result(10)
            nc.update_brokers({b.node_id: (b.host, b.port) for b in md.brokers})
            p = md.topics[0].partitions[0]
            req = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=topic, partitions=[
                R.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=0, current_leader_epoch=p.leader_epoch,
                                                                leader_epoch=first)])]) if first is not None else None
            end = nc.send(p.leader_id, req).result(10).topics[0].partitions[0] if req is not None else None
            return p.leader_epoch, end
        finally:
            nc.close()
    first = None
    first, _ = leader_epoch()
    conf = {"bootstrap.servers": bs, "group.id": f"epoch-{tag}", **BASE}
    with Consumer(conf) as c:
        c.subscribe([topic])
        got = _poll_until(c, lambda g: len(g) >= 5)
        assert {r.leader_epoch for r in got} == {first}
        restart()
        produce(bs, topic, 5, partitions=1, start=5)
        got += _poll_until(c, lambda g: len(g) >= 5, timeout=20)
        assert [r.offset for r in got] == list(range(10))
        assert got[-1].leader_epoch > first
    second, end = leader_epoch()
    assert second > first
    assert (end.error_code, end.leader_epoch, end.end_offset) == (0, first, 5)


def close_leaves_group(bs: str, tag: str) -> None:
    """close() sends LeaveGroup and waits for its answer: the group is empty right after."""
    topic = f"cl-{tag}"
    assert create_topic(bs, topic, 2) == 2
    group = f"cl-{tag}"
    with Admin({"bootstrap.servers": bs}) as admin:
        for _ in range(3):
            c = Consumer({"bootstrap.servers": bs, "group.id": group, **BASE})
            try:
                c.subscribe([topic])
                _poll_until(c, lambda g: len(c.assignment()) == 2)
            finally:
                c.close()
            d = admin.describe_groups([group])[0]
            assert d.members == [] and d.state == "Empty", d


def pattern_subscription_follows_topics(bs: str, tag: str) -> None:
    """A regex subscription joins with the topics matching when metadata first arrives, and rejoins
    when a new topic matches (Java's updatePatternSubscription on a metadata update)."""
    first, second, other = f"pt-{tag}-a", f"pt-{tag}-b", f"ptx-{tag}"
    assert create_topic(bs, first, 2) == 2
    assert create_topic(bs, other, 1) == 1
    conf = {"bootstrap.servers": bs, "group.id": f"pt-{tag}", **BASE, "metadata.max.age.ms": 500}
    with Consumer(conf) as c:
        c.subscribe(f"^pt-{tag}-.*")
        _poll_until(c, lambda g: c.assignment() == _tps(first, 2), what="the matching topic")
        assert c.subscription() == {first}
        assert create_topic(bs, second, 1) == 1
        _poll_until(c, lambda g: c.assignment() == _tps(first, 2) | _tps(second, 1), what="the new matching topic")
