"""AIOKafkaConsumer: aiokafka 0.14's consumer API over `kohort.aio.AIOConsumer`.

aiokafka's arguments and defaults (group_id None: no group; roundrobin assignment; session 10 s,
heartbeat 3 s; auto_offset_reset latest; auto commit every 5 s); `start()` waits for the first
assignment when it subscribes with a group; records are aiokafka's ConsumerRecord dataclass;
OffsetAndMetadata/OffsetAndTimestamp are aiokafka's two-field tuples; `commit()` takes
{tp: offset | (offset, metadata) | OffsetAndMetadata}; rebalance listeners (functions or
coroutines) are not told of a revocation on stop(); kohort's errors are raised as aiokafka's.
"""
from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

from kohort.aio.consumer import AIOConsumer
import kohort.compat.aiokafka.errors as E
from kohort.compat.aiokafka.abc import ConsumerRebalanceListener
from kohort.compat.aiokafka.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from kohort.errors import KohortError
from kohort.structs import OffsetAndMetadata as _KOffset

log = logging.getLogger("kohort.compat.aiokafka")


def _tp(t) -> TopicPartition:
    return TopicPartition(t[0], t[1])


def _tps(ts) -> set:
    return {TopicPartition(t[0], t[1]) for t in ts}


class _Listener:
    """Hands the user's listener aiokafka's TopicPartitions (its methods may be coroutines), and
    reports every rebalance as aiokafka's eager protocol does: a revocation (of nothing, at the first
    join) before each assignment."""

    def __init__(self, user: ConsumerRebalanceListener):
        self.user = user
        self._revoked = False

    async def on_partitions_revoked(self, revoked):
        self._revoked = True
        r = self.user.on_partitions_revoked(_tps(revoked))
        if asyncio.iscoroutine(r):
            await r

    async def on_partitions_assigned(self, assigned):
        if not self._revoked:
            await self.on_partitions_revoked(set())
        self._revoked = False
        r = self.user.on_partitions_assigned(_tps(assigned))
        if asyncio.iscoroutine(r):
            await r


def _assignor_name(a) -> str:
    name = a if isinstance(a, str) else getattr(a, "name", None)
    if name not in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        raise ValueError(f"unsupported partition_assignment_strategy {a!r}")
    return name


class AIOKafkaConsumer:
    def __init__(self, *topics: str, loop: Any = None, bootstrap_servers: str | list[str] = "localhost",
                 client_id: str = "aiokafka-0.14.0", group_id: str | None = None,
                 group_instance_id: str | None = None, key_deserializer: Callable[[bytes], Any] | None = None,
                 value_deserializer: Callable[[bytes], Any] | None = None, fetch_max_wait_ms: int = 500,
                 fetch_max_bytes: int = 52428800, fetch_min_bytes: int = 1,
                 max_partition_fetch_bytes: int = 1048576, request_timeout_ms: int = 40000,
                 retry_backoff_ms: int = 100, auto_offset_reset: str = "latest", enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, check_crcs: bool = True, metadata_max_age_ms: int = 300000,
                 partition_assignment_strategy: Any = ("roundrobin",), max_poll_interval_ms: int = 300000,
                 rebalance_timeout_ms: int | None = None, session_timeout_ms: int = 10000,
                 heartbeat_interval_ms: int = 3000, consumer_timeout_ms: int = 200,
                 max_poll_records: int | None = None, ssl_context: Any = None, security_protocol: str = "PLAINTEXT",
                 api_version: str = "auto", exclude_internal_topics: bool = True,
                 connections_max_idle_ms: int = 540000, isolation_level: str = "read_uncommitted",
                 sasl_mechanism: str = "PLAIN", sasl_plain_password: str | None = None,
                 sasl_plain_username: str | None = None, sasl_kerberos_service_name: str = "kafka",
                 sasl_kerberos_domain_name: str | None = None, sasl_oauth_token_provider: Any = None,
                 client_rack: str | None = None) -> None:
        if api_version != "auto":
            warnings.warn("api_version is ignored (aiokafka 0.14 ignores it too)", DeprecationWarning, stacklevel=2)
        if max_poll_records is not None and (not isinstance(max_poll_records, int) or max_poll_records < 1):
            raise ValueError("`max_poll_records` should be positive Integer")
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"Invalid auto_offset_reset {auto_offset_reset!r}")
        self._kd, self._vd = key_deserializer, value_deserializer
        self._group_id = group_id
        self._c = AIOConsumer(
            bootstrap_servers=bootstrap_servers, group_id=group_id, group_instance_id=group_instance_id,
            partition_assignment_strategy=tuple(_assignor_name(a) for a in partition_assignment_strategy),
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms, auto_offset_reset=auto_offset_reset,
            enable_auto_commit=enable_auto_commit, auto_commit_interval_ms=auto_commit_interval_ms,
            fetch_max_wait_ms=fetch_max_wait_ms, fetch_min_bytes=fetch_min_bytes, fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes, isolation_level=isolation_level,
            check_crcs=check_crcs, max_poll_records=max_poll_records, client_rack=client_rack,
            client_id=client_id, request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms, security_protocol=security_protocol, ssl_context=ssl_context,
            sasl_mechanism=sasl_mechanism, sasl_plain_username=sasl_plain_username,
            sasl_plain_password=sasl_plain_password)
        self._initial = topics
        self._exclude_internal = exclude_internal_topics
        self._last_poll: int | None = None
        self._stopped = False
        self._listener: ConsumerRebalanceListener | None = None
        if topics and group_id is None:
            # aiokafka: topics without a group are assigned every partition on start
            self._assign_all = True
        else:
            self._assign_all = False

    # -- lifecycle -------------------------------------------------------------------------------------
    @E.translated
    async def start(self) -> None:
        await self._c.start()
        if self._initial:
            if self._group_id is not None:
                self.subscribe(list(self._initial))
                await self._wait_for_assignment()
            else:
                parts = []
                for t in self._initial:
                    parts += [TopicPartition(t, p) for p in await self._c.client.metadata_for(t)]
                self._c.assign(parts)

    async def _wait_for_assignment(self) -> None:
        g = self._c.group
        while not g.assigned_event.is_set():
            await asyncio.wait_for(g.assigned_event.wait(), None)
        if g.error is not None:
            err, g.error = g.error, None
            raise err

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._c.group is not None:
            self._c.group.listener = None          # aiokafka: no revocation callback on stop
        await self._c.stop()

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.stop()

    def _check(self) -> None:
        if self._stopped:
            raise E.ConsumerStoppedError()

    # -- subscription ----------------------------------------------------------------------------------
    def subscribe(self, topics: list[str] | tuple[str, ...] | set[str] = (), pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        if not (topics or pattern) or (topics and pattern):
            raise TypeError("You must choose topics or pattern, but not both")
        if listener is not None and not isinstance(listener, ConsumerRebalanceListener):
            raise TypeError("listener should be an instance of ConsumerRebalanceListener")
        if self._group_id is None:
            raise TypeError("You can't subscribe without group_id")
        self._listener = listener
        try:
            self._c.subscribe(list(topics) if topics else (), pattern=pattern,
                              listener=_Listener(listener) if listener is not None else None)
        except KohortError as e:
            raise E.translate(e) from e

    def unsubscribe(self) -> None:
        self._c.unsubscribe()

    def subscription(self) -> frozenset[str]:
        return frozenset(self._c.subscription())

    def assign(self, partitions) -> None:
        try:
            self._c.assign(partitions)
        except KohortError as e:
            raise E.IllegalStateError(str(e)) from e       # noqa: F821

    def assignment(self) -> set[TopicPartition]:
        return _tps(self._c.assignment())

    def partitions_for_topic(self, topic):
        return self._c.partitions_for_topic(topic)

    @E.translated
    async def topics(self) -> set:
        return await self._c.topics()

    # -- reading -----------------------------------------------------------------------------------------
    def _record(self, r) -> ConsumerRecord:
        k, v = r.key, r.value
        return ConsumerRecord(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type,
                              self._kd(k) if self._kd is not None else k,
                              self._vd(v) if self._vd is not None else v,
                              None, len(k) if k is not None else -1, len(v) if v is not None else -1,
                              [(hk, hv) for hk, hv in r.headers])

    @E.translated
    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        self._check()
        r = await self._c.getone(*partitions)
        self._last_poll = int(time.time() * 1000)
        return self._record(r)

    @E.translated
    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        self._check()
        got = await self._c.getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records)
        self._last_poll = int(time.time() * 1000)
        return {_tp(tp): [self._record(r) for r in recs] for tp, recs in got.items()}

    def __aiter__(self):
        return self

    async def __anext__(self) -> ConsumerRecord:
        while True:
            try:
                return await self.getone()
            except E.ConsumerStoppedError:
                raise StopAsyncIteration from None
            except E.RecordTooLargeError as e:         # noqa: F821
                log.error("record too large, skipped: %s", e)

    def last_poll_timestamp(self, partition):
        return self._last_poll

    # -- positions -------------------------------------------------------------------------------------
    def _assigned(self, tp) -> TopicPartition:
        tp = TopicPartition(*tp)
        if tp not in self._c.assignment():
            raise E.IllegalStateError(f"No current assignment for partition {tp}")   # noqa: F821
        return tp

    def seek(self, partition, offset) -> None:
        if not isinstance(offset, int) or offset < 0:
            raise ValueError("Offset must be a positive integer")
        self._c.seek(self._assigned(partition), offset)

    @E.translated
    async def seek_to_beginning(self, *partitions) -> bool:
        await self._c.seek_to_beginning(*(self._assigned(tp) for tp in partitions))
        return True

    @E.translated
    async def seek_to_end(self, *partitions) -> bool:
        await self._c.seek_to_end(*(self._assigned(tp) for tp in partitions))
        return True

    @E.translated
    async def seek_to_committed(self, *partitions) -> dict:
        if self._group_id is None:
            raise E.IllegalOperation("Requires group_id")
        got = await self._c.seek_to_committed(*(self._assigned(tp) for tp in partitions))
        return {_tp(tp): o for tp, o in got.items()}

    @E.translated
    async def position(self, partition: TopicPartition) -> int:
        return await self._c.position(self._assigned(partition))

    def highwater(self, partition):
        return self._c.highwater(self._assigned(partition))

    def last_stable_offset(self, partition):
        return self._c.last_stable_offset(self._assigned(partition))

    def pause(self, *partitions) -> None:
        self._c.pause(*(self._assigned(tp) for tp in partitions))

    def resume(self, *partitions) -> None:
        self._c.resume(*(self._assigned(tp) for tp in partitions))

    def paused(self) -> set:
        return _tps(self._c.paused())

    # -- offsets ---------------------------------------------------------------------------------------
    @E.translated
    async def commit(self, offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        if self._group_id is None:
            raise E.IllegalOperation("Requires group_id")
        if offsets is None:
            await self._c.commit(None)
            return
        plain: dict[Any, _KOffset] = {}
        for tp, o in offsets.items():
            tp = self._assigned(tp) if self._c._subscription is not None else TopicPartition(*tp)
            if isinstance(o, int):
                plain[tp] = _KOffset(o, "", None)
            else:
                plain[tp] = _KOffset(int(o[0]), o[1] or "", None)
        await self._c.commit(plain)

    @E.translated
    async def committed(self, partition: TopicPartition) -> int | None:
        if self._group_id is None:
            raise E.IllegalOperation("Requires group_id")
        return await self._c.committed(partition)

    @E.translated
    async def beginning_offsets(self, partitions) -> dict:
        return {_tp(tp): o for tp, o in (await self._c.beginning_offsets(partitions)).items()}

    @E.translated
    async def end_offsets(self, partitions) -> dict:
        return {_tp(tp): o for tp, o in (await self._c.end_offsets(partitions)).items()}

    @E.translated
    async def offsets_for_times(self, timestamps) -> dict:
        got = await self._c.offsets_for_times(timestamps)
        return {_tp(tp): (None if v is None else OffsetAndTimestamp(v.offset, v.timestamp)) for tp, v in got.items()}


__all__ = ["AIOKafkaConsumer", "OffsetAndMetadata"]
