"""What the two group-member machines share: the classic `membership.Membership` and the KIP-848
`membership_848.ConsumerMembership` take the same events and return the same actions, so one driver
(`group.py`) runs either. Pure: no sockets, threads, clocks or asyncio.

* `Generation` (generation id or member epoch, member id, protocol), `MemberConfig`;
* events in (`Subscribe`, `Poll`, `Tick`, `Response`, `RequestFailed`, ...), actions out (`Send`,
  `UseCoordinator`, `Revoke`, `Assign`, `AutoCommit`, `Raise`, ...);
* the commit errors (`CommitFailedError`, `RebalanceInProgressError`) and `GroupError`;
* `MemberMachine`, the base both machines extend: the one entry point (`handle(event, now_ms)`,
  dispatched to `_on_<Event>`), answers dispatched by their tag to `_<kind>_response`, and the
  coordinator lookup (FindCoordinator from the application's poll and from the heartbeat tick,
  Java's AbstractCoordinator / CoordinatorRequestManager). Each machine gives the table that
  classifies coordinator errors (`_error_action`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from kohort.errors import ErrorCode as E, KohortError, for_code
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest

FATAL = "fatal"                # what `_error_action` calls an error that ends the member
REDISCOVER = "rediscover"      # ... and one that means the coordinator moved


class Generation(NamedTuple):
    generation_id: int
    member_id: str
    protocol_name: str | None


NO_GENERATION = Generation(-1, "", None)



class CommitFailedError(KohortError):
    """A commit cannot succeed: the member is not in an active generation (it was kicked out, or its
    generation was reset), so the partitions may belong to others now."""

    retriable = False


class RebalanceInProgressError(CommitFailedError):
    """A commit during a rebalance: call poll() to finish the rebalance, then commit again."""

    retriable = True


class GroupError(KohortError):
    """A fatal group error found by the member itself (an assignor it does not have, ...)."""


# -- events ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Subscribe:
    topics: tuple[str, ...]
    regex: str | None = None      # KIP-848: SubscribedTopicRegex, resolved by the broker (consumer protocol)


@dataclass(frozen=True)
class Unsubscribe:
    pass


@dataclass(frozen=True)
class MetadataUpdate:
    """A metadata view: version (increasing) and partition count of every topic it knows."""
    version: int
    partitions: dict
    topic_ids: dict = field(default_factory=dict)     # name -> topic id (KIP-848 assignments name ids)


@dataclass(frozen=True)
class Poll:
    """The application polled (the only event after which callbacks and joins happen)."""


@dataclass(frozen=True)
class Tick:
    """Time passed (the heartbeat driver): heartbeats, session and poll timeouts, coordinator lookup."""


@dataclass(frozen=True)
class Response:
    """The answer to a `Send` (its `tag` echoed back)."""
    tag: Any
    body: Any


@dataclass(frozen=True)
class RequestFailed:
    """A `Send` got no answer (connection lost, timed out)."""
    tag: Any
    error: str
    unsupported: bool = False     # the broker does not serve that API (version) at all


@dataclass(frozen=True)
class Close:
    """The consumer closes: revoke (callbacks) and leave the group (dynamic members, when `leave`)."""
    leave: bool = True


@dataclass(frozen=True)
class NeedCoordinator:
    """Offsets are to be committed or fetched: look the coordinator up if it is unknown."""


# -- actions -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Send:
    """Send `request` to the coordinator (`to` None: any broker); answer with Response/RequestFailed(tag)."""
    request: Any
    tag: Any
    to: int | None = None
    timeout_ms: int | None = None


@dataclass(frozen=True)
class UseCoordinator:
    """Connection `conn_id` reaches the coordinator at host:port (Java: Integer.MAX_VALUE - node id)."""
    conn_id: int
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class Revoke:
    """Give up `partitions` (callback on_partitions_lost if `lost`, else on_partitions_revoked, after
    committing their positions when `commit`)."""
    partitions: frozenset
    lost: bool
    commit: bool


@dataclass(frozen=True)
class Assign:
    """Take `added` (the new assignment is `assignment`), then run on_partitions_assigned with `added`
    (eager: every partition is new; cooperative: called only when something was added)."""
    added: frozenset
    assignment: frozenset
    cooperative: bool


@dataclass(frozen=True)
class RequestMetadata:
    topics: frozenset


@dataclass(frozen=True)
class AutoCommit:
    pass


@dataclass(frozen=True)
class Raise:
    error: BaseException


# -- configuration -----------------------------------------------------------------------------------
@dataclass
class MemberConfig:
    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 45000
    rebalance_timeout_ms: int = 300000          # max.poll.interval.ms
    heartbeat_interval_ms: int = 3000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30000
    auto_commit_interval_ms: int | None = None  # None: enable.auto.commit=false
    assignors: list = field(default_factory=list)
    rack_id: str | None = None
    remote_assignor: str | None = None          # KIP-848 group.remote.assignor (ServerAssignor)

    @classmethod
    def from_consumer_config(cls, c) -> "MemberConfig":
        from kohort.assignors import get_assignor
        return cls(group_id=c["group.id"], group_instance_id=c["group.instance.id"],
                   session_timeout_ms=c["session.timeout.ms"], rebalance_timeout_ms=c["max.poll.interval.ms"],
                   heartbeat_interval_ms=c["heartbeat.interval.ms"], retry_backoff_ms=c["retry.backoff.ms"],
                   request_timeout_ms=c["request.timeout.ms"],
                   auto_commit_interval_ms=c["auto.commit.interval.ms"] if c["enable.auto.commit"] else None,
                   assignors=[get_assignor(n) for n in c["partition.assignment.strategy"]],
                   rack_id=c["client.rack"] or None, remote_assignor=c["group.remote.assignor"])


# -- the base of both machines -----------------------------------------------------------------------
class MemberMachine:
    """The entry point, response dispatch and coordinator lookup of a group-member machine."""

    # ErrorCode -> action name; FATAL and REDISCOVER are the ones the lookup acts on
    _error_action: Callable[[int], str]

    def __init__(self, config: MemberConfig, now_ms: int = 0):
        self.cfg = config
        self.coordinator: UseCoordinator | None = None
        self._finding = False
        self._find_not_before = 0
        self._hb_inflight = False
        self._fatal: BaseException | None = None
        self._session_deadline = now_ms + config.session_timeout_ms

    # -- the one entry point ---------------------------------------------------------------------------
    def handle(self, event, now_ms: int) -> list:
        out: list = []
        h = getattr(self, "_on_" + type(event).__name__)
        h(event, now_ms, out)
        return out

    def _on_Response(self, ev: Response, now: int, out: list) -> None:
        kind = ev.tag[0]
        getattr(self, "_" + kind.replace("-", "_") + "_response")(ev.body, ev.tag, now, out)

    # -- the coordinator ---------------------------------------------------------------------------------
    def _on_NeedCoordinator(self, ev, now: int, out: list) -> None:
        if self.coordinator is None:
            self._lookup(now, out)

    def _find_response(self, resp, tag, now: int, out: list) -> None:
        self._finding = False
        if getattr(resp, "coordinators", None):
            co = resp.coordinators[0]
            err, node, host, port = co.error_code, co.node_id, co.host, co.port
        else:
            err, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
        if err == E.NONE:
            self.coordinator = UseCoordinator(0x7FFFFFFF - node, node, host, port)
            out.append(self.coordinator)
            self._session_deadline = now + self.cfg.session_timeout_ms   # Java: resetSessionTimeout
            return
        if self._error_action(err) == FATAL:
            self._fatal = for_code(err)(f"FindCoordinator for group {self.cfg.group_id!r}")
        self._find_not_before = now + self.cfg.retry_backoff_ms

    def offset_request_failed(self, code: int, now: int) -> None:
        """OffsetFetch/OffsetCommit found the coordinator gone (code REDISCOVER, or a transport failure: 0)."""
        if code == 0 or self._error_action(code) == REDISCOVER:
            self._mark_coordinator_unknown(f"offsets request: {for_code(code).name if code else 'no answer'}", now)

    def _mark_coordinator_unknown(self, why: str, now: int) -> None:
        if self.coordinator is not None:
            self.coordinator = None
            self._find_not_before = now
        self._hb_inflight = False

    def _lookup(self, now: int, out: list) -> None:
        if self._finding or now < self._find_not_before:
            return
        self._finding = True
        gid = self.cfg.group_id
        out.append(Send(FindCoordinatorRequest(key=gid, key_type=0, coordinator_keys=[gid]), ("find",)))


__all__ = [
    "Assign", "AutoCommit", "Close", "CommitFailedError", "Generation", "GroupError", "MemberConfig",
    "MemberMachine", "MetadataUpdate", "NO_GENERATION", "NeedCoordinator", "Poll", "Raise",
    "RebalanceInProgressError", "RequestFailed", "RequestMetadata", "Response", "Revoke", "Send", "Subscribe",
    "Tick", "Unsubscribe", "UseCoordinator",
]
