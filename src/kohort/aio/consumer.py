"""AIOConsumer: Kafka's consumer on the running asyncio loop.

Fetching: one fetch task per leader broker with partitions to read, at most one Fetch in flight per
broker (Kafka's rule), in an incremental fetch session (KIP-227: `client/consumer/fetcher.FetchSession`,
the full partition set first, then only what changed); a partition is fetched again while less than
two answers' worth of its records (`max_partition_fetch_bytes` each) wait to be read, all of them
within `fetch_max_bytes`, so the broker serves the next fetch while the application reads the last.
An answer is only scanned (batch headers, CRCs) when it arrives; its records are decoded inside
getmany, as they are handed out, in steps of about `DECODE_SLICE_BYTES` of fetched bytes (at most
`DECODE_STEP_RECORDS` records), one step per call, by `records.RecordCursor` (the compiled decoder
when built, which builds the ConsumerRecords), each step resuming where the last stopped, mid-batch
included, so the steps together cost one decode of the whole and a compressed batch is decompressed
once. getmany lets the loop turn (twice) when it has not for `LOOP_TURN_S`, so a caller reading at
full speed never holds the loop for longer than that plus a step and its own work on the records.
read_committed (KIP-98) decodes only the runs of batches `records.AbortedTransactions` keeps. What an
answer's partitions decompress to shares one `DecompressionBudget` (256 MiB), as in
client/consumer/fetcher.py: a partition refused for want of what is left is fetched again from its
position and decoded first next time; one that fails alone raises an error naming it and its offset
from the next read and keeps its position. Records holding more bytes than were fetched count their
decompressed size against max_partition_fetch_bytes.

Positions: a partition's `position` (next record to hand out) is kept apart from its `fetch_offset`
(next to ask for); a seek, pause or revocation bumps its `seek_epoch`, and records fetched under an
older one are dropped. A partition without a position takes its committed offset (group), else
auto_offset_reset through ListOffsets ('none': the error is raised from the next read).

Group membership: `aio/group.py`. Reading: `getmany` (a dict {tp: [records]}, waiting up to
timeout_ms for the first), `getone`, `async for record in consumer`.
"""
from __future__ import annotations

import asyncio
import logging
import re
import struct
import time
from collections import deque
from collections.abc import Mapping

from kohort.aio.client import AIOClient, ClientSettings
from kohort.aio.group import AIOGroupMember
from kohort.client.consumer.fetcher import (
    FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FetchSession, partition_decode_error,
)
from kohort.client.consumer.membership_common import MemberConfig
from kohort.client.consumer.offsets import (
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED, NoOffsetForPartitionError,
    list_offsets_request,
)
from kohort.protocol.framing import Versioned
from kohort.client.requests import read_list_offsets
from kohort.errors import ErrorCode, KafkaConnectionError, KafkaTimeoutError, KohortError, for_code
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from kohort.protocol.records import (
    DEFAULT_MAX_SIZE, AbortedTransactions, DecompressionBudget, RecordCursor, iter_batches, scan_batches,
)
from kohort.structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

log = logging.getLogger("kohort.aio.consumer")

DECODE_SLICE_BYTES = 128 * 1024
DECODE_STEP_RECORDS = 1024
DECODE_LEGACY_STEP = 256
LOOP_TURN_S = 0.0002            # getmany lets the loop turn when it has not for this long
FETCH_MAX_VERSION = 12          # topics by name (v13+ names them by id)
_REFRESH = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                      ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                      ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
                      ErrorCode.OFFSET_NOT_AVAILABLE})
_new = tuple.__new__
_I64 = struct.Struct(">q")


class ConsumerStoppedError(KohortError):
    """The consumer was stopped: no more records."""


class _Signal:
    """asyncio.Event's set/clear, with a wait bounded by a timeout that costs one future and one timer
    (asyncio.wait_for around Event.wait() runs a task of its own per wait): getmany waits whenever
    nothing is fetched yet, and the fetch task once per answer."""

    __slots__ = ("_flag", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._waiters: list[asyncio.Future] = []

    def set(self) -> None:
        self._flag = True
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(True)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    async def wait(self, timeout: float) -> bool:
        """True once set, False when `timeout` seconds passed first."""
        if self._flag:
            return True
        loop = asyncio.get_running_loop()
        w = loop.create_future()
        self._waiters.append(w)
        timer = loop.call_later(timeout, _time_out, w)
        try:
            return await w
        finally:
            timer.cancel()


def _time_out(w: asyncio.Future) -> None:
    if not w.done():
        w.set_result(False)


class _PState:
    __slots__ = ("position", "fetch_offset", "seek_epoch", "paused", "high_watermark", "last_stable_offset",
                 "log_start_offset", "epoch", "reset", "buffered", "resolving")

    def __init__(self):
        self.position = None               # next offset to hand out
        self.fetch_offset = None           # next offset to ask for
        self.seek_epoch = 0
        self.paused = False
        self.high_watermark = self.last_stable_offset = self.log_start_offset = -1
        self.epoch = None                  # leader epoch of the last record handed out
        self.reset: str | None = None      # a reset strategy to apply (ListOffsets)
        self.buffered = 0                  # bytes fetched and not handed out yet
        self.resolving = False


class _Chunk:
    """Records of one partition waiting to be handed out: `records[index:]` of the step decoded last,
    and, while `steps` is not None, the rest of one answer's records undecoded (`AIOConsumer._steps`,
    which getmany advances a step at a time). `nbytes` of fetched bytes and `next_offset` (the
    answer's last step) are settled once the step's records are all handed out."""

    __slots__ = ("tp", "records", "index", "next_offset", "seek_epoch", "nbytes", "steps", "sent", "full")

    def __init__(self, tp, records, next_offset, seek_epoch, nbytes, steps=None, sent=None):
        self.tp, self.records, self.index = tp, records, 0
        self.next_offset, self.seek_epoch, self.nbytes = next_offset, seek_epoch, nbytes
        self.steps, self.sent = steps, sent
        self.full = False          # the answer's decompression budget was whole when this partition began


def _step(view, next_offset: int, legacy: bool) -> tuple[int, int]:
    """(records per decode step, about how many records the payload holds) for a fetch's record bytes
    ending before `next_offset`: about DECODE_SLICE_BYTES of fetched bytes per step (of compressed
    bytes in a compressed batch), at most DECODE_STEP_RECORDS. The count is the offset span from the
    first batch's base offset (compacted topics hold fewer: their steps are then bigger in bytes; a
    control batch adds one); legacy (magic 0/1) entries take DECODE_LEGACY_STEP records and no count."""
    if legacy or len(view) < 8:
        return DECODE_LEGACY_STEP, 0
    count = next_offset - _I64.unpack_from(view, 0)[0]
    if count <= 0:
        return DECODE_LEGACY_STEP, 0
    per = max(1, count * DECODE_SLICE_BYTES // len(view))
    return min(per, DECODE_STEP_RECORDS), count


def _kept_runs(view, fetch_offset: int, aborted) -> list[tuple[int, int]]:
    """read_committed (KIP-98): the byte ranges of runs of consecutive batches whose records are
    delivered (`records.AbortedTransactions`); batches wholly before `fetch_offset` are left out."""
    keep = AbortedTransactions(aborted).keep
    runs: list[tuple[int, int]] = []
    for pos, h in iter_batches(view):
        if h.next_offset <= fetch_offset or not keep(view, pos, h):
            continue
        end = pos + h.total_size
        if runs and runs[-1][1] == pos:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((pos, end))
    return runs


class AIOConsumer:
    """See the module docstring. Use `async with AIOConsumer(...) as c:` or start()/stop()."""

    def __init__(self, *topics: str, bootstrap_servers="localhost:9092", group_id: str | None = None,
                 group_protocol: str = "classic", group_instance_id: str | None = None,
                 group_remote_assignor: str | None = None,
                 partition_assignment_strategy=("range", "cooperative-sticky"),
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300000, auto_offset_reset: str = "latest",
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, isolation_level: str = "read_uncommitted",
                 check_crcs: bool = True, key_deserializer=None, value_deserializer=None,
                 max_poll_records: int | None = None, client_rack: str | None = None, **conn):
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level must be read_uncommitted or read_committed, not {isolation_level!r}")
        self.settings = ClientSettings.make(bootstrap_servers, **conn)
        self.group_id = group_id
        self.group_protocol = group_protocol
        self.group_instance_id = group_instance_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.fetch_max_wait_ms, self.fetch_min_bytes, self.fetch_max_bytes = fetch_max_wait_ms, fetch_min_bytes, fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation = READ_COMMITTED if isolation_level == "read_committed" else READ_UNCOMMITTED
        self.check_crcs = check_crcs
        self.key_deserializer, self.value_deserializer = key_deserializer, value_deserializer
        self.max_poll_records = max_poll_records
        self.rack = client_rack
        self._member_cfg = None
        if group_id is not None:
            from kohort.assignors import get_assignor
            names = [partition_assignment_strategy] if isinstance(partition_assignment_strategy, str) \
                else list(partition_assignment_strategy)
            self._member_cfg = MemberConfig(
                group_id=group_id, group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=max_poll_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                retry_backoff_ms=self.settings.retry_backoff_ms, request_timeout_ms=self.settings.request_timeout_ms,
                auto_commit_interval_ms=auto_commit_interval_ms if self.enable_auto_commit else None,
                assignors=[get_assignor(n) if isinstance(n, str) else n for n in names],
                rack_id=client_rack, remote_assignor=group_remote_assignor)
        self.client: AIOClient | None = None
        self.group: AIOGroupMember | None = None
        self._parts: dict[TopicPartition, _PState] = {}
        self._chunks: deque[_Chunk] = deque()
        self._data = _Signal()
        self._wake = _Signal()
        self._fetching: set[int] = set()
        self._held = False               # the last _send_fetches left a partition out for what it buffered
        self._sessions: dict[int, FetchSession] = {}       # one incremental fetch session per broker (KIP-227)
        self._tasks: set = set()
        self._errors: list[BaseException] = []
        self._budget_first: set[TopicPartition] = set()     # decoded first in the next answer
        self._fetch_task: asyncio.Task | None = None
        self._subscription: tuple | None = None
        self._initial_topics = topics
        self._stopped = False
        self._turned = 0.0               # time.monotonic() when getmany last let the loop turn
        self.records_fetched = 0

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.client is not None:
            return
        self.client = AIOClient(self.settings)
        await self.client.refresh_metadata()
        if self._member_cfg is not None:
            self.group = AIOGroupMember(self.client, self, self._member_cfg, self.group_protocol,
                                        self.group_instance_id)
        if self._initial_topics:
            self.subscribe(self._initial_topics)
        if self._subscription is not None:
            self._start_group()
        self._fetch_task = asyncio.create_task(self._fetch_loop(), name="kohort-aio-fetcher")

    async def __aenter__(self) -> "AIOConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Commit (auto commit), leave the group, close the connections."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.group is not None:
                if self.enable_auto_commit and self.group.in_group():
                    try:
                        await self.group.commit(self.positions(), timeout=5.0)
                    except KohortError as e:
                        log.warning("commit on stop failed: %s", e)
                if self._group_started:
                    await self.group.close()
        finally:
            self._data.set()
            for t in (self._fetch_task, *self._tasks):
                if t is not None:
                    t.cancel()
            await asyncio.gather(*(t for t in (self._fetch_task, *self._tasks) if t is not None),
                                 return_exceptions=True)
            if self.client is not None:
                await self.client.close()

    close = stop
    _group_started = False

    def _start_group(self) -> None:
        if self.group is not None and not self._group_started:
            self._group_started = True
            self.group.start()

    def _check(self) -> None:
        if self._stopped:
            raise ConsumerStoppedError("the consumer is stopped")
        if self.client is None:
            raise KohortError("the consumer is not started: await start() first")

    # -- subscription and assignment ------------------------------------------------------------------
    def subscribe(self, topics=(), pattern: str | None = None, listener=None) -> None:
        if self.group is None and self.client is not None or self._member_cfg is None:
            raise KohortError("subscribe() needs a group_id")
        if bool(topics) == (pattern is not None):
            raise TypeError("subscribe() takes either topics or a pattern")
        if isinstance(topics, str):
            topics = [topics]
        self._subscription = tuple(topics) if pattern is None else (re.compile(pattern),)
        self._listener = listener
        if self.group is not None:
            self.group.subscribe(list(topics), re.compile(pattern) if pattern is not None else None, listener)
            if self.client is not None:
                self._start_group()

    def unsubscribe(self) -> None:
        if self.group is not None:
            self.group.unsubscribe()
        self._subscription = None
        self._on_revoked(set(self._parts))

    def subscription(self) -> set[str]:
        if self._subscription is None:
            return set()
        return set(t for t in self._subscription if isinstance(t, str))

    def assign(self, partitions) -> None:
        """Manual assignment (no group membership, commits still go to group_id if given)."""
        if self._subscription is not None:
            raise KohortError("assign() on a subscribed consumer: unsubscribe() first")
        tps = {TopicPartition(*tp) for tp in partitions}
        self._on_revoked(set(self._parts) - tps)
        self._on_assigned(tps, tps - set(self._parts))
        if self.client is not None:
            self.client.add_topics({tp.topic for tp in tps})

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def _on_assigned(self, assignment: set, added: set) -> None:
        for tp in assignment:
            if tp not in self._parts:
                self._parts[tp] = _PState()
        if self.client is not None:
            self.client.add_topics({tp.topic for tp in assignment})
        self._wake.set()

    def _on_revoked(self, tps: set) -> None:
        for tp in tps:
            self._parts.pop(tp, None)
        self._drop_chunks(tps)

    def _drop_chunks(self, tps) -> None:
        if self._chunks:
            self._chunks = deque(c for c in self._chunks if c.tp not in tps)

    def positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(st.position, "", st.epoch) for tp, st in self._parts.items()
                if st.position is not None}

    def group_metadata(self) -> ConsumerGroupMetadata | None:
        return None if self.group is None else self.group.group_metadata()

    # -- positions -------------------------------------------------------------------------------------
    def _state(self, tp) -> _PState:
        st = self._parts.get(TopicPartition(*tp))
        if st is None:
            raise KohortError(f"partition {tp} is not assigned to this consumer")
        return st

    def seek(self, tp, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        st = self._state(tp)
        self._set_position(TopicPartition(*tp), st, offset)

    def _set_position(self, tp, st: _PState, offset: int | None, reset: str | None = None) -> None:
        st.position = st.fetch_offset = offset
        st.seek_epoch += 1
        st.reset = reset
        st.buffered = 0
        self._drop_chunks({tp})
        self._wake.set()

    async def seek_to_beginning(self, *tps) -> None:
        """Move `tps` (all assigned partitions when none are given) to their first offset."""
        tps = [TopicPartition(*tp) for tp in (tps or list(self._parts))]
        for tp in tps:
            self._set_position(tp, self._state(tp), None, "earliest")
        await self._resolve_positions(tps)

    async def seek_to_end(self, *tps) -> None:
        """Move `tps` (all assigned partitions when none are given) past their last offset."""
        tps = [TopicPartition(*tp) for tp in (tps or list(self._parts))]
        for tp in tps:
            self._set_position(tp, self._state(tp), None, "latest")
        await self._resolve_positions(tps)

    async def seek_to_committed(self, *tps) -> dict:
        tps = [TopicPartition(*tp) for tp in (tps or list(self._parts))]
        got = await self.committed_many(tps)
        for tp, om in got.items():
            st = self._state(tp)
            if om is not None:
                self._set_position(tp, st, om.offset)
            else:
                self._set_position(tp, st, None, self.auto_offset_reset)
        return {tp: (om.offset if om is not None else None) for tp, om in got.items()}

    async def position(self, tp: tuple[str, int]) -> int:
        self._check()
        st = self._state(tp)
        if st.position is None:
            await self._resolve_positions([TopicPartition(*tp)])
            st = self._state(tp)
            if st.position is None:
                self._raise_errors()
                raise KafkaTimeoutError(f"no position for {tp}")
        return st.position

    def highwater(self, tp) -> int | None:
        h = self._state(tp).high_watermark
        return None if h < 0 else h

    def last_stable_offset(self, tp) -> int | None:
        h = self._state(tp).last_stable_offset
        return None if h < 0 else h

    def pause(self, *tps) -> None:
        for tp in tps:
            st = self._state(tp)
            if not st.paused:
                st.paused = True
                self._set_position(TopicPartition(*tp), st, st.position, st.reset)

    def resume(self, *tps) -> None:
        for tp in tps:
            self._state(tp).paused = False
        self._wake.set()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._parts.items() if st.paused}

    async def _resolve_positions(self, only=None) -> None:
        """Committed offsets (group) then ListOffsets for partitions without a position (of `only`, if given)."""
        parts = self._parts if only is None else {tp: self._parts[tp] for tp in only if tp in self._parts}
        need = [tp for tp, st in parts.items() if st.position is None and st.reset is None]
        if need:
            committed = {}
            if self.group is not None:
                committed = await self.group.committed(need)
            for tp in need:
                st = self._parts.get(tp)
                if st is None or st.position is not None:
                    continue
                om = committed.get(tp)
                if om is not None:
                    st.position = st.fetch_offset = om.offset
                    st.epoch = om.leader_epoch
                else:
                    st.reset = self.auto_offset_reset
        reset = {tp: st.reset for tp, st in parts.items() if st.position is None and st.reset}
        if not reset:
            return
        none = [tp for tp, s in reset.items() if s == "none"]
        if none:
            raise NoOffsetForPartitionError(none)
        stamps = {tp: EARLIEST_TIMESTAMP if s == "earliest" else LATEST_TIMESTAMP for tp, s in reset.items()}
        got = await self._list_offsets(stamps)
        for tp, (off, _ts, le) in got.items():
            st = self._parts.get(tp)
            if st is not None and st.position is None and off >= 0:
                st.position = st.fetch_offset = off
                st.reset = None
                st.epoch = le if le >= 0 else None

    async def _list_offsets(self, stamps: dict) -> dict:
        """{tp: (offset, timestamp, leader epoch)} from the partitions' leaders."""
        by_node: dict[int, dict] = {}
        missing = {tp.topic for tp in stamps if self.client.leader_for(tp) is None}
        if missing:
            await self.client.refresh_metadata(missing)
        for tp, ts in stamps.items():
            leader = self.client.leader_for(tp)
            if leader is None:
                raise for_code(ErrorCode.LEADER_NOT_AVAILABLE)(f"no leader for {tp}")
            by_node.setdefault(leader, {})[tp] = ts
        iso = self.isolation

        async def one(node, s):
            return await self.client.request(node, Versioned(ListOffsetsRequest.API_KEY,
                                                             lambda v: list_offsets_request(v, s, iso)))
        out = {}
        for resp in await asyncio.gather(*(one(n, s) for n, s in by_node.items())):
            for tp, (code, off, ts, le) in read_list_offsets(resp).items():
                if code:
                    raise for_code(code)(f"ListOffsets of {tp}")
                out[tp] = (off, ts, le)
        return out

    async def beginning_offsets(self, tps) -> dict:
        got = await self._list_offsets({TopicPartition(*tp): EARLIEST_TIMESTAMP for tp in tps})
        return {tp: v[0] for tp, v in got.items()}

    async def end_offsets(self, tps) -> dict:
        got = await self._list_offsets({TopicPartition(*tp): LATEST_TIMESTAMP for tp in tps})
        return {tp: v[0] for tp, v in got.items()}

    async def offsets_for_times(self, timestamps: dict) -> dict:
        got = await self._list_offsets({TopicPartition(*tp): int(ts) for tp, ts in timestamps.items()})
        return {tp: (OffsetAndTimestamp(v[0], v[1], v[2] if v[2] >= 0 else None) if v[0] >= 0 else None)
                for tp, v in got.items()}

    # -- offsets ---------------------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit `offsets` ({tp: next offset or OffsetAndMetadata}; None: every position)."""
        self._check()
        if self.group is None:
            raise KohortError("commit() needs a group_id")
        if offsets is None:
            offs = self.positions()
        else:
            offs = {TopicPartition(*tp): (o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o), "", None))
                    for tp, o in offsets.items()}
        await self.group.commit(offs, timeout=self.settings.request_timeout_ms / 1000)

    def commit_async(self, offsets: dict | None = None) -> asyncio.Task:
        """commit() in its own task: returns the task (await it, or let it run)."""
        return asyncio.ensure_future(self.commit(offsets))

    async def committed_many(self, tps) -> dict:
        if self.group is None:
            raise KohortError("committed() needs a group_id")
        return await self.group.committed([TopicPartition(*tp) for tp in tps],
                                          timeout=self.settings.request_timeout_ms / 1000)

    async def committed(self, tp: tuple[str, int]) -> int | None:
        om = (await self.committed_many([tp])).get(TopicPartition(*tp))
        return None if om is None else om.offset

    # -- fetching --------------------------------------------------------------------------------------
    async def _fetch_loop(self) -> None:
        while not self._stopped:
            self._wake.clear()
            try:
                if any(st.position is None for st in self._parts.values()):
                    await self._resolve_positions()
                self._send_fetches()
            except asyncio.CancelledError:
                raise
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                log.debug("fetcher: %s", e)
                await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
                continue
            except Exception as e:
                if not any(type(x) is type(e) and str(x) == str(e) for x in self._errors):
                    self._errors.append(e)
                self._data.set()
                await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
            await self._wake.wait(0.5)

    def _send_fetches(self, own: int | None = None) -> dict | None:
        """Start a Fetch to every leader with fetchable partitions and none in flight; those for broker
        `own` are returned instead ({tp: (fetch offset, seek epoch)}, None when there are none), for
        the caller to send itself (the fetch task of `own`, whose answer was just handled)."""
        by_node: dict[int, dict] = {}
        missing = set()
        # pipelining depth: a partition is fetched again until about two answers' worth of its records
        # wait to be read; everything waiting together stays under fetch_max_bytes
        limit = 2 * self.max_partition_fetch_bytes
        parts = self._parts
        self._held = False
        if sum(st.buffered for st in parts.values()) >= self.fetch_max_bytes:
            self._held = True
            return None
        for tp, st in parts.items():
            if st.paused or st.fetch_offset is None:
                continue
            if st.buffered >= limit:
                self._held = True
                continue
            leader = self.client.leader_for(tp)
            if leader is None:
                missing.add(tp.topic)
                continue
            if leader not in self._fetching:
                by_node.setdefault(leader, {})[tp] = (st.fetch_offset, st.seek_epoch)
        if missing:
            self._spawn(self.client.refresh_metadata(missing))
        mine = by_node.pop(own, None) if own is not None else None
        if mine is not None:
            self._fetching.add(own)
        for node, parts in by_node.items():
            self._fetching.add(node)
            self._spawn(self._fetch(node, parts))
        return mine

    def _spawn(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)

    def _task_done(self, t: asyncio.Future) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            err = t.exception()
            log.warning("consumer background step failed: %r", err)
            if not isinstance(err, (KafkaConnectionError, KafkaTimeoutError)):
                self._errors.append(err)          # raised from the next read
                self._data.set()

    async def _fetch(self, node: int, parts: dict) -> None:
        """Fetches to `node`, one at a time, the first for `parts`: once an answer is handled the
        next Fetch to `node` goes out from here, on the same turn of the loop (a task spawned for it
        would send it a turn later, after a getmany step), so the broker serves it while getmany
        hands out the answer."""
        while parts is not None:
            if not await self._fetch_once(node, parts) or self._stopped:
                return
            try:
                parts = self._send_fetches(own=node)
            except Exception as e:              # noqa: BLE001 - the fetch loop tries again and reports it
                log.debug("fetch after an answer: %r", e)
                return

    async def _fetch_once(self, node: int, parts: dict) -> bool:
        """One Fetch to `node` for `parts` ({tp: (fetch offset, seek epoch)}) in its fetch session:
        the full set first, then only partitions whose fetch offset changed plus those forgotten
        (`client/consumer/fetcher.FetchSession`); any failure starts the session over. True when an
        answer came and was handled."""
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = FetchSession()
        try:
            mb = self.max_partition_fetch_bytes
            send, forgotten, view = session.build({tp: (off, mb) for tp, (off, _se) in parts.items()})
            by_topic: dict[str, list] = {}
            for tp, (off, pmb) in send.items():
                by_topic.setdefault(tp.topic, []).append(FetchRequest.FetchTopic.FetchPartition(
                    partition=tp.partition, fetch_offset=off, partition_max_bytes=pmb))
            gone: dict[str, list] = {}
            for tp in forgotten:
                gone.setdefault(tp.topic, []).append(tp.partition)
            req = FetchRequest(max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
                               max_bytes=self.fetch_max_bytes, isolation_level=self.isolation,
                               session_id=session.session_id, session_epoch=session.epoch, rack_id=self.rack or "",
                               topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
                               forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps)
                                                      for t, ps in gone.items()])
            try:
                resp = await self.client.request(node, req, max_version=FETCH_MAX_VERSION,
                                                 timeout_ms=self.settings.request_timeout_ms + self.fetch_max_wait_ms)
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                session.reset()
                log.debug("fetch from broker %s failed: %s", node, e)
                await self.client.refresh_metadata()
                return False
            except BaseException:
                session.reset()        # cancelled: whether the broker saw the request is unknown
                raise
            session.on_response(getattr(resp, "error_code", 0), getattr(resp, "session_id", 0), view)
            self._handle_fetch(resp, parts)
        finally:
            self._fetching.discard(node)
            self._wake.set()
        return True

    def _handle_fetch(self, resp, parts: dict) -> None:
        top = getattr(resp, "error_code", 0)
        if top:
            if top not in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):     # else: a full fetch next
                log.warning("fetch failed: %s", for_code(top).name)
            return
        refresh = False
        todo = []
        for t in resp.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                sent = parts.get(tp)
                st = self._parts.get(tp)
                if sent is None or st is None or st.seek_epoch != sent[1] or st.fetch_offset != sent[0]:
                    continue
                err = p.error_code
                if err == ErrorCode.OFFSET_OUT_OF_RANGE:
                    if self.auto_offset_reset == "none":
                        self._errors.append(for_code(err)(f"fetch offset {sent[0]} of {tp} is out of range",))
                        self._errors[-1].partitions = {tp: sent[0]}
                        st.fetch_offset = None
                    else:
                        self._set_position(tp, st, None, self.auto_offset_reset)
                    continue
                if err:
                    refresh |= err in _REFRESH
                    if err not in _REFRESH:
                        self._errors.append(for_code(err)(f"fetch of {tp}"))
                    continue
                st.high_watermark, st.last_stable_offset = p.high_watermark, p.last_stable_offset
                st.log_start_offset = p.log_start_offset
                data = p.records
                if data is None or not len(data):
                    continue
                view = data if isinstance(data, memoryview) else memoryview(data)
                nxt, _ep, legacy = scan_batches(view, sent[0], self.check_crcs)
                if nxt <= sent[0]:
                    continue
                st.fetch_offset = nxt
                st.buffered += len(view)
                todo.append((tp, st, view, sent, nxt, legacy, p.aborted_transactions))
        if refresh:
            self._spawn(self.client.refresh_metadata())
        self._wake.set()            # the next fetch goes out at once: decoding waits for getmany
        budget = DecompressionBudget(DEFAULT_MAX_SIZE)
        first = self._budget_first
        if first:       # partitions refused for want of budget last time are decoded first now
            todo.sort(key=lambda t: t[0] not in first)
        for tp, st, view, sent, nxt, legacy, aborted in todo:
            c = _Chunk(tp, (), None, sent[1], 0, sent=sent)
            c.steps = self._steps(c, st, view, nxt, legacy, aborted, budget)
            self._chunks.append(c)
        if todo:
            self._data.set()

    def _steps(self, c: _Chunk, st: _PState, view, nxt: int, legacy: bool, aborted,
               budget: DecompressionBudget):
        """One answer's records of partition `c.tp`, decoded a step at a time (getmany pulls the next
        step when the last one is handed out): yields (records, `nxt` on the last step else None,
        fetched bytes the step counts); the steps' bytes add up to the payload's (plus what the
        records grew to beyond it when decompressed, counted on the last step)."""
        tp, sent = c.tp, c.sent
        nbytes = len(view)
        before = budget.left
        c.full = before == budget.limit
        if c.full:
            self._budget_first.discard(tp)
        if self.isolation == READ_COMMITTED and aborted:
            runs = _kept_runs(view, sent[0], aborted)
        else:
            runs = [(0, nbytes)]
        step, total = _step(view, nxt, legacy)
        per = nbytes / total if total else 0.0        # fetched bytes counted per record until the last step
        counted = 0
        prefix = (tp.topic, tp.partition)
        # v2 CRCs were checked by scan_batches; a legacy entry's are checked while it is decoded
        check = self.check_crcs and legacy
        for i, (a, b) in enumerate(runs):
            cur = RecordCursor(view[a:b], check, budget, min_offset=sent[0], record_factory=ConsumerRecord,
                               prefix=prefix)
            final = i == len(runs) - 1
            while True:
                recs = self._deserialize(cur.take(step))
                if cur.done and final:
                    yield recs, nxt, nbytes - counted + self._grown(tp, st, sent[1], before - budget.left, nbytes)
                    return
                size = min(nbytes - counted, int(len(recs) * per))
                counted += size
                if recs:
                    yield recs, None, size
                if cur.done:
                    break
        yield [], nxt, nbytes - counted

    def _next_step(self, c: _Chunk, st: _PState) -> bool:
        """Decode chunk `c`'s next step into it; False when it failed (then, as the threaded fetcher:
        the partition is fetched again from its position, and the error is raised from the next read
        unless the answer's decompression budget was short, when it is decoded first next time)."""
        try:
            recs, nxt, size = next(c.steps)
        except StopIteration:
            c.steps = None
            return False
        except Exception as e:
            c.steps = None
            tp, sent = c.tp, c.sent
            self._set_position(tp, st, st.position)      # what was buffered or fetched after it is stale
            if c.full:
                log.error("records of %s fetched at offset %s could not be decoded: %s", tp, sent[0], e)
                self._errors.append(partition_decode_error(tp, sent[0], e))
                self._data.set()
            else:
                self._budget_first.add(tp)
            return False
        if nxt is not None:
            c.steps = None
        c.records, c.index, c.next_offset, c.nbytes = recs, 0, nxt, size
        self.records_fetched += len(recs)
        return True

    def _grown(self, tp, st: _PState, seek_epoch: int, spent: int, nbytes: int) -> int:
        """Bytes the decoded records hold beyond the fetched `nbytes` (decompressed `spent`), now
        counted as buffered too (unless the partition moved since: then they are dropped)."""
        if spent <= nbytes or st.seek_epoch != seek_epoch or self._parts.get(tp) is not st:
            return 0
        st.buffered += spent - nbytes
        return spent - nbytes

    def _deserialize(self, recs: list) -> list:
        kd, vd = self.key_deserializer, self.value_deserializer
        if kd is None and vd is None:
            return recs
        kd = kd or (lambda b: b)
        vd = vd or (lambda b: b)
        return [_new(ConsumerRecord, (r[0], r[1], r[2], r[3], r[4], kd(r[5]), vd(r[6]), r[7], r[8])) for r in recs]

    # -- reading ---------------------------------------------------------------------------------------
    def _raise_errors(self) -> None:
        while self._errors:
            err = self._errors.pop(0)
            if isinstance(err, NoOffsetForPartitionError):
                still = [tp for tp in err.partitions if tp in self._parts and self._parts[tp].position is None]
                if not still:
                    continue          # seeked since: nothing to report
            raise err
        if self.group is not None and self.group.error is not None:
            err, self.group.error = self.group.error, None
            raise err

    def _take(self, tps, max_records: int | None) -> dict:
        """Records waiting (of `tps` when given), at most `max_records`; a partition's next step is
        decoded here only while nothing else was taken, so one call decodes at most one step."""
        out: dict = {}
        n = 0
        keep = deque()
        limit = max_records if max_records is not None else self.max_poll_records
        while self._chunks:
            c = self._chunks.popleft()
            st = self._parts.get(c.tp)
            if st is None or st.seek_epoch != c.seek_epoch:
                continue
            if (tps and c.tp not in tps) or st.paused or (limit is not None and n >= limit):
                keep.append(c)
                continue
            while True:
                recs = c.records
                left = len(recs) - c.index
                if left:
                    take = left if limit is None else min(left, limit - n)
                    part = recs[c.index:c.index + take] if c.index or take < len(recs) else recs
                    have = out.get(c.tp)
                    if have is None:
                        out[c.tp] = part        # a fresh slice, or the step's own list: the chunk is done with it
                    else:
                        have.extend(part)
                    c.index += take
                    n += take
                    last = part[-1]
                    st.position, st.epoch = last[2] + 1, last[8]
                    if c.index < len(recs):
                        keep.append(c)
                        break
                if c.nbytes or c.next_offset is not None:       # the step is all handed out
                    if c.next_offset is not None:
                        st.position = max(st.position or 0, c.next_offset)
                    st.buffered = max(0, st.buffered - c.nbytes)
                    c.nbytes, c.next_offset = 0, None
                    if self._held:          # a fetch was held back for what waits: it may go out now
                        self._wake.set()
                if c.steps is None:
                    break
                if n:
                    keep.append(c)
                    break
                if not self._next_step(c, st):
                    break
        keep.extend(self._chunks)
        self._chunks = keep
        if not self._chunks:
            self._data.clear()
        return out

    def _take_one(self):
        """The next record of the first buffered chunk, or None when that is not simple (the general path)."""
        self._check()
        if self._errors:
            return None
        c = self._chunks[0]
        st = self._parts.get(c.tp)
        if st is None or st.seek_epoch != c.seek_epoch or st.paused or c.index >= len(c.records) - 1:
            return None
        if self.group is not None:
            self.group.last_app_poll = time.monotonic()
        rec = c.records[c.index]
        c.index += 1
        st.position, st.epoch = rec[2] + 1, rec[8]
        return rec

    async def getmany(self, *partitions: tuple[str, int], timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """{tp: [ConsumerRecord]} of what is fetched, waiting up to timeout_ms for something."""
        self._check()
        if self.group is not None:
            self.group.last_app_poll = time.monotonic()
        tps = {TopicPartition(*tp) for tp in partitions}
        now = time.monotonic()
        deadline = now + timeout_ms / 1000
        if now - self._turned >= LOOP_TURN_S:
            # records decode inside this call and a caller reading at full speed awaits nothing else:
            # the loop turns (I/O, timers, other tasks) at least every LOOP_TURN_S, twice, so that a
            # task its first turn wakes (a timer, an answer) runs in the second, not LOOP_TURN_S later
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            self._turned = time.monotonic()
            if self._stopped:
                raise ConsumerStoppedError("the consumer is stopped")
        while True:
            self._raise_errors()
            got = self._take(tps, max_records)
            if got:
                return got
            if self._errors:
                continue
            left = deadline - time.monotonic()
            if left <= 0 or self._stopped:
                return {}
            self._data.clear()
            woken = await self._data.wait(left)
            self._turned = time.monotonic()
            if not woken:
                return {}
            if self._stopped:
                raise ConsumerStoppedError("the consumer is stopped")

    async def getone(self, *partitions: tuple[str, int]) -> ConsumerRecord:
        """The next record (of `partitions`, if given), waiting as long as it takes."""
        if not partitions and self._chunks:
            rec = self._take_one()
            if rec is not None:
                return rec
        while True:
            got = await self.getmany(*partitions, timeout_ms=1000, max_records=1)
            for recs in got.values():
                return recs[0]

    def __aiter__(self):
        return self

    async def __anext__(self) -> ConsumerRecord:
        try:
            return await self.getone()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    # -- metadata --------------------------------------------------------------------------------------
    async def topics(self) -> set[str]:
        self._check()
        self.client.all_topics = True
        snap = await self.client.refresh_metadata()
        return set(snap.topics) - set(snap.internal_topics)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        parts = self.client.snapshot.topics.get(topic) if self.client is not None else None
        return None if parts is None else set(parts)


__all__ = ["AIOConsumer", "ConsumerStoppedError", "DECODE_SLICE_BYTES"]
