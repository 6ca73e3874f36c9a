"""Share groups (KIP-932): throughput with 1, 3 and 10 members and redelivery latency after a RELEASE,
kohort broker vs Apache Kafka 4.3.1, with the same clients: kohort's ShareConsumer, confluent-kafka's
ShareConsumer and Java's KafkaShareConsumer (bench/java/ShareBench.java).

* `throughput(client, addr, topic, members, records)`: a fresh share group (group config
  share.auto.offset.reset=earliest) reads a seeded 3-partition topic (`records` x 100 B, round-robin)
  with `members` members in implicit acknowledgement mode until every record is delivered. Python
  members run one per process (`member_main`, no shared GIL); the Java members are threads of one JVM
  (ShareBench `members`). Every member is constructed and subscribed before the go; the rate is records
  over the time from the first record any member got to the last one (the join -- first heartbeat,
  share-state initialization, assignment -- is left out and kept as `join_ms`). The members then
  close() (acknowledging their last batch), and DescribeShareGroupOffsets must show lag 0 (KIP-1226)
  on every partition: every record accepted, or the cell is an error.
* `redelivery(client, addr, rounds)`: one member in explicit mode on a 1-partition topic. Each round
  produces one record, polls it (delivery 1), then times from acknowledge(RELEASE) + commit_sync()
  until poll() returns the same offset again (delivery 2); it is then accepted. Round 0 (join, first
  fetch) is not timed. Subrows p50 and p99 of the rounds.

Both brokers run with the same share settings (`SHARE_CONFIG`: heartbeat 0.5 s, session 10 s,
group.share.assignment.interval.ms 0, `__share_group_state` replication factor 1; locks and the
delivery count limit at their defaults), started by this case. Times come from time.monotonic() and
Java's System.nanoTime(), both CLOCK_MONOTONIC. Standalone:

    PYTHONPATH=src:. .venv/bin/python bench/run.py --quick --only share
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from cases.common import KAFKA, KAFKA_JVM, KOHORT_BROKER, create_topic, values

PARTITIONS = 3
RECORD_SIZE = 100
MAX_ROUNDS = 3
SHARE_CLIENTS = ["kohort", "confluent-kafka", "java"]
SHARE_CONFIG = {
    "group.share.min.heartbeat.interval.ms": 500, "group.share.heartbeat.interval.ms": 500,
    "group.share.min.session.timeout.ms": 3000, "group.share.session.timeout.ms": 10000,
    "group.share.assignment.interval.ms": 0,
    "share.coordinator.state.topic.replication.factor": 1, "share.coordinator.state.topic.min.isr": 1,
}


# -- the Python share consumers behind one small interface -------------------------------------------
class _Kohort:
    def __init__(self, addr: str, group: str, explicit: bool):
        from kohort import ShareConsumer
        from kohort.client.share.consumer import AcknowledgeType
        self.types = AcknowledgeType
        self.c = ShareConsumer({"bootstrap.servers": addr, "group.id": group,
                                "share.acknowledgement.mode": "explicit" if explicit else "implicit"})

    def subscribe(self, topic: str) -> None:
        self.c.subscribe([topic])

    def poll(self, timeout: float) -> list:
        """[(partition, offset, value length)]"""
        return [(r.partition, r.offset, len(r.value or b"")) for r in self._last(self.c.poll(timeout))]

    def _last(self, recs):
        self.records = recs
        return recs

    def release_or_accept(self, offset: int, release: bool) -> None:
        r = next(r for r in self.records if r.offset == offset)
        self.c.acknowledge(r, self.types.RELEASE if release else self.types.ACCEPT)
        errs = {tp: e for tp, e in self.c.commit_sync(30).items() if e is not None}
        if errs:
            raise RuntimeError(f"commit_sync: {errs}")

    def close(self) -> None:
        self.c.close()


class _Confluent:
    def __init__(self, addr: str, group: str, explicit: bool):
        import confluent_kafka as ck
        self.ck = ck
        self.c = ck.ShareConsumer({"bootstrap.servers": addr, "group.id": group,
                                   "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
        self.records: list = []

    def subscribe(self, topic: str) -> None:
        self.c.subscribe([topic])

    def poll(self, timeout: float) -> list:
        out = []
        self.records = []
        for m in self.c.poll(timeout):
            if m.error() is None:
                self.records.append(m)
                v = m.value()
                out.append((m.partition(), m.offset(), len(v) if v else 0))
        return out

    def release_or_accept(self, offset: int, release: bool) -> None:
        m = next(m for m in self.records if m.offset() == offset)
        t = self.ck.AcknowledgeType
        self.c.acknowledge(m, t.RELEASE if release else t.ACCEPT)
        errs = {tp: e for tp, e in self.c.commit_sync(30).items() if e is not None}
        if errs:
            raise RuntimeError(f"commit_sync: {errs}")

    def close(self) -> None:
        self.c.close()


_CLIENTS = {"kohort": _Kohort, "confluent-kafka": _Confluent}


def java_classes() -> str:
    """bench/java/ShareBench.java compiled (bench_consumer.java_classes); -> the java class path."""
    from bench_consumer import java_classes as compiled
    lib, out = compiled("ShareBench")
    return f"{lib}/*:{out}"


def _java(*args: str) -> list[str]:
    return ["java", "-Xmx512m", "-cp", java_classes(), "ShareBench", *args]


# -- throughput ------------------------------------------------------------------------------------
def member_main(client: str, addr: str, group: str, topic: str) -> None:
    """One implicit-mode member in its own process. Prints READY once subscribed; reads "go" / "stop"
    on stdin; prints "N <records> <t_first> <t_last>" at most every 50 ms while it reads and
    "CLOSED <records> <t_first> <t_last>" after close()."""
    c = _CLIENTS[client](addr, group, explicit=False)
    c.subscribe(topic)
    go, stop = threading.Event(), threading.Event()

    def read_stdin():
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "go":
                go.set()
            elif cmd == "stop":
                go.set()
                stop.set()
                return
        go.set()
        stop.set()
    threading.Thread(target=read_stdin, daemon=True).start()
    print("READY", flush=True)
    go.wait()
    n = 0
    t_first = t_last = 0.0
    reported, last_report = 0, 0.0
    while not stop.is_set():
        got = c.poll(0.1)
        if got:
            t_last = time.monotonic()
            if not n:
                t_first = t_last
            n += len(got)
        now = time.monotonic()
        if n != reported and now - last_report >= 0.05:
            print(f"N {n} {t_first} {t_last}", flush=True)
            reported, last_report = n, now
    c.close()
    print(f"CLOSED {n} {t_first} {t_last}", flush=True)


class _Proc:
    """A member process (or the Java process of all members): its latest counts from its lines."""

    def __init__(self, cmd: list[str], env: dict):
        self.err = tempfile.TemporaryFile("w+")     # a pipe nobody reads could fill and block it
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     text=True, env=env, bufsize=1)
        self.cond = threading.Condition()
        self.ready = self.closed = self.exited = False
        self.n, self.t_first, self.t_last = 0, 0.0, 0.0
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            f = line.split()
            with self.cond:
                if f and f[0] == "READY":
                    self.ready = True
                elif f and f[0] in ("N", "CLOSED") and len(f) == 4:
                    self.n, self.t_first, self.t_last = int(f[1]), float(f[2]), float(f[3])
                    self.closed = self.closed or f[0] == "CLOSED"
                self.cond.notify_all()
        with self.cond:
            self.exited = True
            self.cond.notify_all()

    def send(self, cmd: str) -> None:
        try:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def error_text(self) -> str:
        self.err.seek(0)
        return self.err.read()[-400:].strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()


def _wait_all(procs: list[_Proc], pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if all(pred(p) for p in procs):
            return
        for p in procs:
            with p.cond:
                if p.exited and not pred(p):
                    raise RuntimeError(f"a member exited while waiting for {what}: {p.error_text()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _member_env() -> dict:
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(here), "src"), os.path.dirname(here), here,
                                         env.get("PYTHONPATH", "")])
    return env


def _share_group(addr: str) -> str:
    """A fresh group id whose share.auto.offset.reset is earliest (a group config, resource type 32)."""
    from kohort.client.admin import Admin
    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": addr}) as a:
        a.alter_configs(("group", group), {"share.auto.offset.reset": "earliest"})
    return group


def _check_all_accepted(addr: str, group: str, topic: str, partitions: int, timeout: float = 20.0) -> dict:
    """Wait until DescribeShareGroupOffsets says nothing is left to deliver on every partition: lag 0
    (KIP-1226; Apache Kafka reports the start offset of its last persisted state, which may stay
    below the log end with the records past it acknowledged, lag 0), or, from a broker without lag,
    a start offset at the log end; -> {partition: log end offset}."""
    from kohort.client.admin import LATEST, Admin
    from kohort.structs import TopicPartition
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Admin({"bootstrap.servers": addr}) as a:
        deadline = time.monotonic() + timeout
        ends = _retrying(lambda: a.list_offsets({tp: LATEST for tp in tps}), deadline)
        while True:
            got = _retrying(lambda: a.list_share_group_offsets(group), deadline)
            done = {tp.partition: got.get(tp) is not None and (
                got[tp].lag == 0 if got[tp].lag is not None else got[tp].start_offset >= ends[tp]) for tp in tps}
            if all(done.values()):
                return {tp.partition: ends[tp] for tp in tps}
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every record accepted: {got}, log ends "
                                   f"{ {tp.partition: ends[tp] for tp in tps} }")
            time.sleep(0.2)


def _retrying(call, deadline: float):
    """call() again while its error is retriable (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
    COORDINATOR_NOT_AVAILABLE...: a broker starved of CPU by the members can be fenced by its controller
    for a while, and its partitions have no leader until it is back) until `deadline`."""
    from kohort.errors import KafkaError
    while True:
        try:
            return call()
        except KafkaError as e:
            if not e.retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def throughput(client: str, addr: str, topic: str, members: int, records: int) -> dict:
    group = _share_group(addr)
    env = _member_env()
    procs: list[_Proc] = []
    try:
        if client == "java":
            procs.append(_Proc(_java("members", addr, topic, group, str(members)), env))
        else:
            code = "import sys, json; from cases.share import member_main; member_main(*json.loads(sys.argv[1]))"
            for _ in range(members):
                procs.append(_Proc([sys.executable, "-c", code, json.dumps([client, addr, group, topic])], env))
        _wait_all(procs, lambda p: p.ready, 120, "the members to subscribe")
        t_go = time.monotonic()
        for p in procs:
            p.send("go")
        deadline = t_go + 300
        while sum(p.n for p in procs) < records:
            for p in procs:
                if p.exited:
                    raise RuntimeError(f"a member exited after {p.n} records: {p.error_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sum(p.n for p in procs)} of {records} records within 300 s")
            time.sleep(0.02)
        for p in procs:
            p.send("stop")
        _wait_all(procs, lambda p: p.closed, 60, "the members to close")
        got = sum(p.n for p in procs)
        t_first = min(p.t_first for p in procs if p.n)
        t_last = max(p.t_last for p in procs if p.n)
        ends = _check_all_accepted(addr, group, topic, PARTITIONS)
        if got < sum(ends.values()):
            raise RuntimeError(f"{got} records delivered, the partitions hold {sum(ends.values())}")
        return {"value": records / max(t_last - t_first, 1e-6), "join_ms": (t_first - t_go) * 1000,
                "delivered": got, "redelivered": got - sum(ends.values()),
                "per_member": sorted(p.n for p in procs) if client != "java" else None}
    finally:
        for p in procs:
            p.stop()


# -- redelivery latency ----------------------------------------------------------------------------
def _percentiles(samples: list[float]) -> dict:
    s = sorted(samples)
    if not s:
        raise RuntimeError("no samples")

    def q(x):
        return s[min(len(s) - 1, max(0, -(-len(s) * x // 100) - 1))]
    return {"p50": q(50), "p99": q(99)}


def _poll_for(c, offset: int | None, timeout: float = 30.0) -> int:
    """Poll until a record (of `offset` when given) comes; -> its offset."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, off, _ in c.poll(0.5):
            if offset is None or off == offset:
                return off
            raise RuntimeError(f"offset {off} delivered while waiting for {offset}")
    raise RuntimeError(f"no record{'' if offset is None else f' at offset {offset}'} within {timeout:.0f} s")


def redelivery(client: str, addr: str, rounds: int) -> dict:
    topic = f"share-redeliver-{uuid.uuid4().hex[:8]}"
    create_topic(addr, topic, 1)
    group = _share_group(addr)
    if client == "java":
        p = subprocess.run(_java("redeliver", addr, topic, group, str(rounds)), capture_output=True, text=True,
                           timeout=60 + 5 * rounds)
        for line in p.stdout.splitlines():
            if line.startswith("SAMPLES"):
                samples = [float(x) for x in line.split()[1:]]
                return {"value": _percentiles(samples)["p50"], "rows": _percentiles(samples), "rounds": len(samples)}
        raise RuntimeError(f"ShareBench redeliver: {(p.stderr or p.stdout).strip()[-300:]}")
    from confluent_kafka import Producer
    prod = Producer({"bootstrap.servers": addr, "linger.ms": 0})
    c = _CLIENTS[client](addr, group, explicit=True)
    c.subscribe(topic)
    samples = []
    try:
        for i in range(rounds + 1):
            prod.produce(topic, values(RECORD_SIZE, 1)[0], partition=0)
            if prod.flush(30):
                raise RuntimeError("producing a record took over 30 s")
            off = _poll_for(c, None)
            t0 = time.monotonic()
            c.release_or_accept(off, release=True)
            _poll_for(c, off)
            t1 = time.monotonic()
            c.release_or_accept(off, release=False)
            if i:
                samples.append((t1 - t0) * 1000)
    finally:
        c.close()
    pct = _percentiles(samples)
    return {"value": pct["p50"], "rows": pct, "rounds": len(samples)}


# -- the case --------------------------------------------------------------------------------------
_kafka = None
_kohort = None


def build(env, mode: str, profile: set[str]):
    global _kafka, _kohort
    from harness import Job, Section
    from cases.common import seed
    quick = mode == "quick"
    records = 30_000 if quick else 300_000
    sizes = [1, 3, 10]
    rounds = 30 if quick else 200
    tput = Section("share", "share-group throughput (KIP-932)", "records/s", ours="kohort",
                   notes=[f"A fresh share group reads a seeded {PARTITIONS}-partition topic ({records:,} x "
                          f"{RECORD_SIZE} B) with N members in implicit acknowledgement mode; records/s from the "
                          f"first record any member got to the last one (the join is left out), then every "
                          f"record must be accepted (DescribeShareGroupOffsets: lag 0 on every partition). "
                          f"Python members one per process, Java members threads of one JVM "
                          f"(bench/java/ShareBench.java). Both brokers with share heartbeat 0.5 s, "
                          f"group.share.assignment.interval.ms=0, default locks. Ratio: kohort's ShareConsumer "
                          f"÷ the best other client on the same broker."])
    lat = Section("share-redelivery", "share redelivery after RELEASE", "ms", higher_is_better=False,
                  ours="kohort",
                  notes=[f"One explicit-mode member, 1 partition, {rounds} rounds: time from "
                         f"acknowledge(RELEASE) + commit_sync() until poll() returns the record again "
                         f"(delivery count 2); p50 and p99. Ratio: the best other client ÷ kohort's "
                         f"ShareConsumer on the same broker (> 1: kohort faster)."])
    brokers: dict[str, str | None] = {}
    errors: dict[str, str] = {}
    try:
        from tests.helpers.brokers import KohortBroker
        _kohort = KohortBroker(config=SHARE_CONFIG)
        _kohort.__enter__()
        brokers[KOHORT_BROKER] = _kohort.bootstrap
    except Exception as e:       # noqa: BLE001 - reported in its cells
        errors[KOHORT_BROKER] = f"{type(e).__name__}: {e}"
        brokers[KOHORT_BROKER] = None
    try:
        from tests.helpers.kafka_cluster import KafkaCluster
        _kafka = KafkaCluster(nodes=1, jvm=KAFKA_JVM, extra_config=SHARE_CONFIG)
        _kafka.start()
        brokers[KAFKA] = _kafka.bootstrap
    except Exception as e:       # noqa: BLE001 - reported in its cells
        errors[KAFKA] = f"{type(e).__name__}: {e}"
        brokers[KAFKA] = None
    java_err = None
    try:
        java_classes()
    except Exception as e:       # noqa: BLE001 - reported in its cells
        java_err = f"compiling ShareBench.java: {type(e).__name__}: {e}"
    topic = f"share-bench-{uuid.uuid4().hex[:6]}"
    for broker, addr in brokers.items():
        if addr is None:
            continue
        try:
            seed(addr, topic, records, RECORD_SIZE, "none", PARTITIONS)
            # untimed warm-up: the first share group of a broker creates __share_group_state (and a
            # long-running Kafka is JIT-compiled on the share paths)
            throughput("confluent-kafka", addr, topic, 1, records)
        except Exception as e:   # noqa: BLE001 - reported in its cells
            errors[broker] = f"seeding/warm-up: {type(e).__name__}: {e}"
            brokers[broker] = None
    jobs = []
    for broker, addr in brokers.items():
        for client in SHARE_CLIENTS:
            err = errors.get(broker) if addr is None else (java_err if client == "java" else None)
            before = None
            if err is not None:
                def before(job, round_no, err=err):
                    raise RuntimeError(err)
            for n in sizes:
                jobs.append(Job("share", f"{broker} · {n} member{'s' if n > 1 else ''}", client,
                                "cases.share:throughput",
                                {"client": client, "addr": addr, "topic": topic, "members": n, "records": records},
                                timeout=420, before=before))
            jobs.append(Job("share-redelivery", broker, client, "cases.share:redelivery",
                            {"client": client, "addr": addr, "rounds": rounds}, timeout=120 + 5 * rounds,
                            subrows=["p50", "p99"], before=before))
    return [tput, lat], jobs


def finish(env) -> None:
    global _kafka, _kohort
    if _kafka is not None:
        _kafka.close()
        _kafka = None
    if _kohort is not None:
        _kohort.__exit__(None, None, None)
        _kohort = None
