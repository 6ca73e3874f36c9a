"""NetworkClient: every socket of one kohort client -- the one network layer of the producer, the
consumer, the admin and the Spark source.

One selector over non-blocking sockets; one connection per broker node id (bootstrap addresses get
negative ids -1, -2, ... until metadata names the brokers; a bootstrap connection to the very
host and port metadata gives a broker becomes that broker's connection rather than a second socket
and handshake to the same listener), each speaking through a sans-I/O
`ClientProtocol`, which owns the frames, the correlation ids, the requests in flight and the
ApiVersions/SASL handshake, and picks each request's version from what both sides support. This
module is sockets, TLS, selection, threads and time only.

Drive modes (Java's NetworkClient has one loop; who turns it is the only difference):
* background I/O thread (default; consumer, admin): `send()` from any thread, the thread does I/O;
* caller-driven (`io_thread=False`; the producer's hot path, the Spark driver and executors): the
  owner calls `poll(timeout)` -- the producing thread sends the batches it fills without a thread
  hand-off -- and `request(node, req)` is a blocking single request that polls until its answer.

`send(node_id, request, version=None) -> concurrent.futures.Future` is thread-safe. The future
resolves on the I/O thread with the decoded response (its `api_version` attribute tells the version
used), or fails with KafkaConnectionError (retriable: connection lost / refused) or
KafkaTimeoutError (request.timeout.ms passed; the connection is then closed, as Kafka does, because
later responses on it can no longer be trusted to line up). Callbacks added to the future run on
the I/O thread: they must be quick and must not block (they may call send()).

`node_id=None` means "any broker": the least loaded ready connection, else a new connection to a
random known broker or bootstrap address; a failed attempt moves the request on to the next
candidate, and when every candidate is backing off the request waits (reconnect.backoff.ms growing
exponentially with +-20% jitter up to reconnect.backoff.max.ms) until its timeout.

Security (`security.protocol`, librdkafka's names): SSL/SASL_SSL wrap the socket in TLS once TCP is
connected (non-blocking handshake in the selector loop; PEM files; host name checked unless
ssl.endpoint.identification.algorithm=none); SASL_* add the SASL exchange to ClientProtocol's
handshake. An authentication failure (TLS verification, SASL_AUTHENTICATION_FAILED,
UNSUPPORTED_SASL_MECHANISM) is fatal: every queued and later request fails with it at once, nothing
is retried. Re-authentication (KIP-368): when the broker gives the session a lifetime, at a random
85-95 % of it the connection holds new requests (REAUTH) until nothing is in flight, runs the SASL
exchange again through the handshake path (HANDSHAKE), then sends what it held (READY).

Speed: requests are encoded on the I/O thread and all requests queued for a connection go out in
one gathering sendmsg(), a Produce request's record batches by reference, never copied into a
request buffer (over TLS, which has no sendmsg, they are joined into one send()); reads use
recv_into on the buffer the connection's protocol hands out (`get_buffer`):
one big receive buffer shared by every connection of this client, from which complete small frames
are copied once, or, for a frame that does not fit in what has arrived, the rest of its own
bytearray sized from its prefix (no concatenation, no second copy of large Fetch responses). No
thread hop beyond the caller -> I/O thread queue and the future's completion.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import select
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable

from kohort.client.config import Config, load_config, parse_bootstrap, sasl_settings
from kohort.errors import (
    ConfigError, ConnectionClosedError, IncompatibleBrokerVersionError, KafkaConnectionError, KafkaTimeoutError,
    KohortError, SslAuthenticationError, is_authentication_error,
)
from kohort.protocol.framing import (
    ClientProtocol,
    HandshakeError,
    ProtocolViolation,
    UnsupportedVersionError,
    Versioned,
    encode_request_buffers,
)
from kohort.protocol.messages import REQUESTS, api_name
from kohort.version import __version__

# The client's own random source (bootstrap order, backoff and re-authentication jitter): the
# global `random` state belongs to the application, which may seed it or draw from it.
_RANDOM = random.Random()

log = logging.getLogger("kohort.client.network")

SOFTWARE_NAME = "kohort"
SOFTWARE_VERSION = __version__

# connection states
DISCONNECTED, CONNECTING, TLS, HANDSHAKE, READY = "DISCONNECTED", "CONNECTING", "TLS", "HANDSHAKE", "READY"
REAUTH = "REAUTH"      # KIP-368: new requests wait while what is in flight drains, then SASL runs again

_RECV_BUF = 4 * 1024 * 1024
_MAX_FRAME = 100 * 1024 * 1024
_IOV_MAX = 1024            # buffers one sendmsg may take (Linux's IOV_MAX)
_SENDMSG = hasattr(socket.socket, "sendmsg")     # not on Windows: there, as over TLS, buffers are joined


class _Req:
    __slots__ = ("node_id", "request", "version", "max_version", "expect", "future", "deadline", "any", "corr",
                 "response_class", "min_version")

    def __init__(self, node_id, request, version, max_version, expect, future, deadline, response_class=None,
                 min_version=None):
        self.response_class = response_class
        self.min_version = min_version
        self.node_id, self.request, self.version, self.max_version = node_id, request, version, max_version
        self.expect, self.future, self.deadline = expect, future, deadline
        self.any = node_id is None


class Completion:
    """What `send(..., on_done=fn)` returns instead of a Future: the parts of the Future protocol the
    network layer drives (set_running_or_notify_cancel, set_result, set_exception, done, cancelled,
    api_version), calling `fn(response, None)` or `fn(None, error)` directly, once, on the thread
    that completes it. No lock, no condition, no callback list: for a caller that only wants its
    function called (the producer's Produce answers), and that never cancels or waits on it.
    An exception from `fn` is logged, as a Future's callback's is."""
    __slots__ = ("fn", "finished", "api_version")

    def __init__(self, fn: Callable[[Any, BaseException | None], None]):
        self.fn = fn
        self.finished = False
        self.api_version: int | None = None

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return self.finished

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def set_result(self, result) -> None:
        self._finish(result, None)

    def set_exception(self, err: BaseException) -> None:
        self._finish(None, err)

    def _finish(self, result, err: BaseException | None) -> None:
        if self.finished:
            return
        self.finished = True
        try:
            self.fn(result, err)
        except Exception:
            log.exception("exception calling the completion %r", self.fn)


class _Conn:
    __slots__ = ("node_id", "host", "port", "sock", "state", "proto", "out", "pending",
                 "connect_deadline", "want_write", "events", "reauth_at")

    def __init__(self, node_id, host, port, proto: ClientProtocol):
        self.node_id, self.host, self.port = node_id, host, port
        self.sock: socket.socket | None = None
        self.state = DISCONNECTED
        self.proto = proto                      # requests in flight live here, as _Req handles
        self.out: list = []
        self.pending: deque[_Req] = deque()
        self.connect_deadline = 0.0
        self.want_write = False
        self.events = 0
        self.reauth_at = 0.0                    # KIP-368: when to re-authenticate (monotonic; 0 = never)


class _Backoff:
    __slots__ = ("failures", "until")

    def __init__(self):
        self.failures = 0
        self.until = 0.0


def tls_context(c: Config) -> ssl.SSLContext:
    """The client TLS context from librdkafka's ssl.* names (PEM files, or PEM strings in ssl.*.pem)."""
    try:
        ctx = ssl.create_default_context(cafile=c["ssl.ca.location"], cadata=c["ssl.ca.pem"])
        if c["ssl.endpoint.identification.algorithm"] in ("none", ""):
            ctx.check_hostname = False
        if c["ssl.certificate.location"]:
            ctx.load_cert_chain(c["ssl.certificate.location"], c["ssl.key.location"], c["ssl.key.password"])
        elif c["ssl.certificate.pem"]:
            # ssl's only way in is a file: a private one that lives only while it is read
            import tempfile
            with tempfile.TemporaryDirectory(prefix="kohort-pem-") as d:
                path = os.path.join(d, "client.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(c["ssl.key.pem"].strip() + "\n" + c["ssl.certificate.pem"].strip() + "\n")
                ctx.load_cert_chain(path, password=c["ssl.key.password"])
    except (OSError, ssl.SSLError, ValueError) as e:
        raise ConfigError(f"TLS settings (ssl.ca.* / ssl.certificate.* / ssl.key.*): {e}") from None
    return ctx


class NetworkClient:
    """All broker connections of one client. See the module docstring."""

    def __init__(self, config: Config | dict, role: str = "consumer", name: str | None = None,
                 io_thread: bool = True):
        self.config = config if isinstance(config, Config) else load_config(role, config)
        c = self.config
        self.client_id = c["client.id"]
        self._request_timeout = c["request.timeout.ms"] / 1000
        self._backoff_ms = c["reconnect.backoff.ms"]
        self._backoff_max_ms = max(c["reconnect.backoff.max.ms"], self._backoff_ms)
        self._setup_timeout = c["socket.connection.setup.timeout.ms"] / 1000
        self._rcvbuf = c["receive.buffer.bytes"]
        self._sndbuf = c["send.buffer.bytes"]
        proto = c["security.protocol"]
        self._tls = tls_context(c) if proto in ("ssl", "sasl_ssl") else None
        self._sasl = sasl_settings(c)    # (mechanism, user, password, OAUTHBEARER token source) or None
        self.fatal: BaseException | None = None   # an authentication failure: every request fails with it
        self._bootstrap = {-(i + 1): hp for i, hp in enumerate(parse_bootstrap(c["bootstrap.servers"]))}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._extra: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, _Conn] = {}
        self._backoffs: dict[int, _Backoff] = {}
        self._submit: deque = deque()
        self._any_queue: deque[_Req] = deque()
        self._disconnect_listeners: list[Callable[[int, BaseException], None]] = []
        self.stats = None        # kohort.client.stats.RequestStats when statistics.interval.ms is set
        self._closed = False
        self._shut = False
        self._ever_ready = False
        self.recent_errors: list[str] = []      # the last few connection failures, for error messages
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._wake_pending = False
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._buf = bytearray(_RECV_BUF)     # the receive buffer of every connection (read on one thread)
        self._next_check = 0.0
        self._poller = None            # caller-driven: the thread inside poll() right now
        self._thread = None
        if io_thread:
            self._thread = threading.Thread(target=self._run, name=name or f"kohort-io-{self.client_id}",
                                            daemon=True)
            self._thread.start()

    # -- public, thread-safe ---------------------------------------------------------------------
    def send(self, node_id: int | None, request, version: int | None = None, *, expect_response: bool = True,
             timeout_ms: int | None = None, max_version: int | None = None, response_class=None,
             min_version: int | None = None, at_once: bool = False,
             on_done: Callable[[Any, BaseException | None], None] | None = None) -> Future | Completion:
        """Queue `request` for broker `node_id` (None: any broker). See the module docstring.
        `response_class` decodes the answer instead of the registered Response class (same wire
        layout, e.g. a variant that tolerates a peer's null where the spec forbids one).
        `min_version`: fail with IncompatibleBrokerVersionError if the best common version is lower.
        `at_once` (called by the thread doing the I/O: the I/O thread, e.g. from an answer's
        callback, or in caller-driven mode the polling thread, e.g. from poll's `prepare`): encode
        and write it now when its connection is ready and nothing is queued before it, rather than
        when the loop's next turn reaches the queue. `on_done`: return a `Completion` calling
        `on_done(response, error)` instead of a Future (no lock, no callback list on the answer path)."""
        fut: Future | Completion = Future() if on_done is None else Completion(on_done)
        if self._closed:
            fut.set_exception(KafkaConnectionError("the client is closed"))
            return fut
        if self.fatal is not None:
            fut.set_exception(self.fatal)
            return fut
        t = self._request_timeout if timeout_ms is None else timeout_ms / 1000
        req = _Req(node_id, request, version, max_version, expect_response, fut, time.monotonic() + t,
                   response_class, min_version)
        me = threading.current_thread()
        if at_once and (me is self._thread or me is self._poller) and not self._submit:
            conn = self._conns.get(node_id)
            if conn is not None and conn.state == READY and not conn.pending:
                # a connection waiting to be writable gets it written when it is
                if self._dispatch(conn, req) and not conn.want_write:
                    self._flush(conn)
                return fut
        self._submit.append(req)
        if me is not self._thread and me is not self._poller:
            self._wake()
        return fut

    def request(self, node_id: int | None, request, timeout_s: float | None = None, **kw):
        """Send and wait for the response (blocking single request). In caller-driven mode this
        thread drives the I/O while it waits; raises what the future raises."""
        t = self._request_timeout if timeout_s is None else timeout_s
        fut = self.send(node_id, request, timeout_ms=int(t * 1000), **kw)
        if self._thread is None:
            deadline = time.monotonic() + t + 1.0
            while not fut.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaTimeoutError(f"{api_name(request.API_KEY)}: no answer within {t:.1f}s")
                self.poll(min(left, 0.1))
        return fut.result(t + 1.0)

    def poll(self, timeout_s: float = 0.0, prepare: Callable[[], float] | None = None,
             answers_first: bool = False) -> None:
        """Caller-driven mode (io_thread=False): do the I/O that is due -- queued requests out,
        responses in (their futures' callbacks run here), timeouts, reconnects -- waiting at most
        `timeout_s` for a socket to become ready. One thread at a time (the caller serialises).
        `prepare()`, when given, runs first as part of this poll (what it sends needs no wake-up)
        and returns the longest the wait may be (s). `answers_first` (with `timeout_s` 0): read
        what the sockets hold and complete those futures before `prepare()` runs, then write what
        it queued -- for a caller woken because an answer arrived, whose callbacks should not wait
        for prepare's work."""
        if self._thread is not None:
            raise KohortError("poll() is for a NetworkClient created with io_thread=False")
        if self._closed:
            self._shutdown_once()
            return
        self._poller = threading.current_thread()
        try:
            if answers_first and prepare is not None and timeout_s <= 0:
                self._step(0.0)
                prepare()
                if self._submit:
                    self._drain_submit(time.monotonic())
                return
            if prepare is not None:
                timeout_s = min(timeout_s, prepare())
            self._step(timeout_s)
        finally:
            self._poller = None

    def rehearse(self, node_id: int, request, *, max_version: int | None = None,
                 min_version: int | None = None) -> None:
        """Encode `request` as send() would for `node_id` (the version picked on its connection) and
        drop the bytes: nothing is queued, no correlation id taken. For a caller about to send a
        request of that shape: Python code that last ran milliseconds ago runs several times slower
        than code run a moment ago (caches, branch predictors), so running it just before the real
        send shortens the time from the deadline to the wire. Errors are left to the real send."""
        conn = self._conns.get(node_id)
        if conn is None or conn.state != READY:
            return
        try:
            v = conn.proto.pick(request.API_KEY, max_version, min_version)
            encode_request_buffers(request, v, 0, self.client_id)
        except Exception:  # noqa: BLE001,S110 - the real send reports what is wrong
            pass

    def ready(self, node_id: int) -> bool:
        """True when the connection to `node_id` has finished its handshake; otherwise a connection
        is started (unless it is backing off) and False is returned (Java's NetworkClient.ready)."""
        c = self._conns.get(node_id)
        if c is not None and c.state == READY:
            return True
        if c is None or c.state == DISCONNECTED:
            self._submit.append(("connect", node_id))
        return False

    @property
    def caller_driven(self) -> bool:
        """True for io_thread=False: the owner turns the loop with poll()."""
        return self._thread is None

    def has_connected(self) -> bool:
        """Whether any connection ever finished its handshake."""
        return self._ever_ready

    def unreachable_error(self, elapsed_s: float) -> KafkaConnectionError:
        """The clear error of a client that never reached any bootstrap broker."""
        return KafkaConnectionError(unreachable_message(
            [f"{h}:{p}" for h, p in self._bootstrap.values()], self.recent_errors, elapsed_s))

    def update_brokers(self, brokers: dict[int, tuple[str, int]]) -> None:
        """Replace the broker address book (from Metadata). Connections to moved brokers are closed."""
        self._brokers = dict(brokers)
        self._submit.append(("brokers", None))
        self._wake()

    def set_node_address(self, node_id: int, host: str, port: int) -> None:
        """Give an extra node id its own address (and so its own connection), e.g. the group
        coordinator under id 2**31-1-broker_id, so heartbeats never queue behind long-poll fetches."""
        self._extra = {**self._extra, node_id: (host, port)}
        self._submit.append(("brokers", None))
        self._wake()

    def add_disconnect_listener(self, fn: Callable[[int, BaseException], None]) -> None:
        """fn(node_id, error) is called on the I/O thread when a connection is lost."""
        self._disconnect_listeners.append(fn)

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        return dict(self._brokers)

    def is_ready(self, node_id: int) -> bool:
        c = self._conns.get(node_id)
        return c is not None and c.state == READY

    def in_flight(self, node_id: int) -> int:
        c = self._conns.get(node_id)
        return 0 if c is None else c.proto.in_flight

    def api_versions(self, node_id: int) -> dict[int, tuple[int, int]]:
        """The broker's ApiVersions ranges on the live connection to `node_id` ({} if none)."""
        c = self._conns.get(node_id)
        return dict(c.proto.versions) if c is not None else {}

    def connection_states(self) -> dict[int, str]:
        return {n: c.state for n, c in list(self._conns.items())}

    def wakeup(self) -> None:
        self._wake()

    def idle(self) -> bool:
        """Caller-driven mode: True when a poll now would find no work but timers -- nothing queued
        to send or route, no connection being set up, no request in flight (no answer to read) and no
        bytes waiting to be written. A read without the polling right: a stale answer only costs or
        saves one poll."""
        if self._submit or self._any_queue:
            return False
        for conn in list(self._conns.values()):
            state = conn.state
            if state != READY and state != DISCONNECTED or conn.out or conn.proto.in_flight:
                return False
        return True

    def wait(self, timeout_s: float) -> bool:
        """Caller-driven mode: block up to `timeout_s` until a socket of this client is ready for what
        the loop waits on (an answer to read, a connection made, room to write) or a wake-up arrives,
        without doing any I/O -- for a thread that does not hold the right to poll while another
        thread may (the producer's I/O thread beside its producing thread). Returns early, never
        late; a socket closed meanwhile only ends the wait. True when a connection's socket (not
        only the wake-up) was found ready."""
        if self._closed:
            return False
        rd = [self._wake_r.fileno()]
        wr = []
        for conn in list(self._conns.values()):
            sock = conn.sock
            ev = conn.events
            fd = sock.fileno() if sock is not None and ev else -1
            if fd >= 0:
                if ev & selectors.EVENT_READ:
                    rd.append(fd)
                if ev & selectors.EVENT_WRITE:
                    wr.append(fd)
        timeout_s = max(0.0, timeout_s)
        try:
            # select() keeps the timeout's microseconds (poll and epoll round it up to milliseconds)
            r, w, _ = select.select(rd, wr, (), timeout_s)
            return bool(w) or len(r) > 1 or (len(r) == 1 and r[0] != rd[0])
        except ValueError:          # a descriptor beyond FD_SETSIZE: poll, to the millisecond
            p = select.poll()
            with contextlib.suppress(OSError, ValueError):
                for fd in rd:
                    p.register(fd, select.POLLIN)
                for fd in wr:
                    p.register(fd, select.POLLOUT | (select.POLLIN if fd in rd else 0))
                return any(fd != rd[0] for fd, _ in p.poll(int(timeout_s * 1000 + 0.999)))
            return False
        except OSError:
            return False

    def wakeup_fd(self) -> int:
        """The file descriptor of the wake-up socket's writing end: a byte sent to it ends the wait
        of poll() (the producer's native sealer sends one from its own thread). Valid until close()."""
        return self._wake_w.fileno()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the I/O thread, close every socket and fail what is still outstanding. Caller-driven:
        call it from the thread that polls (or once nobody polls any more)."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            self._shutdown_once()
            return
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def disconnect_all(self, err: BaseException) -> None:
        """Close every connection, failing what is in flight on them with `err` (the polling
        thread only: caller-driven mode, or a callback on the I/O thread)."""
        for conn in list(self._conns.values()):
            if conn.state != DISCONNECTED:
                self._disconnect(conn, err)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- I/O thread -----------------------------------------------------------------------------------
    def _wake(self) -> None:
        if not self._wake_pending:
            self._wake_pending = True
            try:
                self._wake_w.send(b"\0")
            except OSError:
                pass

    def _drain_wake(self) -> None:
        """Empty the wake-up socket, THEN allow the next wake-up byte. The other order loses wake-ups
        for good: a _wake() between clearing the flag and the drain has its byte eaten and leaves the
        flag set, so every later send from another thread waits for the loop's select timeout."""
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._wake_pending = False

    def _run(self) -> None:
        try:
            while not self._closed:
                self._step(0.1)
        except BaseException as e:  # pragma: no cover - a bug: fail everything loudly rather than hang
            log.exception("kohort network thread crashed")
            self._shutdown(KafkaConnectionError(f"network thread crashed: {e!r}"))
            return
        self._shutdown(KafkaConnectionError("the client is closed"))

    def _step(self, timeout: float) -> None:
        """One round of the loop: queued work out, timers, then wait up to `timeout` for sockets."""
        now = time.monotonic()
        self._drain_submit(now)
        if now >= self._next_check:
            self._check_timeouts(now)
            self._route_any(now)
            self._next_check = now + 0.05
        if self._any_queue:
            timeout = min(timeout, 0.02)
        for key, ev in self._sel.select(timeout):
            conn = key.data
            if conn is None:
                self._drain_wake()
                continue
            if conn.state == CONNECTING:
                self._finish_connect(conn)
                continue
            if conn.state == TLS:
                self._tls_step(conn)
                continue
            if ev & selectors.EVENT_READ:
                self._read(conn)
            if ev & selectors.EVENT_WRITE and conn.sock is not None:
                self._flush(conn)

    def _shutdown_once(self) -> None:
        if not self._shut:
            self._shutdown(KafkaConnectionError("the client is closed"))

    def _shutdown(self, err: BaseException) -> None:
        self._closed = True
        self._shut = True
        for conn in list(self._conns.values()):
            self._disconnect(conn, err, reroute=False, notify=False)
        while self._submit:
            item = self._submit.popleft()
            if isinstance(item, _Req):
                _fail(item.future, err)
        while self._any_queue:
            _fail(self._any_queue.popleft().future, err)
        try:
            self._sel.close()
        finally:
            self._wake_r.close()
            self._wake_w.close()

    def _drain_submit(self, now: float) -> None:
        sub = self._submit
        touched = []
        while sub:
            req = sub.popleft()
            if not isinstance(req, _Req):
                if req[0] == "connect":
                    c = self._conns.get(req[1])
                    if c is None or c.state == DISCONNECTED:
                        self._connect(req[1], now)
                else:
                    self._on_brokers_changed()
                continue
            if req.future.cancelled():
                continue
            if req.node_id is None:
                conn = self._least_loaded_ready()
                if conn is None:
                    self._any_queue.append(req)
                    continue
            else:
                conn = self._conns.get(req.node_id)
                if conn is None or conn.state == DISCONNECTED:
                    conn = self._connect(req.node_id, now)
                    if conn is None:
                        if req.node_id in self._address_book():
                            # in backoff: wait for the next attempt within the request's deadline
                            self._any_queue.append(req)
                        else:
                            _fail(req.future, KafkaConnectionError(
                                f"broker {req.node_id} is not known (no address in metadata)"))
                        continue
            if conn.state == READY:
                if self._dispatch(conn, req):
                    touched.append(conn)
            else:
                conn.pending.append(req)
        if self._any_queue:
            self._route_any(now)
        for conn in touched:
            if conn.out:
                self._flush(conn)

    def _address_book(self) -> dict[int, tuple[str, int]]:
        book = dict(self._bootstrap)
        book.update(self._brokers)
        book.update(self._extra)
        return book

    def _least_loaded_ready(self) -> _Conn | None:
        best = None
        for conn in self._conns.values():
            if conn.state == READY and (best is None or conn.proto.in_flight < best.proto.in_flight):
                best = conn
        return best

    def _route_any(self, now: float) -> None:
        """Give queued any-broker requests a ready connection, or start connecting to one."""
        q = self._any_queue
        if not q:
            return
        keep: deque[_Req] = deque()
        while q:
            req = q.popleft()
            if req.future.cancelled():
                continue
            if req.deadline <= now:
                where = "any broker" if req.any else f"broker {req.node_id}"
                _fail(req.future, KafkaTimeoutError(
                    f"{_req_name(req)}: no connection to {where} within the request timeout"))
                continue
            if req.any:
                conn = self._least_loaded_ready()
                if conn is not None:
                    if self._dispatch(conn, req):
                        self._flush(conn)
                    continue
                keep.append(req)
            else:
                conn = self._conns.get(req.node_id)
                if conn is None or conn.state == DISCONNECTED:
                    conn = self._connect(req.node_id, now)
                if conn is None:
                    keep.append(req)
                elif conn.state == READY:
                    if self._dispatch(conn, req):
                        self._flush(conn)
                else:
                    conn.pending.append(req)
        self._any_queue = keep
        if any(r.any for r in keep) and not any(
                c.state in (CONNECTING, HANDSHAKE, REAUTH) for c in self._conns.values()):
            self._connect_any(now)

    def _connect_any(self, now: float) -> None:
        """Start one connection to a random broker not backing off: known brokers first, then bootstrap."""
        for group in (list(self._brokers), list(self._bootstrap)):
            _RANDOM.shuffle(group)
            for node_id in group:
                c = self._conns.get(node_id)
                if c is not None and c.state != DISCONNECTED:
                    continue
                if self._connect(node_id, now) is not None:
                    return

    def _connect(self, node_id: int, now: float) -> _Conn | None:
        b = self._backoffs.get(node_id)
        if b is not None and now < b.until:
            return None
        addr = self._address_book().get(node_id)
        if addr is None:
            return None
        conn = self._conns.get(node_id)
        if (conn is None or conn.state == DISCONNECTED) and node_id in self._brokers:
            adopted = self._adopt_bootstrap(node_id, addr)
            if adopted is not None:
                return adopted
        if conn is None or conn.host != addr[0] or conn.port != addr[1]:
            conn = _Conn(node_id, addr[0], addr[1], self._new_protocol())
            old = self._conns.get(node_id)
            if old is not None:
                conn.pending = old.pending
            self._conns[node_id] = conn
        try:
            infos = socket.getaddrinfo(conn.host, conn.port, 0, socket.SOCK_STREAM)
            family, stype, proto, _, sockaddr = infos[0]
            sock = socket.socket(family, stype, proto)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._rcvbuf > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._rcvbuf)
            if self._sndbuf > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._sndbuf)
            rc = sock.connect_ex(sockaddr)
        except OSError as e:
            self._conn_failed(conn, KafkaConnectionError(f"cannot connect to {conn.host}:{conn.port}: {e}"))
            return None
        if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
            sock.close()
            self._conn_failed(conn, KafkaConnectionError(
                f"cannot connect to {conn.host}:{conn.port}: {errno.errorcode.get(rc, rc)}"))
            return None
        conn.sock = sock
        conn.state = CONNECTING
        conn.proto = self._new_protocol()
        conn.out = []
        conn.connect_deadline = now + self._setup_timeout
        conn.events = selectors.EVENT_WRITE
        self._sel.register(sock, selectors.EVENT_WRITE, conn)
        return conn

    def _adopt_bootstrap(self, node_id: int, addr: tuple[str, int]) -> _Conn | None:
        """A live bootstrap connection to exactly `addr` becomes broker `node_id`'s connection (its
        requests in flight and pending go on as they are), so the first request to a broker that was
        also the bootstrap address needs no new TCP connection and ApiVersions handshake."""
        for bid, conn in self._conns.items():
            if bid < 0 and conn.state != DISCONNECTED and (conn.host, conn.port) == addr:
                del self._conns[bid]
                old = self._conns.get(node_id)
                if old is not None:
                    conn.pending.extend(old.pending)
                conn.node_id = node_id
                self._conns[node_id] = conn
                if self.stats is not None:
                    self.stats.on_connection_adopted(bid, node_id)
                log.debug("bootstrap connection %s (%s:%s) is broker %s's", bid, addr[0], addr[1], node_id)
                return conn
        return None

    def _finish_connect(self, conn: _Conn) -> None:
        err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._disconnect(conn, KafkaConnectionError(
                f"cannot connect to broker {conn.node_id} at {conn.host}:{conn.port}: "
                f"{errno.errorcode.get(err, err)}"))
            return
        if self._tls is not None:
            raw = conn.sock
            self._sel.unregister(raw)
            try:
                conn.sock = self._tls.wrap_socket(raw, server_hostname=conn.host, do_handshake_on_connect=False)
            except (OSError, ssl.SSLError) as e:
                raw.close()
                conn.sock = None
                self._disconnect(conn, KafkaConnectionError(f"TLS setup for {conn.host}:{conn.port} failed: {e}"))
                return
            self._sel.register(conn.sock, selectors.EVENT_WRITE, conn)
            conn.events = selectors.EVENT_WRITE
            conn.state = TLS
            self._tls_step(conn)
            return
        conn.state = HANDSHAKE
        self._set_events(conn, selectors.EVENT_READ)
        self._send_api_versions(conn)

    def _tls_step(self, conn: _Conn) -> None:
        """Advance the non-blocking TLS handshake; on success start the Kafka handshake."""
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._set_events(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._set_events(conn, selectors.EVENT_WRITE)
            return
        except ssl.SSLCertVerificationError as e:
            self._fatal_error(conn, SslAuthenticationError(
                f"TLS handshake with broker {conn.node_id} ({conn.host}:{conn.port}) failed: "
                f"{e.verify_message or e}; check ssl.ca.location and the broker's certificate "
                f"(ssl.endpoint.identification.algorithm=none skips the host name check)"))
            return
        except (ssl.SSLError, OSError) as e:
            self._disconnect(conn, KafkaConnectionError(
                f"TLS handshake with broker {conn.node_id} ({conn.host}:{conn.port}) failed: {e} "
                f"(is the listener TLS? security.protocol={'sasl_ssl' if self._sasl else 'ssl'})"))
            return
        conn.state = HANDSHAKE
        self._set_events(conn, selectors.EVENT_READ)
        self._send_api_versions(conn)

    def _fatal_error(self, conn: _Conn, err: BaseException) -> None:
        """An authentication failure: remember it, fail every queued request with it, drop every
        connection (nothing is retried; send() fails at once from now on)."""
        log.info("authentication with broker %s (%s:%s) failed: %s", conn.node_id, conn.host, conn.port, err)
        self.fatal = err
        self.recent_errors = (self.recent_errors + [str(err)])[-6:]
        for c in list(self._conns.values()):
            if c is conn:
                self._disconnect(c, err)
            elif c.state != DISCONNECTED:
                self._disconnect(c, err, notify=False)
            for r in c.pending:
                _fail(r.future, err)
            c.pending = deque()
        while self._any_queue:
            _fail(self._any_queue.popleft().future, err)
        keep = deque()
        while self._submit:
            item = self._submit.popleft()
            if isinstance(item, _Req):
                _fail(item.future, err)
            else:
                keep.append(item)
        self._submit = keep

    def _new_protocol(self) -> ClientProtocol:
        return ClientProtocol(self.client_id, _MAX_FRAME, SOFTWARE_NAME, SOFTWARE_VERSION, sasl=self._sasl,
                              recv_buffer=self._buf)

    def _send_api_versions(self, conn: _Conn) -> None:
        conn.proto.initiate()
        conn.out.append(conn.proto.data_to_send())
        self._flush(conn)

    def _handshake_failed(self, conn: _Conn, e: KohortError) -> None:
        """The handshake raised: an authentication failure is fatal, anything else closes the
        connection as one that does not speak Kafka."""
        if is_authentication_error(e):
            self._fatal_error(conn, e)          # closes conn; _read sees conn.sock None
            return
        if not isinstance(e, HandshakeError):
            raise e
        self._disconnect(conn, KafkaConnectionError(
            f"broker {conn.node_id} ({conn.host}:{conn.port}) did not complete the ApiVersions handshake: "
            f"{e}; is it a Kafka broker?"))

    def _handshake_progress(self, conn: _Conn) -> None:
        """After a read during the handshake: write its next request, or go READY when it is done."""
        proto = conn.proto
        again = proto.data_to_send()
        if again:                      # the handshake steps down to an older ApiVersions version
            conn.out.append(again)
            self._flush(conn)
            return
        if not proto.ready:
            return
        conn.state = READY
        log.debug("connected to broker %s (%s:%s)", conn.node_id, conn.host, conn.port)
        # KIP-368: re-authenticate at a random 85-95 % of the session lifetime, as Java's client
        lt = proto.session_lifetime_ms
        conn.reauth_at = time.monotonic() + lt / 1000 * _RANDOM.uniform(0.85, 0.95) if lt > 0 else 0.0
        self._ever_ready = True
        b = self._backoffs.get(conn.node_id)
        if b is not None:
            b.failures = 0
        pending, conn.pending = conn.pending, deque()
        for req in pending:
            self._dispatch(conn, req)
        self._route_any(time.monotonic())
        if conn.out:
            self._flush(conn)

    def _dispatch(self, conn: _Conn, req: _Req) -> bool:
        """Encode `req` onto `conn`'s output. False if it failed (future already failed)."""
        if req.future.cancelled():
            return False
        request = req.request
        api_key = request.API_KEY
        try:
            v = req.version
            if v is None:
                cap = req.max_version
                if isinstance(request, Versioned) and request.max_version is not None:
                    cap = request.max_version if cap is None else min(cap, request.max_version)
                v = conn.proto.pick(api_key, cap, req.min_version)
            else:
                conn.proto.check(api_key, v)
            if isinstance(request, Versioned):
                request = request.build(v)
            corr, data = conn.proto.send_request_buffers(request, v, expect_response=req.expect, handle=req,
                                                         response_class=req.response_class)
        except UnsupportedVersionError as e:
            cls = REQUESTS.get(api_key)
            ours = (cls.MIN_VERSION, cls.MAX_VERSION) if cls else (0, -1)
            err = IncompatibleBrokerVersionError(api_name(api_key), ours, conn.proto.versions.get(api_key))
            err.__cause__ = e
            _fail(req.future, err)
            return False
        except Exception as e:  # encoding errors belong to the caller
            _fail(req.future, e)
            return False
        conn.out += data
        if self.stats is not None:
            self.stats.on_request(conn.node_id, corr, api_key, sum(map(len, data)), req.expect)
        req.version = v
        req.future.api_version = v
        if req.expect:
            req.corr = corr
        else:
            fut = req.future
            fut.api_version = v
            if fut.set_running_or_notify_cancel():
                fut.set_result(None)
        return True

    def _flush(self, conn: _Conn) -> None:
        """Write what `conn.out` holds, as far as the socket takes it: in one gathering sendmsg of
        the buffers as they are (a Produce request's record batches by reference), or, over TLS
        (an SSLSocket has no sendmsg) and where sockets have no sendmsg, joined into one buffer
        first. What is left stays in `conn.out`, its first buffer cut where the write stopped, and
        EVENT_WRITE is asked for."""
        out = conn.out
        if out:
            try:
                if self._tls is None and _SENDMSG:
                    n = conn.sock.sendmsg(out if len(out) <= _IOV_MAX else out[:_IOV_MAX])
                else:
                    if len(out) > 1:
                        out[:] = [b"".join(out)]
                    n = conn.sock.send(out[0])
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                n = 0
            except OSError as e:
                self._disconnect(conn, KafkaConnectionError(
                    f"connection to broker {conn.node_id} ({conn.host}:{conn.port}) lost while sending: {e}"))
                return
            if len(out) == 1 and n == len(out[0]):
                out.clear()
            else:
                _drop_written(out, n)
        if out:
            if not conn.want_write:
                conn.want_write = True
                self._set_events(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)
        elif conn.want_write:
            conn.want_write = False
            self._set_events(conn, selectors.EVENT_READ)

    def _set_events(self, conn: _Conn, events: int) -> None:
        if conn.events != events and conn.sock is not None:
            conn.events = events
            self._sel.modify(conn.sock, events, conn)

    def _read(self, conn: _Conn) -> None:
        sock = conn.sock
        proto = conn.proto
        tls = self._tls is not None
        turn = 0
        while True:
            turn += 1
            buf = proto.get_buffer()
            want = len(buf)
            try:
                n = sock.recv_into(buf)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError as e:
                self._disconnect(conn, KafkaConnectionError(
                    f"connection to broker {conn.node_id} ({conn.host}:{conn.port}) lost: {e}"))
                return
            if n == 0:
                self._disconnect(conn, ConnectionClosedError(
                    f"broker {conn.node_id} ({conn.host}:{conn.port}) closed the connection"))
                return
            try:
                done = proto.buffer_updated(n)
            except ProtocolViolation as e:
                self._complete(conn, e.completed)
                self._disconnect(conn, KafkaConnectionError(f"undecodable response from broker {conn.node_id}: {e}"))
                return
            except KohortError as e:
                self._handshake_failed(conn, e)
                return
            if done:
                self._complete(conn, done)
            if conn.state == HANDSHAKE and conn.sock is not None:
                self._handshake_progress(conn)
            if conn.sock is None or conn.proto is not proto:
                return
            if tls:
                # One recv_into over TLS returns at most one TLS record (16 KiB), so a short read says
                # nothing about the socket: reading goes on until OpenSSL raises SSLWantReadError. Bytes
                # already decrypted (the rest of a record) are not seen by the selector, so they are
                # read also past the 64 reads one turn takes at most.
                if turn >= 64 and not sock.pending():
                    return
            elif n < want or turn >= 64:
                return

    def _complete(self, conn: _Conn, done: list) -> None:
        """Resolve the futures of the responses a read completed."""
        stats = self.stats
        for r in done:
            req = r.handle
            if stats is not None:
                stats.on_response(conn.node_id, req.corr, r.size)
            fut = req.future
            fut.api_version = req.version
            if fut.set_running_or_notify_cancel():
                fut.set_result(r.response)

    def _maybe_reauthenticate(self, conn: _Conn, now: float) -> None:
        """KIP-368: once due, hold new requests (REAUTH) until nothing is in flight, then run the SASL
        exchange again through the handshake path (HANDSHAKE, then READY with the held requests)."""
        if conn.state == READY:
            conn.state = REAUTH
        if conn.proto.in_flight:
            return
        try:
            conn.proto.start_reauthentication()
        except KohortError as e:           # the token callback failed: as any authentication failure
            if is_authentication_error(e):
                self._fatal_error(conn, e)
                return
            raise
        log.debug("re-authenticating with broker %s (%s:%s) (KIP-368)", conn.node_id, conn.host, conn.port)
        conn.state = HANDSHAKE
        conn.connect_deadline = now + self._setup_timeout
        conn.out.append(conn.proto.data_to_send())
        self._flush(conn)

    def _check_timeouts(self, now: float) -> None:
        for conn in list(self._conns.values()):
            if conn.reauth_at and now >= conn.reauth_at and conn.state in (READY, REAUTH):
                self._maybe_reauthenticate(conn, now)
            if conn.state in (CONNECTING, HANDSHAKE) and now > conn.connect_deadline:
                self._disconnect(conn, KafkaConnectionError(
                    f"connection setup to broker {conn.node_id} ({conn.host}:{conn.port}) timed out"))
                continue
            oldest = conn.proto.oldest_handle()
            if oldest is not None and oldest.deadline <= now:
                expired = [r for r in conn.proto.in_flight_handles() if r.deadline <= now]
                for r in expired:
                    _fail(r.future, KafkaTimeoutError(
                        f"{_req_name(r)} to broker {conn.node_id} got no response within the request timeout"))
                self._disconnect(conn, KafkaConnectionError(
                    f"connection to broker {conn.node_id} closed after a request timed out"))
                continue
            if conn.pending:
                keep = deque()
                for r in conn.pending:
                    if r.deadline <= now:
                        _fail(r.future, KafkaTimeoutError(
                            f"{_req_name(r)}: broker {conn.node_id} not ready within the request timeout"))
                    else:
                        keep.append(r)
                conn.pending = keep

    def _conn_failed(self, conn: _Conn, err: BaseException) -> None:
        self.recent_errors = (self.recent_errors + [str(err)])[-6:]
        b = self._backoffs.setdefault(conn.node_id, _Backoff())
        b.failures += 1
        delay = min(self._backoff_max_ms, self._backoff_ms * (2 ** min(b.failures - 1, 20)))
        delay *= _RANDOM.uniform(0.8, 1.2)
        b.until = time.monotonic() + delay / 1000
        conn.state = DISCONNECTED
        pending, conn.pending = conn.pending, deque()
        for r in pending:
            if r.any:
                self._any_queue.append(r)
            else:
                # a specific broker: fail fast so callers can re-route (e.g. look up a new leader)
                _fail(r.future, err)
        for fn in self._disconnect_listeners:
            try:
                fn(conn.node_id, err)
            except Exception:  # pragma: no cover
                log.exception("disconnect listener failed")

    def _disconnect(self, conn: _Conn, err: BaseException, reroute: bool = True, notify: bool = True) -> None:
        if conn.sock is not None:
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.sock.close()
            conn.sock = None
        conn.want_write = False
        conn.out = []
        for r in conn.proto.connection_lost():
            _fail(r.future, err)
        if not notify:
            for r in conn.pending:
                _fail(r.future, err)
            conn.pending = deque()
            conn.state = DISCONNECTED
            return
        log.debug("broker %s disconnected: %s", conn.node_id, err)
        self._conn_failed(conn, err)

    def _on_brokers_changed(self) -> None:
        for node_id, conn in list(self._conns.items()):
            if node_id < 0:
                continue
            addr = self._brokers.get(node_id) or self._extra.get(node_id)
            if addr is not None and (conn.host, conn.port) != addr and conn.state != DISCONNECTED:
                self._disconnect(conn, KafkaConnectionError(f"broker {node_id} moved to {addr[0]}:{addr[1]}"))


def unreachable_message(addresses, errors, elapsed_s: float) -> str:
    """The one-line error of a client that never reached any bootstrap broker (every client)."""
    tried = ", ".join(addresses)
    why = "; ".join(dict.fromkeys(errors)) if errors else "no answer"
    return (f"cannot reach any Kafka broker at {tried} ({why}) after {elapsed_s:.1f}s; check "
            f"bootstrap.servers (-b/--bootstrap-server or $KOHORT_BOOTSTRAP for the kohort command) "
            f"and that the broker is running and reachable")


def _drop_written(out: list, n: int) -> None:
    """Remove the first `n` bytes (just written) from the buffers in `out`: the buffers written
    whole go (and empty ones at the front), the one cut short becomes a memoryview of its rest."""
    i = 0
    k = len(out)
    while i < k and n >= len(out[i]):
        n -= len(out[i])
        i += 1
    if n:
        out[i] = memoryview(out[i])[n:]
    del out[:i]


def _fail(fut: Future, err: BaseException) -> None:
    if not fut.done() and fut.set_running_or_notify_cancel():
        fut.set_exception(err)


def _req_name(r: _Req) -> str:
    return api_name(r.request.API_KEY)


__all__ = ["Completion", "NetworkClient", "unreachable_message", "KafkaConnectionError", "KafkaTimeoutError", "KohortError",
           "DISCONNECTED", "CONNECTING", "HANDSHAKE", "READY"]
