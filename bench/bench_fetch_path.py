"""The broker's Fetch request path in one process: CPU per request, without sockets or clients.

A real `Broker` (log.flush.policy=os) is opened on a temporary data directory, and one broker
`Connection` is fed pre-encoded frames through `_on_frame` with an in-memory transport that keeps
what is written (record sets are copied, not spliced: the transport has no socket). Each request
goes the broker's whole way: request decode, the fetch session (KIP-227), the log read, the answer's
encoding and the connection's write.

Shapes, each a consumer's incremental session (librdkafka's Fetch v16, read_committed, one
partition, max_wait_ms 0 so nothing is parked):
  empty  the partition already sent, nothing new: the answer lists no partition (a caught-up consumer);
  data   a Produce of one 150-record batch of 100 B (acks=1), then a Fetch from where the last ended
         (the partition re-sent with its new offset): one batch back (a consumer following a producer);
  prod   the Produce alone (subtract it from `data` for the Fetch's share).
Reported: wall µs per request (busy-machine figures). For instruction counts, run a shape with
--requests 0 and with --requests N under callgrind and divide the difference by N:
    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python bench/bench_fetch_path.py empty --requests 400
Run:
    .venv/bin/python bench/bench_fetch_path.py {empty,data,prod} [--requests 3000] [--version 16]
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time

from kohort.broker.config import BrokerConfig
from kohort.broker.connection import Connection
from kohort.broker.server import Broker
from kohort.protocol.framing import decode_response, encode_request
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.produce import ProduceRequest
from kohort.protocol.records import build_batch

FT = FetchRequest.FetchTopic
PT = ProduceRequest.TopicProduceData


class _Transport:
    """Keeps the bytes written (the last answer is checked)."""

    def __init__(self):
        self.out = []

    def write(self, b):
        self.out.append(bytes(b))

    def get_write_buffer_size(self):
        return 0

    def close(self):
        pass


async def run(shape: str, n: int, v: int) -> float:
    d = tempfile.mkdtemp(prefix="bench-fetch-")
    b = Broker(BrokerConfig.from_properties({"log.flush.policy": "os"}), "127.0.0.1", 0, d)
    await b.start()
    try:
        b.storage.create_topic("t", 1)
        tid = b.storage.topic("t").topic_id
        batch = build_batch([(None, b"v" * 100, [], 1_700_000_000_000 + i) for i in range(150)])
        conn = Connection(b, b.listeners[0])
        t = conn.transport = _Transport()
        conn.ev = {"requests": 1, "principal": conn.principal, "client_id": "bench"}
        produce = encode_request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[PT(name="t", partition_data=[
            PT.PartitionProduceData(index=0, records=batch)])]), 9, 1)[4:]

        def fetch(offset, session, epoch, with_partition):
            tps = [FT(topic="t", topic_id=tid, partitions=[FT.FetchPartition(
                partition=0, fetch_offset=offset, partition_max_bytes=1 << 20, current_leader_epoch=0)])]
            return encode_request(FetchRequest(
                max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=1, session_id=session,
                session_epoch=epoch, topics=tps if with_partition else [], forgotten_topics_data=[], rack_id=""),
                v, 2)[4:]

        async def send(frame):
            t.out.clear()
            conn._on_frame(bytearray(frame))
            conn._pump()
            while conn._pending:
                await asyncio.sleep(0)
                conn._pump()

        await send(produce)
        await send(fetch(0, 0, 0, True))            # a full fetch opens the session
        session = decode_response(b"".join(t.out)[4:], 1, v)[1].session_id
        offset, epoch = 150, 1
        t0 = time.perf_counter()
        for i in range(n):
            if shape != "empty":
                await send(produce)
            if shape == "data":
                await send(fetch(offset, session, epoch, True))
                offset += 150
            elif shape == "empty":
                await send(fetch(offset, session, epoch, i == 0))
            if shape != "prod":
                epoch += 1
        took = time.perf_counter() - t0
        if n and shape != "prod":
            resp = decode_response(b"".join(t.out)[4:], 1, v)[1]
            got = [len(p.records or b"") for r in resp.responses for p in r.partitions]
            assert resp.error_code == 0 and got == ([] if shape == "empty" else [len(batch)]), got
        return took / max(n, 1) * 1e6
    finally:
        await b.stop()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=["empty", "data", "prod"])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--version", type=int, default=16)
    a = ap.parse_args()
    us = asyncio.run(run(a.shape, a.requests, a.version))
    print(f"{a.shape}: Fetch v{a.version}, {a.requests} rounds, {us:.1f} us per round (wall, busy machine)")


if __name__ == "__main__":
    main()
