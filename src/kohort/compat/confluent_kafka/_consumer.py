"""confluent-kafka's Consumer over kohort's Consumer.

librdkafka hands out one message at a time and keeps its own notion of offsets, so this layer keeps
them too: the records kohort's poll() returned wait in a buffer; the *application position* of a
partition is the offset after the last message handed out (what `position()` and `commit()` without
arguments use), and the *stored offset* (`store_offsets`, or automatically per message with
enable.auto.offset.store=true) is what auto commit commits. kohort's own auto commit (which commits
its fetch positions, ahead of what was handed out) is turned off; this layer commits stored offsets
every auto.commit.interval.ms from poll()/consume(), after each on_revoke callback and on close, as
librdkafka does. enable.partition.eof gives a `_PARTITION_EOF` message once per time a partition's
position reaches its high watermark.

In on_assign, `assign()`/`incremental_assign()` set start offsets of the partitions being assigned
(the librdkafka idiom); outside a rebalance callback they take partitions without the group.
"""
from __future__ import annotations

import collections
import re
import time

from kohort.client.admin import Admin
from kohort.client.config import ROLES
from kohort.client.consumer.consumer import Consumer as _KConsumer
from kohort.errors import KafkaTimeoutError, KohortError
from kohort.structs import OffsetAndMetadata
from kohort.structs import TopicPartition as _KTP

from ._common import Hooks
from ._config import translate
from ._types import (
    OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, KafkaError, KafkaException, Message, TopicPartition,
    cluster_metadata, error_from, timeout_s, wrap,
)


def _k(tp) -> _KTP:
    return _KTP(tp.topic, tp.partition)


_message = Message.from_record


def _bool(v, default: bool) -> bool:
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() == "true"
    return bool(v)


class Consumer:
    """confluent_kafka.Consumer: subscribe/poll/consume/commit/store_offsets/... over kohort."""

    def __init__(self, conf: dict | None = None, **kwargs):
        conf = dict(conf or {})
        logger = kwargs.pop("logger", None)
        conf.update(kwargs)
        kconf, extras = translate("consumer", conf)
        self._auto_commit = _bool(extras.get("enable.auto.commit"), True)
        self._auto_store = _bool(extras.get("enable.auto.offset.store"), True)
        self._eof = _bool(extras.get("enable.partition.eof"), False)
        self._commit_interval = int(extras.get("auto.commit.interval.ms", 5000)) / 1000
        self._on_commit = extras.get("on_commit")
        self._grouped = kconf.get("group.id") is not None
        kconf["enable.auto.commit"] = False
        self._hooks = Hooks("consumer", kconf.get("client.id", ""), extras, logger)
        kconf.update(self._hooks.kohort_config(self._stats))
        try:
            self._c = _KConsumer(kconf)
        except KohortError as e:
            self._hooks.close()
            raise wrap(e) from None
        self._hooks.watch(self._c)
        self._admin_conf = {k: v for k, v in kconf.items() if k in ROLES["admin"]}
        self._admin = None
        self._buf: collections.deque = collections.deque()
        self._app_pos: dict[_KTP, int] = {}
        self._stored: dict[_KTP, int] = {}
        self._committed: dict[_KTP, int] = {}
        self._eof_sent: dict[_KTP, int] = {}
        self._eofs: collections.deque = collections.deque()     # _PARTITION_EOF messages not handed out yet
        self._next_commit = time.monotonic() + self._commit_interval
        self._next_hook = 0.0
        self._user_cbs = (None, None, None)
        self._in_cb = False
        self._closed = False

    # -- subscription / assignment ------------------------------------------------------------------
    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None) -> None:
        self._check()
        topics = list(topics)
        if any(t.startswith("^") for t in topics):
            alts = [t[1:] if t.startswith("^") else re.escape(t) + "$" for t in topics]
            spec = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
            spec = "^" + spec
        else:
            spec = topics
        self._user_cbs = (on_assign, on_revoke, on_lost)
        try:
            self._c.subscribe(spec, on_assign=self._assigned, on_revoke=self._revoked,
                              on_lost=self._lost)
        except KohortError as e:
            raise wrap(e) from None

    def unsubscribe(self) -> None:
        self._check()
        self._commit_stored(list(self._app_pos))
        self._c.unsubscribe()
        self._forget(list(self._app_pos))

    def _call_user(self, cb, tps) -> None:
        if cb is None:
            return
        self._in_cb = True
        try:
            cb(self, [TopicPartition(t.topic, t.partition) for t in tps])
        finally:
            self._in_cb = False

    def _assigned(self, _kc, tps) -> None:
        for tp in tps:
            self._eof_sent.pop(tp, None)
        self._call_user(self._user_cbs[0], tps)

    def _revoked(self, _kc, tps, lost: bool = False) -> None:
        self._purge(tps)
        cb = self._user_cbs[2] if lost and self._user_cbs[2] is not None else self._user_cbs[1]
        self._call_user(cb, tps)
        if not lost:
            self._commit_stored(tps)
        self._forget(tps)

    def _lost(self, kc, tps) -> None:
        self._revoked(kc, tps, lost=True)

    def _forget(self, tps) -> None:
        for tp in tps:
            for d in (self._app_pos, self._stored, self._eof_sent):
                d.pop(tp, None)

    def _purge(self, tps) -> None:
        drop = set(tps)
        if drop and self._buf:
            self._buf = collections.deque(r for r in self._buf if (r.topic, r.partition) not in drop)
        if drop and self._eofs:
            self._eofs = collections.deque(m for m in self._eofs if (m.topic(), m.partition()) not in drop)

    def assign(self, partitions) -> None:
        self._check()
        if not self._in_cb:
            try:
                self._c.assign([_k(p) for p in partitions])
            except KohortError as e:
                raise wrap(e) from None
            keep = {_k(p) for p in partitions}
            self._purge([tp for tp in list(self._app_pos) if tp not in keep])
            self._forget([tp for tp in list(self._app_pos) if tp not in keep])
        self._start_at(partitions)

    def incremental_assign(self, partitions) -> None:
        self._check()
        if not self._in_cb:
            cur = self._c.assignment()
            self._c.assign(sorted(cur | {_k(p) for p in partitions}))
        self._start_at(partitions)

    def incremental_unassign(self, partitions) -> None:
        self._check()
        tps = [_k(p) for p in partitions]
        if not self._in_cb:
            self._c.assign(sorted(self._c.assignment() - set(tps)))
        self._purge(tps)
        self._forget(tps)

    def unassign(self) -> None:
        self._check()
        if not self._in_cb:
            self._c.assign([])
            self._purge(list(self._app_pos))
            self._forget(list(self._app_pos))

    def assignment(self) -> list:
        return [TopicPartition(t.topic, t.partition) for t in sorted(self._c.assignment())]

    def _start_at(self, partitions) -> None:
        for p in partitions:
            off = getattr(p, "offset", OFFSET_INVALID)
            if off >= 0 or off in (OFFSET_BEGINNING, OFFSET_END):
                self._seek(_k(p), off)

    def _seek(self, tp: _KTP, off: int) -> None:
        self._purge([tp])
        self._eof_sent.pop(tp, None)
        if off >= 0:
            self._c.seek(tp, off)
            self._app_pos[tp] = off
        else:
            (self._c.seek_to_beginning if off == OFFSET_BEGINNING else self._c.seek_to_end)([tp])
            self._app_pos.pop(tp, None)

    def seek(self, partition) -> None:
        self._check()
        try:
            self._seek(_k(partition), partition.offset)
        except KohortError as e:
            raise wrap(e) from None

    def pause(self, partitions) -> None:
        self._check()
        tps = [_k(p) for p in partitions]
        self._c.pause(tps)
        self._purge(tps)
        for tp in tps:               # what was fetched but not handed out is fetched again on resume
            if tp in self._app_pos:
                self._c.seek(tp, self._app_pos[tp])

    def resume(self, partitions) -> None:
        self._check()
        self._c.resume([_k(p) for p in partitions])

    # -- messages -----------------------------------------------------------------------------------------
    def poll(self, timeout: float | None = None):
        msgs = self._take(1, timeout_s(timeout))
        return msgs[0] if msgs else None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list:
        if not 1 <= int(num_messages) <= 1000000:
            raise ValueError("num_messages must be between 1 and 1000000 (1M)")
        return self._take(int(num_messages), timeout_s(timeout))

    def _take(self, n: int, timeout: float | None) -> list:
        self._check()
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list = []
        polled = False
        while True:
            self._service()
            if self._buf and self._grouped and time.monotonic() >= self._next_hook:
                # messages are served from the buffer without kohort's poll(): let the group run its
                # rebalances (callbacks, which purge the buffer), commits and max.poll.interval clock
                self._next_hook = time.monotonic() + 0.01
                try:
                    self._c.poll_group()
                except KohortError as e:
                    err = error_from(e)
                    self._hooks.error(err)
                    return out + [Message(error=err)]
            buf = self._buf
            take = min(n - len(out), len(buf))
            if take:
                popleft = buf.popleft
                recs = [popleft() for _ in range(take)]
                out.extend(map(_message, recs))
                last = {}
                for r in recs:                   # ConsumerRecord: (topic, partition, offset, ...)
                    last[(r[0], r[1])] = r[2]
                for (t, p), o in last.items():
                    tp = _KTP(t, p)
                    self._app_pos[tp] = o + 1
                    if self._auto_store:
                        self._stored[tp] = o + 1
            if len(out) >= n:
                return out
            if self._eof and not buf:
                if not self._eofs:
                    self._eofs.extend(self._eof_events())
                while self._eofs and len(out) < n:
                    out.append(self._eofs.popleft())
                if len(out) >= n:
                    return out
            left = 0.5 if deadline is None else deadline - time.monotonic()
            if left <= 0 and polled:
                return out
            polled = True              # poll(0) still turns kohort's consumer once (fetches, rebalances)
            try:
                recs = self._c.poll(max(0.0, min(left, 0.5) if out or n > 1 else left))
            except KohortError as e:
                err = error_from(e)
                self._hooks.error(err)
                out.append(Message(error=err))
                return out
            buf.extend(recs)
            if out and not recs and n == 1:
                return out

    def _eof_events(self) -> list:
        out = []
        lag = self._c.lag()
        paused = self._c.paused()
        for tp, lg in lag.items():
            if lg != 0 or tp in paused:
                continue
            try:
                pos = self._c.position(tp, timeout=0)
            except (KafkaTimeoutError, KohortError):
                continue
            if self._app_pos.get(tp, pos) != pos or self._eof_sent.get(tp) == pos:
                continue
            self._eof_sent[tp] = pos
            out.append(Message(tp.topic, tp.partition, pos, error=KafkaError(KafkaError._PARTITION_EOF)))
        return out

    def _service(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_commit:
            self._next_commit = time.monotonic() + self._commit_interval
            offs = {tp: o for tp, o in self._stored.items() if self._committed.get(tp) != o}
            if offs and self._grouped:
                self._c.commit(offs, asynchronous=True, callback=self._commit_done)
        self._hooks.serve()
        self._c.emit_statistics()

    def _commit_done(self, err, offsets) -> None:
        if err is None:
            for tp, o in (offsets or {}).items():
                self._committed[tp] = o.offset if isinstance(o, OffsetAndMetadata) else o
        if self._on_commit is not None:
            tps = [TopicPartition(tp.topic, tp.partition, o.offset if isinstance(o, OffsetAndMetadata) else o)
                   for tp, o in sorted((offsets or {}).items())]
            self._on_commit(None if err is None else error_from(err), tps)

    def _commit_stored(self, tps) -> None:
        offs = {tp: self._stored[tp] for tp in tps if tp in self._stored and self._committed.get(tp) != self._stored[tp]}
        if not (self._auto_commit and offs and self._grouped):
            return
        try:
            self._c.commit(offs)
            self._commit_done(None, offs)
        except KohortError as e:
            self._commit_done(e, offs)

    def _stats(self, stats: dict) -> dict:
        """kohort's consumer statistics plus what this layer knows per partition: the application's
        offset, the stored and committed offsets, and the lag counting messages still buffered here."""
        buffered: dict = {}
        for r in list(self._buf):
            buffered[(r.topic, r.partition)] = buffered.get((r.topic, r.partition), 0) + 1
        for t in stats.get("topics", {}).values():
            for pe in t["partitions"].values():
                tp = _KTP(t["topic"], pe["partition"])
                pe["app_offset"] = self._app_pos.get(tp, OFFSET_INVALID)
                pe["stored_offset"] = self._stored.get(tp, OFFSET_INVALID)
                pe["committed_offset"] = self._committed.get(tp, OFFSET_INVALID)
                if pe.get("consumer_lag", -1) >= 0:
                    pe["consumer_lag"] += buffered.get(tp, 0)
        return stats

    # -- offsets ------------------------------------------------------------------------------------------
    def commit(self, message=None, offsets=None, asynchronous: bool = True):
        self._check()
        if message is not None and offsets is not None:
            raise KafkaException(KafkaError._INVALID_ARG, "commit(): message and offsets are mutually exclusive")
        if message is not None:
            offs = {_KTP(message.topic(), message.partition()): OffsetAndMetadata(message.offset() + 1)}
        elif offsets is not None:
            offs = {_k(p): OffsetAndMetadata(p.offset, p.metadata or "") for p in offsets}
            self._check_partitions(offs)
        else:
            offs = {tp: OffsetAndMetadata(o) for tp, o in self._app_pos.items()}
            if not offs:
                raise KafkaException(KafkaError._NO_OFFSET)
        try:
            if asynchronous:
                self._c.commit(offs, asynchronous=True, callback=self._commit_done)
                return None
            self._c.commit(offs)
        except KohortError as e:
            raise wrap(e) from None
        for tp, o in offs.items():
            self._committed[tp] = o.offset
        return [TopicPartition(tp.topic, tp.partition, o.offset, o.metadata or None) for tp, o in sorted(offs.items())]

    def _check_partitions(self, offs) -> None:
        """librdkafka fails a commit to a partition that does not exist at once (kohort's commit would retry
        the broker's retriable UNKNOWN_TOPIC_OR_PARTITION until its timeout)."""
        for topic in {tp.topic for tp in offs}:
            parts = self._c.partitions_for_topic(topic)
            bad = [tp for tp in offs if tp.topic == topic and (parts is None or tp.partition not in parts)]
            if bad:
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                f"commit: {bad[0]} does not exist"))

    def store_offsets(self, message=None, offsets=None) -> None:
        self._check()
        if message is not None:
            self._stored[_KTP(message.topic(), message.partition())] = message.offset() + 1
        elif offsets is not None:
            for p in offsets:
                self._stored[_k(p)] = p.offset
        else:
            raise KafkaException(KafkaError._INVALID_ARG, "store_offsets() needs message or offsets")

    def committed(self, partitions, timeout: float | None = None) -> list:
        self._check()
        try:
            got = self._c.committed([_k(p) for p in partitions], timeout_s(timeout))
        except KohortError as e:
            raise wrap(e) from None
        out = []
        for p in partitions:
            o = got.get(_k(p))
            out.append(TopicPartition(p.topic, p.partition, OFFSET_INVALID if o is None else o.offset,
                                      None if o is None else (o.metadata or None)))
        return out

    def position(self, partitions) -> list:
        self._check()
        return [TopicPartition(p.topic, p.partition, self._app_pos.get(_k(p), OFFSET_INVALID)) for p in partitions]

    def get_watermark_offsets(self, partition, timeout: float | None = None, cached: bool = False):
        self._check()
        tp = _k(partition)
        if cached:
            lg = self._c.lag().get(tp)
            if lg is None:
                return (OFFSET_INVALID, OFFSET_INVALID)
            return (OFFSET_INVALID, self._c.position(tp, timeout=0) + lg)
        t = timeout_s(timeout)
        try:
            lo = self._c.beginning_offsets([tp], t)[tp]
            hi = self._c.end_offsets([tp], t)[tp]
        except KohortError as e:
            raise wrap(e) from None
        return (lo, hi)

    def offsets_for_times(self, partitions, timeout: float | None = None) -> list:
        self._check()
        try:
            got = self._c.offsets_for_times({_k(p): p.offset for p in partitions}, timeout_s(timeout))
        except KohortError as e:
            raise wrap(e) from None
        return [TopicPartition(p.topic, p.partition, OFFSET_END if got[_k(p)] is None else got[_k(p)].offset)
                for p in partitions]

    # -- metadata / lifecycle -------------------------------------------------------------------------------
    def list_topics(self, topic: str | None = None, timeout: float | None = -1):
        self._check()
        if self._admin is None:
            self._admin = Admin(self._admin_conf)
        try:
            return cluster_metadata(self._admin, topic, timeout_s(timeout))
        except KohortError as e:
            raise wrap(e) from None

    def consumer_group_metadata(self):
        """The group's metadata for Producer.send_offsets_to_transaction (opaque, as in confluent-kafka)."""
        self._check()
        return self._c.group_metadata()

    def memberid(self):
        md = self._c.group_metadata()
        return md.member_id if md is not None and md.member_id else None

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._commit_stored(list(self._stored))
            self._c.close(autocommit=False)
        finally:
            self._closed = True
            if self._admin is not None:
                self._admin.close()
            self._hooks.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")
