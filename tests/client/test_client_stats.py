"""kohort's own client statistics (statistics.interval.ms, stats_cb; kohort/client/stats.py): messages and
bytes per partition, consumer lag and next offsets, group rebalances, per-broker requests and round trips
-- checked against what was produced and consumed, and their field names against the statistics of
librdkafka itself (confluent-kafka's stats_cb on the same broker)."""
from __future__ import annotations

import json
import time
import uuid

from kohort.client.admin import Admin
from kohort.client.consumer import Consumer
from kohort.client.producer import Producer
from tests.helpers.brokers import kohort_broker  # noqa: F401 (fixture)

# fields kohort adds that librdkafka's statistics do not have
EXTRA = {"cgrp": {"generation_id", "member_id"}, "partition": {"txerrs"}}


def _last(stats, **cond):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if stats and all(stats[-1].get(k) == v for k, v in cond.items()):
            return stats[-1]
        time.sleep(0.02)
    raise AssertionError(f"no statistics with {cond}: {stats[-1:] if stats else stats}")


def test_producer_and_consumer_statistics(kohort_broker):
    bs = kohort_broker.bootstrap
    topic = f"st-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": bs}) as a:
        a.create_topics({topic: 2})
    pstats: list = []
    with Producer({"bootstrap.servers": bs, "statistics.interval.ms": 20, "stats_cb": pstats.append,
                   "client.id": "st-p"}) as p:
        for i in range(20):
            p.produce(topic, b"v%02d" % i, partition=i % 2)
        p.flush()
        deadline = time.monotonic() + 10
        while (not pstats or pstats[-1]["txmsgs"] < 20) and time.monotonic() < deadline:
            time.sleep(0.03)
            p.emit_statistics()
    s = pstats[-1]
    assert s["type"] == "producer" and s["client_id"] == "st-p" and s["txmsgs"] == 20 and s["msg_cnt"] == 0
    assert {k: v["txmsgs"] for k, v in s["topics"][topic]["partitions"].items()} == {"0": 10, "1": 10}
    (b,) = [b for b in s["brokers"].values() if b["nodeid"] >= 0]
    assert b["req"]["Produce"] >= 1 and b["rtt"]["cnt"] >= 1 and b["rtt"]["max"] >= b["rtt"]["p50"] > 0
    assert s["tx"] >= b["tx"] and s["rx_bytes"] > 0

    cstats: list = []
    c = Consumer({"bootstrap.servers": bs, "group.id": "st-g", "auto.offset.reset": "earliest",
                  "statistics.interval.ms": 20, "stats_cb": cstats.append, "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < 20 and time.monotonic() < deadline:
            got += len(c.poll(0.2))
        assert got == 20
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            c.poll(0.05)
            s = cstats[-1]
            parts = s["topics"].get(topic, {}).get("partitions", {})
            if s["rxmsgs"] == 20 and all(p.get("consumer_lag") == 0 for p in parts.values()) and len(parts) == 2:
                break
        assert s["type"] == "consumer" and s["rxmsgs"] == 20
        assert s["rxmsg_bytes"] == 20 * 3
        assert {k: (v["rxmsgs"], v["next_offset"], v["consumer_lag"]) for k, v in parts.items()} == \
            {"0": (10, 10, 0), "1": (10, 10, 0)}
        assert s["cgrp"]["rebalance_cnt"] >= 1 and s["cgrp"]["assignment_size"] == 2
        req: dict = {}
        for b in s["brokers"].values():        # the broker, and the coordinator's own connection
            for k, n in b["req"].items():
                req[k] = req.get(k, 0) + n
        assert req["Fetch"] >= 1 and req["JoinGroup"] >= 1 and req["Fetch"] <= s["tx"]
    finally:
        c.close()



def test_field_names_are_librdkafkas(kohort_broker):
    """Every field kohort reports (but the listed extras) is one librdkafka's statistics have too."""
    from confluent_kafka import Consumer as CK
    bs = kohort_broker.bootstrap
    topic = f"st2-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": bs}) as a:
        a.create_topics({topic: 1})
    with Producer({"bootstrap.servers": bs}) as p:
        p.produce(topic, b"x")
    theirs: list = []
    ck = CK({"bootstrap.servers": bs, "group.id": "st2-ck", "auto.offset.reset": "earliest",
             "statistics.interval.ms": 100, "stats_cb": theirs.append, "log_level": 0})
    ours: list = []
    c = Consumer({"bootstrap.servers": bs, "group.id": "st2-k", "auto.offset.reset": "earliest",
                  "statistics.interval.ms": 20, "stats_cb": ours.append})
    try:
        ck.subscribe([topic])
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        got_ck = got_k = 0
        while (not got_ck or not got_k or not theirs) and time.monotonic() < deadline:
            m = ck.poll(0.1)
            got_ck += m is not None and m.error() is None
            got_k += len(c.poll(0.1))
        assert got_ck and got_k and theirs
        while time.monotonic() < deadline and (not ours or topic not in ours[-1]["topics"]):
            c.poll(0.05)
    finally:
        ck.close()
        c.close()
    t = json.loads(theirs[-1])
    o = ours[-1]
    assert set(o) - {"brokers", "topics", "cgrp"} <= set(t), set(o) - set(t)
    tb = next(iter(t["brokers"].values()))
    for b in o["brokers"].values():
        assert set(b) <= set(tb), set(b) - set(tb)
        assert set(b["rtt"]) <= set(tb["rtt"])
    tp = t["topics"][topic]["partitions"]["0"]
    op = o["topics"][topic]["partitions"]["0"]
    assert set(op) - EXTRA["partition"] <= set(tp), set(op) - set(tp)
    assert set(o["cgrp"]) - EXTRA["cgrp"] <= set(t["cgrp"]), set(o["cgrp"]) - set(t["cgrp"])
