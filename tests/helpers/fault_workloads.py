"""Workloads run through the fault proxy (tests/helpers/fault_proxy.py) against kohort broker, and the checker
of their histories, in the manner of Jepsen's Kafka tests. Each checked run can append its row
(`record`) to a JSON-lines file that tests/helpers/fault_report.py turns into the table.

    with ProxiedBroker() as pb:                  # kohort broker advertising the proxy's address
        h = producer_workload(pb, "t", fault=FAULTS["blackhole"])
        assert check_producer(h, read_log(pb.bootstrap, "t")).clean

Faults (`FAULTS`): each a function of the proxy returning its heal function, applied `fault_at`
seconds into the run and healed `fault_for` seconds later:
  delay      every byte held 300 ms both ways
  blackhole  bytes thrown away both ways, connections left open and silent; healed by resetting them
  oneway     client -> broker black-holed only (answers would still flow), healed likewise
  reset      every open connection reset (RST), then new connections refused for the duration
Node faults (`NODE_FAULTS`, a ProxiedKafka of 3 nodes): `kill-leader` SIGKILLs the leader of the
topic's partition 0, `kill-coordinator` the group's coordinator; healed by restarting the node.

The checker's anomalies (`Report.anomalies`, each a count):
  lost             acknowledged records not in the log (producer), or records in the log no member
                   of the group ever consumed (group)
  duplicates       the same record twice in the log (idempotent producer), or a record consumed
                   again below an offset committed before (group: outside the uncommitted window)
  out_of_order     records of one partition in the log out of the producer's order, or offsets of one
                   partition going backwards at one member within one assignment
  two_owners       a partition owned by two members at once, by the members' own assignment callbacks
                   (timestamped); an ownership ended by on_lost (a fenced member) is not an owner's
  stalled          no progress for more than `stall_s` after the fault healed while work remained
  hung_calls       client calls that returned later than their own timeout (+ slack)

Group members (`group_workload`) are kohort's Consumer, confluent-kafka's, or Kafka's Java consumer
(`java`: tests/interop/peers/java/Peer.java in its own JVM, its callbacks timestamped in the JVM).

A share group (`share_workload`, KIP-932): kohort's, confluent-kafka's and Java's (`java`:
tests/interop/peers/java/SharePeer.java in its own JVM, its events timestamped in the JVM) ShareConsumer
members accept every record they get while a producer writes through the fault; `check_share` counts
  lost             records of the log no member accepted by the end (an acceptance refused with
                   INVALID_RECORD_STATE was not applied; one without a clear answer may have been)
  duplicates       a record delivered again after a member's acceptance of it was answered ok
  stalled, hung_calls  as above (out_of_order and two_owners do not apply to shared partitions)
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.brokers import KohortBroker, free_port
from tests.helpers.fault_proxy import FaultProxy

CALL_SLACK_S = 3.0          # a call may overrun its timeout by this much before it counts as hung


class ProxiedBroker:
    """A kohort broker behind a FaultProxy: it advertises the proxy, so every client connection goes
    through it. `bootstrap` is the proxy's address; `direct` the broker's own."""

    nodes = 1

    def __init__(self, config: dict | None = None):
        port = free_port()
        self.proxy = FaultProxy(("127.0.0.1", port))
        self.broker = KohortBroker(port=port, config={
            "advertised.listeners": f"PLAINTEXT://{self.proxy.address}", **(config or {})})

    @property
    def bootstrap(self) -> str:
        return self.proxy.address

    def __enter__(self) -> "ProxiedBroker":
        self.proxy.start()
        try:
            self.broker.start()
        except BaseException:
            self.proxy.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.broker.__exit__(*exc)
        finally:
            self.proxy.close()


class ProxyGroup:
    """Several FaultProxy, one per broker, faulted and healed together; counters are their sums."""

    def __init__(self, proxies: list[FaultProxy]):
        self.proxies = proxies

    def __getattr__(self, name: str):
        if name in ("accepted", "discarded_bytes", "delayed_chunks", "resets"):
            return sum(getattr(p, name) for p in self.proxies)
        if name in ("delay", "pause", "resume", "blackhole", "refuse", "reset", "heal"):
            return lambda *a, **kw: [getattr(p, name)(*a, **kw) for p in self.proxies]
        raise AttributeError(name)


class ProxiedKafka:
    """An Apache Kafka of 1 or 3 nodes (tests/helpers/kafka_cluster.py), each node behind a FaultProxy of its
    own and advertising it, so every client connection to every broker goes through a proxy; with 3
    nodes the brokers replicate and elect over a second listener (INTERNAL) that no proxy sits on.
    `proxy` is the group of proxies, faulted together. Share groups run with SHARE_GROUP_CONFIG."""

    def __init__(self, nodes: int = 1):
        from tests.helpers.kafka_cluster import KafkaCluster
        self.kc = KafkaCluster(nodes=nodes, extra_listeners=[("INTERNAL", "PLAINTEXT")] if nodes > 1 else None,
                               extra_config=SHARE_GROUP_CONFIG)
        self.proxies = [FaultProxy(("127.0.0.1", n.port)) for n in self.kc.nodes]
        self.proxy = ProxyGroup(self.proxies)
        if nodes == 1:
            self.kc.extra_config["advertised.listeners"] = f"PLAINTEXT://{self.proxies[0].address}"
        else:
            self.kc.extra_config["inter.broker.listener.name"] = "INTERNAL"
            for node, proxy in zip(self.kc.nodes, self.proxies):
                node.write_config = _advertising(node, proxy)

    @property
    def nodes(self) -> int:
        return len(self.kc.nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(p.address for p in self.proxies)

    def __enter__(self) -> "ProxiedKafka":
        for p in self.proxies:
            p.start()
        try:
            self.kc.start(timeout=180)
        except BaseException:
            for p in self.proxies:
                p.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        from tests.helpers.ck_tracking import close_open_clients
        try:
            close_open_clients()
            self.kc.close()
        finally:
            for p in self.proxies:
                p.close()


def _advertising(node, proxy: FaultProxy):
    """node.write_config that advertises the proxy on PLAINTEXT and the node itself on INTERNAL (a
    later key of a properties file wins over an earlier one)."""
    write = node.write_config

    def write_config() -> None:
        write()
        with open(node.config_path, "a") as f:
            f.write(f"advertised.listeners=PLAINTEXT://{proxy.address},"
                    f"INTERNAL://{node.listener_address('INTERNAL')}\n")
    return write_config


def _delay(proxy):
    proxy.delay(300)
    return lambda: proxy.heal()


def _blackhole(proxy):
    proxy.blackhole()
    return lambda: proxy.heal(reset_blackholed=True)


def _oneway(proxy):
    proxy.blackhole("c2s")
    return lambda: proxy.heal(reset_blackholed=True)


def _reset(proxy):
    proxy.refuse(True)
    proxy.reset()
    return lambda: proxy.heal()


FAULTS = {"delay": _delay, "blackhole": _blackhole, "oneway": _oneway, "reset": _reset}


def _kill_leader(pb, topic: str):
    """SIGKILL the Kafka node leading partition 0 of `topic`; healed by restarting it."""
    node = pb.kc.leader(topic, 0)
    pb.kc.kill(node)
    pb.killed = node
    return lambda: pb.kc.restart(node, timeout=180)


def _kill_coordinator(pb, group: str):
    """SIGKILL the Kafka node coordinating `group`; healed by restarting it."""
    node = pb.kc.coordinator(group)
    pb.kc.kill(node)
    pb.killed = node
    return lambda: pb.kc.restart(node, timeout=180)


# faults of a node of a ProxiedKafka rather than of the network: f(pb, topic or group) -> heal
NODE_FAULTS = {"kill-leader": _kill_leader, "kill-coordinator": _kill_coordinator}


@dataclass
class Report:
    """One run's figures and anomalies."""
    workload: str
    fault: str
    records: int = 0
    anomalies: dict = field(default_factory=lambda: dict.fromkeys(
        ("lost", "duplicates", "out_of_order", "two_owners", "stalled", "hung_calls"), 0))
    details: list = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not any(self.anomalies.values())

    def add(self, kind: str, detail: str, n: int = 1) -> None:
        self.anomalies[kind] += n
        if len(self.details) < 20:
            self.details.append(f"{kind}: {detail}")

    def line(self) -> str:
        a = self.anomalies
        return (f"{self.workload:<22} {self.fault:<10} records={self.records:<6} lost={a['lost']} "
                f"dup={a['duplicates']} order={a['out_of_order']} owners2={a['two_owners']} "
                f"stalled={a['stalled']} hung={a['hung_calls']}")


class _Timed:
    """Measures client calls against their own timeouts."""

    def __init__(self) -> None:
        self.hung: list[str] = []

    def call(self, what: str, timeout_s: float, fn, *args, **kw):
        t0 = time.monotonic()
        try:
            return fn(*args, **kw)
        finally:
            took = time.monotonic() - t0
            if took > timeout_s + CALL_SLACK_S:
                self.hung.append(f"{what} took {took:.1f}s (timeout {timeout_s}s)")


def _schedule(pb, fault: str | None, fault_at: float, fault_for: float, stop: threading.Event,
              target: str = "", on_fault=None) -> dict:
    """Run the fault in a thread; returns a dict that gets 'healed_at' (monotonic) once healed.
    `target` is the topic or group a node fault picks its node by; `on_fault()` runs right after
    the fault is applied (members joining or leaving at that moment)."""
    state: dict = {}

    def run():
        if fault is None:
            state["healed_at"] = time.monotonic()
            return
        if stop.wait(fault_at):
            return
        heal = NODE_FAULTS[fault](pb, target) if fault in NODE_FAULTS else FAULTS[fault](pb.proxy)
        state["faulted_at"] = time.monotonic()
        if on_fault is not None:
            on_fault()
        stop.wait(fault_for)
        heal()
        state["healed_at"] = time.monotonic()

    t = threading.Thread(target=run, name="fault-schedule", daemon=True)
    t.start()
    state["thread"] = t
    return state


def results_path() -> str:
    """Where every checked run appends its row (JSON lines) for tests/helpers/fault_report.py."""
    import os
    import tempfile
    return os.environ.get("KOHORT_FAULT_RESULTS", os.path.join(tempfile.gettempdir(), "kohort-fault-results.jsonl"))


def record(r: Report, broker: str) -> None:
    """Append one run's row to results_path(): fault, workload, broker, records, anomaly counts and
    the first details (the reproduction's evidence)."""
    import json
    with open(results_path(), "a") as f:
        f.write(json.dumps({"fault": r.fault, "workload": r.workload, "broker": broker, "records": r.records,
                            "anomalies": r.anomalies, "details": r.details[:5], "t": time.time()}) + "\n")


# -- the idempotent producer ----------------------------------------------------------------------------
@dataclass
class ProducerHistory:
    sent: int = 0
    acked: dict = field(default_factory=dict)       # value -> (partition, offset)
    failed: dict = field(default_factory=dict)      # value -> error text (indeterminate)
    hung: list = field(default_factory=list)
    sent_at: dict = field(default_factory=dict)     # value -> monotonic time of produce()
    acked_at: dict = field(default_factory=dict)    # value -> monotonic time of its acknowledgement
    faulted_at: float | None = None
    healed_at: float | None = None
    last_ack_at: float | None = None
    finished_at: float | None = None
    proxied_connections: int = 0

    def fault_bit(self, fault: str) -> str | None:
        """None when the fault visibly acted on the run (else why not): no acknowledgement while a
        black hole or reset was on; acknowledgements at least the delay late while delayed."""
        if self.faulted_at is None or self.healed_at is None:
            return "the fault never ran"
        if fault == "kill-leader":     # partition 0 went on being acknowledged: by a new leader
            moved = [v for v, t in self.acked_at.items() if self.faulted_at < t < self.healed_at
                     and self.sent_at[v] > self.faulted_at and self.acked[v][0] == 0]
            return None if moved else "no record of partition 0 sent after the kill was acknowledged before the restart"
        if not self.proxied_connections:
            return "no client connection went through the proxy"
        lo, hi = self.faulted_at + 0.5, self.healed_at
        during = [v for v, t in self.acked_at.items() if lo < t < hi and self.sent_at[v] > self.faulted_at]
        if fault == "delay":
            lat = sorted(self.acked_at[v] - self.sent_at[v] for v in during)
            if not lat or lat[len(lat) // 2] < 0.3:
                return f"acknowledgements during the delay were not delayed: {lat[len(lat) // 2] if lat else None}"
            return None
        if during:
            return f"{len(during)} records sent during the {fault} were acknowledged during it"
        return None


def producer_workload(pb: ProxiedBroker, topic: str, fault: str | None, duration: float = 7.0,
                      fault_at: float = 1.5, fault_for: float = 3.0, rate: int = 400,
                      client: str = "kohort") -> ProducerHistory:
    """An idempotent producer (acks=all) sends "<seq>" values (key = seq % 16) at `rate`/s for
    `duration` s while the fault runs, then flushes with a timeout."""
    h = ProducerHistory()
    timed = _Timed()
    lock = threading.Lock()

    def on_delivery(err, md, value):
        with lock:
            if err is None:
                h.acked[value] = (md.partition, md.offset)
                h.last_ack_at = h.acked_at[value] = time.monotonic()
            else:
                h.failed[value] = str(err)

    if client == "kohort":
        from kohort import Producer
        p = Producer({"bootstrap.servers": pb.bootstrap, "enable.idempotence": True, "acks": "all",
                      "request.timeout.ms": 3000, "delivery.timeout.ms": 60000, "linger.ms": 5,
                      "max.block.ms": 10000})
        send = lambda v: p.produce(topic, value=v.encode(), key=str(int(v) % 16).encode(),  # noqa: E731
                                   on_delivery=lambda e, m, v=v: on_delivery(e, m, v))
        flush = p.flush
    else:
        import confluent_kafka
        p = confluent_kafka.Producer({"bootstrap.servers": pb.bootstrap, "enable.idempotence": True,
                                      "acks": "all", "linger.ms": 5, "socket.timeout.ms": 3000,
                                      "message.timeout.ms": 60000, "log_level": 0})

        def send(v):
            p.produce(topic, value=v.encode(), key=str(int(v) % 16).encode(),
                      on_delivery=lambda e, m, v=v: on_delivery(
                          e, type("M", (), {"partition": m.partition(), "offset": m.offset()}) if e is None else None, v))
            p.poll(0)
        flush = p.flush
    stop = threading.Event()
    sched = _schedule(pb, fault, fault_at, fault_for, stop, target=topic)
    t0 = time.monotonic()
    seq = 0
    try:
        while time.monotonic() - t0 < duration:
            h.sent_at[str(seq)] = time.monotonic()
            timed.call("produce", 10.0, send, str(seq))
            seq += 1
            h.sent = seq
            next_at = t0 + seq / rate
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        sched["thread"].join(fault_at + fault_for + (180 if fault in NODE_FAULTS else 5))
        left = timed.call("flush", 60.0, flush, 60.0)
        if left:
            timed.hung.append(f"flush left {left} records undelivered after its 60 s")
    finally:
        stop.set()
        if client == "kohort":
            timed.call("close", 10.0, p.close, 10.0)
    h.hung = timed.hung
    h.faulted_at, h.healed_at = sched.get("faulted_at"), sched.get("healed_at")
    h.finished_at = time.monotonic()
    h.proxied_connections = pb.proxy.accepted
    return h


def read_log(bootstrap: str, topic: str, timeout: float = 30.0) -> dict:
    """Every record of `topic`: {partition: [(offset, value str)]}, read to the end offsets."""
    from kohort import Consumer
    from kohort.structs import TopicPartition
    out: dict = {}
    with Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False}) as c:
        parts = c.partitions_for_topic(topic, 10)
        assert parts, f"topic {topic} has no partitions"
        tps = [TopicPartition(topic, p) for p in parts]
        end = c.end_offsets(tps, 10)
        c.assign(tps)
        c.seek_to_beginning(tps)
        pos = {tp: 0 for tp in tps}
        deadline = time.monotonic() + timeout
        while any(pos[tp] < end[tp] for tp in tps) and time.monotonic() < deadline:
            for r in c.poll(0.2):
                out.setdefault(r.partition, []).append((r.offset, r.value.decode()))
                pos[TopicPartition(topic, r.partition)] = r.offset + 1
        if any(pos[tp] < end[tp] for tp in tps):
            raise AssertionError(f"could not read {topic} to its end: {pos} < {end}")
    return out


def check_producer(h: ProducerHistory, log: dict, fault: str, stall_s: float = 30.0) -> Report:
    r = Report("idempotent producer", fault, records=len(h.acked))
    where: dict = {}                                 # value -> every (partition, offset) holding it
    for p, recs in log.items():
        last = -1
        for off, v in recs:
            if v in where:
                r.add("duplicates", f"value {v} at {where[v]} and {(p, off)}")
            where.setdefault(v, []).append((p, off))
            if int(v) <= last:
                r.add("out_of_order", f"partition {p}: {v} after {last}")
            last = max(last, int(v))
    for v, (p, off) in h.acked.items():
        if v not in where:
            r.add("lost", f"acknowledged {v} at {(p, off)} is not in the log")
        elif (p, off) not in where[v]:
            r.add("lost", f"acknowledged {v} at {(p, off)}, which holds another record; {v} is at {where[v]}")
    if h.healed_at is not None and len(h.acked) < h.sent and (h.last_ack_at or 0) < h.healed_at \
            and h.finished_at - h.healed_at > stall_s:
        r.add("stalled", f"no acknowledgement in the {h.finished_at - h.healed_at:.0f}s after the heal")
    for x in h.hung:
        r.add("hung_calls", x)
    return r


# -- a classic group ---------------------------------------------------------------------------------------
@dataclass
class GroupHistory:
    consumed: list = field(default_factory=list)    # (member, partition, offset, value, committed floor)
    assigned: list = field(default_factory=list)    # (member, event, partitions, t)
    commit_errors: list = field(default_factory=list)
    hung: list = field(default_factory=list)
    healed_at: float | None = None
    faulted_at: float | None = None
    joined: list = field(default_factory=list)      # names of the members that joined at the fault
    coordinators: list = field(default_factory=list)  # (node killed, its successor, seconds after the kill)
    progress_after_heal_s: float | None = None
    done: bool = False
    proxy_counts: dict = field(default_factory=dict)

    def fault_bit(self, fault: str) -> str | None:
        """None when the fault acted on the members' connections (bytes thrown away, connections
        reset, chunks delayed), else why not."""
        if fault in NODE_FAULTS:
            if self.faulted_at is None:
                return "the fault never ran"
            if fault == "kill-coordinator" and not (self.coordinators and self.coordinators[0][1] is not None
                                                    and self.coordinators[0][0] != self.coordinators[0][1]):
                return f"the coordinator did not move: {self.coordinators}"
            late = [e for e in self.assigned if e[0] in self.joined and e[1] == "assign" and e[3] > self.faulted_at]
            if self.joined and not late:
                return f"no member that joined at the fault was assigned anything: {self.assigned}"
            return None
        c = self.proxy_counts
        need = {"blackhole": "discarded_bytes", "oneway": "discarded_bytes", "reset": "resets",
                "delay": "delayed_chunks"}[fault]
        return None if c.get(need) else f"the {fault} did not act on any connection: {c}"


class _Member:
    """One group member consuming in its own thread: poll, record, commit synchronously every 200 ms."""

    def __init__(self, name: str, kind: str, bootstrap: str, group: str, topic: str, h: GroupHistory,
                 committed: dict, lock: threading.Lock, timed: _Timed):
        self.name, self.kind, self.h, self.committed, self.lock, self.timed = name, kind, h, committed, lock, timed
        self.last: dict = {}
        self.last_progress = time.monotonic()
        base = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False}
        if kind.endswith("848"):        # KIP-848: the broker times the session and assigns
            base["group.protocol"] = "consumer"
        else:
            base.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        self.kind = kind = kind.removesuffix("848")
        self.process_s = 0.002          # "processing" per record: consumption spans the fault
        if kind == "kohort":
            from kohort import Consumer
            self.c = Consumer({**base, "request.timeout.ms": 3000, "default.api.timeout.ms": 10000,
                               "max.poll.records": 50})
            self.c.subscribe([topic], on_assign=lambda _c, tps: self._event("assign", tps),
                             on_revoke=lambda _c, tps: self._event("revoke", tps),
                             on_lost=lambda _c, tps: self._event("lost", tps))
        else:
            import confluent_kafka
            self.c = confluent_kafka.Consumer({**base, "socket.timeout.ms": 3000, "log_level": 0})
            self.c.subscribe([topic], on_assign=lambda _c, ps: self._event("assign", ps),
                             on_revoke=lambda _c, ps: self._event("revoke", ps),
                             on_lost=lambda _c, ps: self._event("lost", ps))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def _event(self, what: str, tps) -> None:
        parts = sorted(tp.partition for tp in tps)
        for p in parts:
            self.last.pop(p, None)              # a new assignment: offsets may start over
        with self.lock:
            self.h.assigned.append((self.name, what, parts, time.monotonic()))

    def _record(self, partition: int, offset: int, value: str) -> None:
        with self.lock:
            floor = self.committed.get(partition, 0)
            self.h.consumed.append((self.name, partition, offset, value, floor))
        prev = self.last.get(partition)
        if prev is not None and offset <= prev:
            with self.lock:
                self.h.consumed.append((self.name, partition, offset, value, "backwards"))
        self.last[partition] = offset
        self.last_progress = time.monotonic()
        time.sleep(self.process_s)

    def _run(self) -> None:
        next_commit = time.monotonic() + 0.2
        pending: dict = {}
        while not self.stop.is_set():
            if self.kind == "kohort":
                recs = self.timed.call(f"{self.name} poll", 0.5, self.c.poll, 0.5)
                for r in recs:
                    self._record(r.partition, r.offset, r.value.decode())
                    pending[r.partition] = r.offset + 1
            else:
                m = self.timed.call(f"{self.name} poll", 0.5, self.c.poll, 0.5)
                if m is not None and m.error() is None:
                    self._record(m.partition(), m.offset(), m.value().decode())
                    pending[m.partition()] = m.offset() + 1
            if pending and time.monotonic() >= next_commit:
                next_commit = time.monotonic() + 0.2
                # the floor is what the client says it committed: the positions of the partitions it
                # owns at the call, not those consumed under an assignment revoked since
                try:
                    if self.kind == "kohort":
                        done = self.timed.call(f"{self.name} commit", 10.0, self.c.commit)
                        done = {tp.partition: om.offset for tp, om in (done or {}).items()}
                    else:
                        done = self.timed.call(f"{self.name} commit", 30.0, self.c.commit, asynchronous=False)
                        done = {tp.partition: tp.offset for tp in done or () if tp.error is None and tp.offset >= 0}
                except Exception as e:       # commit failures are allowed (they widen the window)
                    with self.lock:
                        self.h.commit_errors.append(f"{self.name}: {type(e).__name__}: {e}"[:200])
                else:
                    with self.lock:
                        for p, off in done.items():
                            self.committed[p] = max(self.committed.get(p, 0), off)
                pending = {}

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        if self.thread.is_alive():
            self.timed.hung.append(f"{self.name} did not stop within 60 s")
            return
        self.timed.call(f"{self.name} close", 30.0, self.c.close)


class _JavaPeerDriver:
    """What the Java members share: the JVM of `self.peer` started by a reader thread (`thread`, whose
    target is `_run`) that hands each JSON event to `_on`; event times on the JVM's System.nanoTime()
    (`mono_ns`, the clock of time.monotonic() on Linux) or the time the line was read if the two clocks
    disagree; close() stopping the JVM within the workload's call timeout."""
    name: str
    peer: Any
    timed: _Timed
    thread: threading.Thread
    clock_ok: bool | None = None
    _stopped: bool = False

    def _on(self, ev: dict) -> None:
        raise NotImplementedError

    def _when(self, ev: dict) -> float:
        now = time.monotonic()
        mono = ev.get("mono_ns")
        if self.clock_ok is None and mono is not None:
            self.clock_ok = abs(mono / 1e9 - now) < 1.0
        return mono / 1e9 if self.clock_ok and mono is not None else now

    def _run(self) -> None:
        try:
            self.peer.start()
        except Exception as e:          # noqa: BLE001 - the JVM did not start: counted as a hung member
            self.timed.hung.append(f"{self.name} did not start: {e}")
            return
        i = 0
        while True:
            try:
                ev = self.peer.wait_for(lambda e: True, timeout=1.0, start=i)
            except TimeoutError:
                continue
            except RuntimeError:        # the JVM ended before its next event
                return
            i += 1
            if ev.get("event") == "eof":
                return
            self._on(ev)

    def close(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.timed.call(f"{self.name} close", 30.0, self.peer.stop, 30.0)
        self.thread.join(10)


class _JavaMember(_JavaPeerDriver):
    """A group member that is Apache Kafka's own Java consumer (tests/interop/peers/java/Peer.java, consume mode,
    commitSync after each poll) in its own JVM, with the interface of _Member. Its JSON events are
    turned into the history by a reader thread: assigned/revoked/lost at the time the callback ran in
    the JVM (System.nanoTime(), the clock of time.monotonic() on Linux; the time the line was read if
    the two clocks disagree), each record's partition and offset (the peer reports no values), and
    the offsets commitSync committed as the floor."""

    def __init__(self, name: str, kind: str, bootstrap: str, group: str, topic: str, h: GroupHistory,
                 committed: dict, lock: threading.Lock, timed: _Timed):
        from tests.helpers.kafka_cluster import JavaPeer
        self.name, self.h, self.committed, self.lock, self.timed = name, h, committed, lock, timed
        self.kind = "java"
        args = ["consume", "--bootstrap", bootstrap, "--topic", topic, "--group", group, "--offsets",
                "--commit", "sync", "--from", "earliest"]
        if kind.endswith("848"):
            args += ["--protocol", "consumer"]
        else:                           # classic: the broker times the session the member asks for
            args += ["--session-timeout-ms", "6000"]
        self.peer = JavaPeer(*args)
        self.last: dict = {}
        self.last_progress = time.monotonic()
        self.clock_ok: bool | None = None
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self._stopped = False

    def _on(self, ev: dict) -> None:
        kind = ev.get("event")
        if kind == "started":
            self._when(ev)
        elif kind in ("assigned", "revoked", "lost"):
            t = self._when(ev)
            parts = sorted(int(x.rsplit("-", 1)[1]) for x in ev.get("partitions", []))
            for p in parts:
                self.last.pop(p, None)
            with self.lock:
                self.h.assigned.append((self.name, {"assigned": "assign", "revoked": "revoke"}.get(kind, kind),
                                        parts, t))
        elif kind == "records":
            for x in ev.get("offsets", []):
                tp, off = x.rsplit("@", 1)
                p, off = int(tp.rsplit("-", 1)[1]), int(off)
                with self.lock:
                    floor = self.committed.get(p, 0)
                    self.h.consumed.append((self.name, p, off, None, floor))
                    prev = self.last.get(p)
                    if prev is not None and off <= prev:
                        self.h.consumed.append((self.name, p, off, None, "backwards"))
                self.last[p] = off
            self.last_progress = time.monotonic()
        elif kind == "committed":
            with self.lock:
                for tp, off in ev.get("offsets", {}).items():
                    p = int(tp.rsplit("-", 1)[1])
                    self.committed[p] = max(self.committed.get(p, 0), off)
        elif kind in ("commit_failed", "error", "fatal"):
            with self.lock:
                self.h.commit_errors.append(f"{self.name}: {kind}: {ev.get('error')}"[:200])



def _member(name: str, kind: str, *args):
    """A member of `kind`: kohort or confluent (a _Member in a thread), java (a _JavaMember, its own JVM);
    a suffix 848 makes it speak group.protocol=consumer."""
    return (_JavaMember if kind.startswith("java") else _Member)(name, kind, *args)


def group_workload(pb: ProxiedBroker, topic: str, fault: str | None, members=("kohort", "confluent"),
                   records: int = 4000, partitions: int = 4, fault_at: float = 1.5, fault_for: float = 3.0,
                   stall_s: float = 30.0, join_at_fault=(), leave_at_fault: int = 0,
                   replication: int | None = None) -> tuple[GroupHistory, dict]:
    """Members of one group consume `topic` (filled before and during the run through the proxy)
    while the fault runs; ends when every record was consumed after the heal, or `stall_s` after
    the heal. Member kinds: kohort, confluent, java (Kafka's Java consumer in its own JVM); a kind
    ending in "848" speaks group.protocol=consumer (KIP-848), else classic. At the moment the fault
    is applied, members of the kinds `join_at_fault` join and the first `leave_at_fault` members
    leave (close). The topic is replicated on every node unless `replication` says otherwise.
    Returns the history and the log."""
    from tests.helpers.peers import create_topic
    rf = replication if replication is not None else getattr(pb, "nodes", 1)
    assert create_topic(pb.bootstrap, topic, partitions, replication=rf) == partitions
    half = records // 2
    _fill(pb.bootstrap, topic, 0, half)
    h = GroupHistory()
    committed: dict = {}
    lock = threading.Lock()
    timed = _Timed()
    group = f"g-{topic}"
    ms = [_member(f"{kind}-{i}", kind, pb.bootstrap, group, topic, h, committed, lock, timed)
          for i, kind in enumerate(members)]
    stop = threading.Event()
    for m in ms:
        m.thread.start()
    try:
        _await_assignment(h, lock, {m.name for m in ms}, partitions, 60.0)
    except BaseException:
        for m in ms:
            m.close()
        raise
    left: list = []

    def churn() -> None:
        h.faulted_at = time.monotonic()
        for i, kind in enumerate(join_at_fault):
            m = _member(f"{kind}-j{i}", kind, pb.bootstrap, group, topic, h, committed, lock, timed)
            ms.append(m)
            h.joined.append(m.name)
            m.thread.start()
        if getattr(pb, "killed", None) is not None and fault == "kill-coordinator":
            _watch_successor(pb, group, h, fault_for)
        for m in ms[:leave_at_fault]:
            t = threading.Thread(target=m.close, name=f"leave-{m.name}", daemon=True)
            t.start()
            left.append(t)

    sched = _schedule(pb, fault, fault_at, fault_for, stop, target=topic if fault == "kill-leader" else group,
                      on_fault=churn)
    try:
        sched["thread"].join(fault_at + fault_for + (180 if fault in NODE_FAULTS else 10))
        h.healed_at = sched.get("healed_at", time.monotonic())
        _fill(pb.bootstrap, topic, half, records - half)          # after the heal: must all arrive
        deadline = h.healed_at + stall_s
        while time.monotonic() < deadline:
            with lock:
                seen = {(p, o) for _, p, o, _, floor in h.consumed if floor != "backwards"}
            if len(seen) >= records:
                h.done = True
                break
            time.sleep(0.2)
        progress = [m.last_progress for m in ms]
        h.progress_after_heal_s = max(0.0, max(progress) - h.healed_at)
    finally:
        stop.set()
        for t in left:
            t.join(60)
        for m in ms[leave_at_fault:] if left else ms:
            m.close()
    h.hung = timed.hung
    h.proxy_counts = {k: getattr(pb.proxy, k) for k in ("accepted", "discarded_bytes", "delayed_chunks", "resets")}
    return h, read_log(pb.bootstrap, topic)


def _await_assignment(h: GroupHistory, lock: threading.Lock, names: set, partitions: int, timeout: float) -> None:
    """Until the members' callbacks say every partition is owned (the group is stable before the fault)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with lock:
            owned = owners_at(h.assigned, time.monotonic())
        if len(owned) == partitions:
            return
        time.sleep(0.2)
    raise AssertionError(f"the group never owned all {partitions} partitions: {h.assigned}")


def ownership(assigned: list) -> dict:
    """{partition: [(member, start, end or None, how it ended)]} from the members' own callbacks: an
    assign adds its partitions to the member (incremental and eager alike), a revoke or a loss takes
    them away."""
    out: dict = {}
    open_: dict = {}                    # (member, partition) -> start
    for member, what, parts, t in sorted(assigned, key=lambda e: e[3]):
        for p in parts:
            if what == "assign":
                open_.setdefault((member, p), t)
            elif (member, p) in open_:
                out.setdefault(p, []).append((member, open_.pop((member, p)), t, what))
    for (member, p), t in open_.items():
        out.setdefault(p, []).append((member, t, None, "held"))
    return out


def owners_at(assigned: list, t: float) -> dict:
    """{partition: {members owning it at time t}}."""
    return {p: owners for p, iv in ownership(assigned).items()
            if (owners := {m for m, a, b, _ in iv if a <= t and (b is None or t < b)})}


def two_owners(assigned: list) -> list[str]:
    """Every time a partition was owned by two members at once by their own callbacks. A member's
    ownership ended by on_lost (fenced by the coordinator, its commits refused) is a zombie's, not
    an owner's: its overlap with the next owner is not counted."""
    found = []
    for p, iv in ownership(assigned).items():
        for i, (m1, a1, b1, how1) in enumerate(iv):
            for m2, a2, b2, how2 in iv[i + 1:]:
                if m1 == m2 or "lost" in (how1, how2):
                    continue
                if a1 < (b2 if b2 is not None else float("inf")) and a2 < (b1 if b1 is not None else float("inf")):
                    found.append(f"partition {p}: {m1} [{a1:.2f}, {b1}) and {m2} [{a2:.2f}, {b2}) ({how1}/{how2})")
    return found


def _fill(bootstrap: str, topic: str, start: int, count: int) -> None:
    from kohort import Producer
    with Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                   "linger.ms": 5}) as p:
        for i in range(start, start + count):
            p.produce(topic, value=str(i).encode(), key=str(i % 16).encode())
        left = p.flush(30)
    assert not left, f"{left} records of the fill not delivered"


def check_group(h: GroupHistory, log: dict, fault: str, members: str, stall_s: float = 30.0,
                protocol: str = "classic") -> Report:
    r = Report(f"{protocol} group ({members})", fault, records=sum(len(v) for v in log.values()))
    for x in two_owners(h.assigned):
        r.add("two_owners", x)
    consumed = {}
    for name, p, off, v, floor in h.consumed:
        if floor == "backwards":
            r.add("out_of_order", f"{name}: partition {p} offset {off} after a later one")
            continue
        if (p, off) in consumed and off < floor:
            r.add("duplicates", f"{name}: partition {p} offset {off} again, below committed {floor}")
        if v is not None or (p, off) not in consumed:      # a Java member reports no values
            consumed[(p, off)] = v
    for p, recs in log.items():
        for off, v in recs:
            if (p, off) not in consumed:
                r.add("lost", f"partition {p} offset {off} ({v}) never consumed")
            elif consumed[(p, off)] not in (v, None):
                r.add("lost", f"partition {p} offset {off}: consumed {consumed[(p, off)]!r}, log has {v!r}")
    if not h.done:
        r.add("stalled", f"not every record consumed within {stall_s:.0f}s after the heal")
    for x in h.hung:
        r.add("hung_calls", x)
    return r


# -- a share group (KIP-932) -----------------------------------------------------------------------------
# Share-group settings of both brokers for the fault runs: locks of 4 s (a silenced member's records go
# to the others soon), member sessions of 6 s, heartbeats every 0.5 s, assignments at once.
SHARE_GROUP_CONFIG = {
    "group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 4000,
    "group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500,
    "group.share.min.session.timeout.ms": 3000, "group.share.session.timeout.ms": 6000,
    "group.share.assignment.interval.ms": 0,
}


@dataclass
class ShareHistory:
    delivered: list = field(default_factory=list)   # (member, partition, offset, value, delivery_count, t)
    acked: list = field(default_factory=list)       # (member, partition, (offsets), outcome, detail, t)
    errors: list = field(default_factory=list)
    hung: list = field(default_factory=list)
    produced: int = 0
    healed_at: float | None = None
    faulted_at: float | None = None
    coordinators: list = field(default_factory=list)  # (node killed, its successor, seconds after the kill)
    done: bool = False
    proxy_counts: dict = field(default_factory=dict)

    def fault_bit(self, fault: str) -> str | None:
        """None when the fault acted on the run, else why not: the coordinator moved (kill-coordinator),
        records of partition 0 were delivered while its leader was down (kill-leader), the proxies
        threw bytes away, reset or delayed connections (network faults)."""
        if fault in NODE_FAULTS:
            if self.faulted_at is None or self.healed_at is None:
                return "the fault never ran"
            if fault == "kill-coordinator":
                c = self.coordinators
                return None if c and c[0][1] is not None and c[0][0] != c[0][1] else \
                    f"the coordinator did not move: {c}"
            moved = [e for e in self.delivered if e[1] == 0 and self.faulted_at + 1 < e[5] < self.healed_at]
            return None if moved else "no record of partition 0 was delivered while its leader was down"
        c = self.proxy_counts
        need = {"blackhole": "discarded_bytes", "oneway": "discarded_bytes", "reset": "resets",
                "delay": "delayed_chunks"}[fault]
        return None if c.get(need) else f"the {fault} did not act on any connection: {c}"


ACK_OK, ACK_REFUSED, ACK_UNKNOWN = "ok", "refused", "unknown"


def _ack_outcome(err) -> str:
    """A partition's answer to an acknowledgement: ok (None), refused (INVALID_RECORD_STATE: the
    leader says this member held no lock on those records, so the acceptance was not applied), or
    unknown (any other error, a timeout: it may have been applied)."""
    if err is None:
        return ACK_OK
    code = getattr(err, "code", None)
    if code is None and getattr(err, "args", None):             # confluent-kafka's KafkaException(KafkaError)
        inner = err.args[0]
        code = inner.code() if callable(getattr(inner, "code", None)) else None
    return ACK_REFUSED if code == 121 else ACK_UNKNOWN


class _ShareMember:
    """One share-group member in its own thread: poll, "process" each record, accept every record of
    the batch (implicit acknowledgement) and commit_sync, recording each delivery and each partition's
    answer. Kinds: kohort (kohort.ShareConsumer), confluent (confluent_kafka.ShareConsumer)."""

    def __init__(self, name: str, kind: str, bootstrap: str, group: str, topic: str, h: ShareHistory,
                 lock: threading.Lock, timed: _Timed):
        self.name, self.kind, self.h, self.lock, self.timed = name, kind, h, lock, timed
        self.process_s = 0.002
        self.last_progress = time.monotonic()
        if kind == "kohort":
            from kohort import ShareConsumer
            self.c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                    "request.timeout.ms": 3000, "default.api.timeout.ms": 10000})
        elif kind == "confluent":
            import confluent_kafka
            self.c = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                                    "socket.timeout.ms": 3000, "log_level": 0})
        else:
            raise ValueError(f"no share member of kind {kind!r} (kohort, confluent, java)")
        self.c.subscribe([topic])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"share-{name}", daemon=True)

    def _poll(self) -> list:
        """[(partition, offset, value, delivery_count)] of one poll."""
        if self.kind == "kohort":
            return [(r.partition, r.offset, r.value.decode(), r.delivery_count)
                    for r in self.timed.call(f"{self.name} poll", 0.5, self.c.poll, 0.5)]
        msgs = self.timed.call(f"{self.name} poll", 0.5, self.c.poll, 0.5)
        out = []
        for m in msgs:
            if m.error() is None:
                out.append((m.partition(), m.offset(), m.value().decode(), m.delivery_count()))
            else:
                with self.lock:
                    self.h.errors.append(f"{self.name}: {m.error()}"[:200])
        return out

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                got = self._poll()
            except Exception as e:          # noqa: BLE001 - a failed poll is reported, the member goes on
                with self.lock:
                    self.h.errors.append(f"{self.name} poll: {type(e).__name__}: {e}"[:200])
                time.sleep(0.2)
                continue
            if not got:
                continue
            t = time.monotonic()
            with self.lock:
                self.h.delivered.extend((self.name, p, off, v, n, t) for p, off, v, n in got)
            time.sleep(self.process_s * len(got))
            by_part: dict = {}
            for p, off, _, _ in got:
                by_part.setdefault(p, []).append(off)
            try:
                res = self.timed.call(f"{self.name} commit_sync", 10.0, self.c.commit_sync, 10.0)
                answers = {tp.partition: _ack_outcome(err) for tp, err in (res or {}).items()}
                details = {tp.partition: str(err)[:120] for tp, err in (res or {}).items() if err is not None}
            except Exception as e:          # noqa: BLE001 - no answer: every acceptance is indeterminate
                answers, details = {}, dict.fromkeys(by_part, f"{type(e).__name__}: {e}"[:120])
            t = time.monotonic()
            with self.lock:
                for p, offs in by_part.items():
                    self.h.acked.append((self.name, p, tuple(offs), answers.get(p, ACK_UNKNOWN),
                                         details.get(p, "" if p in answers else "no answer for the partition"), t))
            self.last_progress = t

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        if self.thread.is_alive():
            self.timed.hung.append(f"{self.name} did not stop within 60 s")
            return
        self.timed.call(f"{self.name} close", 30.0, self.c.close)


class _JavaShareMember(_JavaPeerDriver):
    """A share-group member that is Apache Kafka's own KafkaShareConsumer (tests/interop/peers/java/SharePeer.java,
    explicit acknowledgement: every record ACCEPTed, commitSync after each poll) in its own JVM, with the
    interface of _ShareMember. A reader thread turns its JSON events into the history: each `record`
    a delivery, each `committed` the answer for the records of its partitions since the one before
    (null: ok; InvalidRecordStateException: refused; another error, or a partition left out: unknown).
    Times are the JVM's System.nanoTime() (`mono_ns`, the clock of time.monotonic() on Linux), or the
    time the line was read if the two clocks disagree."""

    def __init__(self, name: str, kind: str, bootstrap: str, group: str, topic: str, h: ShareHistory,
                 lock: threading.Lock, timed: _Timed):
        from tests.helpers.peers import JavaSharePeer
        self.name, self.kind, self.h, self.lock, self.timed = name, kind, h, lock, timed
        self.peer = JavaSharePeer(bootstrap, topic, group, client_id=name)
        self.pending: dict = {}             # partition -> offsets delivered since the last commitSync answer
        self.last_progress = time.monotonic()
        self.clock_ok: bool | None = None
        self.thread = threading.Thread(target=self._run, name=f"share-{name}", daemon=True)
        self._stopped = False

    @staticmethod
    def _outcome(error: str | None) -> str:
        if error is None:
            return ACK_OK
        return ACK_REFUSED if "InvalidRecordStateException" in error else ACK_UNKNOWN

    def _on(self, ev: dict) -> None:
        kind = ev.get("event")
        if kind == "record":
            t = self._when(ev)
            p, off = int(ev["partition"]), int(ev["offset"])
            self.pending.setdefault(p, []).append(off)
            with self.lock:
                self.h.delivered.append((self.name, p, off, ev.get("value"), int(ev["delivery_count"]), t))
        elif kind == "committed":
            t = self._when(ev)
            res = {int(k.rsplit("-", 1)[1]): v for k, v in ev.get("results", {}).items()}
            with self.lock:
                for p, offs in self.pending.items():
                    if p in res:
                        how, detail = self._outcome(res[p]), (res[p] or "")[:120]
                    else:
                        how, detail = ACK_UNKNOWN, "no answer for the partition"
                    self.h.acked.append((self.name, p, tuple(offs), how, detail, t))
            self.pending = {}
            self.last_progress = t
        elif kind in ("error", "fatal"):
            with self.lock:
                self.h.errors.append(f"{self.name}: {kind}: {ev.get('error')}"[:200])

    def close(self) -> None:
        if self._stopped:
            return
        super().close()
        if self.pending:                # delivered, never answered: the JVM ended before its commitSync
            with self.lock:
                for p, offs in self.pending.items():
                    self.h.acked.append((self.name, p, tuple(offs), ACK_UNKNOWN, "the member ended before its commit",
                                         time.monotonic()))
            self.pending = {}


def _share_member(name: str, kind: str, *args):
    """A share member of `kind`: kohort or confluent (a _ShareMember in a thread), java (a _JavaShareMember,
    its own JVM)."""
    return (_JavaShareMember if kind == "java" else _ShareMember)(name, kind, *args)


def _watch_successor(pb, group: str, h, fault_for: float) -> None:
    """In a thread: poll FindCoordinator for `group` until it names a node other than the one killed
    (Kafka names the dead node until the controller fences it, broker.session.timeout.ms); appends
    (killed, successor or None, seconds after the kill) to h.coordinators."""
    def successor() -> None:
        killed, node, deadline = pb.killed, None, time.monotonic() + fault_for
        while time.monotonic() < deadline:
            try:
                node = pb.kc.coordinator(group, timeout=fault_for)
            except Exception:           # no coordinator yet
                node = None
            if node not in (None, killed):
                break
            time.sleep(0.3)
        h.coordinators.append((killed, node, round(time.monotonic() - h.faulted_at, 1)))
    threading.Thread(target=successor, name="successor", daemon=True).start()


def share_workload(pb, topic: str, fault: str | None, members=("kohort", "kohort", "confluent"),
                   partitions: int = 3, rate: int = 300, fault_at: float = 2.0, fault_for: float = 3.0,
                   stall_s: float = 30.0) -> tuple[ShareHistory, dict]:
    """Members of one share group (share.auto.offset.reset=earliest) read `topic` while an idempotent
    producer writes `rate` records/s to it through the proxy, from before the fault until a second
    after the heal; the run ends when every record of the log was accepted by a member, or
    `stall_s` after the heal. The broker needs SHARE_GROUP_CONFIG. Returns the history and the log."""
    from kohort import Admin, Producer
    from tests.helpers.peers import create_topic
    assert create_topic(pb.bootstrap, topic, partitions, replication=getattr(pb, "nodes", 1)) == partitions
    group = f"s-{topic}"
    with Admin({"bootstrap.servers": pb.bootstrap}) as a:
        a.alter_configs(("group", group), {"share.auto.offset.reset": "earliest"})
    h = ShareHistory()
    lock = threading.Lock()
    timed = _Timed()
    failed: list = []
    producing = threading.Event()
    producing.set()

    def produce() -> None:
        with Producer({"bootstrap.servers": pb.bootstrap, "enable.idempotence": True, "acks": "all",
                       "linger.ms": 5, "request.timeout.ms": 3000, "delivery.timeout.ms": 60000,
                       "max.block.ms": 10000}) as p:
            t0, i = time.monotonic(), 0
            while producing.is_set():
                try:
                    p.produce(topic, value=str(i).encode(), key=str(i % 16).encode(),
                              on_delivery=lambda e, m: e is not None and failed.append(str(e)))
                except Exception as e:      # noqa: BLE001 - a produce refused while the fault is on
                    failed.append(f"{type(e).__name__}: {e}")
                i += 1
                h.produced = i
                pause = t0 + i / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            left = timed.call("producer flush", 60.0, p.flush, 60.0)
            if left:
                failed.append(f"{left} records undelivered after the flush")

    producer = threading.Thread(target=produce, name="share-producer", daemon=True)
    producer.start()
    ms = [_share_member(f"{kind}-{i}", kind, pb.bootstrap, group, topic, h, lock, timed)
          for i, kind in enumerate(members)]
    for m in ms:
        m.thread.start()
    stop = threading.Event()

    def on_fault() -> None:
        h.faulted_at = time.monotonic()
        if fault == "kill-coordinator":
            _watch_successor(pb, group, h, fault_for)

    sched = _schedule(pb, fault, fault_at, fault_for, stop, target=topic if fault == "kill-leader" else group,
                      on_fault=on_fault)
    log: dict = {}
    try:
        sched["thread"].join(fault_at + fault_for + (180 if fault in NODE_FAULTS else 10))
        h.healed_at = sched.get("healed_at", time.monotonic())
        time.sleep(1.0)
        producing.clear()
        producer.join(90)
        log = read_log(pb.bootstrap, topic)
        want = {(p, off) for p, recs in log.items() for off, _ in recs}
        deadline = h.healed_at + stall_s
        while time.monotonic() < deadline:
            with lock:
                accepted = {(p, off) for _, p, offs, how, _, _ in h.acked if how != ACK_REFUSED for off in offs}
            if want <= accepted:
                h.done = True
                break
            time.sleep(0.2)
    finally:
        stop.set()
        producing.clear()
        for m in ms:
            m.close()
    h.errors += [f"producer: {x}"[:200] for x in failed[:5]]
    h.hung = timed.hung
    h.proxy_counts = {k: getattr(pb.proxy, k) for k in ("accepted", "discarded_bytes", "delayed_chunks", "resets")}
    return h, log


def check_share(h: ShareHistory, log: dict, fault: str, members: str, stall_s: float = 30.0) -> Report:
    """A share group's anomalies: lost = a record of the log no member accepted (an acceptance
    answered ok, or with no clear answer; one refused with INVALID_RECORD_STATE was not applied);
    duplicates = a record delivered again after a member's acceptance of it was answered ok; stalled;
    hung calls. Records of a share-partition may come in any order and partitions are shared, so
    out_of_order and two_owners do not apply (0)."""
    r = Report(f"share group ({members})", fault, records=sum(len(v) for v in log.values()))
    accepted_ok: dict = {}                  # (partition, offset) -> (member, time of the ok)
    accepted: set = set()
    for member, p, offs, how, _, t in h.acked:
        for off in offs:
            if how != ACK_REFUSED:
                accepted.add((p, off))
            if how == ACK_OK and ((p, off) not in accepted_ok or t < accepted_ok[(p, off)][1]):
                accepted_ok[(p, off)] = (member, t)
    values: dict = {}
    for member, p, off, v, n, t in sorted(h.delivered, key=lambda e: e[5]):
        values.setdefault((p, off), v)
        first = accepted_ok.get((p, off))
        if first is not None and first[1] < t:
            r.add("duplicates", f"{member}: partition {p} offset {off} delivered again (count {n}) "
                                f"after {first[0]}'s acceptance was answered ok")
    for p, recs in log.items():
        for off, v in recs:
            if (p, off) not in accepted:
                r.add("lost", f"partition {p} offset {off} ({v}) never accepted by a member")
            elif values.get((p, off), v) != v:
                r.add("lost", f"partition {p} offset {off}: delivered {values[(p, off)]!r}, log has {v!r}")
    if not h.done:
        r.add("stalled", f"not every record accepted within {stall_s:.0f}s after the heal")
    for x in h.hung:
        r.add("hung_calls", x)
    return r


__all__ = ["FAULTS", "GroupHistory", "NODE_FAULTS", "ProducerHistory", "ProxiedBroker", "ProxiedKafka", "ProxyGroup",
           "Report", "SHARE_GROUP_CONFIG", "ShareHistory", "check_group", "check_share", "share_workload",
           "check_producer", "group_workload", "ownership", "owners_at", "producer_workload", "read_log", "record",
           "results_path", "two_owners"]
