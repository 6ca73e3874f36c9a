"""Network faults between clients and brokers (tests/fault_proxy.py), with the workloads and the
checker of tests/fault_workloads.py: an idempotent producer (kohort's and librdkafka's), a classic
group and a KIP-848 group of kohort and confluent-kafka members, under delay, a black hole then heal,
a one-way black hole, and reset connections. Every anomaly count must be zero. Each run prints its line
of the table (`pytest -s`) and appends its row for tests/fault_report.py; the longer grid runs under
-m slow: on kohort broker, on a 1-node Apache Kafka behind the same proxy, and on a 3-node Apache Kafka
with one proxy per broker, where a partition leader is also SIGKILLed during producing and the group
coordinator while a KIP-848 group reconciles with members joining and leaving."""
import uuid

import pytest

from tests.fault_workloads import (
    ProxiedBroker, ProxiedKafka, check_group, check_producer, group_workload, producer_workload, read_log, record,
)


@pytest.fixture
def pb():
    with ProxiedBroker() as b:
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
    from tests.peers import create_topic
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
    record(r, _broker(pb))
    assert h.fault_bit(fault) is None, (h.fault_bit(fault), _events(h))
    moved = "".join(f" coordinator {a} -> {b} after {t}s;" for a, b, t in h.coordinators)
    print("\n" + r.line() + f"  [{_broker(pb)}]{moved} (commit errors during the fault: {len(h.commit_errors)})")
    if not r.clean:
        print("evidence:", _events(h), r.details)
    assert r.clean, (r.line(), r.details, _events(h))
    return r


def _events(h) -> list:
    """The members' callbacks (relative to the fault) and who owned what at the end: the evidence a
    failing group run is reported with."""
    from tests.fault_workloads import owners_at
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


def test_the_checker_counts_every_kind_of_anomaly():
    """The checker on made-up histories: each anomaly it exists for is found and counted."""
    from tests.fault_workloads import GroupHistory, ProducerHistory
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


def test_the_report_table_sums_runs_per_fault_workload_and_broker(tmp_path, monkeypatch):
    """tests/fault_report.py on rows written by record(): one line per fault × workload × broker, the
    runs and records and each anomaly summed, the details of anomalous runs after the table."""
    from tests import fault_report
    from tests.fault_workloads import Report
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
