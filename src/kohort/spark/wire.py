"""The Spark source's blocking client calls: what the driver and the executors need, nothing more.

The Spark source runs inside Spark's Python workers (a long-lived planner process on the driver, short
task workers on executors). `Cluster` is a thin layer over the client's one network layer: a
caller-driven `NetworkClient` (no background thread; each call sends and polls until its answer), so
bootstrap parsing (`PLAINTEXT://host:port` too), the ApiVersions handshake, version negotiation,
reconnect backoff and request timeouts are the client's own. Requests come from
`kohort.client.requests`, the builders and readers shared with the consumer and the admin.

* `Cluster(config)` -- Metadata (leaders, topic ids) for the topics asked about.
* `Cluster.list_offsets({tp: timestamp}, isolation_level)` -- ListOffsets routed to each leader
  (-2 earliest, -1 latest, >= 0 first offset with timestamp >= ts), retried on leader changes.
* `Cluster.fetch(tp, offset, ...)` -- one FetchRequest v4-v12 to the partition's leader (explicit
  assignment, no group membership); `send_fetch` + `fetch_result` split it so that a reader can
  have its next fetch in flight while it decodes the answer it has.
* `Cluster.commit_offsets(group, {tp: offset})` -- OffsetCommit with generation -1 and an empty
  member id (a "simple" commit, as kafka-consumer-groups.sh --reset-offsets does); `committed_offsets`.
* `create_topics` -- for the demo and tests.

`offset_bounds` checks ListOffsets(latest) against a Fetch's high watermark, which some brokers need
(Tansu answers latest with a stale offset). Writes go through kohort.client's Producer (see sink.py).
"""
from __future__ import annotations

import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass

from kohort.client import requests as R
from kohort.client.cluster import Cluster as MetadataView
from kohort.client.config import load_config
from kohort.client.network import NetworkClient
from kohort.errors import (
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    for_code,
)
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.fetch import FetchRequest

FETCH_MAX_VERSION = 12          # v13 names topics by id only (KIP-516)
ZERO_UUID = uuid.UUID(int=0)
DEFAULT_FETCH_BYTES = 1 << 20   # the consumer's max.partition.fetch.bytes default (spark-sql-kafka keeps Kafka's)


@dataclass(frozen=True)
class PendingFetch:
    """A Fetch sent by `Cluster.send_fetch` whose answer `Cluster.fetch_result` collects."""

    tp: tuple
    offset: int
    future: Future
    deadline: float        # time.monotonic() after which the wait gives up
    sent_at: float


class Cluster:
    """Metadata and blocking requests from a bootstrap list (kafka.* client config by Kafka names)."""

    def __init__(self, config: dict):
        cfg = dict(config)
        cfg.setdefault("client.id", "kohort-spark")
        self.config = load_config("consumer", cfg)
        self.client_id = self.config["client.id"]
        self.timeout_s = self.config["request.timeout.ms"] / 1000.0
        self.retry_backoff_s = self.config["retry.backoff.ms"] / 1000.0
        self.net = NetworkClient(self.config, role="consumer", io_thread=False)
        # the client's one metadata view; the source reads topics, it never creates them
        self.meta = MetadataView(self.net, self.config, auto_create=False)

    def close(self):
        self.net.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, node_id, request, timeout_s=None, **kw):
        """One blocking request to `node_id` (None: any broker)."""
        start = time.monotonic()
        try:
            return self.net.request(node_id, request, timeout_s, **kw)
        except (KafkaConnectionError, KafkaTimeoutError):
            if not self.net.has_connected():
                raise self.net.unreachable_error(time.monotonic() - start) from None
            raise

    # -- metadata (client/cluster.py's view) -----------------------------------------------------
    def refresh(self, topics=None) -> None:
        """Fresh metadata for `topics` (added to those tracked; None: just refresh them)."""
        if topics:
            self.meta.add_topics(topics)
        start = time.monotonic()
        try:
            self.meta.refresh(self.timeout_s)
        except KafkaTimeoutError:
            if not self.net.has_connected():
                raise self.net.unreachable_error(time.monotonic() - start) from None
            raise

    @property
    def brokers(self) -> dict[int, tuple[str, int]]:
        return self.meta.brokers

    @property
    def partitions(self) -> dict[str, list[int]]:
        return self.meta.snapshot.topics

    @property
    def topic_ids(self) -> dict[str, str]:
        s = self.meta.snapshot
        return {t: str(s.topic_ids.get(t) or ZERO_UUID) for t in s.topics}

    def all_topics(self) -> list[str]:
        """Every topic's name (a listing; the view keeps tracking only the topics asked about)."""
        resp = self._with_retries(lambda: self._call(None, R.metadata_request(None)))
        return sorted(t.name for t in resp.topics if not t.error_code and not t.is_internal)

    def partitions_of(self, topics) -> dict[str, list[int]]:
        """{topic: [partitions]} of the existing topics among `topics` (metadata refreshed)."""
        topics = list(topics)
        if topics:
            self.refresh(topics)
        parts = self.partitions
        return {t: parts[t] for t in topics if t in parts}

    def leader(self, tp) -> int:
        lid = self.meta.leader_for(tp)
        if lid is None:
            self.refresh([tp[0]])
            lid = self.meta.leader_for(tp)
        if lid is None:
            raise for_code(ErrorCode.LEADER_NOT_AVAILABLE)(f"{tp[0]}-{tp[1]} has no leader")
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
                req = R.list_offsets_request(0, {tp: pending[tp] for tp in tps}, isolation_level)
                try:
                    resp = self._call(node, req, max_version=7)
                except (KafkaConnectionError, KafkaTimeoutError) as e:
                    failed.update({tp: e for tp in tps})
                    continue
                for (t, part), (code, off, ts, _) in R.read_list_offsets(resp).items():
                    tp = (t, part)
                    if code == 0:
                        out[tp] = (off, ts)
                    else:
                        err = for_code(code)(f"ListOffsets {t}-{part}")
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
        sent = {}
        for tp in tps:                # every partition's check in flight at once: one round trip
            if tp in lo and tp in hi:
                try:
                    sent[tp] = self.send_fetch(tp, hi[tp][0], max_bytes=1, max_wait_ms=1,
                                               isolation_level=isolation_level)
                except KafkaError as e:
                    if not e.retriable:
                        raise
                    sent[tp] = None
        for tp in tps:
            if tp not in lo or tp not in hi:
                continue
            earliest, latest = lo[tp][0], hi[tp][0]
            try:
                pd = self.fetch_result(sent[tp]) if sent[tp] is not None else None
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
    def send_fetch(self, tp, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES, max_wait_ms: int = 100,
                   isolation_level: int = 0, min_bytes: int = 1, timeout_s: float | None = None) -> PendingFetch:
        """Send one FetchRequest to the partition's leader and return at once; `fetch_result` waits
        for its answer. The request is written out before returning (when the connection is ready),
        so the broker works on it while the caller decodes the previous answer."""
        node = self.leader(tp)
        req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                           isolation_level=isolation_level, session_id=0, session_epoch=-1, topics=[
                               FetchRequest.FetchTopic(topic=tp[0], partitions=[
                                   FetchRequest.FetchTopic.FetchPartition(
                                       partition=tp[1], fetch_offset=offset, partition_max_bytes=max_bytes)])],
                           forgotten_topics_data=[], rack_id="")
        t = self.timeout_s if timeout_s is None else timeout_s
        fut = self.net.send(node, req, timeout_ms=int(t * 1000), max_version=FETCH_MAX_VERSION, min_version=4)
        self.net.poll(0)
        return PendingFetch(tp, offset, fut, time.monotonic() + t + 1.0, time.monotonic())

    def fetch_result(self, pending: PendingFetch):
        """Wait for a fetch sent by `send_fetch` -> its PartitionData (raises what the request raised)."""
        tp, fut = pending.tp, pending.future
        try:
            while not fut.done():
                left = pending.deadline - time.monotonic()
                if left <= 0:
                    self.net.poll(0)          # an answer already in the socket is still taken
                    if fut.done():
                        break
                    raise KafkaTimeoutError(f"Fetch {tp[0]}-{tp[1]}: no answer in time")
                self.net.poll(min(left, 0.1))
            resp = fut.result(0)
        except (KafkaConnectionError, KafkaTimeoutError):
            if not self.net.has_connected():
                raise self.net.unreachable_error(time.monotonic() - pending.sent_at) from None
            raise
        if getattr(resp, "error_code", 0):
            raise for_code(resp.error_code)(f"Fetch {tp[0]}-{tp[1]}")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == tp[1]:
                    return p
        raise for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)(f"Fetch response without {tp[0]}-{tp[1]}")

    def fetch(self, tp, offset: int, max_bytes: int = DEFAULT_FETCH_BYTES, max_wait_ms: int = 100,
              isolation_level: int = 0, min_bytes: int = 1, timeout_s: float | None = None):
        """One FetchRequest to the leader -> the PartitionData (error_code, high_watermark,
        log_start_offset, aborted_transactions, records)."""
        return self.fetch_result(self.send_fetch(tp, offset, max_bytes, max_wait_ms, isolation_level, min_bytes,
                                                 timeout_s))

    # -- groups ---------------------------------------------------------------------------------------
    def coordinator(self, group_id: str) -> int:
        def find():
            c = R.read_find_coordinator(self._call(None, R.find_coordinator_request(group_id)))
            if c.error_code:
                raise for_code(c.error_code)(f"FindCoordinator {group_id}")
            cid = 0x7FFFFFFF - c.node_id       # the coordinator's own connection, as the consumer does
            self.net.set_node_address(cid, c.host, c.port)
            return cid
        return self._with_retries(find)

    def commit_offsets(self, group_id: str, offsets: dict, metadata: str = "") -> None:
        """Simple OffsetCommit (generation -1, empty member id) of {tp: next offset to read}."""
        req = R.simple_offset_commit(group_id, offsets, metadata)

        def commit():
            resp = self._call(self.coordinator(group_id), req, max_version=9)
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise for_code(p.error_code)(f"OffsetCommit {group_id} {t.name}-{p.partition_index}")
        self._with_retries(commit)

    def committed_offsets(self, group_id: str, tps) -> dict:
        """{tp: committed offset} for the partitions that have one (OffsetFetch)."""
        tps = list(tps)

        def fetch():
            resp = self._call(self.coordinator(group_id), R.offset_fetch(group_id, tps))
            code, got = R.read_offset_fetch(resp)
            if code:
                raise for_code(code)(f"OffsetFetch {group_id}")
            out = {}
            for tp, (perr, om) in got.items():
                if perr:
                    raise for_code(perr)(f"OffsetFetch {group_id} {tp[0]}-{tp[1]}")
                if om is not None:
                    out[(tp[0], tp[1])] = om.offset
            return out
        return self._with_retries(fetch)

    # -- admin ----------------------------------------------------------------------------------------
    def create_topics(self, topics: dict, replication_factor: int = 1, configs: dict | None = None) -> None:
        """{name: partitions}; an existing topic is fine."""
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=n, num_partitions=p, replication_factor=replication_factor, assignments=[],
            configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                     for k, v in (configs or {}).items()]) for n, p in topics.items()], timeout_ms=30000)
        resp = self._call(None, req)      # any broker forwards to the controller (KIP-590)
        for t in resp.topics:
            if t.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise for_code(t.error_code)(f"CreateTopics {t.name}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.refresh(list(topics))
            if all(len(self.partitions.get(n, [])) == p and all(self.meta.leader_for((n, i)) is not None
                   for i in range(p)) for n, p in topics.items()):
                return
            time.sleep(0.1)
        raise KafkaTimeoutError(f"topics {sorted(topics)} not ready after 30 s")

