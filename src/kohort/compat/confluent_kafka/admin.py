"""confluent_kafka.admin over kohort's Admin: AdminClient (create/delete topics, create partitions,
list_topics, describe_topics, describe_cluster, consumer groups: list/describe/delete, list their offsets), NewTopic,
NewPartitions, the group result classes, and the metadata classes list_topics() returns.

confluent-kafka's calls return {name: Future}; here the request is made at once and the futures are
returned already resolved (result() gives None or raises KafkaException), which programs that wait
on them cannot tell apart.
"""
from __future__ import annotations

import enum
import weakref
from concurrent.futures import Future

from kohort.client.admin import Admin
from kohort.errors import KohortError

from ._common import Hooks
from ._config import translate
from ._types import (
    OFFSET_INVALID, BrokerMetadata, ClusterMetadata, KafkaError, KafkaException, PartitionMetadata, TopicMetadata,
    TopicPartition, cluster_metadata, timeout_s, wrap,
)


class ConsumerGroupState(enum.Enum):
    UNKNOWN = 0
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5


_STATES = {"PreparingRebalance": ConsumerGroupState.PREPARING_REBALANCING,
           "CompletingRebalance": ConsumerGroupState.COMPLETING_REBALANCING, "Stable": ConsumerGroupState.STABLE,
           "Dead": ConsumerGroupState.DEAD, "Empty": ConsumerGroupState.EMPTY}


class Node:
    def __init__(self, id: int, host: str, port: int, rack=None):
        self.id, self.id_string, self.host, self.port, self.rack = id, str(id), host, port, rack

    def __repr__(self) -> str:
        return f"Node({self.id}, {self.host}:{self.port})"


class ConsumerGroupTopicPartitions:
    def __init__(self, group_id: str, topic_partitions=None):
        self.group_id, self.topic_partitions = group_id, topic_partitions


class ConsumerGroupListing:
    def __init__(self, group_id: str, is_simple_consumer_group: bool, state=None, type=None):
        self.group_id, self.is_simple_consumer_group, self.state, self.type = group_id, is_simple_consumer_group, state, type


class ListConsumerGroupsResult:
    def __init__(self, valid=None, errors=None):
        self.valid, self.errors = valid or [], errors or []


class MemberAssignment:
    def __init__(self, topic_partitions=None):
        self.topic_partitions = topic_partitions or []


class MemberDescription:
    def __init__(self, member_id, client_id, host, assignment, group_instance_id=None, target_assignment=None):
        self.member_id, self.client_id, self.host, self.assignment = member_id, client_id, host, assignment
        self.group_instance_id, self.target_assignment = group_instance_id, target_assignment


class ConsumerGroupDescription:
    def __init__(self, group_id, is_simple_consumer_group, members, partition_assignor, state, coordinator,
                 authorized_operations=None, type=None):
        self.group_id, self.is_simple_consumer_group, self.members = group_id, is_simple_consumer_group, members
        self.partition_assignor, self.state, self.coordinator = partition_assignor, state, coordinator
        self.authorized_operations, self.type = authorized_operations, type


class TopicCollection:
    def __init__(self, topic_names):
        self.topic_names = list(topic_names)


class TopicPartitionInfo:
    def __init__(self, id: int, leader, replicas, isr):
        self.id, self.leader, self.replicas, self.isr = id, leader, replicas, isr


class TopicDescription:
    def __init__(self, name, topic_id, is_internal, partitions, authorized_operations=None):
        self.name, self.topic_id, self.is_internal, self.partitions = name, topic_id, is_internal, partitions
        self.authorized_operations = authorized_operations


class DescribeClusterResult:
    def __init__(self, controller, nodes, cluster_id=None, authorized_operations=None):
        self.controller, self.nodes, self.cluster_id = controller, nodes, cluster_id
        self.authorized_operations = authorized_operations


class NewTopic:
    def __init__(self, topic: str, num_partitions: int = -1, replication_factor: int = -1,
                 replica_assignment=None, config: dict | None = None):
        self.topic, self.num_partitions, self.replication_factor = topic, num_partitions, replication_factor
        self.replica_assignment, self.config = replica_assignment, dict(config or {})

    def __repr__(self) -> str:
        return f"NewTopic(topic={self.topic},num_partitions={self.num_partitions})"


class NewPartitions:
    def __init__(self, topic: str, new_total_count: int, replica_assignment=None):
        self.topic, self.new_total_count, self.replica_assignment = topic, int(new_total_count), replica_assignment

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self.topic},new_total_count={self.new_total_count})"


def _close(admin, hooks) -> None:
    admin.close()
    hooks.close()


def _futures(results: dict) -> dict:
    out = {}
    for name, err in results.items():
        f: Future = Future()
        if err is None:
            f.set_result(None)
        else:
            f.set_exception(wrap(err))
        out[name] = f
    return out


def _failed_all(names, e) -> dict:
    return _futures({n: e for n in names})


class AdminClient:
    def __init__(self, conf: dict | None = None, **kwargs):
        conf = dict(conf or {})
        logger = kwargs.pop("logger", None)
        conf.update(kwargs)
        kconf, extras = translate("admin", conf)
        try:
            self._a = Admin(kconf)
        except KohortError as e:
            raise wrap(e) from None
        hooks = Hooks("admin", self._a.config["client.id"], extras, logger)
        self._finalizer = weakref.finalize(self, _close, self._a, hooks)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._finalizer()

    def _timeout(self, request_timeout, operation_timeout):
        t = timeout_s(request_timeout)
        o = timeout_s(operation_timeout)
        return t if (o is None or o == 0) else max(o, t or 0)

    def create_topics(self, new_topics, operation_timeout: float = 0, request_timeout: float | None = None,
                      validate_only: bool = False) -> dict:
        specs = {}
        for nt in new_topics:
            spec = {"num_partitions": nt.num_partitions, "replication_factor": nt.replication_factor}
            if nt.config:
                spec["configs"] = nt.config
            specs[nt.topic] = spec
        try:
            res = self._a.create_topics(specs, validate_only=validate_only,
                                        timeout=self._timeout(request_timeout, operation_timeout))
        except KohortError as e:
            return _failed_all(specs, e)
        return _futures(res)

    def delete_topics(self, topics, operation_timeout: float = 0, request_timeout: float | None = None) -> dict:
        try:
            res = self._a.delete_topics(list(topics), timeout=self._timeout(request_timeout, operation_timeout))
        except KohortError as e:
            return _failed_all(topics, e)
        return _futures(res)

    def create_partitions(self, new_partitions, operation_timeout: float = 0, request_timeout: float | None = None,
                          validate_only: bool = False) -> dict:
        totals = {np.topic: np.new_total_count for np in new_partitions}
        try:
            res = self._a.create_partitions(totals, validate_only=validate_only,
                                            timeout=self._timeout(request_timeout, operation_timeout))
        except KohortError as e:
            return _failed_all(totals, e)
        return _futures(res)

    def list_topics(self, topic: str | None = None, timeout: float | None = -1) -> ClusterMetadata:
        try:
            return cluster_metadata(self._a, topic, timeout_s(timeout))
        except KohortError as e:
            raise wrap(e) from None

    def poll(self, timeout: float | None = None) -> int:
        return 0

    # -- cluster and consumer groups ------------------------------------------------------------------------
    @staticmethod
    def _one(fn) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn())
        except KohortError as e:
            f.set_exception(wrap(e))
        return f

    def describe_cluster(self, request_timeout: float | None = None, include_authorized_operations: bool = False):
        def call():
            d = self._a.describe_cluster(timeout_s(request_timeout))
            nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in d.brokers]
            ctrl = next((n for n in nodes if n.id == d.controller_id), None)
            return DescribeClusterResult(ctrl, nodes, d.cluster_id)
        return self._one(call)

    def list_consumer_groups(self, request_timeout: float | None = None, states=None, types=None) -> Future:
        want = set(states or ())

        def call():
            out = []
            for g in self._a.list_groups(timeout_s(request_timeout)):
                if g.protocol_type not in ("consumer", ""):
                    continue
                st = _STATES.get(g.state, ConsumerGroupState.UNKNOWN)
                if want and st not in want:
                    continue
                out.append(ConsumerGroupListing(g.group_id, g.protocol_type == "", st))
            return ListConsumerGroupsResult(out)
        return self._one(call)

    def describe_consumer_groups(self, group_ids, include_authorized_operations: bool = False,
                                 request_timeout: float | None = None) -> dict:
        group_ids = list(group_ids)
        try:
            descs = {d.group_id: d for d in self._a.describe_groups(group_ids, timeout_s(request_timeout))}
            brokers = self._a.describe_cluster(timeout_s(request_timeout)).brokers
        except KohortError as e:
            return _failed_all(group_ids, e)
        nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in brokers}
        out = {}
        for gid in group_ids:
            f: Future = Future()
            d = descs.get(gid)
            if d is None:
                f.set_exception(KafkaException(KafkaError(KafkaError.GROUP_ID_NOT_FOUND, f"group {gid!r}")))
            else:
                members = [MemberDescription(m.member_id, m.client_id, m.client_host,
                                             MemberAssignment([TopicPartition(t.topic, t.partition)
                                                               for t in m.assignment]), m.group_instance_id)
                           for m in d.members]
                f.set_result(ConsumerGroupDescription(gid, d.protocol_type == "", members, d.protocol,
                                                      _STATES.get(d.state, ConsumerGroupState.UNKNOWN),
                                                      nodes.get(d.coordinator)))
            out[gid] = f
        return out

    def describe_topics(self, topics: TopicCollection, request_timeout: float | None = None,
                        include_authorized_operations: bool = False) -> dict:
        names = list(topics.topic_names)
        t = timeout_s(request_timeout)
        try:
            brokers = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in self._a.describe_cluster(t).brokers}
        except KohortError as e:
            return _failed_all(names, e)
        out = {}
        for name in names:
            def call(name=name):
                (d,) = self._a.describe_topics([name], t)
                node = brokers.get
                parts = [TopicPartitionInfo(p.partition, node(p.leader), [node(r) for r in p.replicas],
                                            [node(r) for r in p.isr]) for p in d.partitions]
                return TopicDescription(d.name, d.topic_id, d.is_internal, parts)
            out[name] = self._one(call)
        return out

    def delete_consumer_groups(self, group_ids, request_timeout: float | None = None) -> dict:
        group_ids = list(group_ids)
        try:
            res = self._a.delete_groups(group_ids, timeout_s(request_timeout))
        except KohortError as e:
            return _failed_all(group_ids, e)
        return _futures({g: res.get(g) for g in group_ids})

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request, require_stable: bool = False,
                                    request_timeout: float | None = None) -> dict:
        out = {}
        for req in list_consumer_group_offsets_request:
            def call(req=req):
                parts = None if not req.topic_partitions else [(p.topic, p.partition) for p in req.topic_partitions]
                got = self._a.list_group_offsets(req.group_id, parts, timeout_s(request_timeout))
                tps = [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID if o is None or o.offset < 0 else o.offset,
                                      None if o is None else (o.metadata or None))
                       for tp, o in sorted(got.items())]
                return ConsumerGroupTopicPartitions(req.group_id, tps)
            out[req.group_id] = self._one(call)
        return out


__all__ = ["AdminClient", "ConsumerGroupDescription", "ConsumerGroupListing", "ConsumerGroupState",
           "ConsumerGroupTopicPartitions", "DescribeClusterResult", "ListConsumerGroupsResult", "MemberAssignment",
           "MemberDescription", "Node", "TopicCollection", "TopicDescription", "TopicPartitionInfo", "BrokerMetadata", "ClusterMetadata", "KafkaError", "KafkaException", "NewPartitions",
           "NewTopic", "PartitionMetadata", "TopicMetadata"]
