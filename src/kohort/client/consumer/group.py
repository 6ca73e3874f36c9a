"""Classic consumer-group membership: coordinator discovery, join/sync, heartbeats, commits.

State machine of one member (Kafka's AbstractCoordinator / ConsumerCoordinator, classic protocol):

    UNJOINED --JoinGroup--> JOINING --(leader assigns) SyncGroup--> SYNCING --> STABLE
        ^                                                                   |
        +---- REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / max.poll.interval.ms

* FindCoordinator first; the coordinator gets its own connection (node id 2**31-1-broker id) so
  heartbeats never wait behind fetches. NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE send us back
  to discovery.
* JoinGroup carries one protocol per configured assignor (partition.assignment.strategy, Java's
  default [range, cooperative-sticky]) with a ConsumerProtocolSubscription; MEMBER_ID_REQUIRED
  (KIP-394) is answered by rejoining with the given member id; group.instance.id makes the member
  static (KIP-345: no LeaveGroup on close, same identity across restarts).
* The leader runs the selected assignor over every member's subscription with partition counts
  from metadata, and sends the result in SyncGroup.
* Eager assignors: revoke everything before rejoining. Cooperative (KIP-429, when the group selected
  cooperative-sticky): keep owned partitions across the rebalance, revoke only what moved, and
  rejoin once more if anything was revoked.
* Heartbeats come from a background thread every heartbeat.interval.ms, independent of poll().
  That thread also enforces max.poll.interval.ms: when the application stops polling, the member
  leaves the group and the next poll() raises MaxPollIntervalExceededError.
* Rebalance callbacks, async commit callbacks and the joins themselves run on the application
  thread inside poll(); nothing blocks there longer than the poll timeout.
* Offsets: OffsetFetch for partitions without a position; auto commit every
  auto.commit.interval.ms, before revocation and on close; commit_sync retries retriable errors;
  async commits go out one at a time so they land in order.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future

from kohort.assignors import COOPERATIVE, get_assignor
from kohort.assignors.base import Subscription as AssignorSubscription
from kohort.client.consumer.offsets import (
    OFFSETS_BY_NAME_MAX_VERSION,
    SubscriptionState, offset_commit_request, offset_fetch_request, parse_offset_fetch,
)
from kohort.client.network import Versioned
from kohort.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, KohortError, for_code
from kohort.protocol.consumer_protocol import (
    PROTOCOL_TYPE, ConsumerProtocolAssignment, ConsumerProtocolSubscription, decode_assignment,
    decode_subscription, encode_assignment, encode_subscription,
)
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
from kohort.protocol.messages.heartbeat import HeartbeatRequest
from kohort.protocol.messages.join_group import JoinGroupRequest
from kohort.protocol.messages.leave_group import LeaveGroupRequest
from kohort.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from kohort.protocol.schema import BYTES, Message, f
from kohort.structs import TopicPartition

log = logging.getLogger("kohort.client.group")

SUBSCRIPTION_WIRE_VERSION = 3   # ConsumerProtocolSubscription v3 (KIP-881 rack), as Java 3.5+ sends
UNJOINED, JOINING, SYNCING, STABLE = "UNJOINED", "JOINING", "SYNCING", "STABLE"
FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH = 8, 9

# error codes by Kafka's names (kohort.errors.ErrorCode has them all)
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 22, 25, 27
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, UNSTABLE_OFFSET_COMMIT = 79, 82, 88
REQUEST_TIMED_OUT, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST = 7, 81, 42
COORDINATOR_ERRORS = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
MEMBER_RESET_ERRORS = frozenset({ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID})


class LenientSyncGroupResponse(Message):
    """SyncGroupResponse whose assignment may be null: librdkafka's mock cluster sends null to a
    member the leader gave nothing; kohort reads that as an empty assignment."""

    API_KEY = SyncGroupResponse.API_KEY
    VALID = SyncGroupResponse.VALID
    FLEXIBLE = SyncGroupResponse.FLEXIBLE
    SCHEMA = [fl for fl in SyncGroupResponse.SCHEMA if fl.name != "assignment"] + [
        f("assignment", BYTES, nullable="0+", default=b"")]


class CommitFailedError(KohortError):
    """A commit cannot succeed: the group rebalanced and these partitions may belong to others now."""

    retriable = False


class MaxPollIntervalExceededError(KohortError):
    """The application did not call poll() within max.poll.interval.ms, so the member left the group."""

    retriable = False


class GroupError(KohortError):
    """A fatal group error (authorization, inconsistent protocols, fenced static member, ...)."""


def classify_group_error(code: int) -> str:
    """What a member does about an error code in a group response (a pure decision):
    'ok', 'rediscover', 'rejoin', 'reset' (forget member id and generation, then rejoin),
    'retry' (same request after a backoff) or 'fatal'."""
    if code == 0:
        return "ok"
    if code in COORDINATOR_ERRORS:
        return "rediscover"
    if code == REBALANCE_IN_PROGRESS:
        return "rejoin"
    if code in MEMBER_RESET_ERRORS:
        return "reset"
    if code in (COORDINATOR_LOAD_IN_PROGRESS, REQUEST_TIMED_OUT):
        return "retry"
    if for_code(code).retriable:
        return "retry"
    return "fatal"


class GroupMember:
    """One consumer's membership in a classic group. App-thread methods: subscribe, poll_hook,
    commit_*, fetch_committed*, close; the heartbeat thread only heartbeats and watches poll gaps."""

    def __init__(self, network, cluster, subs: SubscriptionState, fetcher, config):
        c = config
        self.network = network
        self.cluster = cluster
        self.subs = subs
        self.fetcher = fetcher
        self.group_id: str = c["group.id"]
        self.group_instance_id = c["group.instance.id"]
        self.session_timeout_ms = c["session.timeout.ms"]
        self.rebalance_timeout_ms = c["max.poll.interval.ms"]
        self.heartbeat_interval = c["heartbeat.interval.ms"] / 1000
        self.max_poll_interval = c["max.poll.interval.ms"] / 1000
        self.retry_backoff = c["retry.backoff.ms"] / 1000
        self.auto_commit = c["enable.auto.commit"]
        self.auto_commit_interval = c["auto.commit.interval.ms"] / 1000
        self.leave_on_close = c["internal.leave.group.on.close"]
        self.rack_id = c["client.rack"] or None
        self.assignors = [get_assignor(n) for n in c["partition.assignment.strategy"]]
        self.exclude_internal = c["exclude.internal.topics"]
        self._lock = threading.RLock()
        # membership
        self.state = UNJOINED
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.coordinator: int | None = None          # connection id of the coordinator
        self._coordinator_broker: int | None = None
        self._find_future: Future | None = None
        self._join_future: Future | None = None
        self._sync_future: Future | None = None
        self._rejoin_needed = True
        self._rejoin_reason = "initial join"
        self._not_before = 0.0
        self._pending_lost = False
        self._poll_timeout_hit = False
        self._fatal: BaseException | None = None
        # subscription
        self.subscribed = False
        self.topics: list[str] = []
        self.pattern = None
        self._consumer = None
        self.on_assign = self.on_revoke = self.on_lost = None
        self._joined_topics: set[str] = set()
        self._caps: dict[int, int] = {}    # api_key -> highest version that a broker did not choke on
        self._assigned_counts: dict[str, int] = {}
        # health
        self.last_heartbeat: float | None = None
        self.last_poll = time.monotonic()
        self.rebalance_count = 0
        self.last_rebalance_reason: str | None = None
        # offsets
        self._fetching_committed: set[TopicPartition] = set()
        self._committed_future: tuple | None = None
        self._async_queue: deque = deque()
        self._async_inflight: tuple | None = None
        self._callbacks: deque = deque()
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        self._records_generation = -1
        # heartbeat thread
        self._closing = False
        self._hb_wake = threading.Event()
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, name=f"kohort-heartbeat-{self.group_id}",
                                           daemon=True)
        self._hb_thread.start()

    # -- subscription -------------------------------------------------------------------------------
    def subscribe(self, topics, pattern, consumer, on_assign, on_revoke, on_lost) -> None:
        with self._lock:
            self.subscribed = True
            self._consumer = consumer
            self.on_assign, self.on_revoke, self.on_lost = on_assign, on_revoke, on_lost
            self.pattern = pattern
            if pattern is not None:
                self.cluster.set_all_topics(True)
                self.topics = self._matching_topics()
            else:
                self.topics = sorted(set(topics))
                self.cluster.set_topics(self.topics)
            if set(self.topics) != self._joined_topics or self.state == UNJOINED:
                self._request_rejoin("subscription changed")

    def unsubscribe(self) -> None:
        with self._lock:
            if self.subscribed and self.state != UNJOINED and self.member_id:
                self._revoke(self.subs.assigned(), lost=False)
                self._leave("the consumer unsubscribed")
            self.subscribed = False
            self.topics = []
            self.pattern = None
            self._reset_member("unsubscribed")

    def _matching_topics(self) -> list[str]:
        names = self.cluster.all_topic_names(include_internal=not self.exclude_internal)
        return sorted(t for t in names if self.pattern.match(t))

    @property
    def busy(self) -> bool:
        return self.subscribed and self.state != STABLE

    # -- called from poll() on the application thread ----------------------------------------------------
    def poll_hook(self, allow_callbacks: bool = True) -> None:
        now = time.monotonic()
        self.last_poll = now
        self._run_callbacks()
        if self._fatal is not None:
            err, self._fatal = self._fatal, None
            raise err
        if self._poll_timeout_hit:
            self._poll_timeout_hit = False
            lost = self.subs.assigned()
            if lost and self.subscribed:
                self._revoke(lost, lost=True)
            raise MaxPollIntervalExceededError(
                f"poll() was not called for longer than max.poll.interval.ms ({self.max_poll_interval * 1000:.0f} ms),"
                f" so this member left group {self.group_id!r} and its partitions went to others; uncommitted "
                f"progress is lost. Process less per poll (max.poll.records) or raise max.poll.interval.ms. "
                f"The next poll() rejoins the group.")
        self._drive_async_commits()
        if not self.subscribed:
            return
        if self._pending_lost:
            self._pending_lost = False
            lost = self.subs.assigned()
            if lost:
                self._revoke(lost, lost=True)
        if self.pattern is not None and self.cluster.snapshot.updated_at:
            topics = self._matching_topics()
            if topics != self.topics:
                self.topics = topics
                self._request_rejoin(f"pattern subscription now matches {len(topics)} topics")
        self._check_metadata_change()
        if self.coordinator is None:
            self._discover(now)
            return
        with self._lock:
            jf = self._join_future
            if jf is not None:
                if jf.done():
                    self._on_join(jf)
                return
        if self._sync_future is not None:
            if self._sync_future.done():
                self._on_sync(self._sync_future)
            return
        if self._rejoin_needed and now >= self._not_before:
            self._start_join()
            return
        if self.state == STABLE and self.auto_commit and now >= self._next_auto_commit:
            self._next_auto_commit = now + self.auto_commit_interval
            offs = self.subs.positions()
            if offs:
                self.commit_async(offs, None, auto=True)

    def records_returned(self, records) -> None:
        self._records_generation = self.generation_id

    def _check_metadata_change(self) -> None:
        if self.state != STABLE or self.leader_id != self.member_id or not self._assigned_counts:
            return
        for t, n in self._assigned_counts.items():
            now_n = len(self.cluster.partitions_for(t) or [])
            if now_n and now_n != n:
                self._request_rejoin(f"partition count of {t} changed from {n} to {now_n}")
                return

    # -- coordinator discovery ----------------------------------------------------------------------------
    def _discover(self, now: float) -> None:
        f = self._find_future
        if f is None:
            if now < self._not_before:
                return
            gid = self.group_id
            self._find_future = self.network.send(None, Versioned(FIND_COORDINATOR, lambda v: FindCoordinatorRequest(
                key=gid, key_type=0, coordinator_keys=[gid])))
            return
        if not f.done():
            return
        self._find_future = None
        try:
            resp = f.result()
        except KohortError as e:
            log.debug("FindCoordinator failed: %s", e)
            self._not_before = now + self.retry_backoff
            return
        if f.api_version >= 4:
            co = resp.coordinators[0]
            err, node, host, port = co.error_code, co.node_id, co.host, co.port
        else:
            err, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
        if err:
            kind = classify_group_error(err)
            if kind == "fatal":
                raise for_code(err)(f"FindCoordinator for group {self.group_id!r}")
            self._not_before = now + self.retry_backoff
            return
        conn_id = 0x7FFFFFFF - node
        self.network.set_node_address(conn_id, host, port)
        with self._lock:
            self.coordinator = conn_id
            self._coordinator_broker = node
        log.info("group %s: coordinator is broker %s (%s:%s)", self.group_id, node, host, port)

    def _coordinator_dead(self, why: str) -> None:
        with self._lock:
            if self.coordinator is not None:
                log.info("group %s: coordinator %s unusable (%s); rediscovering", self.group_id,
                         self._coordinator_broker, why)
            self.coordinator = None
            self._not_before = time.monotonic() + self.retry_backoff

    # -- join / sync ----------------------------------------------------------------------------------
    def _request_rejoin(self, reason: str) -> None:
        with self._lock:
            if not self._rejoin_needed:
                log.info("group %s: rejoining: %s", self.group_id, reason)
            self._rejoin_needed = True
            self._rejoin_reason = reason

    def _reset_member(self, reason: str) -> None:
        with self._lock:
            self.member_id = ""
            self.generation_id = -1
            self.state = UNJOINED
            self._rejoin_needed = self.subscribed
            self._rejoin_reason = reason

    def _rebalance_protocol(self) -> str:
        a = self._assignor(self.protocol_name)
        return a.protocol if a is not None else "EAGER"

    def _assignor(self, name):
        for a in self.assignors:
            if a.name == name:
                return a
        return None

    def _start_join(self) -> None:
        owned = self.subs.assigned()
        if owned and self._rebalance_protocol() != COOPERATIVE:
            # eager: give everything back before joining (commit first when auto commit is on)
            self._revoke(owned, lost=False)
        owned = sorted(self.subs.assigned())
        topics = list(self.topics)
        protocols = []
        for a in self.assignors:
            sub = ConsumerProtocolSubscription(
                topics=topics, user_data=a.subscription_user_data(topics, owned if self.generation_id >= 0 else None,
                                                                 self.generation_id),
                owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
                                  for t, ps in _by_topic(owned).items()],
                generation_id=self.generation_id, rack_id=self.rack_id)
            protocols.append(JoinGroupRequest.Protocol(name=a.name, metadata=encode_subscription(sub, SUBSCRIPTION_WIRE_VERSION)))
        with self._lock:
            self.state = JOINING
            self._rejoin_needed = False
            self.last_rebalance_reason = self._rejoin_reason
            self._joined_topics = set(topics)
        req = JoinGroupRequest(group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                               rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                               group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
                               protocols=protocols, reason=self._rejoin_reason)
        with self._lock:
            self._join_future = self.network.send(self.coordinator, req, timeout_ms=self.rebalance_timeout_ms + 5000,
                                                  max_version=self._caps.get(JOIN_GROUP))
            self._join_future.add_done_callback(self._on_join_io)

    def _on_join_io(self, fut: Future) -> None:
        """I/O thread: a follower answers its JoinGroup with SyncGroup at once (no assignment to
        compute), so the leader's SyncGroup never completes the round before the followers sync
        (librdkafka's mock cluster then refuses a late follower). The leader path stays on the
        application thread, inside poll()."""
        try:
            resp = fut.result()
        except BaseException:
            return
        if resp.error_code or resp.leader == resp.member_id:
            return
        with self._lock:
            if self._join_future is not fut:
                return
            self._on_join(fut)

    def _downgrade(self, api_key: int, fut: Future, err: BaseException) -> None:
        """A broker that drops the connection on a version it advertised (librdkafka's mock cluster does
        for JoinGroup v6) gets the next lower version from now on."""
        v = getattr(fut, "api_version", None)
        if isinstance(err, KafkaConnectionError) and v and "closed the connection" in str(err) \
                and self._caps.get(api_key, 1 << 15) > v - 1:
            self._caps[api_key] = v - 1
            log.warning("group %s: broker closed the connection on %s v%s; using v%s from now on",
                        self.group_id, api_key, v, v - 1)

    def _on_join(self, fut: Future) -> None:
        self._join_future = None
        try:
            resp = fut.result()
        except KohortError as e:
            self._downgrade(JOIN_GROUP, fut, e)
            self._coordinator_dead(str(e))
            self._request_rejoin(f"JoinGroup failed: {e}")
            return
        err = resp.error_code
        if err == MEMBER_ID_REQUIRED:
            with self._lock:
                self.member_id = resp.member_id
            self._request_rejoin("the coordinator assigned a member id (KIP-394)")
            return
        kind = classify_group_error(err)
        if kind != "ok":
            self._on_group_error("JoinGroup", err, kind)
            return
        with self._lock:
            self.member_id = resp.member_id
            self.generation_id = resp.generation_id
            self.protocol_name = resp.protocol_name
            self.leader_id = resp.leader
            self.state = SYNCING
        assignments = []
        if resp.leader == resp.member_id and not getattr(resp, "skip_assignment", False):
            try:
                assignments = self._leader_assign(resp.protocol_name, resp.members)
            except KohortError as e:
                self._fatal = GroupError(f"the group leader could not assign partitions: {e}")
                self._reset_member("assignment failed")
                return
        req = SyncGroupRequest(group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
                               group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
                               protocol_name=self.protocol_name, assignments=assignments)
        self._sync_future = self.network.send(self.coordinator, req, max_version=self._caps.get(SYNC_GROUP),
                                              response_class=LenientSyncGroupResponse)

    def _leader_assign(self, protocol_name: str, members) -> list:
        assignor = self._assignor(protocol_name)
        if assignor is None:
            raise GroupError(f"the group selected assignor {protocol_name!r}, which this member does not have")
        subs = {}
        all_topics: set[str] = set()
        for m in members:
            s = decode_subscription(m.metadata)
            owned = [(tp.topic, p) for tp in s.owned_partitions for p in tp.partitions]
            subs[m.member_id] = AssignorSubscription(
                topics=list(s.topics), user_data=s.user_data, owned_partitions=owned,
                generation_id=s.generation_id, rack_id=s.rack_id, group_instance_id=m.group_instance_id)
            all_topics.update(s.topics)
        # metadata for every member's topics (not only ours)
        self.cluster.add_topics(all_topics)
        try:
            self.cluster.wait_for_topics(all_topics, timeout=min(10.0, self.rebalance_timeout_ms / 1000))
        except KafkaTimeoutError as e:
            log.warning("group %s: assigning with partial metadata: %s", self.group_id, e)
        counts = {t: len(self.cluster.partitions_for(t) or []) for t in all_topics}
        counts = {t: n for t, n in counts.items() if n}
        result = assignor.assign(counts, subs)
        self._assigned_counts = counts
        out = []
        for member_id, a in result.items():
            payload = ConsumerProtocolAssignment(
                assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                                     for t, ps in _by_topic(a.partitions).items()],
                user_data=a.user_data)
            out.append(SyncGroupRequest.Assignment(member_id=member_id, assignment=encode_assignment(payload)))
        log.info("group %s: leader assigned with %s: %s", self.group_id, protocol_name,
                 {m: len(a.partitions) for m, a in result.items()})
        return out

    def _on_sync(self, fut: Future) -> None:
        self._sync_future = None
        try:
            resp = fut.result()
        except KohortError as e:
            self._downgrade(SYNC_GROUP, fut, e)
            self._coordinator_dead(str(e))
            self._request_rejoin(f"SyncGroup failed: {e}")
            return
        kind = classify_group_error(resp.error_code)
        if resp.error_code == INVALID_REQUEST:
            # librdkafka's mock cluster answers a SyncGroup that arrives while its group state moved
            # on with INVALID_REQUEST; a fresh join recovers, so do not give up on the member
            log.warning("group %s: SyncGroup answered INVALID_REQUEST; rejoining", self.group_id)
            kind = "rejoin"
        if kind != "ok":
            self._on_group_error("SyncGroup", resp.error_code, kind)
            return
        a = decode_assignment(resp.assignment) if resp.assignment else ConsumerProtocolAssignment()
        new = {TopicPartition(tp.topic, p) for tp in a.assigned_partitions for p in tp.partitions}
        old = self.subs.assigned()
        with self._lock:
            self.state = STABLE
            self.rebalance_count += 1
            self.last_heartbeat = time.monotonic()
        cooperative = self._rebalance_protocol() == COOPERATIVE
        revoked = old - new
        added = new - old
        if revoked:
            self._revoke(revoked, lost=False)
        self.subs.add(added)
        self.subs.remove(old - new)
        self.fetcher.clear(revoked)
        self.cluster.add_topics({tp.topic for tp in new})
        log.info("group %s: generation %s, member %s, assigned %d partitions (+%d -%d)", self.group_id,
                 self.generation_id, self.member_id, len(new), len(added), len(revoked))
        self.fetch_committed_if_needed()
        if self.on_assign is not None and (added or not cooperative):
            self._invoke(self.on_assign, sorted(added if cooperative else new))
        if cooperative and revoked:
            self._request_rejoin("partitions were revoked in a cooperative rebalance (KIP-429)")
        self._hb_wake.set()

    def _on_group_error(self, what: str, code: int, kind: str) -> None:
        name = for_code(code).name
        if kind == "rediscover":
            self._coordinator_dead(f"{what}: {name}")
            self._request_rejoin(f"{what}: {name}")
        elif kind == "rejoin":
            self._request_rejoin(f"{what}: {name}")
        elif kind == "reset":
            self._pending_lost = bool(self.subs.assigned())
            self._reset_member(f"{what}: {name}")
        elif kind == "retry":
            self._request_rejoin(f"{what}: {name}")
            self._not_before = time.monotonic() + self.retry_backoff
        else:
            self._reset_member(f"{what}: {name}")
            with self._lock:
                self._rejoin_needed = False
            raise for_code(code)(f"{what} for group {self.group_id!r} (member {self.member_id!r}) failed")
        if self.state in (JOINING, SYNCING):
            self.state = UNJOINED

    def _revoke(self, tps, lost: bool) -> None:
        tps = set(tps)
        if not tps:
            return
        if not lost and self.auto_commit and self.generation_id >= 0:
            offs = {tp: o for tp, o in self.subs.positions().items() if tp in tps}
            if offs:
                try:
                    self.commit_sync(offs, timeout=min(5.0, self.rebalance_timeout_ms / 1000), check_generation=False)
                except KohortError as e:
                    log.warning("group %s: commit before revoking %d partitions failed: %s", self.group_id,
                                len(offs), e)
        cb = self.on_lost if lost and self.on_lost is not None else self.on_revoke
        self.subs.remove(tps)
        self.fetcher.clear(tps)
        if cb is not None:
            self._invoke(cb, sorted(tps))

    def _invoke(self, cb, tps) -> None:
        try:
            cb(self._consumer, tps)
        except Exception:
            log.exception("group %s: rebalance callback %r raised", self.group_id, cb)

    # -- heartbeats (background thread) ---------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        next_hb = 0.0
        inflight: Future | None = None
        while not self._closing:
            now = time.monotonic()
            if self.subscribed and self.state != UNJOINED and self.member_id and \
                    now - self.last_poll > self.max_poll_interval:
                self._on_poll_timeout()
            if inflight is not None and inflight.done():
                self._on_heartbeat(inflight)
                inflight = None
            if self.state == STABLE and self.coordinator is not None and inflight is None and now >= next_hb:
                req = HeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id,
                                       member_id=self.member_id, group_instance_id=self.group_instance_id)
                inflight = self.network.send(self.coordinator, req, max_version=self._caps.get(HEARTBEAT))
                inflight.add_done_callback(lambda f: self._hb_wake.set())
                next_hb = now + self.heartbeat_interval
            self._hb_wake.wait(min(self.heartbeat_interval, 0.5))
            self._hb_wake.clear()

    def _on_heartbeat(self, fut: Future) -> None:
        try:
            resp = fut.result()
        except KohortError as e:
            self._downgrade(HEARTBEAT, fut, e)
            self._coordinator_dead(f"heartbeat failed: {e}")
            self._request_rejoin(f"heartbeat failed: {e}")
            return
        with self._lock:
            if self.state != STABLE:
                return
            self.last_heartbeat = time.monotonic()
            kind = classify_group_error(resp.error_code)
            if kind == "ok":
                return
            name = for_code(resp.error_code).name
            if kind == "rediscover":
                self._coordinator_dead(f"Heartbeat: {name}")
                self._request_rejoin(f"Heartbeat: {name}")
            elif kind == "rejoin":
                self._request_rejoin("the group is rebalancing (REBALANCE_IN_PROGRESS)")
            elif kind == "reset":
                self._pending_lost = True
                self._reset_member(f"Heartbeat: {name}")
            elif resp.error_code == FENCED_INSTANCE_ID:
                self._fatal = for_code(resp.error_code)(
                    f"another consumer with group.instance.id {self.group_instance_id!r} joined group {self.group_id!r}")
                self._reset_member("fenced")
                self._rejoin_needed = False
            elif kind == "fatal":
                self._fatal = for_code(resp.error_code)(f"Heartbeat for group {self.group_id!r}")

    def _on_poll_timeout(self) -> None:
        log.warning("group %s: poll() not called for %.0f ms (max.poll.interval.ms); leaving the group",
                    self.group_id, self.max_poll_interval * 1000)
        if self.group_instance_id is None:
            self._leave("consumer poll timeout has expired (max.poll.interval.ms)", wait=False)
        with self._lock:
            self._poll_timeout_hit = True
            self._reset_member("poll timeout (max.poll.interval.ms) expired")

    def _leave(self, reason: str, wait: bool = True) -> None:
        if self.coordinator is None or not self.member_id:
            return
        mid, iid, gid = self.member_id, self.group_instance_id, self.group_id

        def build(v):
            M = LeaveGroupRequest.MemberIdentity
            return LeaveGroupRequest(group_id=gid, member_id=mid,
                                     members=[M(member_id=mid, group_instance_id=iid, reason=reason)])
        fut = self.network.send(self.coordinator, Versioned(LEAVE_GROUP, build))
        if wait:
            try:
                fut.result(5.0)
            except Exception as e:
                log.debug("LeaveGroup failed: %s", e)

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
                self._coordinator_dead(str(e))
                return
            if err:
                if classify_group_error(err) == "rediscover":
                    self._coordinator_dead(for_code(err).name)
                return
            with self.subs.lock:
                for tp in tps:
                    st = self.subs.partitions.get(tp)
                    if st is None or st.position is not None:
                        continue
                    perr, om = got.get(tp, (0, None))
                    if perr == UNSTABLE_OFFSET_COMMIT:
                        continue
                    if perr:
                        log.warning("OffsetFetch of %s failed: %s", tp, for_code(perr).name)
                        continue
                    st.committed = om
                    if om is not None:
                        self.subs.seek(tp, om.offset, om.leader_epoch)
                    else:
                        self.subs.request_reset([tp])
            self.fetcher.send_fetches()
        if self.coordinator is None:
            if self.subs.missing_position():
                self._discover(time.monotonic())
            return
        need = [tp for tp in self.subs.missing_position() if tp not in self._fetching_committed]
        if not need:
            return
        self._fetching_committed.update(need)
        gid = self.group_id
        fut = self.network.send(self.coordinator, Versioned(OFFSET_FETCH, lambda v: offset_fetch_request(
            v, gid, need, require_stable=True)), max_version=OFFSETS_BY_NAME_MAX_VERSION)
        self._committed_future = (fut, need)

    def fetch_committed(self, tps, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            self._ensure_coordinator(deadline)
            gid = self.group_id
            fut = self.network.send(self.coordinator, Versioned(OFFSET_FETCH, lambda v: offset_fetch_request(
                v, gid, tps, require_stable=True)), max_version=OFFSETS_BY_NAME_MAX_VERSION)
            try:
                resp = _wait(fut, deadline).result()
                err, got = parse_offset_fetch(fut.api_version, resp)
            except KafkaConnectionError as e:
                self._coordinator_dead(str(e))
                _sleep_until(deadline, self.retry_backoff)
                continue
            if err == 0 and not any(e == UNSTABLE_OFFSET_COMMIT for e, _ in got.values()):
                bad = [(tp, e) for tp, (e, _) in got.items() if e]
                if bad:
                    raise for_code(bad[0][1])(f"OffsetFetch of {bad[0][0]}")
                with self.subs.lock:
                    for tp, (_, om) in got.items():
                        st = self.subs.partitions.get(tp)
                        if st is not None:
                            st.committed = om
                return {tp: got.get(tp, (0, None))[1] for tp in tps}
            if err and classify_group_error(err) == "fatal":
                raise for_code(err)(f"OffsetFetch for group {self.group_id!r}")
            if err in COORDINATOR_ERRORS:
                self._coordinator_dead(for_code(err).name)
            _sleep_until(deadline, self.retry_backoff)

    def _ensure_coordinator(self, deadline: float) -> None:
        while self.coordinator is None:
            self._discover(time.monotonic())
            if self.coordinator is not None:
                return
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"coordinator of group {self.group_id!r} not found in time")
            if self._find_future is not None:
                try:
                    self._find_future.result(max(0.0, min(deadline - time.monotonic(), 1.0)))
                except Exception:
                    pass
            else:
                time.sleep(min(self.retry_backoff, max(0.0, deadline - time.monotonic())))

    # -- commits ---------------------------------------------------------------------------------------
    def _commit_identity(self) -> tuple[int, str]:
        if self.subscribed:
            return self.generation_id, self.member_id
        return -1, ""

    def _check_generation(self, offsets) -> None:
        if not self.subscribed:
            return
        if self.state != STABLE or self.generation_id < 0:
            raise CommitFailedError(
                f"cannot commit {len(offsets)} offsets: group {self.group_id!r} is rebalancing (member state "
                f"{self.state}); these partitions may be reassigned. Call poll() to finish the rebalance; "
                f"offsets of revoked partitions are committed automatically before revocation when "
                f"enable.auto.commit is on")
        if 0 <= self._records_generation != self.generation_id:
            raise CommitFailedError(
                f"the records whose offsets are being committed were handed out in generation "
                f"{self._records_generation} of group {self.group_id!r}, but the group has since rebalanced "
                f"(now generation {self.generation_id}); their partitions may now belong to other members, so "
                f"committing could overwrite newer progress")

    def commit_sync(self, offsets: dict, timeout: float, check_generation: bool = True) -> None:
        if not offsets:
            return
        if check_generation:
            self._check_generation(offsets)
        deadline = time.monotonic() + timeout
        while True:
            self._ensure_coordinator(deadline)
            gen, mid = self._commit_identity()
            fut = self._send_commit(offsets, gen, mid)
            try:
                resp = _wait(fut, deadline).result()
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(f"commit did not complete within {timeout:.1f}s: {e}") from None
                self._coordinator_dead(str(e))
                continue
            err = _first_commit_error(resp)
            if err == 0:
                with self.subs.lock:
                    for tp, om in offsets.items():
                        st = self.subs.partitions.get(tp)
                        if st is not None:
                            st.committed = om
                return
            kind = classify_group_error(err)
            name = for_code(err).name
            if kind in ("reset", "rejoin") or err == FENCED_INSTANCE_ID:
                if kind == "reset":
                    self._pending_lost = True
                    self._reset_member(f"OffsetCommit: {name}")
                else:
                    self._request_rejoin(f"OffsetCommit: {name}")
                raise CommitFailedError(
                    f"commit failed with {name}: group {self.group_id!r} rebalanced after these records were "
                    f"handed out (generation {gen}, member {mid!r}); their partitions may now belong to other "
                    f"members. The consumer rejoins on the next poll()")
            if kind == "fatal":
                raise for_code(err)(f"OffsetCommit for group {self.group_id!r}")
            if kind == "rediscover":
                self._coordinator_dead(name)
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"commit did not succeed within {timeout:.1f}s (last error {name})")
            time.sleep(min(self.retry_backoff, max(0.0, deadline - time.monotonic())))

    def _send_commit(self, offsets, gen, mid) -> Future:
        gid, iid = self.group_id, self.group_instance_id
        return self.network.send(self.coordinator, Versioned(OFFSET_COMMIT, lambda v: offset_commit_request(
            v, gid, gen, mid, iid, offsets)), max_version=OFFSETS_BY_NAME_MAX_VERSION)

    def commit_async(self, offsets: dict, callback, auto: bool = False) -> None:
        if not offsets:
            if callback is not None:
                self._callbacks.append((callback, None, offsets))
            return
        if not auto:
            try:
                self._check_generation(offsets)
            except CommitFailedError as e:
                if callback is not None:
                    self._callbacks.append((callback, e, offsets))
                    return
                raise
        self._async_queue.append((dict(offsets), callback))
        self._drive_async_commits()

    def _drive_async_commits(self) -> None:
        if self._async_inflight is not None:
            fut, offsets, callback, gen, mid = self._async_inflight
            if not fut.done():
                return
            self._async_inflight = None
            err: BaseException | None = None
            try:
                code = _first_commit_error(fut.result())
                if code:
                    kind = classify_group_error(code)
                    if kind == "rediscover":
                        self._coordinator_dead(for_code(code).name)
                    if kind in ("reset", "rejoin"):
                        err = CommitFailedError(
                            f"async commit failed with {for_code(code).name}: the group rebalanced (generation {gen})")
                    else:
                        err = for_code(code)("async OffsetCommit")
            except KohortError as e:
                self._coordinator_dead(str(e))
                err = e
            if err is None:
                with self.subs.lock:
                    for tp, om in offsets.items():
                        st = self.subs.partitions.get(tp)
                        if st is not None:
                            st.committed = om
            elif callback is None:
                log.warning("group %s: async commit failed: %s", self.group_id, err)
            if callback is not None:
                self._callbacks.append((callback, err, offsets))
        if self._async_queue and self.coordinator is not None:
            offsets, callback = self._async_queue.popleft()
            gen, mid = self._commit_identity()
            self._async_inflight = (self._send_commit(offsets, gen, mid), offsets, callback, gen, mid)
        elif self._async_queue:
            self._discover(time.monotonic())

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
        return {"group_id": self.group_id, "member_id": self.member_id, "generation_id": self.generation_id,
                "member_state": self.state, "leader": self.leader_id == self.member_id and bool(self.member_id),
                "protocol": self.protocol_name, "coordinator": self._coordinator_broker,
                "last_heartbeat": self.last_heartbeat,
                "seconds_since_heartbeat": None if self.last_heartbeat is None
                else time.monotonic() - self.last_heartbeat,
                "rebalance_count": self.rebalance_count, "last_rebalance_reason": self.last_rebalance_reason}

    def close(self, autocommit: bool, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            if autocommit and self.auto_commit and (self.state == STABLE or not self.subscribed):
                offs = self.subs.positions()
                if offs:
                    try:
                        self.commit_sync(offs, max(0.1, deadline - time.monotonic()), check_generation=False)
                    except KohortError as e:
                        log.warning("group %s: commit on close failed: %s", self.group_id, e)
            self.flush_async(max(0.0, deadline - time.monotonic()))
            if self.subscribed and self.state != UNJOINED:
                if self.on_revoke is not None and self.subs.assigned():
                    self._invoke(self.on_revoke, sorted(self.subs.assigned()))
                if self.group_instance_id is None and self.leave_on_close:
                    self._leave("the consumer is being closed")
        finally:
            self._closing = True
            self._hb_wake.set()
            self._hb_thread.join(2.0)


def _by_topic(tps) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


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


__all__ = ["CommitFailedError", "GroupError", "GroupMember", "MaxPollIntervalExceededError", "classify_group_error",
           "JOINING", "STABLE", "SYNCING", "UNJOINED"]
