"""The pure half of the admin clients, shared by `client.admin.Admin` (threads) and `aio.admin.AIOAdmin`
(asyncio): the result types of topics and groups, the requests they send (CreateTopics, DeleteTopics,
ListGroups, DescribeGroups, DeleteGroups, OffsetCommit as an admin) and what their answers become
(results, or the KafkaError of their ErrorCode). No I/O here: each client sends and awaits on its own.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from kohort.protocol.framing import Versioned
from kohort.errors import ErrorCode, KohortError, for_code
from kohort.protocol.consumer_protocol import decode_assignment
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.delete_groups import DeleteGroupsRequest
from kohort.protocol.messages.delete_topics import DeleteTopicsRequest
from kohort.protocol.messages.describe_groups import DescribeGroupsRequest
from kohort.protocol.messages.list_groups import ListGroupsRequest
from kohort.structs import OffsetAndMetadata, TopicPartition

COORDINATOR_RETRY = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
# OffsetCommit's answers while the group has members: an admin commit is refused
_GROUP_ACTIVE = (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS)


class PartitionInfo(NamedTuple):
    partition: int
    leader: int
    replicas: list
    isr: list
    error_code: int = 0


class TopicDescription(NamedTuple):
    name: str
    partitions: list          # [PartitionInfo]
    is_internal: bool = False
    topic_id: str | None = None


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str
    state: str                # "" when the broker does not report states (ListGroups < v4)
    group_type: str = ""      # "classic" / "consumer" (KIP-848); "" before ListGroups v5


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list          # [TopicPartition] (decoded for protocol type "consumer")


class GroupDescription(NamedTuple):
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list             # [MemberDescription]
    coordinator: int | None


# -- topics --------------------------------------------------------------------------------------------
def topic_descriptions(md, all_topics: bool) -> list[TopicDescription]:
    """A Metadata answer's topics, sorted; internal ones left out when every topic was asked for
    (`all_topics`). A topic's error raises, a missing topic saying so."""
    out = []
    for t in md.topics:
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise for_code(t.error_code)(f"topic {t.name!r} does not exist (see: kohort topics list)")
        if t.error_code:
            raise for_code(t.error_code)(f"topic {t.name!r}")
        if all_topics and t.is_internal:
            continue
        parts = sorted(PartitionInfo(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes),
                                     p.error_code) for p in t.partitions)
        tid = str(t.topic_id) if getattr(t, "topic_id", None) is not None else None
        out.append(TopicDescription(t.name, parts, bool(t.is_internal), tid))
    return sorted(out)


def topic_names(md, include_internal: bool) -> list[str]:
    return sorted(t.name for t in md.topics if not t.error_code and (include_internal or not t.is_internal))


def create_topics_request(topics: Any, num_partitions: int, replication_factor: int, configs: dict | None,
                          validate_only: bool, timeout_ms: int) -> CreateTopicsRequest:
    """`topics`: names, or {name: num_partitions or dict(num_partitions=, replication_factor=, configs=)};
    the other arguments are the defaults of topics that do not say. A bad name or count raises."""
    CT = CreateTopicsRequest.CreatableTopic
    specs = []
    items = topics.items() if isinstance(topics, dict) else ((n, None) for n in topics)
    for name, spec in items:
        spec = {"num_partitions": spec} if isinstance(spec, int) else (spec or {})
        if not isinstance(name, str) or not name:
            raise KohortError(f"topic name must be a non-empty string, got {name!r}")
        n = spec.get("num_partitions", num_partitions)
        if n != -1 and n < 1:
            raise KohortError(f"topic {name!r}: num_partitions must be >= 1, got {n}")
        cf = spec.get("configs", configs) or {}
        specs.append(CT(name=name, num_partitions=n,
                        replication_factor=spec.get("replication_factor", replication_factor), assignments=[],
                        configs=[CT.CreatableTopicConfig(name=k, value=str(v)) for k, v in cf.items()]))
    return CreateTopicsRequest(topics=specs, timeout_ms=timeout_ms, validate_only=validate_only)


def delete_topics_request(names: list[str], timeout_ms: int) -> Versioned:
    """DeleteTopics: topic states from v6, plain names before."""
    def build(v):
        if v >= 6:
            return DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
                                       timeout_ms=timeout_ms)
        return DeleteTopicsRequest(topic_names=names, timeout_ms=timeout_ms)
    return Versioned(DeleteTopicsRequest.API_KEY, build)


def topic_results(results) -> dict[str, Any]:
    """{topic name: None, or the KafkaError of its error code} of CreateTopics/DeleteTopics/
    CreatePartitions results."""
    return {r.name: (for_code(r.error_code)(r.error_message or f"topic {r.name!r}") if r.error_code else None)
            for r in results}


# -- groups --------------------------------------------------------------------------------------------
def list_groups_request(states=(), types=()) -> ListGroupsRequest:
    return ListGroupsRequest(states_filter=list(states), types_filter=list(types))


def read_list_groups(resp, node_id: int, seen: dict[str, GroupListing]) -> None:
    """One broker's ListGroups answer into `seen` ({group id: GroupListing}); an error other than the
    coordinator's loading or moving raises."""
    if resp.error_code and resp.error_code not in COORDINATOR_RETRY:
        raise for_code(resp.error_code)(f"ListGroups on broker {node_id}")
    for g in resp.groups:
        seen[g.group_id] = GroupListing(g.group_id, g.protocol_type or "", g.group_state or "", g.group_type or "")


def describe_groups_request(group: str) -> DescribeGroupsRequest:
    return DescribeGroupsRequest(groups=[group])


def describe_groups_code(resp) -> int:
    return resp.groups[0].error_code if resp.groups else 0


def classic_group_description(d, coordinator: int | None) -> GroupDescription:
    """A DescribeGroups group as GroupDescription: members with their assignments decoded (protocol type
    "consumer"; an assignment that does not decode is empty)."""
    members = []
    for m in d.members:
        assignment = []
        if d.protocol_type == "consumer" and m.member_assignment:
            try:
                a = decode_assignment(m.member_assignment)
                assignment = sorted(TopicPartition(t.topic, p) for t in a.assigned_partitions
                                    for p in t.partitions)
            except KohortError:
                assignment = []
        members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                         assignment))
    return GroupDescription(d.group_id, d.group_state, d.protocol_type, d.protocol_data, sorted(members),
                            coordinator)


def delete_groups_request(group: str) -> DeleteGroupsRequest:
    return DeleteGroupsRequest(groups_names=[group])


def delete_groups_code(resp) -> int:
    return resp.results[0].error_code if resp.results else 0


def delete_groups_result(resp, group: str):
    """None, or the KafkaError of the group's DeleteGroups result."""
    code = delete_groups_code(resp)
    return for_code(code)(f"group {group!r}") if code else None


# -- group offsets -------------------------------------------------------------------------------------
def committed_offsets(got: dict, code: int, group: str) -> dict:
    """`read_offset_fetch`'s (code, {tp: (error, OffsetAndMetadata or None)}) → {tp: OffsetAndMetadata}
    of the partitions with a committed offset; any error raises."""
    if code:
        raise for_code(code)(f"OffsetFetch for group {group!r}")
    out = {}
    for tp, (perr, om) in got.items():
        if perr:
            raise for_code(perr)(f"group {group!r} {tp.topic}[{tp.partition}]")
        if om is not None:
            out[tp] = om
    return out


def admin_commit_offsets(offsets: dict) -> dict:
    """{tp: offset or OffsetAndMetadata} → {tp: offset}; a negative offset raises."""
    plain = {}
    for tp, off in offsets.items():
        o = off.offset if isinstance(off, OffsetAndMetadata) else int(off)
        if o < 0:
            raise KohortError(f"offset for {tp[0]}[{tp[1]}] must be >= 0, got {o}")
        plain[tp] = o
    return plain


def first_partition_code(resp) -> int:
    """The first partition error code of an OffsetCommit answer (0: none)."""
    return next((p.error_code for t in resp.topics for p in t.partitions if p.error_code), 0)


def check_admin_commit(resp, group: str) -> None:
    """An admin OffsetCommit's answer: a group with members refuses it (stop its consumers first)."""
    code = first_partition_code(resp)
    if code in _GROUP_ACTIVE:
        raise for_code(code)(f"group {group!r} has active members; stop its consumers first")
    if code:
        raise for_code(code)(f"OffsetCommit for group {group!r}")


def read_list_offsets_into(answer: dict, out: dict) -> None:
    """`read_list_offsets`'s {tp: (code, offset, ...)} into `out` ({tp: offset}); an error raises."""
    for tp, (code, off, _, _) in answer.items():
        if code:
            raise for_code(code)(f"ListOffsets {tp.topic}[{tp.partition}]")
        out[tp] = off
