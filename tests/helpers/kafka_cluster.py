"""Apache Kafka 4.x (KRaft) as a test peer: clusters of 1 or 3 combined broker+controller nodes on
loopback free ports, Kafka's CLI tools and the Java harness (tests/interop/peers/java/Peer.java).

The jars come from `make peers` (tests/interop/peers/kafka/pom.xml → .peers/kafka-lib); the harness is compiled
there too (.peers/java). Nothing here downloads anything: a missing jar folder is an error that says
which make step to run, never a skip.

    with KafkaCluster(nodes=1) as kc:
        kc.bootstrap                 # "127.0.0.1:P1[,127.0.0.1:P2,...]"
        kc.create_topic("t", 3)
        kc.coordinator("group-id")   # node id that coordinates the group
        kc.leader("t", 0)            # node id leading a partition
        kc.kill(node_id); kc.restart(node_id)

Every JVM is started in its own session (process group) and killed by the fixture/`close()`; the
module-level registry `_LIVE` lets conftest kill anything left at the end of the run.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / ".peers"
KAFKA_LIB = PEERS / "kafka-lib"
SPARK_LIB = PEERS / "spark-lib"
JAVA_BUILD = PEERS / "java"
KAFKA_CP = f"{KAFKA_LIB}/*"

# JVM options for this 2-core box: small heaps, one GC thread pool, fast start for CLI tools
BROKER_JVM = ["-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
              "-XX:-UsePerfData", "-Djava.awt.headless=true"]
TOOL_JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
            "-Xshare:auto", "-Djava.awt.headless=true"]

_LIVE: set[int] = set()          # pids of process groups started here and not yet reaped


def require_peers() -> None:
    if not (KAFKA_LIB.is_dir() and any(KAFKA_LIB.glob("kafka_2.13-*.jar"))):
        raise RuntimeError(f"Apache Kafka jars missing in {KAFKA_LIB}: run `make peers` (make test does)")
    if not (JAVA_BUILD / "Peer.class").exists():
        raise RuntimeError(f"Java harness not compiled in {JAVA_BUILD}: run `make peers` (make test does)")


def kafka_version() -> str:
    jar = next(KAFKA_LIB.glob("kafka-clients-*.jar"))
    return jar.name[len("kafka-clients-"):-len(".jar")]


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def spawn(args: list[str], log_path: Path | str | None = None, env: dict | None = None,
          stdin=subprocess.DEVNULL, stdout=None, text: bool = True) -> subprocess.Popen:
    """Start a process in its own session so the whole tree can be killed; registered in _LIVE."""
    out = stdout
    fh = None
    if out is None:
        fh = open(log_path, "ab") if log_path else subprocess.DEVNULL
        out = fh
    proc = subprocess.Popen(args, stdin=stdin, stdout=out, stderr=subprocess.STDOUT if out is not subprocess.PIPE
                            else subprocess.PIPE, start_new_session=True, env=env or _java_env(),
                            text=text if out is subprocess.PIPE else False)
    if fh not in (None, subprocess.DEVNULL):
        fh.close()
    _LIVE.add(proc.pid)
    return proc


def kill_tree(proc: subprocess.Popen | None, sig: int = signal.SIGKILL, wait: float = 15.0) -> None:
    if proc is None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(5)
    _LIVE.discard(proc.pid)


def kill_all_live() -> None:
    for pgid in list(_LIVE):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _LIVE.discard(pgid)


def _java_env() -> dict:
    env = dict(os.environ)
    env.pop("JAVA_TOOL_OPTIONS", None)
    env.pop("CLASSPATH", None)
    return env


LOG4J2 = """\
status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
"""

TOOLS_LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = ERROR
rootLogger.appenderRef.err.ref = ERR
"""


class KafkaNode:
    def __init__(self, cluster: "KafkaCluster", node_id: int, port: int, cport: int):
        self.cluster = cluster
        self.node_id = node_id
        self.port = port
        self.cport = cport
        self.dir = cluster.root / f"n{node_id}"
        self.config_path = cluster.root / f"n{node_id}.properties"
        self.log_path = cluster.root / f"n{node_id}.log"
        self.proc: subprocess.Popen | None = None
        # extra client listeners (security tests): name -> port
        self.extra_ports = {name: free_ports(1)[0] for name, _ in cluster.extra_listeners}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def listener_address(self, name: str) -> str:
        return f"127.0.0.1:{self.extra_ports[name]}"

    def write_config(self) -> None:
        c = self.cluster
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.cport}" for n in c.nodes)
        extra = "".join(f",{name}://127.0.0.1:{self.extra_ports[name]}" for name, _ in c.extra_listeners)
        extra_map = "".join(f",{name}:{proto}" for name, proto in c.extra_listeners)
        props = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}{extra}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}{extra}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{extra_map}",
            "log.dirs": str(self.dir),
            "num.partitions": 1,
            "offsets.topic.replication.factor": min(3, len(c.nodes)),
            "offsets.topic.num.partitions": c.offsets_partitions,
            "transaction.state.log.replication.factor": min(3, len(c.nodes)),
            "transaction.state.log.min.isr": min(2, len(c.nodes)),
            "transaction.state.log.num.partitions": 3,
            "share.coordinator.state.topic.replication.factor": min(3, len(c.nodes)),
            "share.coordinator.state.topic.min.isr": min(2, len(c.nodes)),
            "default.replication.factor": min(3, len(c.nodes)),
            "min.insync.replicas": min(2, len(c.nodes)),
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "false",
            "num.network.threads": 2,
            "num.io.threads": 2,
            "num.replica.fetchers": 1,
            "background.threads": 2,
            "broker.heartbeat.interval.ms": 1000,
            "broker.session.timeout.ms": 4000,
            "controller.quorum.election.timeout.ms": 1500,
            "controller.quorum.fetch.timeout.ms": 3000,
            "replica.lag.time.max.ms": 5000,
            "group.consumer.session.timeout.ms": 10000,
            "group.consumer.min.session.timeout.ms": 6000,
            "group.consumer.heartbeat.interval.ms": 1000,
            "group.consumer.min.heartbeat.interval.ms": 500,
            "group.share.enable": "false",
            **c.extra_config,
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def format(self) -> None:
        r = subprocess.run(["java", *TOOL_JVM, f"-Dlog4j2.configurationFile={self.cluster.tools_log4j}",
                            "-cp", KAFKA_CP, "kafka.tools.StorageTool", "format", "-t", self.cluster.cluster_id,
                            "-c", str(self.config_path), *self.cluster.format_args],
                           capture_output=True, text=True, timeout=120, env=_java_env())
        if r.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed for node {self.node_id}:\n{r.stdout}\n{r.stderr}")

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        self.proc = spawn(["java", *self.cluster.jvm, f"-Dlog4j2.configurationFile={self.cluster.log4j}",
                           f"-Dkafka.logs.dir={self.cluster.root}", "-cp", KAFKA_CP, "kafka.Kafka",
                           str(self.config_path)], log_path=self.log_path)

    def kill(self) -> None:
        kill_tree(self.proc, signal.SIGKILL)
        self.proc = None

    def stop(self) -> None:
        """Controlled shutdown (SIGTERM), leaders move away first."""
        kill_tree(self.proc, signal.SIGTERM, wait=30)
        self.proc = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def new_cluster_id() -> str:
    """A random cluster id as Kafka's Uuid.randomUuid makes one: URL-safe base64 of 16 random bytes,
    never starting with "-" (kafka-storage would read such an id as an option and refuse to format)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


class KafkaCluster:
    """A KRaft Apache Kafka of `nodes` combined nodes (each broker and controller) on loopback."""

    def __init__(self, nodes: int = 1, extra_config: dict | None = None, offsets_partitions: int = 3,
                 extra_listeners: list[tuple[str, str]] | None = None, format_args: list[str] | None = None,
                 jvm: list[str] | None = None):
        """extra_listeners: [(NAME, PROTOCOL)] client listeners beside PLAINTEXT (each node's port in
        node.extra_ports; their per-listener settings go in extra_config); format_args: extra
        kafka-storage format arguments (e.g. --add-scram)."""
        require_peers()
        self.extra_listeners = list(extra_listeners or [])
        self.jvm = list(jvm or BROKER_JVM)          # the brokers' JVM options (bench: kafka-server-start's)
        self.format_args = list(format_args or [])
        self._tmp = tempfile.TemporaryDirectory(prefix=f"kafka-{nodes}n-")
        self.root = Path(self._tmp.name)
        self.extra_config = dict(extra_config or {})
        self.offsets_partitions = offsets_partitions
        self.cluster_id = new_cluster_id()
        ports = free_ports(2 * nodes)
        self.nodes = [KafkaNode(self, i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(nodes)]
        self.log4j = self.root / "log4j2.properties"
        self.log4j.write_text(LOG4J2)
        self.tools_log4j = _tools_log4j()
        self._admin = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def start(self, timeout: float = 120.0) -> "KafkaCluster":
        for n in self.nodes:
            n.write_config()
        for n in self.nodes:
            n.format()
        for n in self.nodes:
            n.start()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def wait_ready(self, timeout: float = 120.0, nodes: int | None = None) -> None:
        """Until Metadata lists every live node and a topic can be described (a TCP connect proves nothing)."""
        want = nodes if nodes is not None else sum(1 for n in self.nodes if n.alive)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for n in self.nodes:
                if n.proc is not None and n.proc.poll() is not None:
                    raise RuntimeError(f"Kafka node {n.node_id} exited ({n.proc.returncode}):\n{n.log()[-4000:]}")
            try:
                md = self.metadata()
                if len(md["brokers"]) >= want:
                    return
                last = f"{len(md['brokers'])} of {want} brokers registered"
            except Exception as e:   # not up yet
                last = repr(e)
            time.sleep(0.3)
        raise RuntimeError(f"Kafka cluster not ready after {timeout}s ({last}):\n"
                           + "\n".join(n.log()[-3000:] for n in self.nodes))

    def kill(self, node_id: int) -> None:
        self.node(node_id).kill()

    def restart(self, node_id: int, timeout: float = 120.0) -> None:
        n = self.node(node_id)
        if n.alive:
            n.kill()
        n.start()
        self.wait_ready(timeout)

    def close(self) -> None:
        for n in self.nodes:
            n.kill()
        self._tmp.cleanup()

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ queries through kohort's wire layer
    def _request(self, req, node: KafkaNode | None = None, timeout: float = 10.0):
        from tests.helpers.rawclient import RawClient
        targets = [node] if node is not None else [n for n in self.nodes if n.alive]
        err = None
        for n in targets:
            try:
                c = RawClient(n.address)
                try:
                    c.sock.settimeout(timeout)
                    return c.request(req)
                finally:
                    c.close()
            except Exception as e:   # try the next live node
                err = e
        raise RuntimeError(f"no Kafka node answered: {err!r}")

    def metadata(self, topics: list[str] | None = None) -> dict:
        from kohort.protocol.messages.metadata import MetadataRequest
        req = MetadataRequest(topics=None if topics is None else
                              [MetadataRequest.MetadataRequestTopic(name=t) for t in topics])
        resp = self._request(req)
        return {"brokers": {b.node_id: (b.host, b.port) for b in resp.brokers},
                "controller": resp.controller_id,
                "topics": {t.name: {p.partition_index: {"leader": p.leader_id, "replicas": list(p.replica_nodes),
                                                        "isr": list(p.isr_nodes), "error": p.error_code}
                                    for p in t.partitions}
                           for t in resp.topics if t.error_code == 0}}

    def leader(self, topic: str, partition: int) -> int:
        return self.metadata([topic])["topics"][topic][partition]["leader"]

    def coordinator(self, group_id: str, key_type: int = 0, timeout: float = 30.0) -> int:
        """Node id of the group's (key_type 0) or transactional id's (1) coordinator; waits while the
        internal topic is being created (COORDINATOR_NOT_AVAILABLE)."""
        from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
        deadline = time.monotonic() + timeout
        while True:
            resp = self._request(FindCoordinatorRequest(key=group_id, key_type=key_type,
                                                        coordinator_keys=[group_id]))
            c = resp.coordinators[0] if getattr(resp, "coordinators", None) else resp
            if c.error_code == 0:
                return c.node_id
            if time.monotonic() > deadline:
                raise RuntimeError(f"FindCoordinator({group_id}) error {c.error_code}")
            time.sleep(0.2)

    def create_topic(self, name: str, partitions: int = 1, replication: int | None = None,
                     configs: dict | None = None, timeout: float = 30.0) -> None:
        from kohort.protocol.messages.create_topics import CreateTopicsRequest
        rf = replication if replication is not None else min(3, len(self.nodes))
        T = CreateTopicsRequest.CreatableTopic
        cfg = [T.CreatableTopicConfig(name=k, value=str(v)) for k, v in (configs or {}).items()]
        req = CreateTopicsRequest(topics=[T(name=name, num_partitions=partitions, replication_factor=rf,
                                            configs=cfg)], timeout_ms=int(timeout * 1000))
        resp = self._request(req, timeout=timeout + 5)
        code = resp.topics[0].error_code
        if code not in (0, 36):   # 36 TOPIC_ALREADY_EXISTS
            raise RuntimeError(f"CreateTopics({name}) error {code}: {resp.topics[0].error_message}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:      # until every partition has a leader
            md = self.metadata([name])["topics"].get(name)
            if md and len(md) == partitions and all(p["leader"] >= 0 for p in md.values()):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} has no leaders after {timeout}s")

    # ------------------------------------------------------------------ tools
    def tool(self, main_class: str, *args: str, timeout: float = 120.0, input: str | None = None,
             check: bool = True) -> subprocess.CompletedProcess:
        return run_tool(main_class, *args, timeout=timeout, input=input, check=check,
                        log4j=self.tools_log4j)


def run_tool(main_class: str, *args: str, timeout: float = 120.0, input: str | None = None,
             check: bool = True, log4j: Path | None = None) -> subprocess.CompletedProcess:
    """Run one of Kafka's CLI tools (e.g. 'org.apache.kafka.tools.TopicCommand'); killed at `timeout`."""
    require_peers()
    jvm = list(TOOL_JVM)
    if log4j is not None:
        jvm.append(f"-Dlog4j2.configurationFile={log4j}")
    proc = spawn(["java", *jvm, "-cp", KAFKA_CP, main_class, *args],
                 stdout=subprocess.PIPE, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = proc.communicate()
        raise RuntimeError(f"{main_class} {' '.join(args)} did not finish in {timeout}s:\n{out}\n{err}")
    finally:
        _LIVE.discard(proc.pid)
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check and r.returncode != 0:
        raise RuntimeError(f"{main_class} {' '.join(args)} exited {r.returncode}:\n{out}\n{err}")
    return r


TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
GROUPS = "org.apache.kafka.tools.GroupsCommand"
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


class JavaPeer:
    """The Java harness (tests/interop/peers/java/Peer.java) as a child process printing JSON lines.

        with JavaPeer("consume", "--bootstrap", bs, "--topic", t, "--group", g) as p:
            ev = p.wait_for(lambda e: e["event"] == "assigned")
    """

    def __init__(self, *args: str, log_path: Path | None = None):
        require_peers()
        self.args = ["java", *TOOL_JVM, f"-Dlog4j2.configurationFile={_tools_log4j()}",
                     "-cp", f"{JAVA_BUILD}:{KAFKA_CP}", "Peer", *args]
        self.proc: subprocess.Popen | None = None
        self.events: list[dict] = []
        self.stderr_lines: list[str] = []
        self._cv = None

    def start(self) -> "JavaPeer":
        import threading
        self.proc = spawn(self.args, stdout=subprocess.PIPE, stdin=subprocess.PIPE)
        self._cv = threading.Condition()

        def pump_out():
            for line in self.proc.stdout:
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    ev = {"event": "text", "line": line}
                with self._cv:
                    self.events.append(ev)
                    self._cv.notify_all()
            with self._cv:
                self.events.append({"event": "eof"})
                self._cv.notify_all()

        def pump_err():
            for line in self.proc.stderr:
                self.stderr_lines.append(line.rstrip())
        threading.Thread(target=pump_out, daemon=True).start()
        threading.Thread(target=pump_err, daemon=True).start()
        return self

    def wait_for(self, pred, timeout: float = 60.0, start: int = 0) -> dict:
        deadline = time.monotonic() + timeout
        i = start
        with self._cv:
            while True:
                while i < len(self.events):
                    ev = self.events[i]
                    i += 1
                    if pred(ev):
                        return ev
                    if ev.get("event") in ("eof", "fatal") and not pred(ev):
                        if ev.get("event") == "eof":
                            raise RuntimeError(f"Java peer ended ({self.proc.poll()}) before the event:\n"
                                               + "\n".join(self.stderr_lines[-40:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"Java peer: no matching event in {timeout}s; last events "
                                       f"{self.events[-5:]}\n" + "\n".join(self.stderr_lines[-40:]))
                self._cv.wait(left)

    def of(self, kind: str) -> list[dict]:
        return [e for e in list(self.events) if e.get("event") == kind]

    def owned(self) -> set[tuple[str, int]]:
        """The partitions a consuming peer owns now, from its assigned/revoked/lost events."""
        own: set = set()
        for ev in list(self.events):
            parts = {(t, int(p)) for t, p in (x.rsplit("-", 1) for x in ev.get("partitions", []))}
            if ev.get("event") == "assigned":
                own |= parts
            elif ev.get("event") in ("revoked", "lost"):
                own -= parts
        return own

    def seen(self) -> set[tuple[str, int, int]]:
        """(topic, partition, offset) of every record a consuming peer reported (--offsets)."""
        out = set()
        for ev in self.of("records"):
            for x in ev.get("offsets", []):
                tp, off = x.rsplit("@", 1)
                t, part = tp.rsplit("-", 1)
                out.add((t, int(part), int(off)))
        return out

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = 30.0) -> int | None:
        """Ask the peer to close cleanly (a line 'stop' on stdin); kill it if it does not."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.send("stop")
                self.proc.wait(timeout)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        kill_tree(self.proc)
        return self.proc.returncode

    def kill(self) -> None:
        kill_tree(self.proc)

    def __enter__(self) -> "JavaPeer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


_TOOLS_LOG4J: Path | None = None


def _tools_log4j() -> Path:
    global _TOOLS_LOG4J
    if _TOOLS_LOG4J is None:
        fd, p = tempfile.mkstemp(prefix="kohort-tools-log4j2-", suffix=".properties")
        os.write(fd, TOOLS_LOG4J2.encode())
        os.close(fd)
        _TOOLS_LOG4J = Path(p)
    return _TOOLS_LOG4J
