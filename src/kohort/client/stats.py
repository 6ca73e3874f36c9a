"""Client statistics: `statistics.interval.ms` and `stats_cb` (librdkafka's names) for kohort's Consumer and
Producer, a subset of librdkafka's statistics JSON fields as a dict.

* `RequestStats`: per broker requests and bytes sent/received and request round-trip times; attached to a
  NetworkClient as `network.stats` (called on whichever thread does the I/O; one lock).
* `ClientStats`: messages and bytes per partition (consumer: handed out by poll(); producer: acknowledged
  or failed batches), and `maybe_emit(extra)`, which builds the dict and calls `stats_cb` on the calling
  (application) thread once every `statistics.interval.ms`, as librdkafka serves stats_cb from poll().

The dict (librdkafka's field names; times in microseconds as librdkafka has them):
  name, client_id, type ("consumer"/"producer"), ts, time, age, tx, tx_bytes, rx, rx_bytes,
  txmsgs, txmsg_bytes (producer: acknowledged), rxmsgs, rxmsg_bytes (consumer: returned by poll),
  msg_cnt (producer: records not yet acknowledged),
  brokers: {"host:port/id": {name, nodeid, tx, txbytes, rx, rxbytes, req: {ApiName: n}, rtt: {min, max, avg, p50,
           p95, p99, cnt}}},
  topics: {topic: {topic, partitions: {"p": {partition, txmsgs, txbytes, txerrs | rxmsgs, rxbytes, next_offset,
          consumer_lag}}}},
  cgrp (consumer in a group): {state, rebalance_cnt, rebalance_reason, assignment_size, generation_id,
        member_id}.
"""
from __future__ import annotations

import threading
import time

RTT_WINDOW = 1000        # round trips kept per broker for the percentiles


def _api_name(api_key: int) -> str:
    from kohort.protocol.messages import REQUESTS
    cls = REQUESTS.get(api_key)
    n = cls.__name__ if cls is not None else str(api_key)
    return n[:-len("Request")] if n.endswith("Request") else n


class _Broker:
    __slots__ = ("tx", "txbytes", "rx", "rxbytes", "rtts", "req")

    def __init__(self) -> None:
        self.tx = self.txbytes = self.rx = self.rxbytes = 0
        self.rtts: list[float] = []
        self.req: dict[int, int] = {}


class RequestStats:
    """Requests, bytes and round trips per broker, fed by the NetworkClient."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.brokers: dict = {}
        self._sent: dict = {}          # (node, correlation id) -> monotonic send time

    def on_request(self, node, corr: int, api_key: int, nbytes: int, expect: bool) -> None:
        with self.lock:
            b = self.brokers.get(node)
            if b is None:
                b = self.brokers[node] = _Broker()
            b.tx += 1
            b.txbytes += nbytes
            b.req[api_key] = b.req.get(api_key, 0) + 1
            if expect:
                self._sent[(node, corr)] = time.monotonic()

    def on_response(self, node, corr: int, nbytes: int) -> None:
        now = time.monotonic()
        with self.lock:
            b = self.brokers.get(node)
            if b is None:
                b = self.brokers[node] = _Broker()
            b.rx += 1
            b.rxbytes += nbytes
            t = self._sent.pop((node, corr), None)
            if t is not None:
                b.rtts.append(now - t)
                if len(b.rtts) > RTT_WINDOW:
                    del b.rtts[:len(b.rtts) - RTT_WINDOW]

    def on_connection_adopted(self, old, new) -> None:
        """A bootstrap connection became broker `new`'s: its requests in flight are answered as `new`'s."""
        with self.lock:
            for k in [k for k in self._sent if k[0] == old]:
                self._sent[(new, k[1])] = self._sent.pop(k)

    def on_disconnect(self, node) -> None:
        with self.lock:                 # requests in flight on a lost connection are never answered
            for k in [k for k in self._sent if k[0] == node]:
                del self._sent[k]

    def snapshot(self, addresses: dict) -> dict:
        out = {}
        with self.lock:
            for node, b in self.brokers.items():
                host, port = addresses.get(node, ("?", 0)) if isinstance(node, int) else ("bootstrap", 0)
                name = f"{host}:{port}/{node}" if isinstance(node, int) and node >= 0 else f"{host}:{port}/bootstrap"
                rtts = sorted(b.rtts)
                us = [int(x * 1e6) for x in rtts]

                def pct(q):
                    return us[min(len(us) - 1, int(q * len(us)))] if us else 0
                out[name] = {"name": name, "nodeid": node if isinstance(node, int) else -1, "tx": b.tx,
                             "txbytes": b.txbytes, "rx": b.rx, "rxbytes": b.rxbytes,
                             "req": {_api_name(k): n for k, n in sorted(b.req.items())},
                             "rtt": {"min": us[0] if us else 0, "max": us[-1] if us else 0,
                                     "avg": int(sum(us) / len(us)) if us else 0, "p50": pct(0.5), "p95": pct(0.95),
                                     "p99": pct(0.99), "cnt": len(us)}}
        return out


class ClientStats:
    """Per-partition message counters and the periodic stats_cb of one client."""

    def __init__(self, kind: str, client_id: str, interval_ms: int, callback, network_stats: RequestStats):
        self.kind, self.client_id = kind, client_id
        self.interval = interval_ms / 1000
        self.callback = callback
        self.net = network_stats
        self.lock = threading.Lock()
        self.parts: dict = {}          # (topic, partition) -> [msgs, bytes, errors]
        self.t0 = time.monotonic()
        self.next_due = self.t0 + self.interval

    @classmethod
    def from_config(cls, kind: str, config, network) -> "ClientStats | None":
        """The stats of a client whose config sets statistics.interval.ms > 0 and stats_cb, else None;
        attaches a RequestStats to `network` (its `stats` attribute)."""
        interval, cb = config.get("statistics.interval.ms", 0), config.get("stats_cb")
        if not interval or cb is None:
            return None
        net = network.stats = RequestStats()
        network.add_disconnect_listener(lambda node, err: net.on_disconnect(node))
        return cls(kind, config["client.id"], interval, cb, net)

    def on_records(self, records) -> None:
        """Records handed to the application (consumer)."""
        with self.lock:
            parts = self.parts
            for r in records:
                k = (r.topic, r.partition)
                c = parts.get(k)
                if c is None:
                    c = parts[k] = [0, 0, 0]
                c[0] += 1
                c[1] += (len(r.value) if r.value is not None else 0) + (len(r.key) if r.key is not None else 0)

    def on_batch(self, topic: str, partition: int, count: int, nbytes: int, error) -> None:
        """A produced batch acknowledged (error None) or failed."""
        with self.lock:
            c = self.parts.get((topic, partition))
            if c is None:
                c = self.parts[(topic, partition)] = [0, 0, 0]
            if error is None:
                c[0] += count
                c[1] += nbytes
            else:
                c[2] += count

    def due(self) -> bool:
        return time.monotonic() >= self.next_due

    def maybe_emit(self, extra) -> None:
        """Call stats_cb with the statistics if statistics.interval.ms has passed; `extra()` gives the
        client's own part (brokers' addresses, topics' offsets and lag, group)."""
        now = time.monotonic()
        if now < self.next_due:
            return
        self.next_due = now + self.interval
        self.callback(self.build(extra()))

    def build(self, extra: dict) -> dict:
        now = time.monotonic()
        out = {"name": f"{self.client_id}#{self.kind}", "client_id": self.client_id, "type": self.kind,
               "ts": int(now * 1e6), "time": int(time.time()), "age": int((now - self.t0) * 1e6)}
        brokers = self.net.snapshot(extra.pop("addresses", {}))
        out["brokers"] = brokers
        out["tx"] = sum(b["tx"] for b in brokers.values())
        out["tx_bytes"] = sum(b["txbytes"] for b in brokers.values())
        out["rx"] = sum(b["rx"] for b in brokers.values())
        out["rx_bytes"] = sum(b["rxbytes"] for b in brokers.values())
        topics: dict = {}
        msgs = nbytes = 0
        with self.lock:
            counts = {k: list(v) for k, v in self.parts.items()}
        per_part = extra.pop("partitions", {})      # (topic, partition) -> extra fields
        for k in sorted(set(counts) | set(per_part)):
            t, p = k
            c = counts.get(k, [0, 0, 0])
            msgs += c[0]
            nbytes += c[1]
            entry = {"partition": p}
            if self.kind == "producer":
                entry.update(txmsgs=c[0], txbytes=c[1], txerrs=c[2])
            else:
                entry.update(rxmsgs=c[0], rxbytes=c[1])
            entry.update(per_part.get(k, {}))
            topics.setdefault(t, {"topic": t, "partitions": {}})["partitions"][str(p)] = entry
        out["topics"] = topics
        if self.kind == "producer":
            out["txmsgs"], out["txmsg_bytes"] = msgs, nbytes
        else:
            out["rxmsgs"], out["rxmsg_bytes"] = msgs, nbytes
        out.update(extra)
        return out
