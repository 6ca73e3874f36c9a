"""AIOAdmin: topics (create, delete, list, describe), groups (list, describe, delete) and offsets
(a group's committed offsets, altering them, partition offsets by time) as coroutines on the loop.
Requests and what their answers become are `client.admin_protocol`'s, as in the threaded
`client.admin.Admin` (same result types and errors); only the I/O is here. CreateTopics/DeleteTopics go to
the controller, group requests to the group's coordinator (retried while it moves or loads).
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kohort.aio.client import AIOClient, ClientSettings
from kohort.client import admin_protocol as AP
from kohort.client import requests as R
from kohort.client.admin_protocol import COORDINATOR_RETRY, GroupDescription, GroupListing, TopicDescription
from kohort.client.consumer.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OFFSETS_BY_NAME_MAX_VERSION
from kohort.errors import ErrorCode, KafkaError, KohortError, for_code
from kohort.structs import TopicPartition

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
            if check(resp) in COORDINATOR_RETRY:
                await asyncio.sleep(0.1)
                continue
            return resp
        raise for_code(check(resp))(f"group {group!r}")

    # -- topics ----------------------------------------------------------------------------------------
    async def list_topics(self, include_internal: bool = False) -> list[str]:
        return AP.topic_names(await self._metadata(None), include_internal)

    async def describe_topics(self, topics: Iterable[str] | None = None) -> list[TopicDescription]:
        md = await self._metadata(None if topics is None else list(topics))
        return AP.topic_descriptions(md, all_topics=topics is None)

    async def create_topics(self, topics: Iterable[str] | dict[str, int | dict[str, Any]], num_partitions: int = 1,
                            replication_factor: int = -1, configs: dict[str, Any] | None = None,
                            validate_only: bool = False) -> dict[str, KafkaError | None]:
        """`topics`: names, or {name: partitions or dict(num_partitions=, replication_factor=, configs=)}.
        -> {name: None or its KafkaError}."""
        req = AP.create_topics_request(topics, num_partitions, replication_factor, configs, validate_only,
                                       self.timeout_ms)
        resp = await self._c().request(await self._controller(), req)
        return AP.topic_results(resp.topics)

    async def delete_topics(self, topics: Iterable[str]) -> dict[str, KafkaError | None]:
        req = AP.delete_topics_request(list(topics), self.timeout_ms)
        return AP.topic_results((await self._c().request(await self._controller(), req)).responses)

    # -- groups ----------------------------------------------------------------------------------------
    async def list_groups(self) -> list[GroupListing]:
        md = await self._metadata([])
        seen = {}
        for b in md.brokers:
            self._c().set_node_address(b.node_id, b.host, b.port)
            AP.read_list_groups(await self._c().request(b.node_id, AP.list_groups_request()), b.node_id, seen)
        return sorted(seen.values())

    async def describe_groups(self, groups) -> list[GroupDescription]:
        """Classic groups as DescribeGroups answers them (members with decoded assignments)."""
        out = []
        for g in groups:
            d = (await self._group_call(g, AP.describe_groups_request(g), AP.describe_groups_code)).groups[0]
            if d.error_code:
                raise for_code(d.error_code)(f"group {g!r}")
            out.append(AP.classic_group_description(d, None))
        return out

    async def delete_groups(self, groups) -> dict:
        out = {}
        for g in groups:
            resp = await self._group_call(g, AP.delete_groups_request(g), AP.delete_groups_code)
            out[g] = AP.delete_groups_result(resp, g)
        return out

    # -- offsets ---------------------------------------------------------------------------------------
    async def list_group_offsets(self, group: str, partitions=None) -> dict:
        """{TopicPartition: OffsetAndMetadata} committed by `group` (every partition when None)."""
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        resp = await self._group_call(group, R.offset_fetch(group, tps, require_stable=False),
                                      lambda r: R.read_offset_fetch(r)[0])
        code, got = R.read_offset_fetch(resp)
        return AP.committed_offsets(got, code, group)

    async def alter_group_offsets(self, group: str, offsets: dict) -> None:
        """Commit {tp: offset} for a group without members (generation -1, as kafka-consumer-groups does)."""
        resp = await self._group_call(group, R.simple_offset_commit(group, AP.admin_commit_offsets(offsets)),
                                      AP.first_partition_code, max_version=OFFSETS_BY_NAME_MAX_VERSION)
        AP.check_admin_commit(resp, group)

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
            AP.read_list_offsets_into(R.read_list_offsets(resp), out)
        return out


__all__ = ["AIOAdmin", "EARLIEST", "LATEST"]
