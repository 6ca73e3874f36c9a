"""The admin client: topics, partitions, configs, cluster, consumer groups and their offsets.

What lives here: `Admin(config)` (role "admin" of `kohort.client.config`), blocking calls built on
`kohort.client.network.NetworkClient`:

* topics: `list_topics`, `create_topics`, `delete_topics`, `create_partitions`, `describe_topics`
  (CreateTopics/DeleteTopics/CreatePartitions go to the controller named by Metadata, as Kafka needs);
* cluster: `describe_cluster` (brokers, controller and cluster id from Metadata);
* configs: `describe_configs`, `alter_configs` (IncrementalAlterConfigs, KIP-339);
* groups: `list_groups`, `describe_groups` (members with their decoded consumer-protocol assignments),
  `delete_groups` (DeleteGroups, KIP-229), `list_group_offsets` (OffsetFetch; every committed offset
  when no partitions are given, KIP-88), `alter_group_offsets` (OffsetCommit as an admin: generation
  -1, empty member id — the broker only takes it while the group has no members),
  `reset_group_offsets` (earliest, latest, by timestamp, to an offset, shift-by; only on inactive
  groups, as kafka-consumer-groups.sh --reset-offsets of KIP-122), `group_lag` (committed vs log-end
  offset per partition);
* share groups (KIP-932): `list_share_groups` (ListGroups, type "share"), `describe_share_groups`
  (ShareGroupDescribe), `list_share_group_offsets` (DescribeShareGroupOffsets: start offset, leader
  epoch, lag of KIP-1226), `alter_share_group_offsets` / `delete_share_group_offsets` (Empty groups
  only), `delete_share_groups` (DeleteGroups); group configs through `alter_configs(("group", id), ...)`;
* `list_offsets` (earliest / latest / by timestamp (KIP-79) per partition, to each partition's leader);
* ACLs (KIP-140): `create_acls`, `describe_acls`, `delete_acls` with kohort.protocol.acl's AclBinding and
  AclBindingFilter (CreateAcls/DescribeAcls/DeleteAcls v1-v3; an error raises the broker's
  ErrorCode, e.g. ClusterAuthorizationFailed, SecurityDisabled, InvalidRequest with its message).
* transactions (KIP-664, as kafka-transactions.sh): `list_transactions` (ListTransactions on every
  broker), `describe_transactions` (DescribeTransactions at each id's transaction coordinator),
  `describe_producers` (DescribeProducers at the partition leader), `abort_transaction` (WriteTxnMarkers
  ABORT to the partition leader: closes a hanging transaction).

The requests of topics and groups, their result types and the errors of their answers are
`client.admin_protocol`'s (shared with `aio.admin.AIOAdmin`); the blocking I/O is here.
Group requests go to the group's coordinator (FindCoordinator), retried on NOT_COORDINATOR /
COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE. Every wait is bounded by
`default.api.timeout.ms` (or a `timeout` argument); an unreachable cluster is one clear error.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple

from kohort.client import admin_protocol as AP
from kohort.client import requests as R
from kohort.client.admin_protocol import (
    COORDINATOR_RETRY,
    GroupDescription,
    GroupListing,
    MemberDescription,
    PartitionInfo,
    TopicDescription,
)
from kohort.client.config import load_config, parse_bootstrap
from kohort.client.network import NetworkClient, unreachable_message
from kohort.errors import (
    ErrorCode,
    IncompatibleBrokerVersionError,
    KafkaConnectionError,
    KafkaTimeoutError,
    KohortError,
    for_code,
)
from kohort.protocol.messages.create_partitions import CreatePartitionsRequest
from kohort.protocol.messages.describe_configs import DescribeConfigsRequest
from kohort.protocol.messages.describe_producers import DescribeProducersRequest
from kohort.protocol.messages.describe_transactions import DescribeTransactionsRequest
from kohort.protocol.messages.list_transactions import ListTransactionsRequest
from kohort.protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from kohort.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from kohort.client.consumer.offsets import OFFSETS_BY_NAME_MAX_VERSION
from kohort.structs import TopicPartition

EARLIEST = -2          # ListOffsets special timestamps
LATEST = -1
RESOURCE_TOPIC = 2     # DescribeConfigs resource types
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32    # group configs (share.auto.offset.reset, share.isolation.level, ...; KIP-848/KIP-932)
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3   # IncrementalAlterConfigs (KIP-339)
INACTIVE_STATES = ("Empty", "Dead")
RESET_TARGETS = ("earliest", "latest", "timestamp", "datetime", "offset", "shift-by", "current", "offsets")


class BrokerInfo(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class ClusterDescription(NamedTuple):
    cluster_id: str | None
    controller_id: int
    brokers: list             # [BrokerInfo]


class ConsumerGroupMember(NamedTuple):
    """One member of a KIP-848 consumer group, as ConsumerGroupDescribe tells it."""
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    assignment: list          # [TopicPartition]
    target_assignment: list   # [TopicPartition]
    member_type: int          # -1 unknown, 0 classic (a classic member inside a consumer group), 1 consumer
    subscribed_topics: list
    subscribed_regex: str | None


class ConsumerGroupDetail(NamedTuple):
    """A KIP-848 consumer group (ConsumerGroupDescribe): epochs, assignor, members."""
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list             # [ConsumerGroupMember]
    coordinator: int


class ShareGroupMember(NamedTuple):
    """One member of a share group (KIP-932), as ShareGroupDescribe tells it."""
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topics: list   # [str]
    assignment: list          # [TopicPartition] (partitions may be shared with other members)


class ShareGroupDescription(NamedTuple):
    """A share group (ShareGroupDescribe, API 77): state Empty/Stable, epochs, the "simple" assignor."""
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list             # [ShareGroupMember]
    coordinator: int


class SharePartitionOffsetInfo(NamedTuple):
    """A share-partition's start offset (SPSO), leader epoch and lag (KIP-1226; None when unknown)."""
    start_offset: int
    leader_epoch: int | None
    lag: int | None


class LagRow(NamedTuple):
    """One line of `kafka-consumer-groups.sh --describe`."""
    group: str
    topic: str
    partition: int
    current_offset: int | None    # committed offset (None: nothing committed)
    log_end_offset: int
    lag: int | None
    member_id: str | None
    host: str | None
    client_id: str | None


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str
    node: int


class TransactionDescription(NamedTuple):
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int              # -1: no transaction started
    partitions: list                # [TopicPartition]
    coordinator: int


class ProducerState(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int           # -1: no open transaction


class Admin:
    """Blocking admin operations against a Kafka(-compatible) cluster."""

    def __init__(self, config: dict[str, Any] | None = None, **overrides: Any) -> None:
        cfg = dict(config or {})
        cfg.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.config = load_config("admin", cfg)
        self.bootstrap = [f"{h}:{p}" for h, p in parse_bootstrap(self.config["bootstrap.servers"])]
        self.timeout = self.config["default.api.timeout.ms"] / 1000.0
        self.nc = NetworkClient(self.config, role="admin", name="kohort-admin-io")
        self._conn_errors: list[str] = []
        self._ever_ok = False
        self.nc.add_disconnect_listener(self._on_disconnect)

    def close(self) -> None:
        self.nc.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- plumbing ------------------------------------------------------------------------------------
    def _on_disconnect(self, node_id, err) -> None:
        self._conn_errors.append(str(err))
        del self._conn_errors[:-6]

    def _call(self, node_id, request, timeout: float | None = None, max_version: int | None = None):
        t = self.timeout if timeout is None else timeout
        start = time.monotonic()
        fut = self.nc.send(node_id, request, timeout_ms=int(t * 1000), max_version=max_version)
        try:
            resp = fut.result(t + 1.0)
        except (KafkaTimeoutError, KafkaConnectionError, FutureTimeout) as e:
            if not self._ever_ok:
                why = self._conn_errors or [str(e) or "no answer"]
                raise KafkaConnectionError(unreachable_message(self.bootstrap, why,
                                                               time.monotonic() - start)) from None
            if isinstance(e, FutureTimeout):
                raise KafkaTimeoutError(f"no answer within {t:.1f}s") from None
            raise
        self._ever_ok = True
        return resp

    def _metadata(self, topics=None, timeout=None):
        """Metadata for `topics` (None: every topic)."""
        return self._call(None, R.metadata_request(topics), timeout)

    def metadata(self, topics=None, timeout: float | None = None):
        """The cluster's Metadata answer as it is (brokers, controller, cluster id, topics with their
        partitions, leaders, replicas, ISR and error codes) for `topics` (None: every topic)."""
        return self._metadata(topics, timeout)

    def _controller(self, timeout=None) -> int:
        md = self._metadata([], timeout)
        self._refresh_brokers(md)
        cid = md.controller_id
        return cid if cid is not None and cid >= 0 and any(b.node_id == cid for b in md.brokers) else None

    def _coordinator(self, group: str, timeout=None, key_type: int = R.COORDINATOR_GROUP) -> int:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            code, node, host, port, _ = R.read_find_coordinator(
                self._call(None, R.find_coordinator_request(group, key_type), timeout))
            if code == 0:
                brokers = self.nc.brokers
                if brokers.get(node) != (host, port):
                    brokers[node] = (host, port)
                    self.nc.update_brokers(brokers)
                return node
            if code in COORDINATOR_RETRY and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise for_code(code)(f"FindCoordinator for {'group' if key_type == R.COORDINATOR_GROUP else 'transactional id'}"
                                 f" {group!r}")

    def _refresh_brokers(self, md) -> None:
        brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        if brokers and brokers != self.nc.brokers:
            self.nc.update_brokers(brokers)

    def _group_call(self, group: str, build, timeout=None, check=None, max_version: int | None = None):
        """Send a group request to the coordinator, retrying while the coordinator moves or loads."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            node = self._coordinator(group, timeout)
            resp = self._call(node, build, timeout, max_version=max_version)
            code = check(resp) if check else 0
            if code in COORDINATOR_RETRY and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            return node, resp

    # -- topics ----------------------------------------------------------------------------------------
    def list_topics(self, include_internal: bool = False, timeout: float | None = None) -> list[str]:
        md = self._metadata(None, timeout)
        self._refresh_brokers(md)
        return AP.topic_names(md, include_internal)

    def describe_topics(self, topics: Iterable[str] | None = None,
                        timeout: float | None = None) -> list[TopicDescription]:
        """Describe `topics` (None: all). A missing topic raises UnknownTopicOrPartitionError naming it."""
        md = self._metadata(None if topics is None else list(topics), timeout)
        self._refresh_brokers(md)
        return AP.topic_descriptions(md, all_topics=topics is None)

    def create_topics(self, topics: Iterable[Any], num_partitions: int = 1, replication_factor: int = -1,
                      configs: dict | None = None, validate_only: bool = False, timeout=None) -> dict:
        """Create topics: `topics` is names or {name: num_partitions} or {name: dict(num_partitions=,
        replication_factor=, configs=)}. Returns {name: None | KafkaError}; raises nothing per topic."""
        t = self.timeout if timeout is None else timeout
        req = AP.create_topics_request(topics, num_partitions, replication_factor, configs, validate_only,
                                       int(t * 1000))
        resp = self._call(self._controller(timeout), req, timeout)
        return AP.topic_results(resp.topics)

    def delete_topics(self, topics: Iterable[str], timeout: float | None = None) -> dict[str, Any]:
        names = list(topics)
        t = self.timeout if timeout is None else timeout
        resp = self._call(self._controller(timeout), AP.delete_topics_request(names, int(t * 1000)), timeout)
        return AP.topic_results(resp.responses)

    def create_partitions(self, new_totals: dict, validate_only: bool = False, timeout: float | None = None) -> dict:
        """Grow topics to {name: new total partition count}."""
        t = self.timeout if timeout is None else timeout
        CPT = CreatePartitionsRequest.CreatePartitionsTopic
        req = CreatePartitionsRequest(topics=[CPT(name=n, count=c, assignments=None) for n, c in new_totals.items()],
                                      timeout_ms=int(t * 1000), validate_only=validate_only)
        resp = self._call(self._controller(timeout), req, timeout)
        return AP.topic_results(resp.results)

    # -- cluster and configs ---------------------------------------------------------------------------
    def describe_cluster(self, timeout: float | None = None) -> ClusterDescription:
        md = self._metadata([], timeout)
        self._refresh_brokers(md)
        return ClusterDescription(md.cluster_id, md.controller_id,
                                  sorted(BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in md.brokers))

    def describe_configs(self, resources, timeout: float | None = None) -> dict:
        """resources: [(RESOURCE_TOPIC | RESOURCE_BROKER | "topic" | "broker", name)] ->
        {(type, name): {config name: (value, read_only, is_default/source, is_sensitive)}}."""
        rs = [(_rtype(rt), str(n)) for rt, n in resources]
        DR = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(resources=[DR(resource_type=rt, resource_name=n, configuration_keys=None)
                                                for rt, n in rs])
        resp = self._call(None, req, timeout)
        out = {}
        for r in resp.results:
            if r.error_code:
                raise for_code(r.error_code)(r.error_message or f"resource {r.resource_name!r}")
            out[(r.resource_type, r.resource_name)] = {
                c.name: ConfigEntry(c.value, c.read_only, c.config_source, c.is_sensitive) for c in r.configs}
        return out

    def alter_configs(self, resource, changes: dict, validate_only: bool = False, timeout: float | None = None) -> None:
        """Incrementally set (value) or delete (None) configs of one (type, name) resource (KIP-339)."""
        rt, name = _rtype(resource[0]), str(resource[1])
        AR = IncrementalAlterConfigsRequest.AlterConfigsResource
        req = IncrementalAlterConfigsRequest(resources=[AR(resource_type=rt, resource_name=name, configs=[
            AR.AlterableConfig(name=k, config_operation=OP_DELETE if v is None else OP_SET,
                               value=None if v is None else str(v)) for k, v in changes.items()])],
            validate_only=validate_only)
        resp = self._call(None, req, timeout)
        for r in resp.responses:
            if r.error_code:
                raise for_code(r.error_code)(r.error_message or f"resource {r.resource_name!r}")

    # -- groups ----------------------------------------------------------------------------------------
    def list_groups(self, timeout: float | None = None, states=(), types=()) -> list[GroupListing]:
        """Every group on every broker (ListGroups goes to each broker, as Kafka's admin does);
        `states` / `types` filter by state (KIP-518) and type (KIP-848) as the broker does."""
        md = self._metadata([], timeout)
        self._refresh_brokers(md)
        seen = {}
        for b in md.brokers:
            AP.read_list_groups(self._call(b.node_id, AP.list_groups_request(states, types), timeout), b.node_id,
                                seen)
        return sorted(seen.values())

    def describe_consumer_groups(self, groups, timeout: float | None = None) -> dict:
        """{group: ConsumerGroupDetail, or None when it is not a KIP-848 consumer group (a classic group,
        or a broker without ConsumerGroupDescribe)}, by ConsumerGroupDescribe (API 69)."""
        from kohort.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
        out = {}
        for g in groups:
            try:
                node, resp = self._group_call(
                    g, ConsumerGroupDescribeRequest(group_ids=[g], include_authorized_operations=False), timeout,
                    check=lambda r: r.groups[0].error_code if r.groups else 0)
            except IncompatibleBrokerVersionError:   # a broker without KIP-848 (Tansu, Kafka < 3.7)
                out[g] = None
                continue
            d = resp.groups[0]
            if d.error_code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
                out[g] = None
                continue
            if d.error_code:
                raise for_code(d.error_code)(d.error_message or f"group {g!r}")

            def tps(a):
                return sorted(TopicPartition(t.topic_name, p) for t in a.topic_partitions for p in t.partitions)
            members = [ConsumerGroupMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch,
                                           tps(m.assignment), tps(m.target_assignment), m.member_type,
                                           list(m.subscribed_topic_names), m.subscribed_topic_regex)
                       for m in d.members]
            out[g] = ConsumerGroupDetail(d.group_id, d.group_state, d.group_epoch, d.assignment_epoch,
                                         d.assignor_name, sorted(members), node)
        return out

    # -- share groups (KIP-932) ----------------------------------------------------------------------------
    def list_share_groups(self, timeout=None) -> list[GroupListing]:
        """The share groups (ListGroups v5+ with the type filter "share", as Admin.listGroups(forShareGroups()))."""
        return self.list_groups(timeout, types=("share",))

    def describe_share_groups(self, groups, timeout=None) -> dict[str, ShareGroupDescription]:
        """{group: ShareGroupDescription} by ShareGroupDescribe (API 77) at each group's coordinator.
        A group that is not a share group raises GroupIdNotFoundError, as Kafka's Admin."""
        return {g: self._describe_share_group(g, timeout) for g in groups}

    def _describe_share_group(self, g: str, timeout=None, missing_ok: bool = False):
        from kohort.protocol.messages.share_group_describe import ShareGroupDescribeRequest
        try:
            node, resp = self._group_call(
                g, ShareGroupDescribeRequest(group_ids=[g], include_authorized_operations=False), timeout,
                check=lambda r: r.groups[0].error_code if r.groups else 0)
        except IncompatibleBrokerVersionError:
            if missing_ok:
                return None
            raise
        d = resp.groups[0]
        if missing_ok and d.error_code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
            return None
        if d.error_code:
            raise for_code(d.error_code)(d.error_message or f"share group {g!r}")
        members = [ShareGroupMember(m.member_id, m.rack_id, m.client_id, m.client_host, m.member_epoch,
                                    sorted(m.subscribed_topic_names),
                                    sorted(TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions
                                           for p in t.partitions))
                   for m in d.members]
        return ShareGroupDescription(d.group_id, d.group_state, d.group_epoch, d.assignment_epoch,
                                     d.assignor_name, sorted(members), node)

    def list_share_group_offsets(self, group: str, partitions=None, timeout=None, *,
                                 uninitialized: bool = False) -> dict:
        """{TopicPartition: SharePartitionOffsetInfo} by DescribeShareGroupOffsets (API 90; lag from v1,
        KIP-1226). `partitions` None: every share-partition the coordinator answers for. A partition the
        group has no state for (start offset -1) is left out, or with `uninitialized` kept as None (as
        Java's Admin.listShareGroupOffsets maps it to null)."""
        from kohort.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as Q
        topics = None
        if partitions is not None:
            by: dict[str, list[int]] = {}
            for tp in partitions:
                tp = TopicPartition(*tp)
                by.setdefault(tp.topic, []).append(tp.partition)
            topics = [Q.DescribeShareGroupOffsetsRequestGroup.DescribeShareGroupOffsetsRequestTopic(
                topic_name=t, partitions=sorted(ps)) for t, ps in sorted(by.items())]
        req = Q(groups=[Q.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=topics)])
        _, resp = self._group_call(group, req, timeout,
                                   check=lambda r: r.groups[0].error_code if r.groups else 0)
        d = resp.groups[0]
        if d.error_code:
            raise for_code(d.error_code)(d.error_message or f"DescribeShareGroupOffsets for group {group!r}")
        out = {}
        for t in d.topics:
            for p in t.partitions:
                if p.error_code:
                    raise for_code(p.error_code)(p.error_message or f"group {group!r} {t.topic_name}[{p.partition_index}]")
                if p.start_offset < 0:
                    if uninitialized:
                        out[TopicPartition(t.topic_name, p.partition_index)] = None
                    continue
                out[TopicPartition(t.topic_name, p.partition_index)] = SharePartitionOffsetInfo(
                    p.start_offset, p.leader_epoch if p.leader_epoch >= 0 else None, p.lag if p.lag >= 0 else None)
        return out

    def alter_share_group_offsets(self, group: str, offsets: dict, timeout=None) -> dict:
        """Set share-partitions' start offsets {TopicPartition: offset} (AlterShareGroupOffsets, API 91).
        The group must be Empty (NonEmptyGroupError otherwise); a group that does not exist is created.
        -> {TopicPartition: None or the partition's error}."""
        from kohort.protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as Q
        by: dict[str, list] = {}
        for tp, off in offsets.items():
            tp = TopicPartition(*tp)
            if not isinstance(off, int) or off < 0:
                raise KohortError(f"alter_share_group_offsets: offset of {tp} must be an int >= 0, got {off!r}")
            by.setdefault(tp.topic, []).append(Q.AlterShareGroupOffsetsRequestTopic.AlterShareGroupOffsetsRequestPartition(
                partition_index=tp.partition, start_offset=off))
        req = Q(group_id=group, topics=[Q.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                                        for t, ps in sorted(by.items())])
        _, resp = self._group_call(group, req, timeout, check=lambda r: r.error_code)
        if resp.error_code:
            raise for_code(resp.error_code)(resp.error_message or f"AlterShareGroupOffsets for group {group!r}")
        return {TopicPartition(t.topic_name, p.partition_index):
                (for_code(p.error_code)(p.error_message or f"{t.topic_name}[{p.partition_index}]") if p.error_code else None)
                for t in resp.responses for p in t.partitions}

    def delete_share_group_offsets(self, group: str, topics, timeout=None) -> dict:
        """Delete the group's share state of whole topics (DeleteShareGroupOffsets, API 92); the group
        must be Empty. -> {topic: None or the topic's error}."""
        from kohort.protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as Q
        topics = [topics] if isinstance(topics, str) else list(topics)
        req = Q(group_id=group, topics=[Q.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])
        _, resp = self._group_call(group, req, timeout, check=lambda r: r.error_code)
        if resp.error_code:
            raise for_code(resp.error_code)(resp.error_message or f"DeleteShareGroupOffsets for group {group!r}")
        return {t.topic_name: (for_code(t.error_code)(t.error_message or t.topic_name) if t.error_code else None)
                for t in resp.responses}

    def delete_share_groups(self, groups, timeout=None) -> dict:
        """Delete share groups (DeleteGroups; NonEmptyGroupError while members remain). {group: None or error}."""
        return self.delete_groups(groups, timeout)

    def delete_group_offsets(self, group: str, partitions, timeout: float | None = None) -> dict:
        """OffsetDelete (KIP-496): {TopicPartition: None or the partition's error}. A group-level error
        (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP...) raises."""
        from kohort.protocol.messages.offset_delete import OffsetDeleteRequest
        by_topic: dict = {}
        for tp in partitions:
            by_topic.setdefault(tp[0], []).append(tp[1])
        T = OffsetDeleteRequest.Topic
        req = OffsetDeleteRequest(group_id=group, topics=[
            T(name=t, partitions=[T.Partition(partition_index=p) for p in sorted(ps)])
            for t, ps in sorted(by_topic.items())])
        _, resp = self._group_call(group, req, timeout, check=lambda r: r.error_code)
        if resp.error_code:
            raise for_code(resp.error_code)(f"OffsetDelete for group {group!r}")
        return {TopicPartition(t.name, p.partition_index):
                (for_code(p.error_code)(f"{t.name}[{p.partition_index}]") if p.error_code else None)
                for t in resp.topics for p in t.partitions}

    def describe_groups(self, groups, timeout: float | None = None) -> list[GroupDescription]:
        out = []
        for g in groups:
            node, resp = self._group_call(g, AP.describe_groups_request(g), timeout, check=AP.describe_groups_code)
            d = resp.groups[0]
            if d.error_code == ErrorCode.GROUP_ID_NOT_FOUND or (not d.error_code and d.group_state == "Dead"):
                # not a classic group: a KIP-848 consumer group answers ConsumerGroupDescribe (as Kafka's
                # Admin.describeConsumerGroups does)
                cg = self.describe_consumer_groups([g], timeout)[g]
                if cg is not None:
                    out.append(GroupDescription(g, cg.state, "consumer", cg.assignor, [
                        MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host, m.assignment)
                        for m in cg.members], cg.coordinator))
                    continue
                sg = self._describe_share_group(g, timeout, missing_ok=True)
                if sg is not None:
                    out.append(GroupDescription(g, sg.state, "share", sg.assignor, [
                        MemberDescription(m.member_id, None, m.client_id, m.client_host, m.assignment)
                        for m in sg.members], sg.coordinator))
                    continue
            if d.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                raise for_code(d.error_code)(f"group {g!r} does not exist (see: kohort groups list)")
            if d.error_code:
                raise for_code(d.error_code)(f"group {g!r}")
            out.append(AP.classic_group_description(d, node))
        return out

    def delete_groups(self, groups, timeout: float | None = None) -> dict:
        out = {}
        for g in groups:
            _, resp = self._group_call(g, AP.delete_groups_request(g), timeout, check=AP.delete_groups_code)
            out[g] = AP.delete_groups_result(resp, g)
        return out

    def list_group_offsets(self, group: str, partitions=None, timeout: float | None = None) -> dict:
        """{TopicPartition: OffsetAndMetadata} committed by `group` (all its partitions if None)."""
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        _, resp = self._group_call(group, R.offset_fetch(group, tps, require_stable=False), timeout,
                                   check=lambda r: R.read_offset_fetch(r)[0])
        code, got = R.read_offset_fetch(resp)
        return AP.committed_offsets(got, code, group)

    def alter_group_offsets(self, group: str, offsets: dict, timeout: float | None = None) -> None:
        """Commit {TopicPartition: offset} for an inactive group (generation -1, no member id)."""
        req = R.simple_offset_commit(group, AP.admin_commit_offsets(offsets))
        _, resp = self._group_call(group, req, timeout, check=AP.first_partition_code,
                                   max_version=OFFSETS_BY_NAME_MAX_VERSION)
        AP.check_admin_commit(resp, group)

    def list_offsets(self, specs: dict, timeout: float | None = None) -> dict:
        """{TopicPartition: EARLIEST | LATEST | timestamp_ms} -> {TopicPartition: offset} from the leaders
        (offset -1 when no record has a timestamp >= the one asked)."""
        topics = sorted({tp[0] for tp in specs})
        md = self._metadata(topics, timeout)
        self._refresh_brokers(md)
        leaders = {}
        for t in md.topics:
            if t.error_code:
                raise for_code(t.error_code)(f"topic {t.name!r}")
            for p in t.partitions:
                leaders[(t.name, p.partition_index)] = p.leader_id
        by_node: dict[int, dict] = {}
        for tp, ts in specs.items():
            tp = TopicPartition(*tp)
            if tp not in leaders:
                raise for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)(f"{tp.topic}[{tp.partition}]")
            by_node.setdefault(leaders[tp], {})[tp] = ts
        out = {}
        for node, tss in by_node.items():
            resp = self._call(node, R.list_offsets_request(0, tss, 0), timeout)
            AP.read_list_offsets_into(R.read_list_offsets(resp), out)
        return out

    # -- transactions (KIP-664) ----------------------------------------------------------------------
    def list_transactions(self, states=(), producer_ids=(), pattern: str | None = None,
                          min_duration_ms: int = -1, timeout=None) -> list[TransactionListing]:
        """Transactional ids on every broker (ListTransactions; `states` by Kafka's names such as
        Ongoing, `pattern` a regular expression the whole id must match (v2), `min_duration_ms`
        transactions running at least that long (v1)). An unknown state name is an error."""
        md = self._metadata([], timeout)
        self._refresh_brokers(md)
        out = []
        for b in md.brokers:
            req = ListTransactionsRequest(state_filters=list(states), producer_id_filters=list(producer_ids),
                                          duration_filter=min_duration_ms, transactional_id_pattern=pattern)
            max_v = 0 if pattern is None and min_duration_ms < 0 else None
            resp = self._call(b.node_id, req, timeout, max_version=max_v)
            if resp.error_code:
                raise for_code(resp.error_code)(f"ListTransactions on broker {b.node_id}")
            if resp.unknown_state_filters:
                raise KohortError(f"unknown transaction state(s): {', '.join(resp.unknown_state_filters)} "
                                  "(Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
                                  "CompleteAbort, PrepareEpochFence)")
            out += [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state, b.node_id)
                    for t in resp.transaction_states]
        if pattern is not None:         # also where the broker is older than ListTransactions v2
            rx = re.compile(pattern)
            out = [t for t in out if rx.fullmatch(t.transactional_id)]
        return sorted(out)

    def describe_transactions(self, transactional_ids, timeout: float | None = None) -> list[TransactionDescription]:
        """Each id's state at its transaction coordinator; an unknown id raises
        TransactionalIdNotFound."""
        out = []
        for tid in transactional_ids:
            deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
            while True:
                node = self._coordinator(tid, timeout, key_type=R.COORDINATOR_TRANSACTION)
                d = self._call(node, DescribeTransactionsRequest(transactional_ids=[tid]), timeout).transaction_states[0]
                if d.error_code in COORDINATOR_RETRY and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                break
            if d.error_code:
                raise for_code(d.error_code)(f"transactional id {tid!r}")
            parts = sorted(TopicPartition(t.name, p) for t in d.topics for p in t.partition_indexes)
            out.append(TransactionDescription(tid, d.transaction_state, d.producer_id, d.producer_epoch,
                                              d.transaction_timeout_ms, d.transaction_start_time_ms, parts, node))
        return out

    def _leader(self, topic: str, partition: int, timeout=None) -> int:
        md = self._metadata([topic], timeout)
        self._refresh_brokers(md)
        for t in md.topics:
            if t.error_code:
                raise for_code(t.error_code)(f"topic {topic!r}")
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.error_code:
                        raise for_code(p.error_code)(f"{topic}[{partition}]")
                    return p.leader_id
        raise for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)(f"{topic}[{partition}]")

    def describe_producers(self, topic: str, partition: int, timeout: float | None = None) -> list[ProducerState]:
        """The active producers of a partition (DescribeProducers at its leader)."""
        T = DescribeProducersRequest.TopicRequest
        resp = self._call(self._leader(topic, partition, timeout),
                          DescribeProducersRequest(topics=[T(name=topic, partition_indexes=[partition])]), timeout)
        p = resp.topics[0].partitions[0]
        if p.error_code:
            raise for_code(p.error_code)(p.error_message or f"{topic}[{partition}]")
        return [ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                              s.coordinator_epoch, s.current_txn_start_offset) for s in p.active_producers]

    def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int, timeout=None) -> None:
        """Write an ABORT marker for the producer's open transaction on one partition (WriteTxnMarkers
        at its leader, as Kafka's Admin.abortTransaction); for hanging transactions (KIP-664)."""
        M = WriteTxnMarkersRequest.WritableTxnMarker
        req = WriteTxnMarkersRequest(markers=[M(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
            coordinator_epoch=coordinator_epoch, transaction_version=0)])
        resp = self._call(self._leader(topic, partition, timeout), req, timeout, max_version=1)
        code = resp.markers[0].topics[0].partitions[0].error_code
        if code:
            raise for_code(code)(f"abort of producer {producer_id} on {topic}[{partition}]")

    def group_lag(self, group: str, timeout: float | None = None) -> list[LagRow]:
        """Per partition: committed offset, log end offset, lag and the owning member (if any)."""
        desc = self.describe_groups([group], timeout)[0]
        owner = {}
        for m in desc.members:
            for tp in m.assignment:
                owner[tp] = m
        committed = self.list_group_offsets(group, None, timeout)
        tps = sorted(set(committed) | set(owner))
        ends = self.list_offsets({tp: LATEST for tp in tps}, timeout) if tps else {}
        rows = []
        for tp in tps:
            c = committed.get(tp)
            end = ends.get(tp, -1)
            cur = c.offset if c is not None else None
            m = owner.get(tp)
            rows.append(LagRow(group, tp.topic, tp.partition, cur, end,
                               None if cur is None else max(0, end - cur),
                               m.member_id if m else None, m.client_host if m else None,
                               m.client_id if m else None))
        return rows

    def plan_reset_offsets(self, group: str, partitions, *, to: str, value=None, timeout: float | None = None) -> dict:
        """The new offset of each partition for a reset: to in ("earliest", "latest", "datetime"/"timestamp"
        (value = ms), "offset" (value), "shift-by" (value, may be negative), "current", "offsets" (value =
        {partition: offset}, as --from-file)). Offsets are
        clamped into [log start, log end] as kafka-consumer-groups.sh does. Returns {tp: (old, new)}."""
        if to not in RESET_TARGETS:
            raise KohortError(f"unknown reset target {to!r}; one of {', '.join(RESET_TARGETS)}")
        if to in ("timestamp", "datetime", "offset", "shift-by") and not isinstance(value, int):
            raise KohortError(f"reset to {to} needs an integer value, got {value!r}")
        if to == "offsets" and not isinstance(value, dict):
            raise KohortError(f"reset to offsets needs {{partition: offset}}, got {value!r}")
        tps = sorted(TopicPartition(*tp) for tp in partitions)
        if not tps:
            raise KohortError(f"no partitions to reset for group {group!r}")
        committed = self.list_group_offsets(group, tps, timeout)
        earliest = self.list_offsets({tp: EARLIEST for tp in tps}, timeout)
        latest = self.list_offsets({tp: LATEST for tp in tps}, timeout)
        if to in ("timestamp", "datetime"):
            by_ts = self.list_offsets({tp: int(value) for tp in tps}, timeout)
        plan = {}
        for tp in tps:
            old = committed[tp].offset if tp in committed else None
            lo, hi = earliest[tp], latest[tp]
            if to == "earliest":
                new = lo
            elif to == "latest":
                new = hi
            elif to in ("timestamp", "datetime"):
                new = by_ts[tp] if by_ts[tp] >= 0 else hi
            elif to == "offset":
                new = int(value)
            elif to == "offsets":      # one offset per partition (kafka-consumer-groups --from-file)
                new = int(value[tp])
            elif to == "shift-by":
                new = (old if old is not None else hi) + int(value)
            elif to == "current":
                new = old if old is not None else hi
            else:
                raise KohortError(f"unknown reset target {to!r}; one of earliest, latest, timestamp, "
                                  f"offset, shift-by, current")
            plan[tp] = (old, min(max(new, lo), hi))
        return plan

    def reset_group_offsets(self, group: str, partitions, *, to: str, value=None, dry_run: bool = False,
                            timeout=None) -> dict:
        """Plan and (unless dry_run) commit a reset; refuses while the group has members."""
        try:
            state = self.describe_groups([group], timeout)[0].state
        except for_code(ErrorCode.GROUP_ID_NOT_FOUND):
            state = "Dead"          # no such group yet: committing creates it (as kafka-consumer-groups)
        if state not in INACTIVE_STATES and not dry_run:
            raise KohortError(f"group {group!r} is {state}: offsets can only be reset while the group is "
                              f"inactive (no members); stop its consumers first")
        plan = self.plan_reset_offsets(group, partitions, to=to, value=value, timeout=timeout)
        if not dry_run:
            self.alter_group_offsets(group, {tp: new for tp, (_, new) in plan.items()}, timeout)
        return plan


    # -- SCRAM users (KIP-554) --------------------------------------------------------------------
    def describe_user_scram_credentials(self, users=None, timeout: float | None = None) -> dict:
        """{user: {mechanism name: iterations}} (users None: all); an unknown user raises RESOURCE_NOT_FOUND."""
        from kohort.protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
        names = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
        U = DescribeUserScramCredentialsRequest.UserName
        resp = self._call(None, DescribeUserScramCredentialsRequest(
            users=None if users is None else [U(name=u) for u in users]), timeout)
        if resp.error_code:
            raise for_code(resp.error_code)(resp.error_message)
        out = {}
        for r in resp.results:
            if r.error_code:
                raise for_code(r.error_code)(r.error_message or f"user {r.user!r}")
            out[r.user] = {names.get(i.mechanism, str(i.mechanism)): i.iterations for i in r.credential_infos}
        return out

    def alter_user_scram_credentials(self, upsertions=(), deletions=(), timeout: float | None = None) -> None:
        """upsertions: [(user, mechanism, password, iterations)]; deletions: [(user, mechanism)].
        The salted password is derived here (PBKDF2, a random salt); the password never leaves."""
        import secrets

        from kohort.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
        from kohort.protocol.sasl import salted_password
        codes = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
        R = AlterUserScramCredentialsRequest
        ups = []
        for user, mech, password, iterations in upsertions:
            salt = secrets.token_bytes(32)
            ups.append(R.ScramCredentialUpsertion(name=user, mechanism=codes[mech.upper()], iterations=iterations,
                                                  salt=salt, salted_password=salted_password(
                                                      mech.upper(), password, salt, iterations)))
        dels = [R.ScramCredentialDeletion(name=u, mechanism=codes[m.upper()]) for u, m in deletions]
        resp = self._call(None, R(deletions=dels, upsertions=ups), timeout)
        for r in resp.results:
            if r.error_code:
                raise for_code(r.error_code)(r.error_message or f"user {r.user!r}")

    # -- ACLs (KIP-140) ------------------------------------------------------------------------------
    def create_acls(self, bindings, timeout: float | None = None) -> None:
        """Add AclBindings; the first refused one raises with the broker's message (the others in the
        same request are still added, as Kafka does)."""
        from kohort.protocol.messages.create_acls import CreateAclsRequest
        C = CreateAclsRequest.AclCreation
        bindings = list(bindings)
        resp = self._call(None, CreateAclsRequest(creations=[
            C(resource_type=b.resource_type, resource_name=b.name, resource_pattern_type=b.pattern_type,
              principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
            for b in bindings]), timeout)
        for b, r in zip(bindings, resp.results):
            if r.error_code:
                raise for_code(r.error_code)(f"{r.error_message or 'CreateAcls failed'} ({_acl_text(b)})")

    def describe_acls(self, acl_filter=None, timeout: float | None = None) -> list:
        """The AclBindings matching `acl_filter` (default: every ACL)."""
        from kohort.protocol.acl import AclBinding, AclBindingFilter
        from kohort.protocol.messages.describe_acls import DescribeAclsRequest
        f = acl_filter or AclBindingFilter()
        resp = self._call(None, DescribeAclsRequest(
            resource_type_filter=f.resource_type, resource_name_filter=f.name, pattern_type_filter=f.pattern_type,
            principal_filter=f.principal, host_filter=f.host, operation=f.operation,
            permission_type=f.permission), timeout)
        if resp.error_code:
            raise for_code(resp.error_code)(resp.error_message or "DescribeAcls failed")
        return [_binding(AclBinding, r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host,
                         a.operation, a.permission_type) for r in resp.resources for a in r.acls]

    def delete_acls(self, filters, timeout: float | None = None) -> list:
        """Remove every ACL matching any of `filters` (AclBindingFilters); the removed AclBindings."""
        from kohort.protocol.acl import AclBinding
        from kohort.protocol.messages.delete_acls import DeleteAclsRequest
        F = DeleteAclsRequest.DeleteAclsFilter
        resp = self._call(None, DeleteAclsRequest(filters=[
            F(resource_type_filter=f.resource_type, resource_name_filter=f.name, pattern_type_filter=f.pattern_type,
              principal_filter=f.principal, host_filter=f.host, operation=f.operation, permission_type=f.permission)
            for f in filters]), timeout)
        out = []
        for r in resp.filter_results:
            if r.error_code:
                raise for_code(r.error_code)(r.error_message or "DeleteAcls failed")
            for m in r.matching_acls:
                if m.error_code:
                    raise for_code(m.error_code)(m.error_message or "DeleteAcls failed")
                out.append(_binding(AclBinding, m.resource_type, m.resource_name, m.pattern_type, m.principal,
                                    m.host, m.operation, m.permission_type))
        return out


def _binding(cls, rtype, name, pattern, principal, host, op, perm):
    from kohort.protocol.acl import AclOperation, AclPermissionType, PatternType, ResourceType

    def enum(e, v):
        try:
            return e(v)
        except ValueError:
            return e(0)
    return cls(enum(ResourceType, rtype), name, enum(PatternType, pattern), principal, host,
               enum(AclOperation, op), enum(AclPermissionType, perm))


def _acl_text(b) -> str:
    return (f"{b.permission.name} {b.principal} {b.operation.name} from {b.host} on "
            f"{b.resource_type.name} {b.pattern_type.name} {b.name!r}")


class ConfigEntry(NamedTuple):
    value: str | None
    read_only: bool
    source: int
    is_sensitive: bool


def _rtype(rt) -> int:
    if isinstance(rt, int):
        return rt
    m = {"topic": RESOURCE_TOPIC, "broker": RESOURCE_BROKER, "group": RESOURCE_GROUP}
    if rt not in m:
        raise KohortError(f"unknown config resource type {rt!r}; use 'topic', 'broker' or 'group'")
    return m[rt]


__all__ = ["ShareGroupDescription", "ShareGroupMember", "SharePartitionOffsetInfo", "RESOURCE_GROUP", "Admin", "ProducerState", "TransactionDescription", "TransactionListing", "BrokerInfo", "ClusterDescription", "ConfigEntry", "EARLIEST", "GroupDescription",
           "GroupListing", "LATEST", "LagRow", "MemberDescription", "PartitionInfo", "TopicDescription"]
