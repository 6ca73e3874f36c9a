"""The I/O driver of a consumer's group membership (the logic: the pure machines `membership`, `membership_848`).

GroupMember feeds the state machine its events and carries out its actions:

* the application thread: subscribe/unsubscribe, `poll_hook` (a `Poll` event: joins, rebalance
  callbacks, auto commit), commits and committed-offset lookups, close;
* the heartbeat thread: `Tick` events at the deadline the machine asks for (heartbeats, session and
  max.poll.interval.ms timeouts, coordinator rediscovery) — independent of poll(), as Java's
  heartbeat thread;
* the network I/O thread: answers to the machine's requests become `Response`/`RequestFailed` events
  at once, so a JoinGroup or SyncGroup answer is handled while the application is busy.

Every event goes through `_handle` under one lock; requests are sent there. Callbacks and commits
(`Revoke`, `Assign`, `AutoCommit`, `Raise`) only come from application events and run on the
application thread, outside the lock, so heartbeats go on during a long callback.

With group.protocol=consumer the machine is `membership_848.ConsumerMembership` (KIP-848): the same
events and actions, ConsumerGroupHeartbeat instead of JoinGroup/SyncGroup/Heartbeat; its member id
is made here (a random Kafka Uuid string, KIP-1082) and a v0 broker is sent "" to join instead.
What differs between the two machines for the driver is one small strategy object per machine
(`ClassicDriving`, `ConsumerDriving`), chosen once from group.protocol.

Offsets: OffsetFetch for partitions without a position (seeking to the committed offset *unvalidated*
when it carries a leader epoch, so the fetcher checks it with OffsetForLeaderEpoch first, KIP-320);
auto commit every auto.commit.interval.ms, before revocation and on close; commit_sync retries
retriable errors; async commits go out one at a time so they land in order.
"""
from __future__ import annotations

import base64
import logging
import threading
import uuid
import time
from collections import deque
from concurrent.futures import Future

from kohort.client.consumer.membership import (
    COMPLETING_REBALANCE, PREPARING_REBALANCE, REDISCOVER, STABLE, UNJOINED, Membership, error_action,
)
from kohort.client.consumer.membership_848 import ConsumerMembership
from kohort.client.consumer.membership_common import (
    NO_GENERATION, Assign, AutoCommit, Close, CommitFailedError, GroupError, MemberConfig, MemberMachine,
    MetadataUpdate, NeedCoordinator, Poll, Raise, RebalanceInProgressError, RequestFailed, RequestMetadata,
    Response, Revoke, Send, Subscribe, Tick, Unsubscribe, UseCoordinator,
)
from kohort.client.consumer.offsets import (
    OFFSETS_BY_NAME_MAX_VERSION, SubscriptionState, offset_commit_request, offset_fetch_request, parse_offset_fetch,
)
from kohort.protocol.framing import Versioned
from kohort.errors import (
    ConnectionClosedError, ErrorCode, IncompatibleBrokerVersionError, KafkaError, KafkaTimeoutError,
    KafkaConnectionError, KohortError, for_code,
)
from kohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest, heartbeat_for_version
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
from kohort.protocol.messages.heartbeat import HeartbeatRequest
from kohort.protocol.messages.join_group import JoinGroupRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest
from kohort.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from kohort.protocol.messages.sync_group import LenientSyncGroupResponse, SyncGroupRequest
from kohort.structs import TopicPartition

log = logging.getLogger("kohort.client.group")

OFFSET_COMMIT, OFFSET_FETCH = OffsetCommitRequest.API_KEY, OffsetFetchRequest.API_KEY
OFFSET_FOR_LEADER_EPOCH = OffsetForLeaderEpochRequest.API_KEY
# other names of two member states, for callers that use them (health()["member_state"] shows Java's)
JOINING, SYNCING = PREPARING_REBALANCE, COMPLETING_REBALANCE


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


# -- what differs between the two machines, for their driver --------------------------------------------
class ClassicDriving:
    """Driving the classic member (`Membership`): JoinGroup/SyncGroup/Heartbeat."""

    group_protocol = "classic"
    # the API of each request tag, for a broker that drops the connection on a version it advertised
    api_of_tag = {"find": FindCoordinatorRequest.API_KEY, "join": JoinGroupRequest.API_KEY,
                  "sync": SyncGroupRequest.API_KEY, "heartbeat": HeartbeatRequest.API_KEY}
    # answers after which poll()'s wait for records goes on with the group at once
    wake_tags = frozenset({"join", "sync", "find", "heartbeat"})
    broker_resolves_regex = False       # a pattern is matched here against the topics in metadata
    static_member_leaves = False        # a static member never leaves on close (its session expires)

    def new_machine(self, cfg: MemberConfig, now_ms: int) -> MemberMachine:
        return Membership(cfg, now_ms)

    def request(self, request):
        """What to hand the network client for a `Send` of this machine."""
        return request

    def response_class(self, tag_kind: str):
        """The class to decode the answer with (None: the API's own)."""
        return LenientSyncGroupResponse if tag_kind == "sync" else None

    def poll_again(self, acts: list) -> bool:
        """After these application actions ran, poll once more: partitions were revoked before
        joining, now join."""
        return any(isinstance(a, Revoke) for a in acts)

    def in_group(self, m) -> bool:
        return m.state == STABLE

    def member_epoch(self, m) -> int | None:
        return None


class ConsumerDriving(ClassicDriving):
    """Driving the KIP-848 member (`ConsumerMembership`): ConsumerGroupHeartbeat."""

    group_protocol = "consumer"
    api_of_tag = {"find": FindCoordinatorRequest.API_KEY}
    wake_tags = frozenset({"find", "heartbeat848"})
    broker_resolves_regex = True        # SubscribedTopicRegex: the broker resolves the pattern
    static_member_leaves = True         # with epoch -2, a temporary leave

    def new_machine(self, cfg: MemberConfig, now_ms: int) -> MemberMachine:
        return ConsumerMembership(cfg, new_member_id(), now_ms)

    def request(self, request):
        if isinstance(request, ConsumerGroupHeartbeatRequest):
            return Versioned(request.API_KEY, lambda v, r=request: heartbeat_for_version(r, v))
        return request

    def response_class(self, tag_kind: str):
        return None

    def poll_again(self, acts: list) -> bool:
        """The callbacks ran: now acknowledge, or rejoin after the partitions were lost."""
        return any(isinstance(a, (Revoke, Assign)) for a in acts)

    def in_group(self, m) -> bool:
        return m.in_group()

    def member_epoch(self, m) -> int | None:
        return m.generation.generation_id


DRIVING = {"classic": ClassicDriving(), "consumer": ConsumerDriving()}     # by group.protocol


class GroupMember:
    """One consumer's membership in a group: the driver of its member machine. See the module docstring."""

    def __init__(self, network, cluster, subs: SubscriptionState, fetcher, config):
        c = config
        self.network = network
        self.cluster = cluster
        self.subs = subs
        self.fetcher = fetcher
        self.cfg = MemberConfig.from_consumer_config(c)
        self.group_id: str = c["group.id"]
        self.group_instance_id = c["group.instance.id"]
        self.retry_backoff = c["retry.backoff.ms"] / 1000
        self.auto_commit = c["enable.auto.commit"]
        self.leave_on_close = c["internal.leave.group.on.close"]
        self.exclude_internal = c["exclude.internal.topics"]
        self.rebalance_timeout_ms = c["max.poll.interval.ms"]
        self.driving: ClassicDriving = DRIVING[c["group.protocol"]]
        self.m = self.driving.new_machine(self.cfg, _now_ms())
        self._lock = threading.RLock()
        self.topics: list[str] = []
        self.pattern = None
        self._consumer = None
        self.on_assign = self.on_revoke = self.on_lost = None
        self._caps: dict[int, int] = {}    # api_key -> highest version that a broker did not choke on
        self._leave_future: Future | None = None
        self._meta_version = -1
        # offsets
        self._fetching_committed: set[TopicPartition] = set()
        self._committed_future: tuple | None = None
        self._async_queue: deque = deque()
        self._async_inflight: tuple | None = None
        self._callbacks: deque = deque()
        # heartbeat thread
        self._closing = False
        self._hb_due = 0                   # when the heartbeat thread wakes up next (ms)
        self._hb_wake = threading.Event()
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, name=f"kohort-heartbeat-{self.group_id}",
                                           daemon=True)
        self._hb_thread.start()

    # -- views of the state machine ----------------------------------------------------------------------
    @property
    def subscribed(self) -> bool:
        return self.m.subscribed

    @property
    def state(self) -> str:
        return self.m.state

    @property
    def member_id(self) -> str:
        return self.m.generation.member_id

    @property
    def generation_id(self) -> int:
        return self.m.generation.generation_id

    @property
    def busy(self) -> bool:
        return self.subscribed and self.m.state != STABLE

    # -- events in, actions out --------------------------------------------------------------------------
    def _handle(self, event) -> list:
        """Feed `event` (and a newer metadata view first); send what the machine asks; return the
        actions that must run on the application thread."""
        with self._lock:
            acts = []
            snap = self.cluster.snapshot
            if snap.version != self._meta_version and snap.updated_at:
                self._meta_version = snap.version
                acts += self.m.handle(MetadataUpdate(snap.version, {t: len(ps) for t, ps in snap.topics.items()
                                                                   if ps}, dict(snap.topic_ids)), _now_ms())
            acts += self.m.handle(event, _now_ms())
            app = []
            for a in acts:
                if isinstance(a, Send):
                    self._send(a)
                elif isinstance(a, UseCoordinator):
                    self.network.set_node_address(a.conn_id, a.host, a.port)
                    log.info("group %s: coordinator is broker %s (%s:%s)", self.group_id, a.node_id, a.host, a.port)
                elif isinstance(a, RequestMetadata):
                    self.cluster.add_topics(a.topics)
                    self.cluster.request_update()
                else:
                    app.append(a)
            due = self.m.next_deadline()
        if due is not None and due < self._hb_due:
            self._hb_wake.set()     # the heartbeat thread sleeps past the new deadline: wake it
        return app

    def _send(self, a: Send) -> None:
        kind = a.tag[0]
        api = self.driving.api_of_tag.get(kind)
        fut = self.network.send(a.to, self.driving.request(a.request), timeout_ms=a.timeout_ms,
                                max_version=self._caps.get(api) if api is not None else None,
                                response_class=self.driving.response_class(kind))
        fut.add_done_callback(lambda f, tag=a.tag, api=api: self._on_answer(tag, api, f))
        if kind == "leave":
            self._leave_future = fut

    def _on_answer(self, tag, api, fut: Future) -> None:
        try:
            resp = fut.result()
        except BaseException as e:
            if api is not None:
                self._downgrade(api, fut, e)
            ev = RequestFailed(tag, str(e), unsupported=isinstance(e, IncompatibleBrokerVersionError))
        else:
            ev = Response(tag, resp)
        try:
            rest = self._handle(ev)
        except Exception:   # never kill the I/O thread
            log.exception("group %s: handling the answer to %s failed", self.group_id, tag[0])
            return
        if rest:
            log.error("group %s: actions %s from an I/O event dropped", self.group_id, rest)
        if tag[0] in self.driving.wake_tags:
            # poll() waiting for data goes on with the group at once: e.g. a heartbeat's
            # REBALANCE_IN_PROGRESS rejoins now, not when poll()'s wait for records ends (up to 0.5 s);
            # Java's poll() likewise goes round its loop on every response its network client handles
            self.fetcher.wakeup()

    def _downgrade(self, api_key: int, fut: Future, err: BaseException) -> None:
        """A broker that drops the connection on a version it advertised (librdkafka's mock cluster does
        for JoinGroup v6) gets the next lower version from now on."""
        v = getattr(fut, "api_version", None)
        if isinstance(err, ConnectionClosedError) and v \
                and self._caps.get(api_key, 1 << 15) > v - 1:
            self._caps[api_key] = v - 1
            log.warning("group %s: broker closed the connection on %s v%s; using v%s from now on",
                        self.group_id, api_key, v, v - 1)

    def _run(self, acts) -> None:
        """Carry out application-thread actions in order."""
        for a in acts:
            if isinstance(a, Revoke):
                self._revoke(a)
            elif isinstance(a, Assign):
                self._assign(a)
            elif isinstance(a, AutoCommit):
                offs = self.subs.positions()
                if offs:
                    self.commit_async(offs, None, auto=True)
            elif isinstance(a, Raise):
                raise a.error

    # -- subscription -------------------------------------------------------------------------------
    def subscribe(self, topics, pattern, consumer, on_assign, on_revoke, on_lost) -> None:
        self._consumer = consumer
        self.on_assign, self.on_revoke, self.on_lost = on_assign, on_revoke, on_lost
        self.pattern = pattern
        if pattern is not None and self.driving.broker_resolves_regex:
            # KIP-848: the broker resolves the regex (SubscribedTopicRegex); all topics' metadata
            # turns the topic ids of its assignments into names
            self.cluster.set_all_topics(True)
            self.topics = []
            self._run(self._handle(Subscribe((), regex=pattern.pattern)))
            return
        if pattern is not None:
            self.cluster.set_all_topics(True)
            self.topics = self._matching_topics()
        else:
            self.topics = sorted(set(topics))
            self.cluster.set_topics(self.topics)
        self._run(self._handle(Subscribe(tuple(self.topics))))

    def unsubscribe(self) -> None:
        self._run(self._handle(Unsubscribe()))
        self.topics = []
        self.pattern = None

    def _matching_topics(self) -> list[str]:
        names = self.cluster.all_topic_names(include_internal=not self.exclude_internal)
        return sorted(t for t in names if self.pattern.match(t))

    # -- called from poll() on the application thread ----------------------------------------------------
    def poll_hook(self, allow_callbacks: bool = True) -> None:
        self._run_callbacks()
        self._drive_async_commits()
        denied = [t for t in self.topics or () if self.cluster.topic_error(t) == ErrorCode.TOPIC_AUTHORIZATION_FAILED]
        if denied:      # Java's Metadata.maybeThrowAnyException: raised by every poll() while it lasts
            raise for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED)(f"not authorized to access topics {sorted(denied)}")
        if self.pattern is not None and not self.driving.broker_resolves_regex:
            if not self.cluster.snapshot.updated_at:
                return      # Java: match the pattern against fresh metadata before joining
            topics = self._matching_topics()
            if topics != self.topics:
                self.topics = topics
                self._handle(Subscribe(tuple(topics)))
        acts = self._handle(Poll())
        self._run(acts)
        if self.driving.poll_again(acts):
            self._run(self._handle(Poll()))

    def _revoke(self, a: Revoke) -> None:
        tps = set(a.partitions)
        if a.commit:
            offs = {tp: o for tp, o in self.subs.positions().items() if tp in tps}
            if offs:
                try:
                    self._commit_sync(offs, min(5.0, self.rebalance_timeout_ms / 1000), self.m.generation,
                                      retry_stale=True)
                except KohortError as e:
                    log.warning("group %s: commit before revoking %d partitions failed: %s", self.group_id,
                                len(offs), e)
        cb = self.on_lost if a.lost and self.on_lost is not None else self.on_revoke
        self.subs.remove(tps)
        self.fetcher.clear(tps)
        if cb is not None:
            self._invoke(cb, sorted(tps))

    def _assign(self, a: Assign) -> None:
        self.subs.add(a.added)
        self.cluster.add_topics({tp.topic for tp in a.assignment})
        log.info("group %s: generation %s, member %s, assigned %d partitions (+%d)", self.group_id,
                 self.generation_id, self.member_id, len(a.assignment), len(a.added))
        self.fetch_committed_if_needed()
        if self.on_assign is not None and (a.added or not a.cooperative):
            self._invoke(self.on_assign, sorted(a.added))

    def _invoke(self, cb, tps) -> None:
        try:
            cb(self._consumer, tps)
        except Exception:
            log.exception("group %s: rebalance callback %r raised", self.group_id, cb)

    # -- heartbeats (background thread) ---------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._closing:
            self._hb_wake.clear()      # before the tick: a wake-up during it is not lost
            try:
                self._handle(Tick())
            except Exception:
                log.exception("group %s: heartbeat tick failed", self.group_id)
            with self._lock:
                due = self.m.next_deadline()
                now = _now_ms()
                wait_ms = 500 if due is None else min(500, max(5, due - now))
                self._hb_due = now + wait_ms
            self._hb_wake.wait(wait_ms / 1000)

    # -- committed offsets ----------------------------------------------------------------------------
    def fetch_committed_if_needed(self) -> None:
        """OffsetFetch for assigned partitions without a position; seek to what was committed."""
        if self._committed_future is not None:
            fut, tps = self._committed_future
            if not fut.done():
                return
            self._committed_future = None
            self._fetching_committed.difference_update(tps)
            try:
                resp = fut.result()       # first: a request that never went out has no api_version
                err, got = parse_offset_fetch(fut.api_version, resp)
            except KohortError as e:
                log.debug("OffsetFetch failed: %s", e)
                with self._lock:
                    self.m.offset_request_failed(0, _now_ms())
                return
            if err:
                with self._lock:
                    self.m.offset_request_failed(err, _now_ms())
                return
            with self.subs.lock:
                for tp in tps:
                    st = self.subs.partitions.get(tp)
                    if st is None or st.position is not None:
                        continue
                    perr, om = got.get(tp, (0, None))
                    if perr == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                        continue
                    if perr:
                        log.warning("OffsetFetch of %s failed: %s", tp, for_code(perr).name)
                        continue
                    st.committed = om
                    if om is not None:
                        self.subs.seek(tp, om.offset, om.leader_epoch)
                        if om.leader_epoch is not None and self._can_validate(tp):
                            # KIP-320: the log may have been truncated since the commit (Java's
                            # seekUnvalidated); the fetcher validates with OffsetForLeaderEpoch first
                            st.awaiting_validation = True
                    else:
                        self.subs.request_reset([tp])
            self.fetcher.validate_positions()
            self.fetcher.send_fetches()
        coordinator = self.m.coordinator
        if coordinator is None:
            # partitions taken with assign() find the coordinator here: no join looks it up for them
            # (Java's refreshCommittedOffsetsIfNeeded, ensureCoordinatorReady)
            if self.subs.missing_position():
                self._run(self._handle(NeedCoordinator()))
            return
        need = [tp for tp in self.subs.missing_position() if tp not in self._fetching_committed]
        if not need:
            return
        self._fetching_committed.update(need)
        gid = self.group_id
        fut = self.network.send(coordinator.conn_id, Versioned(OFFSET_FETCH, lambda v: offset_fetch_request(
            v, gid, need, require_stable=True)), max_version=OFFSETS_BY_NAME_MAX_VERSION)
        fut.add_done_callback(lambda f: self.fetcher.wakeup())     # poll() seeks as soon as it lands
        self._committed_future = (fut, need)

    def _can_validate(self, tp) -> bool:
        """Java validates a position only when the leader speaks OffsetForLeaderEpoch v3+ (KIP-320)."""
        leader = self.cluster.leader_for(tp)
        versions = self.network.api_versions(leader) if leader is not None else {}
        if not versions and self.m.coordinator is not None:     # not connected to the leader yet
            versions = self.network.api_versions(self.m.coordinator.conn_id)
        rng = versions.get(OFFSET_FOR_LEADER_EPOCH)
        return rng is not None and rng[1] >= 3

    def fetch_committed(self, tps, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            conn = self._ensure_coordinator(deadline)
            gid = self.group_id
            fut = self.network.send(conn, Versioned(OFFSET_FETCH, lambda v: offset_fetch_request(
                v, gid, tps, require_stable=True)), max_version=OFFSETS_BY_NAME_MAX_VERSION)
            try:
                resp = _wait(fut, deadline).result()
                err, got = parse_offset_fetch(fut.api_version, resp)
            except KafkaConnectionError as e:
                log.debug("OffsetFetch failed: %s", e)
                with self._lock:
                    self.m.offset_request_failed(0, _now_ms())
                _sleep_until(deadline, self.retry_backoff)
                continue
            if err == 0 and not any(e == ErrorCode.UNSTABLE_OFFSET_COMMIT for e, _ in got.values()):
                bad = [(tp, e) for tp, (e, _) in got.items() if e]
                if bad:
                    raise for_code(bad[0][1])(f"OffsetFetch of {bad[0][0]}")
                with self.subs.lock:
                    for tp, (_, om) in got.items():
                        st = self.subs.partitions.get(tp)
                        if st is not None:
                            st.committed = om
                return {tp: got.get(tp, (0, None))[1] for tp in tps}
            if err and error_action(err) not in (REDISCOVER, "retry"):
                raise for_code(err)(f"OffsetFetch for group {self.group_id!r}")
            with self._lock:
                self.m.offset_request_failed(err, _now_ms())
            _sleep_until(deadline, self.retry_backoff)

    def _ensure_coordinator(self, deadline: float) -> int:
        """Wait until the coordinator is known (the machine looks it up); its connection id."""
        while True:
            self._handle(NeedCoordinator())
            co = self.m.coordinator
            if co is not None:
                return co.conn_id
            with self._lock:
                fatal = self.m.take_fatal()
            if fatal is not None:       # e.g. GROUP_AUTHORIZATION_FAILED: no coordinator will come
                raise fatal
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"coordinator of group {self.group_id!r} not found in time")
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))

    # -- commits ---------------------------------------------------------------------------------------
    def commit_sync(self, offsets: dict, timeout: float, check_generation: bool = True) -> None:
        if not offsets:
            return
        with self._lock:
            gen = self.m.commit_generation() if check_generation else (
                self.m.generation if self.subscribed else NO_GENERATION)
        self._commit_sync(offsets, timeout, gen)

    def _commit_sync(self, offsets: dict, timeout: float, gen, retry_stale: bool = False) -> None:
        deadline = time.monotonic() + timeout
        while True:
            conn = self._ensure_coordinator(deadline)
            fut = self._send_commit(conn, offsets, gen)
            try:
                resp = _wait(fut, deadline).result()
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"commit did not complete within {timeout:.1f}s: {e}") from None
                with self._lock:
                    self.m.offset_request_failed(0, _now_ms())
                continue
            err = _first_commit_error(resp)
            with self._lock:
                verdict, error = self.m.commit_failed(err, gen, _now_ms())
            if verdict == "ok":
                self._mark_committed(offsets)
                return
            if verdict == "stale" and retry_stale:
                with self._lock:
                    gen = self.m.generation     # KIP-848: retry with the member's newer epoch (Java)
                continue
            if verdict in ("raise", "stale"):
                raise error
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"commit did not succeed within {timeout:.1f}s (last error "
                                        f"{for_code(err).name})")
            time.sleep(min(self.retry_backoff, max(0.0, deadline - time.monotonic())))

    def _mark_committed(self, offsets) -> None:
        with self.subs.lock:
            for tp, om in offsets.items():
                st = self.subs.partitions.get(tp)
                if st is not None:
                    st.committed = om

    def _send_commit(self, conn: int, offsets, gen) -> Future:
        gid, iid = self.group_id, (self.group_instance_id if self.subscribed else None)
        return self.network.send(conn, Versioned(OFFSET_COMMIT, lambda v: offset_commit_request(
            v, gid, gen.generation_id, gen.member_id, iid, offsets)), max_version=OFFSETS_BY_NAME_MAX_VERSION)

    def commit_async(self, offsets: dict, callback, auto: bool = False) -> None:
        if not offsets:
            if callback is not None:
                self._callbacks.append((callback, None, offsets))
            return
        try:
            with self._lock:
                gen = self.m.commit_generation()
        except CommitFailedError as e:
            if auto:
                return
            if callback is not None:
                self._callbacks.append((callback, e, offsets))
                return
            raise
        self._async_queue.append((dict(offsets), callback, gen))
        self._drive_async_commits()

    def _drive_async_commits(self) -> None:
        if self._async_inflight is not None:
            fut, offsets, callback, gen = self._async_inflight
            if not fut.done():
                return
            self._async_inflight = None
            err: BaseException | None = None
            try:
                code = _first_commit_error(fut.result())
                with self._lock:
                    verdict, err = self.m.commit_failed(code, gen, _now_ms())
            except KohortError as e:
                with self._lock:
                    self.m.offset_request_failed(0, _now_ms())
                err = e
            if err is None:
                self._mark_committed(offsets)
            elif callback is None:
                log.warning("group %s: async commit failed: %s", self.group_id, err)
            if callback is not None:
                self._callbacks.append((callback, err, offsets))
        coordinator = self.m.coordinator
        if self._async_queue and coordinator is not None:
            offsets, callback, gen = self._async_queue.popleft()
            self._async_inflight = (self._send_commit(coordinator.conn_id, offsets, gen), offsets, callback, gen)
        elif self._async_queue:
            self._handle(NeedCoordinator())

    def _run_callbacks(self) -> None:
        while self._callbacks:
            cb, err, offsets = self._callbacks.popleft()
            try:
                cb(err, offsets)
            except Exception:
                log.exception("commit callback raised")

    def flush_async(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (self._async_inflight is not None or self._async_queue) and time.monotonic() < deadline:
            self._drive_async_commits()
            if self._async_inflight is not None:
                try:
                    _wait(self._async_inflight[0], deadline)
                except KohortError:
                    pass
            elif self._async_queue:
                time.sleep(0.01)
        self._drive_async_commits()
        self._run_callbacks()

    # -- health / close ------------------------------------------------------------------------------------
    def health(self) -> dict:
        m = self.m
        last = m.last_heartbeat_ms
        co = m.coordinator
        return {"group_id": self.group_id, "member_id": m.member_id, "generation_id": m.generation.generation_id,
                "member_state": m.state, "leader": m.is_leader and bool(m.member_id),
                "protocol": m.generation.protocol_name, "group_protocol": self.driving.group_protocol,
                "member_epoch": self.driving.member_epoch(m),
                "coordinator": co.node_id if co is not None else None,
                "last_heartbeat": None if last is None else last / 1000,
                "seconds_since_heartbeat": None if last is None else (_now_ms() - last) / 1000,
                "rebalance_count": m.rebalance_count, "last_rebalance_reason": m.last_rebalance_reason}

    def close(self, autocommit: bool, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            in_group = self.driving.in_group(self.m)
            if autocommit and self.auto_commit and (in_group or not self.subscribed):
                offs = self.subs.positions()
                if offs:
                    try:
                        self.commit_sync(offs, max(0.1, deadline - time.monotonic()), check_generation=False)
                    except KohortError as e:
                        log.warning("group %s: commit on close failed: %s", self.group_id, e)
            self.flush_async(max(0.0, deadline - time.monotonic()))
            if self.subscribed:
                leave = self.leave_on_close and (self.group_instance_id is None or self.driving.static_member_leaves)
                self._run(self._handle(Close(leave=leave)))
                self._wait_for_leave(deadline)
        finally:
            self._closing = True
            self._hb_wake.set()     # stop the heartbeat thread now
            self._hb_thread.join(2.0)

    def _wait_for_leave(self, deadline: float) -> None:
        """Wait (bounded) for the answer to the LeaveGroup just sent (Java: awaitPendingRequests)."""
        fut, self._leave_future = self._leave_future, None
        if fut is None:
            return
        try:
            fut.result(max(0.0, min(deadline - time.monotonic(), 5.0)))
        except Exception as e:
            log.debug("group %s: LeaveGroup got no answer: %s", self.group_id, e)


def new_member_id() -> str:
    """A KIP-848 member id as Java makes it (Uuid.randomUuid().toString(): URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _first_commit_error(resp) -> int:
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                return p.error_code
    return 0


def _wait(fut: Future, deadline: float) -> Future:
    try:
        fut.result(max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        raise KafkaTimeoutError("no response in time") from None
    except KafkaError:
        pass
    return fut


def _sleep_until(deadline: float, backoff: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise KafkaTimeoutError("operation did not complete in time")
    time.sleep(min(backoff, left))


__all__ = ["ClassicDriving", "CommitFailedError", "ConsumerDriving", "GroupError", "GroupMember", "JOINING",
           "RebalanceInProgressError", "STABLE", "SYNCING", "UNJOINED"]
