"""The asyncio driver of a consumer's group membership: the pure member machines
(`client/consumer/membership.py`, classic; `membership_848.py`, KIP-848) fed by tasks on the loop,
with the same per-machine strategy objects as the threaded driver (`client.consumer.group.DRIVING`).

* the heartbeat task feeds `Tick` at the deadline the machine asks for; it never waits for the
  application's code or for rebalance listeners (answers are handled as they arrive, in the task
  that sent the request), so heartbeats go on while a listener or the application is awaiting;
* the rebalance task feeds `Poll` when an answer may have moved the group on and at least every
  `auto_commit_interval_ms`, and runs what the machine asks of the application -- revocations,
  assignments (listeners are coroutines, awaited) and auto commits -- one round at a time; it does so
  only while the application has read records (getmany/getone) within `max_poll_interval_ms`, so a
  stuck application still leaves the group as Kafka's max.poll.interval.ms requires.

Offsets: `commit` (OffsetCommit with the machine's commit generation; its verdict from
`commit_failed`), `committed` (OffsetFetch, require_stable).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time

from kohort.client.consumer.group import DRIVING, ClassicDriving
from kohort.client.consumer.membership_common import (
    NO_GENERATION, Assign, AutoCommit, Close, MemberConfig, MetadataUpdate, NeedCoordinator, Poll, Raise,
    RequestFailed, RequestMetadata, Response, Revoke, Send, Subscribe, Tick, Unsubscribe, UseCoordinator,
)
from kohort.client.consumer.offsets import OFFSETS_BY_NAME_MAX_VERSION, offset_commit_request, offset_fetch_request
from kohort.protocol.framing import Versioned
from kohort.client.requests import parse_offset_fetch
from kohort.errors import (
    ErrorCode, IncompatibleBrokerVersionError, KafkaConnectionError, KafkaTimeoutError, KohortError, for_code,
)
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest
from kohort.structs import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

log = logging.getLogger("kohort.aio.group")


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class AIOGroupMember:
    """One consumer's membership; `consumer` supplies positions and takes assignments
    (`_on_assigned(tps)`, `_on_revoked(tps)`, `positions()`)."""

    def __init__(self, client, consumer, cfg: MemberConfig, group_protocol: str = "classic",
                 group_instance_id: str | None = None, leave_on_close: bool = True):
        self.client = client
        self.consumer = consumer
        self.cfg = cfg
        self.group_id = cfg.group_id
        self.group_instance_id = group_instance_id
        self.leave_on_close = leave_on_close
        if group_protocol not in DRIVING:
            raise ValueError(f"group_protocol must be 'classic' or 'consumer', not {group_protocol!r}")
        self.driving: ClassicDriving = DRIVING[group_protocol]
        self.m = self.driving.new_machine(cfg, _now_ms())
        self.listener = None
        self._pattern = None                 # a pattern matched here (classic protocol)
        self._pattern_topics: tuple = ()
        self._meta_version = -1
        self._wake_hb = asyncio.Event()
        self._wake_poll = asyncio.Event()
        self._round = asyncio.Lock()
        self._tasks: set = set()
        self._hb_task: asyncio.Task | None = None
        self._poll_task: asyncio.Task | None = None
        self._leave: asyncio.Future | None = None
        self.last_app_poll = time.monotonic()
        self.assigned_event = asyncio.Event()
        self.error: BaseException | None = None
        self._closing = False

    # -- views ---------------------------------------------------------------------------------------
    @property
    def generation(self):
        return self.m.generation

    def group_metadata(self) -> ConsumerGroupMetadata:
        g = self.m.generation
        return ConsumerGroupMetadata(self.group_id, g.generation_id, g.member_id, self.group_instance_id)

    def in_group(self) -> bool:
        return self.driving.in_group(self.m)

    # -- events in, actions out ---------------------------------------------------------------------
    def _handle(self, event) -> list:
        acts = []
        snap = self.client.snapshot
        if snap.version != self._meta_version and snap.updated_at:
            self._meta_version = snap.version
            acts += self.m.handle(MetadataUpdate(snap.version, {t: len(ps) for t, ps in snap.topics.items() if ps},
                                                 dict(snap.topic_ids)), _now_ms())
        acts += self.m.handle(event, _now_ms())
        app = []
        for a in acts:
            if isinstance(a, Send):
                self._spawn(self._send(a))
            elif isinstance(a, UseCoordinator):
                self.client.set_node_address(a.conn_id, a.host, a.port)
                log.info("group %s: coordinator is broker %s (%s:%s)", self.group_id, a.node_id, a.host, a.port)
            elif isinstance(a, RequestMetadata):
                self.client.add_topics(a.topics)
                self._spawn(self.client.refresh_metadata())
            else:
                app.append(a)
        self._wake_hb.set()            # the next deadline may be sooner now
        return app

    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)
        return t

    def _task_done(self, t) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.warning("group %s: background step failed: %r", self.group_id, t.exception())

    async def _send(self, a: Send) -> None:
        kind = a.tag[0]
        request = self.driving.request(a.request)
        try:
            conn = await self.client.connection(a.to)
            _, fut = conn.send(request, response_class=self.driving.response_class(kind))
            if kind == "leave":
                self._leave = fut
            t = a.timeout_ms or self.cfg.request_timeout_ms
            try:
                resp = await asyncio.wait_for(asyncio.shield(fut), t / 1000)
            except asyncio.TimeoutError:
                conn.close()
                raise KafkaTimeoutError(f"{kind}: no answer within {t} ms") from None
            ev = Response(a.tag, resp)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            ev = RequestFailed(a.tag, str(e), unsupported=isinstance(e, IncompatibleBrokerVersionError))
        if self._closing and kind != "leave":
            return
        rest = self._handle(ev)
        if rest:
            log.debug("group %s: actions %s from an answer wait for the next round", self.group_id, rest)
        if kind in self.driving.wake_tags:
            self._wake_poll.set()

    # -- subscription --------------------------------------------------------------------------------
    def subscribe(self, topics, pattern=None, listener=None) -> None:
        self.listener = listener
        if pattern is not None and self.driving.broker_resolves_regex:
            self.client.all_topics = True
            self._handle(Subscribe((), regex=pattern.pattern))
        elif pattern is not None:
            self.client.all_topics = True
            snap = self.client.snapshot
            self._pattern_topics = tuple(sorted(t for t in snap.topics
                                                if pattern.match(t) and t not in snap.internal_topics))
            self._handle(Subscribe(self._pattern_topics))
        else:
            self.client.add_topics(topics)
            self._handle(Subscribe(tuple(sorted(set(topics)))))
        self._pattern = pattern if pattern is not None and not self.driving.broker_resolves_regex else None
        self._wake_poll.set()

    def unsubscribe(self) -> None:
        self._handle(Unsubscribe())

    def start(self) -> None:
        self._hb_task = asyncio.create_task(self._heartbeat_loop(), name=f"kohort-aio-heartbeat-{self.group_id}")
        self._poll_task = asyncio.create_task(self._rebalance_loop(), name=f"kohort-aio-rebalance-{self.group_id}")

    # -- the heartbeat task ----------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while not self._closing:
            try:
                self._handle(Tick())
            except Exception:
                log.exception("group %s: heartbeat tick failed", self.group_id)
            self._wake_hb.clear()      # _handle sets it; only another task's event may cut the wait short
            due = self.m.next_deadline()
            wait_ms = 500 if due is None else min(500, max(5, due - _now_ms()))
            try:
                await asyncio.wait_for(self._wake_hb.wait(), wait_ms / 1000)
            except asyncio.TimeoutError:
                pass

    # -- the rebalance task ----------------------------------------------------------------------------
    async def _rebalance_loop(self) -> None:
        interval = min(1.0, (self.cfg.auto_commit_interval_ms or 1000) / 1000)
        while not self._closing:
            try:
                await asyncio.wait_for(self._wake_poll.wait(), interval)
            except asyncio.TimeoutError:
                pass
            self._wake_poll.clear()
            if self._closing:
                return
            if time.monotonic() - self.last_app_poll > self.cfg.rebalance_timeout_ms / 1000:
                continue                # the application stopped reading: max.poll.interval.ms runs out
            try:
                await self.poll_round()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("group %s: %s", self.group_id, e)
                self.error = e
                self.assigned_event.set()

    async def poll_round(self) -> None:
        """One Poll and the application actions it brings (listeners awaited), then once more when
        the machine needs it (join after revoking; KIP-848 acknowledge)."""
        async with self._round:
            if self._pattern is not None and self.client.snapshot.updated_at:
                names = tuple(sorted(t for t in self.client.snapshot.topics
                                     if self._pattern.match(t) and t not in self.client.snapshot.internal_topics))
                if names != self._pattern_topics:
                    self._pattern_topics = names
                    self._handle(Subscribe(names))
            acts = self._handle(Poll())
            await self._run(acts)
            if self.driving.poll_again(acts):
                await self._run(self._handle(Poll()))

    async def _run(self, acts) -> None:
        for a in acts:
            if isinstance(a, Revoke):
                await self._revoke(a)
            elif isinstance(a, Assign):
                await self._assign(a)
            elif isinstance(a, AutoCommit):
                offs = self.consumer.positions()
                if offs:
                    self._spawn(self._auto_commit(offs))
            elif isinstance(a, Raise):
                raise a.error

    async def _auto_commit(self, offs) -> None:
        try:
            await self.commit(offs, timeout=self.cfg.request_timeout_ms / 1000)
        except KohortError as e:
            log.warning("group %s: auto commit failed: %s", self.group_id, e)

    async def _revoke(self, a: Revoke) -> None:
        tps = set(a.partitions)
        if a.commit:
            offs = {tp: o for tp, o in self.consumer.positions().items() if tp in tps}
            if offs:
                try:
                    await self.commit(offs, timeout=min(5.0, self.cfg.rebalance_timeout_ms / 1000),
                                      generation=self.m.generation)
                except KohortError as e:
                    log.warning("group %s: commit before revoking failed: %s", self.group_id, e)
        self.consumer._on_revoked(tps)
        cb = None
        if self.listener is not None:
            cb = getattr(self.listener, "on_partitions_lost", None) if a.lost else None
            cb = cb or self.listener.on_partitions_revoked
        if cb is not None:
            await _call(cb, set(tps), self.group_id)

    async def _assign(self, a: Assign) -> None:
        self.consumer._on_assigned(set(a.assignment), set(a.added))
        self.client.add_topics({tp.topic for tp in a.assignment})
        log.info("group %s: generation %s, member %s, assigned %d partitions (+%d)", self.group_id,
                 self.m.generation.generation_id, self.m.member_id, len(a.assignment), len(a.added))
        if self.listener is not None and (a.added or not a.cooperative):
            await _call(self.listener.on_partitions_assigned, set(a.added), self.group_id)
        self.assigned_event.set()

    # -- offsets ---------------------------------------------------------------------------------------
    async def _coordinator(self, deadline: float) -> int:
        while True:
            self._handle(NeedCoordinator())
            co = self.m.coordinator
            if co is not None:
                return co.conn_id
            fatal = self.m.take_fatal()
            if fatal is not None:
                raise fatal
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"coordinator of group {self.group_id!r} not found in time")
            await asyncio.sleep(0.02)

    async def commit(self, offsets: dict, timeout: float = 30.0, generation=None) -> None:
        """OffsetCommit of {tp: OffsetAndMetadata} in the member's generation; retries retriable errors."""
        if not offsets:
            return
        gen = generation if generation is not None else self.m.commit_generation()
        deadline = time.monotonic() + timeout
        gid = self.group_id
        iid = self.group_instance_id if self.m.subscribed else None
        while True:
            conn_id = await self._coordinator(deadline)
            try:
                resp = await self.client.request(conn_id, Versioned(
                    OffsetCommitRequest.API_KEY,
                    lambda v: offset_commit_request(v, gid, gen.generation_id, gen.member_id, iid, offsets),
                    OFFSETS_BY_NAME_MAX_VERSION))
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                self.m.offset_request_failed(0, _now_ms())
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"commit did not complete within {timeout:.1f}s: {e}") from None
                continue
            code = next((p.error_code for t in resp.topics for p in t.partitions if p.error_code), 0)
            verdict, err = self.m.commit_failed(code, gen, _now_ms())
            if verdict == "ok":
                return
            if verdict == "stale" and generation is not None:
                gen = self.m.generation
                continue
            if verdict in ("raise", "stale"):
                raise err
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"commit did not succeed within {timeout:.1f}s ({for_code(code).name})")
            await asyncio.sleep(self.cfg.retry_backoff_ms / 1000)

    async def committed(self, tps, timeout: float = 30.0) -> dict:
        """{tp: OffsetAndMetadata or None} from the coordinator (require_stable: waits out open transactions)."""
        deadline = time.monotonic() + timeout
        gid = self.group_id
        tps = list(tps)
        while True:
            conn_id = await self._coordinator(deadline)
            try:
                conn = await self.client.connection(conn_id)
                version, fut = conn.send(Versioned(OffsetFetchRequest.API_KEY,
                                                   lambda v: offset_fetch_request(v, gid, tps, require_stable=True),
                                                   OFFSETS_BY_NAME_MAX_VERSION))
                resp = await asyncio.wait_for(asyncio.shield(fut), self.cfg.request_timeout_ms / 1000)
            except (KafkaConnectionError, asyncio.TimeoutError):
                self.m.offset_request_failed(0, _now_ms())
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError("OffsetFetch did not complete in time") from None
                await asyncio.sleep(self.cfg.retry_backoff_ms / 1000)
                continue
            err, got = parse_offset_fetch(version, resp)
            unstable = any(e == ErrorCode.UNSTABLE_OFFSET_COMMIT for e, _ in got.values())
            if err == 0 and not unstable:
                bad = [(tp, e) for tp, (e, _) in got.items() if e]
                if bad:
                    raise for_code(bad[0][1])(f"OffsetFetch of {bad[0][0]}")
                return {tp: got.get(tp, (0, None))[1] for tp in tps}
            if err and not for_code(err).retriable:
                raise for_code(err)(f"OffsetFetch for group {gid!r}")
            if err:
                self.m.offset_request_failed(err, _now_ms())
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError("OffsetFetch did not complete in time")
            await asyncio.sleep(self.cfg.retry_backoff_ms / 1000)

    # -- close ------------------------------------------------------------------------------------------
    async def close(self, timeout: float = 5.0) -> None:
        """Revoke (listeners run) and leave the group (dynamic members), then stop the tasks."""
        try:
            if self.m.subscribed:
                leave = self.leave_on_close and (self.group_instance_id is None or self.driving.static_member_leaves)
                async with self._round:
                    acts = self._handle(Close(leave=leave))
                    self._closing = True
                    try:
                        await self._run(acts)
                    except KohortError as e:
                        log.debug("group %s: close: %s", self.group_id, e)
                for _ in range(50):
                    if self._leave is not None or not leave:
                        break
                    await asyncio.sleep(0.01)
                if self._leave is not None:
                    try:
                        await asyncio.wait_for(asyncio.shield(self._leave), timeout)
                    except Exception as e:
                        log.debug("group %s: LeaveGroup got no answer: %s", self.group_id, e)
        finally:
            self._closing = True
            for t in (self._hb_task, self._poll_task, *self._tasks):
                if t is not None:
                    t.cancel()
            await asyncio.gather(*(t for t in (self._hb_task, self._poll_task, *self._tasks) if t is not None),
                                 return_exceptions=True)


async def _call(cb, tps, group_id: str) -> None:
    """A rebalance listener method: a coroutine function is awaited; errors are logged."""
    try:
        r = cb(tps)
        if inspect.isawaitable(r):
            await r
    except Exception:
        log.exception("group %s: rebalance listener %r raised", group_id, cb)


__all__ = ["AIOGroupMember", "NO_GENERATION", "OffsetAndMetadata", "TopicPartition"]
