"""Broker metrics in Prometheus text format (exposition format 0.0.4).

`Metrics` is fed by the server (`connection_opened()`, `connection_closed()`,
`observe(api_key, seconds, bytes_in, bytes_out)`), the produce/fetch handlers
(`record_messages_in(topic, n)`) and the share-group paths (`record_share_acknowledgements(batches)`
from the share partitions' leader, `record_share_request_failed(api)` from the ShareFetch /
ShareAcknowledge handlers); partition end offsets and sizes are read from storage at scrape time,
and so are the groups: state, members, generation/epoch, rebalances (counted by
broker/group_events.py), committed offset and lag per partition, group counts by type (Kafka's
group-count{protocol}) and share groups by state (share-group-count{state}).

Share groups (KIP-932; names after Kafka's KIP-932/KIP-1103 metrics where Kafka has one): the
groups' series above with type "share" (group epoch as the generation); per share partition on this
leader its start offset (SPSO), lag (KIP-1226), InFlightMessageCount, InFlightBatchCount, records
acquired now, records available or acquired by delivery count, and counters of acquisitions,
redeliveries, AcquisitionLockTimeoutPerSec's lock expiries and records archived at
share.delivery.count.limit (`SharePartition.counters`); broker-wide RecordAcknowledgementsPerSec by
ackType (GAP not counted, as Kafka) and failed ShareFetch / ShareAcknowledge requests. The share
requests' rates and times are kohort_requests_total / kohort_request_seconds with api="ShareFetch",
"ShareAcknowledge", "ShareGroupHeartbeat".

`serve_metrics(broker, host, port)` starts a tiny asyncio HTTP server answering GET /metrics.
"""
from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("kohort.broker.metrics")

# ShareFetch/ShareAcknowledge acknowledge types counted by RecordAcknowledgementsPerSec (GAP, 0, is not)
SHARE_ACK_TYPES = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}

# latency histogram buckets, seconds
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _api_names() -> dict[int, str]:
    from kohort.protocol.messages import REQUESTS
    out = {}
    for k, cls in REQUESTS.items():
        n = cls.__name__
        out[k] = n[:-len("Request")] if n.endswith("Request") else n
    return out


class _ApiStats:
    __slots__ = ("count", "total", "buckets", "bytes_in", "bytes_out")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * len(BUCKETS)
        self.bytes_in = 0
        self.bytes_out = 0


class Metrics:
    def __init__(self, broker=None) -> None:
        self.broker = broker
        self.connections = 0
        self.connections_total = 0
        self.apis: dict[int, _ApiStats] = {}
        self.messages_in: dict[str, int] = {}
        self.versions: dict[tuple[int, int], int] = {}   # (api_key, version) -> requests
        self.share_acknowledgements: dict[str, int] = {t: 0 for t in SHARE_ACK_TYPES.values()}
        self.share_requests_failed: dict[str, int] = {"ShareFetch": 0, "ShareAcknowledge": 0}
        self._names = _api_names()

    def connection_opened(self) -> None:
        self.connections += 1
        self.connections_total += 1

    def connection_closed(self) -> None:
        self.connections -= 1

    def observe(self, api_key: int, seconds: float, bytes_in: int, bytes_out: int,
                version: int | None = None) -> None:
        if version is not None:
            k = (api_key, version)
            self.versions[k] = self.versions.get(k, 0) + 1
        s = self.apis.get(api_key)
        if s is None:
            s = self.apis[api_key] = _ApiStats()
        s.count += 1
        s.total += seconds
        s.bytes_in += bytes_in
        s.bytes_out += bytes_out
        for i, b in enumerate(BUCKETS):
            if seconds <= b:
                s.buckets[i] += 1
                break

    def record_messages_in(self, topic: str, n: int) -> None:
        self.messages_in[topic] = self.messages_in.get(topic, 0) + n

    def record_share_acknowledgements(self, batches) -> None:
        """Applied acknowledgement batches (first_offset, last_offset, acknowledge_types), counted as
        Kafka's SharePartitionManager counts them: a batch of one type counts its whole range, a batch
        of per-offset types each offset by its type; GAP (0) is not counted."""
        acks = self.share_acknowledgements
        for b in batches:
            types = b.acknowledge_types
            if len(types) == 1:
                name = SHARE_ACK_TYPES.get(types[0])
                if name is not None:
                    acks[name] += b.last_offset - b.first_offset + 1
            else:
                for t in types:
                    name = SHARE_ACK_TYPES.get(t)
                    if name is not None:
                        acks[name] += 1

    def record_share_request_failed(self, api: str) -> None:
        self.share_requests_failed[api] = self.share_requests_failed.get(api, 0) + 1

    def render(self) -> str:
        out: list[str] = []
        add = out.append
        add("# HELP kohort_connections Open client connections.")
        add("# TYPE kohort_connections gauge")
        add(f"kohort_connections {self.connections}")
        add("# HELP kohort_connections_total Connections accepted since start.")
        add("# TYPE kohort_connections_total counter")
        add(f"kohort_connections_total {self.connections_total}")
        add("# HELP kohort_requests_total Requests handled, per API.")
        add("# TYPE kohort_requests_total counter")
        for k, s in sorted(self.apis.items()):
            add(f'kohort_requests_total{{api="{self._name(k)}"}} {s.count}')
        add("# HELP kohort_requests_by_version_total Requests handled, per API and version.")
        add("# TYPE kohort_requests_by_version_total counter")
        for (k, ver), n in sorted(self.versions.items()):
            add(f'kohort_requests_by_version_total{{api="{self._name(k)}",version="{ver}"}} {n}')
        add("# HELP kohort_request_seconds Request latency (receipt to response written), per API.")
        add("# TYPE kohort_request_seconds histogram")
        for k, s in sorted(self.apis.items()):
            api = self._name(k)
            cum = 0
            for b, n in zip(BUCKETS, s.buckets):
                cum += n
                add(f'kohort_request_seconds_bucket{{api="{api}",le="{b}"}} {cum}')
            add(f'kohort_request_seconds_bucket{{api="{api}",le="+Inf"}} {s.count}')
            add(f'kohort_request_seconds_sum{{api="{api}"}} {s.total:.6f}')
            add(f'kohort_request_seconds_count{{api="{api}"}} {s.count}')
        add("# HELP kohort_bytes_in_total Request bytes received, per API.")
        add("# TYPE kohort_bytes_in_total counter")
        for k, s in sorted(self.apis.items()):
            add(f'kohort_bytes_in_total{{api="{self._name(k)}"}} {s.bytes_in}')
        add("# HELP kohort_bytes_out_total Response bytes sent, per API.")
        add("# TYPE kohort_bytes_out_total counter")
        for k, s in sorted(self.apis.items()):
            add(f'kohort_bytes_out_total{{api="{self._name(k)}"}} {s.bytes_out}')
        add("# HELP kohort_messages_in_total Records appended, per topic.")
        add("# TYPE kohort_messages_in_total counter")
        for t, n in sorted(self.messages_in.items()):
            add(f'kohort_messages_in_total{{topic="{t}"}} {n}')
        sync = getattr(self.broker, "sync", None)
        if sync is not None:
            add("# HELP kohort_fsync_rounds_total Group-commit fsync rounds (log.flush.policy=fsync-before-ack).")
            add("# TYPE kohort_fsync_rounds_total counter")
            add(f"kohort_fsync_rounds_total {sync.rounds}")
            add("# HELP kohort_fsync_seconds_total Time spent in group-commit fsync rounds.")
            add("# TYPE kohort_fsync_seconds_total counter")
            add(f"kohort_fsync_seconds_total {sync.seconds:.6f}")
            add("# HELP kohort_fsync_waiters_total Produce requests answered after a group-commit round.")
            add("# TYPE kohort_fsync_waiters_total counter")
            add(f"kohort_fsync_waiters_total {sync.waiters_served}")
        self._render_groups(add)
        self._render_share(add)
        storage = getattr(self.broker, "storage", None)
        if storage is not None:
            logs = list(storage.logs())
            add("# HELP kohort_partition_log_end_offset Log end offset per partition.")
            add("# TYPE kohort_partition_log_end_offset gauge")
            for lg in logs:
                add(f'kohort_partition_log_end_offset{{topic="{lg.topic}",partition="{lg.partition}"}} '
                    f'{lg.log_end_offset}')
            add("# HELP kohort_partition_log_start_offset Log start offset per partition.")
            add("# TYPE kohort_partition_log_start_offset gauge")
            for lg in logs:
                add(f'kohort_partition_log_start_offset{{topic="{lg.topic}",partition="{lg.partition}"}} '
                    f'{lg.log_start_offset}')
            add("# HELP kohort_partition_size_bytes Bytes on disk per partition.")
            add("# TYPE kohort_partition_size_bytes gauge")
            for lg in logs:
                add(f'kohort_partition_size_bytes{{topic="{lg.topic}",partition="{lg.partition}"}} '
                    f'{lg.size_in_bytes}')
        return "\n".join(out) + "\n"

    def _render_groups(self, add) -> None:
        """Per group: state (one series per group with its state as a label, value 1), members,
        generation (classic) or group epoch (KIP-848), target-assignment epoch, rebalances; per group
        and partition: committed offset and lag (log end offset - committed, never below 0)."""
        rt = getattr(self.broker, "coordinator", None)
        if rt is None:
            return
        classic = rt.groups.classic_groups()
        consumer = rt.groups.consumer_groups()
        share = rt.groups.share_groups()
        groups = []        # (group, type, state, members, generation, target-assignment epoch)
        for gid, g in sorted(consumer.items()):
            groups.append((gid, "consumer", g.state.value, len(g.members), g.group_epoch, g.assignment_epoch))
        for gid, sg in sorted(share.items()):
            groups.append((gid, "share", sg.state, len(sg.members), sg.group_epoch, sg.assignment_epoch))
        for gid, g in sorted(classic.items()):
            if gid in consumer or (not g.members and g.protocol_type is None and g.generation_id == 0):
                continue        # a consumer group's offsets, or a simple group (offsets only): listed below
            groups.append((gid, "classic", g.state.value, len(g.members), g.generation_id, None))
        lbl = _label
        add("# HELP kohort_group_count Groups by type (Kafka's group-count{protocol}).")
        add("# TYPE kohort_group_count gauge")
        for typ in ("classic", "consumer", "share"):
            add(f'kohort_group_count{{protocol="{typ}"}} {sum(1 for g in groups if g[1] == typ)}')
        add("# HELP kohort_share_group_count Share groups by state (Kafka's share-group-count{state}).")
        add("# TYPE kohort_share_group_count gauge")
        for st in ("Empty", "Stable"):
            add(f'kohort_share_group_count{{state="{st}"}} {sum(1 for g in groups if g[1] == "share" and g[2] == st)}')
        add("# HELP kohort_group_state The group's state (value 1; the state is the label).")
        add("# TYPE kohort_group_state gauge")
        for gid, typ, state, *_ in groups:
            add(f'kohort_group_state{{group="{lbl(gid)}",type="{typ}",state="{state}"}} 1')
        add("# HELP kohort_group_members Members of the group.")
        add("# TYPE kohort_group_members gauge")
        for gid, _, _, n, *_ in groups:
            add(f'kohort_group_members{{group="{lbl(gid)}"}} {n}')
        add("# HELP kohort_group_generation Generation (classic groups) or group epoch (KIP-848 consumer and "
            "KIP-932 share groups).")
        add("# TYPE kohort_group_generation gauge")
        for gid, _, _, _, gen, _ in groups:
            add(f'kohort_group_generation{{group="{lbl(gid)}"}} {gen}')
        add("# HELP kohort_group_target_assignment_epoch Target-assignment epoch of a KIP-848 consumer group "
            "or a KIP-932 share group.")
        add("# TYPE kohort_group_target_assignment_epoch gauge")
        for gid, typ, _, _, _, aepoch in groups:
            if typ != "classic":
                add(f'kohort_group_target_assignment_epoch{{group="{lbl(gid)}"}} {aepoch}')
        add("# HELP kohort_group_rebalances_total Rebalances since the broker started (classic: PreparingRebalance "
            "entered; consumer and share groups: group epoch bumps).")
        add("# TYPE kohort_group_rebalances_total counter")
        for gid, n in sorted(rt.events.rebalances.items()):
            add(f'kohort_group_rebalances_total{{group="{lbl(gid)}"}} {n}')
        storage = getattr(self.broker, "storage", None)
        rows = []
        for gid, offsets in rt.groups.all_committed_offsets():
            for (topic, part), c in sorted(offsets.items()):
                end = None
                if storage is not None and storage.has_topic(topic):
                    try:
                        end = storage.log(topic, part).log_end_offset
                    except Exception:    # noqa: BLE001 - a partition gone since the commit
                        end = None
                rows.append((gid, topic, part, c.offset, end))
        add("# HELP kohort_group_committed_offset Committed offset per group and partition.")
        add("# TYPE kohort_group_committed_offset gauge")
        for gid, t, p, off, _ in rows:
            add(f'kohort_group_committed_offset{{group="{lbl(gid)}",topic="{t}",partition="{p}"}} {off}')
        add("# HELP kohort_group_lag Log end offset minus the committed offset, per group and partition.")
        add("# TYPE kohort_group_lag gauge")
        for gid, t, p, off, end in rows:
            if end is not None:
                add(f'kohort_group_lag{{group="{lbl(gid)}",topic="{t}",partition="{p}"}} {max(0, end - off)}')

    def _render_share(self, add) -> None:
        """Share partitions on this leader and the broker-wide share counters."""
        add("# HELP kohort_share_record_acknowledgements_total Records acknowledged, by type (Kafka's "
            "RecordAcknowledgementsPerSec{ackType}).")
        add("# TYPE kohort_share_record_acknowledgements_total counter")
        for t, n in self.share_acknowledgements.items():
            add(f'kohort_share_record_acknowledgements_total{{ack_type="{t}"}} {n}')
        add("# HELP kohort_share_requests_failed_total ShareFetch / ShareAcknowledge answers with an error, top "
            "level or on a partition (Kafka's FailedShareFetchRequestsPerSec, "
            "FailedShareAcknowledgementRequestsPerSec).")
        add("# TYPE kohort_share_requests_failed_total counter")
        for api, n in sorted(self.share_requests_failed.items()):
            add(f'kohort_share_requests_failed_total{{api="{api}"}} {n}')
        leader = getattr(self.broker, "share_leader", None)
        storage = getattr(self.broker, "storage", None)
        if leader is None or storage is None:
            return
        names = {t.topic_id: t.name for t in storage.topics()}
        rows = []           # (labels, share partition, start offset, lag)
        for (gid, tid, p), sp in sorted(leader.partitions.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), kv[0][2])):
            topic = names.get(tid)
            if topic is None:
                continue        # the topic is gone
            start, lag = leader.offset_and_lag(gid, tid, topic, p)
            rows.append((f'group="{_label(gid)}",topic="{topic}",partition="{p}"', sp, start, lag))
        gauges = [
            ("start_offset", "gauge", "Share-partition start offset (SPSO).", lambda r: r[2]),
            ("lag", "gauge", "Records not yet delivered to completion: high watermark - SPSO - records "
                             "acknowledged or archived past SPSO (KIP-1226).", lambda r: r[3]),
            ("in_flight_messages", "gauge", "Kafka's InFlightMessageCount: SPEO - SPSO + 1 while records are "
                                            "cached, else 0.", lambda r: r[1].in_flight_message_count()),
            ("in_flight_batches", "gauge", "Kafka's InFlightBatchCount: batches in the in-flight cache.",
             lambda r: r[1].in_flight_batch_count()),
            ("acquired_records", "gauge", "Records acquired by a member now (under an acquisition lock).",
             lambda r: r[1].in_flight_count()),
            ("records_acquired_total", "counter", "Record acquisitions (every delivery counts once).",
             lambda r: r[1].counters.acquired),
            ("records_redelivered_total", "counter", "Acquisitions with a delivery count above 1.",
             lambda r: r[1].counters.redelivered),
            ("acquisition_lock_timeouts_total", "counter", "Acquired records released because their lock expired "
                                                          "(Kafka's AcquisitionLockTimeoutPerSec).",
             lambda r: r[1].counters.lock_timeouts),
            ("delivery_limit_archived_total", "counter", "Records archived on reaching "
                                                        "share.delivery.count.limit.",
             lambda r: r[1].counters.delivery_limit_archived),
        ]
        for name, typ, text, value in gauges:
            add(f"# HELP kohort_share_partition_{name} {text}")
            add(f"# TYPE kohort_share_partition_{name} {typ}")
            for r in rows:
                add(f"kohort_share_partition_{name}{{{r[0]}}} {value(r)}")
        add("# HELP kohort_share_partition_records_by_delivery_count Records available or acquired at or past "
            "SPSO, by delivery count.")
        add("# TYPE kohort_share_partition_records_by_delivery_count gauge")
        for r in rows:
            for count, n in sorted(r[1].delivery_count_histogram().items()):
                add(f'kohort_share_partition_records_by_delivery_count{{{r[0]},delivery_count="{count}"}} {n}')

    def _name(self, api_key: int) -> str:
        return self._names.get(api_key, str(api_key))


def _label(v: str) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped."""
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def serve_metrics(broker, host: str, port: int) -> asyncio.base_events.Server:
    """Serve GET /metrics (any other path: 404) on host:port until the broker stops."""
    metrics = broker.metrics

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            while True:   # skip headers
                h = await asyncio.wait_for(reader.readline(), 5)
                if h in (b"\r\n", b"\n", b""):
                    break
            parts = line.decode("latin-1").split()
            if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] in ("/metrics", "/"):
                body = metrics.render().encode()
                head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
            else:
                body = b"not found\n"
                head = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
            writer.write(head + body)
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, UnicodeError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port, reuse_address=True)
    broker.metrics_port = server.sockets[0].getsockname()[1]

    async def _close():
        server.close()
        await server.wait_closed()
    broker._closers.append(_close)
    return server
