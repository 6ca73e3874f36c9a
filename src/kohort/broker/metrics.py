"""Broker metrics in Prometheus text format (exposition format 0.0.4).

`Metrics` is fed by the server (`connection_opened()`, `connection_closed()`,
`observe(api_key, seconds, bytes_in, bytes_out)`) and the produce/fetch handlers
(`record_messages_in(topic, n)`); partition end offsets and sizes are read from storage at scrape
time, and so are the groups: state, members, generation/epoch, rebalances (counted by
broker/group_events.py), committed offset and lag per partition. `serve_metrics(broker, host, port)` starts a tiny asyncio HTTP server answering GET /metrics.
"""
from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("kohort.broker.metrics")

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
        groups = []        # (group, type, state, members, generation)
        for gid, g in sorted(consumer.items()):
            groups.append((gid, "consumer", g.state.value, len(g.members), g.group_epoch, g.assignment_epoch))
        for gid, g in sorted(classic.items()):
            if gid in consumer or (not g.members and g.protocol_type is None and g.generation_id == 0):
                continue        # a consumer group's offsets, or a simple group (offsets only): listed below
            groups.append((gid, "classic", g.state.value, len(g.members), g.generation_id, None))
        lbl = _label
        add("# HELP kohort_group_state The group's state (value 1; the state is the label).")
        add("# TYPE kohort_group_state gauge")
        for gid, typ, state, *_ in groups:
            add(f'kohort_group_state{{group="{lbl(gid)}",type="{typ}",state="{state}"}} 1')
        add("# HELP kohort_group_members Members of the group.")
        add("# TYPE kohort_group_members gauge")
        for gid, _, _, n, *_ in groups:
            add(f'kohort_group_members{{group="{lbl(gid)}"}} {n}')
        add("# HELP kohort_group_generation Generation (classic groups) or group epoch (KIP-848 consumer groups).")
        add("# TYPE kohort_group_generation gauge")
        for gid, _, _, _, gen, _ in groups:
            add(f'kohort_group_generation{{group="{lbl(gid)}"}} {gen}')
        add("# HELP kohort_group_target_assignment_epoch Target-assignment epoch of a KIP-848 consumer group.")
        add("# TYPE kohort_group_target_assignment_epoch gauge")
        for gid, typ, _, _, _, aepoch in groups:
            if typ == "consumer":
                add(f'kohort_group_target_assignment_epoch{{group="{lbl(gid)}"}} {aepoch}')
        add("# HELP kohort_group_rebalances_total Rebalances since the broker started (classic: PreparingRebalance "
            "entered; consumer groups: group epoch bumps).")
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
