"""Apache Kafka 4.3.1's own share-group clients against kohort broker (KIP-932):

- KafkaShareConsumer members (tests/interop/peers/java/SharePeer.java) and confluent-kafka ShareConsumer members
  (tests/interop/peers/ck_share_member.py), each in a process of its own, on 3-partition topics: 3 Java members,
  3 Java + 3 confluent-kafka members in one group -- every record accepted exactly once;
- explicit acknowledgement by either kind: RELEASE redelivers with delivery count 2, REJECT archives,
  releasing every time ends at the delivery count limit (archived); Java's implicit mode, and its RENEW
  (KIP-1222);
- (slow) a Java member SIGKILLed or SIGSTOPped while it holds acquired records: they go to the other
  members (the frozen member's once its locks expire); kohort broker SIGKILLed under Java members:
  acknowledged records are never delivered again, the in-flight ones come back;
- (slow: twenty JVM starts) Kafka's kafka-share-groups.sh (ShareGroupCommand) describing, resetting and deleting share groups on
  kohort broker, compared with `kohort share-groups` where both print the same thing.

Every check is on exact sets of (topic, partition, offset) with their delivery counts. The client
scenarios run again (slow) on Apache Kafka 4.3.1 with the same settings: the same records, delivery
counts and lags (the start offsets differ as test_share_broker_kafka_wire.py pins). The broker runs
with the fast share settings of test_share_consumer_kafka.py (lock 4 s, heartbeat 0.5 s, delivery count
limit 3, assignment interval 0); each group reads from the earliest offset (group config).
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter

import pytest

from kohort import Admin, Producer
from kohort.structs import TopicPartition
from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import SHARE_GROUPS, run_tool
from tests.helpers.peers import CkSharePeer, JavaSharePeer
from tests.client.share.test_share_consumer_kafka import SHARE_BROKER_CONFIG

PEERS = {"java": JavaSharePeer, "ck": CkSharePeer}


@pytest.fixture(scope="module")
def kb():
    """kohort broker with the fast share settings."""
    with KohortBroker(config=SHARE_BROKER_CONFIG) as b:
        b.kind = "kohort"
        yield b


@pytest.fixture(scope="module", params=["kohort", pytest.param("kafka", marks=pytest.mark.slow)])
def sb(request):
    """The broker of the client scenarios: kohort broker, and (slow) Apache Kafka 4.3.1 with the same
    settings, so that each scenario is known to be Kafka's behaviour too."""
    if request.param == "kohort":
        yield request.getfixturevalue("kb")
        return
    from tests.helpers.kafka_cluster import KafkaCluster
    kc = KafkaCluster(nodes=1, extra_config=SHARE_BROKER_CONFIG)
    kc.kind = "kafka"
    kc.start()
    yield kc
    kc.close()


@pytest.fixture(scope="module")
def admin(sb):
    a = Admin({"bootstrap.servers": sb.bootstrap})
    yield a
    a.close()


@pytest.fixture(scope="module")
def kadmin(kb):
    a = Admin({"bootstrap.servers": kb.bootstrap})
    yield a
    a.close()


def setup_topic(bootstrap: str, admin: Admin, partitions: int = 3, records: int = 30, prefix: str = "sj"):
    """A fresh topic with values v0..v{records-1}, record i on partition i % partitions, and a group name
    whose share.auto.offset.reset is earliest. -> (topic, group)."""
    t = f"{prefix}-{uuid.uuid4().hex[:8]}"
    g = "g-" + t
    admin.create_topics([t], num_partitions=partitions, replication_factor=1)
    admin.alter_configs(("group", g), {"share.auto.offset.reset": "earliest"})
    produce_range(bootstrap, t, partitions, 0, records)
    return t, g


def produce_range(bootstrap: str, topic: str, partitions: int, start: int, end: int) -> None:
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        for i in range(start, end):
            p.send(topic, value=b"v%d" % i, partition=i % partitions)
        p.flush()


def records_of(topic: str, partitions: int, start: int, end: int) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of records start..end-1 produced by produce_range into an empty topic."""
    return {(topic, i % partitions, i // partitions) for i in range(start, end)}


def accepted(peers) -> Counter:
    """How often each record was ACCEPTed with the broker's confirmation, over all peers."""
    return Counter((t, p, o) for peer in peers for t, p, o, _ in peer.confirmed("ACCEPT"))


def wait_until(pred, timeout: float, what: str, peers=()) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            tails = "\n".join(f"{type(p).__name__}: {p.events[-4:]} {p.stderr_lines[-5:]}" for p in peers)
            raise AssertionError(f"{what}: not within {timeout}s\n{tails}")
        time.sleep(0.2)


def start_all(peers):
    for p in peers:
        p.start()
    for p in peers:
        p.wait_for(lambda e: e["event"] == "started", timeout=60)
    return peers


def stop_all(peers) -> None:
    for p in peers:
        if p.proc is not None and p.proc.poll() is None:
            try:
                p.send("stop")
            except (BrokenPipeError, OSError):
                pass
    for p in peers:
        p.stop()


def no_errors(peers) -> None:
    """No error event, and (Java: its log shows ERROR lines only) nothing logged."""
    for p in peers:
        bad = [e for e in p.events if e.get("event") in ("fatal", "error")]
        logged = [ln for ln in p.stderr_lines if ln.startswith("ERROR")] if isinstance(p, JavaSharePeer) else []
        assert not bad and not logged, (type(p).__name__, bad[:3], logged[:5])


def describe_members(admin: Admin, group: str) -> list:
    return admin.describe_share_groups([group])[group].members


def offsets(admin: Admin, group: str) -> dict[int, tuple[int, int | None]]:
    return {tp.partition: (i.start_offset, i.lag) for tp, i in admin.list_share_group_offsets(group).items()}


def assert_offsets(broker, admin: Admin, group: str, expected: dict[int, tuple[int, int]]) -> None:
    """The group's {partition: (start offset, lag)}. Apache Kafka reports the start offset of its last
    persisted share state, which may lag behind the records already done (kohort: the live one; pinned in
    test_share_broker_kafka_wire.py): there the lags alone are compared."""
    got = offsets(admin, group)
    if broker.kind == "kafka":
        assert {p: lag for p, (_, lag) in got.items()} == {p: lag for p, (_, lag) in expected.items()}, got
    else:
        assert got == expected


# -- groups of Java members, and Java with confluent-kafka -------------------------------------------------
@pytest.mark.parametrize("kinds", [("java",) * 3, ("java",) * 3 + ("ck",) * 3], ids=["3java", "3java+3ck"])
def test_members_accept_every_record_exactly_once(sb, admin, kinds):
    """A share group of 3 KafkaShareConsumers (then 3 of them with 3 confluent-kafka ShareConsumers) on a
    3-partition topic: 150 records before the group settles, 150 while it has just settled, 150 once
    it is quiet. Every record is accepted exactly once and nothing lags.

    What Kafka does not promise, and so is not asserted: that every record is accepted on its first
    delivery, or that every member gets records right after the group settled. The first member to
    join is assigned all 3 partitions; when the others join, KafkaShareConsumer 4.3.1 keeps a revoked
    partition in its share session while it is still acknowledging records of it, and the leader
    serves every partition of a member's share session (neither Kafka's nor kohort's checks the
    assignment). While records keep coming, the revoked member's long poll, woken by its own
    partition's append, can acquire the other partitions' new records every time, which keeps them
    in its session. So (a) the members assigned those partitions may get none of the records
    produced meanwhile, and (b) when the client does drop a partition from its session while it
    still holds records of it, their acknowledgements fail in the client (NotLeaderOrFollowerException,
    never sent), so they stay acquired until their lock expires and are delivered again (delivery
    count 2). Asserted
    instead: every delivery is accounted for -- each record was handed out exactly as often as its
    delivery count says, and every delivery but the accepted one is a delivery whose acknowledgement
    the member reported failed; and once the sessions are quiet, every member gets records of the 150
    produced then."""
    t, g = setup_topic(sb.bootstrap, admin, 3, 150)
    peers = [PEERS[k](sb.bootstrap, t, g, client_id=f"{k}-{i}") for i, k in enumerate(kinds)]
    try:
        start_all(peers)
        first = records_of(t, 3, 0, 150)
        wait_until(lambda: set(accepted(peers)) == first, 60, "the first 150 records accepted", peers)

        def settled():
            d = admin.describe_share_groups([g])[g]
            return (len(d.members) == len(kinds) and all(m.assignment for m in d.members)
                    and d.group_epoch == d.assignment_epoch
                    and all(m.member_epoch == d.assignment_epoch for m in d.members))
        wait_until(settled, 30, f"{len(kinds)} members with an assignment", peers)
        d = admin.describe_share_groups([g])[g]
        assert sorted(m.client_id for m in d.members) == sorted(f"{k}-{i}" for i, k in enumerate(kinds))
        # the simple assignor: each partition shared by ceil(members / partitions) members
        per_partition = Counter(tp.partition for m in d.members for tp in m.assignment)
        assert per_partition == {p: len(kinds) // 3 for p in range(3)}
        for start in range(150, 300, 15):     # many small log batches: sharing members take turns
            produce_range(sb.bootstrap, t, 3, start, start + 15)
            time.sleep(0.2)
        wait_until(lambda: set(accepted(peers)) == records_of(t, 3, 0, 300), 60, "300 records accepted", peers)
        # quiet: every member's share session holds its assigned partitions only (fetch waits are 0.5 s)
        time.sleep(2.0)
        before = [len(p.confirmed()) for p in peers]
        for start in range(300, 450, 15):
            produce_range(sb.bootstrap, t, 3, start, start + 15)
            time.sleep(0.2)
        everything = records_of(t, 3, 0, 450)
        wait_until(lambda: set(accepted(peers)) == everything, 60, "all 450 records accepted", peers)
        # members poll in turns of their fetch waits: give each a moment, then hold them to it
        time.sleep(1.0)
        got = accepted(peers)
        assert set(got) == everything and set(got.values()) == {1}
        assert not any(p.records(ack) for p in peers for ack in ("RELEASE", "REJECT", "HOLD"))
        handed = Counter((r["topic"], r["partition"], r["offset"]) for p in peers for r in p.records())
        final = {(t_, p_, o): dc for peer in peers for t_, p_, o, dc in peer.confirmed()}
        assert {r: handed[r] for r in everything} == final       # every delivery counted by the broker
        lost = Counter((t_, p_, o) for peer in peers for t_, p_, o, _ in lost_acknowledgements(peer))
        assert lost == handed - Counter(everything)                # the others: acknowledgements that failed
        java_lost = {e for p in peers if isinstance(p, JavaSharePeer) for *_, e in lost_acknowledgements(p)}
        assert all(e and "NotLeaderOrFollowerException" in e for e in java_lost), java_lost
        assert_offsets(sb, admin, g, {p: (150, 0) for p in range(3)})
        late = [len(p.confirmed()) - b for p, b in zip(peers, before)]
        if len(kinds) == 3:      # every member got records of the 150 produced once the group was quiet
            assert all(late), late   # (not exactly its own partition's 50: Kafka 4.3.1 gave [50, 45, 55] once)
        else:                    # two members share each partition: both kinds took records
            assert sum(late[:3]) > 0 and sum(late[3:]) > 0, late
        no_errors(peers)
    finally:
        stop_all(peers)
    wait_until(lambda: admin.describe_share_groups([g])[g].state == "Empty", 15, "the group empty after close")


def lost_acknowledgements(peer) -> list[tuple[str, int, int, str | None]]:
    """(topic, partition, offset, error) of each record `peer` was handed whose acknowledgement the
    broker did not confirm: its commit reported an error for the partition, or left it out."""
    out, pending = [], []
    for e in list(peer.events):
        if e.get("event") == "record":
            pending.append(e)
        elif e.get("event") == "committed":
            res = e["results"]
            for r in pending:
                err = res.get(f"{r['topic']}-{r['partition']}")
                if err is not None or f"{r['topic']}-{r['partition']}" not in res:
                    out.append((r["topic"], r["partition"], r["offset"], err))
            pending = []
    return out


# -- acknowledgement types -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["java", "ck"])
def test_release_redelivers_with_delivery_count_2(sb, admin, kind):
    t, g = setup_topic(sb.bootstrap, admin, 1, 10)
    peer = PEERS[kind](sb.bootstrap, t, g, release="0:3,0:7")
    try:
        start_all([peer])
        wait_until(lambda: len(peer.confirmed()) == 10, 40, "10 records accepted", [peer])
        time.sleep(0.5)
        assert sorted((o, dc) for _, _, o, dc in peer.confirmed("RELEASE")) == [(3, 1), (7, 1)]
        assert sorted((o, dc) for _, _, o, dc in peer.confirmed()) == \
            sorted([(o, 1) for o in range(10) if o not in (3, 7)] + [(3, 2), (7, 2)])
        assert sorted(r["value"] for r in peer.records() if r["delivery_count"] == 2) == ["v3", "v7"]
        assert len(peer.records()) == 12
        assert_offsets(sb, admin, g, {0: (10, 0)})
        no_errors([peer])
    finally:
        stop_all([peer])


@pytest.mark.parametrize("kind", ["java", "ck"])
def test_reject_archives(sb, admin, kind):
    """REJECTed records are archived: not delivered again (not after the lock duration either, not when
    a new record comes), yet counted as done (start offset past them, no lag)."""
    t, g = setup_topic(sb.bootstrap, admin, 1, 10)
    peer = PEERS[kind](sb.bootstrap, t, g, reject="0:2,0:5")
    try:
        start_all([peer])
        wait_until(lambda: len(peer.confirmed()) == 8, 40, "8 records accepted", [peer])
        assert sorted(o for _, _, o, _ in peer.confirmed("REJECT")) == [2, 5]
        assert_offsets(sb, admin, g, {0: (10, 0)})
        time.sleep(SHARE_BROKER_CONFIG["group.share.record.lock.duration.ms"] / 1000 + 1)
        produce_range(sb.bootstrap, t, 1, 10, 11)
        wait_until(lambda: len(peer.confirmed()) == 9, 20, "the new record accepted", [peer])
        time.sleep(0.5)
        assert sorted((o, dc) for _, _, o, dc in peer.confirmed()) == [(o, 1) for o in range(11) if o not in (2, 5)]
        assert len(peer.records()) == 11
        assert_offsets(sb, admin, g, {0: (11, 0)})
        no_errors([peer])
    finally:
        stop_all([peer])


@pytest.mark.parametrize("kind", ["java", "ck"])
def test_delivery_count_limit_archives(sb, admin, kind):
    """A record released on every delivery is delivered exactly group.share.delivery.count.limit (3)
    times and then archived; the rest is accepted once."""
    limit = SHARE_BROKER_CONFIG["group.share.delivery.count.limit"]
    t, g = setup_topic(sb.bootstrap, admin, 1, 10)
    peer = PEERS[kind](sb.bootstrap, t, g, release="0:4", release_until=99)
    try:
        start_all([peer])
        wait_until(lambda: len(peer.confirmed("RELEASE")) == limit and len(peer.confirmed()) == 9, 40,
                   f"record 4 released {limit} times, the others accepted", [peer])
        produce_range(sb.bootstrap, t, 1, 10, 11)
        wait_until(lambda: len(peer.confirmed()) == 10, 20, "the new record accepted", [peer])
        time.sleep(0.5)
        assert sorted((o, dc) for _, _, o, dc in peer.confirmed("RELEASE")) == [(4, n) for n in range(1, limit + 1)]
        assert sorted((o, dc) for _, _, o, dc in peer.confirmed()) == [(o, 1) for o in range(11) if o != 4]
        assert len(peer.records()) == 10 + limit
        assert_offsets(sb, admin, g, {0: (11, 0)})
        no_errors([peer])
    finally:
        stop_all([peer])


def test_java_implicit_acknowledgement(sb, admin):
    """Two KafkaShareConsumers in implicit mode: each poll accepts the previous one's records; the
    acknowledgement callback reports every record confirmed exactly once, nothing lags."""
    t, g = setup_topic(sb.bootstrap, admin, 3, 60)
    peers = [JavaSharePeer(sb.bootstrap, t, g, ack_mode="implicit", client_id=f"imp-{i}") for i in range(2)]
    try:
        start_all(peers)
        everything = records_of(t, 3, 0, 60)
        acked = lambda: sum((p.acked() for p in peers), Counter())       # noqa: E731
        wait_until(lambda: set(acked()) == everything, 40, "60 records acknowledged", peers)
        time.sleep(1.0)
        assert set(acked()) == everything and set(acked().values()) == {1}
        handed = Counter((r["topic"], r["partition"], r["offset"], r["delivery_count"], r["ack"])
                         for p in peers for r in p.records())
        assert set(handed) == {(tt, pp, o, 1, "IMPLICIT") for tt, pp, o in everything} and set(handed.values()) == {1}
        assert_offsets(sb, admin, g, {p: (20, 0) for p in range(3)})
        no_errors(peers)
    finally:
        stop_all(peers)


def test_java_renew_keeps_the_record_for_a_later_poll(sb, admin):
    """KIP-1222 from Java (ShareAcknowledge/ShareFetch v2 with IsRenewAck): a RENEWed record keeps its
    lock and comes back to the same member in a later poll with the same delivery count."""
    t, g = setup_topic(sb.bootstrap, admin, 1, 5)
    peer = JavaSharePeer(sb.bootstrap, t, g, renew="0:1,0:3")
    try:
        start_all([peer])
        wait_until(lambda: len(peer.confirmed()) == 5, 30, "5 records accepted", [peer])
        time.sleep(0.5)
        assert sorted((r["offset"], r["delivery_count"], r["ack"]) for r in peer.records()) == sorted(
            [(o, 1, "ACCEPT") for o in range(5)] + [(1, 1, "RENEW"), (3, 1, "RENEW")])
        assert sorted(o for _, _, o, _ in peer.confirmed("RENEW")) == [1, 3]
        assert_offsets(sb, admin, g, {0: (5, 0)})
        no_errors([peer])
    finally:
        stop_all([peer])


# -- failures --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])
def test_members_records_go_to_the_others_when_it_dies_or_freezes(sb, admin, sig):
    """A KafkaShareConsumer holds the records of its first poll unacknowledged, then is SIGKILLed (its
    connection closes: the records are released) or SIGSTOPped (its connection stays: the records come
    back when their 4 s locks expire). Two other Java members get exactly those again with delivery
    count 2; every record is accepted exactly once."""
    t, g = setup_topic(sb.bootstrap, admin, 3, 60)
    holder = JavaSharePeer(sb.bootstrap, t, g, hold="*", client_id="holder")
    others = [JavaSharePeer(sb.bootstrap, t, g, client_id=f"j{i}") for i in range(2)]
    try:
        start_all([holder])
        holder.wait_for(lambda e: e["event"] == "holding", timeout=60)
        t_held = time.monotonic()
        os.killpg(holder.proc.pid, getattr(signal, sig))
        held = holder.held()
        assert held and not holder.confirmed()
        start_all(others)
        wait_until(lambda: held <= set(accepted(others)), 60, "the held records accepted by the others", others)
        elapsed = time.monotonic() - t_held
        wait_until(lambda: set(accepted(others)) == records_of(t, 3, 0, 60), 60, "all records accepted", others)
        time.sleep(1.0)
        got = accepted(others)
        assert set(got) == records_of(t, 3, 0, 60) and set(got.values()) == {1}
        redelivered = {(tt, p, o): dc for peer in others for tt, p, o, dc in peer.confirmed()}
        assert {redelivered[r] for r in held} == {2}
        if sig == "SIGSTOP":       # its connection stayed open: the records came back when their 4 s locks ran out
            assert elapsed >= 3.5, elapsed
        no_errors(others)
    finally:
        holder.kill()
        stop_all(others)


@pytest.mark.slow
def test_broker_sigkill_under_java_members(tmp_path):
    """kohort broker SIGKILLed while three KafkaShareConsumers hold records (locks of 60 s): after it
    comes back (same data directory and port), three new Java members get exactly the records that were
    not acknowledged -- the held ones (delivery count 1 again: acquisitions are not persisted, as in
    Kafka) and those never delivered -- and none of the acknowledged ones."""
    cfg = {**SHARE_BROKER_CONFIG, "group.share.record.lock.duration.ms": 60000}
    kb = KohortBroker(data_dir=str(tmp_path), config=cfg).start()
    before, after = [], []
    try:
        admin = Admin({"bootstrap.servers": kb.bootstrap})
        try:
            t, g = setup_topic(kb.bootstrap, admin, 3, 60)
        finally:
            admin.close()
        before = [JavaSharePeer(kb.bootstrap, t, g, hold="0:8,1:8,2:8", client_id=f"b{i}") for i in range(3)]
        start_all(before)
        progress = []

        def quiet():           # every delivered record acknowledged or held, nothing new for 3 s
            n = sum(len(p.records()) for p in before)
            progress.append((time.monotonic(), n))
            recent = [x for x in progress if x[0] > time.monotonic() - 3]
            return (n > 0 and progress[0][0] < time.monotonic() - 3 and min(x[1] for x in recent) == n
                    and all(len(p.confirmed()) + len(p.held()) == len(p.records()) for p in before))
        wait_until(quiet, 60, "the members done with what they got", before)
        acked = set(accepted(before))
        held = set().union(*(p.held() for p in before))
        assert held and acked and not acked & held
        assert set(accepted(before).values()) == {1}
        kb.kill()                                  # SIGKILL: no clean shutdown, no session closed
        for p in before:
            p.kill()
        kb.start()
        expected = records_of(t, 3, 0, 60) - acked
        assert held <= expected
        after = start_all([JavaSharePeer(kb.bootstrap, t, g, client_id=f"a{i}") for i in range(3)])
        wait_until(lambda: set(accepted(after)) == expected, 60, "the unacknowledged records accepted", after)
        time.sleep(1.5)
        got = accepted(after)
        assert set(got) == expected and set(got.values()) == {1}
        assert sum(len(p.records()) for p in after) == len(expected)
        assert {dc for p in after for *_, dc in p.confirmed()} == {1}
        no_errors(after)
    finally:
        for p in before:
            p.kill()
        stop_all(after)
        kb.stop()


# -- kafka-share-groups.sh -------------------------------------------------------------------------------
def kafka_tool(bs: str, *args: str) -> tuple[int, str, str]:
    r = run_tool(SHARE_GROUPS, "--bootstrap-server", bs, *args, check=False)
    return r.returncode, r.stdout, r.stderr


def kohort_tool(capsys, *argv: str) -> tuple[int, str, str]:
    from kohort.cli.main import main
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def rows(text: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln.strip()]


@pytest.mark.slow
def test_kafka_share_groups_tool_on_kohort_broker(kb, kadmin, capsys):
    """Kafka's kafka-share-groups.sh on kohort broker, with two Java members in the group: --list (with
    --state), --describe --offsets/--members/--state (--verbose) print what `kohort share-groups` prints;
    a live group refuses --reset-offsets, --delete-offsets and --delete. Members gone: --reset-offsets
    --to-earliest/--to-latest/--to-datetime --execute (and kohort's --to-offset: Kafka 4.3.1's tool has
    none) move the start offsets, described by both tools, and a Java member then reads exactly from
    there; --delete-offsets forgets the topic, --delete removes the group."""
    bs = kb.bootstrap
    t, g = setup_topic(bs, kadmin, 3, 30, prefix="sgt")
    peers = [JavaSharePeer(bs, t, g, client_id=f"tool-{i}") for i in range(2)]
    try:
        start_all(peers)
        wait_until(lambda: set(accepted(peers)) == records_of(t, 3, 0, 30), 60, "30 records accepted", peers)

        def settled():
            d = kadmin.describe_share_groups([g])[g]
            return (len(d.members) == 2 and all(m.assignment for m in d.members)
                    and d.group_epoch == d.assignment_epoch and offsets(kadmin, g) == {p: (10, 0) for p in range(3)})
        wait_until(settled, 30, "the group settled", peers)

        rc, out, err = kafka_tool(bs, "--list")
        assert rc == 0 and g in out.split(), (out, err)
        _, kout, _ = kafka_tool(bs, "--list", "--state")
        _, out, _ = kohort_tool(capsys, "share-groups", "--list", "--state", "--bootstrap-server", bs)
        assert rows(kout)[0] == rows(out)[0] == ["GROUP", "STATE"]
        assert [g, "Stable"] in rows(kout) and [g, "Stable"] in rows(out)
        described = {}
        for extra in ([], ["--verbose"], ["--members", "--verbose"], ["--state"], ["--state", "--verbose"]):
            krc, kout, kerr = kafka_tool(bs, "--describe", "--group", g, *extra)
            described[" ".join(extra)] = kout
            rc, out, err = kohort_tool(capsys, "share-groups", "--describe", "--group", g, *extra,
                                       "--bootstrap-server", bs)
            assert krc == 0 and rc == 0, (kerr, err)
            theirs, ours = rows(kout), rows(out)
            assert theirs[0] == ours[0], extra
            assert sorted(theirs[1:]) == sorted(ours[1:]), (extra, kout, out)
        assert sorted(rows(described[""])[1:]) == [[g, t, str(p), "10", "0"] for p in range(3)]
        kout = described["--members --verbose"]
        head = rows(kout)[0]
        members = {r[head.index("CLIENT-ID")]: r for r in rows(kout)[1:]}
        assert sorted(members) == ["tool-0", "tool-1"]
        assert sum(int(r[head.index("#PARTITIONS")]) for r in members.values()) == 3
        kout = described["--state"]
        assert rows(kout)[1][0] == g and rows(kout)[1][-2:] == ["Stable", "2"]

        krc, _, kerr = kafka_tool(bs, "--reset-offsets", "--group", g, "--topic", t, "--to-earliest", "--execute")
        assert krc == 1 and f"Share group '{g}' is not empty." in kerr, kerr
        _, kout, _ = kafka_tool(bs, "--delete-offsets", "--group", g, "--topic", t)
        assert "The group is not empty." in kout, kout
        _, kout, _ = kafka_tool(bs, "--delete", "--group", g)
        assert f"Share group '{g}' is not EMPTY." in kout, kout
        assert offsets(kadmin, g) == {p: (10, 0) for p in range(3)}
        no_errors(peers)
    finally:
        stop_all(peers)
    wait_until(lambda: kadmin.describe_share_groups([g])[g].state == "Empty", 15, "the group empty")

    rc, out, err = kafka_tool(bs, "--reset-offsets", "--group", g, "--all-topics", "--to-earliest", "--execute")
    assert rc == 0 and sorted(rows(out)[1:]) == [[g, t, str(p), "0"] for p in range(3)], (out, err)
    for tool_out in (kafka_tool(bs, "--describe", "--group", g)[1],
                     kohort_tool(capsys, "share-groups", "--describe", "--group", g, "-b", bs)[1]):
        assert sorted(rows(tool_out)[1:]) == [[g, t, str(p), "0", "10"] for p in range(3)], tool_out
    rc, out, err = kafka_tool(bs, "--reset-offsets", "--group", g, "--topic", f"{t}:1", "--to-latest", "--execute")
    assert rc == 0 and rows(out)[1:] == [[g, t, "1", "10"]], (out, err)
    # Kafka 4.3.1's tool has no --to-offset: kohort's writes it, Kafka's describes it
    rc, out, err = kohort_tool(capsys, "share-groups", "--reset-offsets", "--group", g, "--topic", f"{t}:0,2",
                               "--to-offset", "7", "--execute", "-b", bs)
    assert rc == 0 and sorted(rows(out)[1:]) == [[g, t, "0", "7"], [g, t, "2", "7"]], (out, err)
    _, kout, _ = kafka_tool(bs, "--describe", "--group", g)
    assert sorted(rows(kout)[1:]) == [[g, t, "0", "7", "3"], [g, t, "1", "10", "0"], [g, t, "2", "7", "3"]], kout
    reader = JavaSharePeer(bs, t, g, client_id="after-reset")
    try:
        start_all([reader])
        want = {(t, 0, o) for o in (7, 8, 9)} | {(t, 2, o) for o in (7, 8, 9)}
        wait_until(lambda: set(accepted([reader])) == want, 40, "records 7-9 of partitions 0 and 2", [reader])
        time.sleep(1.0)
        assert sorted(accepted([reader]).items()) == sorted((r, 1) for r in want)
        assert len(reader.records()) == 6
    finally:
        stop_all([reader])
    wait_until(lambda: kadmin.describe_share_groups([g])[g].state == "Empty", 15, "the group empty")
    rc, out, err = kafka_tool(bs, "--reset-offsets", "--group", g, "--topic", f"{t}:1", "--to-datetime",
                              "2020-01-01T00:00:00.000", "--execute")
    assert rc == 0 and rows(out)[1:] == [[g, t, "1", "0"]], (out, err)
    assert offsets(kadmin, g) == {0: (10, 0), 1: (0, 10), 2: (10, 0)}

    rc, out, err = kafka_tool(bs, "--delete-offsets", "--group", g, "--topic", t)
    assert rc == 0 and rows(out)[1:] == [[t, "Successful"]], (out, err)
    _, kout, _ = kafka_tool(bs, "--describe", "--group", g)
    _, out, _ = kohort_tool(capsys, "share-groups", "--describe", "--group", g, "-b", bs)
    assert f"Share group '{g}' has no offset information." in kout and out.strip() == kout.strip()
    rc, out, err = kafka_tool(bs, "--delete", "--group", g)
    assert rc == 0 and f"Deletion of requested share groups ('{g}') was successful." in out, (out, err)
    assert g not in kafka_tool(bs, "--list")[1].split()
    assert g not in kohort_tool(capsys, "share-groups", "--list", "-b", bs)[1].split()


@pytest.mark.slow                   # ~24 s per client (a MinBytes wait, then a close behind a 20 s fetch)
@pytest.mark.parametrize("kind", ["java", "ck"])
def test_fetch_min_bytes_holds_the_fetch_until_enough_bytes_are_there(sb, admin, kind):
    """KafkaShareConsumer's fetch.min.bytes (and confluent-kafka's, with fetch.wait.max.ms) becomes
    ShareFetch MinBytes: with one small record in the
    log the member's fetch waits (nothing delivered for seconds after it got its partition, well
    within fetch.max.wait.ms); once records worth more than MinBytes are produced, the waiting fetch
    answers at once (long before its MaxWaitMs) with all of them."""
    t, g = setup_topic(sb.bootstrap, admin, 1, 1)
    peer = PEERS[kind](sb.bootstrap, t, g, fetch_min_bytes=16384, fetch_max_wait_ms=20000)
    try:
        start_all([peer])
        def assigned() -> bool:
            try:
                return any(m.assignment for m in describe_members(admin, g))
            except Exception:               # the group is made by the member's first heartbeat
                return False
        wait_until(assigned, 30, "the partition assigned", [peer])
        time.sleep(3.0)
        assert peer.records() == [], peer.records()          # 1 record (< 16 KiB): the fetch still waits
        # one batch: a fetch answered by part of them would leave the rest (< MinBytes) to its MaxWaitMs
        with Producer({"bootstrap.servers": sb.bootstrap, "linger.ms": 200, "batch.size": 1 << 20}) as p:
            for i in range(1, 41):
                p.send(t, value=b"v%d-" % i + b"x" * 1000, partition=0)
            p.flush()
        produced = time.monotonic()
        wait_until(lambda: len(peer.confirmed()) == 41, 10, "41 records accepted", [peer])
        assert time.monotonic() - produced < 10               # the fetch's MaxWaitMs (20 s) was not waited out
        assert sorted(o for _, _, o, _ in peer.confirmed()) == list(range(41))
        no_errors([peer])
    finally:
        stop_all([peer])
