"""Cluster metadata as the client sees it: brokers, topics, partitions, leaders, leader epochs, topic ids.

`Cluster` asks any broker for Metadata (the topics of interest, or all topics for a pattern
subscription) and keeps an immutable `Snapshot` that readers use without locks; every update swaps
in a new snapshot. A refresh is requested on errors that mean stale metadata (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, FENCED/UNKNOWN_LEADER_EPOCH, a connection lost), when a newer leader
epoch is seen (KIP-320), and at least every metadata.max.age.ms. A failed refresh retries after
retry.backoff.ms; an answer naming a topic or partition error of that kind (a partition without a
leader) is followed by another, after a wait doubling up to retry.backoff.max.ms. The broker
address book of the NetworkClient is updated from each response.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from kohort.client.network import NetworkClient
from kohort.client.requests import metadata_request
from kohort.errors import ErrorCode, KafkaTimeoutError, for_code
from kohort.structs import TopicPartition

# error codes that mean "your metadata is stale"
STALE_METADATA_ERRORS = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
})


@dataclass(frozen=True)
class PartitionInfo:
    leader: int          # -1 when the partition has no leader right now
    leader_epoch: int    # -1 when the broker does not report it (Metadata < v7)
    replicas: tuple = ()
    isr: tuple = ()
    error_code: int = 0


@dataclass
class Snapshot:
    brokers: dict[int, tuple[str, int, str | None]] = field(default_factory=dict)
    partitions: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    topics: dict[str, list[int]] = field(default_factory=dict)
    topic_ids: dict[str, object] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    internal_topics: frozenset = frozenset()
    cluster_id: str | None = None
    controller_id: int = -1
    updated_at: float = 0.0      # monotonic seconds; 0 = never
    version: int = 0


class Cluster:
    """The client's view of the cluster; see the module docstring. Thread-safe."""

    def __init__(self, network: NetworkClient, config, all_topics: bool = False, auto_create: bool | None = None):
        self.network = network
        self._max_age = config["metadata.max.age.ms"] / 1000
        self._retry_backoff = config["retry.backoff.ms"] / 1000
        self._retry_backoff_max = max(self._retry_backoff, config.get("retry.backoff.max.ms", 1000) / 1000)
        self._stale_answers = 0      # answers in a row that still carried a stale-metadata error
        if auto_create is None:
            auto_create = config.get("allow.auto.create.topics")
        self._auto_create = True if auto_create is None else bool(auto_create)
        self._listeners: list = []
        self._forced = False
        self._lock = threading.Lock()
        self._topics: set[str] = set()
        self._all_topics = all_topics
        self._need_update = True
        self._inflight: Future | None = None
        self._inflight_topics: set[str] | None = None     # what the request in flight asks (None: all)
        self._not_before = 0.0
        self._updated = threading.Condition(self._lock)
        self._last_error: BaseException | None = None
        self.snapshot = Snapshot()
        network.add_disconnect_listener(self._on_disconnect)

    # -- what to track --------------------------------------------------------------------------------
    def add_topics(self, topics) -> None:
        with self._lock:
            new = set(topics) - self._topics
            if new:
                self._topics |= new
                self._need_update = True
        if new:
            self.maybe_refresh()

    def set_topics(self, topics) -> None:
        with self._lock:
            topics = set(topics)
            if topics != self._topics:
                self._topics = topics
                self._need_update = True
        self.maybe_refresh()

    def set_all_topics(self, flag: bool) -> None:
        with self._lock:
            if flag != self._all_topics:
                self._all_topics = flag
                self._need_update = True
        self.maybe_refresh()

    @property
    def topics(self) -> set[str]:
        return set(self._topics)

    def add_listener(self, fn) -> None:
        """fn(snapshot) after each new snapshot, on the thread that runs the network's I/O."""
        self._listeners.append(fn)

    # -- reading ------------------------------------------------------------------------------------------
    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        return {n: (h, p) for n, (h, p, _) in self.snapshot.brokers.items()}

    @property
    def cluster_id(self) -> str | None:
        return self.snapshot.cluster_id

    @property
    def controller_id(self) -> int:
        return self.snapshot.controller_id

    def leader_for(self, tp) -> int | None:
        p = self.snapshot.partitions.get(tp)
        return p.leader if p is not None and p.leader >= 0 else None

    def leader_epoch(self, tp) -> int:
        p = self.snapshot.partitions.get(tp)
        return p.leader_epoch if p is not None else -1

    def partition_info(self, tp) -> PartitionInfo | None:
        return self.snapshot.partitions.get(tp)

    def partitions_for(self, topic: str) -> list[int] | None:
        return self.snapshot.topics.get(topic)

    def topic_id(self, topic: str):
        return self.snapshot.topic_ids.get(topic)

    def topic_error(self, topic: str) -> int:
        return self.snapshot.topic_errors.get(topic, 0)

    def all_topic_names(self, include_internal: bool = False) -> list[str]:
        s = self.snapshot
        return [t for t in s.topics if include_internal or t not in s.internal_topics]

    # -- staleness ----------------------------------------------------------------------------------------
    def request_update(self) -> None:
        """Mark the metadata stale; a refresh starts now (or after the retry backoff)."""
        with self._lock:
            self._need_update = True
        self.maybe_refresh()

    def request_leaders(self, topics) -> None:
        """Ask for metadata naming these topics' leaders. A Metadata request already in flight that
        covers them is their answer: nothing more is sent meanwhile. For callers that ask again on
        every round while a leader stays unknown (offset resets, position validation): asking while
        the first answer is on its way would only send the same request twice."""
        topics = set(topics)
        with self._lock:
            covered = self._inflight is not None and (self._inflight_topics is None
                                                      or topics <= self._inflight_topics)
        if covered:
            return
        self.add_topics(topics)
        self.request_update()

    def on_partition_error(self, tp, error_code: int) -> None:
        if error_code in STALE_METADATA_ERRORS:
            self.request_update()

    def observe_leader_epoch(self, tp, epoch: int) -> None:
        """A newer leader epoch than ours was seen (in a fetch response or a record batch): refresh."""
        p = self.snapshot.partitions.get(tp)
        if p is not None and epoch > p.leader_epoch >= 0:
            self.request_update()

    def maybe_refresh(self, now: float | None = None) -> Future | None:
        """Start a Metadata request if one is due and none is in flight; return the in-flight future."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._inflight is not None:
                return self._inflight
            due = self._need_update or now - self.snapshot.updated_at >= self._max_age
            if not due or now < self._not_before:
                return None
            if not self._all_topics and not self._topics and self.snapshot.updated_at and not self._forced:
                self._need_update = False
                return None
            topics = None if self._all_topics else sorted(self._topics)
            self._need_update = self._forced = False
            fut = self.network.send(None, metadata_request(topics, self._auto_create))
            self._inflight = fut
            self._inflight_topics = None if topics is None else set(topics)
        fut.add_done_callback(self._on_response)
        return fut

    def refresh(self, timeout: float = 30.0) -> Snapshot:
        """Force a refresh and wait for it. Raises KafkaTimeoutError, or the last error seen."""
        deadline = time.monotonic() + timeout
        with self._lock:
            start_version = self.snapshot.version
            self._need_update = self._forced = True
            self._not_before = 0.0
        while True:
            # the version first: once an answer has come, no further request is started here
            with self._lock:
                if self.snapshot.version > start_version:
                    return self.snapshot
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaTimeoutError(
                        f"no cluster metadata within {timeout:.1f}s"
                        + (f" (last error: {self._last_error})" if self._last_error else ""))
            self.maybe_refresh()
            if not self.network.caller_driven:
                with self._lock:
                    if self.snapshot.version <= start_version:
                        self._updated.wait(min(left, max(self._retry_backoff, 0.01)))
                continue
            self.network.poll(min(left, 0.05))     # caller-driven: this thread does the I/O

    def wait_for_topics(self, topics, timeout: float = 30.0) -> Snapshot:
        """Refresh until every topic in `topics` is known with a leader for each partition."""
        deadline = time.monotonic() + timeout
        self.add_topics(topics)
        while True:
            s = self.snapshot
            ok = all(t in s.topics and s.topics[t] and all(
                s.partitions[(t, p)].leader >= 0 for p in s.topics[t]) for t in topics)
            if ok:
                return s
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [t for t in topics if t not in s.topics]
                raise KafkaTimeoutError(f"metadata for topics {sorted(topics)} not available within "
                                        f"{timeout:.1f}s" + (f"; unknown: {missing}" if missing else ""))
            self.refresh(left)
            if not ok:
                time.sleep(min(self._retry_backoff, max(left, 0)))

    # -- I/O thread -------------------------------------------------------------------------------------
    def _on_disconnect(self, node_id: int, err) -> None:
        if node_id >= 0:
            with self._lock:
                self._need_update = True

    def _on_response(self, fut: Future) -> None:
        try:
            resp = fut.result()
            err = getattr(resp, "error_code", 0)
            if err:
                raise for_code(err)("Metadata request failed")
        except BaseException as e:
            with self._lock:
                self._inflight = None
                self._need_update = True
                self._last_error = e
                self._not_before = time.monotonic() + self._retry_backoff
                self._updated.notify_all()
            return
        snap = self._build(resp)
        # the address book first: a thread that reads the new snapshot at once may send to a broker
        # it names, which must then already have an address
        self.network.update_brokers({n: (h, p) for n, (h, p, _) in snap.brokers.items()})
        with self._lock:
            self._inflight = None
            self._last_error = None
            self._not_before = 0.0
            snap.version = self.snapshot.version + 1
            self.snapshot = snap
            # a topic or a partition answered with an error meaning "ask again" (a partition whose
            # leader is down says LEADER_NOT_AVAILABLE with leader -1): refresh until a leader is
            # named (Java's Metadata, InvalidMetadataException at either level), the wait doubling
            # from retry.backoff.ms to retry.backoff.max.ms while the answers stay stale (KIP-580)
            if any(code in STALE_METADATA_ERRORS and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                   for code in (*snap.topic_errors.values(), *(p.error_code for p in snap.partitions.values()))):
                self._need_update = True
                backoff = min(self._retry_backoff * 2 ** min(self._stale_answers, 30), self._retry_backoff_max)
                self._stale_answers += 1
                self._not_before = time.monotonic() + backoff
            else:
                self._stale_answers = 0
            self._updated.notify_all()
        for fn in self._listeners:
            fn(snap)

    def _build(self, resp) -> Snapshot:
        s = Snapshot(updated_at=time.monotonic())
        s.brokers = {b.node_id: (b.host, b.port, b.rack) for b in resp.brokers}
        s.cluster_id = resp.cluster_id
        s.controller_id = resp.controller_id
        internal = set()
        for t in resp.topics:
            name = t.name
            if name is None:
                continue
            if t.error_code:
                s.topic_errors[name] = t.error_code
                if t.error_code != ErrorCode.LEADER_NOT_AVAILABLE:   # still lists its partitions
                    continue
            if t.is_internal:
                internal.add(name)
            s.topic_ids[name] = t.topic_id
            parts = []
            for p in t.partitions:
                parts.append(p.partition_index)
                s.partitions[TopicPartition(name, p.partition_index)] = PartitionInfo(
                    p.leader_id, p.leader_epoch, tuple(p.replica_nodes), tuple(p.isr_nodes), p.error_code)
            parts.sort()
            s.topics[name] = parts
        s.internal_topics = frozenset(internal)
        return s


__all__ = ["Cluster", "PartitionInfo", "STALE_METADATA_ERRORS", "Snapshot"]
