"""Network faults between clients and brokers (tests/helpers/fault_proxy.py), with the workloads and the
checker of tests/helpers/fault_workloads.py: an idempotent producer (kohort's and librdkafka's), a classic
group and a KIP-848 group of kohort and confluent-kafka members, under delay, a black hole then heal,
a one-way black hole, and reset connections. Every anomaly count must be zero. Each run prints its line
of the table (`pytest -s`) and appends its row for tests/helpers/fault_report.py; the longer grid runs under
-m slow: on kohort broker, on a 1-node Apache Kafka behind the same proxy, and on a 3-node Apache Kafka
with one proxy per broker, where a partition leader is also SIGKILLed during producing and the group
coordinator while a KIP-848 group reconciles with members joining and leaving. Groups with a member
that is Kafka's own Java consumer (tests/interop/peers/java/Peer.java) run in the slow grid on kohort broker
and on the 3-node Kafka; share groups (KIP-932) of kohort's and confluent-kafka's ShareConsumer under
the network faults on kohort broker and Apache Kafka (with a Java KafkaShareConsumer member too, on kohort
broker, tests/interop/peers/java/SharePeer.java), and under leader and coordinator SIGKILLs on the
3-node Kafka."""
import uuid

import pytest

from tests.helpers.fault_workloads import (
    SHARE_GROUP_CONFIG, ProxiedBroker, ProxiedKafka, check_group, check_producer, check_share, group_workload,
    producer_workload, read_log, record, share_workload,
)


@pytest.fixture
def pb():
    with ProxiedBroker() as b:
        yield b


@pytest.fixture
def share_pb():
    """A kohort broker behind the proxy with the share-group settings of the fault runs."""
    with ProxiedBroker(config=SHARE_GROUP_CONFIG) as b:
        yield b


def _topic(tag: str) -> str:
    return f"f-{tag}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def kafka_pb():
    with ProxiedKafka() as k:
        yield k


@pytest.fixture(scope="module")
def kafka3_pb():
    with ProxiedKafka(nodes=3) as k:
        yield k


def _broker(pb) -> str:
    return f"Kafka {pb.nodes}n" if isinstance(pb, ProxiedKafka) else "kohort"


def _producer_run(pb, fault, client="kohort", **kw):
    from tests.helpers.peers import create_topic
    topic = _topic(f"p-{fault}")
    assert create_topic(pb.bootstrap, topic, 3, replication=getattr(pb, "nodes", 1)) == 3
    h = producer_workload(pb, topic, fault, client=client, **kw)
    r = check_producer(h, read_log(pb.bootstrap, topic), fault)
    r.workload = f"idempotent producer ({client})"
    record(r, _broker(pb))
    failed = f" failed={len(h.failed)} ({next(iter(h.failed.values()))})" if h.failed else ""
    print("\n" + r.line() + f"  [{_broker(pb)}]{failed}")
    assert h.acked, "nothing was acknowledged"
    p0 = sorted(round(t - h.faulted_at, 2) for v, t in h.acked_at.items() if h.acked[v][0] == 0) if h.faulted_at else []
    assert h.fault_bit(fault) is None, (h.fault_bit(fault), f"healed at +{h.healed_at - h.faulted_at:.1f}s",
                                        "partition 0 acknowledgements, s after the fault:", p0[-40:])
    assert r.clean, (r.line(), r.details)
    return r


def _group_run(pb, fault, members=("kohort", "confluent"), **kw):
    h, log = group_workload(pb, _topic(f"g-{fault}"), fault, members=members, **kw)
    protocol = "KIP-848" if all(m.endswith("848") for m in members) else "classic"
    joined = "".join(f"+{m}" for m in kw.get("join_at_fault", ()))
    r = check_group(h, log, fault, "+".join(m.removesuffix("848") for m in members) + joined.replace("848", ""),
                    protocol=protocol)
    if kw.get("replication") is not None:
        r.workload += f" rf{kw['replication']}"
    record(r, _broker(pb))
    assert h.fault_bit(fault) is None, (h.fault_bit(fault), _events(h))
    moved = "".join(f" coordinator {a} -> {b} after {t}s;" for a, b, t in h.coordinators)
    print("\n" + r.line() + f"  [{_broker(pb)}]{moved} (commit errors during the fault: {len(h.commit_errors)})")
    if not r.clean:
        print("evidence:", _events(h), r.details)
    assert r.clean, (r.line(), r.details, _events(h))
    return r


def _share_run(pb, fault, members=("kohort", "kohort", "confluent"), **kw):
    h, log = share_workload(pb, _topic(f"s-{fault}"), fault, members=members, **kw)
    r = check_share(h, log, fault, "+".join(members))
    record(r, _broker(pb))
    moved = "".join(f" coordinator {a} -> {b} after {t}s;" for a, b, t in h.coordinators)
    by_member = {name: sum(1 for e in h.delivered if e[0] == name) for name in
                 (f"{kind}-{i}" for i, kind in enumerate(members))}
    redelivered = sum(1 for e in h.delivered if e[4] > 1)
    unknown = sum(len(e[2]) for e in h.acked if e[3] != "ok")
    print("\n" + r.line() + f"  [{_broker(pb)}]{moved} (deliveries {len(h.delivered)}, redelivered {redelivered}, "
          f"acceptances not answered ok {unknown}, errors {len(h.errors)}; deliveries by member {by_member})")
    assert h.delivered, ("nothing was delivered", h.errors[:5])
    # a Java member runs in its own JVM: its share of the records shows it took part
    assert all(n > 0 for name, n in by_member.items() if name.startswith("java")), (by_member, h.errors[:5])
    assert h.fault_bit(fault) is None, (h.fault_bit(fault), h.errors[:5])
    if not r.clean:
        print("evidence:", r.details, h.errors[:10])
    assert r.clean, (r.line(), r.details, h.errors[:10])
    return r


def _events(h) -> list:
    """The members' callbacks (relative to the fault) and who owned what at the end: the evidence a
    failing group run is reported with."""
    from tests.helpers.fault_workloads import owners_at
    t0 = h.faulted_at or 0.0
    return [(m, what, parts, round(t - t0, 2)) for m, what, parts, t in h.assigned] + [
        ("owners at the end", owners_at(h.assigned, 1e18))]


@pytest.mark.parametrize("fault", ["delay", "blackhole", "reset"])
def test_idempotent_producer_under_fault(pb, fault):
    _producer_run(pb, fault)


@pytest.mark.parametrize("fault", ["blackhole", "reset"])
def test_classic_group_kohort_and_confluent_under_fault(pb, fault):
    _group_run(pb, fault, records=2000)


@pytest.mark.slow
@pytest.mark.parametrize("client", ["kohort", "confluent"])
@pytest.mark.parametrize("fault", ["delay", "blackhole", "oneway", "reset"])
def test_grid_producer(pb, fault, client):
    _producer_run(pb, fault, client=client, duration=12.0, fault_at=2.0, fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["delay", "blackhole", "oneway", "reset"])
def test_grid_group(pb, fault):
    """A fault longer than session.timeout.ms (8 s > 6 s): members are evicted and rejoin."""
    _group_run(pb, fault, members=("kohort", "kohort", "confluent"), fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("client", ["kohort", "confluent"])
@pytest.mark.parametrize("fault", ["blackhole", "reset"])
def test_grid_producer_on_apache_kafka(kafka_pb, fault, client):
    _producer_run(kafka_pb, fault, client=client, duration=12.0, fault_at=2.0, fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["blackhole", "reset"])
def test_grid_group_on_apache_kafka(kafka_pb, fault):
    _group_run(kafka_pb, fault, members=("kohort", "kohort", "confluent"), fault_for=8.0)


@pytest.mark.parametrize("fault", ["blackhole"])
def test_kip848_group_kohort_and_confluent_under_fault(pb, fault):
    _group_run(pb, fault, members=("kohort848", "confluent848"), records=2000)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["delay", "blackhole", "oneway", "reset"])
def test_grid_kip848_group(pb, fault):
    """KIP-848 members (kohort's and librdkafka's, group.protocol=consumer) under each fault, longer
    than the broker's session timeout for blackhole/oneway."""
    _group_run(pb, fault, members=("kohort848", "kohort848", "confluent848"), fault_for=8.0)


# -- a 3-node Apache Kafka, one proxy per broker, every broker advertising its proxy ---------------------
@pytest.mark.slow
@pytest.mark.parametrize("client", ["kohort", "confluent"])
@pytest.mark.parametrize("fault", ["delay", "blackhole", "oneway", "reset", "kill-leader"])
def test_grid_producer_on_kafka3(kafka3_pb, fault, client):
    _producer_run(kafka3_pb, fault, client=client, duration=12.0, fault_at=2.0, fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["delay", "blackhole", "oneway", "reset"])
def test_grid_group_on_kafka3(kafka3_pb, fault):
    _group_run(kafka3_pb, fault, members=("kohort", "kohort", "confluent"), fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["blackhole", "reset"])
def test_grid_kip848_group_on_kafka3(kafka3_pb, fault):
    _group_run(kafka3_pb, fault, members=("kohort848", "kohort848", "confluent848"), fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("join,leave", [(("kohort848", "confluent848"), 1), (("kohort848",), 2)],
                         ids=["2-join-1-leaves", "1-joins-2-leave"])
def test_coordinator_moves_while_kip848_group_reconciles(kafka3_pb, join, leave):
    """The group's coordinator node is SIGKILLed while members join and leave: the group reconciles on
    the coordinator that takes over. No partition owned by two members at once (by their own
    callbacks), nothing lost, the group consumes everything after the node is back."""
    _group_run(kafka3_pb, "kill-coordinator", members=("kohort848", "kohort848", "confluent848"),
               join_at_fault=join, leave_at_fault=leave, partitions=6, fault_for=12.0)


@pytest.mark.slow
@pytest.mark.parametrize("join,leave", [(("kohort848", "confluent848"), 1), (("kohort848",), 2)],
                         ids=["2-join-1-leaves", "1-joins-2-leave"])
def test_coordinator_moves_with_unreplicated_partitions(kafka3_pb, join, leave):
    """The coordinator SIGKILL of the test above on a topic of replication 1: the partitions the
    killed node led have no leader until its restart, and a member handed one of them consumes it
    once the leader is back rather than waiting for the partition to be taken from it."""
    _group_run(kafka3_pb, "kill-coordinator", members=("kohort848", "kohort848", "confluent848"),
               join_at_fault=join, leave_at_fault=leave, partitions=6, fault_for=12.0, replication=1)


# -- Kafka's Java consumer as a member -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("fault", ["blackhole", "reset"])
@pytest.mark.parametrize("members", [("kohort", "confluent", "java"), ("kohort848", "confluent848", "java848")],
                         ids=["classic", "kip848"])
def test_grid_group_with_java_member(pb, fault, members):
    """kohort, confluent-kafka and Java members in one group under faults longer than the session."""
    _group_run(pb, fault, members=members, fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["blackhole", "kill-coordinator"])
@pytest.mark.parametrize("members", [("kohort", "confluent", "java"), ("kohort848", "confluent848", "java848")],
                         ids=["classic", "kip848"])
def test_grid_group_with_java_member_on_kafka3(kafka3_pb, fault, members):
    # a killed node stays named as coordinator until the controller fences it: 12 s to see it move
    _group_run(kafka3_pb, fault, members=members, fault_for=12.0 if fault.startswith("kill") else 8.0)


# -- share groups (KIP-932) ------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["blackhole"])
def test_share_group_kohort_and_confluent_under_fault(share_pb, fault):
    """A share group of kohort and confluent-kafka ShareConsumers on kohort broker: every record of
    the log accepted, none delivered again after its acceptance was answered, through a black hole."""
    _share_run(share_pb, fault, members=("kohort", "confluent"))


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["delay", "blackhole", "oneway", "reset"])
def test_grid_share_group(share_pb, fault):
    """Faults longer than the member session (8 s > 6 s) and the record locks (4 s)."""
    _share_run(share_pb, fault, fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["blackhole", "reset"])
def test_grid_share_group_with_java(share_pb, fault):
    """A share group of kohort, confluent-kafka and Java (KafkaShareConsumer 4.3.1 in its own JVM)
    members on kohort broker, through faults longer than the member session and the record locks."""
    _share_run(share_pb, fault, members=("kohort", "confluent", "java"), fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["blackhole", "reset"])
def test_grid_share_group_on_apache_kafka(kafka_pb, fault):
    _share_run(kafka_pb, fault, fault_for=8.0)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["blackhole", "reset", "kill-leader", "kill-coordinator"])
def test_grid_share_group_on_kafka3(kafka3_pb, fault):
    """Share groups on a 3-node Kafka: network faults, the leader of partition 0 SIGKILLed (the share
    partition moves to a new leader, its state read back from __share_group_state), the group
    coordinator SIGKILLed."""
    _share_run(kafka3_pb, fault, fault_for=12.0 if fault.startswith("kill") else 8.0)


def test_the_checker_counts_every_kind_of_anomaly():
    """The checker on made-up histories: each anomaly it exists for is found and counted."""
    from tests.helpers.fault_workloads import GroupHistory, ProducerHistory
    h = ProducerHistory(sent=6, acked={"0": (0, 0), "1": (0, 1), "2": (0, 2), "5": (1, 0)},
                        hung=["flush took 70.0s (timeout 60.0s)"], healed_at=100.0, last_ack_at=50.0,
                        finished_at=140.0)
    # 5 missing; 1 and 2 not at their acknowledged offsets; 2 twice; 1 after 2, 2 after 2
    log = {0: [(0, "0"), (1, "2"), (2, "1"), (3, "2")], 1: []}
    r = check_producer(h, log, "blackhole")
    assert r.anomalies == {"lost": 3, "duplicates": 1, "out_of_order": 2, "two_owners": 0, "stalled": 1,
                           "hung_calls": 1}, r.details
    assert not r.clean
    # b is handed partition 0 at t=2 while a holds it until t=3; c takes partition 1 after a lost it
    # (a fenced member: not an owner) and d after c revoked it
    assigned = [("a", "assign", [0, 1], 1.0), ("b", "assign", [0], 2.0), ("a", "revoke", [0], 3.0),
                ("c", "assign", [1], 4.0), ("a", "lost", [1], 5.0), ("c", "revoke", [1], 6.0),
                ("d", "assign", [1], 6.0)]
    g = GroupHistory(consumed=[("a", 0, 0, "x", 0), ("a", 0, 1, "y", 0), ("b", 0, 0, "x", 2),
                               ("b", 0, 0, "x", "backwards")], hung=["a poll took 9.0s (timeout 0.5s)"], done=False,
                     assigned=assigned)
    r = check_group(g, {0: [(0, "x"), (1, "y"), (2, "z")]}, "reset", "a+b")
    assert r.anomalies == {"lost": 1, "duplicates": 1, "out_of_order": 1, "two_owners": 1, "stalled": 1,
                           "hung_calls": 1}, r.details
    assert any("partition 0: a" in d and " b " in d for d in r.details), r.details
    clean = check_group(GroupHistory(consumed=[("a", 0, 0, "x", 0), ("b", 0, 0, "x", 0)], done=True),
                        {0: [(0, "x")]}, "reset", "a+b")
    assert clean.clean                     # consumed again above the committed offset: allowed


def test_the_share_checker_counts_its_anomalies():
    """check_share on made-up histories: a delivery after an acceptance answered ok is a duplicate; a
    record whose only acceptance was refused (INVALID_RECORD_STATE) and never came again is lost, as
    is one never delivered; an acceptance without a clear answer counts as accepted, and so does a
    refused one delivered again and accepted."""
    from tests.helpers.fault_workloads import ACK_OK, ACK_REFUSED, ACK_UNKNOWN, ShareHistory, _ack_outcome
    from kohort.errors import ERRORS, ErrorCode
    log = {0: [(0, "a"), (1, "b"), (2, "c"), (3, "d")]}
    h = ShareHistory(delivered=[("m1", 0, 0, "a", 1, 1.0), ("m1", 0, 1, "b", 1, 1.0), ("m1", 0, 2, "c", 1, 1.0),
                                ("m2", 0, 0, "a", 2, 3.0), ("m2", 0, 2, "c", 2, 3.0)],
                     acked=[("m1", 0, (0,), ACK_OK, "", 2.0), ("m1", 0, (1,), ACK_REFUSED, "", 2.0),
                            ("m1", 0, (2,), ACK_UNKNOWN, "", 2.0)],
                     hung=["m2 poll took 9.0s (timeout 0.5s)"], done=False)
    r = check_share(h, log, "reset", "m1+m2")
    assert r.anomalies == {"lost": 2, "duplicates": 1, "out_of_order": 0, "two_owners": 0, "stalled": 1,
                           "hung_calls": 1}, r.details
    assert any("offset 0 delivered again" in d for d in r.details), r.details
    ok = ShareHistory(delivered=[("m1", 0, 0, "a", 1, 1.0), ("m2", 0, 0, "a", 2, 3.0)],
                      acked=[("m1", 0, (0,), ACK_REFUSED, "", 2.0), ("m2", 0, (0,), ACK_OK, "", 4.0)], done=True)
    assert check_share(ok, {0: [(0, "a")]}, "reset", "m1+m2").clean
    assert _ack_outcome(None) == ACK_OK
    assert _ack_outcome(ERRORS[ErrorCode.INVALID_RECORD_STATE]()) == ACK_REFUSED
    assert _ack_outcome(ERRORS[ErrorCode.REQUEST_TIMED_OUT]()) == ACK_UNKNOWN


def test_the_report_table_sums_runs_per_fault_workload_and_broker(tmp_path, monkeypatch):
    """tests/helpers/fault_report.py on rows written by record(): one line per fault × workload × broker, the
    runs and records and each anomaly summed, the details of anomalous runs after the table."""
    from tests.helpers import fault_report
    from tests.helpers.fault_workloads import Report
    path = tmp_path / "r.jsonl"
    monkeypatch.setenv("KOHORT_FAULT_RESULTS", str(path))
    for n in (100, 200):
        record(Report("idempotent producer (kohort)", "reset", records=n), "kohort")
    bad = Report("classic group (kohort)", "blackhole", records=50)
    bad.add("lost", "partition 0 offset 7 (7) never consumed")
    record(bad, "Kafka 3n")
    out = fault_report.table(fault_report.load(str(path)))
    lines = out.splitlines()
    assert lines[0].split() == ["fault", "workload", "broker", "runs", "records", *fault_report.KINDS]
    row = next(ln for ln in lines if ln.startswith("reset"))
    assert row.split()[-9:] == ["kohort", "2", "300", "0", "0", "0", "0", "0", "0"], row
    row = next(ln for ln in lines if ln.startswith("blackhole"))
    assert row.split()[-9:] == ["3n", "1", "50", "1", "0", "0", "0", "0", "0"], row
    assert "partition 0 offset 7 (7) never consumed" in out.split("runs with anomalies:")[1]
    path.write_text('{"fault": "x"\n')
    with pytest.raises(SystemExit, match="not a JSON row"):
        fault_report.load(str(path))
