"""Network faults between clients and kohort broker (tests/fault_proxy.py), with the workloads and the
checker of tests/fault_workloads.py: an idempotent producer (kohort's and librdkafka's) and a classic
group of a kohort and a confluent-kafka member, under delay, a black hole then heal, a one-way black
hole, and reset connections. Every anomaly count must be zero. Each run prints its line of the table
(`pytest -s`); the longer grid runs under -m slow, also against a 1-node Apache Kafka behind the same
proxy for comparison."""
import uuid

import pytest

from tests.fault_workloads import (
    ProxiedBroker, ProxiedKafka, check_group, check_producer, group_workload, producer_workload, read_log,
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


def _producer_run(pb, fault, client="kohort", **kw):
    from tests.peers import create_topic
    topic = _topic(f"p-{fault}")
    assert create_topic(pb.bootstrap, topic, 3) == 3
    h = producer_workload(pb, topic, fault, client=client, **kw)
    r = check_producer(h, read_log(pb.bootstrap, topic), fault)
    r.workload = f"idempotent producer ({client})" + (" on Kafka" if isinstance(pb, ProxiedKafka) else "")
    print("\n" + r.line())
    assert h.acked, "nothing was acknowledged"
    assert h.fault_bit(fault) is None, h.fault_bit(fault)
    assert r.clean, (r.line(), r.details)
    return r


def _group_run(pb, fault, members=("kohort", "confluent"), **kw):
    h, log = group_workload(pb, _topic(f"g-{fault}"), fault, members=members, **kw)
    r = check_group(h, log, fault, "+".join(members) + (" on Kafka" if isinstance(pb, ProxiedKafka) else ""))
    assert h.fault_bit(fault) is None, h.fault_bit(fault)
    print("\n" + r.line() + f"  (commit errors during the fault: {len(h.commit_errors)})")
    assert r.clean, (r.line(), r.details)
    return r


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


def test_the_checker_counts_every_kind_of_anomaly():
    """The checker on made-up histories: each anomaly it exists for is found and counted."""
    from tests.fault_workloads import GroupHistory, ProducerHistory
    h = ProducerHistory(sent=6, acked={"0": (0, 0), "1": (0, 1), "2": (0, 2), "5": (1, 0)},
                        hung=["flush took 70.0s (timeout 60.0s)"], healed_at=100.0, last_ack_at=50.0,
                        finished_at=140.0)
    # 5 missing; 1 and 2 not at their acknowledged offsets; 2 twice; 1 after 2, 2 after 2
    log = {0: [(0, "0"), (1, "2"), (2, "1"), (3, "2")], 1: []}
    r = check_producer(h, log, "blackhole")
    assert r.anomalies == {"lost": 3, "duplicates": 1, "out_of_order": 2, "stalled": 1, "hung_calls": 1}, r.details
    assert not r.clean
    g = GroupHistory(consumed=[("a", 0, 0, "x", 0), ("a", 0, 1, "y", 0), ("b", 0, 0, "x", 2),
                               ("b", 0, 0, "x", "backwards")], hung=["a poll took 9.0s (timeout 0.5s)"], done=False)
    r = check_group(g, {0: [(0, "x"), (1, "y"), (2, "z")]}, "reset", "a+b")
    assert r.anomalies == {"lost": 1, "duplicates": 1, "out_of_order": 1, "stalled": 1, "hung_calls": 1}, r.details
    clean = check_group(GroupHistory(consumed=[("a", 0, 0, "x", 0), ("b", 0, 0, "x", 0)], done=True),
                        {0: [(0, "x")]}, "reset", "a+b")
    assert clean.clean                     # consumed again above the committed offset: allowed
