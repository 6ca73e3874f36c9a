"""NetworkClient against real sockets: librdkafka's mock cluster, a dead port, a silent server."""
import socket
import threading
import time

import pytest

from kohort.client.cluster import Cluster
from kohort.client.config import load_config
from kohort.client.network import NetworkClient
from kohort.protocol.framing import Versioned
from kohort.errors import IncompatibleBrokerVersionError, KafkaConnectionError, KafkaTimeoutError
from kohort.protocol.messages.metadata import MetadataRequest
from tests.helpers.peers import create_topic, mock_cluster  # noqa: F401


def dead_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_handshake_negotiates_and_any_node_works(mock_cluster):
    with NetworkClient({"bootstrap.servers": mock_cluster}) as nc:
        fut = nc.send(None, MetadataRequest(topics=None))
        resp = fut.result(10)
        assert len(resp.brokers) == 3
        # the mock lists Metadata v13 but only ApiVersions v2: no flexible versions (first is v9)
        assert fut.api_version == 8
        nc.update_brokers({b.node_id: (b.host, b.port) for b in resp.brokers})
        futs = [nc.send(b.node_id, MetadataRequest(topics=[])) for b in resp.brokers]
        assert {f.result(10).cluster_id for f in futs} == {resp.cluster_id}
        assert nc.api_versions(resp.brokers[0].node_id)[3][1] >= 9


def test_pipelined_requests_resolve_in_order_from_many_threads(mock_cluster):
    with NetworkClient({"bootstrap.servers": mock_cluster}) as nc:
        results = []

        def worker():
            futs = [nc.send(None, MetadataRequest(topics=[])) for _ in range(200)]
            results.append(all(f.result(10).brokers for f in futs))
        ts = [threading.Thread(target=worker) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert results == [True] * 4


def test_versioned_request_and_explicit_version(mock_cluster):
    with NetworkClient({"bootstrap.servers": mock_cluster}) as nc:
        seen = []
        fut = nc.send(None, Versioned(3, lambda v: seen.append(v) or MetadataRequest(topics=[])), max_version=4)
        fut.result(10)
        assert seen == [4] and fut.api_version == 4
        with pytest.raises(IncompatibleBrokerVersionError, match="OffsetForLeaderEpoch"):
            from kohort.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
            nc.send(None, OffsetForLeaderEpochRequest(topics=[]), version=4).result(10)


def test_bootstrap_skips_dead_addresses(mock_cluster):
    first = mock_cluster.split(",")[0]
    bs = f"127.0.0.1:{dead_port()},127.0.0.1:{dead_port()},{first}"
    for _ in range(3):  # the random start must not matter
        with NetworkClient({"bootstrap.servers": bs}) as nc:
            assert nc.send(None, MetadataRequest(topics=[])).result(10).brokers


def test_all_bootstrap_dead_times_out_with_backoff():
    bs = f"127.0.0.1:{dead_port()}"
    with NetworkClient({"bootstrap.servers": bs, "request.timeout.ms": 600, "reconnect.backoff.ms": 50,
                        "reconnect.backoff.max.ms": 200}) as nc:
        t = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="no connection"):
            nc.send(None, MetadataRequest(topics=[])).result(5)
        assert 0.5 < time.monotonic() - t < 2
        assert nc._backoffs[-1].failures >= 2   # it kept retrying, backing off


def test_request_timeout_and_connection_loss():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    accepted = []

    def accept():
        c, _ = srv.accept()
        accepted.append(c)   # never answers (not even ApiVersions)
    threading.Thread(target=accept, daemon=True).start()
    try:
        with NetworkClient({"bootstrap.servers": f"127.0.0.1:{port}", "request.timeout.ms": 300,
                            "socket.connection.setup.timeout.ms": 400}) as nc:
            with pytest.raises((KafkaTimeoutError, KafkaConnectionError)):
                nc.send(-1, MetadataRequest(topics=[])).result(5)
    finally:
        srv.close()
        for c in accepted:
            c.close()


def test_unknown_node_fails_fast(mock_cluster):
    with NetworkClient({"bootstrap.servers": mock_cluster}) as nc:
        with pytest.raises(KafkaConnectionError, match="not known"):
            nc.send(99, MetadataRequest(topics=[])).result(5)


def test_on_done_gets_the_answer_or_the_error_once_and_a_raising_one_is_logged(mock_cluster, caplog):
    """send(on_done=fn): fn(response, None) or fn(None, error), straight from the I/O thread."""
    calls = []
    got = threading.Event()

    def fn(resp, err):
        calls.append((resp, err))
        got.set()

    def boom(resp, err):
        raise RuntimeError("callback bug")
    with NetworkClient({"bootstrap.servers": mock_cluster}) as nc:
        nc.send(None, MetadataRequest(topics=[]), on_done=boom)
        nc.send(None, MetadataRequest(topics=None), on_done=fn)
        assert got.wait(10)
        assert len(calls[0][0].brokers) == 3 and calls[0][1] is None
        got.clear()
        nc.send(99, MetadataRequest(topics=[]), on_done=fn)
        assert got.wait(5)
        assert calls[1][0] is None and isinstance(calls[1][1], KafkaConnectionError)
    assert len(calls) == 2
    assert "callback bug" in caplog.text


def test_closed_client_fails_futures(mock_cluster):
    nc = NetworkClient({"bootstrap.servers": mock_cluster})
    nc.close()
    with pytest.raises(KafkaConnectionError, match="closed"):
        nc.send(None, MetadataRequest(topics=[])).result(5)


def test_cluster_metadata(mock_cluster):
    n = create_topic(mock_cluster, "net-meta", 5)
    cfg = load_config("consumer", {"bootstrap.servers": mock_cluster})
    with NetworkClient(cfg) as nc:
        cl = Cluster(nc, cfg)
        snap = cl.wait_for_topics({"net-meta"}, 10)
        assert cl.partitions_for("net-meta") == list(range(n))
        leaders = {cl.leader_for(("net-meta", p)) for p in range(n)}
        assert leaders <= set(snap.brokers) and len(snap.brokers) == 3
        assert nc.brokers == cl.brokers
        v = snap.version
        cl.request_update()
        assert cl.refresh(10).version > v


def test_a_bootstrap_connection_becomes_the_connection_of_the_broker_at_its_address(mock_cluster):
    """Metadata names a broker at exactly the bootstrap address: that connection serves the broker
    (no second TCP connection and ApiVersions handshake before the broker's first request); a broker
    at another address gets its own."""
    with NetworkClient({"bootstrap.servers": mock_cluster}) as probe:
        brokers = probe.send(None, MetadataRequest(topics=[])).result(10).brokers
    first, other = brokers[0], brokers[1]
    with NetworkClient({"bootstrap.servers": f"{first.host}:{first.port}"}) as nc:
        resp = nc.send(None, MetadataRequest(topics=[])).result(10)
        assert set(nc.connection_states()) == {-1}
        nc.update_brokers({b.node_id: (b.host, b.port) for b in resp.brokers})
        assert nc.send(first.node_id, MetadataRequest(topics=[])).result(10).cluster_id == resp.cluster_id
        assert nc.connection_states() == {first.node_id: "READY"}
        nc.send(other.node_id, MetadataRequest(topics=[])).result(10)
        assert nc.connection_states() == {first.node_id: "READY", other.node_id: "READY"}


def test_a_leader_lookup_while_metadata_is_in_flight_sends_nothing_more(mock_cluster):
    """request_leaders for topics the Metadata request in flight already asks about waits for that
    answer instead of queueing the same request again."""
    create_topic(mock_cluster, "net-leaders", 2)
    cfg = load_config("consumer", {"bootstrap.servers": mock_cluster})
    # caller-driven: nothing is sent or answered between the test's steps until it polls
    with NetworkClient(cfg, io_thread=False) as nc:
        cl = Cluster(nc, cfg)
        v = cl.wait_for_topics({"net-leaders"}, 10).version       # polls for itself
        cl.request_update()
        inflight = cl.maybe_refresh()
        assert inflight is not None                # in flight
        cl.request_leaders({"net-leaders"})
        assert cl.maybe_refresh() is inflight      # the same request, nothing queued beside it
        deadline = time.monotonic() + 10
        while cl.snapshot.version == v and time.monotonic() < deadline:
            nc.poll(0.01)
        assert cl.snapshot.version == v + 1
        assert cl.maybe_refresh() is None          # nothing left due: no second request
        cl.request_leaders({"net-leaders-other"})  # not covered: asked for
        assert cl.maybe_refresh() is not None


def test_a_wake_up_during_the_drain_is_not_lost():
    """The I/O loop drains the wake-up socket; a send from another thread that wakes it at that moment
    must leave the loop wakeable. (Clearing the flag before the drain ate that byte and left the flag
    set: every later cross-thread send waited for the loop's 100 ms select timeout, e.g. a consumer's
    OffsetFetch after a rebalance.) The interleaving is forced: the drain's first recv() runs the
    other thread's wake-up."""
    import select as _select
    nc = NetworkClient({"bootstrap.servers": f"127.0.0.1:{dead_port()}"}, io_thread=False)
    try:
        real = nc._wake_r

        class MidDrain:
            fired = False

            def recv(self, n):
                if not MidDrain.fired:
                    MidDrain.fired = True
                    nc.wakeup()          # the other thread's send, right now
                return real.recv(n)

            def close(self):
                real.close()

        nc.wakeup()                      # a first cross-thread send: the loop has a wake-up to drain
        nc._wake_r = MidDrain()
        nc.poll(0)                       # the loop drains it (and meets the concurrent wake-up)
        assert MidDrain.fired
        nc.poll(0)
        nc.wakeup()                      # a later cross-thread send must make the loop's socket readable
        readable, _, _ = _select.select([real], [], [], 0)
        assert readable, "the wake-up was lost: the I/O loop would sleep until its select timeout"
    finally:
        nc.close()


def test_wait_ends_at_an_answer_a_wake_up_or_its_timeout(mock_cluster):
    """NetworkClient.wait (caller-driven): a thread that does not poll (the producer's I/O thread
    while the producing thread drives the I/O) waits without doing I/O until an answer can be read
    or a wake-up arrives, else for its whole timeout (to the microsecond: select, not epoll's
    milliseconds); the polling thread then does the I/O."""
    nc = NetworkClient({"bootstrap.servers": mock_cluster}, io_thread=False)
    try:
        nc.request(None, MetadataRequest(topics=[]), 10)      # connected, nothing in flight
        t = time.monotonic()
        nc.wait(0.0025)
        assert time.monotonic() - t >= 0.0025                # nothing to read: the whole timeout
        fut = nc.send(None, MetadataRequest(topics=[]))       # from a thread not polling: a wake-up
        t = time.monotonic()
        nc.wait(5)
        assert time.monotonic() - t < 1
        nc.poll(0)                                           # sends it (and drains the wake-up)
        t = time.monotonic()
        while not fut.done() and time.monotonic() - t < 10:
            nc.wait(5)                                       # ends when the answer is readable
            nc.poll(0)
        assert fut.result(0).brokers and time.monotonic() - t < 5
        nc.close()
        nc.wait(5)                                           # a closed client: no wait, no error
    finally:
        nc.close()


def test_the_client_protocol_runs_under_an_asyncio_loop(mock_cluster):
    """The sans-I/O connection NetworkClient drives from its thread runs unchanged under asyncio:
    a BufferedProtocol hands the loop the protocol's own buffer, so the loop receives into it as
    NetworkClient's recv_into does; answers come back with the handles (here futures) they were sent with."""
    import asyncio

    from kohort.protocol.framing import ClientProtocol

    class Conn(asyncio.BufferedProtocol):
        def __init__(self):
            self.proto = ClientProtocol("asyncio-test")
            self.ready = asyncio.get_running_loop().create_future()

        def connection_made(self, transport):
            self.transport = transport
            self.proto.initiate()
            transport.write(self.proto.data_to_send())

        def get_buffer(self, sizehint):
            return self.proto.get_buffer(sizehint)

        def buffer_updated(self, nbytes):
            for r in self.proto.buffer_updated(nbytes):
                r.handle.set_result((r.correlation_id, r.response))
            more = self.proto.data_to_send()
            if more:
                self.transport.write(more)
            if self.proto.ready and not self.ready.done():
                self.ready.set_result(None)

        def connection_lost(self, exc):
            for fut in self.proto.connection_lost():
                fut.set_exception(ConnectionError("lost"))

        def request(self, req):
            fut = asyncio.get_running_loop().create_future()
            _, data = self.proto.send_request(req, self.proto.pick(req.API_KEY), handle=fut)
            self.transport.write(data)
            return fut

    async def run():
        host, port = mock_cluster.split(",")[0].rsplit(":", 1)
        _, conn = await asyncio.get_running_loop().create_connection(Conn, host, int(port))
        await asyncio.wait_for(conn.ready, 10)
        futs = [conn.request(MetadataRequest(topics=None)) for _ in range(20)]
        got = await asyncio.wait_for(asyncio.gather(*futs), 10)
        in_flight = conn.proto.in_flight
        conn.transport.close()
        return got, in_flight

    got, in_flight = asyncio.run(run())
    assert in_flight == 0 and len(got) == 20
    assert [c for c, _ in got] == sorted(c for c, _ in got) and all(len(r.brokers) == 3 for _, r in got)
