"""Real peers for client tests: librdkafka's mock cluster, plus helpers to create topics and produce.

Import the fixtures into a test module (`from tests.peers import mock_cluster`); they start real
processes on loopback and always stop them. Tansu comes from the lead's `tansu` fixture in
conftest.py. Topic creation goes through kohort's own NetworkClient with a CreateTopics request
(the mock cluster reports no controller, so confluent-kafka's AdminClient cannot create topics on it);
data is produced with confluent-kafka (librdkafka), a producer nobody here wrote.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

MOCK_CLUSTER = Path("/work/shared/tools/mock-cluster")


def start_mock_cluster(brokers: int = 3):
    proc = subprocess.Popen([sys.executable, str(MOCK_CLUSTER), "--brokers", str(brokers)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ})
    line = proc.stdout.readline().strip()
    if not line.startswith("bootstrap.servers="):
        proc.kill()
        raise RuntimeError(f"mock cluster did not start: {line!r}")
    return proc, line.split("=", 1)[1]


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="module")
def mock_cluster():
    """bootstrap.servers of a 3-broker librdkafka mock cluster (leaders and coordinators spread out)."""
    proc, bs = start_mock_cluster(3)
    yield bs
    from tests.ck_tracking import close_open_clients
    close_open_clients()
    stop(proc)


def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1, timeout: float = 10.0) -> int:
    """Create `name`; returns its partition count (on the mock cluster, which lacks CreateTopics, the
    topic is auto-created with the mock's default of 4 partitions whatever `partitions` says)."""
    from kohort.client.network import NetworkClient
    from kohort.errors import IncompatibleBrokerVersionError
    from kohort.protocol.messages.create_topics import CreateTopicsRequest
    from kohort.protocol.messages.metadata import MetadataRequest

    nc = NetworkClient({"bootstrap.servers": bootstrap}, role="admin")
    try:
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication)], timeout_ms=int(timeout * 1000))
        auto = False
        try:
            resp = nc.send(None, req).result(timeout)
            code = resp.topics[0].error_code
            if code not in (0, 36):   # 36 TOPIC_ALREADY_EXISTS
                raise RuntimeError(f"CreateTopics {name}: error {code}")
        except IncompatibleBrokerVersionError:
            auto = True   # librdkafka's mock cluster: no CreateTopics; topics auto-create with 4 partitions
        deadline = time.time() + timeout
        while time.time() < deadline:
            md = nc.send(None, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                               allow_auto_topic_creation=auto)).result(timeout)
            t = md.topics[0]
            if t.error_code == 0 and t.partitions and (auto or len(t.partitions) == partitions) \
                    and all(p.leader_id >= 0 for p in t.partitions):
                return len(t.partitions)
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} not ready")
    finally:
        nc.close()


def produce(bootstrap: str, topic: str, count: int, partitions: int | None = None, value_size: int = 100,
            key_prefix: str = "k", start: int = 0, transactional_id: str | None = None, abort: bool = False,
            headers=None) -> None:
    """Produce `count` records with confluent-kafka: key f"{key_prefix}{i}", value of value_size bytes
    starting with str(i); record i goes to partition i % partitions when partitions is given."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
            "queue.buffering.max.messages": 2_000_000, "enable.idempotence": False}
    if transactional_id:
        conf.update({"transactional.id": transactional_id, "enable.idempotence": True})
    p = Producer(conf)
    if transactional_id:
        p.init_transactions(10)
        p.begin_transaction()
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)

    for i in range(start, start + count):
        v = str(i).encode()
        v = v + b"x" * max(0, value_size - len(v))
        kw = {"partition": i % partitions} if partitions else {}
        if headers:
            kw["headers"] = headers
        while True:
            try:
                p.produce(topic, value=v, key=f"{key_prefix}{i}".encode(), on_delivery=cb, **kw)
                break
            except BufferError:
                p.poll(0.05)
    if transactional_id:
        if abort:
            p.abort_transaction(10)
        else:
            p.commit_transaction(10)
    left = p.flush(30)
    if left or errors:
        raise RuntimeError(f"produce to {topic}: {left} undelivered, errors {errors[:3]}")
