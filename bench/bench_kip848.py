"""Group convergence times, classic vs KIP-848 consumer protocol, kohort broker vs Apache Kafka 4.x,
with the same clients (confluent-kafka consumers, one process each; issue 14). Standalone:

    PYTHONPATH=src .venv/bin/python bench/bench_kip848.py [--members 3,10] [--brokers kohort,kafka]

For each case: `join` = seconds from starting N members until each owns 2 of the 2N partitions; `kill` = seconds from SIGKILLing one member until the others own every
partition again (bounded below by the 6 s session timeout both protocols use here). Classic members
use cooperative-sticky (session 6 s, heartbeat 0.5 s); consumer members get session 6 s and heartbeat
interval 1 s from the broker (both brokers configured alike). Ownership comes from
the members' assign/revoke callbacks. Not part of `make bench` yet.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "src")]

from tests.brokers import KohortBroker  # noqa: E402
from tests.peers import create_topic  # noqa: E402

CONSUMER = os.path.join(ROOT, "tests", "kip848_member.py")
CLASSIC = os.path.join(ROOT, "tests", "client_group_member.py")


def _spawn(bs, group, topic, protocol):
    if protocol == "consumer":
        args = [sys.executable, CONSUMER, bs, group, topic, "120"]
    else:
        args = [sys.executable, CLASSIC, bs, group, topic, "cooperative-sticky", "120", "confluent-kafka"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         stdin=subprocess.DEVNULL)
    lines: list = []
    threading.Thread(target=lambda: [lines.append(json.loads(x)) for x in p.stdout], daemon=True).start()
    return p, lines


def _owned(lines):
    own = set()
    for ev in list(lines):
        own |= {tuple(x) for x in ev.get("assigned", [])}
        own -= {tuple(x) for x in ev.get("revoked", [])}
        own -= {tuple(x) for x in ev.get("lost", [])}
    return own


def _settled(members, total, balanced):
    owned = [_owned(ls) for _, ls in members]
    if balanced and any(len(o) != 2 for o in owned):
        return False
    return sum(map(len, owned)) == len(total) and set().union(*owned) == total


def _wait(members, total, balanced=False, timeout=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if _settled(members, total, balanced):
            return time.monotonic() - t0
        time.sleep(0.02)
    return float("nan")


def measure(bs, protocol, n):
    topic, group = f"b848-{uuid.uuid4().hex[:8]}", f"b848-{uuid.uuid4().hex[:8]}"
    parts = 2 * n
    create_topic(bs, topic, parts)
    total = {(topic, i) for i in range(parts)}
    members = [_spawn(bs, group, topic, protocol) for _ in range(n)]
    try:
        join = _wait(members, total, balanced=True)
        time.sleep(1)
        victim = members.pop(0)[0]
        victim.kill()
        victim.wait(30)
        return join, _wait(members, total)
    finally:
        for p, _ in members:
            p.kill()
            p.wait(10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", default="3,10")
    ap.add_argument("--brokers", default="kohort,kafka")
    a = ap.parse_args()
    sizes = [int(x) for x in a.members.split(",")]
    rows = []
    for broker in a.brokers.split(","):
        ctx = None
        if broker == "kohort":
            ctx = KohortBroker(config={"group.consumer.min.session.timeout.ms": 6000,
                                       "group.consumer.session.timeout.ms": 6000,
                                       "group.consumer.min.heartbeat.interval.ms": 1000,
                                       "group.consumer.heartbeat.interval.ms": 1000})
        else:
            from tests.kafka_cluster import KafkaCluster
            ctx = KafkaCluster(nodes=1, extra_config={"group.consumer.min.session.timeout.ms": 6000,
                                                      "group.consumer.session.timeout.ms": 6000,
                                                      "group.consumer.min.heartbeat.interval.ms": 1000,
                                                      "group.consumer.heartbeat.interval.ms": 1000})
        ctx.start()
        try:
            for n in sizes:
                for protocol in ("classic", "consumer"):
                    join, kill = measure(ctx.bootstrap, protocol, n)
                    rows.append((broker, protocol, n, join, kill))
                    print(f"{broker:7} {protocol:9} members={n:3}  join {join:6.2f} s   kill {kill:6.2f} s",
                          flush=True)
        finally:
            ctx.stop() if broker == "kohort" else ctx.close()


if __name__ == "__main__":
    main()
