"""Request builders and response readers shared by every client (consumer, admin, producer, Spark source).

Pure functions, no I/O: each builds a request object (or a `Versioned` one when its fields depend on
the version negotiated at send time) or reads a response into plain values, once for all versions,
so the callers never parse a message's version differences themselves.

* `metadata_request(topics, allow_auto_topic_creation)` -- None means every topic (v0: empty list).
* `find_coordinator_request(key)` / `read_find_coordinator(resp)` -- v0-v3 single key, v4+ batched
  (KIP-699); the reader gives one `Coordinator` whatever the version.
* `list_offsets_request` / `read_list_offsets` -- ListOffsets (v0's old_style_offsets included).
* `offset_commit_request`, `offset_fetch_request`, `parse_offset_fetch` (from consumer/offsets.py,
  re-exported here), `offset_fetch` / `read_offset_fetch` (version-independent) and
  `simple_offset_commit` (generation -1, no member id: an admin's commit).
"""
from __future__ import annotations

from typing import NamedTuple

from kohort.client.consumer.offsets import (  # noqa: F401  (re-exported: the builders every client uses)
    OFFSETS_BY_NAME_MAX_VERSION, list_offsets_request, offset_commit_request, offset_fetch_request,
    parse_offset_fetch,
)
from kohort.protocol.framing import Versioned
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest
from kohort.structs import OffsetAndMetadata, TopicPartition

COORDINATOR_GROUP = 0          # FindCoordinator key types
COORDINATOR_TRANSACTION = 1
METADATA_MAX_VERSION = 12      # v13 only adds a top-level error code; the clients have always stopped at 12


def metadata_request(topics=None, allow_auto_topic_creation: bool = False) -> Versioned:
    """Metadata for `topics` (None: every topic, which v0 spells as an empty list)."""
    def build(v: int) -> MetadataRequest:
        if topics is None:
            tl = [] if v == 0 else None
        else:
            tl = [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        return MetadataRequest(topics=tl, allow_auto_topic_creation=allow_auto_topic_creation)
    return Versioned(MetadataRequest.API_KEY, build, METADATA_MAX_VERSION)


class Coordinator(NamedTuple):
    error_code: int
    node_id: int
    host: str
    port: int
    error_message: str | None = None


def find_coordinator_request(key: str, key_type: int = COORDINATOR_GROUP) -> Versioned:
    def build(v: int) -> FindCoordinatorRequest:
        if v >= 4:
            return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
        return FindCoordinatorRequest(key=key, key_type=key_type)
    return Versioned(FindCoordinatorRequest.API_KEY, build)


def read_find_coordinator(resp) -> Coordinator:
    """The coordinator of the (single) key asked for, whatever the version answered."""
    if resp.coordinators:
        c = resp.coordinators[0]
        return Coordinator(c.error_code, c.node_id, c.host, c.port, c.error_message)
    return Coordinator(resp.error_code, resp.node_id, resp.host, resp.port, resp.error_message)


def read_list_offsets(resp) -> dict[TopicPartition, tuple[int, int, int, int]]:
    """{tp: (error_code, offset, timestamp, leader_epoch)}; offset -1 when no record matches."""
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            off = p.offset
            if p.old_style_offsets:                  # v0
                off = p.old_style_offsets[0]
            le = getattr(p, "leader_epoch", -1)
            out[TopicPartition(t.name, p.partition_index)] = (p.error_code, off, p.timestamp,
                                                              -1 if le is None else le)
    return out


def offset_fetch(group_id: str, tps, require_stable: bool = True) -> Versioned:
    """OffsetFetch for `tps` (None: every partition the group committed, KIP-88); v8+ batches groups."""
    return Versioned(OffsetFetchRequest.API_KEY,
                     lambda v: offset_fetch_request(v, group_id, tps, require_stable=require_stable),
                     OFFSETS_BY_NAME_MAX_VERSION)


def read_offset_fetch(resp):
    """(group error code, {tp: (partition error code, OffsetAndMetadata or None)}) whatever the version
    (v8+ answers per group; a v8+ answer without groups reads as nothing committed either way)."""
    return parse_offset_fetch(8 if getattr(resp, "groups", None) else 0, resp)


def simple_offset_commit(group_id: str, offsets: dict, metadata: str = ""):
    """OffsetCommit of {tp: offset} with generation -1 and an empty member id (an admin's commit,
    as kafka-consumer-groups.sh --reset-offsets does; the broker takes it only while the group has no
    members)."""
    oam = {TopicPartition(*tp): OffsetAndMetadata(o, metadata, None) for tp, o in offsets.items()}
    return Versioned(OffsetCommitRequest.API_KEY, lambda v: offset_commit_request(v, group_id, -1, "", None, oam),
                     OFFSETS_BY_NAME_MAX_VERSION)


__all__ = ["COORDINATOR_GROUP", "COORDINATOR_TRANSACTION", "Coordinator", "find_coordinator_request",
           "list_offsets_request", "metadata_request", "offset_commit_request",
           "offset_fetch", "offset_fetch_request", "read_offset_fetch", "parse_offset_fetch", "read_find_coordinator", "read_list_offsets",
           "simple_offset_commit"]
