"""Fetch (API key 1), v4-v17 (the Kafka 4 range): consumers read stored batches as byte ranges.

* max_bytes caps the response and partition_max_bytes each partition, except that the first batch of
  the first partition with data is returned whole even when larger (KIP-74), so consumers always
  make progress; later partitions only get what fits.
* min_bytes / max_wait_ms: when less than min_bytes is ready the request waits, woken by appends to
  any of its partitions (kohort.broker.waiters; no polling), until enough data or max_wait_ms.
* isolation_level (KIP-98): every answer carries the last stable offset (min of the first offset of
  any open transaction and the high watermark, kohort.broker.producer_state); READ_COMMITTED reads
  only below it and gets the aborted transactions overlapping [fetch offset, end of the returned
  batches) (READ_UNCOMMITTED: null).
* Incremental fetch sessions from v7 (KIP-227, kohort.broker.fetch_sessions); topic ids from v13
  (KIP-516): an unknown id is UNKNOWN_TOPIC_ID.
* An offset outside [log start offset, log end offset] is OFFSET_OUT_OF_RANGE.
* Without TLS, large record sets are answered as FileSlices (storage), which the server's writer
  sends with sendfile: their bytes never pass through Python.
* last_fetched_epoch (v12+, KIP-320/595), checked first as Kafka's Partition.fetchRecords does: when
  that epoch ends before the fetch offset in our log, or our log has only an older epoch, the
  partition is answered at once with no records and `diverging_epoch` = (epoch, its end offset), so
  the consumer truncates its position. Partitions a session only remembers (not re-sent in an
  incremental fetch) are not checked.
* Authorization: READ on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions (answered at
  once, nothing read); an unknown topic id stays UNKNOWN_TOPIC_ID.
"""
from __future__ import annotations

import time

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.fetch_sessions import CachedPartition, FetchSessionError
from kohort.broker.handlers import handles
from kohort.broker.handlers._util import check_leader_epoch, now_ms
from kohort.errors import ErrorCode
from kohort.protocol.messages.fetch import FetchRequest, FetchResponse
from kohort.protocol.records import ExternalRecords, iter_batches
from kohort.storage import StorageError

READ_COMMITTED = 1
TopicResp = FetchResponse.FetchableTopicResponse
PartData = TopicResp.PartitionData
Aborted = PartData.AbortedTransaction


class _Want:
    """One partition to read: key = (topic name or topic id, partition)."""
    __slots__ = ("key", "fetch_offset", "max_bytes", "leader_epoch", "cached", "last_fetched_epoch")

    def __init__(self, key, fetch_offset, max_bytes, leader_epoch=-1, cached=None, last_fetched_epoch=-1):
        self.key, self.fetch_offset, self.max_bytes = key, fetch_offset, max_bytes
        self.leader_epoch, self.cached, self.last_fetched_epoch = leader_epoch, cached, last_fetched_epoch


class _Result:
    __slots__ = ("want", "error", "hwm", "lso", "log_start", "records", "aborted", "diverging")

    def __init__(self, want, error, hwm=-1, lso=-1, log_start=-1, records=b"", aborted=(), diverging=None):
        self.want, self.error, self.hwm, self.lso, self.log_start, self.records = (
            want, error, hwm, lso, log_start, records)
        self.aborted = aborted
        self.diverging = diverging      # (epoch, end offset) when the fetch diverges from our log


def _read(broker, wants: list[_Want], max_bytes: int, by_id: bool,
          read_committed: bool = False, as_slice: bool = False) -> tuple[list[_Result], int, bool]:
    storage = broker.storage
    out = []
    total = 0
    errors = False
    for w in wants:
        topic, p = w.key
        if by_id:
            try:
                name = storage.topic_name(topic)
            except StorageError:
                out.append(_Result(w, ErrorCode.UNKNOWN_TOPIC_ID))
                errors = True
                continue
        else:
            name = topic
        try:
            log = storage.log(name, p)
        except StorageError:
            out.append(_Result(w, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            errors = True
            continue
        log.become_leader(broker.leader_epoch)
        code = check_leader_epoch(broker, w.leader_epoch)
        hwm = log.high_watermark
        pstate = broker.producers.partition(name, p, log)
        lso = pstate.last_stable_offset(hwm)
        start = log.log_start_offset
        if code:
            out.append(_Result(w, code, hwm, lso, start))
            errors = True
            continue
        off = w.fetch_offset
        if w.last_fetched_epoch >= 0:
            epoch, end = log.end_offset_for_epoch(w.last_fetched_epoch)
            if epoch < 0 or end < 0:
                out.append(_Result(w, ErrorCode.OFFSET_OUT_OF_RANGE, hwm, lso, start))
                errors = True
                continue
            if end < off or epoch < w.last_fetched_epoch:
                out.append(_Result(w, ErrorCode.NONE, hwm, lso, start, diverging=(epoch, end)))
                errors = True       # answered at once, like Kafka
                continue
        if off < start or off > log.log_end_offset:
            out.append(_Result(w, ErrorCode.OFFSET_OUT_OF_RANGE, hwm, lso, start))
            errors = True
            continue
        data = b""
        upto = lso if read_committed else hwm
        aborted = ()
        if off < upto:
            limit = min(w.max_bytes, max_bytes - total)
            if total == 0 or limit > 0:
                try:
                    data = log.read(off, max(limit, 1), max_offset=upto, as_slice=as_slice)
                except StorageError as e:
                    out.append(_Result(w, e.error_code, hwm, lso, start))
                    errors = True
                    continue
                if total and len(data) > limit:
                    data = b""          # only the first partition may exceed the limits
        if data and read_committed and pstate.aborted:
            if isinstance(data, ExternalRecords):
                data = data.read()
            # Kafka's upper bound: just past the returned batches
            end = off
            for _, bh in iter_batches(data):
                end = bh.base_offset + bh.last_offset_delta + 1
            aborted = pstate.aborted_in(off, end)
        total += len(data)
        out.append(_Result(w, ErrorCode.NONE, hwm, lso, start, data, aborted))
    return out, total, errors


def _plan(broker, req: FetchRequest, v: int):
    """-> (session or None, is_full, wants) or raises FetchSessionError."""
    by_id = v >= 13
    sess, full = None, True
    if v >= 7:
        sess, full = broker.fetch_sessions.begin(req.session_id, req.session_epoch, now_ms())
    req_parts = []
    for t in req.topics:
        tk = t.topic_id if by_id else t.topic
        for p in t.partitions:
            req_parts.append(((tk, p.partition), p))
    last = {k: (p.last_fetched_epoch if v >= 12 else -1) for k, p in req_parts}
    if sess is None:
        return None, True, [_Want(k, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                                  last_fetched_epoch=last[k]) for k, p in req_parts]
    cache = sess.partitions
    if full:
        cache.clear()
    else:
        for ft in req.forgotten_topics_data:
            tk = ft.topic_id if by_id else ft.topic
            for p in ft.partitions:
                cache.pop((tk, p), None)
    epochs = {}
    for k, p in req_parts:
        c = cache.get(k)
        if c is None:
            cache[k] = CachedPartition(p.fetch_offset, p.partition_max_bytes, p.log_start_offset)
        else:
            c.fetch_offset, c.partition_max_bytes = p.fetch_offset, p.partition_max_bytes
        epochs[k] = p.current_leader_epoch
    wants = [_Want(k, c.fetch_offset, c.partition_max_bytes, epochs.get(k, -1), c, last.get(k, -1))
             for k, c in cache.items()]
    return sess, full, wants


def _response(broker, v, req, sess, full, results) -> FetchResponse:
    by_id = v >= 13
    committed = req.isolation_level == READ_COMMITTED
    topics: dict = {}
    for r in results:
        c = r.want.cached
        if c is not None:
            changed = (r.error or r.records or r.diverging or c.high_watermark != r.hwm or c.last_stable_offset != r.lso
                       or c.sent_log_start_offset != r.log_start)
            c.high_watermark, c.last_stable_offset, c.sent_log_start_offset = r.hwm, r.lso, r.log_start
            if not full and not changed:
                continue
        tk, p = r.want.key
        tr = topics.get(tk)
        if tr is None:
            tr = topics[tk] = TopicResp(topic_id=tk, partitions=[]) if by_id else TopicResp(topic=tk, partitions=[])
        tr.partitions.append(PartData(
            partition_index=p, error_code=r.error, high_watermark=r.hwm, last_stable_offset=r.lso,
            log_start_offset=r.log_start,
            aborted_transactions=[Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                                  for a in r.aborted] if committed else None,
            preferred_read_replica=-1,
            records=r.records, **_diverging(r)))
    return FetchResponse(throttle_time_ms=0, error_code=0,
                         session_id=sess.session_id if sess is not None else 0,
                         responses=list(topics.values()))


def _diverging(r: _Result) -> dict:
    if r.diverging is None:
        return {}
    return {"diverging_epoch": PartData.EpochEndOffset(epoch=r.diverging[0], end_offset=r.diverging[1])}


@handles(FetchRequest, "4-17")
def handle_fetch(ctx, req: FetchRequest):
    broker, v = ctx.broker, ctx.api_version
    try:
        sess, full, wants = _plan(broker, req, v)
    except FetchSessionError as e:
        return FetchResponse(throttle_time_ms=0, error_code=e.code, session_id=0, responses=[])
    max_bytes = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    rc = req.isolation_level == READ_COMMITTED
    denied = _unauthorized(ctx, wants, v >= 13)
    if denied:
        wants = [w for w in wants if w not in denied]
    # record bytes go out with sendfile on connections without TLS (the server's writer)
    sl = ctx.listener is not None and ctx.listener.protocol in ("PLAINTEXT", "SASL_PLAINTEXT")
    results, total, errors = _read(broker, wants, max_bytes, v >= 13, rc, sl)
    if denied:
        return _response(broker, v, req, sess, full, denied + results)
    if total >= req.min_bytes or req.max_wait_ms <= 0 or errors or not wants:
        return _response(broker, v, req, sess, full, results)
    return _long_poll(broker, v, req, sess, full, wants, max_bytes, results, sl)


def _unauthorized(ctx, wants: list[_Want], by_id: bool) -> list[_Result]:
    """TOPIC_AUTHORIZATION_FAILED results for the partitions of topics the principal may not READ."""
    if ctx.broker.acls is None:            # no authorizer configured: every topic may be read
        return []
    names = {}
    for w in wants:
        key = w.key[0]
        if key not in names:
            try:
                names[key] = ctx.broker.storage.topic_name(key) if by_id else key
            except StorageError:
                names[key] = None           # unknown id: _read answers UNKNOWN_TOPIC_ID
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (n for n in names.values() if n))
    return [_Result(w, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for w in wants
            if names[w.key[0]] is not None and names[w.key[0]] not in allowed]


async def _long_poll(broker, v, req, sess, full, wants, max_bytes, results, sl):
    deadline = time.monotonic() + req.max_wait_ms / 1000
    by_id = v >= 13
    rc = req.isolation_level == READ_COMMITTED
    storage = broker.storage
    if by_id:
        keys = []
        for w in wants:
            try:
                keys.append((storage.topic_name(w.key[0]), w.key[1]))
            except StorageError:
                pass
    else:
        keys = [w.key for w in wants]
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if not await broker.waiters.wait(keys, left):
            break
        results, total, errors = _read(broker, wants, max_bytes, by_id, rc, sl)
        if total >= req.min_bytes or errors:
            return _response(broker, v, req, sess, full, results)
    results, _, _ = _read(broker, wants, max_bytes, by_id, rc, sl)
    return _response(broker, v, req, sess, full, results)
