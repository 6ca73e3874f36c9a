"""The asyncio client core shared by AIOProducer, AIOConsumer and AIOAdmin: bootstrap, one
`AIOConnection` per broker (opened on first use, concurrent openers share one attempt), cluster
metadata as `client.cluster.Snapshot`s, and coordinator lookup (FindCoordinator, `client/requests.py`).

Connection settings by Kafka's names are taken as keyword arguments: `bootstrap_servers` (a string
"host:port,host:port" or a list), `client_id`, `request_timeout_ms`, `metadata_max_age_ms`,
`retry_backoff_ms`, `security_protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) with `ssl_context`
and `sasl_mechanism`/`sasl_plain_username`/`sasl_plain_password` (PLAIN, SCRAM-SHA-256/512).
"""
from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
import time
from dataclasses import dataclass

from kohort.aio.connection import AIOConnection, open_connection
from kohort.client.cluster import STALE_METADATA_ERRORS, PartitionInfo, Snapshot
from kohort.client.requests import (
    COORDINATOR_GROUP, find_coordinator_request, metadata_request, read_find_coordinator,
)
from kohort.errors import ErrorCode, KafkaConnectionError, KafkaTimeoutError, KohortError, for_code
from kohort.structs import TopicPartition

log = logging.getLogger("kohort.aio")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class ClientSettings:
    bootstrap_servers: list[tuple[str, int]]
    client_id: str = "kohort-aio"
    request_timeout_ms: int = 30000
    metadata_max_age_ms: int = 300000
    retry_backoff_ms: int = 100
    security_protocol: str = "PLAINTEXT"
    ssl_context: _ssl.SSLContext | None = None
    sasl: tuple | None = None

    @classmethod
    def make(cls, bootstrap_servers="localhost:9092", *, client_id: str = "kohort-aio",
             request_timeout_ms: int = 30000, metadata_max_age_ms: int = 300000, retry_backoff_ms: int = 100,
             security_protocol: str = "PLAINTEXT", ssl_context: _ssl.SSLContext | None = None,
             sasl_mechanism: str = "PLAIN", sasl_plain_username: str | None = None,
             sasl_plain_password: str | None = None) -> "ClientSettings":
        proto = security_protocol.upper()
        if proto not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, not {security_protocol!r}")
        if proto in ("SSL", "SASL_SSL") and ssl_context is None:
            ssl_context = _ssl.create_default_context()
        sasl = None
        if proto.startswith("SASL"):
            if sasl_plain_username is None:
                raise ValueError(f"security_protocol={proto} needs sasl_plain_username/sasl_plain_password")
            sasl = (sasl_mechanism, sasl_plain_username, sasl_plain_password or "")
        return cls(parse_bootstrap(bootstrap_servers), client_id, request_timeout_ms, metadata_max_age_ms,
                   retry_backoff_ms, proto, ssl_context if proto in ("SSL", "SASL_SSL") else None, sasl)


def parse_bootstrap(servers) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        try:
            out.append((host.strip("[]") or "localhost", int(port)))
        except ValueError:
            raise ValueError(f"bootstrap server {item!r} is not host:port") from None
    if not out:
        raise ValueError("bootstrap_servers names no broker")
    return out


def build_snapshot(resp, version: int) -> Snapshot:
    """A `Snapshot` from a Metadata answer."""
    s = Snapshot(updated_at=time.monotonic(), version=version)
    s.brokers = {b.node_id: (b.host, b.port, b.rack) for b in resp.brokers}
    s.cluster_id = resp.cluster_id
    s.controller_id = resp.controller_id
    internal = set()
    for t in resp.topics:
        if t.name is None:
            continue
        if t.error_code:
            s.topic_errors[t.name] = t.error_code
            if t.error_code != ErrorCode.LEADER_NOT_AVAILABLE:
                continue
        if t.is_internal:
            internal.add(t.name)
        s.topic_ids[t.name] = t.topic_id
        parts = []
        for p in t.partitions:
            parts.append(p.partition_index)
            s.partitions[TopicPartition(t.name, p.partition_index)] = PartitionInfo(
                p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes), p.error_code)
        s.topics[t.name] = sorted(parts)
    s.internal_topics = frozenset(internal)
    return s


class AIOClient:
    """Connections and metadata on the running loop. See the module docstring."""

    def __init__(self, settings: ClientSettings):
        self.settings = settings
        self.snapshot = Snapshot()
        self._topics: set[str] = set()
        self.all_topics = False
        self.auto_create = False          # Metadata asks the broker to create unknown topics (a producer's)
        self._conns: dict[int, AIOConnection] = {}
        self._opening: dict[int, asyncio.Future] = {}
        self._addresses: dict[int, tuple[str, int]] = {}
        self._meta_version = 0
        self._meta_task: asyncio.Future | None = None
        self._closed = False

    # -- connections ---------------------------------------------------------------------------------
    async def _open(self, host: str, port: int) -> AIOConnection:
        s = self.settings
        return await open_connection(host, port, client_id=s.client_id, ssl=s.ssl_context, sasl=s.sasl,
                                     timeout_ms=s.request_timeout_ms)

    def set_node_address(self, node_id: int, host: str, port: int) -> None:
        """Connection id `node_id` reaches host:port (coordinators get ids of their own)."""
        old = self._addresses.get(node_id)
        self._addresses[node_id] = (host, port)
        if old is not None and old != (host, port):
            conn = self._conns.pop(node_id, None)
            if conn is not None:
                conn.close()

    def connected(self, node_id: int) -> bool:
        """Whether the connection to `node_id` is open and ready now (a request to it is then
        written without waiting)."""
        conn = self._conns.get(node_id)
        return conn is not None and conn.is_open

    def api_versions(self, node_id: int) -> dict[int, tuple[int, int]] | None:
        """The API version ranges broker `node_id` announced on its open connection (None: not open)."""
        conn = self._conns.get(node_id)
        return conn.versions() if conn is not None and conn.is_open else None

    async def connection(self, node_id: int | None) -> AIOConnection:
        """The ready connection to `node_id` (None: any broker, the bootstrap ones at first)."""
        if self._closed:
            raise KohortError("client is closed")
        if node_id is None:
            for conn in self._conns.values():
                if conn.is_open:
                    return conn
            return await self._bootstrap_connection()
        conn = self._conns.get(node_id)
        if conn is not None and conn.is_open:
            return conn
        pending = self._opening.get(node_id)
        if pending is None:
            addr = self._addresses.get(node_id)
            if addr is None:
                b = self.snapshot.brokers.get(node_id)
                if b is None:
                    await self.refresh_metadata()
                    b = self.snapshot.brokers.get(node_id)
                    if b is None:
                        raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
                addr = (b[0], b[1])
            pending = asyncio.ensure_future(self._open(*addr))
            self._opening[node_id] = pending
            pending.add_done_callback(lambda f, n=node_id: self._opened(n, f))
        return await asyncio.shield(pending)

    def _opened(self, node_id: int, fut: asyncio.Future) -> None:
        self._opening.pop(node_id, None)
        if not fut.cancelled() and fut.exception() is None:
            conn = fut.result()
            conn.node_id = node_id
            if self._closed:
                conn.close()
            else:
                self._conns[node_id] = conn

    async def _bootstrap_connection(self) -> AIOConnection:
        errors = []
        for host, port in self.settings.bootstrap_servers:
            try:
                conn = await self._open(host, port)
            except KafkaConnectionError as e:
                errors.append(str(e))
                continue
            self._conns[-1 - len(self._conns)] = conn
            return conn
        raise KafkaConnectionError("no bootstrap server reachable: " + "; ".join(errors))

    async def request(self, node_id: int | None, request, *, timeout_ms: int | None = None, **kw):
        """Send `request` to `node_id` (None: any broker) and wait for its answer."""
        conn = await self.connection(node_id)
        t = self.settings.request_timeout_ms if timeout_ms is None else timeout_ms
        return await conn.request(request, timeout_ms=t, **kw)

    # -- metadata --------------------------------------------------------------------------------------
    def add_topics(self, topics) -> bool:
        new = set(topics) - self._topics
        self._topics |= new
        return bool(new)

    async def refresh_metadata(self, topics=None) -> Snapshot:
        """Fetch metadata for the tracked topics (and `topics`); concurrent callers share one request."""
        if topics:
            self.add_topics(topics)
        if self._meta_task is None or self._meta_task.done():
            self._meta_task = asyncio.ensure_future(self._fetch_metadata())
        return await asyncio.shield(self._meta_task)

    async def _fetch_metadata(self) -> Snapshot:
        wanted = None if self.all_topics else sorted(self._topics)
        last: BaseException | None = None
        for _ in range(3):
            try:
                resp = await self.request(None, metadata_request(wanted, allow_auto_topic_creation=self.auto_create))
                break
            except KafkaConnectionError as e:
                last = e
                await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
        else:
            raise last
        self._meta_version += 1
        snap = build_snapshot(resp, self._meta_version)
        for node, (host, port, _rack) in snap.brokers.items():
            self.set_node_address(node, host, port)
        self.snapshot = snap
        return snap

    async def metadata_for(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The partitions of `topic`, waiting (up to timeout_ms, default request_timeout_ms) for it to appear."""
        parts = self.snapshot.topics.get(topic)
        if parts and self._fresh():
            return parts
        deadline = time.monotonic() + (timeout_ms if timeout_ms is not None else self.settings.request_timeout_ms) / 1000
        while True:
            snap = await self.refresh_metadata([topic])
            parts = snap.topics.get(topic)
            if parts:
                return parts
            err = snap.topic_errors.get(topic, 0)
            if err and err not in STALE_METADATA_ERRORS:
                raise for_code(err)(f"metadata of topic {topic!r}")
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"topic {topic!r} not present in metadata in time")
            await asyncio.sleep(self.settings.retry_backoff_ms / 1000)

    def _fresh(self) -> bool:
        return time.monotonic() - self.snapshot.updated_at < self.settings.metadata_max_age_ms / 1000

    def leader_for(self, tp) -> int | None:
        info = self.snapshot.partitions.get(tp)
        return None if info is None or info.leader < 0 else info.leader

    # -- coordinators ----------------------------------------------------------------------------------
    async def find_coordinator(self, key: str, key_type: int = COORDINATOR_GROUP) -> int:
        """The connection id of the coordinator of `key` (Java: Integer.MAX_VALUE - node id)."""
        for _ in range(20):
            co = read_find_coordinator(await self.request(None, find_coordinator_request(key, key_type)))
            if co.error_code == 0:
                conn_id = 0x7FFFFFFF - co.node_id
                self.set_node_address(conn_id, co.host, co.port)
                return conn_id
            err = for_code(co.error_code)
            if not err.retriable:
                raise err(f"FindCoordinator for {key!r}: {co.error_message or ''}")
            await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
        raise KafkaTimeoutError(f"no coordinator found for {key!r}")

    async def close(self) -> None:
        self._closed = True
        for f in list(self._opening.values()):
            f.cancel()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self._meta_task is not None and not self._meta_task.done():
            self._meta_task.cancel()
        await asyncio.sleep(0)


__all__ = ["AIOClient", "ClientSettings", "build_snapshot", "parse_bootstrap"]
