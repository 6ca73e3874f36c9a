"""The fault proxy itself (tests/helpers/fault_proxy.py) on real loopback sockets, against an echo server and a
server that talks first: pass-through, delay, pause/resume, black hole (per direction), heal, reset,
refuse, per-connection faults, a broker that is down."""
import socket
import threading
import time

import pytest

from tests.helpers.fault_proxy import FaultProxy


class Echo:
    """A threaded TCP server: echoes what it receives; on b"hello?" it also says b"hi" first."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received = bytearray()
        self.peers: list[socket.socket] = []
        self.eofs = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.peers.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                return
            if not data:
                self.eofs += 1
                c.close()
                return
            self.received += data
            try:
                c.sendall(data)
            except OSError:
                return

    def push(self, data: bytes) -> None:
        """Send `data` from the server side on every open connection."""
        for c in self.peers:
            try:
                c.sendall(data)
            except OSError:
                pass

    def close(self):
        self.sock.close()
        for c in self.peers:
            c.close()


@pytest.fixture
def echo():
    e = Echo()
    yield e
    e.close()


@pytest.fixture
def proxy(echo):
    with FaultProxy(("127.0.0.1", echo.port)) as p:
        yield p


def connect(proxy) -> socket.socket:
    """A client connection, returned once the proxy has accepted it (so faults set next apply to it)."""
    before = proxy.accepted
    s = socket.create_connection((proxy.host, proxy.port), timeout=5)
    deadline = time.monotonic() + 5
    while proxy.accepted == before and time.monotonic() < deadline:
        time.sleep(0.005)
    return s


def recv_exactly(s, n, timeout=5.0) -> bytes:
    s.settimeout(timeout)
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError(f"EOF after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def nothing_within(s, seconds) -> bool:
    """True when no byte and no EOF arrives within `seconds` (the connection hangs, still open)."""
    s.settimeout(seconds)
    try:
        s.recv(1)
    except socket.timeout:
        return True
    return False                                   # bytes, or b"" (EOF)


def test_pass_through_both_directions_and_large_transfers(proxy, echo):
    s = connect(proxy)
    payload = bytes(range(256)) * 8192            # 2 MiB: partial writes, back-pressure
    t = threading.Thread(target=s.sendall, args=(payload,))
    t.start()
    got = recv_exactly(s, len(payload), timeout=20)
    t.join()
    assert got == payload
    s.close()


def test_delay_holds_every_chunk_and_keeps_order(proxy):
    proxy.delay(300, "c2s")
    s = connect(proxy)
    t0 = time.monotonic()
    for i in range(5):
        s.sendall(b"%d," % i)
    got = recv_exactly(s, 10)
    took = time.monotonic() - t0
    assert got == b"0,1,2,3,4,"
    assert 0.3 <= took < 3.0, took
    proxy.delay(0, "c2s")
    t0 = time.monotonic()
    s.sendall(b"x")
    assert recv_exactly(s, 1) == b"x" and time.monotonic() - t0 < 0.25
    s.close()


def test_pause_queues_and_resume_delivers_in_order(proxy, echo):
    s = connect(proxy)
    s.sendall(b"a")
    assert recv_exactly(s, 1) == b"a"
    proxy.pause("c2s")
    s.sendall(b"bcd")
    assert nothing_within(s, 0.5)
    assert bytes(echo.received) == b"a"           # held in the proxy, not delivered
    proxy.resume("c2s")
    assert recv_exactly(s, 3) == b"bcd"
    s.close()


def test_blackhole_one_direction_keeps_the_other_and_the_connection_open(proxy, echo):
    s = connect(proxy)
    s.sendall(b"hello")
    assert recv_exactly(s, 5) == b"hello"
    proxy.blackhole("c2s")
    s.sendall(b"lost")
    assert nothing_within(s, 0.5)                  # no answer, no EOF, no reset: it hangs
    assert bytes(echo.received) == b"hello"
    echo.push(b"server->client still flows")
    assert recv_exactly(s, 26) == b"server->client still flows"
    s.close()


def test_heal_resets_blackholed_connections_and_new_ones_work(proxy):
    s = connect(proxy)
    proxy.blackhole()
    s.sendall(b"x")
    assert nothing_within(s, 0.3)
    fresh_during = connect(proxy)                  # a connection made during the black hole is one too
    fresh_during.sendall(b"y")
    assert nothing_within(fresh_during, 0.3)
    proxy.heal()
    s.settimeout(3)
    with pytest.raises((ConnectionResetError, EOFError)):
        if not s.recv(1):
            raise EOFError
    t = connect(proxy)
    t.sendall(b"ok")
    assert recv_exactly(t, 2) == b"ok"
    for c in (s, fresh_during, t):
        c.close()


def test_heal_can_leave_blackholed_connections_hanging(proxy):
    s = connect(proxy)
    proxy.blackhole()
    proxy.heal(reset_blackholed=False)
    s.sendall(b"x")
    assert nothing_within(s, 0.5)                  # a connection that hangs without closing
    t = connect(proxy)
    t.sendall(b"ok")
    assert recv_exactly(t, 2) == b"ok"
    s.close()
    t.close()


def test_reset_closes_every_connection_with_rst(proxy, echo):
    a, b = connect(proxy), connect(proxy)
    for c in (a, b):
        c.sendall(b"1")
        assert recv_exactly(c, 1) == b"1"
    assert proxy.reset() == 2
    for c in (a, b):
        c.settimeout(3)
        with pytest.raises(ConnectionResetError):
            c.recv(1)
            c.sendall(b"more")
            c.recv(1)
    c = connect(proxy)                             # new connections are fine
    c.sendall(b"2")
    assert recv_exactly(c, 1) == b"2"
    c.close()


def test_faults_per_connection(proxy):
    a, b = connect(proxy), connect(proxy)
    for c in (a, b):
        c.sendall(b"0")
        recv_exactly(c, 1)
    conns = proxy.connections()
    assert len(conns) == 2
    conns[0].blackhole("both")
    a.sendall(b"a")
    b.sendall(b"b")
    assert recv_exactly(b, 1) == b"b"
    assert nothing_within(a, 0.3)
    assert conns[1].bytes_forwarded == {"c2s": 2, "s2c": 2}
    a.close()
    b.close()


def test_refuse_resets_new_connections(proxy):
    proxy.refuse()
    with pytest.raises((ConnectionResetError, EOFError)):
        s = connect(proxy)
        s.settimeout(3)
        try:
            if not s.recv(1):
                raise EOFError
        finally:
            s.close()
    proxy.refuse(False)
    s = connect(proxy)
    s.sendall(b"z")
    assert recv_exactly(s, 1) == b"z"
    s.close()


def test_client_eof_is_forwarded():
    e = Echo()
    with FaultProxy(("127.0.0.1", e.port)) as p:
        s = connect(p)
        s.sendall(b"bye")
        assert recv_exactly(s, 3) == b"bye"
        s.shutdown(socket.SHUT_WR)
        s.settimeout(3)
        assert s.recv(1) == b""                    # the server saw EOF, closed, and that came back
        deadline = time.monotonic() + 3
        while e.eofs == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert e.eofs == 1
        s.close()
    e.close()


def test_a_target_that_is_down_resets_the_client():
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()                                   # nothing listens there
    with FaultProxy(("127.0.0.1", port)) as p:
        with pytest.raises((ConnectionResetError, EOFError)):
            s = connect(p)                         # the reset may come before connect() returns
            s.settimeout(3)
            try:
                if not s.recv(1):
                    raise EOFError
            finally:
                s.close()


def test_bad_direction_is_refused(proxy):
    with pytest.raises(ValueError, match="direction"):
        proxy.delay(10, "up")
