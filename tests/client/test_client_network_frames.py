"""NetworkClient frame assembly against a scripted server that cuts its byte stream anywhere:
size prefixes split across reads, frames larger than what has arrived (received straight into
their own buffer), several frames in one read, and bad size prefixes."""
import socket
import struct
import threading
import time

import pytest

from kohort.client.network import NetworkClient
from kohort.errors import KafkaConnectionError
from kohort.protocol.framing import FrameReader, decode_request, encode_response
from kohort.protocol.messages.api_versions import ApiVersionsResponse
from kohort.protocol.messages.metadata import MetadataRequest, MetadataResponse


class ScriptedBroker:
    """Answers ApiVersions, then answers each batch of `batch` Metadata requests with responses
    naming `topic_count(i)` topics, sent as one stream cut into the chunk sizes `cuts` (cycled),
    pausing between chunks so the client sees them as separate reads. `raw` replaces the Metadata
    answers with these bytes."""

    def __init__(self, batch, topic_count, cuts, raw=None):
        self.batch, self.topic_count, self.cuts, self.raw = batch, topic_count, cuts, raw
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _frames(self, conn, reader, n):
        out = []
        while len(out) < n:
            data = conn.recv(65536)
            if not data:
                return None
            out.extend(reader.feed(data))
        return out

    def _serve(self):
        conn, _ = self.srv.accept()
        with conn:
            reader = FrameReader()
            (hs,) = self._frames(conn, reader, 1)
            header, _ = decode_request(hs)
            keys = [ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3),
                    ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=8)]
            conn.sendall(encode_response(ApiVersionsResponse(error_code=0, api_keys=keys),
                                         header.request_api_version, header.correlation_id))
            i = 0
            while True:
                reqs = self._frames(conn, reader, self.batch)
                if reqs is None:
                    return
                if self.raw is not None:
                    stream = self.raw
                else:
                    parts = []
                    for payload in reqs:
                        h, _ = decode_request(payload)
                        topics = [MetadataResponse.MetadataResponseTopic(
                            error_code=0, name=f"topic-{i}-{t:05d}-" + "x" * 40, partitions=[])
                            for t in range(self.topic_count(i))]
                        parts.append(encode_response(MetadataResponse(brokers=[], topics=topics),
                                                     h.request_api_version, h.correlation_id))
                        i += 1
                    stream = b"".join(parts)
                pos, k = 0, 0
                while pos < len(stream):
                    step = self.cuts[k % len(self.cuts)]
                    k += 1
                    try:
                        conn.sendall(stream[pos:pos + step])
                    except OSError:
                        return
                    pos += step
                    time.sleep(0.002)

    def close(self):
        self.srv.close()
        self.thread.join(5)


@pytest.mark.parametrize("cuts", [
    [1, 2, 3, 5, 7, 30_001],         # prefixes and bodies split at every few bytes
    [6, 70_000, 3, 200_000],         # large frames completed across reads
    [1_000_000],                      # several whole frames per read
])
def test_responses_reassembled_whatever_the_cuts(cuts):
    counts = [0, 3, 1500, 1, 4000, 2, 0, 2500]
    broker = ScriptedBroker(batch=len(counts), topic_count=lambda i: counts[i % len(counts)], cuts=cuts)
    try:
        with NetworkClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"}) as nc:
            futs = [nc.send(-1, MetadataRequest(topics=[])) for _ in counts]
            resps = [f.result(30) for f in futs]
            assert [len(r.topics) for r in resps] == counts
            for i, r in enumerate(resps):
                assert all(t.name.startswith(f"topic-{i}-") for t in r.topics)
            assert nc.is_ready(-1)
    finally:
        broker.close()


@pytest.mark.parametrize("prefix", [struct.pack(">i", -5), struct.pack(">i", 100 * 1024 * 1024 + 1)])
def test_bad_size_prefix_closes_the_connection(prefix):
    broker = ScriptedBroker(batch=1, topic_count=lambda i: 0, cuts=[2, 2], raw=prefix + b"\0" * 8)
    try:
        with NetworkClient({"bootstrap.servers": f"127.0.0.1:{broker.port}",
                            "reconnect.backoff.ms": 10_000}) as nc:
            fut = nc.send(-1, MetadataRequest(topics=[]))
            with pytest.raises(KafkaConnectionError, match="undecodable response"):
                fut.result(10)
    finally:
        broker.close()


# -- writes: gathered buffers, partial sends ------------------------------------------------------------
def test_drop_written_leaves_exactly_the_unwritten_bytes():
    from kohort.client.network import _drop_written
    pieces = [b"abc", bytearray(), memoryview(b"defgh")[1:], b"i", bytearray(b"jklmnop"), memoryview(bytearray(b"qr"))]
    whole = b"".join(pieces)
    for n in range(len(whole) + 1):
        out = list(pieces)
        _drop_written(out, n)
        assert b"".join(out) == whole[n:], n
        assert not out or len(out[0]), n                # nothing written whole or empty stays in front
        assert len(out) <= len(pieces)


class SlowSink:
    """Answers ApiVersions (Produce v3-v9), then reads the Produce requests that follow slowly through a
    small receive buffer, so the client's sends stop part-way through its buffers again and again;
    keeps each request frame's payload."""

    def __init__(self, expect: int):
        self.expect = expect
        self.frames: list[bytes] = []
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(1)
        self.port = self.srv.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.srv.accept()
        with conn:
            reader = FrameReader()
            frames = []
            while not frames:
                frames = reader.feed(conn.recv(4096))
            header, _ = decode_request(frames[0])
            keys = [ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3),
                    ApiVersionsResponse.ApiVersion(api_key=0, min_version=3, max_version=9)]
            conn.sendall(encode_response(ApiVersionsResponse(error_code=0, api_keys=keys),
                                         header.request_api_version, header.correlation_id))
            time.sleep(0.3)                   # the client's socket fills up: its requests queue
            reads = 0
            while len(self.frames) < self.expect:
                data = conn.recv(1500)
                if not data:
                    return
                self.frames += reader.feed(data)
                reads += 1
                if reads % 64 == 0:
                    time.sleep(0.001)

    def close(self):
        self.srv.close()
        self.thread.join(10)


def test_partial_writes_of_gathered_produce_requests_arrive_whole_and_in_order():
    """Produce requests whose batches go out by reference, written through a socket that takes a few
    KiB at a time: every request arrives byte for byte, in order, whatever the cuts."""
    from kohort.protocol.messages.produce import ProduceRequest
    from kohort.protocol.records import GATHER_MIN
    PD = ProduceRequest.TopicProduceData
    PPD = PD.PartitionProduceData
    rnd = __import__("random").Random(23)
    reqs = []
    for i in range(12):
        sizes = [rnd.choice([0, 7, GATHER_MIN - 1, GATHER_MIN, 50_000, 300_000]) for _ in range(rnd.randint(1, 4))]
        parts = [PPD(index=j, records=rnd.randbytes(n)) for j, n in enumerate(sizes)]
        reqs.append(ProduceRequest(transactional_id=None, acks=0, timeout_ms=1000,
                                   topic_data=[PD(name=f"t{i}", partition_data=parts)]))
    sink = SlowSink(len(reqs))
    try:
        with NetworkClient({"bootstrap.servers": f"127.0.0.1:{sink.port}", "send.buffer.bytes": 4096}) as nc:
            nc.send(-1, reqs[0], expect_response=False).result(10)
            futs = [nc.send(-1, r, expect_response=False) for r in reqs[1:]]
            for f in futs:
                f.result(10)
            deadline = time.monotonic() + 30
            while len(sink.frames) < len(reqs) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert len(sink.frames) == len(reqs)
        for i, (payload, req) in enumerate(zip(sink.frames, reqs)):
            header, body = decode_request(payload)
            assert header.request_api_version == 9 and header.correlation_id == i + 1
            assert body.topic_data[0].name == f"t{i}"
            assert [bytes(p.records) for p in body.topic_data[0].partition_data] \
                == [p.records for p in req.topic_data[0].partition_data]
    finally:
        sink.close()
