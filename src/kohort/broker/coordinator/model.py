"""Plain data the coordinator speaks: operation parameters, results (what a response carries),
`__consumer_offsets` records, and the Outcome every entry point returns.

Nothing here knows the wire classes; the broker's handlers map requests to *Params and *Result to
responses. Field names follow Kafka's message fields in snake_case.

Outcome contract (for the runtime):
  * `responses`: send now. `reply_to` is the opaque handle the caller passed in; one operation may
    answer OTHER parked requests (completing a join phase answers every parked JoinGroup).
  * `appends`: for each, append `records` to `__consumer_offsets` in list order, then call
    `on_append_done(token, error_code, now_ms)` (0 = stored) on the machine of `token.namespace`
    and apply its Outcome. Some responses and state changes are held until then (the SyncGroup
    leader's assignment, a new group's metadata, offset commits, deletions). Complete tokens in the
    order they were issued.
  * `timers`: SetTimer(key, deadline_ms, namespace) arms or re-arms `key` (absolute deadline);
    CancelTimer(key, namespace) disarms it. On expiry call `fire_timer(key, now_ms)` on the machine
    whose TIMER_NAMESPACE is `namespace` (one Outcome may carry another machine's timers and appends,
    e.g. an online upgrade releases the classic group inside a consumer-group step). Firing a key
    that was re-armed later or cancelled is harmless (ignored), so the runtime may be lazy about
    cancellations.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union


# -- parameters --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JoinParams:
    group_id: str
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    session_timeout_ms: int = 45000
    rebalance_timeout_ms: int = -1      # -1 (JoinGroup v0): the session timeout is used
    protocol_type: str = "consumer"
    protocols: tuple[tuple[str, bytes], ...] = ()   # (name, metadata) in preference order
    reason: str | None = None
    api_version: int = 9


@dataclass(frozen=True)
class SyncParams:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()  # (member_id, assignment); only the leader's count
    api_version: int = 5


@dataclass(frozen=True)
class HeartbeatParams:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LeaveParams:
    group_id: str
    members: tuple[LeaveMember, ...]   # LeaveGroup v0-2 carry one member_id: pass it as one member


@dataclass(frozen=True)
class CommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = ""


@dataclass(frozen=True)
class OffsetCommitParams:
    group_id: str
    topics: tuple[tuple[str, tuple[CommitPartition, ...]], ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: int = -1          # OffsetCommit v2-v4; -1 = broker retention
    api_version: int = 8


@dataclass(frozen=True)
class TxnOffsetCommitParams:
    """TxnOffsetCommit (KIP-98; member checks of KIP-447 from v3): offsets held pending for the
    producer until its transaction's marker reaches the group's `__consumer_offsets` partition."""
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: tuple[tuple[str, tuple[CommitPartition, ...]], ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True)
class OffsetFetchParams:
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None = None   # None = every committed offset
    require_stable: bool = False


@dataclass(frozen=True)
class OffsetDeleteParams:
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]


# -- results -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error_code: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinMember, ...] = ()


@dataclass(frozen=True)
class SyncResult:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class HeartbeatResult:
    error_code: int


@dataclass(frozen=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True)
class LeaveResult:
    error_code: int
    members: tuple[LeaveMemberResult, ...] = ()


@dataclass(frozen=True)
class PartitionResult:
    partition_index: int
    error_code: int


@dataclass(frozen=True)
class OffsetCommitResult:
    topics: tuple[tuple[str, tuple[PartitionResult, ...]], ...]

    @classmethod
    def failed(cls, topics: tuple[tuple[str, tuple[CommitPartition, ...]], ...], code: int) -> "OffsetCommitResult":
        """A commit's answer with `code` on every partition of `topics`."""
        return cls(tuple((t, tuple(PartitionResult(cp.partition_index, code) for cp in parts)) for t, parts in topics))


@dataclass(frozen=True)
class FetchedPartition:
    partition_index: int
    committed_offset: int = -1
    committed_leader_epoch: int = -1
    metadata: str | None = ""
    error_code: int = 0


@dataclass(frozen=True)
class OffsetFetchResult:
    error_code: int
    topics: tuple[tuple[str, tuple[FetchedPartition, ...]], ...] = ()


@dataclass(frozen=True)
class OffsetDeleteResult:
    error_code: int
    topics: tuple[tuple[str, tuple[PartitionResult, ...]], ...] = ()


@dataclass(frozen=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    error_code: int
    group_id: str
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True)
class DescribeGroupsResult:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str = "classic"


@dataclass(frozen=True)
class ListGroupsResult:
    error_code: int
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True)
class DeleteGroupsResult:
    results: tuple[tuple[str, int], ...]   # (group_id, error_code)


# -- records (what goes to __consumer_offsets) -------------------------------------------------------
@dataclass(frozen=True)
class OffsetRecord:
    """OffsetCommitKey(group, topic, partition) -> OffsetCommitValue, or a tombstone."""
    group: str
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int | None = None
    tombstone: bool = False


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    """GroupMetadataKey(group) -> GroupMetadataValue, or a tombstone."""
    group: str
    protocol_type: str = ""
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: tuple[MemberRecord, ...] = ()
    tombstone: bool = False


@dataclass(frozen=True)
class TxnMarkerRecord:
    """A COMMIT/ABORT marker for `partition` of `__consumer_offsets` (the runtime writes it as a
    control batch of the producer); appended through the coordinator so that it follows, in the log
    and in the order appends complete, every transactional offset commit appended before it."""
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


Record = Union[OffsetRecord, GroupRecord]


# -- outcome -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Response:
    reply_to: Any
    result: Any


@dataclass(frozen=True)
class SetTimer:
    key: tuple
    deadline_ms: int
    # the arming machine's TIMER_NAMESPACE: the runtime fires the key on that machine
    namespace: str = field(default="", compare=False)


@dataclass(frozen=True)
class CancelTimer:
    key: tuple
    namespace: str = field(default="", compare=False)


@dataclass(frozen=True)
class Append:
    token: Any          # kohort.broker.coordinator.machine.AppendToken
    records: tuple[Record, ...]
    # (producer id, epoch): a transactional batch of that producer (TxnOffsetCommit); None: plain
    producer: tuple[int, int] | None = None


@dataclass
class Outcome:
    responses: list[Response] = field(default_factory=list)
    appends: list[Append] = field(default_factory=list)
    timers: list[Union[SetTimer, CancelTimer]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.responses or self.appends or self.timers)

    def extend(self, other: "Outcome") -> None:
        """Add another step's Outcome after this one's (its appends stored after these)."""
        self.responses.extend(other.responses)
        self.appends.extend(other.appends)
        self.timers.extend(other.timers)
