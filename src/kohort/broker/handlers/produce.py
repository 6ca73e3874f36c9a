"""Produce (API key 0): v3-v12 served; ApiVersions advertises min 0 as Kafka 4 does (KAFKA-18659,
librdkafka needs it to enable compression) but v0-v2 are refused (connection closed).

Per partition the request must carry exactly one v2 RecordBatch (as Kafka requires from v3):
magic 2, a CRC-32C that matches, base offset 0, a record count that agrees with its last offset delta,
no control flag (markers are the broker's), a base sequence of at least 0 when it carries a producer id
(Kafka's UnifiedLog.analyzeAndValidateRecords and LogValidator.validateBatch) -> otherwise
CORRUPT_MESSAGE or INVALID_RECORD; larger than the topic's max.message.bytes -> MESSAGE_TOO_LARGE; ZStandard before v7
-> UNSUPPORTED_COMPRESSION_TYPE. A topic whose compression.type names a codec gets the batch
rebuilt in that codec (as Kafka recompresses); "producer" stores it as sent. Idempotent batches pass the sequence checks of
kohort.broker.producer_state (a retried duplicate is answered with its original offsets).
Transactional batches (KIP-98): the first one of a producer on a partition must belong to its Ongoing
transaction holding that partition (kohort.broker.txn's `verify`, KIP-890 part 1), else
INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v11) or INVALID_PRODUCER_EPOCH for a fenced epoch; a
non-transactional batch from a producer with a transaction open is INVALID_TXN_STATE. From v12
(transactions v2, KIP-890 part 2) such a partition is first added to the producer's transaction (the
request's transactional_id; persisted and fsynced before the batch is appended). While its previous
transaction is still completing the add meets CONCURRENT_TRANSACTIONS and is retried every
add.partitions.to.txn.retry.backoff.ms for up to add.partitions.to.txn.retry.backoff.max.ms, then
answered CONCURRENT_TRANSACTIONS (Kafka's ReplicaManager does the same for transactions v2; the
client retries it). Such requests, and the later ones of the same producer and partition while
one is under way, are appended in arrival order (`_produce_in_order`). Meanwhile the partition's
producer state holds a verification entry with the lowest sequence waiting, so a batch of the same
transaction with a higher sequence cannot be appended before it (OUT_OF_ORDER_SEQUENCE_NUMBER, which
Java's client retries for a batch behind an unacknowledged one). The log assigns offsets by
patching BaseOffset and PartitionLeaderEpoch in place (LogAppendTime topics also get MaxTimestamp
and a new CRC).

A compressed batch is not decompressed (unless the topic's compression.type names another codec,
`recompress`): the CRC covers its compressed bytes, and nothing here looks at its records (nor at an
uncompressed batch's). Kafka's LogValidator does decompress it (skipping keys,
values and headers when the batch is kept in place) to check each record's offset delta (a wrong one
makes it recompress), its timestamp against message.timestamp.before/after.max.ms and, on a compacted
topic, that it has a key; kohort checks none of these per record.

Each batch is validated once, here (`append_partition`); the log is handed its header
(`Log.append(header=...)`) and writes the batch from the request's own frame buffer. The answer's
objects are built field by field (`_part`, `_topic`, `_response`: the schema constructors' objects
without their keyword checks). The common request (one topic, one partition, no transactional id,
acks -1/1) on a connection without SASL, authorizer or injected faults is read from its frame into a
tuple and answered with its encoded frame by `produce_one` (called by the connection before any
request object is made): the same `append_partition`, the same answer bytes.

acks=0 gets no response. acks=1/all (one replica, so the same) are answered after the group-commit
fsync (kohort.broker.durability) under log.flush.policy=fsync-before-ack.

Authorization: WRITE on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions; a request
carrying transactional batches needs WRITE on its transactional id, else every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka's error response). No IDEMPOTENT_WRITE check (Kafka 2.8+).
"""
from __future__ import annotations

import asyncio

from kohort.broker.handlers.metadata import INTERNAL_TOPICS
from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import NO_RESPONSE, handles
from kohort.broker.handlers._util import error_of, now_ms
from kohort.errors import DecodeError, ErrorCode
from kohort.protocol.compression import CODEC_IDS, COMPRESSION_ZSTD
from kohort.protocol.messages.produce import ProduceRequest, ProduceResponse, encode_one_partition
from kohort.protocol.primitives import ZERO_UUID
from kohort.protocol.records import (
    ATTR_COMPRESSION_MASK, ATTR_CONTROL, ATTR_TRANSACTIONAL, ATTRIBUTES_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, build_batch,
    decode_batch, read_batch_header, validate_batch,
)
from kohort.storage import StorageError

# topic compression.type -> codec the stored batch must use ("producer": keep the producer's)
TARGET_CODEC = {"uncompressed": 0, **{n: c for n, c in CODEC_IDS.items() if n != "none"}}

TopicResp = ProduceResponse.TopicProduceResponse
PartResp = TopicResp.PartitionProduceResponse
_Leader = PartResp.LeaderIdAndEpoch
_new = object.__new__


# The answer's objects are built field by field: the same objects the schema's constructors make
# (tests/protocol/test_produce_codec.py compares them), without their per-call keyword checks.
def _part(index: int, code: int, base_offset: int, append_time: int, log_start: int,
          message: str | None = None) -> PartResp:
    leader = _new(_Leader)
    leader.__dict__.update(leader_id=-1, leader_epoch=-1)
    p = _new(PartResp)
    p.__dict__.update(index=index, error_code=code, base_offset=base_offset, log_append_time_ms=append_time,
                      log_start_offset=log_start, record_errors=[], error_message=message,
                      current_leader=leader)
    return p


def _topic(name: str, parts: list) -> TopicResp:
    t = _new(TopicResp)
    t.__dict__.update(name=name, topic_id=ZERO_UUID, partition_responses=parts)
    return t


def _response(topics: list) -> ProduceResponse:
    r = _new(ProduceResponse)
    r.__dict__.update(responses=topics, throttle_time_ms=0, node_endpoints=[])
    return r


def _err(index: int, code: int, message: str | None = None) -> PartResp:
    return _part(index, code, -1, -1, -1, message)


def _fail(code: int, message: str | None = None) -> tuple:
    """append_partition's answer for a batch not appended."""
    return code, message, -1, -1, -1, 0


def recompress(records, codec: int) -> bytes:
    """Rebuild a batch in the topic's codec (compression.type other than producer), keeping its
    producer id/epoch/sequence, timestamp type and records, as Kafka's LogValidator does."""
    h, recs = decode_batch(records, 0, check_crc=False)
    return build_batch([(r.key, r.value, r.headers, r.timestamp) for r in recs], compression=codec,
                       timestamp_type=h.timestamp_type, producer_id=h.producer_id,
                       producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                       transactional=h.is_transactional)


def append_partition(broker, topic: str, index: int, records, version: int, now: int) -> tuple:
    """Validate and append one partition's batch -> (error code, error message, base offset,
    log append time, log start offset, records appended): the partition's answer's fields."""
    storage = broker.storage
    try:
        log = storage.log(topic, index)
    except StorageError:
        return _fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{index}")
    size = 0 if records is None else len(records)
    if size == 0:
        return _fail(ErrorCode.INVALID_RECORD, "no record batch")
    if size > MAGIC_OFFSET and records[MAGIC_OFFSET] != 2:
        return _fail(ErrorCode.INVALID_RECORD,
                     f"record batch magic {records[MAGIC_OFFSET]} is not 2 (required from Produce v3)")
    try:
        h = validate_batch(records, 0)
    except DecodeError as e:
        return _fail(ErrorCode.CORRUPT_MESSAGE, str(e))
    # the header's fields by position (BatchHeader's properties are function calls)
    (base_offset, batch_length, _, _, _, attributes, last_delta, _, max_ts, pid, epoch, base_seq, count) = h
    if batch_length + LOG_OVERHEAD != size:
        return _fail(ErrorCode.INVALID_RECORD,
                     "a produce request must carry exactly one record batch per partition")
    if base_offset != 0:
        return _fail(ErrorCode.INVALID_RECORD,
                     f"a produced record batch's base offset must be 0, not {base_offset}")
    if count <= 0 or count != last_delta + 1:
        return _fail(ErrorCode.INVALID_RECORD,
                     f"record count {count} does not match last offset delta {last_delta}")
    if attributes & ATTR_CONTROL:
        return _fail(ErrorCode.INVALID_RECORD, "control batches are written by the broker only")
    if pid >= 0 and base_seq < 0:
        return _fail(ErrorCode.INVALID_RECORD,
                     f"invalid sequence number {base_seq} in a record batch of producer {pid}")
    transactional = bool(attributes & ATTR_TRANSACTIONAL)
    if transactional and pid < 0:
        return _fail(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")
    codec = attributes & ATTR_COMPRESSION_MASK
    if codec == COMPRESSION_ZSTD and version < 7:
        return _fail(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7+")
    cfg = log.config
    target = TARGET_CODEC.get(cfg.compression_type)
    if target is not None and target != codec:
        try:
            records = recompress(records, target)
        except DecodeError as e:
            return _fail(ErrorCode.CORRUPT_MESSAGE, str(e))
        h = read_batch_header(records)
        size, max_ts = h.total_size, h.max_timestamp
    if size > cfg.max_message_bytes:
        return _fail(ErrorCode.MESSAGE_TOO_LARGE,
                     f"batch of {size} bytes exceeds max.message.bytes={cfg.max_message_bytes}")
    pstate = None
    if pid >= 0:
        pstate = broker.producers.partition(topic, index, log)
        verdict = pstate.check(pid, epoch, base_seq, last_delta, transactional)
        if verdict.error:
            return _fail(verdict.error)
        if transactional and verdict.duplicate is None and not pstate.is_open(pid, epoch):
            # KIP-890 part 1: the first batch of a transaction on this partition must belong to an
            # Ongoing transaction that added the partition (asked of the local coordinator)
            code = broker.txn.coordinator.verify(pid, epoch, topic, index)
            if code == ErrorCode.INVALID_TXN_STATE and version >= 11:
                code = ErrorCode.TRANSACTION_ABORTABLE
            if code:
                return _fail(code, f"{topic}-{index} is not in an ongoing transaction of producer "
                                   f"{pid} epoch {epoch}")
        if verdict.duplicate is not None:
            return 0, None, verdict.duplicate.first_offset, -1, log.log_start_offset, 0
    try:
        res = log.append(records, leader_epoch=broker.leader_epoch, now_ms=now, header=h)
    except StorageError as e:
        return _fail(e.error_code, str(e))
    if pstate is not None:
        pstate.update(pid, epoch, base_seq, last_delta, res.base_offset, max_ts, append_ms=now,
                      transactional=transactional)
    broker.waiters.notify(topic, index)
    return 0, None, res.base_offset, res.log_append_time, res.log_start_offset, count


def _transactional_batches(broker, req: ProduceRequest, writable) -> list:
    """Produce v12: the authorized partitions carrying a transactional batch ->
    [(topic, partition, pid, epoch, base sequence, log)]."""
    out = []
    for t in req.topic_data:
        if t.name in INTERNAL_TOPICS or t.name not in writable:
            continue
        for pd in t.partition_data:
            try:
                h = read_batch_header(pd.records)
                lg = broker.storage.log(t.name, pd.index)
            except (DecodeError, StorageError, TypeError):
                continue                        # append_partition answers those
            if h.is_transactional and h.producer_id >= 0 and not h.is_control:
                out.append((t.name, pd.index, h.producer_id, h.producer_epoch, h.base_sequence, lg))
    return out


def _needs_add(broker, b: tuple) -> bool:
    """Whether a transactional batch opens a transaction on a partition not in its producer's
    Ongoing transaction (so the partition must be added first)."""
    topic, index, pid, epoch, _, lg = b
    if (pid, topic, index) in broker.txn.adding:        # an add of it is being persisted: wait for it
        return True
    if broker.producers.partition(topic, index, lg).is_open(pid, epoch):
        return False
    return broker.txn.coordinator.verify(pid, epoch, topic, index) == ErrorCode.INVALID_TXN_STATE


@handles(ProduceRequest, "3-12", advertised_min=0)
def handle_produce(ctx, req: ProduceRequest):
    if ctx.api_version >= 12 and req.transactional_id and req.acks in (-1, 0, 1) \
            and not _transactional_denied(ctx, req):
        broker = ctx.broker
        writable = ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in req.topic_data))
        batches = _transactional_batches(broker, req, writable)      # authorized first
        if batches:
            chain = broker.txn.producing
            if (chain and any((b[2], b[0], b[1]) in chain for b in batches)) or \
                    any(_needs_add(broker, b) for b in batches):
                return _produce_in_order(ctx, req, batches)
    return _produce(ctx, req, {})


async def _produce_in_order(ctx, req: ProduceRequest, batches: list):
    """Transactions v2: a request whose batches must first be added to their transaction, or that
    follows such a request of the same producer and partition still under way. Requests are chained
    per (producer id, topic, partition) in arrival order (Kafka gets the same order by reading one
    request of a connection at a time): each one appends only after the previous one did, so a
    later batch of a transaction never reaches the log before an earlier one."""
    broker = ctx.broker
    chain = broker.txn.producing
    keys = {(pid, topic, index) for topic, index, pid, *_ in batches}
    before = {chain[k] for k in keys if k in chain}
    mine = asyncio.get_running_loop().create_future()
    for k in keys:
        chain[k] = mine
    try:
        for f in before:
            await asyncio.shield(f)
        adds = [b for b in batches if _needs_add(broker, b)]
        errors = (await _add_partitions(broker, req.transactional_id, adds)) if adds else {}
        r = _produce(ctx, req, errors)
    finally:
        for k in keys:
            if chain.get(k) is mine:
                del chain[k]
        mine.set_result(None)
    return (await r) if hasattr(r, "__await__") else r


async def _add_partitions(broker, tid: str, adds: list) -> dict:
    """Add the partitions (one request's batches share one producer) -> {(topic, partition): error}
    for those that failed. CONCURRENT_TRANSACTIONS is retried every
    add.partitions.to.txn.retry.backoff.ms, up to add.partitions.to.txn.retry.backoff.max.ms; each
    attempt first records the batch's sequence in the partition's verification entry."""
    backoff = broker.config["add.partitions.to.txn.retry.backoff.ms"] / 1000
    give_up = now_ms() + broker.config["add.partitions.to.txn.retry.backoff.max.ms"]
    errors = {}
    by_producer: dict[tuple[int, int], list] = {}
    for topic, index, pid, epoch, seq, lg in adds:
        by_producer.setdefault((pid, epoch), []).append((topic, index, seq, lg))
    for (pid, epoch), parts in by_producer.items():
        while True:
            for topic, index, seq, lg in parts:
                broker.producers.partition(topic, index, lg).start_verification(pid, epoch, seq, now_ms())
            code = await broker.txn.implicit_add(tid, pid, epoch, [(t, p) for t, p, _, _ in parts])
            if code != ErrorCode.CONCURRENT_TRANSACTIONS or now_ms() >= give_up:
                break
            await asyncio.sleep(backoff)
        if code == ErrorCode.INVALID_TXN_STATE:
            code = ErrorCode.TRANSACTION_ABORTABLE
        elif code == ErrorCode.COORDINATOR_NOT_AVAILABLE:      # as Kafka maps coordinator errors on Produce
            code = ErrorCode.NOT_ENOUGH_REPLICAS
        if code:
            errors.update({(t, p): code for t, p, _, _ in parts})
    return errors


def _produce(ctx, req: ProduceRequest, pre_errors: dict):
    broker, v = ctx.broker, ctx.api_version
    acks = req.acks
    now = now_ms()
    metrics = broker.metrics
    responses = []
    wrote = False
    # without an authorizer every topic is writable (no set of names to build)
    writable = None if broker.acls is None else ctx.authorized(
        AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in req.topic_data))
    txn_denied = _transactional_denied(ctx, req)
    bad_acks = acks not in (-1, 0, 1)
    for t in req.topic_data:
        parts = []
        name = t.name
        for pd in t.partition_data:
            if bad_acks:
                parts.append(_err(pd.index, ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}"))
                continue
            if txn_denied or (writable is not None and name not in writable):
                parts.append(_err(pd.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied
                                  else ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if pre_errors and (name, pd.index) in pre_errors:
                code = pre_errors[(name, pd.index)]
                parts.append(_err(pd.index, code, f"{name}-{pd.index} could not be added to the transaction"))
                continue
            if name in INTERNAL_TOPICS:
                # only the broker writes its internal topics (Kafka: ReplicaManager, internalTopicsAllowed)
                parts.append(_err(pd.index, ErrorCode.INVALID_TOPIC_EXCEPTION,
                                  f"cannot append to internal topic {name}"))
                continue
            try:
                code, msg, base, append_time, log_start, n = append_partition(
                    broker, name, pd.index, pd.records, v, now)
            except Exception as e:   # noqa: BLE001 - one partition's failure stays in its answer
                (code, msg), base, append_time, log_start, n = error_of(e), -1, -1, -1, 0
            if code == 0:               # appended, or a duplicate: answered once durable either way
                wrote = True
            if n and metrics is not None:
                metrics.record_messages_in(name, n)
            parts.append(_part(pd.index, code, base, append_time, log_start, msg))
        responses.append(_topic(name, parts))
    if acks == 0:
        return NO_RESPONSE
    resp = _response(responses)
    if not (wrote and broker.sync.enabled):
        return resp
    # the answer once the shared fsync round covering these appends is done: the round's own
    # future carries it (no task or extra future per request); a failed round fails the written
    # partitions with its StorageError (_sync_failed)
    return broker.sync.synced_future(resp, _sync_failed)


def produce_one(broker, payload, got: tuple):
    """The common request on a connection without authentication, authorizer or injected faults:
    `got` is what protocol.messages.produce.read_one_partition read from the frame `payload` (no
    transactional id, acks -1 or 1, one partition). The same validation and append as `_produce`
    (append_partition), without the request's and the answer's objects: the answer is its encoded
    frame (encode_one_partition, the bytes the general path writes), or a future of it under
    fsync-before-ack. None (nothing done) for an internal topic: the general path answers it."""
    version, corr, _, _, _, topic, index, start, stop = got
    if topic in INTERNAL_TOPICS:
        return None
    try:
        code, msg, base, append_time, log_start, n = append_partition(
            broker, topic, index, memoryview(payload)[start:stop], version, now_ms())
    except Exception as e:   # noqa: BLE001 - the failure goes in the answer
        (code, msg), base, append_time, log_start, n = error_of(e), -1, -1, -1, 0
    if n and broker.metrics is not None:
        broker.metrics.record_messages_in(topic, n)
    answer = encode_one_partition(version, corr, topic, index, code, base, append_time, log_start, msg)
    if code or not broker.sync.enabled:
        return answer

    def failed(fut, _, e: BaseException) -> None:       # the fsync round failed: as _sync_failed
        if isinstance(e, StorageError):
            fut.set_result(encode_one_partition(version, corr, topic, index, e.error_code, -1, append_time, log_start,
                                                  str(e)))
        else:
            fut.set_exception(e)

    return broker.sync.synced_future(answer, failed)


def _transactional_denied(ctx, req) -> bool:
    """A request with a transactional batch whose principal may not WRITE its transactional id (with an
    authorizer only: kohort's broker otherwise takes transactional batches without the id, as before)."""
    tid = req.transactional_id
    if ctx.broker.acls is None:
        return False
    if tid is not None and ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return False
    for t in req.topic_data:
        for pd in t.partition_data:
            r = pd.records
            if r is not None and len(r) > ATTRIBUTES_OFFSET + 1 and \
                    int.from_bytes(r[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2], "big") & ATTR_TRANSACTIONAL:
                return True
    return False


def _sync_failed(answer, resp: ProduceResponse, e: BaseException) -> None:
    if not isinstance(e, StorageError):
        answer.set_exception(e)
        return
    for t in resp.responses:
        for p in t.partition_responses:
            if p.error_code == 0:
                p.error_code, p.error_message, p.base_offset = e.error_code, str(e), -1
    answer.set_result(resp)
