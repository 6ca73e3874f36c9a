"""confluent_kafka.admin over kohort's Admin: AdminClient (create/delete topics, create partitions,
list_topics), NewTopic, NewPartitions, and the metadata classes list_topics() returns.

confluent-kafka's calls return {name: Future}; here the request is made at once and the futures are
returned already resolved (result() gives None or raises KafkaException), which programs that wait
on them cannot tell apart.
"""
from __future__ import annotations

import weakref
from concurrent.futures import Future

from kohort.client.admin import Admin
from kohort.errors import KohortError

from ._config import translate
from ._types import (
    BrokerMetadata, ClusterMetadata, KafkaError, KafkaException, PartitionMetadata, TopicMetadata,
    cluster_metadata, timeout_s, wrap,
)


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
        kwargs.pop("logger", None)
        conf.update(kwargs)
        kconf, _extras = translate("admin", conf)
        try:
            self._a = Admin(kconf)
        except KohortError as e:
            raise wrap(e) from None
        self._finalizer = weakref.finalize(self, self._a.close)

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


__all__ = ["AdminClient", "BrokerMetadata", "ClusterMetadata", "KafkaError", "KafkaException", "NewPartitions",
           "NewTopic", "PartitionMetadata", "TopicMetadata"]
