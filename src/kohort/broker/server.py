"""The broker process: asyncio TCP server (one listening socket per listener), lifecycle, the idle
connection reaper.

Each accepted connection is a `Connection` (broker/connection.py): frames cut from the received
bytes, answered in request order, back-pressure, SASL, sendfile for Fetch record sets.

Listeners (broker/security.py): one server socket per entry of `listeners` (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL); TLS is done by asyncio before the first byte is read.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import socket
import time
from typing import TYPE_CHECKING

from kohort.broker.acl_store import open_acl_store
from kohort.broker.config import BrokerConfig
from kohort.broker.connection import Connection
from kohort.broker.handlers import load_all
from kohort.broker.security import Listener, ScramStore
from kohort.errors import KohortError

if TYPE_CHECKING:
    from kohort.broker.faults import FaultPlan
    from kohort.storage.fs import MemoryFileSystem

log = logging.getLogger("kohort.broker")


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
        self._conn_states: dict[int, Connection] = {}      # open connections by id
        self._closers: list = []       # callables run on stop (reverse order)
        self._background: list[asyncio.Task] = []
        self.metrics = None
        self.faults: FaultPlan | None = None      # consulted per request (broker/faults.py; tests only)
        self.memory_fs: MemoryFileSystem | None = None   # without data_dir: the files to reopen (kohort.testing)
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
                loop = asyncio.get_running_loop()
                srv = await loop.create_server(
                    lambda lst=lst: Connection(self, lst), lst.host, lst.port, reuse_address=True, start_serving=False, ssl=lst.ssl_context,
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
            for conn_id, conn in list(self._conn_states.items()):
                if conn.idle() and now - conn.last_active > idle:
                    log.info("closing connection %d: idle for more than connections.max.idle.ms", conn_id)
                    conn.transport.abort()

    async def stop(self) -> None:
        for srv in self._servers:
            srv.close()
        for conn in list(self._conn_states.values()):
            conn.close()            # answers still pending are abandoned
        for t in self._background:
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
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
