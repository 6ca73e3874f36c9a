"""kafkajs (npm; a pure-JavaScript Kafka client written apart from the JVM and librdkafka families) as a
client of kohort broker (issue 11): its idempotent producer, and a group of kafkajs and kohort members
sharing the partitions, with nothing lost when the kafkajs member leaves."""
from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from kohort import Consumer
from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import PEERS, kill_tree, spawn
from tests.helpers.peers import create_topic, produce

NODE_PEER = Path(__file__).resolve().parent / "peers" / "node" / "peer.js"
NODE_MODULES = PEERS / "node" / "node_modules"


class NodePeer:
    def __init__(self, *args: str):
        assert (NODE_MODULES / "kafkajs").is_dir(), f"kafkajs missing in {NODE_MODULES}: run `make peers`"
        import os
        env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
        self.proc = spawn(["node", str(NODE_PEER), *args], stdout=subprocess.PIPE, stdin=subprocess.PIPE, env=env)
        self.events: list[dict] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                self.events.append({"event": "text", "line": line.rstrip()})

    def wait_for(self, pred, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ev in list(self.events):
                if pred(ev):
                    return ev
                if ev.get("event") == "fatal":
                    raise RuntimeError(f"kafkajs: {ev}")
            time.sleep(0.1)
        raise TimeoutError(f"kafkajs: no matching event in {timeout}s: {self.events[-5:]}")

    def seen(self, topic: str) -> set:
        return {(topic, int(x.split("@")[0]), int(x.split("@")[1]))
                for ev in list(self.events) if ev.get("event") == "records" for x in ev["offsets"]}

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        kill_tree(self.proc)


@pytest.fixture(scope="module")
def kb():
    with KohortBroker() as b:
        yield b


def test_kafkajs_idempotent_producer_on_kohort_broker(kb):
    topic = f"js-{uuid.uuid4().hex[:8]}"
    assert create_topic(kb.bootstrap, topic, 3) == 3
    p = NodePeer("produce", kb.bootstrap, topic, "5000")
    try:
        assert p.wait_for(lambda e: e["event"] == "done", 60)["acked"] == 5000
    finally:
        p.stop()
    got = []
    with Consumer({"bootstrap.servers": kb.bootstrap}) as c:
        c.assign([(topic, i) for i in range(3)])
        c.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(got) < 5000 and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
    assert sorted(r.value for r in got) == sorted(f"js-{i}".encode() for i in range(5000))


@pytest.mark.slow
def test_kafkajs_group_on_kohort_broker_survives_a_member_kill(kb):
    """Two kafkajs members share a group (kafkajs offers only its own RoundRobinAssigner protocol, so
    it cannot share a group with Java/librdkafka/kohort members); one is SIGKILLed, the other takes its
    partitions, nothing is lost, and kohort's Admin sees the group's commits."""
    from kohort.client.admin import Admin
    topic, group = f"jsg-{uuid.uuid4().hex[:8]}", f"jsg-{uuid.uuid4().hex[:8]}"
    assert create_topic(kb.bootstrap, topic, 4) == 4
    produce(kb.bootstrap, topic, 2000, partitions=4)
    a = NodePeer("consume", kb.bootstrap, topic, group, "120")
    b = NodePeer("consume", kb.bootstrap, topic, group, "120")
    try:
        a.wait_for(lambda e: e["event"] == "records", 60)
        kill_tree(a.proc)
        produce(kb.bootstrap, topic, 1000, partitions=4, start=2000)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(a.seen(topic) | b.seen(topic)) < 3000:
            time.sleep(0.2)
        assert len(a.seen(topic) | b.seen(topic)) == 3000
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with Admin({"bootstrap.servers": kb.bootstrap}) as adm:
                committed = adm.list_group_offsets(group)
            if sum(om.offset for om in committed.values()) == 3000:
                break
            time.sleep(0.5)
        assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 750, 1: 750, 2: 750, 3: 750}
    finally:
        a.stop()
        b.stop()
