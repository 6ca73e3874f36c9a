"""Group latency: subscribe -> first record, clean-leave handover and SIGKILL handover, kohort broker
vs Apache Kafka 4.3.1, with kohort, confluent-kafka and the Java KafkaConsumer.

* `subscribe_first(client, addr, ...)`: a fresh group on a seeded 4-partition topic; timed from
  subscribe() to the first record poll() returns (confluent-kafka: bench_groups.first_record; Java:
  bench/java/GroupBench.java `first`, the clock inside the JVM) (coordinator lookup, join, sync, offset
  fetch, first fetch; broker defaults, so group.initial.rebalance.delay.ms counts as it would for a
  user).
* `handover(client, addr, mode, ...)`: members A and B (each its own process, running `member()` or
  GroupBench `member`) share a 4-partition topic that a producer thread feeds every 20 ms per
  partition. Once the group is stable with both members reading, A leaves: mode "leave" = A calls
  close() (LeaveGroup), mode "kill" = SIGKILL (B's takeover then waits out session.timeout.ms). The
  handover time runs from the moment A goes to the moment B has a record from every partition A had.
  B learns of a leave only from its next heartbeat, so A leaves at the same point of B's heartbeat
  cycle for every client: half an interval before one of B's heartbeats (B's heartbeat timer
  restarts when a rebalance completes, ~ its last assignment event), i.e. the average wait of a
  leave at a random moment. (Leaving as soon as the group is stable favoured slow clients: a
  client that reads sooner after the rebalance left at an earlier point of B's cycle and waited
  longer.)
  Every client runs with session.timeout.ms=6000 and heartbeat.interval.ms=1000,
  auto.offset.reset=earliest, its default assignors. Times from time.monotonic() / Java's
  System.nanoTime(), both CLOCK_MONOTONIC, the one system-wide clock on Linux.

Brokers at the defaults a user gets: kohort broker as `kohort broker` starts (adaptive initial
rebalance delay: a new group's first join completes once no member joined for
group.initial.rebalance.quiet.ms=200, capped by group.initial.rebalance.delay.ms=3000); Apache Kafka
4.3.1 (the run's, cases.common.Brokers.kafka(): one KRaft node from tests/helpers/kafka_cluster.py) with
group.initial.rebalance.delay.ms=0, the value of Kafka's shipped config/server.properties (the
code default is 3000). Tansu is not a column here: its joins take ~23 s each.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from cases.common import KAFKA, KOHORT_BROKER, create_topic

SESSION_TIMEOUT_MS = 6000
MAX_ROUNDS = 3
HEARTBEAT_MS = 1000
PARTITIONS = 4
GROUP_CLIENTS = ["kohort", "confluent-kafka", "java"]


def java_classes() -> str:
    """bench/java/GroupBench.java compiled (bench_consumer.java_classes); -> the java class path."""
    from bench_consumer import java_classes as compiled
    lib, out = compiled("GroupBench")
    return f"{lib}/*:{out}"


def _java(*args: str) -> list[str]:
    return ["java", "-Xmx256m", "-cp", java_classes(), "GroupBench", *args]


# -- the two clients behind one small interface -------------------------------------------------------
class _Kohort:
    def __init__(self, addr, group, extra):
        from kohort import Consumer
        self.c = Consumer({"bootstrap.servers": addr, "group.id": group, "auto.offset.reset": "earliest",
                           **extra})

    def subscribe(self, topic):
        self.c.subscribe([topic])

    def poll(self, timeout):
        return [r.partition for r in self.c.poll(timeout)]

    def assignment(self):
        return sorted(tp.partition for tp in self.c.assignment())

    def close(self):
        self.c.close()


class _Confluent:
    def __init__(self, addr, group, extra):
        from confluent_kafka import Consumer
        self.c = Consumer({"bootstrap.servers": addr, "group.id": group, "auto.offset.reset": "earliest",
                           **extra})

    def subscribe(self, topic):
        self.c.subscribe([topic])

    def poll(self, timeout):
        out = []
        for m in self.c.consume(1000, timeout):
            if m.error() is None:
                out.append(m.partition())
        return out

    def assignment(self):
        return sorted(tp.partition for tp in self.c.assignment())

    def close(self):
        self.c.close()


_CLIENTS = {"kohort": _Kohort, "confluent-kafka": _Confluent}


def _group_conf():
    return {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS}


# -- subscribe -> first record ----------------------------------------------------------------------
def subscribe_first(client: str, addr: str, topic: str) -> dict:
    if client == "confluent-kafka":           # bench_groups.py measures exactly this for confluent
        import bench_groups
        dt = bench_groups.first_record(addr, topic, 60)
        if dt is None:
            raise RuntimeError("no record within 60 s of subscribe()")
        return {"value": dt * 1000}
    if client == "java":
        p = subprocess.run(_java("first", addr, topic, f"bench-first-{uuid.uuid4().hex[:8]}"),
                           capture_output=True, text=True, timeout=90)
        for line in p.stdout.splitlines():
            if line.startswith("FIRST "):
                return {"value": float(line.split()[1])}
        raise RuntimeError(f"GroupBench first: {(p.stderr or p.stdout).strip()[-300:]}")
    c = _CLIENTS[client](addr, f"bench-first-{uuid.uuid4().hex[:8]}", {})
    t = time.monotonic()
    c.subscribe(topic)
    deadline = t + 60
    while time.monotonic() < deadline:
        if c.poll(0.05):
            dt = time.monotonic() - t
            c.close()
            return {"value": dt * 1000}
    raise RuntimeError("no record within 60 s of subscribe()")


# -- one group member in its own process -------------------------------------------------------------
def member(client: str, addr: str, group: str, topic: str) -> None:
    """Prints JSON events: ready, assignment (on every change), first (first record of a partition
    since it was assigned), leaving/closed; reads 'leave' on stdin."""
    def emit(**ev):
        ev["t"] = time.monotonic()
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()
    leave = threading.Event()

    def read_stdin():
        for line in sys.stdin:
            if line.strip() == "leave":
                leave.set()
                return
    threading.Thread(target=read_stdin, daemon=True).start()
    c = _CLIENTS[client](addr, group, _group_conf())
    c.subscribe(topic)
    emit(ev="ready")
    current: list = []
    seen: set = set()
    while not leave.is_set():
        parts = c.poll(0.05)
        a = c.assignment()
        if a != current:
            current = a
            seen &= set(a)
            emit(ev="assignment", parts=a)
        for p in set(parts) - seen:
            if p in current:
                seen.add(p)
                emit(ev="first", p=p)
    emit(ev="leaving")
    c.close()
    emit(ev="closed")


class _Member:
    def __init__(self, client, addr, group, topic):
        env = dict(os.environ)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(here), "src"),
                                             os.path.dirname(here), here, env.get("PYTHONPATH", "")])
        code = "import sys, json; from cases.groups import member; member(*json.loads(sys.argv[1]))"
        if client == "java":
            cmd = _java("member", addr, topic, group, str(SESSION_TIMEOUT_MS), str(HEARTBEAT_MS))
        else:
            cmd = [sys.executable, "-c", code, json.dumps([client, addr, group, topic])]
        self.err = tempfile.TemporaryFile("w+")     # a pipe nobody reads could fill and block the member
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     text=True, env=env, bufsize=1)
        self.events: list[dict] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()
        with self.cond:
            self.events.append({"ev": "exit", "t": time.monotonic()})
            self.cond.notify_all()

    def wait_for(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = pred(self.events)
                if got:
                    return got
                if any(e["ev"] == "exit" for e in self.events):
                    self.err.seek(0)
                    err = self.err.read()[-400:]
                    raise RuntimeError(f"member exited while waiting for {what}: {err.strip()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"timed out waiting for {what}")
                self.cond.wait(min(left, 0.05))    # the predicate may also read the other member

    def assignment(self):
        with self.cond:
            for e in reversed(self.events):
                if e["ev"] == "assignment":
                    return e["parts"]
        return []

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()


def _stable(a: _Member, b: _Member):
    """Both members hold disjoint non-empty assignments covering every partition and have a record
    from each of their partitions since getting them."""
    def ok(_):
        pa, pb = a.assignment(), b.assignment()
        if not pa or not pb or sorted(pa + pb) != list(range(PARTITIONS)):
            return False
        return all(_has_first(m, m.assignment()) for m in (a, b))
    return ok


def _has_first(m: _Member, parts, after=None):
    """The first record of each of `parts` after the latest assignment that includes it (and after
    time `after`)."""
    got = set()
    for e in m.events:
        if e["ev"] == "assignment":
            got &= set(e["parts"])
        elif e["ev"] == "first" and (after is None or e["t"] >= after):
            got.add(e["p"])
    return set(parts) <= got


def handover(client: str, addr: str, mode: str) -> dict:
    from confluent_kafka import Producer
    topic = f"hand-{uuid.uuid4().hex[:8]}"
    group = f"bench-hand-{uuid.uuid4().hex[:8]}"
    create_topic(addr, topic, PARTITIONS)
    stop = threading.Event()
    prod_err = []

    def produce():
        try:
            p = Producer({"bootstrap.servers": addr, "linger.ms": 0})
            while not stop.is_set():
                for q in range(PARTITIONS):
                    p.produce(topic, b"tick", partition=q)
                p.poll(0)
                stop.wait(0.02)
            p.flush(5)
        except Exception as e:
            prod_err.append(e)
    pt = threading.Thread(target=produce, daemon=True)
    pt.start()
    a = b = None
    try:
        t_start = time.monotonic()
        a = _Member(client, addr, group, topic)
        a.wait_for(lambda ev: _has_first(a, range(PARTITIONS)) and len(a.assignment()) == PARTITIONS,
                   60, "A to own every partition and read")
        t_a = time.monotonic()
        b = _Member(client, addr, group, topic)
        b.wait_for(_stable(a, b), 60, "A and B to share the partitions and read")
        t_b = time.monotonic()
        a_parts = a.assignment()
        if mode == "leave":
            # the same point of B's heartbeat cycle for every client: B's timer restarted when its
            # rebalance completed (~ its assignment event); A leaves half an interval before one of
            # B's next heartbeats, so B waits ~HEARTBEAT_MS / 2 -- the average of a leave at a
            # random moment -- however long the client took to become stable and reading
            with b.cond:
                t_rebalanced = max(e["t"] for e in b.events if e["ev"] == "assignment")
            k = 1
            while t_rebalanced + (k - 0.5) * HEARTBEAT_MS / 1000 < time.monotonic() + 0.05:
                k += 1
            time.sleep(t_rebalanced + (k - 0.5) * HEARTBEAT_MS / 1000 - time.monotonic())
            a.proc.stdin.write("leave\n")
            a.proc.stdin.flush()
            t0 = a.wait_for(lambda ev: next((e["t"] for e in ev if e["ev"] == "leaving"), None), 30,
                            "A to start leaving")
        elif mode == "kill":
            t0 = time.monotonic()
            os.kill(a.proc.pid, signal.SIGKILL)
        else:
            raise ValueError(f"mode must be leave or kill, got {mode!r}")
        limit = 60 + SESSION_TIMEOUT_MS / 1000
        b.wait_for(lambda ev: _has_first(b, a_parts, after=t0) and
                   set(a_parts) <= set(b.assignment()), limit, "B to read A's partitions")
        t_assign = next(e["t"] for e in b.events if e["ev"] == "assignment" and e["t"] >= t0
                        and set(a_parts) <= set(e["parts"]))
        t_done = max(next(e["t"] for e in b.events if e["ev"] == "first" and e["p"] == p and e["t"] >= t_assign)
                     for p in a_parts)
        if prod_err:
            raise RuntimeError(f"producer failed: {prod_err[0]}")
        return {"value": (t_done - t0) * 1000, "assigned_ms": (t_assign - t0) * 1000,
                "moved_partitions": a_parts, "setup_a_s": t_a - t_start, "setup_b_s": t_b - t_a}
    finally:
        stop.set()
        for m in (a, b):
            if m is not None:
                m.stop()
        pt.join(5)


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    from cases.common import seed
    sec = Section("groups", "group latency", "ms", higher_is_better=False, ours=KOHORT_BROKER,
                  peers=[KAFKA],
                  notes=[f"subscribe→first record: fresh group, seeded {PARTITIONS}-partition topic, consumer "
                         f"constructed before the clock starts. Handovers: 2 members ({PARTITIONS} partitions, "
                         f"records every 20 ms per partition), time from A's close() (leave) or SIGKILL (kill) "
                         f"until B has a record from each of A's partitions; session.timeout.ms="
                         f"{SESSION_TIMEOUT_MS}, heartbeat.interval.ms={HEARTBEAT_MS}, each client's default "
                         f"assignors (Java: bench/java/GroupBench.java, classic protocol). Brokers at their "
                         f"defaults: kohort broker's adaptive initial rebalance delay (group.initial.rebalance."
                         f"quiet.ms=200, capped at group.initial.rebalance.delay.ms=3000, Kafka's code default); "
                         f"Apache Kafka with group.initial.rebalance.delay.ms=0 as its shipped "
                         f"config/server.properties (and the test bed) set it. Tansu left out (~23 s per "
                         f"join). B hears of a leave (REBALANCE_IN_PROGRESS) only at its next heartbeat: A leaves "
                         f"once both members read, at the middle of B's heartbeat cycle (half an interval before "
                         f"one of B's heartbeats, counted from B's last assignment), so every clean-leave figure "
                         f"holds ~{HEARTBEAT_MS // 2} ms of protocol wait -- what a leave at a random moment waits "
                         f"on average -- plus the rejoin and first fetches; SIGKILL: "
                         f"session expiry, then B's next heartbeat (whether it falls just before or after the "
                         f"expiry decides between ~{SESSION_TIMEOUT_MS} and ~{SESSION_TIMEOUT_MS + HEARTBEAT_MS} "
                         f"ms). Ratio: Apache Kafka ÷ kohort broker (> 1: kohort broker faster)."])
    brokers = {KOHORT_BROKER: env.brokers.addr.get(KOHORT_BROKER), KAFKA: env.brokers.kafka()}
    errors = {name: env.brokers.errors.get(name, "broker not started") for name in brokers}
    java_err = None
    try:
        java_classes()
    except Exception as e:       # noqa: BLE001 - reported in its cells
        java_err = f"compiling GroupBench.java: {type(e).__name__}: {e}"
    first_topic = f"first-{PARTITIONS}"
    for broker, addr in brokers.items():
        if addr is None:
            continue
        try:
            seed(addr, first_topic, 400, 100, "none", PARTITIONS)
            # untimed warm-up: the first group operation creates __consumer_offsets (both brokers)
            subscribe_first("confluent-kafka", addr, first_topic)
        except Exception as e:   # noqa: BLE001 - reported in its cells
            errors[broker] = f"seeding: {type(e).__name__}: {e}"
            brokers[broker] = None
    modes = ["leave", "kill"]
    jobs = []
    for client in GROUP_CLIENTS:
        for broker, addr in brokers.items():
            err = errors.get(broker) if addr is None else (java_err if client == "java" else None)
            before = None
            if err is not None:
                def before(job, round_no, err=err):
                    raise RuntimeError(err)
            jobs.append(Job("groups", f"subscribe→first record · {client}", broker, "cases.groups:subscribe_first",
                            {"client": client, "addr": addr, "topic": first_topic}, timeout=90,
                            before=before))
            for m in modes:
                label = "clean-leave handover" if m == "leave" else f"SIGKILL handover (session {SESSION_TIMEOUT_MS} ms)"
                jobs.append(Job("groups", f"{label} · {client}", broker, "cases.groups:handover",
                                {"client": client, "addr": addr, "mode": m}, timeout=180, before=before))
    return [sec], jobs

