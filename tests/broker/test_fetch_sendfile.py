"""Fetch answers served with sendfile (issue 17): on a connection without TLS, large record sets go
from the segment file to the socket without passing through Python, in frames that decode exactly
as the copied ones did -- flexible (v12+) and non-flexible versions, several partitions, among
small answers -- and a slice stays readable after its segment is gone."""
from __future__ import annotations

import asyncio
import os

from kohort.protocol.framing import encode_request
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.records import build_batch, iter_records
from kohort.storage.fs import FileSlice, OsFileSystem
from tests.helpers.broker_wire import Wire, running_broker
from tests.broker.test_broker_protocol import create, produce

FT = FetchRequest.FetchTopic


def fetch_all(topic, parts, version):
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                        topics=[FT(topic=topic, partitions=[
                            FT.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=4 << 20)
                            for p in range(parts)])])


def test_large_fetch_answers_go_out_with_sendfile_and_decode_exactly(tmp_path, monkeypatch):
    calls = []
    real = os.sendfile

    def counting(out_fd, in_fd, offset, count):
        n = real(out_fd, in_fd, offset, count)
        calls.append(n)
        return n
    monkeypatch.setattr(os, "sendfile", counting)

    async def main():
        async with running_broker(tmp_path, {"log.flush.policy": "os"}) as b:
            w = await Wire.connect(b)
            await create(w, "big", partitions=3)
            sent = {}
            for p in range(3):
                recs = []
                for j in range(4):                       # 4 batches of ~100 KB per partition
                    rows = [(None, os.urandom(700) + b"%d-%d-%d" % (p, j, i), [], 1_700_000_000_000 + i)
                            for i in range(140)]
                    recs += [r[1] for r in rows]
                    r = await produce(w, "big", build_batch(rows), partition=p, acks=1)
                    assert r.error_code == 0
                sent[p] = recs
            await create(w, "small")
            await produce(w, "small", build_batch([(None, b"tiny", [], 1)]), acks=1)
            for version in (4, 11, 12):                  # int32 / compact lengths (v13+: topic ids)
                w.corr += 1
                w.writer.write(encode_request(fetch_all("big", 3, version), version, w.corr))
                w.corr += 1
                w.writer.write(encode_request(fetch_all("small", 1, version), version, w.corr))
                await w.writer.drain()
                corr, resp = await w.recv(1, version)
                assert corr == w.corr - 1
                got = {pd.partition_index: [r[3] for r in iter_records(bytes(pd.records))]
                       for pd in resp.responses[0].partitions}
                assert got == sent
                corr, resp = await w.recv(1, version)
                assert corr == w.corr
                assert [r[3] for r in iter_records(bytes(resp.responses[0].partitions[0].records))] == [b"tiny"]
            await w.close()
    asyncio.run(main())
    assert sum(calls) >= 3 * 3 * 4 * 140 * 700           # every big answer, 3 versions x 3 partitions


def test_a_slice_outlives_its_file(tmp_path):
    fs = OsFileSystem()
    path = str(tmp_path / "seg.log")
    h = fs.open(path)
    h.append(b"0123456789" * 10)
    s = FileSlice(h.dup(), 20, 30)
    h.close()
    os.remove(path)
    assert len(s) == 30 and s.read() == (b"0123456789" * 10)[20:50]
    s.close()
    s.close()                                            # idempotent


def test_a_slice_that_comes_up_short_ends_the_connection(tmp_path):
    """The frame's size prefix already counted the slice: if its file shrank, the writer must not
    send a frame of the wrong length -- it raises ConnectionError (the connection is closed)."""
    from kohort.broker.connection import _send_spliced
    from kohort.protocol.records import SpliceBuffer

    fs = OsFileSystem()
    path = str(tmp_path / "seg.log")
    h = fs.open(path)
    h.append(b"r" * 100_000)
    whole = FileSlice(h.dup(), 0, 100_000)
    short = FileSlice(h.dup(), 0, 100_000)

    async def main():
        outcome = {}
        got = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            for name, recs in (("whole", whole), ("short", short)):
                data = SpliceBuffer(b"head")
                data.splices.append((4, recs))
                data += b"tail"
                if name == "short":
                    h.truncate(50_000)
                try:
                    await _send_spliced(asyncio.get_running_loop(), writer.transport, data)
                    outcome[name] = "sent"
                except ConnectionError:
                    outcome[name] = "ConnectionError"
                    writer.close()
            got.set_result(None)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.wait_for(got, 10)
        first = await asyncio.wait_for(reader.readexactly(100_008), 10)
        writer.close()
        server.close()
        await server.wait_closed()
        return outcome, first

    outcome, first = asyncio.run(main())
    h.close()
    assert outcome == {"whole": "sent", "short": "ConnectionError"}
    assert first == b"head" + b"r" * 100_000 + b"tail"


def test_a_frame_the_socket_cannot_take_at_once_resumes_where_it_stopped(tmp_path):
    """`_splice_now` sends what the socket takes without waiting; with a small send buffer and a
    reader that has not started, it stops inside a slice and `_send_spliced` goes on from that byte:
    the reader gets the frame exactly, each slice once. A frame the socket takes whole is sent at once."""
    import socket

    from kohort.broker.connection import _send_spliced, _splice_now
    from kohort.protocol.records import SpliceBuffer

    fs = OsFileSystem()
    path = str(tmp_path / "seg.log")
    h = fs.open(path)
    body = os.urandom(1 << 20)
    h.append(body)

    def frame(a, b, c, d):
        data = SpliceBuffer(b"head")
        data.splices.append((4, FileSlice(h.dup(), a, b)))
        data += b"mid"
        data.splices.append((7, FileSlice(h.dup(), c, d)))
        data += b"tail"
        return data, b"head" + body[a:a + b] + b"mid" + body[c:c + d] + b"tail"

    async def main():
        done = asyncio.get_running_loop().create_future()
        resumed = []

        async def serve(reader, writer):
            t = writer.transport
            sock = t.get_extra_info("socket")
            small, expect_small = frame(10, 1000, 5000, 3000)
            assert _splice_now(sock.fileno(), t, small) is None          # taken whole, at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 * 1024)
            big, expect_big = frame(0, 1 << 19, 1 << 19, 1 << 19)
            rest = _splice_now(sock.fileno(), t, big)
            resumed.append(rest)
            if rest is not None:
                await _send_spliced(asyncio.get_running_loop(), t, big, *rest)
            done.set_result(expect_small + expect_big)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.05)                      # the server fills the socket before any read
        n = 4 + 1000 + 3 + 3000 + 4 + 4 + (1 << 19) + 3 + (1 << 19) + 4
        got = await asyncio.wait_for(reader.readexactly(n), 10)
        expect = await asyncio.wait_for(done, 10)
        writer.close()
        server.close()
        await server.wait_closed()
        return got, expect, resumed

    got, expect, resumed = asyncio.run(main())
    h.close()
    assert got == expect
    assert resumed[0] is not None and 0 <= resumed[0][2] < 1 << 19     # stopped inside a slice
