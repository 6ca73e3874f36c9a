"""One client core against every peer: Producer, Consumer, Admin and the Spark source's driver/executor
functions (spark/wire.py) against librdkafka's mock cluster, Tansu, the kohort broker and Apache Kafka 4.x.

They all speak through one NetworkClient and one sans-I/O ClientProtocol (issue 12). Before that, the
Producer and spark/wire.py had their own stacks without NetworkClient's leniency: against the mock
cluster both failed with "ApiVersionsResponse v3: 5 trailing bytes".
"""
from __future__ import annotations

import uuid

import pytest

from kohort.client.admin import Admin, EARLIEST, LATEST
from kohort.client.consumer.consumer import Consumer
from kohort.client.producer import Producer
from kohort.spark.wire import Cluster
from kohort.structs import TopicPartition
from tests.helpers.brokers import KohortBroker
from tests.helpers.peers import create_topic, mock_cluster  # noqa: F401

N = 60


@pytest.fixture(scope="module")
def kohort_peer():
    b = KohortBroker()
    with b:
        yield b.bootstrap


@pytest.fixture(params=["mock", "tansu", "kohort", "kafka"])
def peer(request):
    if request.param == "kafka":
        return "kafka", request.getfixturevalue("kafka1").bootstrap
    name = {"mock": "mock_cluster", "tansu": "tansu", "kohort": "kohort_peer"}[request.param]
    return request.param, request.getfixturevalue(name)


def _topic(bootstrap: str) -> tuple[str, int]:
    name = f"core-{uuid.uuid4().hex[:8]}"
    return name, create_topic(bootstrap, name, 2)


def test_producer_consumer_admin_and_spark_wire(peer):
    kind, bootstrap = peer
    topic, nparts = _topic(bootstrap)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        futs = [p.produce(topic, value=b"v%d" % i, key=b"k%d" % i, partition=i % nparts) for i in range(N)]
        p.flush(30)
        metas = [f.result(10) for f in futs]
    per_part = {part: len(range(part, N, nparts)) for part in range(nparts)}
    assert sorted((m.partition, m.offset) for m in metas) == sorted(
        (part, o) for part, n in per_part.items() for o in range(n))

    tps = [TopicPartition(topic, part) for part in range(nparts)]
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign(tps)
        got = []
        for _ in range(100):
            got += c.poll(0.5)
            if len(got) >= N:
                break
    assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(N))

    with Admin({"bootstrap.servers": bootstrap}) as a:
        assert topic in a.list_topics()
        ends = a.list_offsets({tp: LATEST for tp in tps})
        starts = a.list_offsets({tp: EARLIEST for tp in tps})
    assert starts == {tp: 0 for tp in tps}
    if kind != "tansu":   # Tansu answers ListOffsets(latest) with a stale offset (why spark/wire.py checks HWM)
        assert ends == {tp: per_part[tp.partition] for tp in tps}

    # the Spark source's driver and executor functions, with the PLAINTEXT:// form client/config.py takes
    with Cluster({"bootstrap.servers": f"PLAINTEXT://{bootstrap}"}) as cl:
        bounds = cl.offset_bounds([(topic, part) for part in range(nparts)])
        assert bounds == {(topic, part): (0, n) for part, n in per_part.items()}
        pd = cl.fetch((topic, 0), 0, max_bytes=1 << 20)
        assert pd.error_code == 0 and pd.records
        group = f"g-{uuid.uuid4().hex[:6]}"
        cl.commit_offsets(group, {(topic, 0): 3})
        assert cl.committed_offsets(group, [(topic, 0)]) == {(topic, 0): 3}
        assert cl.partitions_of([topic]) == {topic: list(range(nparts))}


def test_spark_wire_names_an_unreachable_bootstrap():
    import socket

    from kohort.errors import KafkaConnectionError
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with Cluster({"bootstrap.servers": f"PLAINTEXT://127.0.0.1:{port}", "request.timeout.ms": 1000}) as cl:
        with pytest.raises(KafkaConnectionError, match=f"cannot reach any Kafka broker at 127.0.0.1:{port}"):
            cl.partitions_of(["t"])
