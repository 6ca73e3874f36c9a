"""The fetcher: Fetch requests per leader broker, pipelined, records decoded in poll().

For each broker leading some fetchable partition there is at most one Fetch in flight (Kafka's rule,
and what fetch sessions need). When a response arrives the I/O thread only scans its batch headers,
advances the partitions' fetch offsets and buffers each partition's record bytes undecoded (a view of
the response frame); the next Fetch for that broker goes out at once as long as less than about two
responses' worth of data per partition is waiting -- so the broker is already serving the next batch
while the application processes the last. It is written from the answer's own callback
(`NetworkClient.send(at_once=True)`), and poll() is woken only after that: the I/O thread never
waits for the fetcher's lock, and so for the GIL, behind an application thread that was woken
first and then decodes for as long as the GIL lets it. A response's worth is
max.partition.fetch.bytes, or what the partition's last response brought when that was more (a
broker returns a whole first batch however large, and some, Tansu among them, return several
batches past the limit): a response bigger than the limit then does not stop fetching until poll()
has drained it. Overall, what is buffered plus what the next answer may bring stays within two
answers' worth, 2 x fetch.max.bytes: each Fetch asks for the room left (its max_bytes, at most
fetch.max.bytes; none leaves while less than max.partition.fetch.bytes is left). So an answer that
fills fetch.max.bytes (64 partitions of 1 MiB each against the default 50 MiB) is followed at once
by a Fetch for what is left of the backlog, not only once poll() has decoded part of it, and the
memory bound is what it was with a Fetch sent only below fetch.max.bytes buffered (per broker).
When poll() uses up a chunk and its partition falls below that limit, the partition's
next Fetch leaves at once, from poll() (if none is in flight to that broker), not when poll() returns:
a poll() handing out several buffered answers (max.poll.records above one answer's records) would
otherwise leave the broker idle for as long as it decodes them. poll() decodes the records on the
application's thread, only as many as it hands out (max.poll.records), with `records.RecordCursor`
(the compiled decoder when built, which builds the ConsumerRecord tuples), each call resuming where
the last stopped, mid-batch too, so a compressed batch is decompressed once; the I/O thread then
does not compete with the application for the GIL over decoding. check.crcs is applied there too, as
Java's consumer does (CompletedFetch checks each batch as its records are read): each batch's CRC
when the decode reaches it (the compiled cursor releases the GIL for large batches), not on the I/O
thread between an answer and the next Fetch. A batch that fails its CRC ends the chunk like any
undecodable one: the records before it are handed out, then poll() raises an error naming the
partition and the offset, and the position stays on that batch.

Per partition the fetcher keeps `fetch_offset` (next to request) apart from `position` (next to
hand out). A seek bumps the partition's seek_epoch; data fetched under an older epoch is dropped.

Incremental fetch sessions (KIP-227): `FetchSession` sends the full partition set first, then only
partitions whose fetch state changed plus a forgotten list; FETCH_SESSION_ID_NOT_FOUND /
INVALID_FETCH_SESSION_EPOCH or any failure starts over with a full request.

read_committed (KIP-98): records of aborted transactions are dropped using the response's
aborted_transactions list and the ABORT markers (a partition's kept batches are decoded together at
its first step); the broker stops at the last stable offset.
Truncation (KIP-320): Fetch v12+ carries last_fetched_epoch and a diverging_epoch in the answer;
the position then moves back to the divergence point. Offset out of range goes through
auto.offset.reset (none raises an error naming the partitions).

Memory: fetch.max.bytes / max.partition.fetch.bytes bound the compressed bytes of a response; what
they decompress to is bounded by one `DecompressionBudget` per response (256 MiB, shared by its
partitions, spent as poll() decodes them, in the order they were buffered), and a partition whose
records decompress to more than was fetched counts the larger size against the pipelining limits
until they are handed out. A partition whose records do not fit what the budget has left after the
response's other partitions is fetched again from its position and decoded first in the next
response; one that does not fit a whole budget, or whose bytes do not decode, raises an error naming
it and its offset from poll(), and keeps its position (as Kafka's consumer, until the application
seeks past the record).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future

from kohort.client.consumer.offsets import (
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED, NoOffsetForPartitionError, SubscriptionState,
    list_offsets_request,
)
from kohort.protocol.framing import Versioned
from kohort.client.requests import read_list_offsets
from kohort.errors import ErrorCode, KafkaError, for_code
from kohort.protocol.messages.fetch import FetchRequest, fetch_request
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from kohort.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from kohort.protocol.primitives import ZERO_UUID
from kohort.protocol.records import (
    DEFAULT_MAX_SIZE, AbortedTransactions, DecodeError, DecompressionBudget, RecordCursor,
    decode_records_list, iter_batches, scan_batches, validate_batch,
)
from kohort.structs import ConsumerRecord, TopicPartition

log = logging.getLogger("kohort.client.fetcher")

FETCH_KEY = FetchRequest.API_KEY
LIST_OFFSETS_KEY = ListOffsetsRequest.API_KEY
OFFSET_FOR_LEADER_EPOCH_KEY = OffsetForLeaderEpochRequest.API_KEY
OFFSET_OUT_OF_RANGE = ErrorCode.OFFSET_OUT_OF_RANGE
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH
FETCH_SESSION_ID_NOT_FOUND = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
INVALID_FETCH_SESSION_EPOCH = ErrorCode.INVALID_FETCH_SESSION_EPOCH
# partition errors that mean the metadata (leaders, topic ids) is stale
_REFRESH_ERRORS = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INCONSISTENT_TOPIC_ID,
})
_new = tuple.__new__


class FetchSession:
    """Client side of one incremental fetch session with one broker (KIP-227)."""

    def __init__(self):
        self.session_id = 0
        self.epoch = 0                   # 0: next request is full (and asks for a new session)
        self.sent: dict[TopicPartition, tuple] = {}

    def build(self, wanted: dict[TopicPartition, tuple]) -> tuple[dict, list, dict]:
        """-> (partitions to send, forgotten partitions, the session view after this request)."""
        if self.epoch == 0:
            return dict(wanted), [], dict(wanted)
        send = {tp: st for tp, st in wanted.items() if self.sent.get(tp) != st}
        forgotten = [tp for tp in self.sent if tp not in wanted]
        return send, forgotten, dict(wanted)

    def on_response(self, error_code: int, session_id: int, view: dict) -> None:
        if error_code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
            self.reset()
            return
        if self.epoch == 0:
            if session_id:
                self.session_id, self.epoch = session_id, 1
            self.sent = view
            return
        self.sent = view
        self.epoch = 1 if self.epoch >= 0x7FFFFFFF else self.epoch + 1

    def reset(self) -> None:
        self.session_id, self.epoch, self.sent = 0, 0, {}


class _Completed:
    """One partition's records from one Fetch response, waiting in the buffer undecoded (a view of the
    response frame) until poll() decodes and hands them out a step at a time (`Fetcher.collect`).

    `budget` is the response's DecompressionBudget (shared by its partitions); `full` tells, once
    decoding began, whether the budget was whole then; `spent` is what its steps decompressed so
    far and `nbytes` what it counts against the pipelining limits (fetched bytes, or `spent` when
    larger); `node` is the broker it came from. read_committed with aborted transactions decodes the kept batches at the first step
    into `records`, handed out from `index`; otherwise `cursor` (records.RecordCursor) resumes where
    the last step stopped, mid-batch too."""

    __slots__ = ("tp", "data", "fetch_offset", "legacy", "aborted", "budget", "cursor", "records", "index",
                 "next_offset", "next_epoch", "seek_epoch", "fetched", "nbytes", "spent", "full", "released",
                 "node")

    def __init__(self, tp, data, fetch_offset, legacy, aborted, budget, next_offset, next_epoch, seek_epoch,
                 nbytes, node):
        self.tp, self.data, self.fetch_offset, self.legacy, self.aborted = tp, data, fetch_offset, legacy, aborted
        self.budget, self.cursor, self.records, self.index = budget, None, None, 0
        self.next_offset, self.next_epoch, self.seek_epoch = next_offset, next_epoch, seek_epoch
        self.fetched = self.nbytes = nbytes
        self.spent = 0
        self.full: bool | None = None
        self.released = False
        self.node = node                 # the broker that answered (the partition's leader then)


def decode_partition(topic: str, partition: int, data, fetch_offset: int, *, check_crcs: bool = True,
                     aborted=None, read_committed: bool = False, key_deserializer=None,
                     value_deserializer=None,
                     max_size: int | DecompressionBudget = DEFAULT_MAX_SIZE) -> tuple[list, int, int | None]:
    """Records at or after `fetch_offset` in a Fetch response's record bytes.

    -> (records, next fetch offset, leader epoch of the last batch read or None). The common case
    goes through records.decode_records_list (C when built), which fills ConsumerRecord tuples
    directly; read_committed with aborted transactions in the response decodes the kept batches
    one by one. `max_size` bounds what all batches decompress to together (an int, or a
    DecompressionBudget shared with the response's other partitions)."""
    d = data if type(data) is bytes else bytes(data)
    next_offset, last_epoch, legacy = scan_batches(d, fetch_offset, check_crcs)
    if read_committed and aborted:
        out = _decode_read_committed(topic, partition, d, fetch_offset, False, aborted, max_size)
    else:
        # v2 CRCs were checked in scan_batches (the crc32c package is much faster per byte)
        out = decode_records_list(d, check_crcs and legacy, max_size, min_offset=fetch_offset,
                                  record_factory=ConsumerRecord, prefix=(topic, partition))
    return _deserialize(out, key_deserializer, value_deserializer), next_offset, last_epoch


def _decode_read_committed(topic, partition, d, fetch_offset, check_crcs, aborted,
                           max_size: int | DecompressionBudget = DEFAULT_MAX_SIZE) -> list:
    """KIP-98 consumer-side filtering (records.AbortedTransactions) into ConsumerRecords."""
    out: list = []
    budget = max_size if type(max_size) is DecompressionBudget else DecompressionBudget(max_size)
    keep = AbortedTransactions(aborted).keep
    view = memoryview(d)
    for pos, h in iter_batches(d):
        if h.next_offset <= fetch_offset:
            continue
        if check_crcs:
            validate_batch(d, pos)
        if not keep(d, pos, h):
            continue
        out += decode_records_list(view[pos:pos + h.total_size], False, budget, min_offset=fetch_offset,
                                   record_factory=ConsumerRecord, prefix=(topic, partition))
    return out


def partition_decode_error(tp, fetch_offset: int, e: Exception) -> Exception:
    """A decode failure of one partition's fetched records, naming the partition and offset
    (same class for DecodeError and its subclasses, the cause chained)."""
    msg = (f"records of {tp.topic}-{tp.partition} fetched at offset {fetch_offset} could not be "
           f"decoded: {e}. If needed, seek past the record to continue consumption.")
    err = type(e)(msg) if isinstance(e, DecodeError) else DecodeError(msg)
    err.__cause__ = e
    return err


def _deserialize(records: list, kd, vd) -> list:
    if kd is None and vd is None:
        return records
    kd = kd or (lambda b: b)
    vd = vd or (lambda b: b)
    return [_new(ConsumerRecord, (r[0], r[1], r[2], r[3], r[4], kd(r[5]), vd(r[6]), r[7], r[8])) for r in records]


class Fetcher:
    """Pipelined fetching for the partitions in a SubscriptionState. See the module docstring."""

    def __init__(self, network, cluster, subs: SubscriptionState, config):
        self.network = network
        self.cluster = cluster
        self.subs = subs
        self.lock = subs.lock
        self.max_wait_ms = config["fetch.max.wait.ms"]
        self.min_bytes = config["fetch.min.bytes"]
        self.max_bytes = config["fetch.max.bytes"]
        self.partition_max_bytes = config["max.partition.fetch.bytes"]
        self.check_crcs = config["check.crcs"]
        # what the records of one Fetch response may decompress to, all partitions together
        self.decompression_budget = DEFAULT_MAX_SIZE
        self._budget_first: set[TopicPartition] = set()     # decoded first in the next response
        self.read_committed = config["isolation.level"] == "read_committed"
        self.isolation_level = READ_COMMITTED if self.read_committed else 0
        self.rack_id = config["client.rack"]
        self.key_deserializer = config["key.deserializer"]
        self.value_deserializer = config["value.deserializer"]
        self.request_timeout_ms = config["request.timeout.ms"]
        self._buffer: deque[_Completed] = deque()
        self._buffered_bytes: dict[TopicPartition, int] = {}
        self._last_fetched: dict[TopicPartition, int] = {}    # record bytes of each partition's last chunk
        self._inflight: set[int] = set()
        self._sessions: dict[int, FetchSession] = {}
        self._errors: deque[BaseException] = deque()
        self._cond = threading.Condition(self.lock)
        self._resetting: set[TopicPartition] = set()
        self._validating: set[TopicPartition] = set()
        self._closed = False
        self.records_fetched = 0

    # -- sending ------------------------------------------------------------------------------------
    def send_fetches(self) -> None:
        """Send a Fetch to every leader with fetchable partitions and no fetch in flight."""
        if self._closed:
            return
        cluster = self.cluster.snapshot
        by_node: dict[int, dict] = {}
        with self.lock:
            # pipelining depth: keep fetching a partition until about two responses' worth of its
            # data wait in the buffer; overall, what is buffered plus what the next answer may
            # bring stays within two answers' worth (2 x fetch.max.bytes): the Fetch asks for the
            # room left, at most fetch.max.bytes, and waits while less than one partition's worth
            # is left (see the module docstring)
            max_bytes = self._request_max_bytes()
            if max_bytes is None:
                return
            for tp, st in self.subs.partitions.items():
                if not self._below_limit(tp, st):
                    continue
                info = cluster.partitions.get(tp)
                if info is None or info.leader < 0:
                    continue
                node = info.leader
                if node in self._inflight:
                    continue
                by_node.setdefault(node, {})[tp] = (st.fetch_offset, info.leader_epoch,
                                                    -1 if st.fetch_epoch is None else st.fetch_epoch,
                                                    self.partition_max_bytes, st.seek_epoch)
            for node in by_node:
                self._inflight.add(node)
        # a fetchable partition without a known leader (its leader is down, or metadata has not
        # named one yet) asks for fresh metadata on every round, whether or not other partitions
        # are fetched meanwhile (Java's prepareFetchRequests); Cluster spaces out refreshes whose
        # answers stay stale; the partition is fetched once a leader is named
        missing = [tp for tp in self.subs.fetchable()
                   if (info := cluster.partitions.get(tp)) is None or info.leader < 0]
        if missing:
            self._raise_if_denied({tp[0] for tp in missing})
            self.cluster.add_topics({tp[0] for tp in missing})
            self.cluster.request_update()
        for node, parts in by_node.items():
            self._send(node, parts, cluster, max_bytes)

    def _request_max_bytes(self) -> int | None:
        """The max_bytes of the next Fetch: the room left below two answers' worth of buffered record
        bytes (2 x fetch.max.bytes), at most fetch.max.bytes; None (no Fetch now) while that room is
        less than max.partition.fetch.bytes. Called with the lock held."""
        room = 2 * self.max_bytes - sum(self._buffered_bytes.values())
        if room < min(self.max_bytes, self.partition_max_bytes):
            return None
        return min(self.max_bytes, room)

    def _raise_if_denied(self, topics, locked: bool = False) -> None:
        """Topics the metadata answers TOPIC_AUTHORIZATION_FAILED for: poll() raises it (Java's
        Metadata.maybeThrowAnyException), once per poll rather than waiting for a leader forever."""
        denied = sorted(t for t in topics if self.cluster.topic_error(t) == ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if not denied:
            return
        err = for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED)(f"not authorized to access topics {denied}")
        if locked:
            if not self._errors:
                self._errors.append(err)
                self._cond.notify_all()
            return
        with self.lock:
            if not self._errors:
                self._errors.append(err)
                self._cond.notify_all()

    def _send(self, node: int, parts: dict, snap, max_bytes: int) -> None:
        session = self._sessions.setdefault(node, FetchSession())
        wanted = {tp: v[:4] for tp, v in parts.items()}
        send, forgotten, view = session.build(wanted)
        topic_ids = {tp[0]: snap.topic_ids.get(tp[0]) for tp in list(wanted) + forgotten}
        use_ids = all(tid is not None and tid != ZERO_UUID for tid in topic_ids.values())
        seek_epochs = {tp: v[4] for tp, v in parts.items()}
        sid, sep = session.session_id, session.epoch

        def build(version: int) -> FetchRequest:
            return fetch_request(self.max_wait_ms, self.min_bytes, max_bytes, self.isolation_level, sid, sep,
                                 send, forgotten, topic_ids, self.rack_id)

        # at_once: from the I/O thread (an answer's callback) written now, before anything else
        fut = self.network.send(node, Versioned(FETCH_KEY, build), max_version=None if use_ids else 12,
                                timeout_ms=self.request_timeout_ms + self.max_wait_ms, at_once=True)
        fut.add_done_callback(lambda f: self._on_fetch(node, session, view, seek_epochs, wanted, f))

    # -- receiving (I/O thread) --------------------------------------------------------------------
    def _on_fetch(self, node, session: FetchSession, view, seek_epochs, wanted, fut: Future) -> None:
        try:
            resp = fut.result()
        except BaseException as e:
            session.reset()
            with self.lock:
                self._inflight.discard(node)
            log.debug("fetch from broker %s failed: %s", node, e)
            self.cluster.request_update()
            return
        buffered = False
        try:
            buffered = self._scan_fetch(node, session, view, seek_epochs, wanted, resp, fut.api_version)
        except Exception as e:  # a malformed response must not kill the I/O thread
            log.exception("fetch response from broker %s could not be handled", node)
            session.reset()
            with self.lock:
                self._errors.append(e)
                self._cond.notify_all()
        finally:
            with self.lock:
                self._inflight.discard(node)
        # the next fetch goes out at once (written from here, this I/O thread's own callback): fetch
        # offsets were advanced by the header scan, and the records wait undecoded for poll().
        # Only then is the application woken: woken first, it takes the fetcher's lock on its way
        # out of wait() while it waits for the GIL, and this thread, blocked on that lock in
        # send_fetches, would hand the GIL over and wait out the application's whole decode
        # before writing the Fetch
        self.send_fetches()
        if buffered:
            with self.lock:
                self._cond.notify_all()

    def _scan_fetch(self, node, session, view, seek_epochs, wanted, resp, version) -> bool:
        """Errors, watermarks and the next fetch offset of each partition (batch headers only); each
        partition's record bytes are buffered undecoded for poll(), under one DecompressionBudget for
        the response, partitions refused for want of budget last time first. -> whether records
        were buffered (the caller wakes poll() once it has sent the next Fetch)."""
        top = getattr(resp, "error_code", 0)
        session.on_response(top, getattr(resp, "session_id", 0), view)
        if top:
            if top not in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
                log.warning("fetch from broker %s failed: %s", node, for_code(top).name)
            return False
        names = None
        if version >= 13:
            names = {tid: t for t, tid in self.cluster.snapshot.topic_ids.items()}
        scanned = []
        refresh = False
        for t in resp.responses:
            topic = names.get(t.topic_id) if names is not None else t.topic
            if topic is None:
                refresh = True
                continue
            for p in t.partitions:
                tp = TopicPartition(topic, p.partition_index)
                req = wanted.get(tp)
                if req is None:
                    continue
                fetch_offset = req[0]
                err = p.error_code
                if err:
                    self._partition_error(tp, err, fetch_offset, seek_epochs.get(tp))
                    refresh |= err in _REFRESH_ERRORS
                    continue
                de = p.diverging_epoch if version >= 12 else None
                if de is not None and de.epoch >= 0 and de.end_offset >= 0:
                    self._truncated(tp, de.epoch, de.end_offset, seek_epochs.get(tp))
                    continue
                records = p.records
                if records is not None and len(records):
                    # a view of the response frame (no copy): the scan and the C decoder read it
                    data = records if isinstance(records, memoryview) else memoryview(records)
                    # headers only: CRCs are checked as poll() decodes (see the module docstring)
                    nxt, ep, legacy = scan_batches(data, fetch_offset)
                else:
                    data, nxt, ep, legacy = None, fetch_offset, None, False
                scanned.append((tp, data, fetch_offset, nxt, ep, legacy, p, seek_epochs.get(tp)))
                cur = p.current_leader if version >= 12 else None
                if cur is not None and cur.leader_epoch >= 0:
                    self.cluster.observe_leader_epoch(tp, cur.leader_epoch)
        if refresh:
            self.cluster.request_update()
        budget = DecompressionBudget(self.decompression_budget)
        with self.lock:
            parts = self.subs.partitions
            chunks = []
            for tp, data, fetch_offset, nxt, ep, legacy, p, seek_epoch in scanned:
                st = parts.get(tp)
                if st is None or st.seek_epoch != seek_epoch or st.fetch_offset != fetch_offset:
                    continue
                st.high_watermark = p.high_watermark
                st.last_stable_offset = p.last_stable_offset
                st.log_start_offset = p.log_start_offset
                if nxt <= fetch_offset:
                    continue
                st.fetch_offset = nxt
                if ep is not None:
                    st.fetch_epoch = ep
                nbytes = len(data)
                self._buffered_bytes[tp] = self._buffered_bytes.get(tp, 0) + nbytes
                self._last_fetched[tp] = nbytes
                chunks.append(_Completed(tp, data, fetch_offset, legacy, p.aborted_transactions, budget, nxt, ep,
                                         seek_epoch, nbytes, node))
            if chunks:
                first = self._budget_first
                if first:
                    chunks.sort(key=lambda c: c.tp not in first)
                self._buffer.extend(chunks)
        return bool(chunks)

    def _partition_error(self, tp, err: int, fetch_offset: int, seek_epoch) -> None:
        if err == OFFSET_OUT_OF_RANGE:
            with self.lock:
                st = self.subs.partitions.get(tp)
                if st is None or st.seek_epoch != seek_epoch:
                    return
                strategy = self.subs.default_reset
                if strategy == "none":
                    self._errors.append(NoOffsetForPartitionError([tp], f"fetch offset {fetch_offset} is out of range"))
                    st.fetch_offset = None
                    self._cond.notify_all()
                    return
                log.info("fetch offset %s of %s is out of range; resetting to %s", fetch_offset, tp, strategy)
                self.subs.request_reset([tp], strategy)
                self._cond.notify_all()
            return
        if err in (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH):
            # KIP-320: the leader changed under us; re-validate the position before fetching again
            with self.lock:
                st = self.subs.partitions.get(tp)
                if st is not None and st.seek_epoch == seek_epoch and st.position_epoch is not None:
                    st.awaiting_validation = True
        if err in _REFRESH_ERRORS:
            self.cluster.on_partition_error(tp, err)
            return
        if err in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED):
            with self.lock:
                self._errors.append(for_code(err)(f"fetching {tp}"))
                self._cond.notify_all()
            return
        log.warning("fetch of %s failed: %s", tp, for_code(err).name)

    def _truncated(self, tp, epoch: int, end_offset: int, seek_epoch) -> None:
        """KIP-320: the log diverged from what we consumed; continue from the divergence point."""
        with self.lock:
            st = self.subs.partitions.get(tp)
            if st is None or st.seek_epoch != seek_epoch:
                return
            if st.position is not None and end_offset < st.position:
                log.warning("log truncation detected on %s: position %s is past the end offset %s of epoch %s; "
                            "resuming at %s", tp, st.position, end_offset, epoch, end_offset)
                self.subs.seek(tp, end_offset, epoch)
                self._drop(tp)
            else:
                st.fetch_epoch = epoch
                st.fetch_offset = min(st.fetch_offset, end_offset) if st.fetch_offset is not None else end_offset

    # -- handing out (app thread) ---------------------------------------------------------------------
    def collect(self, max_records: int) -> list:
        """Up to `max_records` records, decoded here (on the application's thread) from the buffered
        record bytes, only as many as are handed out; advances positions. Raises a pending fetch
        error, or the DecodeError of a partition whose records fail to decode with the response's
        whole decompression budget."""
        out: list = []
        lock = self.lock
        parts = self.subs.partitions
        with lock:
            if self._errors:
                raise self._errors.popleft()
        while len(out) < max_records:
            with lock:
                c = st = None
                stale = []
                for b in self._buffer:
                    s = parts.get(b.tp)
                    if s is None or s.seek_epoch != b.seek_epoch:
                        stale.append(b)
                    elif not s.paused:
                        c, st = b, s
                        break
                for b in stale:
                    self._remove(b)
                if c is None or st is None:
                    break
            want = max_records - len(out)
            refill = False
            try:
                recs, done = self._step(c, want)
            except Exception as e:
                self._failed(c, e)
                with lock:
                    if self._errors:
                        if out:
                            break       # raised from the next poll
                        raise self._errors.popleft()
                continue
            with lock:
                if c.released or st.seek_epoch != c.seek_epoch or parts.get(c.tp) is not st:
                    continue        # dropped (seek, truncation) while it was decoded
                if c.spent > c.nbytes:
                    self._buffered_bytes[c.tp] = self._buffered_bytes.get(c.tp, 0) + c.spent - c.nbytes
                    c.nbytes = c.spent
                self.records_fetched += len(recs)
                if done:
                    self._remove(c)
                    st.position = c.next_offset
                    if c.next_epoch is not None:
                        st.position_epoch = c.next_epoch
                    refill = self._wants_fetch(c, st)
                elif recs:
                    last = recs[-1]
                    st.position = last[2] + 1
                    if last[8] is not None:
                        st.position_epoch = last[8]
            if recs:
                out += recs
            if refill:
                # the partition dropped below its pipelining limit: its next Fetch goes out now,
                # in flight while this call decodes what else is buffered and the application
                # handles the records, rather than after this call returns. A failure here ends
                # this call with the records already taken (their positions are advanced); poll()
                # calls send_fetches() next anyway
                try:
                    self.send_fetches()
                except Exception as e:
                    log.debug("fetching from inside poll() failed: %s", e)
                    break
        return out

    def _below_limit(self, tp, st) -> bool:
        """Whether partition `tp` (state `st`) is fetchable and below its pipelining limit: less than
        about two answers' worth of it buffered. Called with the lock held."""
        if st.paused or st.fetch_offset is None or st.reset_strategy or st.awaiting_validation:
            return False
        have = self._buffered_bytes.get(tp, 0)
        return not have or have < 2 * max(self.partition_max_bytes, self._last_fetched.get(tp, 0))

    def _wants_fetch(self, c: _Completed, st) -> bool:
        """Whether the partition of chunk `c`, just used up, is to be fetched now: below its limit and
        no Fetch in flight to the broker `c` came from (send_fetches then asks the metadata for its
        leader). Called with the lock held."""
        return c.node not in self._inflight and self._below_limit(c.tp, st)

    def _step(self, c: _Completed, want: int) -> tuple[list, bool]:
        """Decode the next `want` (at most) records of chunk `c`, deserialized: -> (records, whether
        the chunk is used up). Runs without the lock: only the application thread decodes."""
        budget = c.budget
        before = budget.left
        if c.full is None:
            c.full = before == budget.limit
            if c.full:
                self._budget_first.discard(c.tp)
            if self.read_committed and c.aborted:
                c.records = _decode_read_committed(c.tp[0], c.tp[1], bytes(c.data), c.fetch_offset, self.check_crcs,
                                                   c.aborted, budget)
            else:
                # each batch's CRC is checked as the cursor reaches it (check.crcs)
                c.cursor = RecordCursor(c.data, self.check_crcs, budget, min_offset=c.fetch_offset,
                                        record_factory=ConsumerRecord, prefix=(c.tp[0], c.tp[1]))
        cur = c.cursor
        if cur is not None:
            recs = cur.take(want)
            done = cur.done
        else:
            i = c.index
            recs = c.records[i:i + want]
            c.index = i + len(recs)
            done = c.index >= len(c.records)
        c.spent += before - budget.left
        if done:
            c.data = c.cursor = c.records = None     # the response frame is no longer needed
        kd, vd = self.key_deserializer, self.value_deserializer
        if kd is not None or vd is not None:
            recs = _deserialize(recs, kd, vd)
        return recs, done

    def _failed(self, c: _Completed, e: Exception) -> None:
        """Chunk `c` did not decode: its partition is fetched again from its position (what was
        fetched after it is stale). With the response's whole budget it failed for good and its
        error is raised from poll(); else it is decoded first in the next response."""
        with self.lock:
            self._remove(c)
            st = self.subs.partitions.get(c.tp)
            if st is None or st.seek_epoch != c.seek_epoch:
                return
            st.fetch_offset, st.fetch_epoch = st.position, st.position_epoch
            st.seek_epoch += 1
            if c.full:
                log.error("records of %s fetched at offset %s could not be decoded: %s", c.tp, c.fetch_offset, e)
                self._errors.append(partition_decode_error(c.tp, c.fetch_offset, e))
            else:
                self._budget_first.add(c.tp)

    def _remove(self, c: _Completed) -> None:
        try:
            self._buffer.remove(c)
        except ValueError:
            pass
        self._release(c)

    def _release(self, c: _Completed) -> None:
        if c.released:
            return
        c.released = True
        left = self._buffered_bytes.get(c.tp, 0) - c.nbytes
        if left > 0:
            self._buffered_bytes[c.tp] = left
        else:
            self._buffered_bytes.pop(c.tp, None)

    def _drop(self, tp) -> None:
        keep: deque[_Completed] = deque()
        self._last_fetched.pop(tp, None)
        for c in self._buffer:
            if c.tp == tp:
                self._release(c)
            else:
                keep.append(c)
        self._buffer = keep

    def has_buffered(self) -> bool:
        return bool(self._buffer) or bool(self._errors)

    def wait(self, timeout: float) -> None:
        """Block until data or an error is buffered, or `timeout` passes."""
        with self.lock:
            if not self._buffer and not self._errors and timeout > 0:
                self._cond.wait(timeout)

    def wakeup(self) -> None:
        with self.lock:
            self._cond.notify_all()

    def clear(self, tps=None) -> None:
        with self.lock:
            if tps is None:
                for c in self._buffer:
                    c.released = True
                self._buffer.clear()
                self._buffered_bytes.clear()
                self._last_fetched.clear()
            else:
                for tp in tps:
                    self._drop(tp)

    # -- offset resets (ListOffsets) ---------------------------------------------------------------------
    def reset_offsets(self) -> None:
        """Start ListOffsets for partitions awaiting auto.offset.reset; raise for 'none'."""
        need = self.subs.needs_reset()
        if not need:
            return
        none = [tp for tp, s in need.items() if s == "none"]
        if none:
            raise NoOffsetForPartitionError(none)
        by_node: dict[int, dict] = {}
        with self.lock:
            for tp, strategy in need.items():
                if tp in self._resetting:
                    continue
                leader = self.cluster.leader_for(tp)
                if leader is None:
                    self._raise_if_denied({tp[0]}, locked=True)
                    self.cluster.request_leaders({tp[0]})
                    continue
                ts = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
                by_node.setdefault(leader, {})[tp] = ts
                self._resetting.add(tp)
        for node, stamps in by_node.items():
            seek_epochs = {tp: self.subs.partitions[tp].seek_epoch for tp in stamps if tp in self.subs.partitions}
            fut = self.network.send(node, Versioned(LIST_OFFSETS_KEY, lambda v, s=stamps: list_offsets_request(
                v, s, self.isolation_level)))
            fut.add_done_callback(lambda f, s=stamps, se=seek_epochs: self._on_list_offsets(s, se, f))

    def _on_list_offsets(self, stamps, seek_epochs, fut: Future) -> None:
        try:
            resp = fut.result()
        except BaseException as e:
            log.debug("ListOffsets failed: %s", e)
            with self.lock:
                self._resetting.difference_update(stamps)
            self.cluster.request_update()
            return
        refresh = False
        with self.lock:
            self._resetting.difference_update(stamps)
            for tp, (code, offset, _ts, le) in read_list_offsets(resp).items():
                st = self.subs.partitions.get(tp)
                if st is None or tp not in stamps or st.seek_epoch != seek_epochs.get(tp):
                    continue
                if code:
                    refresh |= code in _REFRESH_ERRORS
                    continue
                if offset < 0:
                    continue
                self.subs.seek(tp, offset, le if le >= 0 else None)
        if refresh:
            self.cluster.request_update()
        self.send_fetches()

    # -- position validation (KIP-320, OffsetForLeaderEpoch) ------------------------------------------
    def validate_positions(self) -> None:
        """For partitions whose leader changed (FENCED/UNKNOWN_LEADER_EPOCH), ask the new leader where
        the epoch of our position ends; if that is before our position the log was truncated and we
        continue from the end offset (Kafka's LogTruncation handling with a reset policy)."""
        by_node: dict[int, dict] = {}
        leaderless: set[str] = set()
        with self.lock:
            for tp, st in self.subs.partitions.items():
                if not st.awaiting_validation or tp in self._validating:
                    continue
                info = self.cluster.partition_info(tp)
                if info is None or info.leader < 0:
                    # its leader is down or not known yet: ask for metadata (paced by
                    # Cluster's backoff) and validate once a leader is named
                    leaderless.add(tp[0])
                    continue
                by_node.setdefault(info.leader, {})[tp] = (st.position_epoch, info.leader_epoch, st.seek_epoch)
                self._validating.add(tp)
        if leaderless:
            self._raise_if_denied(leaderless)
            self.cluster.request_leaders(leaderless)
        for node, parts in by_node.items():
            def build(v, parts=parts):
                R = OffsetForLeaderEpochRequest
                topics: dict[str, list] = {}
                for (t, p), (epoch, cur, _) in parts.items():
                    topics.setdefault(t, []).append(R.OffsetForLeaderTopic.OffsetForLeaderPartition(
                        partition=p, current_leader_epoch=cur, leader_epoch=epoch))
                return R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=t, partitions=ps)
                                                for t, ps in topics.items()])
            fut = self.network.send(node, Versioned(OFFSET_FOR_LEADER_EPOCH_KEY, build))
            fut.add_done_callback(lambda f, parts=parts: self._on_validated(parts, f))

    def _on_validated(self, parts, fut: Future) -> None:
        try:
            resp = fut.result()
        except BaseException as e:
            log.debug("OffsetForLeaderEpoch failed: %s", e)
            with self.lock:
                self._validating.difference_update(parts)
            self.cluster.request_update()
            return
        with self.lock:
            self._validating.difference_update(parts)
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.topic, p.partition)
                    st = self.subs.partitions.get(tp)
                    if st is None or tp not in parts or st.seek_epoch != parts[tp][2]:
                        continue
                    if p.error_code:
                        self.cluster.on_partition_error(tp, p.error_code)
                        continue
                    if 0 <= p.end_offset < (st.position or 0):
                        log.warning("log truncation detected on %s: epoch %s ends at %s, before our position %s; "
                                    "resuming there", tp, parts[tp][0], p.end_offset, st.position)
                        self.subs.seek(tp, p.end_offset, p.leader_epoch if p.leader_epoch >= 0 else None)
                        self._drop(tp)
                    else:
                        st.awaiting_validation = False
        self.send_fetches()

    def close(self) -> None:
        self._closed = True
        self.wakeup()


def list_offsets(network, cluster, tps_to_ts: dict, isolation_level: int, timeout: float) -> dict:
    """Blocking ListOffsets: {tp: (offset, timestamp, leader_epoch)}; offset -1 when none matches."""
    deadline = time.monotonic() + timeout
    pending = dict(tps_to_ts)
    result: dict = {}
    while pending:
        cluster.add_topics({tp[0] for tp in pending})
        by_node: dict[int, dict] = {}
        for tp, ts in pending.items():
            leader = cluster.leader_for(tp)
            if leader is not None:
                by_node.setdefault(leader, {})[tp] = ts
        futs = [(s, network.send(n, Versioned(LIST_OFFSETS_KEY, lambda v, s=s: list_offsets_request(
            v, s, isolation_level)))) for n, s in by_node.items()]
        for stamps, fut in futs:
            try:
                resp = fut.result(max(0.0, deadline - time.monotonic()))
            except (KafkaError, OSError, TimeoutError):
                continue
            for tp, (code, off, ts, le) in read_list_offsets(resp).items():
                if tp not in pending:
                    continue
                if code:
                    if code not in _REFRESH_ERRORS:
                        raise for_code(code)(f"ListOffsets for {tp}")
                    continue
                result[tp] = (off, ts, le if le >= 0 else None)
                del pending[tp]
        if pending:
            if time.monotonic() >= deadline:
                from kohort.errors import KafkaTimeoutError
                raise KafkaTimeoutError(f"ListOffsets for {sorted(pending)} did not complete in {timeout:.1f}s")
            cluster.request_update()
            time.sleep(0.1)
    return result


__all__ = ["FetchSession", "Fetcher", "decode_partition", "list_offsets", "partition_decode_error"]
