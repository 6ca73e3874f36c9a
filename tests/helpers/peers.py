"""Real peers for client tests: librdkafka's mock cluster, plus helpers to create topics and produce.

Import the fixtures into a test module (`from tests.helpers.peers import mock_cluster`); they start real
processes on loopback and always stop them. Tansu comes from the lead's `tansu` fixture in
conftest.py. Topic creation goes through kohort's own NetworkClient with a CreateTopics request
(the mock cluster reports no controller, so confluent-kafka's AdminClient cannot create topics on it);
data is produced with confluent-kafka (librdkafka), a producer nobody here wrote.

Share-group members (KIP-932) as processes: `JavaSharePeer` (Kafka's KafkaShareConsumer,
tests/interop/peers/java/SharePeer.java) and `CkSharePeer` (confluent-kafka's ShareConsumer,
tests/interop/peers/ck_share_member.py), one command line and one event stream for both.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.kafka_cluster import KAFKA_CP, TOOL_JVM, JavaPeer, _tools_log4j, require_peers

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
    from tests.helpers.ck_tracking import close_open_clients
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


# -- share groups (KIP-932): Java's KafkaShareConsumer and confluent-kafka's ShareConsumer as members -------
#
# Both kinds run as processes of their own with the same command line and the same JSON-line events
# (tests/interop/peers/java/SharePeer.java documents them): `JavaSharePeer(...)` runs SharePeer.java (compiled on
# first use), `CkSharePeer(...)` runs tests/interop/peers/ck_share_member.py.
SHARE_PEER_SRC = Path(__file__).resolve().parent.parent / "interop" / "peers" / "java" / "SharePeer.java"
CK_SHARE_MEMBER = Path(__file__).resolve().parent.parent / "interop" / "peers" / "ck_share_member.py"
_share_build: Path | None = None


def share_peer_build() -> Path:
    """The folder holding SharePeer.class: compiled once per test process into a temporary folder
    (removed at exit), so an edited SharePeer.java is never run stale."""
    global _share_build
    if _share_build is None:
        import atexit
        import shutil
        import tempfile
        require_peers()
        out = Path(tempfile.mkdtemp(prefix="kohort-sharepeer-"))
        atexit.register(shutil.rmtree, out, True)
        subprocess.run(["javac", "-nowarn", "-cp", KAFKA_CP, "-d", str(out), str(SHARE_PEER_SRC)],
                       check=True, timeout=180, capture_output=True)
        _share_build = out
    return _share_build


class ShareEvents:
    """What a share peer's events say: its records and which acknowledgements the broker confirmed."""

    events: list

    def records(self, ack: str | None = None) -> list[dict]:
        return [e for e in list(self.events) if e.get("event") == "record" and (ack is None or e["ack"] == ack)]

    def confirmed(self, ack: str = "ACCEPT") -> list[tuple[str, int, int, int]]:
        """(topic, partition, offset, delivery count) of every record acknowledged with `ack` whose
        acknowledgement the broker answered without error (the `committed` event after it)."""
        out, pending = [], []
        for e in list(self.events):
            if e.get("event") == "record":
                pending.append(e)
            elif e.get("event") == "committed":
                res = e["results"]
                for r in pending:
                    key = f"{r['topic']}-{r['partition']}"
                    if r["ack"] == ack and key in res and res[key] is None:
                        out.append((r["topic"], r["partition"], r["offset"], r["delivery_count"]))
                pending = []
        return out

    def acked(self) -> Counter:
        """How often the broker confirmed an acknowledgement of each (topic, partition, offset), from the
        Java peer's AcknowledgementCommitCallback (every mode; implicit mode has no other report)."""
        return Counter((e["topic"], e["partition"], o) for e in list(self.events)
                       if e.get("event") == "acked" and e["error"] is None for o in e["offsets"])

    def held(self) -> set[tuple[str, int, int]]:
        return {(r["topic"], r["partition"], r["offset"]) for r in self.records("HOLD")}


def _share_args(bootstrap: str, topic: str, group: str, **opts) -> list[str]:
    args = ["--bootstrap", bootstrap, "--topic", topic, "--group", group]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


class JavaSharePeer(ShareEvents, JavaPeer):
    """Apache Kafka's KafkaShareConsumer (tests/interop/peers/java/SharePeer.java) as a share-group member:

        with JavaSharePeer(bs, topic, group, release="0:3", client_id="j1") as j:
            j.wait_for(lambda e: e["event"] == "holding")
    """

    def __init__(self, bootstrap: str, topic: str, group: str, **opts):
        super().__init__()
        self.args = ["java", *TOOL_JVM, f"-Dlog4j2.configurationFile={_tools_log4j()}",
                     "-cp", f"{share_peer_build()}:{KAFKA_CP}", "SharePeer",
                     *_share_args(bootstrap, topic, group, **opts)]


class CkSharePeer(ShareEvents, JavaPeer):
    """confluent-kafka's ShareConsumer (librdkafka) as a share-group member in a process of its own, with
    SharePeer's options and events (explicit mode: commit_sync after each poll)."""

    def __init__(self, bootstrap: str, topic: str, group: str, **opts):
        super().__init__()
        self.args = [sys.executable, "-u", str(CK_SHARE_MEMBER),
                     *_share_args(bootstrap, topic, group, **opts)]
