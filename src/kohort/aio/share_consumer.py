"""AIOShareConsumer: kohort's share-group consumer (KIP-932) on the running asyncio loop, with the
semantics of Java's KafkaShareConsumer and of the threaded `kohort.ShareConsumer`.

    async with AIOShareConsumer(bootstrap_servers="h:9092", group_id="workers") as c:
        c.subscribe(["jobs"])
        async for record in c:
            ...                      # implicit mode: the next poll (or commit) ACCEPTs it

The asyncio driver of the same pure parts as the threaded consumer: `client.share.membership.
ShareMembership` (ShareGroupHeartbeat), one `client.share.session.ShareSession` per partition leader
(ShareFetch / ShareAcknowledge), `client.share.acknowledgements.Acknowledgements`, and what both
drivers do alike in `client.share.driving` (configuration checks, reading the answers, records from
acquired ranges, handing records out, the acknowledgements and commits on their way to the leaders in
a `CommitBook`).

Tasks: the heartbeat task feeds the member `Tick` at the deadline it asks for and sends heartbeats
(and FindCoordinator) on the coordinator's own connection, so they never wait behind a long-polling
ShareFetch nor for the application: a slow `async for` body keeps its membership. Each request runs
in a task of its own, at most one ShareFetch or ShareAcknowledge in flight per leader; a request's
bytes are written whole before its task can be suspended, so cancelling `poll()` leaves no
half-sent request (the answer is still taken by its task). A leader is sent a ShareFetch only while
the application waits in `poll()`, no records are buffered and it holds none unacknowledged (the
acknowledgements of the last batch ride on that fetch); answers to acknowledgements are reported to
`acknowledgement_commit_callback` (a function or a coroutine function) inside poll, commit_sync and
close.

Configuration as the threaded consumer's: a dict of Kafka's consumer keys and/or keyword arguments
with "_" for "." (`bootstrap_servers=`, `group_id=`, `share_acknowledgement_mode="explicit"`...), the
same checks and ConfigError for the keys KafkaShareConsumer refuses; `ssl_context=` an
`ssl.SSLContext` for SSL/SASL_SSL (default: the system's trust).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import ssl as _ssl
import time
import uuid as _uuid
from collections import deque
from typing import Any, Awaitable, Callable, Iterable, Mapping, Union

from kohort.aio.client import AIOClient, ClientSettings
from kohort.client.consumer.membership import Raise, RequestFailed, Response, Send
from kohort.client.share import membership as M
from kohort.client.share.acknowledgements import ACCEPT, IllegalStateError
from kohort.client.share.consumer import AcknowledgeType, ShareConsumerClosedError
from kohort.client.share.driving import CommitBook, Leader, acquired_records, share_settings
from kohort.client.share.session import FetchLimits, ShareSession
from kohort.errors import (
    ErrorCode, IncompatibleBrokerVersionError, KafkaError, KafkaTimeoutError, KohortError, for_code,
)
from kohort.structs import ConsumerRecord, TopicPartition

log = logging.getLogger("kohort.aio.share")

__all__ = ["AIOShareConsumer", "AcknowledgeType", "IllegalStateError", "ShareConsumerClosedError"]

SHARE_FETCH = 78

# callback(offsets, error): the offsets acknowledged per share-partition, and None or the error of
# their commit; a coroutine function is awaited
AcknowledgementCommitCallback = Callable[[dict[TopicPartition, set[int]], Union[KafkaError, None]],
                                         Union[None, Awaitable[None]]]


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class AIOShareConsumer:
    """A share-group consumer on the running loop. See the module docstring."""

    def __init__(self, config: Mapping[str, Any] | None = None, *,
                 acknowledgement_commit_callback: AcknowledgementCommitCallback | None = None,
                 ssl_context: _ssl.SSLContext | None = None, **kwargs: Any) -> None:
        st = share_settings(config, kwargs, acknowledgement_commit_callback)
        c = self.config = st.config
        self.group_id: str = c["group.id"]
        self.acknowledgement_mode = st.acknowledgement_mode
        self.acquire_mode = st.acquire_mode
        self.acknowledgement_commit_callback: Callable | None = st.callback
        self.settings = ClientSettings.make(
            list(c["bootstrap.servers"]), client_id=c["client.id"], request_timeout_ms=c["request.timeout.ms"],
            metadata_max_age_ms=c["metadata.max.age.ms"], retry_backoff_ms=c["retry.backoff.ms"],
            security_protocol=str(c["security.protocol"]).upper(), ssl_context=ssl_context,
            sasl_mechanism=c["sasl.mechanism"] or c["sasl.mechanisms"] or "PLAIN",
            sasl_plain_username=c["sasl.username"], sasl_plain_password=c["sasl.password"])
        self._max_poll_records: int = c["max.poll.records"]
        self._api_timeout_ms: int = c["default.api.timeout.ms"]
        self._kd, self._vd = c["key.deserializer"], c["value.deserializer"]
        self._check_crcs = c["check.crcs"]
        self._limits = FetchLimits(max_wait_ms=c["fetch.max.wait.ms"], min_bytes=c["fetch.min.bytes"],
                                   max_bytes=c["fetch.max.bytes"], max_records=self._max_poll_records,
                                   batch_size=self._max_poll_records, acquire_mode=st.acquire_mode_id)
        self._member = M.ShareMembership(M.ShareMemberConfig(
            group_id=self.group_id, rack_id=c["client.rack"] or None, retry_backoff_ms=c["retry.backoff.ms"],
            request_timeout_ms=c["request.timeout.ms"]))
        self._client: AIOClient | None = None
        self._leaders: dict[int, Leader] = {}
        self._assignment: dict[_uuid.UUID, frozenset] = {}
        self._names: dict[_uuid.UUID, str] = {}
        self._ids: dict[str, _uuid.UUID] = {}
        self._buffer: deque = deque()             # (tip, [records with delivery counts], fetched at)
        self._iter: deque = deque()               # records of the last poll not yet taken by `async for`
        self._want_records = False
        self._book = CommitBook(st.acknowledgement_mode, self._names, self._ids, self._buffer, time.monotonic)
        self._subscribed: tuple[str, ...] = ()
        self._leaving = False
        self._left: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._hb_wake: asyncio.Event | None = None
        self._hb_task: asyncio.Task | None = None
        self._leave_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._connecting: set[int] = set()
        self._meta_task: asyncio.Task | None = None
        self._meta_asked = 0.0
        self._fatal: BaseException | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (metadata from the bootstrap servers) and start the heartbeat task."""
        self._check_open()
        if self._client is not None:
            return
        self._left, self._changed, self._hb_wake = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._left.set()
        self._client = AIOClient(self.settings)
        self._client.add_topics(self._subscribed)
        await self._client.refresh_metadata()
        self._hb_task = asyncio.create_task(self._heartbeat_loop(), name=f"kohort-aio-share-heartbeat-{self.group_id}")
        if self._subscribed:
            self._left.clear()
            self._member_do(M.Subscribe(self._subscribed))

    async def __aenter__(self) -> "AIOShareConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout_ms: int | None = None) -> None:
        """Send pending acknowledgements and release what this member holds (ShareAcknowledge epoch -1
        to each leader with a session), leave the group (heartbeat epoch -1), stop the tasks."""
        if self._closed:
            return
        try:
            if self._leave_task is not None and not self._leave_task.done():
                await asyncio.wait([self._leave_task])         # unsubscribe()'s leave, under way
            elif self._client is not None and self._subscribed:
                await self._leave(self._api_timeout_ms if timeout_ms is None else timeout_ms)
        finally:
            self._closed = True
            await self._dispatch_callbacks()
            tasks = [t for t in (self._hb_task, self._meta_task, *self._tasks) if t is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._client is not None:
                await self._client.close()

    stop = close

    # -- subscription ------------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str) -> None:
        """Join the share group for `topics` (names; no patterns); an empty list is unsubscribe()."""
        self._check_open()
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics:
            self.unsubscribe()
            return
        if not all(isinstance(t, str) and t for t in topics):
            raise KohortError(f"subscribe() needs a list of topic names, got {topics!r}")
        if self._leaving:
            raise IllegalStateError("subscribe() while the previous subscription is still leaving")
        self._subscribed = tuple(sorted(set(topics)))
        if self._client is not None:
            self._client.add_topics(self._subscribed)
            self._refresh_metadata(force=True)
            self._left.clear()
            self._member_do(M.Subscribe(self._subscribed))

    def subscription(self) -> set[str]:
        return set(self._subscribed)

    def unsubscribe(self) -> None:
        """Leave the share group; what this member holds is released and it leaves in the background
        (await close() or `await unsubscribe_wait()` to wait for it)."""
        self._check_open()
        if self._client is None:
            self._subscribed = ()
            return
        if self._subscribed and not self._leaving:
            self._leave_task = self._spawn(self._leave(self._api_timeout_ms))

    async def unsubscribe_wait(self, timeout_ms: int | None = None) -> None:
        """unsubscribe() and wait until the member has left."""
        self._check_open()
        if self._leave_task is not None and not self._leave_task.done():
            await asyncio.wait([self._leave_task])
        elif self._client is not None and self._subscribed:
            await self._leave(self._api_timeout_ms if timeout_ms is None else timeout_ms)
        self._subscribed = ()

    def assignment(self) -> set[TopicPartition]:
        """The partitions the coordinator assigned to this member (shared with other members)."""
        return {TopicPartition(self._names[t], p) for t, ps in self._assignment.items() if t in self._names
                for p in ps}

    @property
    def member_id(self) -> str:
        return self._member.member_id

    def acquisition_lock_timeout_ms(self) -> int | None:
        """The acquisition lock duration the leaders reported (None before the first answer)."""
        return self._book.lock_timeout_ms

    # -- consuming -------------------------------------------------------------------------------------
    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Up to max.poll.records records acquired for this member (possibly none), waiting at most
        `timeout_ms`. Implicit mode ACCEPTs the records the previous poll returned; explicit mode
        raises IllegalStateError while any of them is unacknowledged."""
        self._check_started()
        if not self._subscribed:
            raise IllegalStateError("poll() on a share consumer that is not subscribed to any topic")
        self._raise_pending()
        self._book.acks.before_poll()
        self._iter.clear()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000
        self._want_records = True
        try:
            while True:
                self._changed.clear()
                self._step()
                await self._dispatch_callbacks()
                self._raise_pending()
                if self._buffer:
                    out = self._hand_out()
                    if out:
                        return out
                left = deadline - loop.time()
                if left <= 0:
                    return []
                await _wait(self._changed, min(left, 0.5))
        finally:
            self._want_records = False

    def __aiter__(self) -> "AIOShareConsumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._iter:
            if self._closed:
                raise StopAsyncIteration
            self._iter.extend(await self.poll(1000))
        return self._iter.popleft()

    def acknowledge(self, record: ConsumerRecord, type: int = ACCEPT) -> None:
        """Acknowledge one record the last poll returned (explicit mode): ACCEPT, RELEASE, REJECT or
        RENEW; sent with the next poll's fetch or by commit_sync/commit_async."""
        if not isinstance(record, ConsumerRecord):
            raise TypeError(f"acknowledge() takes a ConsumerRecord returned by poll(), got {record!r}")
        self._acknowledge(record.topic, record.partition, record.offset, type, record)

    def acknowledge_offset(self, topic: str, partition: int, offset: int, type: int = ACCEPT) -> None:
        """acknowledge() by coordinates (Java's acknowledge(topic, partition, offset, type))."""
        self._acknowledge(topic, partition, offset, type, None)

    def _acknowledge(self, topic: str, partition: int, offset: int, type: int, record) -> None:
        self._check_open()
        self._book.acknowledge(topic, partition, offset, type, record, self._leaders)

    async def commit_sync(self, timeout_ms: int | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Send the acknowledgements pending (implicit mode: the last poll's records as ACCEPT) in
        ShareAcknowledge requests and wait for the answers: {partition: None or the error}."""
        self._check_started()
        t = self._api_timeout_ms if timeout_ms is None else timeout_ms
        loop = asyncio.get_running_loop()
        deadline = loop.time() + t / 1000
        cid = self._book.commit(True, self._leaders, self._leader_of)
        if cid is None:
            await self._dispatch_callbacks()
            return {}
        while True:
            self._changed.clear()
            self._step()
            if self._book.unanswered(cid) <= 0:
                break
            left = deadline - loop.time()
            if left <= 0:
                break
            await _wait(self._changed, left)
        result, waiting = self._book.finish(cid)
        await self._dispatch_callbacks()
        if waiting:
            raise KafkaTimeoutError(f"commit_sync: no answer to the acknowledgements within {t} ms")
        return result

    def commit_async(self) -> None:
        """Send the acknowledgements pending; the outcome goes to acknowledgement_commit_callback
        (from the next poll, commit_sync or close)."""
        self._check_started()
        self._book.commit(False, self._leaders, self._leader_of)
        self._step()

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        if callback is not None and not callable(callback):
            raise TypeError("the acknowledgement commit callback must be callable or None")
        self.acknowledgement_commit_callback = callback

    # -- application-side helpers ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ShareConsumerClosedError("the share consumer is closed")

    def _check_started(self) -> None:
        self._check_open()
        if self._client is None:
            raise KohortError("the share consumer is not started: await start() first")

    def _raise_pending(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        for a in self._member_do(M.Poll()):
            if isinstance(a, Raise):
                raise a.error

    def _hand_out(self) -> list[ConsumerRecord]:
        return self._book.hand_out(self._max_poll_records, time.monotonic())

    async def _dispatch_callbacks(self) -> None:
        reports = self._book.reports
        while reports:
            offsets, error = reports.popleft()
            cb = self.acknowledgement_commit_callback
            if cb is None:
                continue
            try:
                r = cb(offsets, error)
                if inspect.isawaitable(r):
                    await r
            except Exception:
                log.exception("acknowledgement_commit_callback raised")

    async def _leave(self, timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        self._leaving = True
        try:
            self._book.close_sessions(self._leaders, self._leader_of)
            self._buffer.clear()
            while True:
                self._changed.clear()
                self._step()
                if not any(lead.acks_out or lead.busy for lead in self._leaders.values()):
                    break
                left = deadline - loop.time()
                if left <= 0:
                    break
                await _wait(self._changed, min(left, 0.1))
            self._member_do(M.Close())
            left = deadline - loop.time()
            if left > 0 and not self._left.is_set():
                await _wait(self._left, left)
        finally:
            self._subscribed = ()
            self._buffer.clear()
            self._iter.clear()
            self._leaving = False
            self._leaders.clear()
            self._assignment = {}
            self._book.reset()
        await self._dispatch_callbacks()

    # -- the member and its heartbeat task ------------------------------------------------------------------
    def _member_do(self, event) -> list:
        acts = self._member.handle(event, _now_ms())
        for a in acts:
            if isinstance(a, Send):
                self._spawn(self._heartbeat(a))
            elif isinstance(a, M.LookupCoordinator):
                self._spawn(self._find_coordinator())
            elif isinstance(a, M.AssignmentChanged):
                self._assignment = dict(a.assignment)
                log.debug("share member %s assignment %s", self.member_id, self._assignment)
            elif isinstance(a, M.Left):
                self._left.set()
        if acts:
            self._hb_wake.set()
            self._changed.set()
        return acts

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            try:
                self._member_do(M.Tick())
            except Exception:
                log.exception("share group %s: heartbeat tick failed", self.group_id)
            self._hb_wake.clear()
            due = self._member.next_deadline_ms()
            wait_ms = 500 if due is None else min(500, max(5, due - _now_ms()))
            await _wait(self._hb_wake, wait_ms / 1000)

    async def _heartbeat(self, a: Send) -> None:
        try:
            resp = await self._client.request(a.to, a.request, timeout_ms=a.timeout_ms)
        except asyncio.CancelledError:
            raise
        except IncompatibleBrokerVersionError as e:
            self._member_do(RequestFailed(a.tag, str(e), unsupported=True))
            return
        except Exception as e:
            self._member_do(RequestFailed(a.tag, str(e)))
            return
        if resp.error_code:
            log.debug("ShareGroupHeartbeat: %s %s", for_code(resp.error_code).__name__, resp.error_message)
        self._member_do(Response(a.tag, resp))

    async def _find_coordinator(self) -> None:
        try:
            conn_id = await self._client.find_coordinator(self.group_id)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.debug("FindCoordinator failed: %s", e)
            if isinstance(e, KafkaError) and e.code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                self._fatal = e
            self._member_do(M.CoordinatorLost())
            self._changed.set()
            return
        self._member_do(M.CoordinatorFound(conn_id))

    # -- leaders: share sessions, fetches and acknowledgements ---------------------------------------------
    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)
        return t

    def _task_done(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.warning("share consumer %s: background step failed: %r", self.group_id, t.exception())
            self._fatal = KohortError(f"share consumer driver failed: {t.exception()!r}")
            if self._changed is not None:
                self._changed.set()

    def _step(self) -> None:
        """Turn the machines once: names from metadata, then each leader's next request."""
        if self._client is None or self._closed:
            return
        if time.monotonic() - self._client.snapshot.updated_at > self.settings.metadata_max_age_ms / 1000:
            self._refresh_metadata()
        ids = self._client.snapshot.topic_ids
        for name in self._subscribed:
            tid = ids.get(name)
            if tid is not None and self._ids.get(name) != tid:
                self._ids[name] = tid
                self._names[tid] = name
        self._drive_leaders()

    def _refresh_metadata(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._meta_task is not None and not self._meta_task.done():
            return
        if not force and now - self._meta_asked < self.settings.retry_backoff_ms / 1000:
            return
        self._meta_asked = now
        self._meta_task = asyncio.ensure_future(self._metadata())

    async def _metadata(self) -> None:
        try:
            await self._client.refresh_metadata()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.debug("share consumer metadata: %s", e)
        self._changed.set()

    def _leader_of(self, tip) -> int | None:
        name = self._names.get(tip[0])
        return None if name is None else self._client.leader_for(TopicPartition(name, tip[1]))

    def _wanted(self) -> dict[int, set]:
        out: dict[int, set] = {}
        missing = False
        for tid, parts in self._assignment.items():
            for p in parts:
                node = self._leader_of((tid, p))
                if node is None:
                    missing = True
                    continue
                out.setdefault(node, set()).add((tid, p))
        if missing:
            self._refresh_metadata()
        return out

    def _drive_leaders(self) -> None:
        wanted = {} if self._leaving else self._wanted()
        for node in set(wanted) | set(self._leaders):
            lead = self._leaders.get(node)
            if lead is None:
                versions = self._client.api_versions(node)
                if versions is None:
                    if node not in self._connecting:
                        self._connecting.add(node)
                        self._spawn(self._connect(node))
                    continue
                rng = versions.get(SHARE_FETCH)
                if rng is None or rng[1] < 1:
                    self._fatal = IncompatibleBrokerVersionError("ShareFetch (share groups, KIP-932)", (1, 2), rng)
                    return
                lead = self._leaders[node] = Leader(node, ShareSession(self.group_id, self.member_id,
                                                                       version=min(2, rng[1])))
            if lead.busy:
                continue
            if lead.acks_out:
                self._send_acknowledge(lead)
            elif (self._want_records and not self._leaving and wanted.get(node) and not self._buffer
                  and not self._book.holding()):
                self._send_fetch(lead, wanted[node])

    async def _connect(self, node: int) -> None:
        try:
            await self._client.connection(node)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.debug("share consumer: cannot connect to broker %s: %s", node, e)
            await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
            self._refresh_metadata()
        finally:
            self._connecting.discard(node)
        self._changed.set()

    def _send_fetch(self, lead: Leader, parts: set) -> None:
        built = self._book.fetch(lead, parts, self._limits, self._leader_of)
        self._spawn(self._fetch(lead, built))

    async def _fetch(self, lead: Leader, built) -> None:
        try:
            conn = await self._client.connection(lead.node)
            resp = await conn.request(built.request, max_version=lead.session.version,
                                      timeout_ms=self.settings.request_timeout_ms + self._limits.max_wait_ms)
        except asyncio.CancelledError:
            lead.busy = False
            raise
        except Exception as e:
            log.debug("ShareFetch to %s failed: %s", lead.node, e)
            self._book.fetch_failed(lead, built, e)
            self._after_answer()
            return
        out = self._book.fetch_answered(lead, built, resp)
        if out.error is not None:
            log.debug("ShareFetch to %s: %s", lead.node, out.error)
        if out.fatal:
            self._fatal = out.error
        if out.refresh_metadata:
            self._refresh_metadata()
        for tip, p in out.acquired:
            recs = acquired_records(self._names.get(tip[0]), tip, p, self._book.acks, self._check_crcs,
                                    self._kd, self._vd, log)
            if recs:
                self._buffer.append((tip, recs, time.monotonic()))
        self._after_answer()

    def _send_acknowledge(self, lead: Leader) -> None:
        step = self._book.next_acknowledge(lead)
        if step is None:                          # nothing to send: what could not go is reported
            self._changed.set()
            return
        cid, built = step
        self._spawn(self._acknowledge_request(lead, cid, built))

    async def _acknowledge_request(self, lead: Leader, cid, built) -> None:
        try:
            conn = await self._client.connection(lead.node)
            resp = await conn.request(built.request, max_version=lead.session.version,
                                      timeout_ms=self.settings.request_timeout_ms)
        except asyncio.CancelledError:
            lead.busy = False
            raise
        except Exception as e:
            self._book.acknowledge_answered(lead, cid, built, None, e)
            self._after_answer()
            return
        self._book.acknowledge_answered(lead, cid, built, resp, None)
        self._after_answer()

    def _after_answer(self) -> None:
        """An answer freed its leader: acknowledgements waiting for it go out now (a commit_async made
        while a fetch was in flight), then whoever waits is woken."""
        if not self._closed:
            self._step()
        self._changed.set()


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Until `event` is set or `timeout` seconds passed."""
    if event.is_set():
        return
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        pass
