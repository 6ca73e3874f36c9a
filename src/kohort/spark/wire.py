"""A small blocking Kafka client for the Spark source: what the driver and the executors need, nothing more.

The Spark source runs inside Spark's Python workers (a long-lived planner process on the driver, short
task workers on executors), where a blocking socket per broker is the simplest robust shape. This module
speaks the protocol through kohort.protocol (framing, messages, ApiVersions negotiation):

* `Cluster(config)` -- bootstrap, Metadata (leaders, topic ids), per-node `BrokerConnection`s.
* `Cluster.list_offsets({tp: timestamp}, isolation_level)` -- ListOffsets routed to each leader
  (-2 earliest, -1 latest, >= 0 first offset with timestamp >= ts), retried on leader changes.
* `Cluster.fetch(tp, offset, ...)` -- one FetchRequest v4-v12 to the partition's leader (explicit
  assignment, no group membership).
* `Cluster.commit_offsets(group, {tp: offset})` -- OffsetCommit with generation -1 and an empty
  member id (a "simple" commit, as kafka-consumer-groups.sh --reset-offsets does); `committed_offsets`.
* `create_topics` -- for the demo and tests.

Why not kohort.client here: Spark runs the source in many short-lived Python workers, where a blocking
socket without an I/O thread is the cheapest thing to open per task; and `offset_bounds` checks
ListOffsets(latest) against a Fetch's high watermark, which some brokers need (Tansu answers latest with
a stale offset). Writes go through kohort.client's Producer (see sink.py).
"""
from __future__ import annotations

import socket
import time
import uuid

from kohort.errors import (
    ConfigError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    for_code,
)
from kohort.protocol.framing import ClientProtocol, pick_version
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest

# highest versions this helper builds requests for (the topic-name forms)
CAPS = {
    MetadataRequest.API_KEY: 12, ListOffsetsRequest.API_KEY: 7, FetchRequest.API_KEY: 12,
    OffsetCommitRequest.API_KEY: 9, OffsetFetchRequest.API_KEY: 7, FindCoordinatorRequest.API_KEY: 3,
    CreateTopicsRequest.API_KEY: 7,
}
ZERO_UUID = uuid.UUID(int=0)


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(f"bootstrap server {item!r} must be host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ConfigError("bootstrap.servers is empty")
    return out


class BrokerConnection:
    """One blocking TCP connection with negotiated API versions; requests answered in order."""

    def __init__(self, host: str, port: int, client_id: str = "kohort-spark", timeout_s: float = 30.0):
        self.host, self.port = host, port
        self.timeout_s = timeout_s
        try:
            self.sock = socket.create_connection((host, port), timeout=min(timeout_s, 10.0))
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {e}") from None
        self.sock.settimeout(timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.proto = ClientProtocol(client_id)
        self.versions: dict[int, tuple[int, int]] = {}
        resp = self._roundtrip(ApiVersionsRequest(client_software_name="kohort-spark",
                                                  client_software_version="1"), 3)
        if resp.error_code == 35:                      # UNSUPPORTED_VERSION: retry with v0
            resp = self._roundtrip(ApiVersionsRequest(), 0)
        if resp.error_code:
            raise for_code(resp.error_code)(f"ApiVersions from {host}:{port}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def version(self, cls) -> int:
        return pick_version(cls.API_KEY, self.versions, CAPS.get(cls.API_KEY))

    def _roundtrip(self, request, version: int, timeout_s: float | None = None):
        _, data = self.proto.send(request, version)
        try:
            if timeout_s is not None:
                self.sock.settimeout(timeout_s)
            self.sock.sendall(data)
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise KafkaConnectionError(f"{self.host}:{self.port} closed the connection")
                got = self.proto.receive_data(chunk)
                if got:
                    return got[0][1]
        except socket.timeout:
            self.close()
            raise KafkaTimeoutError(f"no response from {self.host}:{self.port} in time") from None
        except OSError as e:
            self.close()
            raise KafkaConnectionError(f"connection to {self.host}:{self.port} failed: {e}") from None
        finally:
            if timeout_s is not None:
                try:
                    self.sock.settimeout(self.timeout_s)
                except OSError:
                    pass

    def request(self, request, timeout_s: float | None = None):
        return self._roundtrip(request, self.version(type(request)), timeout_s)


class Cluster:
    """Metadata and per-broker connections from a bootstrap list (kafka.* client config by Kafka names)."""

    def __init__(self, config: dict):
        self.config = dict(config)
        self.bootstrap = parse_bootstrap(self.config.get("bootstrap.servers", ""))
        self.client_id = self.config.get("client.id", "kohort-spark")
        self.timeout_s = int(self.config.get("request.timeout.ms", 30000)) / 1000.0
        self.retry_backoff_s = int(self.config.get("retry.backoff.ms", 100)) / 1000.0
        self.conns: dict = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple, int] = {}
        self.topic_ids: dict[str, str] = {}
        self.partitions: dict[str, list[int]] = {}
        self._meta_at = 0.0

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- connections --------------------------------------------------------------------------
    def _any(self) -> BrokerConnection:
        for c in self.conns.values():
            return c
        last = None
        for host, port in self.bootstrap:
            try:
                c = BrokerConnection(host, port, self.client_id, self.timeout_s)
                self.conns[("bootstrap", host, port)] = c
                return c
            except KafkaConnectionError as e:
                last = e
        raise KafkaConnectionError(f"no bootstrap server reachable ({last})")

    def node(self, node_id: int) -> BrokerConnection:
        c = self.conns.get(node_id)
        if c is not None:
            return c
        if node_id not in self.brokers:
            self.refresh()
        if node_id not in self.brokers:
            raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        host, port = self.brokers[node_id]
        c = self.conns[node_id] = BrokerConnection(host, port, self.client_id, self.timeout_s)
        return c

    def _drop(self, key):
        c = self.conns.pop(key, None)
        if c is not None:
            c.close()

    def _call(self, key_or_node, request, timeout_s=None):
        """Send on a node's connection, dropping the connection on an I/O failure."""
        conn = self.node(key_or_node) if isinstance(key_or_node, int) else self._any()
        try:
            return conn.request(request, timeout_s)
        except (KafkaConnectionError, KafkaTimeoutError):
            for k, v in list(self.conns.items()):
                if v is conn:
                    self._drop(k)
            raise

    # -- metadata ------------------------------------------------------------------------------
    def refresh(self, topics=None) -> None:
        """Metadata for `topics` (None = all topics); updates brokers, leaders, partitions, ids."""
        req_topics = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        resp = self._with_retries(lambda: self._call(None, MetadataRequest(
            topics=req_topics, allow_auto_topic_creation=False)))
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        for t in resp.topics:
            if t.error_code:
                self.partitions.pop(t.name, None)
                self.topic_ids.pop(t.name, None)
                continue
            self.partitions[t.name] = sorted(p.partition_index for p in t.partitions)
            tid = getattr(t, "topic_id", None)
            self.topic_ids[t.name] = str(tid) if tid is not None else str(ZERO_UUID)
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = p.leader_id
        self._meta_at = time.monotonic()

    def all_topics(self) -> list[str]:
        self.refresh(None)
        return sorted(self.partitions)

    def partitions_of(self, topics) -> dict[str, list[int]]:
        """{topic: [partitions]} of the existing topics among `topics` (metadata refreshed)."""
        topics = list(topics)
        if topics:
            self.refresh(topics)
        return {t: self.partitions[t] for t in topics if t in self.partitions}

    def leader(self, tp) -> int:
        lid = self.leaders.get(tp, -1)
        if lid < 0:
            self.refresh([tp[0]])
            lid = self.leaders.get(tp, -1)
        if lid < 0:
            raise for_code(5)(f"{tp[0]}-{tp[1]} has no leader")
        return lid

    def _with_retries(self, fn, attempts: int = 5):
        last = None
        for i in range(attempts):
            try:
                return fn()
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                last = e
            except KafkaError as e:
                if not e.retriable:
                    raise
                last = e
            time.sleep(self.retry_backoff_s * (i + 1))
        raise last

    # -- ListOffsets -----------------------------------------------------------------------------
    def list_offsets(self, specs: dict, isolation_level: int = 0, attempts: int = 5) -> dict:
        """{tp: timestamp_spec} -> {tp: (offset, timestamp)}; offset -1 when no record matches."""
        out: dict = {}
        pending = dict(specs)
        for i in range(attempts):
            if not pending:
                break
            by_leader: dict[int, list] = {}
            failed = {}
            for tp in pending:
                try:
                    by_leader.setdefault(self.leader(tp), []).append(tp)
                except KafkaError as e:
                    if not e.retriable:
                        raise
                    failed[tp] = e
            for node, tps in by_leader.items():
                topics: dict[str, list] = {}
                for tp in tps:
                    topics.setdefault(tp[0], []).append(ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=tp[1], timestamp=pending[tp]))
                req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
                    ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])
                try:
                    resp = self._call(node, req)
                except (KafkaConnectionError, KafkaTimeoutError) as e:
                    failed.update({tp: e for tp in tps})
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = (t.name, p.partition_index)
                        if p.error_code == 0:
                            off = p.offset
                            if off == -1 and p.old_style_offsets:
                                off = p.old_style_offsets[0]
                            out[tp] = (off, p.timestamp)
                        else:
                            err = for_code(p.error_code)(f"ListOffsets {tp[0]}-{tp[1]}")
                            if not err.retriable:
                                raise err
                            failed[tp] = err
            pending = {tp: pending[tp] for tp in failed}
            if pending:
                time.sleep(self.retry_backoff_s * (i + 1))
                self.refresh(sorted({tp[0] for tp in pending}))
        if pending:
            tp, err = next(iter(failed.items()))
            raise err
        return out

    def offset_bounds(self, tps, isolation_level: int = 0) -> dict:
        """{tp: (earliest, latest)} -- ListOffsets -2/-1, with `latest` checked against a Fetch's high
        watermark (last stable offset under read_committed), since some Kafka-compatible brokers answer
        ListOffsets(latest) with a stale value. Partitions that vanished are left out."""
        tps = list(tps)
        if not tps:
            return {}
        lo = self.list_offsets({tp: -2 for tp in tps}, isolation_level)
        hi = self.list_offsets({tp: -1 for tp in tps}, isolation_level)
        out = {}
        for tp in tps:
            if tp not in lo or tp not in hi:
                continue
            earliest, latest = lo[tp][0], hi[tp][0]
            try:
                pd = self.fetch(tp, latest, max_bytes=1, max_wait_ms=1, isolation_level=isolation_level)
            except KafkaError as e:
                if not e.retriable:
                    raise
                pd = None
            if pd is not None and pd.error_code == 0:
                mark = pd.last_stable_offset if isolation_level and pd.last_stable_offset >= 0 \
                    else pd.high_watermark
                latest = max(latest, mark)
                if pd.log_start_offset is not None and pd.log_start_offset > earliest:
                    earliest = pd.log_start_offset
            out[tp] = (earliest, latest)
        return out

    # -- Fetch ---------------------------------------------------------------------------------------
    def fetch(self, tp, offset: int, max_bytes: int = 8 << 20, max_wait_ms: int = 100,
              isolation_level: int = 0, min_bytes: int = 1, timeout_s: float | None = None):
        """One FetchRequest to the leader -> the PartitionData (error_code, high_watermark,
        log_start_offset, aborted_transactions, records)."""
        node = self.leader(tp)
        req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                           isolation_level=isolation_level, session_id=0, session_epoch=-1, topics=[
                               FetchRequest.FetchTopic(topic=tp[0], partitions=[
                                   FetchRequest.FetchTopic.FetchPartition(
                                       partition=tp[1], fetch_offset=offset, partition_max_bytes=max_bytes)])],
                           forgotten_topics_data=[], rack_id="")
        resp = self._call(node, req, timeout_s)
        if getattr(resp, "error_code", 0):
            raise for_code(resp.error_code)(f"Fetch {tp[0]}-{tp[1]}")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == tp[1]:
                    return p
        raise for_code(3)(f"Fetch response without {tp[0]}-{tp[1]}")

    # -- groups ---------------------------------------------------------------------------------------
    def coordinator(self, group_id: str) -> int:
        def find():
            resp = self._call(None, FindCoordinatorRequest(key=group_id, key_type=0))
            if resp.error_code:
                raise for_code(resp.error_code)(f"FindCoordinator {group_id}")
            self.brokers.setdefault(resp.node_id, (resp.host, resp.port))
            return resp.node_id
        return self._with_retries(find)

    def commit_offsets(self, group_id: str, offsets: dict, metadata: str = "") -> None:
        """Simple OffsetCommit (generation -1, empty member id) of {tp: next offset to read}."""
        topics: dict[str, list] = {}
        for (t, p), o in sorted(offsets.items()):
            topics.setdefault(t, []).append(OffsetCommitRequest.Topic.Partition(
                partition_index=p, committed_offset=o, committed_metadata=metadata))
        req = OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                                  topics=[OffsetCommitRequest.Topic(name=t, partitions=ps)
                                          for t, ps in topics.items()])

        def commit():
            node = self.coordinator(group_id)
            try:
                resp = self._call(node, req)
            except (KafkaConnectionError, KafkaTimeoutError):
                raise
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise for_code(p.error_code)(f"OffsetCommit {group_id} {t.name}-{p.partition_index}")
        self._with_retries(commit)

    def committed_offsets(self, group_id: str, tps) -> dict:
        """{tp: committed offset} for the partitions that have one (OffsetFetch v1-v7)."""
        topics: dict[str, list] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        req = OffsetFetchRequest(group_id=group_id, topics=[
            OffsetFetchRequest.Topic(name=t, partition_indexes=ps) for t, ps in topics.items()],
            require_stable=True)

        def fetch():
            resp = self._call(self.coordinator(group_id), req)
            if getattr(resp, "error_code", 0):
                raise for_code(resp.error_code)(f"OffsetFetch {group_id}")
            out = {}
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise for_code(p.error_code)(f"OffsetFetch {group_id} {t.name}-{p.partition_index}")
                    if p.committed_offset >= 0:
                        out[(t.name, p.partition_index)] = p.committed_offset
            return out
        return self._with_retries(fetch)

    # -- admin ----------------------------------------------------------------------------------------
    def create_topics(self, topics: dict, replication_factor: int = 1, configs: dict | None = None) -> None:
        """{name: partitions}; an existing topic is fine."""
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=n, num_partitions=p, replication_factor=replication_factor, assignments=[],
            configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                     for k, v in (configs or {}).items()]) for n, p in topics.items()], timeout_ms=30000)
        node = None
        self.refresh([])
        if self.brokers:
            node = min(self.brokers)      # any broker forwards to the controller (KIP-590)
        resp = self._call(node, req)
        for t in resp.topics:
            if t.error_code not in (0, 36):              # 36 TOPIC_ALREADY_EXISTS
                raise for_code(t.error_code)(f"CreateTopics {t.name}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.refresh(list(topics))
            if all(len(self.partitions.get(n, [])) == p and all(self.leaders.get((n, i), -1) >= 0
                   for i in range(p)) for n, p in topics.items()):
                return
            time.sleep(0.1)
        raise KafkaTimeoutError(f"topics {sorted(topics)} not ready after 30 s")
