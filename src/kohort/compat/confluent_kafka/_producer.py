"""confluent-kafka's Producer over kohort's Producer.

Delivery reports are queued as kohort acknowledges records and served — the callbacks called — on the
application's thread inside `poll()` and `flush()`, as librdkafka does. `len(p)` counts records whose
delivery report has not been served yet (or, without a callback, that are not yet acknowledged); at
queue.buffering.max.messages of them produce() raises BufferError, as librdkafka does.
"""
from __future__ import annotations

import collections
import threading
import time

from kohort.client.admin import Admin
from kohort.client.config import ROLES
from kohort.client.producer import Producer as _KProducer
from kohort.errors import KohortError

from ._common import Hooks
from ._config import translate
from ._types import TIMESTAMP_CREATE_TIME, KafkaException, Message, cluster_metadata, error_from, timeout_s, wrap


def _headers(h):
    if h is None:
        return None
    items = h.items() if isinstance(h, dict) else h
    out = []
    for k, v in items:
        if isinstance(v, str):
            v = v.encode("utf-8")
        out.append((k, v))
    return out


class Producer:
    """confluent_kafka.Producer: produce/poll/flush/len/list_topics over kohort."""

    def __init__(self, conf: dict | None = None, **kwargs):
        conf = dict(conf or {})
        logger = kwargs.pop("logger", None)
        conf.update(kwargs)
        kconf, extras = translate("producer", conf)
        self._dr_cb = extras.get("on_delivery")
        self._max_messages = int(extras.get("queue.buffering.max.messages", 100000))
        self._only_errors = str(extras.get("delivery.report.only.error", "false")).lower() == "true"
        self._hooks = Hooks("producer", kconf.get("client.id", ""), extras, logger)
        kconf.update(self._hooks.kohort_config(self._stats))
        try:
            self._p = _KProducer(kconf)
        except KohortError as e:
            self._hooks.close()
            raise wrap(e) from None
        self._hooks.watch(self._p)
        self._admin_conf = {k: v for k, v in kconf.items() if k in ROLES["admin"]}
        self._admin = None
        self._events: collections.deque = collections.deque()
        self._pending = 0
        self._cond = threading.Condition()

    def produce(self, topic, value=None, key=None, partition: int = -1, on_delivery=None, callback=None,
                timestamp: int = 0, headers=None) -> None:
        cb = on_delivery or callback or self._dr_cb
        hdrs = _headers(headers)
        if isinstance(value, str):
            value = value.encode("utf-8")
        if isinstance(key, str):
            key = key.encode("utf-8")
        t0 = time.monotonic()

        def done(err, md, cb=cb, topic=topic, key=key, value=value, hdrs=hdrs):
            with self._cond:
                if cb is None or (self._only_errors and err is None):
                    self._pending -= 1
                else:
                    part = md.partition if md is not None else partition
                    msg = Message(topic, part, md.offset if md is not None else -1001, key, value, hdrs,
                                  (TIMESTAMP_CREATE_TIME, md.timestamp) if md is not None else (0, 0),
                                  None if err is None else error_from(err), latency=time.monotonic() - t0)
                    self._events.append((cb, msg))
                self._cond.notify_all()

        with self._cond:
            if self._pending >= self._max_messages:
                raise BufferError(f"Local: Queue full ({self._pending} messages awaiting delivery, "
                                  f"queue.buffering.max.messages={self._max_messages}): call poll() or flush()")
            self._pending += 1
        try:
            self._p.produce(topic, value, key, headers=hdrs, partition=None if partition < 0 else partition,
                            timestamp=timestamp or None, on_delivery=done)
        except KohortError as e:
            with self._cond:
                self._pending -= 1
            raise wrap(e) from None

    def _serve(self) -> int:
        n = 0
        while True:
            with self._cond:
                if not self._events:
                    return n
                cb, msg = self._events.popleft()
                self._pending -= 1
            cb(msg.error(), msg)
            n += 1

    def poll(self, timeout: float | None = None) -> int:
        t = timeout_s(timeout)
        deadline = None if t is None else time.monotonic() + t
        while True:
            n = self._serve()
            self._hooks.serve()
            self._p.emit_statistics()
            if n:
                return n
            with self._cond:
                if self._events:
                    continue
                if self._pending == 0 and t is None:
                    return 0
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return 0
                self._cond.wait(0.5 if left is None else min(left, 0.5))

    def flush(self, timeout: float | None = None) -> int:
        t = timeout_s(timeout)
        deadline = None if t is None else time.monotonic() + t
        self._p.flush(t)
        while True:
            self._serve()
            with self._cond:
                if self._pending == 0 or self._events:
                    if not self._events:
                        return 0
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return self._pending
                self._cond.wait(0.1 if left is None else min(left, 0.1))

    def __len__(self) -> int:
        with self._cond:
            return self._pending

    def __bool__(self) -> bool:
        return True

    def _stats(self, stats: dict) -> dict:
        """kohort's producer statistics; msg_cnt as librdkafka counts it (delivery reports not yet
        served included)."""
        stats["msg_cnt"] = len(self)
        return stats

    def list_topics(self, topic: str | None = None, timeout: float | None = -1):
        if self._admin is None:
            self._admin = Admin(self._admin_conf)
        try:
            return cluster_metadata(self._admin, topic, timeout_s(timeout))
        except KohortError as e:
            raise wrap(e) from None

    def close(self, timeout: float | None = None) -> int:
        """Not in confluent-kafka (its Producer is closed when collected): flush and stop kohort's I/O."""
        left = self.flush(timeout)
        self._p.close(0 if left else timeout_s(timeout))
        if self._admin is not None:
            self._admin.close()
        self._hooks.close()
        return left

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- transactions (KIP-98) over kohort's transactional producer; errors as librdkafka's: `fatal()` or
    # `txn_requires_abort()`, a timeout is retriable (call again) -----------------------------------------------
    def _txn(self, fn, *args):
        try:
            return fn(*args)
        except KohortError as e:
            raise wrap(e) from None

    def init_transactions(self, timeout: float | None = None) -> None:
        self._txn(self._p.init_transactions, timeout_s(timeout))

    def begin_transaction(self) -> None:
        self._txn(self._p.begin_transaction)

    def send_offsets_to_transaction(self, positions, group_metadata, timeout: float | None = None) -> None:
        """`positions`: TopicPartitions whose offset is the next record to read (Consumer.position()),
        `group_metadata`: Consumer.consumer_group_metadata()."""
        offsets = {(tp.topic, tp.partition): tp.offset for tp in positions}
        self._txn(self._p.send_offsets_to_transaction, offsets, group_metadata, timeout_s(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._txn(self._p.commit_transaction, timeout_s(timeout))
        self._serve()                  # delivery reports of the committed records, as librdkafka's flush

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._txn(self._p.abort_transaction, timeout_s(timeout))
        self._serve()
