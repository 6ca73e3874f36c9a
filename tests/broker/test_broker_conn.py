"""The broker's connection protocol (broker/connection.py) over real sockets: frames cut from the
received bytes however TCP splits or joins them, answers in request order, the size limit checked
before the body is read, a broken connection not affecting the others, back-pressure against a client
that does not read its answers."""
from __future__ import annotations

import asyncio
import os
import socket
import struct

from kohort.broker import connection
from kohort.protocol.framing import encode_request
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.protocol.messages.produce import ProduceRequest
from kohort.protocol.records import build_batch
from tests.helpers.broker_wire import Wire, batch, running_broker
from tests.broker.test_broker_protocol import create, fetch_req, produce, values

PT = ProduceRequest.TopicProduceData


def produce_frame(topic: str, records: bytes, corr: int, acks: int = -1) -> bytes:
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        PT(name=topic, partition_data=[PT.PartitionProduceData(index=0, records=records)])])
    return encode_request(req, 9, corr)


async def until(cond, timeout: float = 20.0) -> None:
    """Wait for a condition (no timing assertion: the deadline only keeps a broken test from hanging)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def nodelay_wire(b) -> Wire:
    w = await Wire.connect(b)
    w.writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return w


def test_many_frames_in_one_write_are_answered_in_order(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:      # fsync-before-ack: produce answers wait for rounds
            w = await Wire.connect(b)
            await create(w, "many")
            frames, expect = [], []
            for i in range(300):
                corr = 1000 + i
                if i % 3 == 0:
                    frames.append(produce_frame("many", batch(2, prefix=f"m{i}-"), corr))
                    expect.append((0, corr))
                elif i % 3 == 1:
                    frames.append(encode_request(MetadataRequest(topics=None, allow_auto_topic_creation=False),
                                                 12, corr))
                    expect.append((3, corr))
                else:
                    frames.append(encode_request(ApiVersionsRequest(), 0, corr))
                    expect.append((18, corr))
            w.writer.write(b"".join(frames))            # one write: the broker cuts 300 frames from it
            await w.writer.drain()
            offsets = []
            for api_key, corr in expect:
                got, resp = await w.recv(api_key, {0: 9, 3: 12, 18: 0}[api_key])
                assert got == corr
                if api_key == 0:
                    p = resp.responses[0].partition_responses[0]
                    assert p.error_code == 0
                    offsets.append(p.base_offset)
            assert offsets == [2 * i for i in range(100)]
            r = await w.call(fetch_req("many", 0), 12)
            assert values(r.responses[0].partitions[0].records)[:4] == [b"m0-0", b"m0-1", b"m3-0", b"m3-1"]
            await w.close()
    asyncio.run(main())


def test_frames_split_across_tiny_writes(tmp_path):
    """A small frame one byte per TCP segment, and a 0.9 MB produce (larger than the receive buffer:
    received into a buffer of its own that grows as bytes arrive) in odd-sized pieces, the size prefix
    split too."""
    big_rows = [(None, os.urandom(1000) + b"%d" % i, [], 1_700_000_000_000 + i) for i in range(850)]
    big = build_batch(big_rows)
    assert len(big) > 3 * connection.RECV_BUFFER

    async def main():
        async with running_broker(tmp_path, {"log.flush.policy": "os"}) as b:
            w = await nodelay_wire(b)
            await create(w, "split")
            frame = encode_request(ApiVersionsRequest(), 0, 7)
            for i in range(len(frame)):
                w.writer.write(frame[i:i + 1])
                await w.writer.drain()
                await asyncio.sleep(0.001)
            corr, resp = await w.recv(18, 0)
            assert corr == 7 and resp.error_code == 0
            frame = produce_frame("split", big, 8) + produce_frame("split", batch(1, prefix="after"), 9)
            pos, step = 0, 1
            while pos < len(frame):
                step = step * 3 % 65521 + 1             # 4, 13, 40, ... pieces of varying size
                w.writer.write(frame[pos:pos + step])
                pos += step
                await w.writer.drain()
            for corr in (8, 9):
                got, resp = await w.recv(0, 9)
                assert got == corr and resp.responses[0].partition_responses[0].error_code == 0
            got = []
            while len(got) < 851:
                r = await w.call(fetch_req("split", len(got), max_bytes=4 << 20, pmax=4 << 20), 12)
                got += values(r.responses[0].partitions[0].records)
            assert got == [row[1] for row in big_rows] + [b"after0"]
            await w.close()
    asyncio.run(main())


def test_large_frames_back_to_back_reuse_buffers_and_keep_every_byte(tmp_path):
    """Four 0.9 MB produces in one write on each of two connections (each frame's buffer taken
    whole once a quarter of it is in, later ones from the pool of buffers no one refers to any
    more), acks=all with fsync-before-ack: every record reads back as sent."""
    rows = [[(None, os.urandom(1000) + b"%d-%d" % (j, i), [], 1_700_000_000_000 + i) for i in range(850)]
            for j in range(8)]
    connection._BIG_POOL.clear()

    async def main():
        async with running_broker(tmp_path) as b:
            w1, w2 = await nodelay_wire(b), await nodelay_wire(b)
            await create(w1, "big")
            for n, w in enumerate((w1, w2)):
                w.writer.write(b"".join(produce_frame("big", build_batch(rows[4 * n + j]), 10 + j)
                                        for j in range(4)))
            for w in (w1, w2):
                for corr in range(10, 14):
                    got, resp = await w.recv(0, 9)
                    assert got == corr and resp.responses[0].partition_responses[0].error_code == 0
            got = []
            while len(got) < 8 * 850:
                r = await w1.call(fetch_req("big", len(got), max_bytes=8 << 20, pmax=8 << 20), 12)
                got += values(r.responses[0].partitions[0].records)
            assert sorted(got) == sorted(row[1] for batch_rows in rows for row in batch_rows)
            assert 0 < len(connection._BIG_POOL) <= connection._BIG_POOL_MAX
            await w1.close()
            await w2.close()
    asyncio.run(main())


def test_oversize_request_refused_before_its_body_and_after_earlier_answers(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"socket.request.max.bytes": "100000"}) as b:
            ok = await Wire.connect(b)
            r, wr = await asyncio.open_connection("127.0.0.1", b.listen_port)
            # a good request and, in the same write, a prefix over the limit with no body at all
            wr.write(encode_request(ApiVersionsRequest(), 0, 1) + struct.pack(">i", 100001))
            await wr.drain()
            size = struct.unpack(">i", await asyncio.wait_for(r.readexactly(4), 10))[0]
            await asyncio.wait_for(r.readexactly(size), 10)       # the first is answered
            assert await asyncio.wait_for(r.read(), 10) == b""    # then closed, body never sent
            wr.close()
            assert (await ok.call(ApiVersionsRequest(), 0)).error_code == 0
            await ok.close()
    asyncio.run(main())


def test_malformed_frame_closes_only_its_connection(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            good = await Wire.connect(b)
            await create(good, "calm")
            r, wr = await asyncio.open_connection("127.0.0.1", b.listen_port)
            await until(lambda: len(b._conn_states) == 2)
            junk = b"\x00\x00\xff\xff" + b"\xee" * 20     # api key 0, version 65535... then garbage
            wr.write(struct.pack(">i", len(junk)) + junk)
            await wr.drain()
            assert await asyncio.wait_for(r.read(), 10) == b""
            wr.close()
            await until(lambda: len(b._conn_states) == 1)
            assert (await produce(good, "calm", batch(2))).error_code == 0
            r2 = await good.call(fetch_req("calm", 0), 12)
            assert values(r2.responses[0].partitions[0].records) == [b"v0", b"v1"]
            await good.close()
    asyncio.run(main())


def test_a_client_that_does_not_read_is_not_read_and_others_are_served(tmp_path):
    """Pipelined ~1 MB fetches whose answers are never read: the broker stops reading that connection
    (its queue and unsent bytes stay bounded) and keeps serving another one."""
    async def main():
        async with running_broker(tmp_path, {"log.flush.policy": "os", "queued.max.requests": "50"}) as b:
            good = await Wire.connect(b)
            await create(good, "fat")
            for _ in range(2):
                assert (await produce(good, "fat", batch(1, prefix="z" * 500_000))).error_code == 0
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.connect(("127.0.0.1", b.listen_port))
            sock.setblocking(False)
            frame = encode_request(fetch_req("fat", 0, max_bytes=4 << 20, pmax=4 << 20), 12, 5)
            loop = asyncio.get_running_loop()
            await until(lambda: len(b._conn_states) == 2)
            lazy = max(b._conn_states.values(), key=lambda c: c.conn_id)
            sent = 0
            # the broker stops reading: our send buffer fills up, then the kernel takes no more
            while True:         # (the kernel's socket buffers take a few MB of ~80-byte frames)
                try:
                    await asyncio.wait_for(loop.sock_sendall(sock, frame * 1000), 3)
                    sent += 1000
                except asyncio.TimeoutError:
                    break
                assert sent < 500_000, "the broker kept reading a client that reads nothing"
            assert not lazy.transport.is_reading()
            assert len(lazy._pending) <= 50
            assert lazy.transport.get_write_buffer_size() <= connection.WRITE_HIGH_WATER + (4 << 20)
            r = await good.call(fetch_req("fat", 1, max_bytes=1000), 12)
            assert r.responses[0].partitions[0].error_code == 0
            sock.close()
            await until(lambda: len(b._conn_states) == 1)
            await good.close()
    asyncio.run(main())


def test_idle_connections_hold_no_receive_buffer(tmp_path):
    """Receive buffers go back to the shared pool once every byte is cut into frames, so many idle
    connections cost no buffer memory; a half-received frame keeps its bytes."""
    async def main():
        async with running_broker(tmp_path) as b:
            wires = [await Wire.connect(b) for _ in range(20)]
            for w in wires:
                assert (await w.call(ApiVersionsRequest(), 0)).error_code == 0
            await until(lambda: len(b._conn_states) == 20)
            assert all(c._buf is None and c._big is None for c in b._conn_states.values())
            frame = encode_request(ApiVersionsRequest(), 0, 99)
            wires[0].writer.write(frame[:-3])
            await wires[0].writer.drain()
            conn = min(b._conn_states.values(), key=lambda c: c.conn_id)
            await until(lambda: conn._buf is not None)
            wires[0].writer.write(frame[-3:])
            corr, resp = await wires[0].recv(18, 0)
            assert corr == 99 and resp.error_code == 0
            await until(lambda: conn._buf is None)
            for w in wires:
                await w.close()
    asyncio.run(main())
