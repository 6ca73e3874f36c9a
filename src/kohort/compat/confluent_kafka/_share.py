"""confluent-kafka's ShareConsumer (KIP-932, librdkafka's preview share consumer, confluent-kafka
2.16's Python API) over kohort's ShareConsumer.

    c = ShareConsumer({"bootstrap.servers": ..., "group.id": "workers",
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe(["jobs"])
    for m in c.poll(1.0):                       # Messages: a read-only sequence of Message
        c.acknowledge(m, AcknowledgeType.ACCEPT)   # m.delivery_count(): 1, 2, ...
    c.commit_sync()                             # {TopicPartition: None | KafkaException}

What it follows of confluent-kafka 2.16: `poll(timeout=-1)` returns `Messages` (count(), is_empty(),
records()); `acknowledge(message, ack_type)` and `acknowledge_offset(topic, partition, offset,
ack_type)` only in explicit mode; ACCEPT / RELEASE / REJECT (librdkafka has no RENEW);
`commit_sync(timeout=60)` -> {TopicPartition: None or KafkaException}; `commit_async()` with the
callback of `set_acknowledgement_commit_callback(callback(offsets, exception))`, called from poll,
commit_sync, commit_async or close; misuse (poll before subscribe, poll with unacknowledged records in
explicit mode, use after close) raises IllegalStateException; keys not applicable to a share
consumer (enable.auto.commit, auto.offset.reset, isolation.level, group.instance.id, ...) raise
ValueError as confluent-kafka does. Unlike librdkafka, an unknown `share.acknowledgement.mode` value is
refused.
"""
from __future__ import annotations

import enum
import time
from typing import Any, Callable, Iterable, Sequence, overload

from kohort.client.share.acknowledgements import IllegalStateError
from kohort.client.share.consumer import UNSUPPORTED_CONFIGS
from kohort.client.share.consumer import ShareConsumer as _KShareConsumer
from kohort.errors import KohortError

from ._common import Hooks
from ._config import translate
from ._types import KafkaException, Message, TopicPartition, error_from, timeout_s

_message = Message.from_record
# librdkafka's consumer keys that a share consumer refuses (ValueError "... is not applicable")
_NOT_APPLICABLE = set(UNSUPPORTED_CONFIGS) | {"enable.auto.commit", "enable.auto.offset.store",
                                              "auto.commit.interval.ms", "enable.partition.eof", "on_commit"}


class IllegalStateException(RuntimeError):
    """confluent-kafka's IllegalStateException: a call the share consumer's state does not allow."""


class AcknowledgeType(enum.IntEnum):
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class Messages(Sequence[Message]):
    """The batch poll() returns: a read-only sequence of Message."""

    __slots__ = ("_records",)

    def __init__(self, records: list[Message] | None = None) -> None:
        self._records = list(records or [])

    @classmethod
    def _from_list(cls, records: list[Message]) -> "Messages":
        m = cls.__new__(cls)
        m._records = records
        return m

    @overload
    def __getitem__(self, i: int) -> Message: ...
    @overload
    def __getitem__(self, i: slice) -> Messages: ...

    def __getitem__(self, i: int | slice) -> Message | Messages:
        if isinstance(i, slice):
            return Messages._from_list(self._records[i])
        return self._records[i]

    def __len__(self) -> int:
        return len(self._records)

    def count(self, value: Any = None) -> int:          # confluent-kafka: count() is the number of messages
        return len(self._records) if value is None else self._records.count(value)

    def is_empty(self) -> bool:
        return not self._records

    def records(self) -> list[Message]:
        return list(self._records)

    def __repr__(self) -> str:
        return f"Messages({self._records!r})"


def _state(e: BaseException) -> IllegalStateException:
    return IllegalStateException(str(e))


class ShareConsumer:
    """confluent_kafka.ShareConsumer over kohort.ShareConsumer."""

    def __init__(self, conf: dict | None = None, **kwargs):
        conf = dict(conf or {})
        logger = kwargs.pop("logger", None)
        conf.update(kwargs)
        bad = sorted(k for k in conf if k in _NOT_APPLICABLE)
        if bad:
            raise ValueError(f"Failed to create share consumer: `{bad[0]}` is not applicable for share consumer")
        share = {k: conf.pop(k) for k in ("share.acknowledgement.mode",) if k in conf}
        kconf, extras = translate("consumer", conf)
        kconf.update(share)
        self._hooks = Hooks("consumer", kconf.get("client.id", ""), extras, logger)
        self._callback: Callable | None = None
        self._in_callback = False
        try:
            self._c = _KShareConsumer(kconf, acknowledgement_commit_callback=self._on_ack_commit)
        except KohortError as e:
            self._hooks.close()
            raise ValueError(f"Failed to create share consumer: {e}") from None
        self._closed = False

    # -- helpers -------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise IllegalStateException("Share consumer closed")
        if self._in_callback:
            raise IllegalStateException("not allowed from within the acknowledgement commit callback")

    def _on_ack_commit(self, offsets: dict, error) -> None:
        if self._callback is None:
            return
        ck_offsets = {TopicPartition(tp.topic, tp.partition): set(offs) for tp, offs in offsets.items()}
        exc = None if error is None else KafkaException(error_from(error))
        self._in_callback = True
        try:
            self._callback(ck_offsets, exc)
        finally:
            self._in_callback = False

    # -- API ------------------------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> None:
        self._check()
        topics = list(topics)
        if any(not isinstance(t, str) or not t for t in topics) or len(set(topics)) != len(topics):
            raise ValueError(f"topics must be distinct non-empty names, got {topics!r}")
        if not topics:
            self.unsubscribe()
            return
        try:
            self._c.subscribe(topics)
        except IllegalStateError as e:
            raise _state(e) from None
        except KohortError as e:
            raise KafkaException(error_from(e)) from None

    def subscription(self) -> list[str]:
        self._check()
        return sorted(self._c.subscription())

    def unsubscribe(self) -> None:
        self._check()
        try:
            self._c.unsubscribe()
        except KohortError as e:
            raise KafkaException(error_from(e)) from None

    def poll(self, timeout: float | None = -1) -> Messages:
        self._check()
        t = timeout_s(timeout)
        deadline = None if t is None else time.monotonic() + t
        while True:
            step = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            try:
                recs = self._c.poll(step)
            except IllegalStateError as e:
                raise _state(e) from None
            except KohortError as e:
                raise KafkaException(error_from(e)) from None
            if recs or (deadline is not None and time.monotonic() >= deadline):
                return Messages._from_list([_message(r) for r in recs])

    def acknowledge(self, message: Message, ack_type: int = AcknowledgeType.ACCEPT) -> None:
        if not isinstance(message, Message):
            raise TypeError("acknowledge() takes a Message returned by poll()")
        self.acknowledge_offset(message.topic(), message.partition(), message.offset(), ack_type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           ack_type: int = AcknowledgeType.ACCEPT) -> None:
        self._check()
        if not isinstance(ack_type, int):
            raise TypeError("ack_type must be an AcknowledgeType")
        if ack_type not in (1, 2, 3):
            raise ValueError(f"invalid ack_type {ack_type!r}: ACCEPT, RELEASE or REJECT")
        if topic is None or partition is None or partition < 0 or offset is None or offset < 0:
            raise ValueError("the message needs a topic, a partition >= 0 and an offset >= 0")
        try:
            self._c.acknowledge_offset(topic, partition, offset, int(ack_type))
        except IllegalStateError as e:
            raise _state(e) from None

    def commit_sync(self, timeout: float | None = 60) -> dict:
        self._check()
        t = timeout_s(timeout)
        try:
            got = self._c.commit_sync(1e9 if t is None else t)
        except IllegalStateError as e:
            raise _state(e) from None
        except KohortError as e:
            raise KafkaException(error_from(e)) from None
        return {TopicPartition(tp.topic, tp.partition): None if err is None else KafkaException(error_from(err))
                for tp, err in got.items()}

    def commit_async(self) -> None:
        self._check()
        try:
            self._c.commit_async()
        except KohortError as e:
            raise KafkaException(error_from(e)) from None

    def set_acknowledgement_commit_callback(self, callback: Callable | None) -> None:
        if self._in_callback:
            raise IllegalStateException("not allowed from within the acknowledgement commit callback")
        if self._closed:
            raise IllegalStateException("Share consumer closed")
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable or None")
        self._callback = callback

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._c.close()
        except KohortError as e:
            raise KafkaException(error_from(e)) from None
        finally:
            self._hooks.close()

    def __enter__(self) -> "ShareConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["AcknowledgeType", "IllegalStateException", "Messages", "ShareConsumer"]
