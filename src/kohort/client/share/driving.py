"""What both share-consumer drivers (the threaded `consumer.ShareConsumer` and the asyncio
`kohort.aio.AIOShareConsumer`) do alike, with no I/O, threads or event loop: checking the
configuration (the keys KafkaShareConsumer refuses, the acknowledgement and acquire modes), reading a
ShareFetch answer (acknowledgement outcomes, partitions with acquired records, metadata to refresh,
fatal errors) and a ShareAcknowledge answer, turning a partition's acquired ranges into records and
GAPs, handing buffered records out to the application (dropping those whose lock expired), what is
kept per partition leader (`Leader`), and the `CommitBook`: acknowledgements from acknowledge() and
poll() to the leaders' answers, the commits awaiting them and the reports for the callback. Each driver
keeps only its own way of sending, waiting and calling back.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Callable, Mapping

from kohort.client.config import Config, load_config
from kohort.client.share.acknowledgements import (
    ACCEPT, EXPLICIT, IMPLICIT, REJECT, RELEASE, RENEW, Acknowledgements, IllegalStateError,
)
from kohort.client.share.session import FetchLimits, ShareSession
from kohort.errors import ConfigError, ErrorCode, KafkaError, KohortError, for_code
from kohort.protocol.messages.share_fetch import ACQUIRE_MODE_BATCH_OPTIMIZED, ACQUIRE_MODE_RECORD_LIMIT
from kohort.protocol.records import decode_records_list, scan_batches
from kohort.structs import ConsumerRecord, TopicPartition

_tuple_new = tuple.__new__
_offset_of = itemgetter(2)

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
        first, last = take[0][2], take[-1][2]
        if last - first == len(take) - 1:        # offsets increase, so these are first..last, each once
            acks.handed_out_range(tip, first, last)
        else:
            acks.handed_out(tip, map(_offset_of, take))
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
    one = len(acquired) == 1 and kd is None and vd is None
    # one acquired range (the common answer): the decoder adds its delivery count to every record
    got = decode_records_list(d, check_crcs and legacy, min_offset=lo, max_offset=hi + 1,
                              record_factory=ConsumerRecord, prefix=(topic, partition),
                              suffix=(acquired[0][2],) if one else ())
    if one and len(got) == hi - lo + 1 and list(map(_offset_of, got)) == list(range(lo, hi + 1)):
        return got                        # every offset of the range a record, once and in order
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




class Leader:
    """What a driver keeps per partition leader: its share session, whether a ShareFetch or
    ShareAcknowledge is in flight (at most one), and the acknowledgements waiting for a ShareAcknowledge
    ((commit id, "close" or None), {tip: [AckBatch]})."""
    __slots__ = ("node", "session", "busy", "acks_out")

    def __init__(self, node: int, session: ShareSession):
        self.node = node
        self.session = session
        self.busy = False
        self.acks_out: deque = deque()


def as_kohort_error(e: BaseException) -> BaseException:
    """A transport failure as the error reported with the acknowledgements it carried."""
    return e if isinstance(e, KohortError) else KohortError(str(e))


class CommitBook:
    """A share consumer's acknowledgements from the application to the leaders' answers, with no I/O:
    the `Acknowledgements` (what is delivered and pending), records being RENEWed (put back in the
    record buffer once the leader accepted the renewal), records handed out in explicit mode, the
    commit_sync/commit_async calls whose ShareAcknowledge answers are awaited (by commit id), the
    reports waiting for `acknowledgement_commit_callback`, and the acquisition lock duration the
    leaders reported. The drivers send the requests it builds and hand it the answers; waiting
    (threads or asyncio) and calling back stay theirs."""

    def __init__(self, mode: str, names: Mapping[Any, str], ids: Mapping[str, Any], buffer: deque,
                 clock: Callable[[], float]) -> None:
        """`names` (topic id -> name), `ids` (name -> topic id) and `buffer` (tip, records, fetched at)
        are the driver's, kept up to date by it; `clock()` is the driver's time in seconds (what
        `buffer` entries are stamped with)."""
        self.acks = Acknowledgements(mode)
        self.renewing: dict[tuple, ConsumerRecord] = {}            # (tip, offset) -> record being renewed
        self.delivered_records: dict[tuple, ConsumerRecord] = {}   # explicit mode: handed out, unacknowledged
        self.reports: deque = deque()          # ({TopicPartition: set[int]}, error or None) for the callback
        self.lock_timeout_ms: int | None = None
        self._names = names
        self._ids = ids
        self._buffer = buffer
        self._clock = clock
        self._results: dict[int, dict] = {}    # commit id -> {TopicPartition: error or None}
        self._unanswered: dict[int, int] = {}  # commit id -> ShareAcknowledge requests still unanswered
        self._seq = 0

    def reset(self) -> None:
        """The member left: nothing delivered, pending or renewing is its any more."""
        self.acks = Acknowledgements(self.acks.mode)
        self.renewing.clear()
        self.delivered_records.clear()

    # -- the application's side -------------------------------------------------------------------------
    def acknowledge(self, topic: str, partition: int, offset: int, type: int, record: ConsumerRecord | None,
                    leaders: Mapping[int, Leader]) -> None:
        """acknowledge()/acknowledge_offset() of a record the last poll returned (explicit mode)."""
        if self.acks.mode != EXPLICIT:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit "
                                    "(implicit mode accepts every record on the next poll)")
        if type not in (ACCEPT, RELEASE, REJECT, RENEW):
            raise ValueError(f"acknowledge type must be ACCEPT (1), RELEASE (2), REJECT (3) or RENEW (4), got {type!r}")
        tid = self._ids.get(topic)
        if tid is None:
            raise IllegalStateError(f"{topic}[{partition}]@{offset} was not delivered by this consumer")
        tip = (tid, partition)
        if type == RENEW:
            if max((lead.session.version for lead in leaders.values()), default=2) < 2:
                raise IllegalStateError("RENEW needs ShareFetch/ShareAcknowledge v2 (KIP-1222, Kafka 4.2+)")
            if record is None:
                record = self.delivered_records.get((tip, offset))
        self.acks.acknowledge(tip, offset, int(type))
        self.delivered_records.pop((tip, offset), None)
        if type == RENEW and record is not None:
            self.renewing[(tip, offset)] = record

    def hand_out(self, max_records: int, now: float) -> list:
        """Up to `max_records` buffered records for poll() (see `hand_out`)."""
        return hand_out(self._buffer, self.acks, max_records, (self.lock_timeout_ms or 0) / 1000, now,
                        self.delivered_records if self.acks.mode == EXPLICIT else None)

    def holding(self) -> bool:
        """Records handed to the application and not acknowledged yet: the next fetch waits for the
        next poll, which acknowledges them (implicit) or requires them acknowledged (explicit)."""
        return self.acks.holding()

    # -- commits ----------------------------------------------------------------------------------------
    def commit(self, sync: bool, leaders: Mapping[int, Leader], leader_of: Callable[[Any], int | None]) -> int | None:
        """commit_sync/commit_async: the acknowledgements pending (implicit mode: the last poll's
        records as ACCEPT) queued on their leaders' `acks_out`; those without a share session with their
        leader fail at once (NOT_LEADER_OR_FOLLOWER). The commit id, None when nothing was pending; an
        async commit is not kept (its answers go to the callback only)."""
        if self.acks.mode == IMPLICIT:
            self.acks.before_poll()
        pending = self.acks.take_all()
        if not pending:
            return None
        self._seq += 1
        cid = self._seq
        self._results[cid] = {}
        self._unanswered[cid] = 0
        by_leader: dict[int, dict] = {}
        for tip, batches in pending.items():
            node = leader_of(tip)
            if node is None or node not in leaders:
                self.done(cid, {tip: batches}, for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER)(
                    "no share session with the partition's leader"))
                continue
            by_leader.setdefault(node, {})[tip] = batches
        for node, acks in by_leader.items():
            leaders[node].acks_out.append((cid, acks))
            self._unanswered[cid] += 1
        if not sync and not self._unanswered[cid]:
            self._results.pop(cid, None)
            self._unanswered.pop(cid, None)
        return cid

    def unanswered(self, cid: int) -> int:
        """ShareAcknowledge requests of commit `cid` still unanswered."""
        return self._unanswered.get(cid, 0)

    def finish(self, cid: int) -> tuple[dict, int]:
        """commit_sync stops waiting for commit `cid`: ({TopicPartition: error or None}, requests unanswered)."""
        return self._results.pop(cid, {}), self._unanswered.pop(cid, 0)

    def done(self, cid, acks: Mapping, error: BaseException | None) -> None:
        """Acknowledgements answered (or failed): reported to the callback and to commit `cid` (when
        commit_sync waits for it); RENEWed records accepted go back to the front of the buffer."""
        offsets: dict[TopicPartition, set[int]] = {}
        for tip, batches in acks.items():
            tp = TopicPartition(self._names.get(tip[0], str(tip[0])), tip[1])
            offs = set(range(batches[0].first_offset, batches[0].last_offset + 1)) if batches else set()
            for b in batches[1:]:
                offs.update(range(b.first_offset, b.last_offset + 1))
            offsets[tp] = offs
            if cid is not None and cid in self._results:
                self._results[cid][tp] = error
            if self.renewing:
                for o in offs:
                    rec = self.renewing.pop((tip, o), None)
                    if rec is not None and error is None:
                        self._buffer.appendleft((tip, [rec], self._clock()))
        if offsets:
            self.reports.append((offsets, error))

    # -- requests and answers ------------------------------------------------------------------------------
    def take_for(self, node: int, leader_of: Callable[[Any], int | None]) -> dict:
        """The pending acknowledgements of the partitions led by `node` ({tip: [AckBatch]}), taken."""
        out = {}
        for tip in [t for t in self.acks.pending_partitions() if leader_of(t) == node]:
            b = self.acks.take(tip)
            if b:
                out[tip] = b
        return out

    def close_sessions(self, leaders: Mapping[int, Leader], leader_of: Callable[[Any], int | None]) -> None:
        """Leaving: each leader is sent what is pending for it with the session's close (epoch -1)."""
        for lead in leaders.values():
            lead.acks_out.append(("close", self.take_for(lead.node, leader_of)))

    def fetch(self, lead: Leader, parts: set, limits: FetchLimits, leader_of: Callable[[Any], int | None]):
        """The ShareFetch to send to `lead` for `parts`, carrying the acknowledgements pending for it
        (those that cannot ride on it fail at once); the leader is busy until `fetch_answered`."""
        built = lead.session.build_fetch(parts, self.take_for(lead.node, leader_of), limits)
        if built.failed:
            self.done(None, built.failed, for_code(ErrorCode.INVALID_SHARE_SESSION_EPOCH)(
                "acknowledgements cannot ride on a share session's first request (epoch 0)"))
        lead.busy = True
        return built

    def fetch_failed(self, lead: Leader, built, error: BaseException) -> None:
        """A ShareFetch got no answer (`error`): the session is closed, the acknowledgements it carried failed."""
        lead.busy = False
        lead.session.closed()
        if built.acks:
            self.done(None, built.acks, as_kohort_error(error))

    def fetch_answered(self, lead: Leader, built, resp) -> FetchOutcome:
        """The answer to a ShareFetch: the session moves on, the acknowledgements it carried are done;
        the outcome says what else the driver does (records, metadata, fatal error)."""
        lead.busy = False
        if resp.acquisition_lock_timeout_ms:
            self.lock_timeout_ms = resp.acquisition_lock_timeout_ms
        lead.session.handle_response(resp.error_code, fetch=True)
        out = fetch_outcome(resp, built.acks)
        for acks, err in out.acks_done:
            self.done(None, acks, err)
        return out

    def next_acknowledge(self, lead: Leader) -> tuple[Any, Any] | None:
        """The next ShareAcknowledge of `lead`'s `acks_out`: (commit id or "close", built request) to
        send (the leader is then busy until `acknowledge_answered`), or None when nothing is to be sent
        (what could not go is done; the driver wakes whoever waits)."""
        cid, acks = lead.acks_out.popleft()
        closing = cid == "close"
        if closing and lead.session.epoch == 0:
            if acks:
                self.done(None, acks, for_code(ErrorCode.SHARE_SESSION_NOT_FOUND)("no share session to close"))
            return None
        built = lead.session.build_acknowledge(acks, closing=closing)
        if built.failed:
            self.done(None if closing else cid, built.failed, for_code(ErrorCode.INVALID_SHARE_SESSION_EPOCH)(
                "no share session open with the leader yet"))
        if built.request is None:
            self._answered(cid)
            return None
        lead.busy = True
        return cid, built

    def acknowledge_answered(self, lead: Leader, cid, built, resp, error: BaseException | None) -> None:
        """The answer to a ShareAcknowledge (`resp`), or its transport `error`: the session moves on (or
        is closed), its acknowledgements are done and commit `cid` has one answer less to wait for."""
        lead.busy = False
        closing = cid == "close"
        report_cid = None if closing else cid
        if error is not None:
            lead.session.closed()
            self.done(report_cid, built.acks, as_kohort_error(error))
            self._answered(cid)
            return
        if closing:
            lead.session.closed()
        else:
            lead.session.handle_response(resp.error_code, fetch=False)
        if getattr(resp, "acquisition_lock_timeout_ms", 0):
            self.lock_timeout_ms = resp.acquisition_lock_timeout_ms
        for acks, err in acknowledge_outcome(resp, built.acks):
            self.done(report_cid, acks, err)
        self._answered(cid)

    def _answered(self, cid) -> None:
        if cid in self._unanswered:
            self._unanswered[cid] -= 1
