"""AIOAdmin: topics (create, delete, list, describe), groups (list, describe, delete) and offsets
(a group's committed offsets, altering them, partition offsets by time) as coroutines on the loop.
The answers are the threaded `client.admin.Admin`'s result types; CreateTopics/DeleteTopics go to the
controller, group requests to the group's coordinator (retried while it moves or loads).
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kohort.aio.client import AIOClient, ClientSettings
from kohort.client import requests as R
from kohort.client.admin import GroupDescription, GroupListing, MemberDescription, PartitionInfo, TopicDescription
from kohort.client.consumer.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OFFSETS_BY_NAME_MAX_VERSION
from kohort.client.network import Versioned
from kohort.errors import ErrorCode, KafkaError, KohortError, for_code
from kohort.protocol.consumer_protocol import decode_assignment
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.delete_groups import DeleteGroupsRequest
from kohort.protocol.messages.delete_topics import DeleteTopicsRequest
from kohort.protocol.messages.describe_groups import DescribeGroupsRequest
from kohort.protocol.messages.list_groups import ListGroupsRequest
from kohort.structs import OffsetAndMetadata, TopicPartition

_COORDINATOR_RETRY = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
EARLIEST, LATEST = EARLIEST_TIMESTAMP, LATEST_TIMESTAMP


class AIOAdmin:
    """See the module docstring. `async with AIOAdmin(bootstrap_servers=...) as admin:`."""

    def __init__(self, bootstrap_servers="localhost:9092", *, timeout_ms: int = 60000, **conn):
        self.settings = ClientSettings.make(bootstrap_servers, **conn)
        self.timeout_ms = timeout_ms
        self.client: AIOClient | None = None

    async def start(self) -> None:
        if self.client is None:
            self.client = AIOClient(self.settings)
            await self.client.connection(None)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    async def __aenter__(self) -> "AIOAdmin":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _c(self) -> AIOClient:
        if self.client is None:
            raise KohortError("the admin client is not started: await start() first")
        return self.client

    async def _metadata(self, topics=None):
        return await self._c().request(None, R.metadata_request(topics))

    async def _controller(self) -> int | None:
        md = await self._metadata([])
        for b in md.brokers:
            self._c().set_node_address(b.node_id, b.host, b.port)
        cid = md.controller_id
        return cid if cid is not None and cid >= 0 and any(b.node_id == cid for b in md.brokers) else None

    async def _group_call(self, group: str, request, check, max_version: int | None = None):
        c = self._c()
        for _ in range(100):
            node = await c.find_coordinator(group)
            resp = await c.request(node, request, max_version=max_version)
            if check(resp) in _COORDINATOR_RETRY:
                await asyncio.sleep(0.1)
                continue
            return resp
        raise for_code(check(resp))(f"group {group!r}")

    # -- topics ----------------------------------------------------------------------------------------
    async def list_topics(self, include_internal: bool = False) -> list[str]:
        md = await self._metadata(None)
        return sorted(t.name for t in md.topics if not t.error_code and (include_internal or not t.is_internal))

    async def describe_topics(self, topics: Iterable[str] | None = None) -> list[TopicDescription]:
        md = await self._metadata(None if topics is None else list(topics))
        out = []
        for t in md.topics:
            if t.error_code:
                raise for_code(t.error_code)(f"topic {t.name!r}")
            if topics is None and t.is_internal:
                continue
            parts = sorted(PartitionInfo(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes),
                                         p.error_code) for p in t.partitions)
            tid = str(t.topic_id) if getattr(t, "topic_id", None) is not None else None
            out.append(TopicDescription(t.name, parts, bool(t.is_internal), tid))
        return sorted(out)

    async def create_topics(self, topics: Iterable[str] | dict[str, int | dict[str, Any]], num_partitions: int = 1,
                            replication_factor: int = -1, configs: dict[str, Any] | None = None,
                            validate_only: bool = False) -> dict[str, KafkaError | None]:
        """`topics`: names, or {name: partitions or dict(num_partitions=, replication_factor=, configs=)}.
        -> {name: None or its KafkaError}."""
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
            specs.append(CT(name=name, num_partitions=n, replication_factor=spec.get("replication_factor",
                                                                                   replication_factor),
                            assignments=[], configs=[CT.CreatableTopicConfig(name=k, value=str(v))
                                                     for k, v in cf.items()]))
        resp = await self._c().request(await self._controller(), CreateTopicsRequest(
            topics=specs, timeout_ms=self.timeout_ms, validate_only=validate_only))
        return {r.name: (for_code(r.error_code)(r.error_message or f"topic {r.name!r}") if r.error_code else None)
                for r in resp.topics}

    async def delete_topics(self, topics: Iterable[str]) -> dict[str, KafkaError | None]:
        names = list(topics)
        t = self.timeout_ms

        def build(v):
            if v >= 6:
                return DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
                                           timeout_ms=t)
            return DeleteTopicsRequest(topic_names=names, timeout_ms=t)
        resp = await self._c().request(await self._controller(), Versioned(DeleteTopicsRequest.API_KEY, build))
        return {r.name: (for_code(r.error_code)(f"topic {r.name!r}") if r.error_code else None)
                for r in resp.responses}

    # -- groups ----------------------------------------------------------------------------------------
    async def list_groups(self) -> list[GroupListing]:
        md = await self._metadata([])
        seen = {}
        for b in md.brokers:
            self._c().set_node_address(b.node_id, b.host, b.port)
            resp = await self._c().request(b.node_id, ListGroupsRequest(states_filter=[], types_filter=[]))
            if resp.error_code and resp.error_code not in _COORDINATOR_RETRY:
                raise for_code(resp.error_code)(f"ListGroups on broker {b.node_id}")
            for g in resp.groups:
                seen[g.group_id] = GroupListing(g.group_id, g.protocol_type or "", g.group_state or "",
                                                g.group_type or "")
        return sorted(seen.values())

    async def describe_groups(self, groups) -> list[GroupDescription]:
        """Classic groups as DescribeGroups answers them (members with decoded assignments)."""
        out = []
        for g in groups:
            resp = await self._group_call(g, DescribeGroupsRequest(groups=[g]),
                                          lambda r: r.groups[0].error_code if r.groups else 0)
            d = resp.groups[0]
            if d.error_code:
                raise for_code(d.error_code)(f"group {g!r}")
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
            out.append(GroupDescription(d.group_id, d.group_state, d.protocol_type, d.protocol_data,
                                        sorted(members), None))
        return out

    async def delete_groups(self, groups) -> dict:
        out = {}
        for g in groups:
            resp = await self._group_call(g, DeleteGroupsRequest(groups_names=[g]),
                                          lambda r: r.results[0].error_code if r.results else 0)
            code = resp.results[0].error_code if resp.results else 0
            out[g] = for_code(code)(f"group {g!r}") if code else None
        return out

    # -- offsets ---------------------------------------------------------------------------------------
    async def list_group_offsets(self, group: str, partitions=None) -> dict:
        """{TopicPartition: OffsetAndMetadata} committed by `group` (every partition when None)."""
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        resp = await self._group_call(group, R.offset_fetch(group, tps, require_stable=False),
                                      lambda r: R.read_offset_fetch(r)[0])
        code, got = R.read_offset_fetch(resp)
        if code:
            raise for_code(code)(f"OffsetFetch for group {group!r}")
        out = {}
        for tp, (perr, om) in got.items():
            if perr:
                raise for_code(perr)(f"group {group!r} {tp.topic}[{tp.partition}]")
            if om is not None:
                out[tp] = om
        return out

    async def alter_group_offsets(self, group: str, offsets: dict) -> None:
        """Commit {tp: offset} for a group without members (generation -1, as kafka-consumer-groups does)."""
        plain = {}
        for tp, off in offsets.items():
            o = off.offset if isinstance(off, OffsetAndMetadata) else int(off)
            if o < 0:
                raise KohortError(f"offset for {tp[0]}[{tp[1]}] must be >= 0, got {o}")
            plain[tp] = o

        def first(r):
            return next((p.error_code for t in r.topics for p in t.partitions if p.error_code), 0)
        resp = await self._group_call(group, R.simple_offset_commit(group, plain), first,
                                      max_version=OFFSETS_BY_NAME_MAX_VERSION)
        if first(resp):
            raise for_code(first(resp))(f"OffsetCommit for group {group!r}")

    async def list_offsets(self, specs: dict) -> dict:
        """{tp: EARLIEST | LATEST | timestamp ms} -> {tp: offset} (-1: no record at or after that time)."""
        c = self._c()
        await c.refresh_metadata({tp[0] for tp in specs})
        by_node: dict[int, dict] = {}
        for tp, ts in specs.items():
            tp = TopicPartition(*tp)
            leader = c.leader_for(tp)
            if leader is None:
                raise for_code(c.snapshot.topic_errors.get(tp.topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))(
                    f"{tp.topic}[{tp.partition}]")
            by_node.setdefault(leader, {})[tp] = ts
        out = {}
        for node, tss in by_node.items():
            resp = await c.request(node, R.list_offsets_request(0, tss, 0))
            for tp, (code, off, _, _) in R.read_list_offsets(resp).items():
                if code:
                    raise for_code(code)(f"ListOffsets {tp.topic}[{tp.partition}]")
                out[tp] = off
        return out


__all__ = ["AIOAdmin", "EARLIEST", "LATEST"]
