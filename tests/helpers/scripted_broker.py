"""A small scripted Kafka cluster for producer fault tests: real sockets, kohort's framing and schemas.

`ScriptedCluster(n)` runs n brokers on free 127.0.0.1 ports (threads). It answers ApiVersions, Metadata,
InitProducerId and Produce. Produce appends to in-memory logs and checks idempotent sequences like Kafka
(in order → append; an already-written batch → its original offset; a gap → OUT_OF_ORDER_SEQUENCE_NUMBER;
an unknown producer id with a non-zero sequence → UNKNOWN_PRODUCER_ID). Faults are scripted:

* `move_leader(topic, partition, node)`: the old leader answers NOT_LEADER_OR_FOLLOWER; node -1 makes
  the partition leaderless: Metadata names leader -1 with LEADER_NOT_AVAILABLE, as Kafka does for a
  partition whose only replica is down; `metadata_requests` counts the Metadata requests answered;
* `fail_next(topic, partition, code, n=1)`: the next n batches get that error code (nothing written);
* `drop_after_append(n=1)`: write the next n produce requests, then close the connection unanswered;
* `forget_producers()`: lose every producer's state (as a broker whose log was truncated would);
* `delay`: seconds to wait before answering each Produce (so requests pile up in flight).
* `gather`: before answering anything, wait (up to 3 s) until this many requests have arrived on the
  connection, then answer them in order: makes "N requests in flight" deterministic, not a matter of
  timing (a busy machine sent fewer in flight, and a fault test checking resends failed);
  `gather_rounds`: gather only that many times (None: every time), so that the requests after the
  scripted moment are not held back up to 3 s each when fewer are in flight.
"""
from __future__ import annotations

import socket
import threading
import time

from kohort.protocol.framing import FrameReader, decode_request, encode_response
from kohort.protocol.messages.api_versions import ApiVersionsResponse
from kohort.protocol.messages.init_producer_id import InitProducerIdResponse
from kohort.protocol.messages.metadata import MetadataResponse
from kohort.protocol.messages.produce import ProduceResponse
from kohort.protocol.records import iter_batches, iter_records

VERSIONS = {18: (0, 3), 3: (1, 8), 22: (0, 2), 0: (3, 8)}
NOT_LEADER, OUT_OF_ORDER, UNKNOWN_PID, LEADER_NOT_AVAILABLE = 6, 45, 59, 5


class ScriptedCluster:
    def __init__(self, n: int = 1, topics: dict | None = None):
        self.lock = threading.Lock()
        self.socks = []
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            self.socks.append(s)
        self.ports = [s.getsockname()[1] for s in self.socks]
        self.leaders: dict[tuple, int] = {}
        self.logs: dict[tuple, list] = {}          # tp -> [(key, value)]
        self.producers: dict[tuple, tuple] = {}    # (tp, pid) -> (last_seq, [(first_seq, last_seq, base_offset)])
        self.faults: dict[tuple, list] = {}
        self.drop = 0
        self.versions = dict(VERSIONS)           # what ApiVersions advertises (tests may remove APIs)
        self.delay = 0.0                          # seconds before answering each Produce
        self.gather = 0                           # requests to collect before answering (see above)
        self.most_gathered = 0                    # the most requests that were waiting at once
        self.gather_rounds: int | None = None     # gather this many times only (None: always)
        self.next_pid = 1000
        self.produce_requests = 0
        self.metadata_requests = 0
        self.conns: list[socket.socket] = []
        self.closed = False
        for t, parts in (topics or {}).items():
            for p in range(parts):
                self.leaders[(t, p)] = p % n
                self.logs[(t, p)] = []
        for i, s in enumerate(self.socks):
            threading.Thread(target=self._accept, args=(i, s), daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports[0]}"

    # -- scripting ---------------------------------------------------------------------------------
    def move_leader(self, topic, partition, node):
        with self.lock:
            self.leaders[(topic, partition)] = node

    def fail_next(self, topic, partition, code, n=1):
        with self.lock:
            self.faults.setdefault((topic, partition), []).extend([code] * n)

    def drop_after_append(self, n=1):
        with self.lock:
            self.drop += n

    def forget_producers(self):
        with self.lock:
            self.producers.clear()

    def values(self, topic, partition):
        with self.lock:
            return [v for _, v in self.logs[(topic, partition)]]

    def close(self):
        self.closed = True
        for s in self.socks + self.conns:
            try:
                s.close()
            except OSError:
                pass

    # -- serving -----------------------------------------------------------------------------------
    def _accept(self, node, s):
        while not self.closed:
            try:
                c, _ = s.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(node, c), daemon=True).start()

    def _serve(self, node, c):
        frames = FrameReader()
        try:
            while True:
                data = c.recv(1 << 20)
                if not data:
                    return
                pending = list(frames.feed(data))
                if self.gather and pending and self.gather_rounds != 0:
                    if self.gather_rounds:
                        self.gather_rounds -= 1
                    deadline = time.monotonic() + 3.0
                    c.settimeout(0.02)
                    while len(pending) < self.gather and time.monotonic() < deadline:
                        try:
                            more = c.recv(1 << 20)
                        except TimeoutError:
                            continue
                        if not more:
                            break
                        pending.extend(frames.feed(more))
                    c.settimeout(None)
                self.most_gathered = max(self.most_gathered, len(pending))
                for payload in pending:
                    header, req = decode_request(payload)
                    resp, drop = self._handle(node, header.request_api_key, req)
                    if drop:
                        c.close()
                        return
                    if resp is not None:
                        c.sendall(encode_response(resp, header.request_api_version, header.correlation_id))
        except OSError:
            return

    def _handle(self, node, api_key, req):
        if api_key == 18:
            A = ApiVersionsResponse.ApiVersion
            return ApiVersionsResponse(error_code=0, api_keys=[A(api_key=k, min_version=lo, max_version=hi)
                                                              for k, (lo, hi) in self.versions.items()],
                                       throttle_time_ms=0), False
        if api_key == 3:
            with self.lock:
                self.metadata_requests += 1
            return self._metadata(req), False
        if api_key == 22:
            with self.lock:
                self.next_pid += 1
                return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=self.next_pid,
                                              producer_epoch=0), False
        if api_key == 0:
            if self.delay:
                time.sleep(self.delay)
            return self._produce(node, req)
        raise AssertionError(f"unexpected api {api_key}")

    def _metadata(self, req):
        B = MetadataResponse.MetadataResponseBroker
        T = MetadataResponse.MetadataResponseTopic
        P = T.MetadataResponsePartition
        with self.lock:
            names = sorted({t for t, _ in self.leaders}) if req.topics is None else [t.name for t in req.topics]
            topics = []
            for name in names:
                parts = sorted(p for t, p in self.leaders if t == name)
                if not parts:
                    topics.append(T(error_code=3, name=name, is_internal=False, partitions=[]))
                    continue
                topics.append(T(error_code=0, name=name, is_internal=False, partitions=[
                    P(error_code=LEADER_NOT_AVAILABLE if self.leaders[(name, p)] < 0 else 0, partition_index=p,
                      leader_id=self.leaders[(name, p)], leader_epoch=0,
                      replica_nodes=[self.leaders[(name, p)]], isr_nodes=[self.leaders[(name, p)]],
                      offline_replicas=[]) for p in parts]))
            return MetadataResponse(throttle_time_ms=0, brokers=[B(node_id=i, host="127.0.0.1", port=port)
                                                                 for i, port in enumerate(self.ports)],
                                    cluster_id="scripted", controller_id=0, topics=topics)

    def _produce(self, node, req):
        T = ProduceResponse.TopicProduceResponse
        P = T.PartitionProduceResponse
        out = []
        with self.lock:
            self.produce_requests += 1
            for td in req.topic_data:
                parts = []
                for pd in td.partition_data:
                    tp = (td.name, pd.index)
                    code, base = self._append(node, tp, bytes(pd.records))
                    parts.append(P(index=pd.index, error_code=code, base_offset=base, log_append_time_ms=-1,
                                   log_start_offset=0, record_errors=[], error_message=None))
                out.append(T(name=td.name, partition_responses=parts))
            drop = self.drop > 0
            if drop:
                self.drop -= 1
        if req.acks == 0:
            return None, drop
        return ProduceResponse(responses=out, throttle_time_ms=0), drop

    def _append(self, node, tp, data):
        if self.leaders.get(tp) != node:
            return NOT_LEADER, -1
        faults = self.faults.get(tp)
        if faults:
            return faults.pop(0), -1
        (_, h), = list(iter_batches(data))
        log = self.logs[tp]
        if h.producer_id >= 0:
            key = (tp, h.producer_id)
            last, written = self.producers.get(key, (-1, []))
            last_seq = h.base_sequence + h.records_count - 1
            for first, lastq, off in written:
                if first == h.base_sequence and lastq == last_seq:
                    return 0, off                       # a retry of a written batch: its offset again
            if key not in self.producers and h.base_sequence != 0:
                return UNKNOWN_PID, -1
            if h.base_sequence != last + 1:
                return OUT_OF_ORDER, -1
            written = (written + [(h.base_sequence, last_seq, len(log))])[-5:]
            self.producers[key] = (last_seq, written)
        base = len(log)
        for _, _, k, v, _ in iter_records(data):
            log.append((k, v))
        return 0, base
