"""confluent-kafka 2.16's `confluent_kafka.aio` (AIOProducer, AIOConsumer) over kohort.aio: change
`from confluent_kafka.aio import ...` to `from kohort.compat.confluent_kafka.aio import ...`.

The same constructors, coroutine methods and async callbacks (on_assign/on_revoke/on_lost,
on_delivery, error_cb) as confluent_kafka.aio, librdkafka's configuration names (translated by
`_config.py`), Message, TopicPartition and KafkaException of `kohort.compat.confluent_kafka`. Unlike the
original there is no thread pool: every call runs on the loop through kohort.aio (`max_workers` and
`executor` are accepted and unused), a produce() future resolves as soon as its answer arrives
(no poll() needed), and produce() takes `headers`.

Consumer offsets follow librdkafka: with enable.auto.commit (default) the offsets of the messages
handed out are committed every auto.commit.interval.ms and on close; `store_offsets` overrides what
a later `commit()` without arguments commits. librdkafka's default isolation.level is read_committed.
"""
from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kohort.aio.consumer import AIOConsumer as _KConsumer
from kohort.aio.producer import AIOProducer as _KProducer
from kohort.errors import KohortError
from kohort.structs import OffsetAndMetadata, TopicPartition as _KTP

from ._config import translate
from ._types import (
    OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, BrokerMetadata, ClusterMetadata, KafkaError,
    KafkaException, Message, PartitionMetadata, TopicMetadata, TopicPartition, timeout_s, wrap,
)

log = logging.getLogger("kohort.compat.confluent_kafka.aio")

# Kafka's config names (after _config.translate) -> kohort.aio keyword arguments
_CONN = {"bootstrap.servers": "bootstrap_servers", "client.id": "client_id",
         "request.timeout.ms": "request_timeout_ms", "metadata.max.age.ms": "metadata_max_age_ms",
         "retry.backoff.ms": "retry_backoff_ms", "security.protocol": "security_protocol",
         "sasl.mechanism": "sasl_mechanism", "sasl.mechanisms": "sasl_mechanism",
         "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password"}
_PRODUCER = {"acks": "acks", "linger.ms": "linger_ms", "batch.size": "batch_size",
             "max.request.size": "max_request_size", "compression.type": "compression_type",
             "enable.idempotence": "enable_idempotence", "transactional.id": "transactional_id",
             "transaction.timeout.ms": "transaction_timeout_ms", "delivery.timeout.ms": "delivery_timeout_ms",
             "buffer.memory": "buffer_memory"}
_CONSUMER = {"group.id": "group_id", "group.protocol": "group_protocol", "group.instance.id": "group_instance_id",
             "group.remote.assignor": "group_remote_assignor",
             "partition.assignment.strategy": "partition_assignment_strategy",
             "session.timeout.ms": "session_timeout_ms", "heartbeat.interval.ms": "heartbeat_interval_ms",
             "max.poll.interval.ms": "max_poll_interval_ms", "auto.offset.reset": "auto_offset_reset",
             "fetch.max.wait.ms": "fetch_max_wait_ms", "fetch.min.bytes": "fetch_min_bytes",
             "fetch.max.bytes": "fetch_max_bytes", "max.partition.fetch.bytes": "max_partition_fetch_bytes",
             "isolation.level": "isolation_level", "check.crcs": "check_crcs", "client.rack": "client_rack"}
# accepted with no effect on kohort.aio (tuning of librdkafka's own machinery)
_IGNORED = {"max.in.flight.requests.per.connection", "retries", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
            "connections.max.idle.ms", "socket.connection.setup.timeout.ms", "receive.buffer.bytes",
            "send.buffer.bytes", "allow.auto.create.topics", "internal.leave.group.on.close"}


def _kwargs(role: str, conf: dict) -> tuple[dict, dict]:
    kconf, extras = translate(role, conf)
    table = {**_CONN, **(_PRODUCER if role == "producer" else _CONSUMER)}
    kw = {}
    for k, v in kconf.items():
        if k in table:
            kw[table[k]] = v
        elif k not in _IGNORED:
            raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                            f"{k!r} is not supported by kohort.compat.confluent_kafka.aio"))
    if "security_protocol" in kw:
        kw["security_protocol"] = str(kw["security_protocol"]).upper()
    if "partition_assignment_strategy" in kw and isinstance(kw["partition_assignment_strategy"], str):
        kw["partition_assignment_strategy"] = tuple(
            s.strip() for s in kw["partition_assignment_strategy"].split(",") if s.strip())
    for k in ("acks",):
        if isinstance(kw.get(k), str) and kw[k] not in ("all",):
            kw[k] = int(kw[k])
    return kw, extras


async def _maybe_await(r):
    if asyncio.iscoroutine(r):
        await r


def _metadata(client, topic: str | None) -> ClusterMetadata:
    snap = client.snapshot
    brokers = {n: BrokerMetadata(n, h, p) for n, (h, p, _r) in snap.brokers.items()}
    topics = {}
    for t, parts in snap.topics.items():
        if topic is not None and t != topic or topic is None and t in snap.internal_topics:
            continue
        pm = {}
        for p in parts:
            info = snap.partitions[_KTP(t, p)]
            pm[p] = PartitionMetadata(p, info.leader, list(info.replicas), list(info.isr),
                                      KafkaError(info.error_code) if info.error_code else None)
        topics[t] = TopicMetadata(t, pm)
    for t, code in snap.topic_errors.items():
        if (topic is None or t == topic) and t not in topics:
            topics[t] = TopicMetadata(t, {}, KafkaError(code))
    b0 = next(iter(brokers.values()), None)
    return ClusterMetadata(snap.cluster_id, snap.controller_id, brokers, topics, b0.id if b0 else -1,
                           str(b0) if b0 else None)


class _StartedOnce(abc.ABC):
    """What the compat producer and consumer share: their kohort.aio client started on first use (one
    start however many callers wait for it) and refused once closed; `async with`; the calls not offered.
    Each class gives `_ready` (its client, started) and `close`."""

    _WHAT = "client"
    _started: asyncio.Task | None = None
    _closed = False

    async def _start_once(self, client):
        if self._closed:
            raise KafkaException(KafkaError(KafkaError._STATE, f"the {self._WHAT} is closed"))
        if self._started is None:
            self._started = asyncio.ensure_future(client.start())
        try:
            await asyncio.shield(self._started)
        except KohortError as e:
            raise wrap(e) from e
        return client

    @abc.abstractmethod
    async def _ready(self):
        """The kohort.aio client, started."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the client (once; later calls return at once)."""

    async def set_sasl_credentials(self, *args, **kwargs):
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, "set_sasl_credentials() is not offered"))

    async def __aenter__(self):
        await self._ready()
        return self

    async def __aexit__(self, *exc):
        await self.close()


class AIOProducer(_StartedOnce):
    """confluent_kafka.aio.AIOProducer over kohort.aio.AIOProducer. Build it inside a coroutine."""

    _WHAT = "producer"

    def __init__(self, producer_conf: dict[str, Any], max_workers: int = 4, executor: Any = None,
                 batch_size: int = 1000, buffer_timeout: float = 1.0) -> None:
        asyncio.get_running_loop()            # as the original: only inside a running loop
        conf = dict(producer_conf)
        conf.setdefault("enable.idempotence", False)        # librdkafka's defaults
        conf.setdefault("linger.ms", 5)
        kw, self._extras = _kwargs("producer", conf)
        kw.setdefault("batch_size", 1000000)
        self._p = _KProducer(**kw)
        self._started: asyncio.Task | None = None
        self._closed = False

    async def _ready(self) -> _KProducer:
        return await self._start_once(self._p)

    async def produce(self, topic: str, value: str | bytes | None = None, key: str | bytes | None = None,
                      *args: Any, partition: int = -1, timestamp: int = 0,
                      headers: list[tuple[str, bytes | None]] | dict[str, bytes | None] | None = None,
                      on_delivery: Callable[..., Any] | None = None, callback: Callable[..., Any] | None = None,
                      **kwargs: Any) -> asyncio.Future[Message]:
        """Queue a message -> a Future of its delivered Message (KafkaException when it failed)."""
        if args or kwargs:
            raise TypeError(f"produce() got unexpected arguments {args or ''}{kwargs or ''}")
        p = await self._ready()
        cb = on_delivery or callback or self._extras.get("on_delivery")
        hs = None
        if headers:
            items = headers.items() if isinstance(headers, dict) else headers
            hs = [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
        k = key.encode() if isinstance(key, str) else key
        v = value.encode() if isinstance(value, str) else value
        try:
            fut = await p.send(topic, v, k, None if partition is None or partition < 0 else partition,
                               timestamp or None, hs)
        except KohortError as e:
            raise wrap(e) from e
        out = asyncio.get_running_loop().create_future()

        def done(f):
            if f.cancelled():
                out.cancel()
                return
            err = f.exception()
            if err is not None:
                e = wrap(err)
                msg = Message(topic, partition, None, k, v, hs, error=e.args[0])
                if not out.cancelled():
                    out.set_exception(e)
            else:
                md = f.result()
                msg = Message(md.topic, md.partition, md.offset, k, v, hs, timestamp=(md.timestamp_type + 1,
                                                                                      md.timestamp))
                if not out.cancelled():
                    out.set_result(msg)
            if cb is not None:
                try:
                    r = cb(msg.error(), msg)
                    if asyncio.iscoroutine(r):
                        asyncio.ensure_future(r)
                except Exception:
                    log.exception("on_delivery callback raised")
        fut.add_done_callback(done)
        return out

    async def flush(self, timeout: float | None = None) -> int:
        p = await self._ready()
        try:
            await asyncio.wait_for(p.flush(), timeout_s(timeout))
        except asyncio.TimeoutError:
            return p._queued
        return 0

    async def poll(self, timeout: float = 0, *args, **kwargs) -> int:
        await self._ready()
        await asyncio.sleep(0)
        return 0

    async def purge(self, *args, **kwargs):
        raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED, "purge() is not offered by kohort.aio"))

    async def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        p = await self._ready()
        if topic is not None:
            p.client.add_topics([topic])
        p.client.all_topics = topic is None
        await p.client.refresh_metadata()
        return _metadata(p.client, topic)

    async def cluster_id(self, *args, **kwargs) -> str:
        p = await self._ready()
        return p.client.snapshot.cluster_id

    async def init_transactions(self, timeout: float | None = None) -> None:
        await self._ready()               # kohort.aio initialises transactions when it starts

    async def begin_transaction(self) -> None:
        p = await self._ready()
        await self._call(p.begin_transaction())

    async def commit_transaction(self, timeout: float | None = None) -> None:
        p = await self._ready()
        await self._call(p.commit_transaction())

    async def abort_transaction(self, timeout: float | None = None) -> None:
        p = await self._ready()
        await self._call(p.abort_transaction())

    async def send_offsets_to_transaction(self, positions, group_metadata, timeout: float | None = None) -> None:
        p = await self._ready()
        offs = {_KTP(tp.topic, tp.partition): OffsetAndMetadata(tp.offset, tp.metadata or "", tp.leader_epoch)
                for tp in positions}
        await self._call(p.send_offsets_to_transaction(offs, group_metadata))

    @staticmethod
    async def _call(coro):
        try:
            return await coro
        except KohortError as e:
            raise wrap(e) from e

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._started is not None:
            await self._p.stop()


def _ctp(tp, offset: int = OFFSET_INVALID) -> TopicPartition:
    return TopicPartition(tp[0], tp[1], offset)


class AIOConsumer(_StartedOnce):
    """confluent_kafka.aio.AIOConsumer over kohort.aio.AIOConsumer. Build it inside a coroutine."""

    _WHAT = "consumer"

    def __init__(self, consumer_conf: dict[str, Any], max_workers: int = 100, executor: Any = None) -> None:
        asyncio.get_running_loop()
        conf = dict(consumer_conf)
        conf.setdefault("isolation.level", "read_committed")             # librdkafka's default
        conf.setdefault("partition.assignment.strategy", "range,roundrobin")
        kw, self._extras = _kwargs("consumer", conf)
        kw.setdefault("auto_offset_reset", "latest")
        if "group_id" not in kw:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "group.id must be set"))
        self._auto_commit = str(self._extras.get("enable.auto.commit", True)).lower() not in ("false", "0")
        kw["enable_auto_commit"] = self._auto_commit
        if "auto.commit.interval.ms" in self._extras:
            kw["auto_commit_interval_ms"] = int(self._extras["auto.commit.interval.ms"])
        self._c = _KConsumer(**kw)
        self._stored: dict = {}
        self._started: asyncio.Task | None = None
        self._closed = False
        self._cbs: tuple[Callable[..., Any] | None, ...] = (None, None, None)

    async def _ready(self) -> _KConsumer:
        return await self._start_once(self._c)

    # -- subscription ----------------------------------------------------------------------------------
    async def subscribe(self, topics: list[str], on_assign: Callable[..., Any] | None = None,
                        on_revoke: Callable[..., Any] | None = None,
                        on_lost: Callable[..., Any] | None = None) -> None:
        c = await self._ready()
        self._cbs = (on_assign, on_revoke, on_lost)
        names = [t for t in topics if not t.startswith("^")]
        patterns = [t for t in topics if t.startswith("^")]
        if patterns and names or len(patterns) > 1:
            raise KafkaException(KafkaError(KafkaError._NOT_IMPLEMENTED,
                                            "subscribe() takes topic names or one ^pattern"))
        try:
            if patterns:
                c.subscribe(pattern=patterns[0], listener=_Listener(self))
            else:
                c.subscribe(names, listener=_Listener(self))
        except KohortError as e:
            raise wrap(e) from e

    async def unsubscribe(self) -> None:
        c = await self._ready()
        c.unsubscribe()

    async def assign(self, partitions) -> None:
        c = await self._ready()
        c.assign([_KTP(p.topic, p.partition) for p in partitions])
        for p in partitions:
            if p.offset >= 0:
                c.seek(_KTP(p.topic, p.partition), p.offset)
            elif p.offset == OFFSET_BEGINNING:
                await c.seek_to_beginning(_KTP(p.topic, p.partition))
            elif p.offset == OFFSET_END:
                await c.seek_to_end(_KTP(p.topic, p.partition))

    async def incremental_assign(self, partitions) -> None:
        c = await self._ready()
        await self.assign(list({_ctp(tp) for tp in c.assignment()} | set(partitions)))

    async def incremental_unassign(self, partitions) -> None:
        c = await self._ready()
        drop = {(p.topic, p.partition) for p in partitions}
        c.assign([tp for tp in c.assignment() if (tp.topic, tp.partition) not in drop])

    async def unassign(self) -> None:
        c = await self._ready()
        c.assign([])

    async def assignment(self) -> list[TopicPartition]:
        c = await self._ready()
        return sorted(_ctp(tp) for tp in c.assignment())

    # -- reading ---------------------------------------------------------------------------------------
    async def poll(self, timeout: float = -1) -> Message | None:
        msgs = await self.consume(1, timeout)
        return msgs[0] if msgs else None

    async def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        c = await self._ready()
        t = timeout_s(timeout)
        try:
            if t is None:
                got = {}
                while not got:
                    got = await c.getmany(timeout_ms=1000, max_records=num_messages)
            else:
                got = await c.getmany(timeout_ms=int(t * 1000), max_records=num_messages)
        except KohortError as e:
            raise wrap(e) from e
        return [Message.from_record(r) for recs in got.values() for r in recs]

    # -- offsets ---------------------------------------------------------------------------------------
    async def store_offsets(self, message=None, offsets=None) -> None:
        await self._ready()
        if message is not None:
            self._stored[_KTP(message.topic(), message.partition())] = message.offset() + 1
        elif offsets is not None:
            for p in offsets:
                self._stored[_KTP(p.topic, p.partition)] = p.offset
        else:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "store_offsets() needs message or offsets"))

    async def commit(self, message=None, offsets=None, asynchronous: bool = True):
        """Commit `message`'s next offset, `offsets`, or the stored offsets/positions; asynchronous:
        in its own task (returns None), else waits and returns the committed partitions."""
        c = await self._ready()
        if message is not None:
            offs = {_KTP(message.topic(), message.partition()): message.offset() + 1}
        elif offsets is not None:
            offs = {_KTP(p.topic, p.partition): p.offset for p in offsets}
        else:
            offs = {**{tp: om.offset for tp, om in c.positions().items()}, **self._stored}
        if not offs:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "no offsets to commit"))
        if asynchronous:
            task = asyncio.ensure_future(c.commit(offs))
            task.add_done_callback(lambda t: t.cancelled() or t.exception() is None or
                                   log.warning("async commit failed: %s", t.exception()))
            return None
        try:
            await c.commit(offs)
        except KohortError as e:
            raise wrap(e) from e
        return sorted(_ctp(tp, o) for tp, o in offs.items())

    async def committed(self, partitions, timeout: float | None = None) -> list:
        c = await self._ready()
        try:
            got = await c.committed_many([(p.topic, p.partition) for p in partitions])
        except KohortError as e:
            raise wrap(e) from e
        return [_ctp(tp, om.offset if om is not None else OFFSET_INVALID) for tp, om in got.items()]

    async def position(self, partitions) -> list:
        c = await self._ready()
        out = []
        for p in partitions:
            st = c._parts.get(_KTP(p.topic, p.partition))
            out.append(_ctp((p.topic, p.partition), st.position if st is not None and st.position is not None
                            else OFFSET_INVALID))
        return out

    async def seek(self, partition: TopicPartition) -> None:
        c = await self._ready()
        tp = _KTP(partition.topic, partition.partition)
        if partition.offset == OFFSET_BEGINNING:
            await c.seek_to_beginning(tp)
        elif partition.offset == OFFSET_END:
            await c.seek_to_end(tp)
        elif partition.offset == OFFSET_STORED:
            await c.seek_to_committed(tp)
        else:
            c.seek(tp, partition.offset)

    async def pause(self, partitions) -> None:
        c = await self._ready()
        c.pause(*(_KTP(p.topic, p.partition) for p in partitions))

    async def resume(self, partitions) -> None:
        c = await self._ready()
        c.resume(*(_KTP(p.topic, p.partition) for p in partitions))

    async def get_watermark_offsets(self, partition, timeout: float | None = None, cached: bool = False):
        c = await self._ready()
        tp = _KTP(partition.topic, partition.partition)
        if cached:
            st = c._parts.get(tp)
            return (-1001, -1001) if st is None else (st.log_start_offset, st.high_watermark)
        lo = (await c.beginning_offsets([tp]))[tp]
        hi = (await c.end_offsets([tp]))[tp]
        return lo, hi

    async def offsets_for_times(self, partitions, timeout: float | None = None) -> list:
        c = await self._ready()
        got = await c.offsets_for_times({_KTP(p.topic, p.partition): p.offset for p in partitions})
        return [_ctp(tp, v.offset if v is not None else OFFSET_END) for tp, v in got.items()]

    async def consumer_group_metadata(self):
        c = await self._ready()
        return c.group_metadata()

    async def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        c = await self._ready()
        if topic is not None:
            c.client.add_topics([topic])
        await c.client.refresh_metadata()
        return _metadata(c.client, topic)

    async def cluster_id(self, *args, **kwargs) -> str:
        c = await self._ready()
        return c.client.snapshot.cluster_id

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._started is not None:
            c = self._c
            if self._stored and c.group is not None and c.group.in_group():
                try:
                    await c.commit(dict(self._stored))
                except KohortError as e:
                    log.warning("commit of stored offsets on close failed: %s", e)
            await c.stop()


class _Listener:
    """kohort.aio's rebalance listener calling the application's async on_assign/on_revoke/on_lost
    with (consumer, [TopicPartition])."""

    def __init__(self, owner: AIOConsumer):
        self.owner = owner

    async def on_partitions_assigned(self, assigned):
        cb = self.owner._cbs[0]
        if cb is not None:
            await _maybe_await(cb(self.owner, sorted(_ctp(tp) for tp in assigned)))

    async def on_partitions_revoked(self, revoked):
        for tp in revoked:
            self.owner._stored.pop(_KTP(*tp), None)
        cb = self.owner._cbs[1]
        if cb is not None:
            await _maybe_await(cb(self.owner, sorted(_ctp(tp) for tp in revoked)))

    async def on_partitions_lost(self, lost):
        for tp in lost:
            self.owner._stored.pop(_KTP(*tp), None)
        cb = self.owner._cbs[2] or self.owner._cbs[1]
        if cb is not None:
            await _maybe_await(cb(self.owner, sorted(_ctp(tp) for tp in lost)))


__all__ = ["AIOConsumer", "AIOProducer"]
