"""Resource limits of a `kohort broker` (subprocess) against hostile but well-formed load: thousands of
idle connections and slow-loris senders (a byte a second of a request that never completes) do not
starve a real client, and requests asking for huge answers (a Fetch of 2 GiB, a request naming
100,000 partitions) are bounded in the broker's memory (its RSS growth is measured)."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from kohort.protocol.framing import encode_request
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.broker import connection
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from tests.helpers.broker_wire import Wire, batch, running_broker
from tests.helpers.brokers import KohortBroker
from tests.broker.test_broker_protocol import create, produce

IDLE = 2000
SLOW_LORIS = 200
TWO_GIB = 0x7FFFFFFF
MANY_PARTITIONS = 100_000
ROUND_TRIP_TIMEOUT_S = 15.0
GROUP_CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _round_trip(bootstrap: str, topic: str) -> float:
    """Seconds a kohort producer + group consumer take to move one record through the broker."""
    from kohort import Consumer, Producer
    t0 = time.monotonic()
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}) as p:
        p.produce(topic, b"through").result(ROUND_TRIP_TIMEOUT_S)
    with Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                   "auto.offset.reset": "earliest"}) as c:
        c.subscribe([topic])
        got: list[bytes] = []
        while not got and time.monotonic() - t0 < ROUND_TRIP_TIMEOUT_S:
            got += [r.value for r in c.poll(0.2)]
    assert got == [b"through"], f"no record back within {ROUND_TRIP_TIMEOUT_S} s"
    return time.monotonic() - t0


@pytest.mark.slow           # about 15 s: 2,200 connections opened, a broker and a group
def test_idle_and_slow_loris_connections_do_not_starve_a_client():
    with KohortBroker(config=GROUP_CONFIG) as b:
        asyncio.run(_create(b, "alive"))
        rss0 = b.rss_kb()
        idle = [_connect(b.port) for _ in range(IDLE)]
        loris = [_connect(b.port) for _ in range(SLOW_LORIS)]
        frame = encode_request(MetadataRequest(topics=None), 1, 1)
        stop = threading.Event()
        sent = [0]

        def drip() -> None:          # one byte a second on every slow-loris connection
            i = 0
            while not stop.is_set() and i < len(frame) - 1:
                for s in loris:
                    s.send(frame[i:i + 1])
                sent[0] += 1
                i += 1
                stop.wait(1.0)
        t = threading.Thread(target=drip, daemon=True)
        t.start()
        try:
            time.sleep(1.5)
            took = _round_trip(b.bootstrap, "alive")
        finally:
            stop.set()
            t.join(5)
            rss1 = b.rss_kb()
            for s in idle + loris:
                s.close()
        assert b.proc.poll() is None, "broker died:\n" + "\n".join(b.log_lines[-20:])
        assert sent[0] >= 2, sent
        assert took < ROUND_TRIP_TIMEOUT_S
        # idle connections hold no receive buffer, a slow-loris one a small buffer (broker/connection.py):
        # a few kB each, where 200 pinned receive buffers of 256 KiB alone were 50 MB
        assert rss1 - rss0 < 24 * 1024, f"RSS grew from {rss0} kB to {rss1} kB"
        print(f"round trip {took:.2f} s with {IDLE} idle + {SLOW_LORIS} slow-loris connections; "
              f"RSS {rss0} -> {rss1} kB")


async def _create(b, topic: str, partitions: int = 1) -> None:
    w = await Wire.connect(b)
    assert (await create(w, topic, partitions)).error_code == 0
    await w.close()


def test_a_fetch_asking_for_2_gib_is_bounded_in_memory():
    with KohortBroker() as b:
        async def main():
            w = await Wire.connect(b)
            assert (await create(w, "big")).error_code == 0
            for i in range(8):            # 8 MB in the log
                assert (await produce(w, "big", batch(1, prefix=f"{i}" * 1_000_000))).error_code == 0
            rss0 = b.rss_kb()
            FT = FetchRequest.FetchTopic
            req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=TWO_GIB, isolation_level=0,
                               session_id=0, session_epoch=-1, topics=[FT(topic="big", partitions=[
                                   FT.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=TWO_GIB)])])
            conns = [await Wire.connect(b) for _ in range(4)]
            peak = rss0
            for _ in range(3):
                resps = await asyncio.gather(*[c.call(req, 12) for c in conns])
                peak = max(peak, b.rss_kb())
                for r in resps:
                    p = r.responses[0].partitions[0]
                    assert p.error_code == 0 and len(p.records) > 8_000_000
            for c in conns + [w]:
                await c.close()
            return rss0, peak
        rss0, peak = asyncio.run(main())
        assert b.proc.poll() is None
        # what is answered is what the log holds (8 MB per answer), never what was asked (2 GiB)
        assert peak - rss0 < 96 * 1024, f"RSS grew from {rss0} kB to {peak} kB"
        print(f"4 x 3 fetches of max_bytes 2 GiB: RSS {rss0} -> {peak} kB")


@pytest.mark.slow           # about 30 s on a busy machine: 100,000 partitions encoded and decoded twice
def test_requests_naming_100000_partitions_are_bounded_in_memory():
    with KohortBroker() as b:
        async def main():
            w = await Wire.connect(b)
            assert (await create(w, "wide")).error_code == 0
            rss0 = b.rss_kb()
            FT = FetchRequest.FetchTopic
            fetch = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                 session_id=0, session_epoch=-1, topics=[FT(topic="wide", partitions=[
                                     FT.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20)
                                     for i in range(MANY_PARTITIONS)])])
            LT = ListOffsetsRequest.ListOffsetsTopic
            offsets = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[LT(name="wide", partitions=[
                LT.ListOffsetsPartition(partition_index=i, timestamp=-1) for i in range(MANY_PARTITIONS)])])
            t0 = time.monotonic()
            r1 = await w.call(fetch, 12)
            r2 = await w.call(offsets, 7)
            took = time.monotonic() - t0
            peak = b.rss_kb()
            await w.close()
            return rss0, peak, took, r1, r2
        rss0, peak, took, r1, r2 = asyncio.run(main())
        assert b.proc.poll() is None
        parts = r1.responses[0].partitions
        assert len(parts) == MANY_PARTITIONS and parts[0].error_code == 0
        assert all(p.error_code != 0 for p in parts[1:])          # only partition 0 exists
        assert len(r2.topics[0].partitions) == MANY_PARTITIONS
        assert peak - rss0 < 256 * 1024, f"RSS grew from {rss0} kB to {peak} kB"
        print(f"Fetch + ListOffsets of {MANY_PARTITIONS} partitions: {took:.2f} s, RSS {rss0} -> {peak} kB")


def test_slow_senders_hold_small_buffers_not_receive_buffers(tmp_path):
    """Connections with a few bytes of a frame received hold a SMALL_BUFFER each, never a pooled
    receive buffer; their frames, completed later, are answered."""
    async def main():
        async with running_broker(tmp_path) as b:
            wires = [await Wire.connect(b) for _ in range(50)]
            frame = encode_request(ApiVersionsRequest(), 0, 5)
            for w in wires:
                w.writer.write(frame[:6])
                await w.writer.drain()
            deadline = time.monotonic() + 10
            while sum(c._buf is not None for c in b._conn_states.values()) < 50:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert {len(c._buf) for c in b._conn_states.values()} == {connection.SMALL_BUFFER}
            for w in wires:
                w.writer.write(frame[6:])
                await w.writer.drain()
            for w in wires:
                corr, resp = await w.recv(18, 0)
                assert corr == 5 and resp.error_code == 0
                await w.close()
    asyncio.run(main())
