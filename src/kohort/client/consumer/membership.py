"""A classic consumer-group member as a pure state machine: `Membership.handle(event, now_ms) -> actions`.

No sockets, threads, clocks or asyncio here: the driver (`group.py`) feeds events (application calls,
responses, ticks) with the time, and carries out the returned actions (requests to send, rebalance
callbacks to run, commits to make) in order. Behaviour follows Kafka's AbstractCoordinator and
ConsumerCoordinator (classic protocol), the states being Java's MemberState:

    UNJOINED --Poll: JoinGroup--> PREPARING_REBALANCE --JoinGroup ok--> COMPLETING_REBALANCE
        ^                                                    |  (leader assigns, SyncGroup)
        |                                                    v
        +---- resets (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, poll timeout) ---- STABLE

* Coordinator: FindCoordinator when unknown, from the application's poll and from the heartbeat
  tick alike (Java's heartbeat thread rediscovers too); NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
  a transport failure or a session timeout without a heartbeat answer mark it unknown.
* Joins start only from `Poll` (the application thread), after revoking (`Revoke`, returned alone so
  the driver runs it and polls again; eager: all; cooperative: partitions of topics no longer
  subscribed; after a generation reset: all, as *lost*).
  The answers to JoinGroup/SyncGroup may arrive on any thread: SyncGroup's answer makes the member
  STABLE at once, the new assignment is applied (`Assign`, callbacks) by the next `Poll`, as Java's
  onJoinComplete. Heartbeats run in COMPLETING_REBALANCE and STABLE (Java's heartbeat thread).
* The leader assigns from the metadata it has: when the group subscribes topics it has never asked
  metadata for, it requests one refresh and assigns when it lands (or after request.timeout.ms),
  never waiting for topics to exist. It remembers the partition counts it assigned from; a later
  metadata view that differs (topic created, deleted or grown) requests a rejoin (Java's
  assignmentSnapshot/metadataSnapshot). A subscription change also requests a rejoin.
* Every failed join or sync requests a rejoin before the error surfaces, so a later Poll retries
  (Java's joinGroupIfNeeded), including the fatal JoinGroup errors (GROUP_MAX_SIZE_REACHED, ...).
* ILLEGAL_GENERATION resets the generation but keeps the member id; UNKNOWN_MEMBER_ID (and a poll
  timeout, which also sends LeaveGroup) resets both. A reset makes the next Poll report the owned
  partitions lost (even while the coordinator is still being looked up), then rejoin.
* Commits check only that the generation is known and stable (`commit_generation`).

Error handling is one table, `ERROR_ACTIONS` (ErrorCode -> what to do), with the few per-API
differences Java has noted where the handlers use it.
"""
from __future__ import annotations

from kohort.assignors import COOPERATIVE
from kohort.assignors.base import Subscription as AssignorSubscription
from kohort.client.consumer.membership_common import (
    NO_GENERATION, Assign, AutoCommit, Close, CommitFailedError, Generation, GroupError,
    MemberConfig, MemberMachine, MetadataUpdate, NeedCoordinator, Poll, Raise, RebalanceInProgressError,
    RequestFailed, RequestMetadata, Response, Revoke, Send, Subscribe, Tick, Unsubscribe, UseCoordinator,
)
from kohort.errors import ErrorCode as E, KohortError, for_code
from kohort.protocol.consumer_protocol import (
    PROTOCOL_TYPE, ConsumerProtocolAssignment, ConsumerProtocolSubscription, decode_assignment,
    decode_subscription, encode_assignment, encode_subscription,
)
from kohort.protocol.messages.heartbeat import HeartbeatRequest
from kohort.protocol.messages.join_group import JoinGroupRequest
from kohort.protocol.messages.leave_group import LeaveGroupRequest
from kohort.protocol.messages.sync_group import SyncGroupRequest
from kohort.structs import TopicPartition

SUBSCRIPTION_WIRE_VERSION = 3   # ConsumerProtocolSubscription v3 (KIP-881 rack), as Java 3.5+ sends
UNJOINED, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE = (
    "UNJOINED", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "STABLE")


# -- the error table --------------------------------------------------------------------------------
OK = "ok"
REDISCOVER = "rediscover"          # mark the coordinator unknown, find it again, retry after backoff
RETRY = "retry"                    # retry after retry.backoff.ms
REJOIN = "rejoin"                  # the group is rebalancing: request a rejoin (generation kept)
RESET_GENERATION = "reset-generation"   # forget the generation, keep the member id, rejoin
RESET_MEMBER = "reset-member"      # forget generation and member id, rejoin
NEW_MEMBER_ID = "new-member-id"    # KIP-394: rejoin at once with the member id the coordinator gave
FENCED = "fenced"                  # another instance took our group.instance.id (KIP-345): fatal
FATAL = "fatal"                    # raise to the application (a join is still retried by a later poll)

ERROR_ACTIONS: dict[int, str] = {
    E.NONE: OK,
    E.COORDINATOR_NOT_AVAILABLE: REDISCOVER,
    E.NOT_COORDINATOR: REDISCOVER,
    E.REQUEST_TIMED_OUT: REDISCOVER,            # OffsetCommit: Java marks the coordinator unknown
    E.COORDINATOR_LOAD_IN_PROGRESS: RETRY,
    E.UNKNOWN_TOPIC_OR_PARTITION: RETRY,        # OffsetCommit: retried
    E.REBALANCE_IN_PROGRESS: REJOIN,
    E.ILLEGAL_GENERATION: RESET_GENERATION,
    E.UNKNOWN_MEMBER_ID: RESET_MEMBER,
    E.MEMBER_ID_REQUIRED: NEW_MEMBER_ID,
    E.FENCED_INSTANCE_ID: FENCED,
    E.GROUP_AUTHORIZATION_FAILED: FATAL,
    E.TOPIC_AUTHORIZATION_FAILED: FATAL,
    E.INCONSISTENT_GROUP_PROTOCOL: FATAL,
    E.INVALID_SESSION_TIMEOUT: FATAL,
    E.INVALID_GROUP_ID: FATAL,
    E.GROUP_MAX_SIZE_REACHED: FATAL,
    E.UNSUPPORTED_VERSION: FATAL,
    E.OFFSET_METADATA_TOO_LARGE: FATAL,
    E.INVALID_COMMIT_OFFSET_SIZE: FATAL,
}


def error_action(code: int) -> str:
    """What a member does about `code` in a group response (ERROR_ACTIONS; other codes: RETRY when
    Kafka calls them retriable, else FATAL)."""
    got = ERROR_ACTIONS.get(code)
    if got is not None:
        return got
    return RETRY if for_code(code).retriable else FATAL


class Membership(MemberMachine):
    """One consumer's membership in a classic group. See the module docstring."""

    _error_action = staticmethod(error_action)

    def __init__(self, config: MemberConfig, now_ms: int = 0):
        super().__init__(config, now_ms)
        self.state = UNJOINED
        self.generation = NO_GENERATION
        self.subscription: tuple[str, ...] | None = None    # None: not subscribed
        self.owned: frozenset = frozenset()                  # partitions handed to the application
        self.rejoin_needed = True
        self.rejoin_reason = "initial join"
        self.needs_join_prepare = True
        self.rebalance_count = 0
        self.last_rebalance_reason: str | None = None
        self.is_leader = False
        # in flight
        self._join_busy = False            # JoinGroup/SyncGroup (or the leader's metadata wait) in flight
        self._join_not_before = 0
        self._joined_subscription: tuple | None = None
        self._pending_assignment: tuple[Generation, bytes] | None = None
        self._leader_wait: tuple | None = None        # (join response, sent generation, metadata version, deadline)
        # metadata
        self._meta_version = 0
        self._meta: dict[str, int] = {}
        self._group_topics: frozenset = frozenset()   # topics of every member (leader only)
        self._assignment_snapshot: dict | None = None
        # timers (Java's Heartbeat: heartbeat, session and poll timers)
        self._next_heartbeat = now_ms
        self._poll_deadline = now_ms + config.rebalance_timeout_ms
        self.last_poll_ms = now_ms
        self.last_heartbeat_ms: int | None = None
        self._next_auto_commit = now_ms + (config.auto_commit_interval_ms or 0)

    # -- queries -------------------------------------------------------------------------------------
    @property
    def member_id(self) -> str:
        return self.generation.member_id

    @property
    def subscribed(self) -> bool:
        return self.subscription is not None

    def commit_generation(self) -> Generation:
        """The generation to commit with (Java's generationIfStable); NO_GENERATION when not subscribed.
        Raises RebalanceInProgressError while rebalancing, CommitFailedError when not in the group."""
        if not self.subscribed:
            return NO_GENERATION
        if self.state == STABLE and self.generation.generation_id >= 0:
            return self.generation
        if self.state in (PREPARING_REBALANCE, COMPLETING_REBALANCE):
            raise RebalanceInProgressError(
                f"offset commit cannot be completed: group {self.cfg.group_id!r} is rebalancing; call poll() "
                f"to finish the rebalance and commit again")
        raise CommitFailedError(
            f"offset commit cannot be completed: this consumer is not part of an active generation of group "
            f"{self.cfg.group_id!r} (it was removed from the group or its generation was reset); its partitions "
            f"may belong to other members now. The next poll() rejoins the group")

    def next_deadline(self) -> int | None:
        """When the driver must send a Tick at the latest (ms), or None when nothing is timed."""
        if not self.subscribed or self.state in (UNJOINED, PREPARING_REBALANCE) or self._fatal is not None:
            return None
        if self.coordinator is None:
            return None if self._finding else self._find_not_before
        ds = [self._session_deadline, self._poll_deadline]
        if not self._hb_inflight:
            ds.append(self._next_heartbeat)
        if self._leader_wait is not None:
            ds.append(self._leader_wait[3])
        return min(ds)

    # -- application events ------------------------------------------------------------------------------
    def _on_Subscribe(self, ev: Subscribe, now: int, out: list) -> None:
        topics = tuple(sorted(set(ev.topics)))
        was = self.subscription
        self.subscription = topics
        if was is None:
            self._poll_deadline = now + self.cfg.rebalance_timeout_ms
        if topics != self._joined_subscription:
            self._request_rejoin("subscription changed")

    def _on_Unsubscribe(self, ev, now: int, out: list) -> None:
        if self.subscribed:
            self._leave_prepare(out)
            self._maybe_leave("the consumer unsubscribed", out)
        self.subscription = None
        self._joined_subscription = None
        self._pending_assignment = None
        self._assignment_snapshot = None
        self.is_leader = False

    def _on_Close(self, ev, now: int, out: list) -> None:
        if self.subscribed:
            self._leave_prepare(out)
            if ev.leave:
                self._maybe_leave("the consumer is being closed", out)
        self.subscription = None

    def _on_MetadataUpdate(self, ev: MetadataUpdate, now: int, out: list) -> None:
        if ev.version <= self._meta_version:
            return
        self._meta_version = ev.version
        self._meta = dict(ev.partitions)
        if self._leader_wait is not None and ev.version > self._leader_wait[2]:
            resp, sent, _, _ = self._leader_wait
            self._leader_wait = None
            self._leader_assign(resp, sent, now, out)

    def _on_Poll(self, ev, now: int, out: list) -> None:
        self.last_poll_ms = now
        self._poll_deadline = now + self.cfg.rebalance_timeout_ms
        if self._fatal is not None:
            err, self._fatal = self._fatal, None
            out.append(Raise(err))
            return
        if not self.subscribed:
            return
        if self._pending_assignment is not None:
            self._join_complete(now, out)
        if self.needs_join_prepare and self.owned and not self._join_busy and self._generation_reset() \
                and self._rejoin_needed_or_pending():
            # out of the group: report the partitions lost now, not once the coordinator is back
            self.needs_join_prepare = False
            self._join_prepare(out)
            return
        if self.coordinator is None:
            self._lookup(now, out)
            return
        if self._rejoin_needed_or_pending() and not self._join_busy and now >= self._join_not_before:
            if self.needs_join_prepare:
                self.needs_join_prepare = False
                n = len(out)
                self._join_prepare(out)
                if len(out) > n:
                    # the revocation (and its commit) happens before JoinGroup goes out: the driver
                    # runs it and polls again (Java's onJoinPrepare, then initiateJoinGroup)
                    return
            self._send_join(now, out)
            return
        if self.state == STABLE and self.cfg.auto_commit_interval_ms is not None and now >= self._next_auto_commit:
            self._next_auto_commit = now + self.cfg.auto_commit_interval_ms
            out.append(AutoCommit())

    def _on_Tick(self, ev, now: int, out: list) -> None:
        if self._leader_wait is not None and now >= self._leader_wait[3]:
            resp, sent, _, _ = self._leader_wait
            self._leader_wait = None
            self._leader_assign(resp, sent, now, out)
        if not self.subscribed or self.state in (UNJOINED, PREPARING_REBALANCE) or self._fatal is not None:
            return
        if self.coordinator is None:
            self._lookup(now, out)
        elif now >= self._session_deadline:
            self._mark_coordinator_unknown("session timed out without a heartbeat answer", now)
        elif now >= self._poll_deadline:
            self._poll_timeout_expired(now, out)
        elif not self._hb_inflight and now >= self._next_heartbeat:
            self._hb_inflight = True
            self._next_heartbeat = now + self.cfg.heartbeat_interval_ms
            g = self.generation
            out.append(Send(HeartbeatRequest(group_id=self.cfg.group_id, generation_id=g.generation_id,
                                             member_id=g.member_id, group_instance_id=self.cfg.group_instance_id),
                            ("heartbeat", g), to=self.coordinator.conn_id))

    # -- responses ---------------------------------------------------------------------------------------
    def _on_RequestFailed(self, ev: RequestFailed, now: int, out: list) -> None:
        kind = ev.tag[0]
        if kind == "find":
            self._finding = False
            self._find_not_before = now + self.cfg.retry_backoff_ms
            return
        self._mark_coordinator_unknown(f"{kind} failed: {ev.error}", now)
        if kind == "heartbeat":
            self._hb_inflight = False
            self._next_heartbeat = now + self.cfg.retry_backoff_ms
        elif kind in ("join", "sync"):
            self._join_busy = False
            self._join_failed(f"{kind} failed: {ev.error}", now, retry_at=now + self.cfg.retry_backoff_ms)

    def _join_response(self, resp, tag, now: int, out: list) -> None:
        sent: Generation = tag[1]
        self._join_busy = False
        err = resp.error_code
        if err == E.NONE and resp.protocol_type not in (None, PROTOCOL_TYPE):
            err = E.INCONSISTENT_GROUP_PROTOCOL
        act = error_action(err)
        if act == OK:
            if self.state != PREPARING_REBALANCE:
                # left the group (poll timeout) while the join was in flight
                self._join_failed("the member left the group during the join", now, retry_at=now)
                return
            self.state = COMPLETING_REBALANCE
            self._reset_heartbeat_timers(now)
            self.generation = Generation(resp.generation_id, resp.member_id, resp.protocol_name)
            if resp.leader == resp.member_id:
                self._join_busy = True
                self._on_leader_elected(resp, self.generation, now, out)
            else:
                self._send_sync([], now, out)
            return
        name = for_code(err).name
        if act == NEW_MEMBER_ID:
            self.generation = Generation(-1, resp.member_id, None)
            self._join_failed(f"the coordinator assigned member id {resp.member_id} (KIP-394)", now, retry_at=now)
        elif act == RESET_MEMBER:
            if self.generation == sent:
                self._reset_state_and_generation(f"JoinGroup: {name}", reset_member_id=True)
            self._join_failed(f"JoinGroup: {name}", now, retry_at=now)
        elif act == REJOIN:
            self._join_failed(f"JoinGroup: {name}", now, retry_at=now)
        elif act == REDISCOVER:
            self._mark_coordinator_unknown(f"JoinGroup: {name}", now)
            self._join_failed(f"JoinGroup: {name}", now, retry_at=now + self.cfg.retry_backoff_ms)
        elif act in (RETRY, RESET_GENERATION) and err != E.UNSUPPORTED_VERSION:
            self._join_failed(f"JoinGroup: {name}", now, retry_at=now + self.cfg.retry_backoff_ms)
        else:
            # Java requests a rejoin before throwing: a later poll tries again (e.g. once there is room)
            self._join_failed(f"JoinGroup: {name}", now, retry_at=now + self.cfg.retry_backoff_ms)
            self._fatal = for_code(err)(f"JoinGroup of group {self.cfg.group_id!r} failed")

    def _sync_response(self, resp, tag, now: int, out: list) -> None:
        sent: Generation = tag[1]
        self._join_busy = False
        err = resp.error_code
        if err == E.NONE:
            pname = getattr(resp, "protocol_name", None)
            if resp.protocol_type not in (None, PROTOCOL_TYPE) or (
                    pname is not None and self.generation == sent and pname != sent.protocol_name):
                err = E.INCONSISTENT_GROUP_PROTOCOL
        act = error_action(err)
        if act == OK:
            if self.generation != sent or self.state != COMPLETING_REBALANCE:
                # the heartbeat side reset the generation meanwhile: retry at once (Java raises ILLEGAL_GENERATION)
                self._join_failed("the generation was reset before SyncGroup's answer", now, retry_at=now)
                return
            self.state = STABLE
            self.rejoin_needed = False
            self.rejoin_reason = ""
            self.rebalance_count += 1
            self.last_heartbeat_ms = now
            self._pending_assignment = (sent, resp.assignment or b"")
            return
        name = for_code(err).name
        if err == E.INVALID_REQUEST:
            # librdkafka's mock cluster answers a SyncGroup that arrives after its group moved on with
            # INVALID_REQUEST; a fresh join recovers (Java would raise and retry on the next poll)
            self._join_failed(f"SyncGroup: {name}", now, retry_at=now)
        elif act in (RESET_MEMBER, RESET_GENERATION):
            if self.generation == sent:
                self._reset_state_and_generation(f"SyncGroup: {name}", reset_member_id=act == RESET_MEMBER)
            self._join_failed(f"SyncGroup: {name}", now, retry_at=now)
        elif act == REJOIN:
            self._join_failed(f"SyncGroup: {name}", now, retry_at=now)
        elif act == REDISCOVER:
            self._mark_coordinator_unknown(f"SyncGroup: {name}", now)
            self._join_failed(f"SyncGroup: {name}", now, retry_at=now + self.cfg.retry_backoff_ms)
        else:
            self._join_failed(f"SyncGroup: {name}", now, retry_at=now + self.cfg.retry_backoff_ms)
            self._fatal = for_code(err)(f"SyncGroup of group {self.cfg.group_id!r} failed")

    def _heartbeat_response(self, resp, tag, now: int, out: list) -> None:
        sent: Generation = tag[1]
        self._hb_inflight = False
        err = resp.error_code
        act = error_action(err)
        if act == OK:
            self._session_deadline = now + self.cfg.session_timeout_ms
            self.last_heartbeat_ms = now
            return
        name = for_code(err).name
        if act == REDISCOVER:
            self._mark_coordinator_unknown(f"Heartbeat: {name}", now)
        elif act == REJOIN:
            # valid to go on heartbeating during a rebalance: the session stays alive
            self._session_deadline = now + self.cfg.session_timeout_ms
            if self.state == STABLE:
                self._request_rejoin("the group is rebalancing (REBALANCE_IN_PROGRESS)")
            return
        elif act in (RESET_GENERATION, RESET_MEMBER, FENCED):
            if self.generation == sent:
                self._reset_state_and_generation(f"Heartbeat: {name}", reset_member_id=act != RESET_GENERATION)
                self._request_rejoin(f"Heartbeat: {name}")
                self.needs_join_prepare = True
                if act == FENCED:
                    self._fatal = for_code(err)(
                        f"another consumer with group.instance.id {self.cfg.group_instance_id!r} joined group "
                        f"{self.cfg.group_id!r}")
            return
        elif act == FATAL:
            self._fatal = for_code(err)(f"Heartbeat of group {self.cfg.group_id!r}")
            return
        self._next_heartbeat = now + self.cfg.retry_backoff_ms    # failHeartbeat: retry after the backoff

    def _leave_response(self, resp, tag, now: int, out: list) -> None:
        pass

    def commit_failed(self, code: int, sent: Generation, now: int) -> tuple[str, BaseException | None]:
        """An OffsetCommit answered `code` for a commit made with `sent`: ('ok'|'retry'|'raise', error).
        Java's OffsetCommitResponseHandler; may change membership (rejoin, reset)."""
        act = error_action(code)
        if act == OK:
            return "ok", None
        name = for_code(code).name
        if act == REDISCOVER:
            self._mark_coordinator_unknown(f"OffsetCommit: {name}", now)
            return "retry", for_code(code)("OffsetCommit")
        if act == RETRY:
            return "retry", for_code(code)("OffsetCommit")
        if act == REJOIN:
            self._request_rejoin("offset commit failed since the group is rebalancing")
            return "raise", RebalanceInProgressError(
                f"offset commit cannot be completed: group {self.cfg.group_id!r} is rebalancing; call poll() to "
                f"finish the rebalance and commit again")
        if act in (RESET_GENERATION, RESET_MEMBER, FENCED):
            if self.generation != sent and self.state == PREPARING_REBALANCE:
                return "raise", RebalanceInProgressError(
                    f"offset commit cannot be completed: generation {sent.generation_id} of group "
                    f"{self.cfg.group_id!r} is stale and the member is rejoining; call poll() and commit again")
            if act == FENCED and self.generation == sent:
                return "raise", for_code(code)(f"OffsetCommit: group.instance.id {self.cfg.group_instance_id!r} fenced")
            if act != FENCED:
                self._reset_state_and_generation(f"OffsetCommit: {name}", reset_member_id=act == RESET_MEMBER)
                self._request_rejoin(f"OffsetCommit: {name}")
                self.needs_join_prepare = True
            return "raise", CommitFailedError(
                f"commit failed with {name}: group {self.cfg.group_id!r} rebalanced (commit made in generation "
                f"{sent.generation_id}, member {sent.member_id!r}); these partitions may now belong to other "
                f"members. The consumer rejoins on the next poll()")
        return "raise", for_code(code)(f"OffsetCommit of group {self.cfg.group_id!r}")

    def take_fatal(self) -> BaseException | None:
        """The fatal error (e.g. FindCoordinator's GROUP_AUTHORIZATION_FAILED) not yet raised, cleared."""
        err, self._fatal = self._fatal, None
        return err

    # -- internals ---------------------------------------------------------------------------------------
    def _request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            self.rejoin_reason = reason
        self.rejoin_needed = True

    def _reset_state_and_generation(self, reason: str, reset_member_id: bool) -> None:
        self.state = UNJOINED
        if reset_member_id:
            self.generation = NO_GENERATION
        else:
            self.generation = Generation(-1, self.generation.member_id, None)
        self._pending_assignment = None
        self._request_rejoin(reason)
        self.needs_join_prepare = True

    def _join_failed(self, reason: str, now: int, retry_at: int) -> None:
        self._request_rejoin(reason)
        self._join_not_before = retry_at
        self._leader_wait = None

    def _reset_heartbeat_timers(self, now: int) -> None:
        self._session_deadline = now + self.cfg.session_timeout_ms
        self._next_heartbeat = now + self.cfg.heartbeat_interval_ms
        self._hb_inflight = False

    def _poll_timeout_expired(self, now: int, out: list) -> None:
        self._maybe_leave("consumer poll timeout has expired (max.poll.interval.ms)", out)

    def _maybe_leave(self, reason: str, out: list) -> None:
        """Java's maybeLeaveGroup: LeaveGroup (dynamic members in a generation), then reset everything."""
        if self.cfg.group_instance_id is None and self.coordinator is not None and self.state != UNJOINED \
                and self.generation.member_id:
            mid = self.generation.member_id
            M = LeaveGroupRequest.MemberIdentity
            out.append(Send(LeaveGroupRequest(group_id=self.cfg.group_id, member_id=mid,
                                              members=[M(member_id=mid, reason=reason)]),
                            ("leave", self.generation), to=self.coordinator.conn_id))
        self._reset_state_and_generation(reason, reset_member_id=True)

    def _protocol(self) -> str:
        for a in self.cfg.assignors:
            if a.name == self.generation.protocol_name:
                return a.protocol
        return "EAGER"

    def _rejoin_needed_or_pending(self) -> bool:
        if self._assignment_snapshot is not None and self._assignment_snapshot != self._metadata_snapshot():
            self._assignment_snapshot = None
            self._request_rejoin("cached metadata has changed since the assignment")
            return True
        if self._joined_subscription is not None and self._joined_subscription != self.subscription:
            self._request_rejoin("subscription has changed")
            return True
        return self.rejoin_needed

    def _metadata_snapshot(self) -> dict:
        topics = set(self.subscription or ()) | (self._group_topics if self.is_leader else set())
        return {t: self._meta[t] for t in topics if self._meta.get(t)}

    def _generation_reset(self) -> bool:
        return self.generation.generation_id < 0 or not self.generation.member_id

    def _join_prepare(self, out: list) -> None:
        """Java's onJoinPrepare: give up partitions before joining."""
        owned = self.owned
        if owned:
            if self._generation_reset():
                out.append(Revoke(owned, lost=True, commit=False))
                self.owned = frozenset()
            elif self._protocol() == COOPERATIVE:
                gone = frozenset(tp for tp in owned if tp.topic not in set(self.subscription or ()))
                if gone:
                    out.append(Revoke(gone, lost=False, commit=self.cfg.auto_commit_interval_ms is not None))
                    self.owned = owned - gone
            else:
                out.append(Revoke(owned, lost=False, commit=self.cfg.auto_commit_interval_ms is not None))
                self.owned = frozenset()
        self.is_leader = False
        self._group_topics = frozenset()
        self._assignment_snapshot = None

    def _leave_prepare(self, out: list) -> None:
        """Java's onLeavePrepare: lost when not in a stable generation, else revoked."""
        if self.owned:
            lost = self.generation.generation_id < 0 or not self.generation.member_id or \
                self.state in (PREPARING_REBALANCE, COMPLETING_REBALANCE)
            out.append(Revoke(self.owned, lost=lost, commit=False))
            self.owned = frozenset()

    def _send_join(self, now: int, out: list) -> None:
        self.state = PREPARING_REBALANCE
        self._join_busy = True
        self.last_rebalance_reason = self.rejoin_reason
        topics = list(self.subscription or ())
        self._joined_subscription = tuple(topics)
        owned = sorted(self.owned)
        gen = self.generation.generation_id
        protocols = []
        for a in self.cfg.assignors:
            sub = ConsumerProtocolSubscription(
                topics=topics, user_data=a.subscription_user_data(topics, owned if gen >= 0 else None, gen),
                owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
                                  for t, ps in _by_topic(owned).items()],
                generation_id=gen, rack_id=self.cfg.rack_id)
            protocols.append(JoinGroupRequest.Protocol(
                name=a.name, metadata=encode_subscription(sub, SUBSCRIPTION_WIRE_VERSION)))
        req = JoinGroupRequest(group_id=self.cfg.group_id, session_timeout_ms=self.cfg.session_timeout_ms,
                               rebalance_timeout_ms=self.cfg.rebalance_timeout_ms, member_id=self.generation.member_id,
                               group_instance_id=self.cfg.group_instance_id, protocol_type=PROTOCOL_TYPE,
                               protocols=protocols, reason=self.rejoin_reason[:255] or None)
        out.append(Send(req, ("join", self.generation), to=self.coordinator.conn_id,
                        timeout_ms=max(self.cfg.request_timeout_ms, self.cfg.rebalance_timeout_ms + 5000)))

    def _on_leader_elected(self, resp, sent: Generation, now: int, out: list) -> None:
        topics = set()
        for m in resp.members:
            try:
                topics.update(decode_subscription(m.metadata).topics)
            except KohortError:
                pass
        self.is_leader = True
        self._group_topics = frozenset(topics)
        unknown = frozenset(t for t in topics if t not in self._meta)
        if unknown:
            # ask for metadata of the topics we never saw; assign once it lands (not once they exist).
            # A returning static leader told to skip the assignment (KIP-814) waits too: the metadata
            # snapshot taken at the assignment must hold the topics, or their first metadata would look
            # like a change and rejoin the group (Java's onLeaderElected refreshes metadata either way)
            out.append(RequestMetadata(frozenset(topics)))
            self._leader_wait = (resp, sent, self._meta_version, now + self.cfg.request_timeout_ms)
            return
        self._leader_assign(resp, sent, now, out)

    def _leader_assign(self, resp, sent: Generation, now: int, out: list) -> None:
        if self.generation != sent or self.state != COMPLETING_REBALANCE:
            self._join_busy = False
            return
        assignments = []
        if not getattr(resp, "skip_assignment", False):
            try:
                assignments = self._assign(resp.protocol_name, resp.members)
            except KohortError as e:
                self._join_busy = False
                self._join_failed(f"assignment failed: {e}", now, retry_at=now + self.cfg.retry_backoff_ms)
                self._fatal = GroupError(f"the group leader could not assign partitions: {e}")
                return
        self._assignment_snapshot = self._metadata_snapshot()
        self._send_sync(assignments, now, out)

    def _assign(self, protocol_name: str, members) -> list:
        assignor = next((a for a in self.cfg.assignors if a.name == protocol_name), None)
        if assignor is None:
            raise GroupError(f"the group selected assignor {protocol_name!r}, which this member does not have")
        subs = {}
        for m in members:
            s = decode_subscription(m.metadata)
            owned = [(tp.topic, p) for tp in s.owned_partitions for p in tp.partitions]
            subs[m.member_id] = AssignorSubscription(
                topics=list(s.topics), user_data=s.user_data, owned_partitions=owned,
                generation_id=s.generation_id, rack_id=s.rack_id, group_instance_id=m.group_instance_id)
        counts = {t: self._meta[t] for t in self._group_topics if self._meta.get(t)}
        result = assignor.assign(counts, subs)
        out = []
        for member_id, a in result.items():
            payload = ConsumerProtocolAssignment(
                assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                                     for t, ps in _by_topic(a.partitions).items()],
                user_data=a.user_data)
            out.append(SyncGroupRequest.Assignment(member_id=member_id, assignment=encode_assignment(payload)))
        return out

    def _send_sync(self, assignments: list, now: int, out: list) -> None:
        if self.coordinator is None:
            self._join_busy = False
            self._join_failed("coordinator unknown before SyncGroup", now, retry_at=now + self.cfg.retry_backoff_ms)
            return
        self._join_busy = True
        g = self.generation
        out.append(Send(SyncGroupRequest(group_id=self.cfg.group_id, generation_id=g.generation_id,
                                         member_id=g.member_id, group_instance_id=self.cfg.group_instance_id,
                                         protocol_type=PROTOCOL_TYPE, protocol_name=g.protocol_name,
                                         assignments=assignments),
                        ("sync", g), to=self.coordinator.conn_id))

    def _join_complete(self, now: int, out: list) -> None:
        """Java's onJoinComplete, on the application's poll: apply the assignment SyncGroup brought."""
        sent, payload = self._pending_assignment
        self._pending_assignment = None
        if self.generation != sent or self.state != STABLE:
            self._reset_state_and_generation("the generation was reset before the assignment was applied", True)
            return
        try:
            a = decode_assignment(payload) if payload else ConsumerProtocolAssignment()
        except KohortError as e:
            self._request_rejoin(f"undecodable assignment: {e}")
            return
        new = frozenset(TopicPartition(tp.topic, p) for tp in a.assigned_partitions for p in tp.partitions)
        old = self.owned
        cooperative = self._protocol() == COOPERATIVE
        revoked, added = old - new, new - old
        if revoked:
            # cooperative: give up what moved (committing it first with auto commit, as kohort did
            # before; Java relies on the async auto commit made before joining)
            out.append(Revoke(revoked, lost=False, commit=self.cfg.auto_commit_interval_ms is not None))
        self.owned = new
        out.append(Assign(added, new, cooperative))
        if not self.is_leader:
            self._assignment_snapshot = None
        if cooperative and revoked:
            self._request_rejoin("partitions were revoked in a cooperative rebalance (KIP-429)")
        self.needs_join_prepare = True
        self._next_auto_commit = now + (self.cfg.auto_commit_interval_ms or 0)


def _by_topic(tps) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


__all__ = [
    "Assign", "AutoCommit", "COMPLETING_REBALANCE", "Close", "CommitFailedError", "ERROR_ACTIONS", "GroupError",
    "Generation", "MemberConfig", "Membership", "MetadataUpdate", "NO_GENERATION", "NeedCoordinator", "PREPARING_REBALANCE", "Poll",
    "Raise", "RebalanceInProgressError", "RequestFailed", "RequestMetadata", "Response", "Revoke", "STABLE", "Send",
    "Subscribe", "Tick", "UNJOINED", "Unsubscribe", "UseCoordinator", "error_action",
]
