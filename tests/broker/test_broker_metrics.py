"""`kohort broker --metrics`: Prometheus text with requests/latency per API (and per version, which
also shows which versions real clients chose: aiokafka 0.14 and kafka-python 3 must pick modern
ones), bytes in/out, partition end offsets and sizes, connections."""
from __future__ import annotations

import asyncio
import re
import urllib.request

from tests.helpers.brokers import KohortBroker, free_port


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _versions(m: dict, api: str) -> set[int]:
    return {int(re.search(r'version="(\d+)"', k).group(1)) for k in m
            if k.startswith(f'kohort_requests_by_version_total{{api="{api}"')}


def test_metrics_and_the_versions_aiokafka_chooses():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    mport = free_port()
    with KohortBroker(metrics_port=mport) as b:
        async def main():
            p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True)
            await p.start()
            for i in range(10):
                await p.send_and_wait("m", b"x" * 100, partition=0)
            await p.stop()
            c = AIOKafkaConsumer(bootstrap_servers=b.bootstrap)
            await c.start()
            tp = TopicPartition("m", 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            for _ in range(10):
                await asyncio.wait_for(c.getone(), 10)
            await c.stop()
        asyncio.run(main())
        m = scrape(mport)
        assert m['kohort_partition_log_end_offset{topic="m",partition="0"}'] == 10
        assert m['kohort_partition_size_bytes{topic="m",partition="0"}'] > 1000
        assert m['kohort_requests_total{api="Produce"}'] == 10
        assert m['kohort_bytes_in_total{api="Produce"}'] > 1000
        assert m['kohort_bytes_out_total{api="Fetch"}'] > 1000
        assert m['kohort_request_seconds_count{api="Produce"}'] == 10
        assert m['kohort_messages_in_total{topic="m"}'] == 10
        assert m["kohort_connections_total"] >= 2
        assert m['kohort_fsync_waiters_total'] >= 10
        # aiokafka 0.14 picks its highest version inside our advertised ranges
        assert _versions(m, "Produce") == {7} and _versions(m, "Fetch") == {11}
        assert min(_versions(m, "ListOffsets")) >= 1 and min(_versions(m, "Metadata")) >= 1
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics") as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")


def test_versions_kafka_python_3_chooses():
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    mport = free_port()
    with KohortBroker(metrics_port=mport) as b:
        p = KafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True)
        p.send("k", b"x").get(10)
        p.close()
        c = KafkaConsumer(bootstrap_servers=b.bootstrap, consumer_timeout_ms=3000)
        tp = TopicPartition("k", 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        assert [r.value for r in c] == [b"x"]
        c.close()
        m = scrape(mport)
        # negotiated: the newest both sides know
        assert _versions(m, "Produce") == {9} and _versions(m, "Fetch") == {12}
        assert _versions(m, "ListOffsets") == {10} and _versions(m, "Metadata") == {13}
        assert _versions(m, "ApiVersions") == {4}
