"""The Kafka producer: `Producer(config).produce(topic, value, key=...) -> DeliveryFuture`.

What lives here:

* `Producer`: the public API (`produce`, `flush`, `close`, `partitions_for`), configured by Kafka's
  dotted names (`kohort.client.config`, role "producer"). Records are encoded into per-partition
  batches on the caller's thread (`accumulator.py`); one background I/O thread ("sender") sends ready
  batches to partition leaders and resolves futures.
* `BrokerLink`: one TCP connection to one broker (kohort's sans-I/O `ClientProtocol` over a socket):
  ApiVersions on connect, negotiated versions, pipelined requests with callbacks, requests without a
  response (acks=0). `Producer` drives its links with one selector (the Admin and the consumer use
  kohort.client.network instead).
* `Sender`: the I/O loop — metadata for the topics in use (refreshed when leaders move: NOT_LEADER,
  disconnects, unknown leaders), draining batches per leader, `max.in.flight.requests.per.connection`,
  `request.timeout.ms`, retries with backoff within `delivery.timeout.ms` (KIP-91).
* Idempotence (KIP-98, on by default as in Kafka 3.0+, KIP-679): InitProducerId, per-partition
  sequence numbers assigned once when a batch is first sent and kept on retry (the same bytes are
  re-sent); a partition with a batch to retry sends nothing else until the retries go out in sequence
  order. OUT_OF_ORDER_SEQUENCE_NUMBER for a batch behind a failed one is retried; for the next expected
  batch, and UNKNOWN_PRODUCER_ID, the producer waits until nothing is in flight, takes a new producer
  id/epoch and renumbers every unacknowledged batch from 0 in order (KIP-360's epoch bump, simplified).
  DUPLICATE_SEQUENCE_NUMBER counts as success.

Connection errors become one clear line naming the addresses tried and what to do
(`unreachable_message`, shared with the Admin).
"""
from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from collections import deque

from kohort.client.accumulator import DeliveryFuture, RecordAccumulator, RecordMetadata
from kohort.client.config import load_config, parse_bootstrap
from kohort.client.partitioner import DefaultPartitioner, murmur2
from kohort.errors import (
    ConfigError,
    ErrorCode,
    KafkaConnectionError,
    KafkaTimeoutError,
    KohortError,
    RecordTooLargeError,
    for_code,
)
from kohort.protocol.compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from kohort.protocol.framing import ClientProtocol, pick_version
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.protocol.messages.produce import ProduceRequest

_CODECS = {"none": COMPRESSION_NONE, "gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY,
           "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}
_PRODUCE_MIN_VERSION = 3            # the v2 record format (KIP-98)
_PRODUCE_MAX_VERSION = 12           # v13 addresses topics by id only (KIP-516)


_time_ns = time.time_ns


def _always(_node) -> bool:
    return True


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


# -- one connection ------------------------------------------------------------------------------------
class BrokerLink:
    """One connection to one broker. Not thread-safe: owned by one thread at a time."""

    def __init__(self, host: str, port: int, node_id: int, client_id: str = "kohort",
                 timeout_s: float = 10.0):
        self.host, self.port, self.node_id = host, port, node_id
        self.address = f"{host}:{port}"
        self.proto = ClientProtocol(client_id)
        self.callbacks: deque = deque()     # (correlation id, callback, sent at ms)
        self.out = bytearray()
        self.versions: dict[int, tuple[int, int]] = {}
        self.closed = False
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {self.address}: {e.strerror or e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            resp = self.request(ApiVersionsRequest(client_software_name="kohort",
                                                   client_software_version="0.1"), 3, timeout_s)
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                resp = self.request(ApiVersionsRequest(), 0, timeout_s)
        except (OSError, KohortError) as e:
            self.close()
            raise KafkaConnectionError(f"{self.address} accepted the connection but did not answer "
                                       f"ApiVersions ({e}); is it a Kafka broker?") from None
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        self.sock.setblocking(False)

    def version(self, request_cls, cap: int | None = None, floor: int | None = None) -> int:
        v = pick_version(request_cls.API_KEY, self.versions, cap)
        if floor is not None and v < floor:
            raise KohortError(f"{self.address} speaks {request_cls.__name__} only up to v{v}; "
                              f"kohort needs v{floor}+")
        return v

    # blocking use (connect handshake, Admin)
    def request(self, req, version: int | None = None, timeout_s: float = 30.0):
        if version is None:
            version = pick_version(type(req).API_KEY, self.versions)
        _, data = self.proto.send(req, version)
        sock = self.sock
        sock.settimeout(timeout_s)
        try:
            sock.sendall(data)
            while True:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    raise KafkaConnectionError(f"{self.address} closed the connection")
                got = self.proto.receive_data(chunk)
                if got:
                    return got[0][1]
        except socket.timeout:
            self.close()
            raise KafkaTimeoutError(f"{self.address} did not answer within {timeout_s}s") from None
        except OSError as e:
            self.close()
            raise KafkaConnectionError(f"connection to {self.address} failed: {e}") from None

    # non-blocking use (Producer's sender)
    def enqueue(self, req, version: int, callback, now_ms: int, expect_response: bool = True) -> None:
        corr, data = self.proto.send(req, version, expect_response)
        self.out += data
        if expect_response:
            self.callbacks.append((corr, callback, now_ms))
        elif callback is not None:
            callback(None, None)

    def flush_out(self) -> None:
        if self.out:
            try:
                n = self.sock.send(self.out)
            except BlockingIOError:
                return
            del self.out[:n]

    def read(self) -> list:
        """Read what is there; returns [(callback, response)]. Raises ConnectionError on EOF."""
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return []
        if not data:
            raise ConnectionError(f"{self.address} closed the connection")
        out = []
        for corr, resp in self.proto.receive_data(data):
            if self.callbacks and self.callbacks[0][0] == corr:
                out.append((self.callbacks.popleft()[1], resp))
        return out

    @property
    def in_flight(self) -> int:
        return len(self.callbacks)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


def unreachable_message(addresses, errors, elapsed_s: float) -> str:
    """The one-line error of a client that never reached any bootstrap broker (producer and admin)."""
    tried = ", ".join(addresses)
    why = "; ".join(dict.fromkeys(errors)) if errors else "no answer"
    return (f"cannot reach any Kafka broker at {tried} ({why}) after {elapsed_s:.1f}s; check "
            f"bootstrap.servers (-b/--bootstrap-server or $KOHORT_BOOTSTRAP for the kohort command) "
            f"and that the broker is running and reachable")


# -- cluster metadata (producer's view) ----------------------------------------------------------------
class _TopicInfo:
    __slots__ = ("name", "num_partitions", "leaders", "available", "error")

    def __init__(self, name, num_partitions, leaders, error=0):
        self.name = name
        self.num_partitions = num_partitions
        self.leaders = leaders                              # partition -> node id (or -1)
        self.available = [p for p, n in sorted(leaders.items()) if n >= 0]
        self.error = error


# -- the producer --------------------------------------------------------------------------------------
class Producer:
    """A Kafka producer. `produce()` is thread-safe and returns a DeliveryFuture per record."""

    def __init__(self, config=None, **overrides):
        cfg = dict(config or {})
        cfg.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.config = c = load_config("producer", cfg)
        self.bootstrap = parse_bootstrap(c["bootstrap.servers"])
        self.client_id = c["client.id"]
        self.acks = c["acks"]
        self.idempotent = bool(c["enable.idempotence"] and self.acks == -1
                               and c["max.in.flight.requests.per.connection"] <= 5
                               and c["transactional.id"] is None)
        if c["transactional.id"] is not None:
            raise ConfigError("transactional.id: transactions are not supported by kohort's producer yet")
        self.compression = _CODECS[c["compression.type"]]
        self.max_request_size = c["max.request.size"]
        self._max_record = min(self.max_request_size, c["buffer.memory"]) - 200   # cheap pre-check bound
        self.max_block_ms = c["max.block.ms"]
        self.request_timeout_ms = c["request.timeout.ms"]
        self.delivery_timeout_ms = c["delivery.timeout.ms"]
        self.retries = c["retries"]
        self.max_in_flight = c["max.in.flight.requests.per.connection"]
        self._key_ser = c["key.serializer"]
        self._value_ser = c["value.serializer"]
        custom = c["partitioner.class"]
        self._custom_partitioner = custom
        self._ignore_keys = c["partitioner.ignore.keys"]
        self.partitioner = DefaultPartitioner()
        self._sticky_now = self.partitioner.sticky._sticky    # topic -> current sticky partition
        self._hash_cache: dict[bytes, int] = {}              # key -> positive murmur2 (bounded)
        self._has_serializers = self._key_ser is not None or self._value_ser is not None
        self._topics: dict[str, _TopicInfo] = {}
        self._meta_cond = threading.Condition()
        self._closed = False
        self.acc = RecordAccumulator(
            batch_size=max(c["batch.size"], 1), linger_ms=c["linger.ms"], buffer_memory=c["buffer.memory"],
            max_block_ms=c["max.block.ms"], delivery_timeout_ms=c["delivery.timeout.ms"],
            retry_backoff_ms=c["retry.backoff.ms"], clock_ms=_now_ms, on_new_batch=self._on_batch_closed)
        self.sender = _Sender(self)
        self.acc.wakeup = self.sender.wakeup
        self.sender.thread.start()

    # -- public API -----------------------------------------------------------------------------------
    def produce(self, topic: str, value=None, key=None, headers=None, partition: int | None = None,
                timestamp: int | None = None, on_delivery=None) -> DeliveryFuture:
        """Queue one record; returns its future (thread-safe).

        on_delivery(err, metadata) runs where the I/O happens: on the producer's I/O thread, or inside
        a produce()/flush() call of the producing thread (as librdkafka runs callbacks in poll())."""
        if self._closed:
            raise KohortError("produce() on a closed producer")
        if self.sender.fatal is not None:
            raise self.sender.fatal
        if self._has_serializers:
            if self._key_ser is not None and key is not None:
                key = self._key_ser(key)
            if self._value_ser is not None and value is not None:
                value = self._value_ser(value)
        if value is not None and value.__class__ is not bytes:
            value = _as_bytes("value", value)
        if key is not None and key.__class__ is not bytes:
            key = _as_bytes("key", key)
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if size > self._max_record:
            self._check_record_size(size, headers)
        info = self._topics.get(topic)
        if info is None or info.error:
            info = self._wait_for_topic(topic)
        n = info.num_partitions
        sticky = False
        if partition is None:
            if self._custom_partitioner is not None:
                partition = self._custom_partitioner(topic, key, n)
            elif key is None or self._ignore_keys:
                partition = self._sticky_now.get(topic)
                if partition is None or partition >= n:
                    partition = self.partitioner.sticky.partition(topic, n, info.available)
                sticky = True
            else:
                h = self._hash_cache.get(key)
                if h is None:
                    h = murmur2(key) & 0x7FFFFFFF
                    if len(self._hash_cache) < 65536 and len(key) <= 256:
                        self._hash_cache[key] = h       # keys repeat: hash each once
                partition = h % n
        elif not 0 <= partition < n:
            raise KohortError(f"topic {topic!r} has partitions 0..{n - 1}; partition {partition} does not exist")
        if timestamp is None:
            timestamp = _time_ns() // 1_000_000
        acc = self.acc
        fut = None
        with acc.lock:     # the common case inline: the partition's open batch has room
            dq = acc.batches.get((topic, partition))
            if dq:
                last = dq[-1]
                if not last.closed:
                    fut = last.try_append(key, value, headers, timestamp)
                    wake = last.closed
        if fut is None:
            fut, wake = acc.append(topic, partition, key, value, headers, timestamp)
        if on_delivery is not None:
            fut.add_done_callback(_delivery_adapter(on_delivery))
        if wake:
            if sticky:     # KIP-480: the sticky partition's batch is full, stick to another one
                self.partitioner.sticky.on_new_batch(topic, n, info.available, partition)
            self.sender.poke()
        return fut

    send = produce

    def _check_record_size(self, size: int, headers) -> None:
        size += 90 + sum(len(k) + (len(v) if v is not None else 0) for k, v in (headers or ()))
        if size > self.max_request_size:
            raise RecordTooLargeError(f"a record of about {size} bytes is larger than max.request.size="
                                      f"{self.max_request_size}")
        if size > self.config["buffer.memory"]:
            raise RecordTooLargeError(f"a record of about {size} bytes is larger than buffer.memory="
                                      f"{self.config['buffer.memory']}")

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for the outcome; returns how many records are still pending."""
        acc = self.acc
        deadline = None if timeout is None else time.monotonic() + timeout
        with acc.lock:
            acc.flushing += 1
        try:
            self.sender.last_poke_ms = 0
            self.sender.wakeup()
            while True:
                with acc.lock:
                    pending = list(acc.incomplete)
                if not pending:
                    return 0
                for b in pending:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        with acc.lock:
                            return sum(x.count for x in acc.incomplete)
                    b.event().wait(left)
        finally:
            with acc.lock:
                acc.flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the I/O thread and close connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self.sender.stop()

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._wait_for_topic(topic).num_partitions))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals ------------------------------------------------------------------------------------
    def _on_batch_closed(self, topic: str, partition: int) -> None:
        info = self._topics.get(topic)
        if info is not None:
            self.partitioner.sticky.on_new_batch(topic, info.num_partitions, info.available, partition)

    def _wait_for_topic(self, topic: str) -> _TopicInfo:
        if not isinstance(topic, str) or not topic:
            raise KohortError(f"topic must be a non-empty string, got {topic!r}")
        deadline = time.monotonic() + self.max_block_ms / 1000.0
        with self._meta_cond:
            while True:
                info = self._topics.get(topic)
                if info is not None and not info.error:
                    return info
                if self.sender.fatal is not None:
                    raise self.sender.fatal
                self.sender.want_topic(topic)
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._meta_cond.wait(min(left, 0.2))
        with self.sender.lock:
            self.sender.wanted.discard(topic)    # stop asking for a topic nobody could find
        if self.sender.connect_errors and not self.sender.ever_connected:
            raise KafkaConnectionError(unreachable_message(
                [f"{h}:{p}" for h, p in self.bootstrap], self.sender.connect_errors, self.max_block_ms / 1000))
        if info is not None and info.error:
            err = for_code(info.error)
            raise err(f"topic {topic!r}: {err.description} (waited max.block.ms={self.max_block_ms}); "
                      f"create it first (kohort topics create {topic}) or check the name")
        raise KafkaTimeoutError(f"topic {topic!r} not found in the cluster metadata within max.block.ms="
                                f"{self.max_block_ms}; create it first (kohort topics create {topic})")


def _as_bytes(what: str, v):
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytes):
        return v
    raise KohortError(f"record {what} must be bytes or str (or set {what}.serializer), "
                      f"not {type(v).__name__}")


def _delivery_adapter(fn):
    def cb(fut: DeliveryFuture):
        b = fut.batch
        if b.error is not None:
            fn(b.error, None)
        else:
            fn(None, fut._metadata())
    return cb


# -- the I/O thread ------------------------------------------------------------------------------------
class _PartitionState:
    """Idempotence bookkeeping for one partition."""
    __slots__ = ("next_sequence", "in_flight", "last_acked")

    def __init__(self):
        self.next_sequence = 0
        self.in_flight = 0          # batches of this partition in flight
        self.last_acked = -1        # last acknowledged sequence


class _Sender:
    def __init__(self, producer: Producer):
        self.p = producer
        self.acc = producer.acc
        self.links: dict[int, BrokerLink] = {}          # node id -> link
        self.nodes: dict[int, tuple[str, int]] = {}
        self.backoff_until: dict[int, int] = {}
        self.sel = selectors.DefaultSelector()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self.sel.register(self._r, selectors.EVENT_READ, None)
        self._woken = False
        self.running = True
        self.fatal: BaseException | None = None
        self.wanted: set[str] = set()
        self.meta_needed = True
        self.meta_in_flight = False
        self.meta_last_ms = 0
        self.connect_errors: list[str] = []
        self.ever_connected = False
        self.producer_id = -1
        self.producer_epoch = -1
        self.pid_in_flight = False
        self.needs_bump = False
        self.parts: dict[tuple, _PartitionState] = {}
        self.lock = threading.Lock()
        self.io_lock = threading.Lock()          # whoever holds it drives the sockets
        self.stats = {"requests": 0, "retries": 0, "disconnects": 0, "epoch_bumps": 0}
        self.last_poke_ms = 0
        self.may_connect = True
        self.thread = threading.Thread(target=self.run, name="kohort-producer-io", daemon=True)

    # called from other threads
    def wakeup(self) -> None:
        if not self._woken:
            self._woken = True
            try:
                os.write(self._w, b"x")
            except (BlockingIOError, OSError):
                pass

    def want_topic(self, topic: str) -> None:
        with self.lock:
            if topic not in self.wanted:
                self.wanted.add(topic)
            self.meta_needed = True
        self.wakeup()

    def stop(self) -> None:
        self.running = False
        self.wakeup()
        self.thread.join(10)
        for link in list(self.links.values()):
            link.close()
        self.sel.close()
        os.close(self._r)
        os.close(self._w)

    # -- loop ------------------------------------------------------------------------------------------
    def run(self) -> None:
        """The I/O thread. While the producing thread is busy it does the I/O itself (`poke`), so
        this thread mostly sleeps, sparing GIL hand-offs; otherwise it selects on the sockets."""
        try:
            while self.running:
                if _now_ms() - self.last_poke_ms < 10:
                    time.sleep(0.002)
                    if self.io_lock.acquire(False):
                        try:
                            self.step(0.0)
                        finally:
                            self.io_lock.release()
                    continue
                with self.io_lock:
                    timeout_s = self.prepare()
                events = self.sel.select(timeout_s)
                with self.io_lock:
                    self.handle(events)
        except BaseException as e:  # noqa: BLE001 - a bug here must fail futures, not hang them
            self.fatal = KohortError(f"producer I/O thread crashed: {e!r}")
            with self.io_lock:
                self._fail_everything(self.fatal)
            raise
        with self.io_lock:
            self._fail_everything(KohortError("the producer was closed before these records were sent"))

    def poke(self) -> None:
        """Called by the producing thread when a batch filled: do the I/O now if nobody else is."""
        if self.io_lock.acquire(False):
            try:
                self.last_poke_ms = _now_ms()
                self.may_connect = False      # connecting may block: only the I/O thread does it
                self.step(0.0)
            finally:
                self.may_connect = True
                self.io_lock.release()
        else:
            self.wakeup()

    def step(self, timeout_s: float) -> None:
        t = self.prepare()
        self.handle(self.sel.select(min(t, timeout_s)))

    def prepare(self) -> float:
        """Timers, metadata, producer id, expiry, sending; returns how long select may wait (s)."""
        now = _now_ms()
        p = self.p
        timeout_ms = 100
        # metadata
        if self.meta_needed or now - self.meta_last_ms > p.config["metadata.max.age.ms"]:
            self._request_metadata(now)
        # producer id
        if p.idempotent and not self.pid_in_flight and (self.producer_id < 0 or self.needs_bump) \
                and self._total_in_flight() == 0:
            self._init_producer_id(now)
        # expiry of queued batches
        for b in self.acc.expired(now):
            if b.base_sequence >= 0 and p.idempotent:
                self.needs_bump = True       # its sequence numbers leave a gap: renumber (KIP-360)
            self._finish(b, -1, -1, KafkaTimeoutError(
                f"{b.count} record(s) for {b.topic}[{b.partition}] expired after delivery.timeout.ms="
                f"{p.delivery_timeout_ms} without being sent (no leader or broker unreachable)"))
        # send
        if not p.idempotent or (self.producer_id >= 0 and not self.needs_bump):
            nodes, next_ms, unknown = self.acc.ready(now, self._leader_of, _always)
            nodes = [n for n in nodes if self._node_ready(n)]
            timeout_ms = min(timeout_ms, next_ms)
            if unknown:
                with self.lock:
                    self.wanted |= unknown
                    self.meta_needed = True
            for node in nodes:
                self._send_to(node, now)
        self._check_request_timeouts(now)
        for link in list(self.links.values()):
            if link.out and not link.closed:
                try:
                    link.flush_out()
                except OSError as e:
                    self._link_failed(link, e)
        return timeout_ms / 1000.0

    def handle(self, events) -> None:
        for key, mask in events:
            link = key.data
            if link is None:
                try:
                    os.read(self._r, 4096)
                except BlockingIOError:
                    pass
                self._woken = False
                continue
            if link.closed:
                continue
            try:
                if mask & selectors.EVENT_WRITE:
                    link.flush_out()
                if mask & selectors.EVENT_READ:
                    for cb, resp in link.read():
                        cb(resp, None)
            except (OSError, KohortError) as e:
                self._link_failed(link, e)
                continue
            self._update_interest(link)

    def _update_interest(self, link: BrokerLink) -> None:
        if link.closed:
            return
        ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if link.out else 0)
        self.sel.modify(link.sock, ev, link)

    # -- connections -----------------------------------------------------------------------------------
    def _link(self, node: int, now: int):
        link = self.links.get(node)
        if link is not None and not link.closed:
            return link
        if self.backoff_until.get(node, 0) > now:
            return None
        if not self.may_connect:
            self.wakeup()
            return None
        addr = self.nodes.get(node)
        if addr is None:
            return None
        try:
            link = BrokerLink(addr[0], addr[1], node, self.p.client_id,
                              self.p.config["socket.connection.setup.timeout.ms"] / 1000.0)
        except KafkaConnectionError as e:
            self.connect_errors.append(str(e))
            del self.connect_errors[:-8]
            self.backoff_until[node] = now + self.p.config["reconnect.backoff.max.ms"]
            self.meta_needed = True
            return None
        self.ever_connected = True
        self.links[node] = link
        self.sel.register(link.sock, selectors.EVENT_READ, link)
        return link

    def _any_link(self, now: int):
        for node in list(self.links):
            link = self.links[node]
            if not link.closed and link.in_flight < self.p.max_in_flight:
                return link
        for node in list(self.nodes):
            link = self._link(node, now)
            if link is not None:
                return link
        for i, (host, port) in enumerate(self.p.bootstrap):
            bid = -1 - i
            if bid not in self.nodes:
                self.nodes[bid] = (host, port)
            link = self._link(bid, now)
            if link is not None:
                return link
        return None

    def _link_failed(self, link: BrokerLink, err) -> None:
        link.close()
        try:
            self.sel.unregister(link.sock)
        except (KeyError, ValueError, OSError):
            pass
        if self.links.get(link.node_id) is link:
            del self.links[link.node_id]
        self.backoff_until[link.node_id] = _now_ms() + self.p.config["reconnect.backoff.ms"]
        self.meta_needed = True
        self.stats["disconnects"] += 1
        cbs = list(link.callbacks)
        link.callbacks.clear()
        e = KafkaConnectionError(f"connection to {link.address} lost: {err}")
        for _, cb, _ in cbs:
            cb(None, e)

    def _check_request_timeouts(self, now: int) -> None:
        limit = self.p.request_timeout_ms
        for link in list(self.links.values()):
            if link.callbacks and now - link.callbacks[0][2] > limit:
                self._link_failed(link, f"no response within request.timeout.ms={limit}")

    def _node_ready(self, node: int) -> bool:
        link = self.links.get(node)
        if link is None or link.closed:
            link = self._link(node, _now_ms())
            if link is None:
                return False
        return link.in_flight < self.p.max_in_flight

    def _total_in_flight(self) -> int:
        return sum(s.in_flight for s in self.parts.values())

    # -- metadata --------------------------------------------------------------------------------------
    def _leader_of(self, topic: str, partition: int):
        info = self.p._topics.get(topic)
        if info is None:
            return None
        n = info.leaders.get(partition, -1)
        return n if n >= 0 and n in self.nodes else None

    def _request_metadata(self, now: int) -> None:
        if self.meta_in_flight or now - self.meta_last_ms < self.p.config["retry.backoff.ms"]:
            return
        with self.lock:
            topics = sorted(self.wanted | {t for t, i in self.p._topics.items() if not i.error})
            self.meta_needed = False
        link = self._any_link(now)
        self.meta_last_ms = now
        if link is None:
            self.meta_needed = True
            with self.p._meta_cond:
                self.p._meta_cond.notify_all()
            return
        v = link.version(MetadataRequest, cap=12)
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                              allow_auto_topic_creation=True)
        self.meta_in_flight = True
        link.enqueue(req, v, self._on_metadata, now)
        self._update_interest(link)

    def _on_metadata(self, resp, err) -> None:
        self.meta_in_flight = False
        if err is not None:
            self.meta_needed = True
            return
        nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
        for nid in [n for n in self.nodes if n >= 0 and n not in nodes]:
            del self.nodes[nid]
        self.nodes.update(nodes)
        topics = dict(self.p._topics)
        for t in resp.topics:
            if t.error_code:
                if t.error_code == ErrorCode.LEADER_NOT_AVAILABLE or for_code(t.error_code).retriable:
                    self.meta_needed = True
                if t.name not in topics or t.error_code != ErrorCode.LEADER_NOT_AVAILABLE:
                    topics[t.name] = _TopicInfo(t.name, 0, {}, t.error_code)
                continue
            leaders = {pp.partition_index: (pp.leader_id if not pp.error_code or pp.leader_id >= 0 else -1)
                       for pp in t.partitions}
            if any(n < 0 for n in leaders.values()):
                self.meta_needed = True
            topics[t.name] = _TopicInfo(t.name, len(t.partitions), leaders)
        self.p._topics = topics
        with self.p._meta_cond:
            self.p._meta_cond.notify_all()

    # -- producer id -----------------------------------------------------------------------------------
    def _init_producer_id(self, now: int) -> None:
        link = self._any_link(now)
        if link is None:
            return
        try:
            v = link.version(InitProducerIdRequest)
        except KohortError as e:
            if "enable.idempotence" not in self.p.config.given:
                self.p.idempotent = False      # idempotence was only the default: go on without it
                return
            self.fatal = KohortError(f"enable.idempotence=true but {link.address} cannot give producer ids: {e}")
            self._fail_everything(self.fatal)
            return
        bump = self.needs_bump and self.producer_id >= 0 and v >= 3
        req = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=2147483647,
                                    producer_id=self.producer_id if bump else -1,
                                    producer_epoch=self.producer_epoch if bump else -1)
        self.pid_in_flight = True
        link.enqueue(req, v, self._on_producer_id, now)
        self._update_interest(link)

    def _on_producer_id(self, resp, err) -> None:
        self.pid_in_flight = False
        if err is not None:
            return
        if resp.error_code:
            if not for_code(resp.error_code).retriable and resp.error_code not in (
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
                self.fatal = for_code(resp.error_code)("InitProducerId failed")
                self._fail_everything(self.fatal)
            return
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        if self.needs_bump:
            self.stats["epoch_bumps"] += 1
            self._renumber()
        self.needs_bump = False

    def _renumber(self) -> None:
        """New producer id/epoch: every unacknowledged batch gets sequences from 0, in queue order."""
        acc = self.acc
        with acc.lock:
            for tp, dq in acc.batches.items():
                st = self.parts.setdefault(tp, _PartitionState())
                st.next_sequence = 0
                st.last_acked = -1
                for b in dq:
                    if b.base_sequence >= 0:
                        b.seal(self.producer_id, self.producer_epoch, st.next_sequence, self.p.compression)
                        st.next_sequence += b.count
            for tp, st in self.parts.items():
                if tp not in acc.batches:
                    st.next_sequence, st.last_acked = 0, -1

    # -- produce ---------------------------------------------------------------------------------------
    def _can_send(self, tp, batch) -> bool:
        if not self.p.idempotent:
            return True
        st = self.parts.get(tp)
        if batch.base_sequence >= 0:            # a retry: only when nothing of this partition is in flight
            return st is None or st.in_flight == 0
        return st is None or st.in_flight < 5

    def _send_to(self, node: int, now: int) -> None:
        link = self.links.get(node)
        if link is None or link.closed:
            return
        tps = [tp for tp in self.acc.partitions() if self._leader_of(*tp) == node]
        batches = self.acc.drain(tps, self.p.max_request_size, now, self._can_send)
        if not batches:
            return
        p = self.p
        by_topic: dict[str, list] = {}
        for b in batches:
            if b.wire is None or (p.idempotent and b.producer_id != self.producer_id):
                seq = -1
                if p.idempotent:
                    st = self.parts.setdefault((b.topic, b.partition), _PartitionState())
                    seq = st.next_sequence
                    st.next_sequence = (seq + b.count) & 0x7FFFFFFF
                b.seal(self.producer_id, self.producer_epoch, seq, p.compression)
            if p.idempotent:
                self.parts[(b.topic, b.partition)].in_flight += 1
            b.in_flight = True
            by_topic.setdefault(b.topic, []).append(b)
        PD = ProduceRequest.TopicProduceData
        PPD = PD.PartitionProduceData
        req = ProduceRequest(transactional_id=None, acks=p.acks, timeout_ms=p.request_timeout_ms,
                             topic_data=[PD(name=t, partition_data=[PPD(index=b.partition, records=b.wire)
                                                                    for b in bs])
                                         for t, bs in by_topic.items()])
        v = link.version(ProduceRequest, cap=_PRODUCE_MAX_VERSION, floor=_PRODUCE_MIN_VERSION)
        self.stats["requests"] += 1
        if p.acks == 0:
            link.enqueue(req, v, None, now, expect_response=False)
            for b in batches:
                b.in_flight = False
                self._finish(b, -1, -1, None)
        else:
            link.enqueue(req, v, lambda resp, err: self._on_produce(batches, resp, err), now)
        try:
            link.flush_out()
        except OSError as e:
            self._link_failed(link, e)
            return
        self._update_interest(link)

    def _on_produce(self, batches, resp, err) -> None:
        now = _now_ms()
        results = {}
        if resp is not None:
            for t in resp.responses:
                for pr in t.partition_responses:
                    results[(t.name, pr.index)] = pr
        for b in batches:
            b.in_flight = False
            tp = (b.topic, b.partition)
            st = self.parts.get(tp)
            if st is not None:
                st.in_flight -= 1
            if err is not None:
                self._retry_or_fail(b, err, now, leader_moved=True)
                continue
            pr = results.get(tp)
            if pr is None:
                self._retry_or_fail(b, KohortError(f"no response for {tp[0]}[{tp[1]}] in ProduceResponse"),
                                    now, False)
                continue
            code = pr.error_code
            if code == 0 or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                if st is not None and b.base_sequence >= 0:
                    st.last_acked = b.base_sequence + b.count - 1
                self._finish(b, pr.base_offset, pr.log_append_time_ms, None)
                continue
            cls = for_code(code)
            e = cls(f"{tp[0]}[{tp[1]}]" + (f": {pr.error_message}" if pr.error_message else ""))
            if code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID) and \
                    self.p.idempotent:
                if code == ErrorCode.UNKNOWN_PRODUCER_ID or st is None or \
                        b.base_sequence == st.last_acked + 1 or st.last_acked < 0 and b.base_sequence == 0:
                    self.needs_bump = True   # the broker lost our state: new epoch, renumber
                self._retry_or_fail(b, e, now, False, force_retry=True)
                continue
            if cls.retriable:
                leader = code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.FENCED_LEADER_EPOCH,
                                  ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_ENOUGH_REPLICAS,
                                  ErrorCode.KAFKA_STORAGE_ERROR)
                self._retry_or_fail(b, e, now, leader)
            else:
                if st is not None and b.base_sequence >= 0:
                    self.needs_bump = True   # a hole in the sequence: restart numbering (KIP-360)
                self._finish(b, -1, -1, e)

    def _retry_or_fail(self, b, err, now: int, leader_moved: bool, force_retry: bool = False) -> None:
        if leader_moved:
            self.meta_needed = True
        if now - b.created_ms >= self.p.delivery_timeout_ms or (b.attempts >= self.p.retries and not force_retry):
            if b.base_sequence >= 0 and self.p.idempotent:
                self.needs_bump = True
            self._finish(b, -1, -1, err if isinstance(err, BaseException) else KohortError(str(err)))
            return
        self.stats["retries"] += 1
        self.acc.reenqueue(b, now)

    def _finish(self, b, base_offset: int, log_append_time: int, error) -> None:
        cbs = b.complete(base_offset, log_append_time, error)
        self.acc.release(b)
        for fut in cbs:
            for fn in fut.callbacks:
                try:
                    fn(fut)
                except Exception:  # noqa: BLE001 - a user callback must not kill the I/O thread
                    pass

    def _fail_everything(self, err) -> None:
        for b in self.acc.abort_all(err):
            self._finish(b, -1, -1, err)
        for link in list(self.links.values()):
            cbs = list(link.callbacks)
            link.callbacks.clear()
            link.close()                  # answers to what was in flight can no longer be matched
            try:
                self.sel.unregister(link.sock)
            except (KeyError, ValueError, OSError):
                pass
            self.links.pop(link.node_id, None)
            for _, cb, _ in cbs:
                try:
                    cb(None, err)
                except Exception:  # noqa: BLE001
                    pass
        for b in list(self.acc.incomplete):
            self._finish(b, -1, -1, err)
        with self.p._meta_cond:
            self.p._meta_cond.notify_all()


__all__ = ["BrokerLink", "DeliveryFuture", "Producer", "RecordMetadata", "unreachable_message"]
