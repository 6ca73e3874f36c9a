"""The broker process: asyncio TCP server, per-connection request pipeline, lifecycle.

Per connection: frames are read one by one; the 4-byte size prefix is checked against
socket.request.max.bytes before the body is read. Each request is dispatched at once (handlers may
wait, e.g. fetch long polls or JoinGroup), but responses are written strictly in request order. A
malformed frame closes that connection only, with one log line. An unknown API key or version closes
the connection as Kafka does, except ApiVersions, which is answered with UNSUPPORTED_VERSION and the
supported ranges (KIP-511). Fetch answers on connections without TLS carry their large record sets as
FileSlices, written with sendfile between the encoded parts of the frame (`_send_spliced`, issue 17).

Listeners (broker/security.py): one server socket per entry of `listeners` (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL); TLS is done by asyncio before the first byte is read. On a SASL listener a
connection first goes through its `Authenticator` (only ApiVersions and the SASL exchange; frames capped
at sasl.server.max.receive.size); the principal it ends with is on every RequestContext of the
connection.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import signal
import socket
import time

from kohort.broker.acl_store import open_acl_store
from kohort.broker.config import BrokerConfig
from kohort.broker.context import RequestContext
from kohort.broker.handlers import HANDLERS, NO_RESPONSE, load_all
from kohort.broker.security import ANONYMOUS, CLOSE, FAIL, Authenticator, Listener, ScramStore, tls_principal
from kohort.errors import DecodeError, KohortError
from kohort.protocol.framing import (
    FrameTooLargeError, UnsupportedRequestError, encode_response_buffer, encode_response_spliced, frame_size,
    peek_request_header,
)
from kohort.protocol.headers import RequestHeader, request_header_version
from kohort.protocol.messages import REQUESTS
from kohort.protocol.primitives import Reader

log = logging.getLogger("kohort.broker")
conn_log = logging.getLogger("kohort.broker.connections")
_conn_ids = itertools.count(1)
WRITE_HIGH_WATER = 1 << 20     # unsent response bytes after which a connection is not read
PIPELINE_YIELD = 8             # queued requests after which the reader lets the writer run
COALESCE_BYTES = 64 * 1024     # ready answers joined into one write up to this size
FETCH = 1                      # the API whose record sets may be FileSlices (sent with sendfile)


def decode_request(payload):
    """framing.decode_request, but trailing bytes after the body are ignored as Kafka's broker does
    (it never checks for leftovers; librdkafka 2.16 sends 3 extra bytes in Metadata v13)."""
    api_key, version, corr = peek_request_header(payload)
    cls = REQUESTS.get(api_key)
    if cls is None or not (cls.MIN_VERSION <= version <= cls.MAX_VERSION):
        client_id = None
        try:
            client_id = Reader(payload, 8).nullable_string()
        except DecodeError:
            pass
        raise UnsupportedRequestError(api_key, version, corr, client_id)
    r = Reader(payload)
    header = RequestHeader.read(r, request_header_version(cls, version))
    return header, cls.decode(r, version, exact=False)


def advertised_address(advertised_listeners: str, listen_host: str, listen_port: int) -> tuple[str, int]:
    """The address told to clients: the first entry of advertised.listeners
    ("PLAINTEXT://host:port,..."), else the listen address, with a wildcard bind (0.0.0.0, ::, "")
    replaced by this machine's name as Kafka does."""
    first = advertised_listeners.split(",")[0].strip()
    if first:
        hostport = first.split("://", 1)[-1]
        host, sep, port = hostport.rpartition(":")
        if not sep or not port.isdigit():
            raise KohortError(f"advertised.listeners: expected NAME://HOST:PORT, got {first!r}")
        return host.strip("[]") or socket.getfqdn(), int(port)
    if listen_host in ("", "0.0.0.0", "::"):
        return socket.getfqdn(), listen_port
    return listen_host, listen_port


class _ConnState:
    """What the idle reaper needs to know about one connection."""
    __slots__ = ("writer", "pending", "busy", "last_active")

    def __init__(self, writer, pending, now: float):
        self.writer, self.pending, self.busy, self.last_active = writer, pending, False, now


class Broker:
    """One embedded broker. Components (storage, coordinator, ...) attach in `open()`."""

    def __init__(self, config: BrokerConfig | None = None, host: str = "127.0.0.1", port: int = 9092,
                 data_dir: str | None = None, listeners: list[Listener] | None = None):
        self.config = config or BrokerConfig.from_properties()
        # listeners: from `listeners` in the properties (security.build_listeners); without them one
        # PLAINTEXT listener on host:port. The first listener is the broker's main address.
        self.listeners = listeners or [Listener("PLAINTEXT", "PLAINTEXT", host, port)]
        host, port = self.listeners[0].host, self.listeners[0].port
        self.scram = ScramStore(data_dir)
        self.acls = open_acl_store(self.config, data_dir)      # None: no authorizer configured
        self._servers: list = []
        # host/port: what clients are told (Metadata, FindCoordinator, DescribeCluster); after
        # start() they are the advertised address, listen_host/port what the socket is bound to
        self.host, self.port = host, port
        self.listen_host, self.listen_port = host, port
        self.data_dir = data_dir
        self.node_id = self.config["node.id"]
        self.max_request = self.config["socket.request.max.bytes"]
        self.started_ms = int(time.time() * 1000)
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task] = set()
        self._conn_states: dict[int, _ConnState] = {}
        self._closers: list = []       # callables run on stop (reverse order)
        self._background: list[asyncio.Task] = []
        self.metrics = None
        load_all()

    # -- lifecycle ------------------------------------------------------------------------------
    async def open(self) -> None:
        """Open durable state and start components. Extended by the component modules."""
        from kohort.broker import components
        await components.open_components(self)

    async def start(self) -> None:
        # Bind first, accept later: a taken port is reported before storage is opened (recovery,
        # the data-dir lock, __consumer_offsets), and nobody is accepted before the components exist.
        try:
            for lst in self.listeners:
                srv = await asyncio.start_server(
                    functools.partial(self._serve, lst), lst.host, lst.port, limit=1 << 20,
                    reuse_address=True, start_serving=False, ssl=lst.ssl_context,
                    ssl_handshake_timeout=10.0 if lst.ssl_context else None)
                self._servers.append(srv)
            self._server = self._servers[0]
            await self.open()
        except BaseException:
            await self.stop()         # closes the sockets and whatever components did open
            raise
        for srv in self._servers:
            await srv.start_serving()
        for i, (lst, srv) in enumerate(zip(self.listeners, self._servers)):
            lst.port = srv.sockets[0].getsockname()[1]
            lst.advertised = self._advertised(lst, first=i == 0)
        self.listen_port = self.listeners[0].port
        self.host, self.port = self.listeners[0].advertised
        self.spawn(self._reap_idle())

    def _advertised(self, lst: Listener, first: bool) -> tuple[str, int]:
        """advertised.listeners' entry of the same name, else (the first listener) its first entry,
        else the bound address."""
        adv = self.config["advertised.listeners"]
        for entry in filter(None, (e.strip() for e in adv.split(","))):
            if entry.split("://", 1)[0].upper() == lst.name:
                return advertised_address(entry, lst.host, lst.port)
        return advertised_address(adv if first else "", lst.host, lst.port)

    async def _reap_idle(self) -> None:
        """Close connections idle longer than connections.max.idle.ms (nothing received, nothing
        being answered), as Kafka's selector does. <= 0 disables."""
        idle = self.config["connections.max.idle.ms"] / 1000
        if idle <= 0:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(max(idle / 4, 0.05), 30))
            now = loop.time()
            for conn_id, st in list(self._conn_states.items()):
                if not st.busy and st.pending.empty() and now - st.last_active > idle:
                    log.info("closing connection %d: idle for more than connections.max.idle.ms", conn_id)
                    st.writer.transport.abort()

    async def stop(self) -> None:
        for srv in self._servers:
            srv.close()
        for t in list(self._conns):
            t.cancel()
        for t in self._background:
            t.cancel()
        await asyncio.gather(*self._conns, *self._background, return_exceptions=True)
        for srv in self._servers:
            await srv.wait_closed()
        for close in reversed(self._closers):
            r = close()
            if inspect.isawaitable(r):
                await r

    def spawn(self, coro) -> asyncio.Task:
        """A background task owned by the broker, cancelled on stop."""
        t = asyncio.get_running_loop().create_task(coro)
        self._background.append(t)
        return t

    # -- connections -----------------------------------------------------------------------------
    async def _serve(self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A cancelled connection task must end normally: on Python 3.11 asyncio's stream callback
        # calls task.exception() on it, which raises for a cancelled task and logs a traceback.
        try:
            await self._serve_connection(listener, reader, writer)
        except asyncio.CancelledError:
            pass

    async def _serve_connection(self, listener: Listener, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._conns.add(task)
        conn_id = next(_conn_ids)
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else "?"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket as _s
            try:
                sock.setsockopt(_s.IPPROTO_TCP, _s.TCP_NODELAY, 1)
            except OSError:
                pass
        pending: asyncio.Queue = asyncio.Queue(maxsize=self.config["queued.max.requests"])
        writable = asyncio.Event()      # cleared while the client is not reading its answers
        writable.set()
        loop = asyncio.get_running_loop()
        st = self._conn_states[conn_id] = _ConnState(writer, pending, loop.time())
        wtask = loop.create_task(self._write_loop(pending, writer, conn_id, host, writable, st))
        m = self.metrics
        if m:
            m.connection_opened()
        principal = ANONYMOUS
        if listener.protocol == "SSL":
            principal = tls_principal(writer.get_extra_info("peercert"), listener.principal_mapper)
        auth = Authenticator(listener, self.scram) if listener.sasl else None
        sasl_max = min(self.max_request, self.config["sasl.server.max.receive.size"])
        peer_text = f"{host}:{peer[1]}" if peer and len(peer) > 1 else host
        t_open = loop.time()
        ev = {"conn": conn_id, "peer": peer_text, "listener": listener.name, "client_id": None,
              "principal": principal, "requests": 0}
        conn_log.debug("connection %d accepted from %s on listener %s", conn_id, peer_text, listener.name,
                       extra={"event": {"event": "connection-accepted", **ev}})
        try:
            if principal is None:       # no ssl.principal.mapping.rules rule applies: Kafka fails it too
                log.warning("closing connection %d from %s: no ssl.principal.mapping.rules rule applies to "
                            "its client certificate", conn_id, host)
                return
            while True:
                # Back-pressure: a client that does not read its responses stops being read from
                # (Kafka mutes such channels), so unread answers cannot pile up in memory.
                if not writable.is_set():
                    await writable.wait()
                if wtask.done():
                    break
                try:
                    prefix = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                try:
                    size = frame_size(prefix, self.max_request if auth is None or auth.complete else sasl_max)
                except FrameTooLargeError as e:
                    log.warning("closing connection %d from %s: request of %d bytes exceeds "
                                "socket.request.max.bytes=%d", conn_id, host, e.size, e.limit)
                    break
                except DecodeError as e:
                    log.warning("closing connection %d from %s: malformed frame: %s", conn_id, host, e)
                    break
                try:
                    payload = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                t0 = time.perf_counter()
                st.last_active = loop.time()
                if auth is not None and auth.raw:      # SaslHandshake v0: a raw token, no header
                    verdict, raw, reason = auth.on_raw_token(payload)
                    if verdict == CLOSE:
                        log.info("closing connection %d from %s: SASL authentication failed (%s)",
                                 conn_id, host, reason)
                        break
                    await pending.put((raw, 0, 0, 17, t0, size))
                    if auth.complete:
                        principal = auth.principal
                    continue
                try:
                    header, req = decode_request(payload)
                except UnsupportedRequestError as e:
                    if e.api_key == 18:
                        from kohort.broker.handlers.api_versions import unsupported_version_response
                        await pending.put((unsupported_version_response(), 0, e.correlation_id, 18, t0, 0))
                        continue
                    log.warning("closing connection %d from %s: unsupported request api_key=%d version=%d",
                                conn_id, host, e.api_key, e.api_version)
                    break
                except DecodeError as e:
                    log.warning("closing connection %d from %s: malformed request: %s", conn_id, host, e)
                    break
                api_key = header.request_api_key
                version = header.request_api_version
                if auth is not None and auth.complete:         # KIP-368 (broker/security.py)
                    if api_key == 17 and auth.begin_reauthentication():
                        pass                                   # the SASL exchange below, again
                    elif api_key != 17 and auth.session_expired():
                        log.info("closing connection %d from %s: SASL session expired (KIP-368)",
                                 conn_id, host)
                        await pending.put(None)                # answers already due still go out first
                        await asyncio.wait({wtask}, timeout=5)
                        break
                if auth is not None and not auth.complete:
                    if api_key == 18 and auth.allows_api_versions():
                        auth.on_api_versions()           # answered below like any ApiVersions
                    else:
                        verdict, resp, reason = auth.on_request(api_key, version, req)
                        if verdict == CLOSE:
                            log.warning("closing connection %d from %s: %s before authentication",
                                        conn_id, host, reason)
                            await pending.put(None)       # answers already due still go out first
                            await asyncio.wait({wtask}, timeout=5)
                            break
                        await pending.put((resp, version, header.correlation_id, api_key, t0, size))
                        if verdict == FAIL:
                            log.info("closing connection %d from %s: %s", conn_id, host, reason)
                            await pending.put(None)       # the writer sends the answer, then ends
                            await asyncio.wait({wtask}, timeout=5)
                            await asyncio.sleep(self.config["connection.failed.authentication.delay.ms"] / 1000)
                            break
                        if auth.complete:
                            principal = auth.principal
                        continue
                h = HANDLERS.get(api_key)
                if h is None or not (h.min_version <= version <= h.max_version):
                    if api_key == 18:
                        from kohort.broker.handlers.api_versions import unsupported_version_response
                        await pending.put((unsupported_version_response(), 0, header.correlation_id,
                                           18, t0, size))
                        continue
                    log.warning("closing connection %d from %s: api_key=%d version=%d not served",
                                conn_id, host, api_key, version)
                    break
                ev["requests"] += 1
                if ev["requests"] == 1 or ev["principal"] != principal:
                    ev["client_id"], ev["principal"] = header.client_id, principal
                    conn_log.info("connection %d %s from %s on listener %s: client id %s, principal %s", conn_id,
                                  "opened" if ev["requests"] == 1 else "authenticated", peer_text, listener.name,
                                  header.client_id, principal,
                                  extra={"event": {"event": "connection-opened" if ev["requests"] == 1
                                                   else "connection-authenticated", **ev}})
                ctx = RequestContext(self, api_key, version, header.correlation_id, header.client_id,
                                     host, conn_id, principal, listener)
                try:
                    result = h.fn(ctx, req)
                except Exception:
                    log.exception("handler for api_key=%d v%d failed; closing connection %d",
                                  api_key, version, conn_id)
                    break
                if inspect.isawaitable(result):
                    result = asyncio.ensure_future(result)
                await pending.put((result, version, header.correlation_id, api_key, t0, size))
                if pending.qsize() >= PIPELINE_YIELD:
                    await asyncio.sleep(0)      # let the writer catch up with a deep pipeline
        finally:
            # The client left (or broke the protocol): answers still pending (long polls, fsync
            # waits) are abandoned, as Kafka drops them when a channel closes. Work already done
            # (appends) stands; only the waiting stops.
            wtask.cancel()
            try:
                await wtask
            except (Exception, asyncio.CancelledError):
                pass
            writer.close()
            self._conns.discard(task)
            self._conn_states.pop(conn_id, None)
            if m:
                m.connection_closed()
            conn_log.log(logging.INFO if ev["requests"] else logging.DEBUG,
                         "connection %d closed from %s on listener %s: client id %s, principal %s, %d requests, "
                         "open %.1f s", conn_id, peer_text, listener.name, ev["client_id"], principal,
                         ev["requests"], loop.time() - t_open,
                         extra={"event": {"event": "connection-closed", **ev, "principal": principal,
                                          "seconds": round(loop.time() - t_open, 3)}})

    async def _write_loop(self, pending: asyncio.Queue, writer: asyncio.StreamWriter, conn_id: int,
                          host: str, writable: asyncio.Event, st: _ConnState) -> None:
        """Answers in request order. Small answers that are ready one after another (a pipeline
        of produce requests acknowledged by one fsync round) are joined into one write; an answer
        still being worked on first sends what is ready before it; large ones go out alone.
        `out` holds bytes only between awaits that do not suspend (a queue that is not empty, a
        future already done), so nothing ready waits on anything else."""
        m = self.metrics
        transport = writer.transport
        loop = asyncio.get_running_loop()
        out = bytearray()
        # record bytes of Fetch answers go out with sendfile where the OS can send them (no TLS)
        splice = transport.get_extra_info("sslcontext") is None and transport.get_extra_info("socket") is not None

        def send_out() -> None:
            nonlocal out
            if out:
                writer.write(memoryview(out))
                out = bytearray()

        try:
            while True:
                st.busy = False
                st.last_active = loop.time()
                if pending.empty():
                    send_out()
                    await writer.drain()
                item = await pending.get()
                if item is None:
                    send_out()
                    return
                st.busy = True
                result, version, corr, api_key, t0, in_bytes = item
                if isinstance(result, asyncio.Future):
                    if not result.done():
                        send_out()
                    try:
                        result = await result
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        send_out()
                        log.exception("handler for api_key=%d failed; closing connection %d", api_key, conn_id)
                        writer.close()
                        return
                if isinstance(result, bytes):      # a raw SASL token (SaslHandshake v0)
                    out += result
                    continue
                if result is NO_RESPONSE or result is None:
                    if m:
                        m.observe(api_key, time.perf_counter() - t0, in_bytes, 0, version)
                    continue
                if splice and api_key == FETCH:
                    data = encode_response_spliced(result, version, corr)
                    if data.splices:
                        send_out()
                        if m:
                            m.observe(api_key, time.perf_counter() - t0, in_bytes, data.frame_size, version)
                        await _send_spliced(loop, writer, data)
                        continue
                else:
                    data = encode_response_buffer(result, version, corr)
                if m:
                    m.observe(api_key, time.perf_counter() - t0, in_bytes, len(data), version)
                if len(data) >= COALESCE_BYTES:
                    send_out()
                    # a view: what the socket does not take at once is copied into the
                    # transport's buffer without first slicing (copying) the rest of the frame
                    writer.write(memoryview(data))
                else:
                    out += data
                    if len(out) >= COALESCE_BYTES:
                        send_out()
                if transport.get_write_buffer_size() + len(out) > WRITE_HIGH_WATER:
                    send_out()
                    writable.clear()
                    await writer.drain()
                    writable.set()
        except ConnectionError:
            pass
        finally:
            writable.set()
            # cancel whatever is still queued so nothing is left un-awaited
            while not pending.empty():
                item = pending.get_nowait()
                if item and isinstance(item[0], asyncio.Future):
                    item[0].cancel()


async def _send_spliced(loop, writer: asyncio.StreamWriter, data) -> None:
    """One frame whose record sets are FileSlices (issue 17): the encoded parts are written, each
    slice is sent by the OS (loop.sendfile: os.sendfile once the transport's buffer is empty). A
    slice that cannot be sent whole (its file shrank) ends the connection: the frame's size prefix
    already promised those bytes."""
    view = memoryview(data)
    prev = 0
    try:
        for pos, recs in data.splices:
            writer.write(view[prev:pos])
            prev = pos
            try:
                recs.fileno()
            except (AttributeError, OSError):       # not a file descriptor (in-memory storage)
                writer.write(recs.read())
                continue
            sent = await loop.sendfile(writer.transport, recs, recs.position, recs.size, fallback=False)
            if sent != recs.size:
                raise ConnectionError(f"sent {sent} of {recs.size} record bytes: the segment shrank")
        writer.write(view[prev:])
    finally:
        for _, recs in data.splices:
            recs.close()


async def run_broker(host: str, port: int, data_dir: str, config: BrokerConfig,
                     metrics_addr: str | None = None, ready_line: bool = True,
                     listeners: list[Listener] | None = None, console_addr: str | None = None,
                     console_writes: bool = False) -> None:
    """Run until SIGTERM/SIGINT; print the ready line once connections are accepted (with `listeners`
    configured, one line per listener before it; with the console, its line before it)."""
    broker = Broker(config, host, port, data_dir, listeners)
    await broker.start()
    if metrics_addr:
        from kohort.broker.metrics import serve_metrics
        mh, _, mp = metrics_addr.rpartition(":")
        try:
            await serve_metrics(broker, mh or "127.0.0.1", int(mp))
        except OSError:
            await broker.stop()           # close storage cleanly before reporting the error
            raise
    console = console_addr or config["console.listener"]
    if console:
        from kohort.broker.console import serve_console
        ch, _, cp = console.rpartition(":")
        try:
            await serve_console(broker, ch.strip("[]") or "127.0.0.1", int(cp),
                                allow_writes=config["console.allow.writes"] or console_writes,
                                lag_sample_ms=config["console.lag.sample.ms"])
        except OSError:
            await broker.stop()
            raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready_line:
        for lst in (broker.listeners if listeners else ()):     # `listeners` configured: name each
            print(f"kohort broker listener {lst.name} ({lst.protocol}) on {lst.host}:{lst.port}", flush=True)
        if getattr(broker, "console", None) is not None:
            c = broker.console
            print(f"kohort console on http://{c.host}:{c.port}/ ({'read-write' if c.allow_writes else 'read-only'})",
                  flush=True)
        print(f"kohort broker ready on {broker.listen_host}:{broker.listen_port}", flush=True)
    await stop.wait()
    await broker.stop()
