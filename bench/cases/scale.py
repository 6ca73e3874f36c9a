"""Scale: how the brokers' cost grows with group size, partition count and connection count, kohort
broker beside Apache Kafka 4.3.1 (issue 17). Growth curves go to bench/out/scale-<dimension>.png
(bench/plots.py), the figures to the normal tables.

Three dimensions, each measured at several sizes (quick: the small ones):

* group (`group`): N protocol-level members in one group, all in one asyncio process, each on its
  own connection speaking kohort's protocol encoder over a raw socket. classic: JoinGroup (with
  MEMBER_ID_REQUIRED), SyncGroup (the leader sends a range-style assignment), Heartbeat every 1 s,
  rejoin on REBALANCE_IN_PROGRESS. consumer (KIP-848): ConsumerGroupHeartbeat; a member takes a
  new assignment at once (drops revoked partitions, acknowledges in an immediate heartbeat),
  otherwise heartbeats at the broker's interval (1 s). Timed: first join -> stable (every member
  synced at one generation / epoch, assignments disjoint and covering all N partitions), then one
  more member joins -> stable, then one member leaves (LeaveGroup / epoch -1) -> stable. Plus the
  broker's CPU over the run and its RSS after. The real-client anchor (full mode): 20 real kohort
  Consumers, cases.kip848:converge (member joins / leaves).
* partitions (`partitions`): one topic of P partitions: CreateTopics (above 5,000 partitions then
  CreatePartitions in steps of 5,000: Apache Kafka's controller refuses more than 10,000 records per
  request) until DescribeTopics shows all P, a full Metadata request (median of 5, raw socket), produce one record to every partition and
  consume all of them (confluent-kafka), broker CPU and RSS after.
* connections (`connections`): C client connections (each ApiVersions + Metadata), idle 3 s, then
  one Metadata request on each at once: time to open all, per-request latency (p50, p99), broker
  CPU while idle (ms of CPU per second), RSS after.

Broker CPU is utime+stime of the broker process (/proc/<pid>/stat; for Kafka the JVM), RSS its
VmRSS. kohort broker is started fresh for each dimension; Apache Kafka (one node, started once for
the case, KafkaCluster) keeps the state of the earlier dimensions -- JVM start-up would cost more
than the quick budget. Both brokers run with the same group settings: group.initial.rebalance.delay.ms=0,
group.consumer.session.timeout.ms=10000, group.consumer.heartbeat.interval.ms=1000 (the test bed's).
Standalone:

    PYTHONPATH=src:. .venv/bin/python bench/run.py --quick --only scale
"""
from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import struct
import time
import uuid

from cases.common import KAFKA_JVM, KOHORT_BROKER, create_topic

KAFKA = "Apache Kafka 4.3.1"
MAX_ROUNDS = 1          # minutes per dimension at the large sizes
GROUP_CONFIG = {"group.consumer.session.timeout.ms": 10000, "group.consumer.min.session.timeout.ms": 6000,
                "group.consumer.heartbeat.interval.ms": 1000, "group.consumer.min.heartbeat.interval.ms": 500,
                "group.initial.rebalance.delay.ms": 0}
SIZES = {"quick": {"group": [10, 50], "partitions": [100, 1000], "connections": [10, 100]},
         "full": {"group": [10, 50, 100, 250, 500], "partitions": [100, 1000, 3000, 10000],
                  "connections": [10, 100, 500, 1000]}}
UNIT = "ms; CPU ms; RSS MB"
MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION = 79, 27, 25, 22
FENCED_MEMBER_EPOCH = 110
PER_REQUEST = 5000      # partitions per CreateTopics / CreatePartitions request


# -- the broker process ---------------------------------------------------------------------------
def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds utime+stime, RSS MB) of process `pid`."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = 0.0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    return cpu, rss


def _record(points: str | None, dimension: str, column: str, size: int, rows: dict) -> None:
    """One point per (dimension, broker, size) for the growth curves (finish() plots them)."""
    if points:
        with open(points, "a") as fh:
            fh.write(json.dumps({"dimension": dimension, "column": column, "size": size, "rows": rows}) + "\n")


# -- a raw protocol connection --------------------------------------------------------------------
class Conn:
    """One client connection: kohort's request encoder and response decoder over an asyncio stream,
    one request at a time (in order), versions from the broker's ApiVersions."""

    def __init__(self, reader, writer):
        self.r, self.w = reader, writer
        self.corr = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self.lock = asyncio.Lock()

    @classmethod
    async def open(cls, addr: str) -> "Conn":
        host, port = addr.rsplit(":", 1)
        c = cls(*await asyncio.open_connection(host, int(port)))
        from kohort.protocol.messages.api_versions import ApiVersionsRequest
        resp = await c.call(ApiVersionsRequest(client_software_name="kohort-bench", client_software_version="1"),
                            version=3)
        c.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        return c

    async def call(self, req, version: int | None = None, timed: list | None = None):
        """The decoded response; `timed` gets the seconds until its last byte arrived (before the
        client decodes it, so a big answer's decoding in Python does not count)."""
        from kohort.protocol.framing import decode_response, encode_request, pick_version
        key = type(req).API_KEY
        v = pick_version(key, self.versions) if version is None else version
        async with self.lock:
            self.corr += 1
            t = time.perf_counter()
            self.w.write(encode_request(req, v, self.corr, "kohort-bench"))
            size = struct.unpack(">i", await self.r.readexactly(4))[0]
            payload = await self.r.readexactly(size)
            if timed is not None:
                timed.append(time.perf_counter() - t)
        corr, resp = decode_response(payload, key, v)
        if corr != self.corr:
            raise RuntimeError(f"correlation id {corr}, expected {self.corr}")
        return resp

    def close(self) -> None:
        self.w.close()


async def _metadata(conn: Conn, topics: list[str] | None, timed: list | None = None):
    from kohort.protocol.messages.metadata import MetadataRequest
    req = MetadataRequest(topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(
        topic_id=uuid.UUID(int=0), name=t) for t in topics], allow_auto_topic_creation=False)
    return await conn.call(req, timed=timed)


async def _find_coordinator(conn: Conn, gid: str, timeout: float = 60) -> None:
    """FindCoordinator until the group's coordinator is up (Apache Kafka creates __consumer_offsets
    on the first one); both brokers are one node, so it is the node we talk to."""
    from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
    deadline = time.monotonic() + timeout
    while True:
        r = await conn.call(FindCoordinatorRequest(key=gid, key_type=0, coordinator_keys=[gid]))
        err = r.coordinators[0].error_code if r.coordinators else r.error_code
        if err == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"FindCoordinator({gid}): error {err}")
        await asyncio.sleep(0.2)


# -- group: protocol-level members ----------------------------------------------------------------
class _Group:
    """What every member last settled on: member id -> (generation or epoch, owned partitions)."""

    def __init__(self, partitions: int):
        self.partitions = partitions
        self.view: dict[str, tuple[int, frozenset]] = {}
        self.live: set[str] = set()
        self.errors: dict[int, str | None] = {}     # error code -> last message, for the report
        self.floor = -1         # the generation / epoch the group must move past (set at each event)

    def event(self) -> None:
        """A member joins or leaves now: the group is stable again only at a newer generation or
        epoch (a member leaving with no partitions still makes a classic group rebalance)."""
        self.floor = max((gen for gen, _ in self.view.values()), default=-1)

    def stable(self) -> bool:
        if not self.live or any(m not in self.view for m in self.live):
            return False
        views = [self.view[m] for m in self.live]
        gens = {g for g, _ in views}
        if len(gens) != 1 or min(gens) <= self.floor:
            return False
        owned = [o for _, o in views]
        if sum(len(o) for o in owned) != self.partitions or len(frozenset().union(*owned)) != self.partitions:
            return False
        sizes = [len(o) for o in owned]
        return max(sizes) - min(sizes) <= 1


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass


async def _classic_member(conn: Conn, name: str, gid: str, topic: str, g: _Group, stop: asyncio.Event,
                          leave: asyncio.Event) -> None:
    from kohort.protocol.consumer_protocol import (ConsumerProtocolAssignment as A,
                                                   ConsumerProtocolSubscription as S, decode_assignment,
                                                   encode_assignment, encode_subscription)
    from kohort.protocol.messages.heartbeat import HeartbeatRequest
    from kohort.protocol.messages.join_group import JoinGroupRequest
    from kohort.protocol.messages.leave_group import LeaveGroupRequest
    from kohort.protocol.messages.sync_group import SyncGroupRequest
    sub = encode_subscription(S(topics=[topic], user_data=None, owned_partitions=[]), 1)
    member_id = ""
    g.live.add(name)
    while not stop.is_set() and not leave.is_set():
        join = await conn.call(JoinGroupRequest(
            group_id=gid, session_timeout_ms=10000, rebalance_timeout_ms=30000, member_id=member_id,
            group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.Protocol(name="range", metadata=sub)], reason=None))
        if join.error_code == MEMBER_ID_REQUIRED:
            member_id = join.member_id
            continue
        if join.error_code:
            g.errors[join.error_code] = None
            if join.error_code == UNKNOWN_MEMBER_ID:
                member_id = ""
            await _sleep(stop, 0.1)
            continue
        member_id, gen = join.member_id, join.generation_id
        assignments = []
        if join.leader == member_id:            # range-style: member i gets partitions i, i+n, ...
            ids = sorted(m.member_id for m in join.members)
            for i, mid in enumerate(ids):
                parts = list(range(i, g.partitions, len(ids)))
                assignments.append(SyncGroupRequest.Assignment(member_id=mid, assignment=encode_assignment(
                    A(assigned_partitions=[A.TopicPartition(topic=topic, partitions=parts)], user_data=None), 1)))
        sync = await conn.call(SyncGroupRequest(group_id=gid, generation_id=gen, member_id=member_id,
                                                group_instance_id=None, protocol_type="consumer",
                                                protocol_name="range", assignments=assignments))
        if sync.error_code:
            continue
        asg = decode_assignment(sync.assignment) if sync.assignment else None
        owned = frozenset(p for tp in (asg.assigned_partitions if asg else []) for p in tp.partitions)
        g.view[name] = (gen, owned)
        while not stop.is_set() and not leave.is_set():
            await _sleep(leave, 1.0)
            if leave.is_set() or stop.is_set():
                break
            hb = await conn.call(HeartbeatRequest(group_id=gid, generation_id=gen, member_id=member_id,
                                                  group_instance_id=None))
            if hb.error_code in (UNKNOWN_MEMBER_ID,):
                member_id = ""
            if hb.error_code:
                break                           # rejoin
    g.live.discard(name)
    g.view.pop(name, None)
    if leave.is_set() and member_id:
        await conn.call(LeaveGroupRequest(group_id=gid, member_id=member_id, members=[
            LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=None, reason=None)]))


async def _consumer_member(conn: Conn, name: str, gid: str, topic: str, topic_id: bytes, g: _Group,
                           stop: asyncio.Event, leave: asyncio.Event) -> None:
    from kohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as H
    member_id = str(uuid.uuid4())
    epoch, owned, full, ack = 0, frozenset(), True, True
    g.live.add(name)
    while not stop.is_set() and not leave.is_set():
        req = H(group_id=gid, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
                rebalance_timeout_ms=30000 if full else -1,
                subscribed_topic_names=[topic] if full else None, subscribed_topic_regex=None,
                server_assignor=None,
                topic_partitions=([H.TopicPartitions(topic_id=topic_id, partitions=sorted(owned))] if owned
                                  else []) if ack else None)
        resp = await conn.call(req)
        if resp.error_code:
            g.errors[resp.error_code] = resp.error_message
            if resp.error_code in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
                epoch, owned, full, ack = 0, frozenset(), True, True
                g.view.pop(name, None)
            await _sleep(stop, 0.2)
            continue
        full, ack = False, False
        epoch = resp.member_epoch
        if resp.assignment is not None:
            new = frozenset(p for tp in resp.assignment.topic_partitions for p in tp.partitions)
            if new != owned:
                owned, ack = new, True          # revoke and take at once, acknowledge now
        g.view[name] = (epoch, owned)
        if not ack:
            await _sleep(leave, max(0.05, resp.heartbeat_interval_ms / 1000))
    g.live.discard(name)
    g.view.pop(name, None)
    if leave.is_set():
        await conn.call(H(group_id=gid, member_id=member_id, member_epoch=-1, instance_id=None, rack_id=None,
                          rebalance_timeout_ms=-1, subscribed_topic_names=None, subscribed_topic_regex=None,
                          server_assignor=None, topic_partitions=None))


async def _wait(g: _Group, tasks: list, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if g.stable():
            return time.monotonic()
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()
        await asyncio.sleep(0.005)
    gens = sorted({v[0] for v in g.view.values()})
    raise RuntimeError(f"{what}: not stable within {timeout:.0f} s ({len(g.view)}/{len(g.live)} settled, "
                       f"generations {gens[:5]}, errors {g.errors})")


async def _group_run(addr: str, protocol: str, members: int) -> dict:
    topic, gid = f"scale-{uuid.uuid4().hex[:8]}", f"scale-{uuid.uuid4().hex[:8]}"
    _create_topic(addr, topic, members)
    conns = await asyncio.gather(*(Conn.open(addr) for _ in range(members + 1)))
    md = await _metadata(conns[0], [topic])
    topic_id = md.topics[0].topic_id
    await _find_coordinator(conns[0], gid)
    g = _Group(members)
    stop = asyncio.Event()
    leaves = [asyncio.Event() for _ in range(members + 1)]

    def start(i):
        g.live.add(f"m{i}")             # a member of the group from now on (its task runs later)
        if protocol == "classic":
            return asyncio.ensure_future(_classic_member(conns[i], f"m{i}", gid, topic, g, stop, leaves[i]))
        return asyncio.ensure_future(_consumer_member(conns[i], f"m{i}", gid, topic, topic_id, g, stop, leaves[i]))
    timeout = 60 + 0.5 * members
    tasks = []
    try:
        t0 = time.monotonic()
        tasks = [start(i) for i in range(members)]
        first = await _wait(g, tasks, timeout, "first join") - t0
        g.event()
        t1 = time.monotonic()
        tasks.append(start(members))
        g.partitions = members          # the same topic: N partitions over N+1 members
        join = await _wait(g, tasks, timeout, "member joins") - t1
        g.event()
        t2 = time.monotonic()
        leaves[0].set()
        g.live.discard("m0")
        g.view.pop("m0", None)
        leave = await _wait(g, tasks, timeout, "member leaves") - t2
        await asyncio.wait_for(tasks[0], 30)
        return {"stable from first join": first * 1000, "one member joins": join * 1000,
                "one member leaves": leave * 1000}
    finally:
        for e in leaves:
            e.set()                      # every member leaves (LeaveGroup / epoch -1): the broker
        await asyncio.wait(tasks, timeout=60) if tasks else None   # is not left expiring them
        stop.set()
        for t in tasks:
            t.cancel()
        for c in conns:
            c.close()


def group(addr: str, pid: int, protocol: str, members: int, column: str = "", points: str | None = None) -> dict:
    cpu0, rss0 = proc_stats(pid)
    rows = asyncio.run(_group_run(addr, protocol, members))
    cpu1, rss1 = proc_stats(pid)
    rows["broker CPU"] = (cpu1 - cpu0) * 1000
    rows["broker RSS after"] = rss1
    _record(points, f"group-{protocol}", column, members, rows)
    return {"value": rows["stable from first join"], "rows": rows, "rss_before_mb": rss0}


# -- partitions ----------------------------------------------------------------------------------
def partitions(addr: str, pid: int, count: int, column: str = "", points: str | None = None) -> dict:
    from confluent_kafka import Consumer, Producer, TopicPartition
    topic = f"scale-p{count}-{uuid.uuid4().hex[:6]}"
    cpu0, rss0 = proc_stats(pid)
    t = time.monotonic()
    _create_topic(addr, topic, count)
    created = time.monotonic() - t

    async def md_times():
        c = await Conn.open(addr)
        try:
            out = []
            for _ in range(5):
                r = await _metadata(c, None, out)
            got = {x.name: len(x.partitions) for x in r.topics}
            if got.get(topic) != count:
                raise RuntimeError(f"Metadata lists {got.get(topic)} partitions of {topic}, not {count}")
            return statistics.median(out)
        finally:
            c.close()
    md = asyncio.run(md_times())
    # Apache Kafka creates a new topic's logs after CreateTopics answered: the first produce to
    # 10,000 partitions waits minutes for them (hence the long delivery timeout)
    p = Producer({"bootstrap.servers": addr, "linger.ms": 20, "acks": "all", "message.timeout.ms": 1_200_000})
    t = time.monotonic()
    for q in range(count):
        p.produce(topic, b"x", partition=q)
    if p.flush(120 + count / 10):
        raise RuntimeError("produce: records left undelivered")
    produced = time.monotonic() - t
    c = Consumer({"bootstrap.servers": addr, "group.id": topic, "enable.auto.commit": False})
    try:
        t = time.monotonic()
        c.assign([TopicPartition(topic, q, 0) for q in range(count)])
        seen, deadline = 0, time.monotonic() + 120 + count / 50
        while seen < count and time.monotonic() < deadline:
            seen += sum(1 for m in c.consume(1000, 0.1) if m.error() is None)
        consumed = time.monotonic() - t
        if seen < count:
            raise RuntimeError(f"consumed {seen} of {count} records")
    finally:
        c.close()
    cpu1, rss1 = proc_stats(pid)
    rows = {"CreateTopics": created * 1000, "Metadata (all topics)": md * 1000,
            "produce 1 record per partition": produced * 1000, "consume them": consumed * 1000,
            "broker CPU": (cpu1 - cpu0) * 1000, "broker RSS after": rss1}
    _record(points, "partitions", column, count, rows)
    return {"value": rows["CreateTopics"], "rows": rows, "rss_before_mb": rss0}


def _create_topic(addr: str, topic: str, count: int, timeout: float = 300) -> None:
    """CreateTopics, then DescribeTopics until all `count` partitions show (a broker may answer
    UNKNOWN_TOPIC_OR_PARTITION for a moment after CreateTopics returned)."""
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": addr}) as admin:
        # Apache Kafka's controller takes at most 10,000 records per request (a topic record and one
        # per partition): above PER_REQUEST both brokers get CreateTopics + CreatePartitions steps
        first = min(count, PER_REQUEST)
        err = admin.create_topics({topic: first}).get(topic)
        if err is not None:
            raise err
        for total in range(first + PER_REQUEST, count + PER_REQUEST, PER_REQUEST):
            err = admin.create_partitions({topic: min(total, count)}).get(topic)
            if err is not None:
                raise err
        deadline = time.monotonic() + timeout
        while True:
            try:
                d = {x.name: x for x in admin.describe_topics([topic])}.get(topic)
                if d is not None and len(d.partitions) == count:
                    return
            except Exception:            # noqa: BLE001 - not visible yet
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: {count} partitions not visible within {timeout:.0f} s")
            time.sleep(0.02)


# -- connections ---------------------------------------------------------------------------------
def connections(addr: str, pid: int, count: int, column: str = "", points: str | None = None,
                idle_s: float = 3.0) -> dict:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1000), hard))
    topic = f"scale-c-{uuid.uuid4().hex[:6]}"
    _create_topic(addr, topic, 1)
    cpu0, rss0 = proc_stats(pid)

    async def run():
        sem = asyncio.Semaphore(200)                # connects in flight at once

        async def one():
            async with sem:
                c = await Conn.open(addr)
                await _metadata(c, [topic])
                return c
        t = time.monotonic()
        conns = await asyncio.gather(*(one() for _ in range(count)))
        connect = time.monotonic() - t
        try:
            cpu_a, _ = proc_stats(pid)
            await asyncio.sleep(idle_s)
            cpu_b, rss_idle = proc_stats(pid)

            lat: list = []
            await asyncio.gather(*(_metadata(c, [topic], lat) for c in conns))
            lat.sort()
            return connect, (cpu_b - cpu_a) / idle_s, lat, rss_idle
        finally:
            for c in conns:
                c.close()
    connect, idle_cpu, lat, rss_idle = asyncio.run(run())
    cpu1, _ = proc_stats(pid)
    rows = {"open all (ApiVersions + Metadata)": connect * 1000,
            "request latency p50": statistics.median(lat) * 1000,
            "request latency p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
            "broker CPU idle (ms/s)": idle_cpu * 1000, "broker CPU": (cpu1 - cpu0) * 1000,
            "broker RSS with them open": rss_idle}
    _record(points, "connections", column, count, rows)
    return {"value": rows["open all (ApiVersions + Metadata)"], "rows": rows, "rss_before_mb": rss0}


# -- the case ------------------------------------------------------------------------------------
_kafka = None
_kohort = None
_kohort_dim = None
_points = None
_out_dir = None

GROUP_ROWS = ["stable from first join", "one member joins", "one member leaves", "broker CPU",
              "broker RSS after"]
PART_ROWS = ["CreateTopics", "Metadata (all topics)", "produce 1 record per partition", "consume them",
             "broker CPU", "broker RSS after"]
CONN_ROWS = ["open all (ApiVersions + Metadata)", "request latency p50", "request latency p99",
             "broker CPU idle (ms/s)", "broker CPU", "broker RSS with them open"]


def _kohort_for(dimension: str) -> dict:
    """The kohort broker for `dimension`: a fresh one when the dimension changes."""
    global _kohort, _kohort_dim
    if _kohort is None or _kohort_dim != dimension:
        if _kohort is not None:
            _kohort.__exit__(None, None, None)
            _kohort = None
        from tests.helpers.brokers import KohortBroker
        b = KohortBroker(config=GROUP_CONFIG)
        b.__enter__()
        _kohort, _kohort_dim = b, dimension
    return {"addr": _kohort.bootstrap, "pid": _kohort.proc.pid}


def build(env, mode: str, profile: set[str]):
    global _kafka, _points, _out_dir
    from harness import Job, Section
    sizes = SIZES["quick" if mode == "quick" else "full"]
    common = ("Same settings on both brokers: group.initial.rebalance.delay.ms=0, consumer-protocol "
              "session 10 s and heartbeat 1 s. Broker CPU: utime+stime of the broker process (Kafka: the "
              "JVM) over the run; RSS: VmRSS. kohort broker is fresh per dimension, Apache Kafka (1 node) "
              "runs through all three. Ratio: Kafka ÷ kohort broker (> 1: kohort broker cheaper).")
    secs = [
        Section("scale-group", "scale: one group of N members", UNIT, higher_is_better=False,
                ours=KOHORT_BROKER, peers=[KAFKA], notes=[
                    "N protocol-level members (kohort's encoder, raw sockets, one asyncio process, one "
                    "connection each) on a topic of N partitions. classic: JoinGroup (MEMBER_ID_REQUIRED), "
                    "SyncGroup with the leader's range assignment, Heartbeat every 1 s; consumer (KIP-848): "
                    "ConsumerGroupHeartbeat, a new assignment taken and acknowledged at once. Stable: every "
                    "member at one generation/epoch (after a join or leave: a newer one than before it), "
                    "assignments disjoint and covering every partition, sizes within 1; join/leave times "
                    "include up to one 1 s heartbeat interval. 'real kohort Consumers' rows: 20 real clients (cases.kip848). " + common,
                    "![growth: one group, classic protocol](scale-group-classic.png) "
                    "![growth: one group, consumer protocol](scale-group-consumer.png)"]),
        Section("scale-partitions", "scale: one topic of P partitions", UNIT, higher_is_better=False,
                ours=KOHORT_BROKER, peers=[KAFKA], notes=[
                    "CreateTopics (above 5,000 partitions: then CreatePartitions in steps of 5,000, "
                    "Apache Kafka's per-request limit) until DescribeTopics shows every partition (kohort "
                    "Admin); a full Metadata request (median of 5, until its last byte); one record produced to every partition and all of "
                    "them consumed (confluent-kafka). " + common,
                    "![growth: one topic of P partitions](scale-partitions.png)"]),
        Section("scale-connections", "scale: C open client connections", UNIT, higher_is_better=False,
                ours=KOHORT_BROKER, peers=[KAFKA], notes=[
                    "C connections opened (200 at a time), each ApiVersions + Metadata; idle 3 s (broker "
                    "CPU per second of idling); then one Metadata request on every connection at once "
                    "(latency p50/p99). " + common,
                    "![growth: C connections](scale-connections.png)"]),
    ]
    _out_dir = env.out_dir
    _points = os.path.join(env.out_dir, "scale-points.jsonl")
    open(_points, "w").close()
    kafka_err = None
    try:
        from tests.helpers.kafka_cluster import KafkaCluster
        _kafka = KafkaCluster(nodes=1, jvm=KAFKA_JVM)
        _kafka.start()
    except Exception as e:       # noqa: BLE001 - reported in its cells
        kafka_err = f"{type(e).__name__}: {e}"
        _kafka = None

    def at(broker, dimension):
        def before(job, round_no):
            if broker == KOHORT_BROKER:
                return _kohort_for(dimension)
            if _kafka is None:
                raise RuntimeError(kafka_err or "Apache Kafka not started")
            return {"addr": _kafka.bootstrap, "pid": _kafka.nodes[0].proc.pid}
        return before

    jobs = []
    brokers = [KOHORT_BROKER, KAFKA]
    for protocol in ("classic", "consumer"):
        for n in sizes["group"]:
            for b in brokers:
                jobs.append(Job("scale-group", f"{protocol} · {n} members", b, "cases.scale:group",
                                {"protocol": protocol, "members": n, "column": b, "points": _points},
                                timeout=300 + 2 * n, subrows=GROUP_ROWS, before=at(b, "group")))
    if mode != "quick":
        for protocol in ("classic", "consumer"):
            for b in brokers:
                jobs.append(Job("scale-group", f"real kohort Consumers · {protocol} · 20 members", b,
                                "cases.kip848:converge", {"protocol": protocol, "members": 20}, timeout=600,
                                subrows=["member joins", "member leaves"],
                                before=_addr_only(at(b, "group"))))
    for n in sizes["partitions"]:
        for b in brokers:
            jobs.append(Job("scale-partitions", f"{n} partitions", b, "cases.scale:partitions",
                            {"count": n, "column": b, "points": _points}, timeout=300 + n / 5,
                            subrows=PART_ROWS, before=at(b, "partitions")))
    for n in sizes["connections"]:
        for b in brokers:
            jobs.append(Job("scale-connections", f"{n} connections", b, "cases.scale:connections",
                            {"count": n, "column": b, "points": _points}, timeout=300,
                            subrows=CONN_ROWS, before=at(b, "connections")))
    return secs, jobs


def _addr_only(before):
    def f(job, round_no):
        return {"addr": before(job, round_no)["addr"]}
    return f


def finish(env) -> None:
    global _kafka, _kohort
    try:
        if _points and os.path.exists(_points):
            from plots import plot_scale
            for path in plot_scale(_points, _out_dir or env.out_dir):
                print(f"  wrote {os.path.relpath(path)}", flush=True)
    finally:
        if _kafka is not None:
            _kafka.close()
            _kafka = None
        if _kohort is not None:
            _kohort.__exit__(None, None, None)
            _kohort = None
