"""ShareFetch (78) v1-v2 and ShareAcknowledge (79) v1-v2 (KIP-932), on the partition leader: share
sessions and share partitions of kohort.broker.share_leader, the log read by the Fetch handler's
own read path (kohort.broker.handlers.fetch).

* Order within a request: the share session (epoch 0 opens, n > 0 continues, -1 closes), then the
  acknowledgements (each partition all or nothing: AcknowledgeErrorCode), then, for ShareFetch, the
  acquisition: per partition of the session, a log read from the partition's next fetch offset
  (below the high watermark; below the last stable offset with share.isolation.level
  read_committed, whose aborted batches are archived) handed to `SharePartition.acquire` with the
  request's MaxRecords, BatchSize and ShareAcquireMode; the answer carries the whole log batches
  covering the acquired ranges and the AcquiredRecords with their delivery counts.
* Long poll (kohort.broker.share.fetch_wait, Kafka's DelayedShareFetch): before acquiring, each
  partition of the session says what it offers (the log bytes from its next fetch offset to its
  high watermark, or last stable offset under read_committed; whether it is at its in-flight
  limit); the request acquires and answers once MinBytes is met across the partitions that can
  acquire, or a log read fails, else waits on the partitions' data waiters (an append, an
  acknowledgement, a release or an expired lock wakes it) until MaxWaitMs has passed, then
  acquires what there is. MaxBytes is split evenly over the partitions that can acquire (each
  partition's budget; only the first partition with data may exceed its budget, by its first
  batch, as Kafka's log read allows); MaxRecords caps the records acquired over all partitions.
* MaxBytes or MaxRecords 0 (what Java sends with acknowledgements only): nothing is fetched and
  the request answers at once, with only the partitions of its acknowledgements.
* RENEW (v2, IsRenewAck): the acknowledgements only; ShareFetch must then have MaxWaitMs, MinBytes,
  MaxBytes and MaxRecords 0 (else INVALID_REQUEST) and fetches nothing.
* A closed session (epoch -1) releases what the member holds on every partition of the group.
* An answer with an error (top level or on a partition) is counted in the broker's metrics as a
  failed ShareFetch / ShareAcknowledge (Kafka's FailedShareFetchRequestsPerSec,
  FailedShareAcknowledgementRequestsPerSec).
* Acknowledgements are answered once their share state is durable in `__share_group_state`.
* Answers: AcquisitionLockTimeoutMs is the group's lock duration; at epoch 0 every session
  partition is answered, later only those with records, errors or acknowledgements. Partition
  errors: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED (READ on the
  topic); top level: GROUP_AUTHORIZATION_FAILED (READ on the group), INVALID_REQUEST (no group or
  member id), the session errors, UNSUPPORTED_VERSION while share.version is 0.
"""
from __future__ import annotations

import time
import uuid as _uuid

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.broker.handlers.fetch import _read, _Want
from kohort.broker.handlers.groups import group_denied
from kohort.broker.share.fetch_wait import PartitionReadiness, ShareFetchWait, WaitDecision
from kohort.broker.share.partition import AckBatch, AcknowledgeType, AcquireMode, LogBatch
from kohort.broker.share_leader import PartitionKey, ShareLeader, leader_of
from kohort.errors import ErrorCode
from kohort.protocol.messages.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from kohort.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from kohort.protocol.records import ExternalRecords, iter_batches
from kohort.storage import StorageError

FR = ShareFetchResponse
FPart = FR.ShareFetchableTopicResponse.PartitionData
AR = ShareAcknowledgeResponse
APart = AR.ShareAcknowledgeTopicResponse.PartitionData


def _enabled(ctx) -> bool:
    return int(ctx.broker.config.get("share.version", 1)) >= 1


def _ack_batches(batches) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]


def _names(ctx, topic_ids) -> dict[_uuid.UUID, str | None]:
    out: dict[_uuid.UUID, str | None] = {}
    for tid in topic_ids:
        try:
            out[tid] = ctx.broker.storage.topic_name(tid)
        except StorageError:
            out[tid] = None
    return out


def _partition_error(ctx, names, allowed, tid, index) -> int:
    name = names.get(tid)
    if name is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    if name not in allowed:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if not 0 <= index < ctx.broker.storage.topic(name).num_partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def _acknowledge_all(ctx, sl: ShareLeader, group: str, member: str, acks, names, allowed) -> dict:
    """(topic id, partition) -> (error code, message) of each partition's acknowledgements."""
    out = {}
    for (tid, index), batches in acks.items():
        err = _partition_error(ctx, names, allowed, tid, index)
        if err:
            out[(tid, index)] = (err, None)
            continue
        out[(tid, index)] = sl.acknowledge(member, (group, tid, index), _ack_batches(batches))
    return out


def _aborted_ranges(data, pstate, start: int) -> list[tuple[int, int]]:
    """Offset ranges of the transactional batches in `data` whose transaction was aborted."""
    batches = [(h.base_offset, h.last_offset, h.producer_id) for _, h in iter_batches(data)
               if h.attributes & 0x10 and not h.attributes & 0x20]
    if not batches:
        return []
    txns = pstate.aborted_in(start, batches[-1][1] + 1)
    return [(lo, hi) for lo, hi, pid in batches
            if any(a.producer_id == pid and a.first_offset <= lo and hi <= a.last_offset for a in txns)]


def _readiness(ctx, sl: ShareLeader, group: str, key: PartitionKey, name: str, max_bytes: int) -> PartitionReadiness:
    """What the partition offers a fetch now (kohort.broker.share.fetch_wait): whether it can
    acquire, and the log bytes (at most `max_bytes`) from the batch holding its next fetch offset
    up to its end offset (high watermark, or last stable offset under read_committed)."""
    broker = ctx.broker
    try:
        sp = sl.partition(group, key[1], name, key[2])
        if not sp.can_acquire_records():
            return PartitionReadiness(acquirable=False)
        lg = broker.storage.log(name, key[2])
        offset = max(sp.next_fetch_offset(), lg.log_start_offset)
        end = lg.high_watermark
        if sp.config.read_committed:
            end = broker.producers.partition(name, key[2], lg).last_stable_offset(end)
        if offset > end:
            return PartitionReadiness(past_end=True)
        if offset == end:
            return PartitionReadiness()
        if offset < lg.active_segment.base_offset <= end:
            return PartitionReadiness(older_segment=True)
        data = lg.read(offset, max_bytes, max_offset=end, as_slice=True)
        size = len(data)
        if isinstance(data, ExternalRecords) and hasattr(data, "close"):
            data.close()
        return PartitionReadiness(bytes_available=size)
    except StorageError:
        return PartitionReadiness(error=True)


def _acquire(ctx, sl: ShareLeader, group: str, member: str, key: PartitionKey, name: str,
             req: ShareFetchRequest, v: int, max_records: int, max_bytes: int,
             min_one: bool) -> tuple[bytes, list]:
    """Read the partition's log from its next fetch offset, at most `max_bytes` (the first batch
    whole even if larger while `min_one`: no partition of the answer has data yet), and acquire
    for `member`: (the whole log batches covering the acquired ranges, AcquiredRecords)."""
    broker = ctx.broker
    sp = sl.partition(group, key[1], name, key[2])
    rc = sp.config.read_committed
    offset = sp.next_fetch_offset()
    lg = broker.storage.log(name, key[2])
    if offset < lg.log_start_offset:
        sl.after_change(key, sp.update_log_start_offset(lg.log_start_offset))
        offset = sp.next_fetch_offset()
    if max_bytes <= 0 and not min_one:
        return b"", []
    results, _, _ = _read(broker, [_Want((key[1], key[2]), offset, max(max_bytes, 1))], max(max_bytes, 1), True, rc)
    r = results[0]
    data = r.records
    if r.error or not data or (not min_one and len(data) > max_bytes):
        return b"", []
    if isinstance(data, ExternalRecords):
        data = data.read()
    data = bytes(data)
    spans = [(pos, pos + h.total_size, h.base_offset, h.last_offset) for pos, h in iter_batches(data)]
    aborted = _aborted_ranges(data, broker.producers.partition(name, key[2], lg), offset) if rc else []
    mode = AcquireMode(req.share_acquire_mode) if v >= 2 else AcquireMode.BATCH_OPTIMIZED
    res = sp.acquire(member, [LogBatch(first, last) for _, _, first, last in spans], sl.clock(),
                     max_records=max_records, batch_size=req.batch_size or None, mode=mode, aborted=aborted)
    sl.after_change(key, res.write)
    if not res.acquired:
        return b"", []
    lo = min(a.first_offset for a in res.acquired)
    hi = max(a.last_offset for a in res.acquired)
    keep = [(s, e) for s, e, first, last in spans if last >= lo and first <= hi]
    records = data[keep[0][0]:keep[-1][1]] if keep else b""
    A = FPart.AcquiredRecords
    return records, [A(first_offset=a.first_offset, last_offset=a.last_offset, delivery_count=a.delivery_count)
                     for a in res.acquired]


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def _leader(ctx):
    return FPart.LeaderIdAndEpoch(leader_id=ctx.broker.node_id, leader_epoch=ctx.broker.leader_epoch)


def _fetch_error(code: int, message: str | None = None) -> ShareFetchResponse:
    return FR(throttle_time_ms=0, error_code=int(code), error_message=message, acquisition_lock_timeout_ms=0,
              responses=[], node_endpoints=[])


def _count_failed(ctx, api: str, resp: ShareFetchResponse | ShareAcknowledgeResponse) -> None:
    """Count `resp` in the broker's failed share requests when it carries an error: top level, or
    on a partition (a fetch error or an acknowledgement error)."""
    failed = bool(resp.error_code) or any(
        p.error_code or getattr(p, "acknowledge_error_code", 0) for t in resp.responses for p in t.partitions)
    metrics = getattr(ctx.broker, "metrics", None)
    if failed and metrics is not None:
        metrics.record_share_request_failed(api)


@handles(ShareFetchRequest, "1-2")
async def handle_share_fetch(ctx, req: ShareFetchRequest) -> ShareFetchResponse:
    resp = await _share_fetch(ctx, req)
    _count_failed(ctx, "ShareFetch", resp)
    return resp


async def _share_fetch(ctx, req: ShareFetchRequest) -> ShareFetchResponse:
    v = ctx.api_version
    if not _enabled(ctx):
        return _fetch_error(ErrorCode.UNSUPPORTED_VERSION, "share groups are not enabled (share.version is 0)")
    if not req.group_id or not req.member_id:
        return _fetch_error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set")
    renew = v >= 2 and req.is_renew_ack
    if renew and (req.max_wait_ms or req.min_bytes or req.max_bytes or req.max_records):
        return _fetch_error(ErrorCode.INVALID_REQUEST,
                            "a renewing ShareFetch must have MaxWaitMs, MinBytes, MaxBytes and MaxRecords 0")
    if group_denied(ctx, req.group_id):
        return _fetch_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    sl = leader_of(ctx.broker)
    group, member = req.group_id, req.member_id
    # Topics may repeat a topic id (librdkafka writes fetch and ack partitions as separate runs)
    added: list[tuple[_uuid.UUID, int]] = []
    acks: dict[tuple[_uuid.UUID, int], list] = {}
    for t in req.topics:
        for p in t.partitions:
            added.append((t.topic_id, p.partition_index))
            if p.acknowledgement_batches:
                acks.setdefault((t.topic_id, p.partition_index), []).extend(p.acknowledgement_batches)
    forgotten = [(t.topic_id, i) for t in req.forgotten_topics_data for i in t.partitions]
    sess = sl.sessions.fetch(group, member, req.share_session_epoch, added, forgotten, bool(acks),
                             ctx.connection_id)
    if sess.error is not None:
        return _fetch_error(sess.error, sess.message)
    names = _names(ctx, {tid for tid, _ in added} | {tid for tid, _ in sess.partitions})
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (n for n in names.values() if n))
    ack_results = _acknowledge_all(ctx, sl, group, member, acks, names, allowed)
    if sess.release:
        sl.release_member(group, member)
    if (acks or sess.release) and sl.state is not None:
        await sl.state.wait_durable()          # acknowledgements are answered once stored
    # MaxBytes or MaxRecords 0 (an acknowledgement-only ShareFetch): nothing fetched, answered at once
    nothing_wanted = req.max_bytes <= 0 or req.max_records <= 0
    fetch = [] if (renew or sess.release or nothing_wanted) else sorted(sess.partitions,
                                                                        key=lambda tp: (str(tp[0]), tp[1]))
    full = req.share_session_epoch == 0
    answers: dict[tuple[_uuid.UUID, int], FPart] = {}

    max_bytes = req.max_bytes
    valid = [(tid, index) for tid, index in fetch if not _partition_error(ctx, names, allowed, tid, index)]

    def offers() -> list[PartitionReadiness]:
        return [_readiness(ctx, sl, group, (group, tid, index), names[tid], max_bytes) for tid, index in valid]

    def read_all(ready: list[PartitionReadiness]) -> None:
        """Acquire from every partition of the session that can acquire, within the request's
        MaxRecords and each partition's share of MaxBytes; answer the others as they are."""
        records_left = req.max_records
        bytes_left = max_bytes
        budgets = dict(zip(valid, wait.budgets(ready)))
        acquirable = {tp for tp, r in zip(valid, ready) if r.acquirable}
        min_one = True
        for tid, index in fetch:
            err = _partition_error(ctx, names, allowed, tid, index)
            records, acquired = b"", []
            if not err and records_left > 0 and (tid, index) in acquirable:
                try:
                    records, acquired = _acquire(ctx, sl, group, member, (group, tid, index), names[tid], req, v,
                                                 records_left, min(budgets[(tid, index)], bytes_left), min_one)
                except StorageError as e:
                    err = e.error_code
            records_left -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            bytes_left = max(0, bytes_left - len(records))
            min_one = min_one and not records
            answers[(tid, index)] = FPart(partition_index=index, error_code=int(err), acknowledge_error_code=0,
                                          current_leader=_leader(ctx), records=records, acquired_records=acquired)

    if fetch:
        wait = ShareFetchWait(_monotonic_ms(), req.max_wait_ms, req.min_bytes, max_bytes)
        keys = [(names[tid], i) for tid, i in valid]
        ready = offers()
        while wait.decide(_monotonic_ms(), ready) is WaitDecision.WAIT:
            if not await ctx.broker.waiters.wait(keys, wait.left_ms(_monotonic_ms()) / 1000):
                ready = offers()
                break
            ready = offers()
        read_all(ready)
    for (tid, index), (code, msg) in ack_results.items():
        a = answers.get((tid, index))
        if a is None:
            a = answers[(tid, index)] = FPart(partition_index=index, error_code=0, acknowledge_error_code=0,
                                              current_leader=_leader(ctx), records=b"", acquired_records=[])
        a.acknowledge_error_code = int(code)
        a.acknowledge_error_message = msg
    by_topic: dict[_uuid.UUID, list] = {}
    for (tid, index), a in sorted(answers.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        if full or a.acquired_records or a.error_code or (tid, index) in ack_results:
            by_topic.setdefault(tid, []).append(a)
    T = FR.ShareFetchableTopicResponse
    return FR(throttle_time_ms=0, error_code=0, acquisition_lock_timeout_ms=sl.lock_duration_ms(group),
              responses=[T(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()], node_endpoints=[])


@handles(ShareAcknowledgeRequest, "1-2")
async def handle_share_acknowledge(ctx, req: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    resp = await _share_acknowledge(ctx, req)
    _count_failed(ctx, "ShareAcknowledge", resp)
    return resp


async def _share_acknowledge(ctx, req: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    v = ctx.api_version

    def error(code: int, message: str | None = None) -> ShareAcknowledgeResponse:
        return AR(throttle_time_ms=0, error_code=int(code), error_message=message, acquisition_lock_timeout_ms=0,
                  responses=[], node_endpoints=[])
    if not _enabled(ctx):
        return error(ErrorCode.UNSUPPORTED_VERSION, "share groups are not enabled (share.version is 0)")
    if not req.group_id or not req.member_id:
        return error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set")
    if group_denied(ctx, req.group_id):
        return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    renew = v >= 2 and req.is_renew_ack
    if not renew and any(AcknowledgeType.RENEW in b.acknowledge_types for t in req.topics for p in t.partitions
                         for b in p.acknowledgement_batches):
        return error(ErrorCode.INVALID_REQUEST, "RENEW needs IsRenewAck")
    sl = leader_of(ctx.broker)
    group, member = req.group_id, req.member_id
    sess = sl.sessions.acknowledge(group, member, req.share_session_epoch)
    if sess.error is not None:
        return error(sess.error, sess.message)
    acks: dict[tuple[_uuid.UUID, int], list] = {}
    for t in req.topics:
        for p in t.partitions:
            acks.setdefault((t.topic_id, p.partition_index), []).extend(p.acknowledgement_batches)
    names = _names(ctx, {tid for tid, _ in acks})
    allowed = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (n for n in names.values() if n))
    results = _acknowledge_all(ctx, sl, group, member, acks, names, allowed)
    if sess.release:
        sl.release_member(group, member)
    if sl.state is not None:
        await sl.state.wait_durable()
    by_topic: dict[_uuid.UUID, list] = {}
    L = APart.LeaderIdAndEpoch
    for (tid, index), (code, msg) in sorted(results.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        by_topic.setdefault(tid, []).append(APart(
            partition_index=index, error_code=int(code), error_message=msg,
            current_leader=L(leader_id=ctx.broker.node_id, leader_epoch=ctx.broker.leader_epoch)))
    T = AR.ShareAcknowledgeTopicResponse
    return AR(throttle_time_ms=0, error_code=0, acquisition_lock_timeout_ms=sl.lock_duration_ms(group),
              responses=[T(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()], node_endpoints=[])
