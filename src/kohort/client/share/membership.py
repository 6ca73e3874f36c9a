"""The share-group member (KIP-932) as a pure state machine, beside the classic and KIP-848 members:
`handle(event, now_ms) -> actions`. No sockets, threads, clocks or asyncio here.

Behaviour follows Java's ShareMembershipManager / ShareHeartbeatRequestManager (Kafka 4.3):

    UNSUBSCRIBED --Subscribe--> JOINING --heartbeat answer--> STABLE --Close--> LEAVING --answer--> UNSUBSCRIBED
    FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID --> JOINING again at once (epoch 0, the same member id;
        the assignment is dropped until the answer)
    fatal errors --> FATAL: the error is raised from the next poll and every later one

* One RPC, ShareGroupHeartbeat (76) v1: epoch 0 joins (with the subscribed topic names), -1 leaves.
  The member id is the client's own, made once and kept for the member's life, also after fencing.
  A join, and the first heartbeat after an error or a lost answer, sends the subscription and rack;
  otherwise they are sent only when they changed (null = unchanged).
* Heartbeats go out at the interval the coordinator gives, one at a time; the member jumps to the
  assignment it is sent (share groups have no revocation: partitions may be shared, the leader hands
  out each record to one member). `AssignmentChanged` tells the driver (by topic id).
* The coordinator is looked up by the driver (`LookupCoordinator` action, `CoordinatorFound`/
  `CoordinatorLost` events); NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE look it up again and
  heartbeat at once when found; COORDINATOR_LOAD_IN_PROGRESS and a lost answer retry after the backoff.

Errors: the table `HEARTBEAT_ERROR_ACTIONS` (Kafka's ErrorCode names).
"""
from __future__ import annotations

import uuid as _uuid
from dataclasses import dataclass
from typing import Any

from kohort.client.consumer.membership import Raise, RequestFailed, Response, Send
from kohort.client.consumer.membership_848 import FATAL, FENCE, OK, REDISCOVER, RETRY, SURFACE
from kohort.errors import ErrorCode as E, for_code
from kohort.protocol.share_state_records import kafka_uuid_str
from kohort.protocol.messages.share_group_heartbeat import (
    JOIN_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, ShareGroupHeartbeatRequest,
)

UNSUBSCRIBED, JOINING, STABLE, LEAVING, FATAL_STATE = "UNSUBSCRIBED", "JOINING", "STABLE", "LEAVING", "FATAL"
SHARE_GROUP_HEARTBEAT = 76

# The actions of the KIP-848 member's table (membership_848): for a share member FENCE drops the
# assignment (share groups revoke nothing) before rejoining with epoch 0 and the same member id.
HEARTBEAT_ERROR_ACTIONS: dict[int, str] = {
    E.NONE: OK,
    E.NOT_COORDINATOR: REDISCOVER,
    E.COORDINATOR_NOT_AVAILABLE: REDISCOVER,
    E.COORDINATOR_LOAD_IN_PROGRESS: RETRY,
    E.FENCED_MEMBER_EPOCH: FENCE,
    E.UNKNOWN_MEMBER_ID: FENCE,
    E.TOPIC_AUTHORIZATION_FAILED: SURFACE,
    E.GROUP_AUTHORIZATION_FAILED: FATAL,
    E.GROUP_MAX_SIZE_REACHED: FATAL,
    E.INVALID_REQUEST: FATAL,
    E.UNSUPPORTED_VERSION: FATAL,
    E.GROUP_ID_NOT_FOUND: FATAL,
}


# -- events --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class Tick:
    """Time passed: heartbeat when due."""


@dataclass(frozen=True)
class CoordinatorFound:
    node_id: int


@dataclass(frozen=True)
class CoordinatorLost:
    pass


@dataclass(frozen=True)
class Close:
    pass


@dataclass(frozen=True)
class Poll:
    """The application polls: a pending surfaced or fatal error is raised here."""


# -- actions (Send and Raise are the other members', as are the Response and RequestFailed events) -------
@dataclass(frozen=True)
class LookupCoordinator:
    """Find the group coordinator (FindCoordinator key type 0) and report CoordinatorFound."""


@dataclass(frozen=True)
class AssignmentChanged:
    """The member's assignment, by topic id (the driver resolves names and moves its share sessions)."""
    assignment: dict


@dataclass(frozen=True)
class Left:
    """The leave heartbeat was answered (or could not be sent): closing may go on."""


@dataclass
class ShareMemberConfig:
    group_id: str
    rack_id: str | None = None
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30000


class ShareMembership:
    def __init__(self, config: ShareMemberConfig, member_id: str | None = None):
        if not config.group_id:
            raise ValueError("a share consumer needs a group.id")
        self.config = config
        self.member_id = member_id or new_member_id()
        self.state = UNSUBSCRIBED
        self.member_epoch = 0
        self.topics: tuple[str, ...] = ()
        self.assignment: dict = {}
        self.coordinator: int | None = None
        self.heartbeat_interval_ms = 0
        self.next_heartbeat_ms: int | None = None
        self.inflight: Any = None            # tag of the heartbeat in flight
        self.full = True                     # the next heartbeat sends every field
        self.sent_topics: tuple[str, ...] | None = None
        self.pending_error: BaseException | None = None
        self.fatal: BaseException | None = None
        self._seq = 0
        self._looking = False

    # -- the one entry point ---------------------------------------------------------------------------
    def handle(self, event, now_ms: int) -> list:
        out: list = []
        if isinstance(event, Subscribe):
            self._subscribe(event, now_ms, out)
        elif isinstance(event, Tick):
            pass
        elif isinstance(event, CoordinatorFound):
            self._looking = False
            self.coordinator = event.node_id
            if self.state in (JOINING, STABLE):
                self.next_heartbeat_ms = now_ms
        elif isinstance(event, CoordinatorLost):
            self._lose_coordinator(out)
        elif isinstance(event, Response):
            self._response(event, now_ms, out)
        elif isinstance(event, RequestFailed):
            self._failed(event, now_ms, out)
        elif isinstance(event, Close):
            self._close(now_ms, out)
        elif isinstance(event, Poll):
            if self.fatal is not None:
                out.append(Raise(self.fatal))
            elif self.pending_error is not None:
                out.append(Raise(self.pending_error))
                self.pending_error = None
        else:
            raise TypeError(f"unknown event {event!r}")
        self._maybe_heartbeat(now_ms, out)
        return out

    def next_deadline_ms(self) -> int | None:
        """When `Tick` should come next (the driver's timer)."""
        if self.inflight is not None or self.state not in (JOINING, STABLE):
            return None
        return self.next_heartbeat_ms

    # -- transitions ---------------------------------------------------------------------------------------
    def _subscribe(self, ev: Subscribe, now: int, out: list) -> None:
        if self.state == FATAL_STATE:
            return
        topics = tuple(sorted(set(ev.topics)))
        if not topics:
            raise ValueError("a share consumer subscribes to at least one topic")
        self.topics = topics
        if self.state in (UNSUBSCRIBED, LEAVING):
            self.state = JOINING
            self.member_epoch = JOIN_GROUP_MEMBER_EPOCH
            self.full = True
        self.next_heartbeat_ms = now

    def _maybe_heartbeat(self, now: int, out: list) -> None:
        if self.state not in (JOINING, STABLE) or self.inflight is not None:
            return
        if self.coordinator is None:
            if not self._looking:
                self._looking = True
                out.append(LookupCoordinator())
            return
        if self.next_heartbeat_ms is None or now < self.next_heartbeat_ms:
            return
        send_topics = self.full or self.member_epoch == JOIN_GROUP_MEMBER_EPOCH or self.topics != self.sent_topics
        req = ShareGroupHeartbeatRequest(
            group_id=self.config.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
            rack_id=self.config.rack_id if self.full else None,
            subscribed_topic_names=list(self.topics) if send_topics else None)
        self._seq += 1
        tag = ("share-heartbeat", self._seq, send_topics)
        self.inflight = tag
        out.append(Send(req, tag, to=self.coordinator, timeout_ms=self.config.request_timeout_ms))

    def _response(self, ev: Response, now: int, out: list) -> None:
        if ev.tag != self.inflight:
            return                               # an answer to a heartbeat already given up on
        self.inflight = None
        resp = ev.body
        if self.state == LEAVING:
            self._left(out)
            return
        action = HEARTBEAT_ERROR_ACTIONS.get(resp.error_code, FATAL)
        if action == OK:
            if ev.tag[2]:
                self.sent_topics = self.topics
            self.full = False
            self.member_epoch = resp.member_epoch
            self.heartbeat_interval_ms = resp.heartbeat_interval_ms
            self.state = STABLE
            if resp.assignment is not None:
                new = {tp.topic_id: frozenset(tp.partitions) for tp in resp.assignment.topic_partitions
                       if tp.partitions}
                if new != self.assignment:
                    self.assignment = new
                    out.append(AssignmentChanged(dict(new)))
            self.next_heartbeat_ms = now + self.heartbeat_interval_ms
            return
        err = for_code(resp.error_code)(resp.error_message or f"ShareGroupHeartbeat: error {resp.error_code}")
        if action == REDISCOVER:
            self.full = True
            self._lose_coordinator(out)
            self.next_heartbeat_ms = now
        elif action == RETRY:
            self.full = True
            self.next_heartbeat_ms = now + self.config.retry_backoff_ms
        elif action == FENCE:
            self.member_epoch = JOIN_GROUP_MEMBER_EPOCH
            self.state = JOINING
            self.full = True
            self.next_heartbeat_ms = now
            if self.assignment:
                self.assignment = {}
                out.append(AssignmentChanged({}))
        elif action == SURFACE:
            self.pending_error = err
            self.full = True
            self.next_heartbeat_ms = now + self.config.retry_backoff_ms
        else:
            self.fatal = err
            self.state = FATAL_STATE
            if self.assignment:
                self.assignment = {}
                out.append(AssignmentChanged({}))

    def _failed(self, ev: RequestFailed, now: int, out: list) -> None:
        if ev.tag != self.inflight:
            return
        self.inflight = None
        if self.state == LEAVING:
            self._left(out)
            return
        if ev.unsupported:
            self.fatal = for_code(E.UNSUPPORTED_VERSION)("the broker does not serve ShareGroupHeartbeat v1")
            self.state = FATAL_STATE
            return
        self.full = True
        self._lose_coordinator(out)
        self.next_heartbeat_ms = now + self.config.retry_backoff_ms

    def _lose_coordinator(self, out: list) -> None:
        self.coordinator = None
        self._looking = False

    def _close(self, now: int, out: list) -> None:
        if self.state in (JOINING, STABLE) and self.member_epoch > 0 and self.coordinator is not None:
            self.state = LEAVING
            if self.assignment:
                self.assignment = {}
                out.append(AssignmentChanged({}))
            req = ShareGroupHeartbeatRequest(group_id=self.config.group_id, member_id=self.member_id,
                                             member_epoch=LEAVE_GROUP_MEMBER_EPOCH)
            self._seq += 1
            tag = ("share-heartbeat", self._seq, False)
            self.inflight = tag
            out.append(Send(req, tag, to=self.coordinator, timeout_ms=self.config.request_timeout_ms))
            return
        self.state = UNSUBSCRIBED if self.state != FATAL_STATE else FATAL_STATE
        self.inflight = None
        self._left(out)

    def _left(self, out: list) -> None:
        if self.state == LEAVING:
            self.state = UNSUBSCRIBED
        self.member_epoch = 0
        if self.assignment:
            self.assignment = {}
            out.append(AssignmentChanged({}))
        out.append(Left())


def new_member_id() -> str:
    """A member id as Java's share consumer makes one: a random Uuid in Kafka's base64 form (22 chars)."""
    return kafka_uuid_str(_uuid.uuid4())
