"""A KIP-848 (`group.protocol=consumer`) group member as a pure state machine: the same interface as
the classic `membership.Membership` (`handle(event, now_ms) -> actions`, the same events and actions),
driven by the same driver (`group.py`). No sockets, threads, clocks or asyncio here.

Behaviour follows Java's AsyncKafkaConsumer (ConsumerMembershipManager, ConsumerHeartbeatRequestManager),
with Java's MemberState names:

    UNSUBSCRIBED --Poll--> JOINING --heartbeat answer (assignment)--> RECONCILING
        RECONCILING --Poll: Revoke (commit first), Assign--> (callbacks ran: next Poll) ACKNOWLEDGING
        ACKNOWLEDGING --ack heartbeat sent (owned partitions)--> STABLE --new assignment--> RECONCILING
    FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID --> FENCED --Poll: partitions lost--> JOINING (epoch 0, same id)
    max.poll.interval.ms without a poll --> leave (-1, static -2), STALE --Poll: lost--> JOINING
    fatal errors --> FATAL: every later poll raises (and the partitions are reported lost once)

* One RPC, ConsumerGroupHeartbeat (68): epoch 0 joins, -1 leaves, -2 is a static member's temporary
  leave. A join, and the first heartbeat after any error or lost answer, is *full* (every field);
  otherwise a field is sent only when it changed (null = unchanged), and the owned partitions only
  when they changed since they were last sent: that heartbeat is the acknowledgement.
* The member id is the client's own (KIP-1082, v1; `MemberConfig`-independent: passed in), kept for
  the life of the consumer, also after fencing; a v0 broker generates one and the member takes it.
* Heartbeats go out at the interval the broker gives, at once when joining or acknowledging, one at a
  time; NOT_COORDINATOR/COORDINATOR_NOT_AVAILABLE rediscover the coordinator and retry at once.
* Reconciliation runs in the application's Poll (where Java runs the callbacks): the assignment names
  topics by id and only what the metadata resolves is reconciled (a refresh is requested for the
  rest). Revoked partitions first (`Revoke`: commit with auto commit, then on_partitions_revoked),
  then `Assign` (on_partitions_assigned with the added partitions, called even when none were added,
  as Java), and only after the driver has run them (its next Poll) does the ack heartbeat go out, so
  the broker never hands a partition on while this member may still fetch or commit it.
* Commits carry the member epoch (OffsetCommit v9); STALE_MEMBER_EPOCH: a commit made before
  revocation or by auto commit is retried with the newer epoch while the member is in the group,
  a commit by the application fails with CommitFailedError (Java's CommitRequestManager).

Errors: the table `HEARTBEAT_ERROR_ACTIONS` (Kafka's ErrorCode names) as Java's
AbstractHeartbeatRequestManager handles them.
"""
from __future__ import annotations

from kohort.client.consumer.membership import STABLE, error_action as classic_error_action
from kohort.client.consumer.membership_common import (
    NO_GENERATION, Assign, AutoCommit, CommitFailedError, Generation, MemberConfig, MemberMachine, Raise,
    RequestMetadata, Revoke, Send,
)
from kohort.errors import ErrorCode as E, for_code
from kohort.protocol.messages.consumer_group_heartbeat import (
    LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, ConsumerGroupHeartbeatRequest,
)
from kohort.structs import TopicPartition

UNSUBSCRIBED, JOINING, RECONCILING, ACKNOWLEDGING, FENCED, STALE, FATAL_STATE = (
    "UNSUBSCRIBED", "JOINING", "RECONCILING", "ACKNOWLEDGING", "FENCED", "STALE", "FATAL")
CONSUMER_GROUP_HEARTBEAT = ConsumerGroupHeartbeatRequest.API_KEY

# -- the error table --------------------------------------------------------------------------------
OK = "ok"
REDISCOVER = "rediscover"      # coordinator unknown: find it, heartbeat again at once (full)
RETRY = "retry"                # heartbeat again after retry.backoff.ms (full)
FENCE = "fence"                # partitions lost, rejoin with epoch 0 and the same member id
SURFACE = "surface"            # raise from the next poll, stay in the group, retry after the backoff
FATAL = "fatal"                # the member is done: every later poll raises

HEARTBEAT_ERROR_ACTIONS: dict[int, str] = {
    E.NONE: OK,
    E.NOT_COORDINATOR: REDISCOVER,
    E.COORDINATOR_NOT_AVAILABLE: REDISCOVER,
    E.COORDINATOR_LOAD_IN_PROGRESS: RETRY,
    E.FENCED_MEMBER_EPOCH: FENCE,
    E.UNKNOWN_MEMBER_ID: FENCE,
    E.TOPIC_AUTHORIZATION_FAILED: SURFACE,
    E.UNRELEASED_INSTANCE_ID: FATAL,
    E.FENCED_INSTANCE_ID: FATAL,
    E.UNSUPPORTED_ASSIGNOR: FATAL,
    E.GROUP_MAX_SIZE_REACHED: FATAL,
    E.INVALID_REQUEST: FATAL,
    E.INVALID_REGULAR_EXPRESSION: FATAL,
    E.GROUP_AUTHORIZATION_FAILED: FATAL,
    E.UNSUPPORTED_VERSION: FATAL,
    E.GROUP_ID_NOT_FOUND: FATAL,
}


def heartbeat_error_action(code: int) -> str:
    """What a KIP-848 member does about `code` in a ConsumerGroupHeartbeat answer (the table; other
    codes: RETRY when Kafka calls them retriable, else FATAL, as Java)."""
    got = HEARTBEAT_ERROR_ACTIONS.get(code)
    if got is not None:
        return got
    return RETRY if for_code(code).retriable else FATAL


NOT_SUPPORTED = ("the broker does not support group.protocol=consumer (KIP-848: it does not serve "
                 "ConsumerGroupHeartbeat, API 68); use group.protocol=classic, or a broker that has the "
                 "consumer protocol enabled (Apache Kafka 4.0+)")


class ConsumerMembership(MemberMachine):
    """One consumer's membership in a KIP-848 consumer group. See the module docstring.

    Shares with the classic member (`membership_common.MemberMachine`) the event/action types, the
    coordinator lookup and the dispatch; FindCoordinator and offset-request errors are classified by
    the classic member's table, as Java's consumers share that handling."""

    _error_action = staticmethod(classic_error_action)

    def __init__(self, config: MemberConfig, member_id: str, now_ms: int = 0):
        super().__init__(config, now_ms)
        self.state = UNSUBSCRIBED
        self._member_id = member_id
        self.member_epoch = 0
        self.subscription: tuple[str, ...] | None = None
        self.regex: str | None = None
        self.owned: frozenset = frozenset()           # TopicPartitions handed to the application
        self._owned_ids: frozenset = frozenset()      # the same as (topic id, partition), for the broker
        self._before_ids: frozenset = frozenset()     # what was owned before the callbacks now running
        self._target: frozenset | None = None         # (topic id, partition) not yet reconciled
        self._names: dict = {}                        # topic id -> name (metadata)
        self._meta_version = 0
        self._meta_asked = -1                         # metadata version a refresh was requested after
        self._callbacks_pending = False
        self._sent: dict | None = None                # fields the broker has; None: next heartbeat is full
        self._interval_ms = config.heartbeat_interval_ms
        self._next_heartbeat = now_ms
        self._poll_deadline = now_ms + config.rebalance_timeout_ms
        self._next_auto_commit = now_ms + (config.auto_commit_interval_ms or 0)
        self._error_once: BaseException | None = None
        self.is_leader = False
        self.rebalance_count = 0
        self.last_rebalance_reason: str | None = None
        self.last_poll_ms = now_ms
        self.last_heartbeat_ms: int | None = None

    # -- queries -------------------------------------------------------------------------------------
    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation(self) -> Generation:
        """(member epoch, member id): what commits carry (OffsetCommit v9's generation_id_or_member_epoch)."""
        return Generation(self.member_epoch, self._member_id, None)

    @property
    def subscribed(self) -> bool:
        return self.subscription is not None or self.regex is not None

    def in_group(self) -> bool:
        return self.member_epoch > 0 and self.state in (RECONCILING, ACKNOWLEDGING, STABLE)

    def commit_generation(self) -> Generation:
        if not self.subscribed:
            return NO_GENERATION
        if self.in_group():
            return self.generation
        raise CommitFailedError(
            f"offset commit cannot be completed: this consumer is not a member of group {self.cfg.group_id!r} "
            f"right now (state {self.state}, member epoch {self.member_epoch}); its partitions may belong to other "
            f"members. The next poll() rejoins the group")

    def next_deadline(self) -> int | None:
        if not self.subscribed or self.state in (UNSUBSCRIBED, FATAL_STATE, FENCED, STALE):
            return None
        if self.coordinator is None:
            return None if self._finding else self._find_not_before
        ds = []
        if self.in_group():
            ds.append(self._poll_deadline)
        if not self._hb_inflight:
            ds.append(self._next_heartbeat)
        return min(ds) if ds else None

    # -- application events --------------------------------------------------------------------------
    def _on_Subscribe(self, ev, now: int, out: list) -> None:
        regex = getattr(ev, "regex", None)
        was = self.subscribed
        if regex is not None:
            self.regex, self.subscription = regex, None
        else:
            self.subscription, self.regex = tuple(sorted(set(ev.topics))), None
        if not was:
            self._poll_deadline = now + self.cfg.rebalance_timeout_ms
        elif self.state not in (UNSUBSCRIBED, JOINING):
            self._next_heartbeat = now          # Java: the changed subscription goes out at once

    def _on_Unsubscribe(self, ev, now: int, out: list) -> None:
        if self.subscribed:
            self._leave(out, lost=self.state in (FENCED, STALE, FATAL_STATE), epoch=self._leave_epoch(),
                        reason="unsubscribe")
        self.subscription = self.regex = None

    def _on_Close(self, ev, now: int, out: list) -> None:
        if self.subscribed:
            static = self.cfg.group_instance_id is not None
            epoch = self._leave_epoch() if (ev.leave or static) else None
            self._leave(out, lost=self.state in (FENCED, STALE, FATAL_STATE), epoch=epoch, reason="close")
        self.subscription = self.regex = None

    def _leave_epoch(self) -> int:
        return LEAVE_GROUP_STATIC_MEMBER_EPOCH if self.cfg.group_instance_id is not None else LEAVE_GROUP_MEMBER_EPOCH

    def _leave(self, out: list, lost: bool, epoch: int | None, reason: str) -> None:
        """Give up the partitions (callbacks) and send the leave heartbeat (epoch -1/-2) when joined."""
        if self.owned:
            out.append(Revoke(self.owned, lost=lost, commit=False))
        if epoch is not None and self.coordinator is not None and self.state not in (UNSUBSCRIBED, FATAL_STATE):
            out.append(Send(ConsumerGroupHeartbeatRequest(
                group_id=self.cfg.group_id, member_id=self._member_id, member_epoch=epoch,
                instance_id=self.cfg.group_instance_id), ("leave", reason), to=self.coordinator.conn_id))
        self._reset(UNSUBSCRIBED)

    def _reset(self, state: str) -> None:
        self.state = state
        self.member_epoch = 0
        self.owned = self._owned_ids = self._before_ids = frozenset()
        self._target = None
        self._callbacks_pending = False
        self._sent = None

    def _on_MetadataUpdate(self, ev, now: int, out: list) -> None:
        if ev.version <= self._meta_version:
            return
        self._meta_version = ev.version
        self._names = {tid: name for name, tid in getattr(ev, "topic_ids", {}).items() if tid is not None}

    def _on_Poll(self, ev, now: int, out: list) -> None:
        self.last_poll_ms = now
        self._poll_deadline = now + self.cfg.rebalance_timeout_ms
        if self.state == FATAL_STATE:
            if self.owned:
                out.append(Revoke(self.owned, lost=True, commit=False))
                self.owned = self._owned_ids = frozenset()
            out.append(Raise(self._fatal))
            return
        if self._error_once is not None:
            err, self._error_once = self._error_once, None
            out.append(Raise(err))
            return
        if not self.subscribed:
            return
        if self.state in (FENCED, STALE):
            if self.owned:
                out.append(Revoke(self.owned, lost=True, commit=False))     # Java: onPartitionsLost
                self.owned = self._owned_ids = frozenset()
                return                           # the driver runs it and polls again: then rejoin
            self._reset(UNSUBSCRIBED)
        if self._callbacks_pending:
            # the driver ran the Revoke/Assign of the last poll: acknowledge now
            self._callbacks_pending = False
            if self._sent is not None:
                self._sent["owned"] = None         # always acknowledged, even if it looks unchanged
            self.rebalance_count += 1
            if self.state == RECONCILING and self._target is None:
                self.state = ACKNOWLEDGING
            self._next_heartbeat = now
        if self.state == UNSUBSCRIBED:
            self._reset(JOINING)
            self.last_rebalance_reason = "joining"
            self._next_heartbeat = now
        if self.coordinator is None:
            self._lookup(now, out)
            return
        if self.state == RECONCILING and self._target is not None and not self._callbacks_pending:
            self._reconcile(now, out)
        if not self._hb_inflight and now >= self._next_heartbeat and not self._callbacks_pending:
            self._heartbeat(now, out)       # (with callbacks to run, the ack goes out on the next poll)
        if self.in_group() and self.cfg.auto_commit_interval_ms is not None and now >= self._next_auto_commit:
            self._next_auto_commit = now + self.cfg.auto_commit_interval_ms
            out.append(AutoCommit())

    def _reconcile(self, now: int, out: list) -> None:
        target = self._target
        resolved = frozenset(x for x in target if x[0] in self._names)
        unresolved = target - resolved
        if unresolved and self._meta_asked < self._meta_version:
            self._meta_asked = self._meta_version
            out.append(RequestMetadata(frozenset()))      # a refresh: the topic ids become names
        if resolved == self._owned_ids:
            if not unresolved:
                self._target = None
                self.state = ACKNOWLEDGING                 # same partitions, new epoch: acknowledge it
                self._next_heartbeat = now
            return
        new = frozenset(TopicPartition(self._names[tid], p) for tid, p in resolved)
        revoked, added = self.owned - new, new - self.owned
        if revoked:
            out.append(Revoke(revoked, lost=False, commit=self.cfg.auto_commit_interval_ms is not None))
        out.append(Assign(added, new, False))      # on_partitions_assigned even when nothing was added
        self._before_ids = self._owned_ids
        self.owned, self._owned_ids = new, resolved
        self.last_rebalance_reason = f"assignment at epoch {self.member_epoch}"
        if not unresolved:
            self._target = None
        self._callbacks_pending = True
        self._next_auto_commit = now + (self.cfg.auto_commit_interval_ms or 0)

    def _on_Tick(self, ev, now: int, out: list) -> None:
        if not self.subscribed or self.state in (UNSUBSCRIBED, FATAL_STATE, FENCED, STALE):
            return
        if self.coordinator is None:
            self._lookup(now, out)
            return
        if self.in_group() and now >= self._poll_deadline:
            # Java: leave (the partitions are reported lost by the next poll), STALE until then
            reason = "consumer poll timeout has expired (max.poll.interval.ms)"
            out.append(Send(ConsumerGroupHeartbeatRequest(
                group_id=self.cfg.group_id, member_id=self._member_id, member_epoch=self._leave_epoch(),
                instance_id=self.cfg.group_instance_id), ("leave", reason), to=self.coordinator.conn_id))
            self.state = STALE
            self.member_epoch = 0
            self._target = None
            self._sent = None
            self.last_rebalance_reason = reason
            return
        if not self._hb_inflight and now >= self._next_heartbeat:
            self._heartbeat(now, out)

    # -- the heartbeat -------------------------------------------------------------------------------
    def _heartbeat(self, now: int, out: list) -> None:
        sent = self._sent
        full = sent is None or self.state == JOINING
        names = list(self.subscription) if self.subscription is not None else None
        regex = self.regex if self.regex is not None else ("" if sent and sent.get("regex") else None)
        # while the callbacks run, the broker is told only what was owned before them
        owned = None if self._callbacks_pending else self._owned_ids
        req = ConsumerGroupHeartbeatRequest(group_id=self.cfg.group_id, member_id=self._member_id,
                                            member_epoch=self.member_epoch, instance_id=self.cfg.group_instance_id)
        now_sent = {"names": names, "regex": regex, "owned": owned if owned is not None else
                    (sent or {}).get("owned"), "assignor": self.cfg.remote_assignor}
        if full:
            owned = self._before_ids if owned is None else owned
            now_sent["owned"] = owned
            req.rack_id = self.cfg.rack_id
            req.rebalance_timeout_ms = self.cfg.rebalance_timeout_ms
            req.subscribed_topic_names = names if names is not None else ([] if regex is None else None)
            req.subscribed_topic_regex = regex
            req.server_assignor = self.cfg.remote_assignor
        else:
            if names != sent["names"]:
                req.subscribed_topic_names = names if names is not None else []
            if regex != sent["regex"]:
                req.subscribed_topic_regex = regex
        if full or (owned is not None and owned != sent["owned"]):
            req.topic_partitions = [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=tid, partitions=ps)
                                    for tid, ps in _by_topic(owned).items()]
        if self.state == ACKNOWLEDGING and not self._callbacks_pending:
            self.state = STABLE if self._target is None else RECONCILING      # Java: on sending the ack
        self._sent = now_sent
        self._hb_inflight = True
        self._next_heartbeat = now + self._interval_ms
        out.append(Send(req, ("heartbeat848", self.member_epoch), to=self.coordinator.conn_id))

    def _heartbeat848_response(self, resp, tag, now: int, out: list) -> None:
        self._hb_inflight = False
        err = resp.error_code
        act = heartbeat_error_action(err)
        if self.state in (UNSUBSCRIBED, FATAL_STATE, FENCED, STALE) or not self.subscribed:
            return          # an answer from before leaving or being fenced
        if act == OK:
            if resp.member_id:
                self._member_id = resp.member_id            # v0: the broker's id
            self.member_epoch = resp.member_epoch
            if resp.heartbeat_interval_ms > 0:
                self._interval_ms = resp.heartbeat_interval_ms
            self._next_heartbeat = now + self._interval_ms
            self.last_heartbeat_ms = now
            if resp.assignment is not None:
                if self._sent is not None:
                    self._sent["owned"] = None     # the broker's view moved: the next ack lists them all
                self._target = frozenset((tp.topic_id, p) for tp in resp.assignment.topic_partitions
                                         for p in tp.partitions)
                self.state = RECONCILING
            elif self.state == JOINING:
                self.state = STABLE
            return
        self._sent = None                 # Java: after an error the next heartbeat is full
        name = for_code(err).name
        msg = f"ConsumerGroupHeartbeat of group {self.cfg.group_id!r}: {name}"
        if resp.error_message:
            msg += f" ({resp.error_message})"
        if act == REDISCOVER:
            self._mark_coordinator_unknown(msg, now)
            self._next_heartbeat = now
        elif act == FENCE:
            self._fenced(msg, now)
        elif act == SURFACE:
            self._error_once = for_code(err)(msg)
            self._next_heartbeat = now + self.cfg.retry_backoff_ms
        elif act == FATAL:
            if err == E.UNSUPPORTED_VERSION:
                msg = f"{msg}: {NOT_SUPPORTED}"
            elif err == E.UNRELEASED_INSTANCE_ID:
                msg += (f": group.instance.id {self.cfg.group_instance_id!r} is still held by another member "
                        f"(it has not left with epoch -2, or its session has not expired)")
            self._go_fatal(for_code(err)(msg))
        else:
            self._next_heartbeat = now + self.cfg.retry_backoff_ms

    def _fenced(self, why: str, now: int) -> None:
        """Java's transitionToFenced: the partitions are lost (reported by the next poll), then rejoin
        with epoch 0 and the same member id."""
        self.state = FENCED
        self.member_epoch = 0
        self._target = None
        self._callbacks_pending = False
        self._sent = None
        self.last_rebalance_reason = why
        if not self.owned:
            self._reset(JOINING)
            self._next_heartbeat = now

    def _find_response(self, resp, tag, now: int, out: list) -> None:
        super()._find_response(resp, tag, now, out)
        if self._fatal is not None and self.state != FATAL_STATE:    # e.g. GROUP_AUTHORIZATION_FAILED
            self._go_fatal(self._fatal)

    def _leave_response(self, resp, tag, now: int, out: list) -> None:
        pass                            # the member reset when it sent the leave

    def take_fatal(self) -> BaseException | None:
        return self._fatal              # FATAL: it stays, every poll raises it

    def _go_fatal(self, err: BaseException) -> None:
        self.state = FATAL_STATE
        self._fatal = err
        self.member_epoch = 0
        self._target = None

    def _on_RequestFailed(self, ev, now: int, out: list) -> None:
        kind = ev.tag[0]
        if kind == "find":
            self._finding = False
            self._find_not_before = now + self.cfg.retry_backoff_ms
            return
        if kind != "heartbeat848":
            return                        # a leave that got no answer: the session expires it
        self._hb_inflight = False
        if getattr(ev, "unsupported", False):
            self._go_fatal(for_code(E.UNSUPPORTED_VERSION)(NOT_SUPPORTED))
            return
        self._mark_coordinator_unknown(f"heartbeat failed: {ev.error}", now)
        self._sent = None
        self._next_heartbeat = now + self.cfg.retry_backoff_ms

    # -- offsets ---------------------------------------------------------------------------------------
    def commit_failed(self, code: int, sent: Generation, now: int) -> tuple[str, BaseException | None]:
        """An OffsetCommit made with `sent` (member epoch, id) answered `code`: ('ok'|'retry'|'stale'|'raise',
        error). 'stale' (STALE_MEMBER_EPOCH): the driver may retry with `generation` when the member
        is still in the group under a newer epoch (commits before revocation, auto commit)."""
        if code == E.NONE:
            return "ok", None
        name = for_code(code).name
        if code in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT):
            self._mark_coordinator_unknown(f"OffsetCommit: {name}", now)
            return "retry", for_code(code)("OffsetCommit")
        if code in (E.COORDINATOR_LOAD_IN_PROGRESS, E.UNKNOWN_TOPIC_OR_PARTITION):
            return "retry", for_code(code)("OffsetCommit")
        if code in (E.STALE_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID):
            verdict = "stale" if code == E.STALE_MEMBER_EPOCH and self.in_group() \
                and self.member_epoch != sent.generation_id else "raise"
            return verdict, CommitFailedError(
                f"commit failed with {name}: it was made with member epoch {sent.generation_id} of group "
                f"{self.cfg.group_id!r}, which the group no longer accepts (it rebalanced, or this member was "
                f"fenced); these partitions may now belong to other members")
        return "raise", for_code(code)(f"OffsetCommit of group {self.cfg.group_id!r}")


def _by_topic(tps) -> dict:
    out: dict = {}
    for t, p in sorted(tps, key=lambda x: (str(x[0]), x[1])):
        out.setdefault(t, []).append(p)
    return out


__all__ = [
    "ACKNOWLEDGING", "CONSUMER_GROUP_HEARTBEAT", "ConsumerMembership", "FATAL_STATE", "FENCED",
    "HEARTBEAT_ERROR_ACTIONS", "JOINING", "NOT_SUPPORTED", "RECONCILING", "STABLE", "STALE", "UNSUBSCRIBED",
    "heartbeat_error_action",
]
