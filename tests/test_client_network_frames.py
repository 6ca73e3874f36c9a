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
