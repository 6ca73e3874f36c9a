"""What both share-consumer drivers (the threaded `consumer.ShareConsumer` and the asyncio
`kohort.aio.AIOShareConsumer`) do alike, with no I/O, threads or event loop: checking the
configuration (the keys KafkaShareConsumer refuses, the acknowledgement and acquire modes), reading a
ShareFetch answer (acknowledgement outcomes, partitions with acquired records, metadata to refresh,
fatal errors) and a ShareAcknowledge answer, turning a partition's acquired ranges into records and
GAPs, and handing buffered records out to the application (dropping those whose lock expired).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kohort.client.config import Config, load_config
from kohort.client.share.acknowledgements import EXPLICIT, IMPLICIT, REJECT, Acknowledgements
from kohort.errors import ConfigError, ErrorCode, KafkaError, for_code
from kohort.protocol.messages.share_fetch import ACQUIRE_MODE_BATCH_OPTIMIZED, ACQUIRE_MODE_RECORD_LIMIT
from kohort.protocol.records import decode_records_list, scan_batches
from kohort.structs import ConsumerRecord

_tuple_new = tuple.__new__

# Java's ShareConsumerConfig refuses these (they belong to the group, or to other group types).
UNSUPPORTED_CONFIGS = (
    "auto.offset.reset", "enable.auto.commit", "group.instance.id", "isolation.level",
    "partition.assignment.strategy", "interceptor.classes", "session.timeout.ms", "heartbeat.interval.ms",
    "group.protocol", "group.remote.assignor",
)
ACQUIRE_MODES = {"batch_optimized": ACQUIRE_MODE_BATCH_OPTIMIZED, "record_limit": ACQUIRE_MODE_RECORD_LIMIT}
# partition errors of a ShareFetch answer after which the leaders are looked up again
REFRESH_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.FENCED_LEADER_EPOCH})
FATAL_FETCH_ERRORS = frozenset({ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.UNSUPPORTED_VERSION})


@dataclass(frozen=True)
class ShareSettings:
    """A share consumer's checked configuration."""
    config: Config
    acknowledgement_mode: str
    acquire_mode: str
    acquire_mode_id: int
    callback: Callable | None


def share_settings(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any],
                   callback: Callable | None) -> ShareSettings:
    """`config` (Kafka's consumer keys) plus keyword arguments with "_" for "."; ConfigError for the
    keys KafkaShareConsumer refuses, bad modes, a missing group.id or a callback that is not callable."""
    conf = dict(config or {})
    conf.update({k.replace("_", "."): v for k, v in kwargs.items()})
    bad = [k for k in UNSUPPORTED_CONFIGS if k in conf]
    if bad:
        raise ConfigError(f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not supported by a share "
                          "consumer (as in Java's KafkaShareConsumer); share-group settings such as "
                          "share.auto.offset.reset and share.isolation.level are group configs "
                          "(Admin.alter_configs(('group', group_id), {...}))")
    mode = str(conf.pop("share.acknowledgement.mode", IMPLICIT)).lower()
    if mode not in (IMPLICIT, EXPLICIT):
        raise ConfigError(f"share.acknowledgement.mode must be implicit or explicit, got {mode!r}")
    acquire = str(conf.pop("share.acquire.mode", "batch_optimized")).lower()
    if acquire not in ACQUIRE_MODES:
        raise ConfigError(f"share.acquire.mode must be batch_optimized or record_limit, got {acquire!r}")
    if callback is not None and not callable(callback):
        raise ConfigError("acknowledgement_commit_callback must be callable")
    if not conf.get("group.id"):
        raise ConfigError("a share consumer needs group.id")
    return ShareSettings(load_config("consumer", conf), mode, acquire, ACQUIRE_MODES[acquire], callback)


@dataclass
class FetchOutcome:
    """What a ShareFetch answer (no transport error) means for the driver."""
    error: KafkaError | None = None                  # the top-level error
    fatal: bool = False                              # the consumer cannot go on (raised from poll)
    acks_done: list = field(default_factory=list)    # [({tip: [AckBatch]}, error or None)]
    acquired: list = field(default_factory=list)     # [(tip, partition data)] with acquired records
    refresh_metadata: bool = False


def fetch_outcome(resp, acks: Mapping) -> FetchOutcome:
    """Read a ShareFetch answer to a request that carried `acks` ({tip: [AckBatch]})."""
    out = FetchOutcome()
    if resp.error_code:
        out.error = for_code(resp.error_code)(resp.error_message or "ShareFetch")
        if acks:
            out.acks_done.append((dict(acks), out.error))
        out.fatal = resp.error_code in FATAL_FETCH_ERRORS
        return out
    answered: set = set()
    for t in resp.responses:
        for p in t.partitions:
            tip = (t.topic_id, p.partition_index)
            answered.add(tip)
            if tip in acks:
                code = p.acknowledge_error_code
                out.acks_done.append(({tip: acks[tip]}, for_code(code)(
                    p.acknowledge_error_message or "acknowledgement") if code else None))
            if p.error_code:
                if p.error_code in REFRESH_ERRORS:
                    out.refresh_metadata = True
                continue
            if p.acquired_records:
                out.acquired.append((tip, p))
    for tip, batches in acks.items():
        if tip not in answered:
            out.acks_done.append(({tip: batches}, None))
    return out


def acknowledge_outcome(resp, acks: Mapping) -> list:
    """Read a ShareAcknowledge answer to a request that carried `acks`: [({tip: [AckBatch]}, error or None)]."""
    if resp.error_code:
        return [(dict(acks), for_code(resp.error_code)(resp.error_message or "ShareAcknowledge"))]
    codes = {(t.topic_id, p.partition_index): (p.error_code, p.error_message)
             for t in resp.responses for p in t.partitions}
    out = []
    for tip, batches in acks.items():
        code, msg = codes.get(tip, (0, None))
        out.append(({tip: batches}, for_code(code)(msg or "acknowledgement") if code else None))
    return out


def hand_out(buffer: deque, acks: Acknowledgements, max_records: int, lock_s: float, now: float,
             delivered_records: dict | None) -> list:
    """Up to `max_records` records from `buffer` ((tip, records, fetched at) entries), marked as handed
    out in `acks` (and kept in `delivered_records` by (tip, offset) in explicit mode). Entries fetched
    `lock_s` seconds or more before `now` are dropped: their locks expired, the leader hands those
    records out again (to any member), so they are not this member's."""
    out: list = []
    while buffer and len(out) < max_records:
        tip, recs, at = buffer[0]
        if lock_s and now - at >= lock_s:
            buffer.popleft()
            continue
        take = recs[:max_records - len(out)]
        if len(take) == len(recs):
            buffer.popleft()
        else:
            buffer[0] = (tip, recs[len(take):], at)
        acks.handed_out(tip, [r[2] for r in take])
        if delivered_records is not None:
            for r in take:
                delivered_records[(tip, r[2])] = r
        out.extend(take)
    return out


def acquired_records(name: str | None, tip, p, acks: Acknowledgements, check_crcs: bool, kd, vd,
                     log) -> list:
    """The records of one partition of a ShareFetch answer (`p`, with acquired records), each with
    its delivery count. Acquired offsets without a record are GAP-acknowledged in `acks`; records that
    cannot be decoded are all REJECTed, as Java's share consumer does with bad batches."""
    acquired = sorted((a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records)
    data = p.records
    recs: list = []
    if name is not None and data is not None and len(data):
        try:
            recs = _decode_acquired(name, tip[1], data, acquired, check_crcs, kd, vd)
        except Exception as e:
            log.warning("ShareFetch records of %s[%d] could not be decoded (%s): rejecting them", name, tip[1], e)
            pend = acks._pending.setdefault(tip, {})
            for first, last, _ in acquired:
                pend.update(dict.fromkeys(range(first, last + 1), REJECT))
            return []
    if len(recs) != sum(last - first + 1 for first, last, _ in acquired):
        have = {r[2] for r in recs}
        gaps = [o for first, last, _ in acquired for o in range(first, last + 1) if o not in have]
        acks.delivered(tip, _ranges(gaps), [])     # acquired offsets without a record: GAP
    return recs


def _decode_acquired(topic: str, partition: int, data, acquired: list[tuple[int, int, int]], check_crcs: bool,
                     kd, vd) -> list[ConsumerRecord]:
    """The records of a ShareFetch answer's bytes inside the `acquired` (first, last, delivery count)
    ranges (sorted), each with its delivery count, in offset order, each offset once. Only the offsets
    from the first acquired to the last are decoded: a leader sends whole batches, which may hold many
    more records than it handed this member (the compiled decoder when built)."""
    d = data if type(data) is bytes else bytes(data)
    lo, hi = acquired[0][0], max(last for _, last, _ in acquired)
    _, _, legacy = scan_batches(d, lo, check_crcs)      # v2 CRCs are checked here
    got = decode_records_list(d, check_crcs and legacy, min_offset=lo, max_offset=hi + 1,
                              record_factory=ConsumerRecord, prefix=(topic, partition))
    new = _tuple_new
    out: list = []
    ranges = iter(acquired)
    first, last, count = next(ranges)
    prev = lo - 1
    for r in got:
        o = r[2]
        if o <= prev:                     # the same offset again (repeated batch): the first one counts
            continue
        while o > last:
            first, last, count = next(ranges, (hi + 1, hi + 1, 0))
        if o < first:                     # between two acquired ranges: another member's record
            continue
        prev = o
        if kd is None and vd is None:
            out.append(new(ConsumerRecord, (*r[:9], count)))
        else:
            out.append(new(ConsumerRecord, (r[0], r[1], o, r[3], r[4], r[5] if kd is None else kd(r[5]),
                                            r[6] if vd is None else vd(r[6]), r[7], r[8], count)))
    return out


def _ranges(offsets) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o - 1:
            out[-1][1] = o
        else:
            out.append([o, o])
    return [(a, b) for a, b in out]


