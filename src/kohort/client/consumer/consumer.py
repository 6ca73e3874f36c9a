"""The Consumer: kohort's synchronous consumer API, in Kafka's conventions.

    c = Consumer({"bootstrap.servers": "h1:9092", "group.id": "g"})
    c.subscribe(["orders"], on_assign=..., on_revoke=..., on_lost=...)   # or "^orders-.*"
    for record in c.poll(1.0): ...
    c.commit()

Threads: the application thread calls everything here; the network thread (NetworkClient) does the
I/O and decodes fetched records, and hands group answers to the membership state machine; the
group's heartbeat thread (GroupMember) keeps the membership alive independently of poll().
Rebalance callbacks run inside poll() on the application thread. After max.poll.interval.ms without
a poll the member leaves the group; the next poll() reports its partitions lost and rejoins (Java).
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Callable, Iterable

from kohort.client.cluster import Cluster
from kohort.client.config import load_config
from kohort.client.consumer.fetcher import Fetcher, list_offsets
from kohort.client.consumer.offsets import (
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED, SubscriptionState,
)
from kohort.client.stats import ClientStats
from kohort.client.network import NetworkClient
from kohort.errors import KohortError
from kohort.structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

log = logging.getLogger("kohort.client.consumer")


class ConsumerClosedError(KohortError):
    """The consumer was used after close()."""


class Consumer:
    """A Kafka consumer. See the module docstring and Kafka's KafkaConsumer for the semantics."""

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        conf = dict(config or {})
        conf.update({k.replace("_", "."): v for k, v in kwargs.items()})
        self.config = load_config("consumer", conf)
        c = self.config
        self._network = NetworkClient(c, name=f"kohort-consumer-io-{c['client.id']}")
        self._cluster = Cluster(self._network, c)
        iso = READ_COMMITTED if c["isolation.level"] == "read_committed" else READ_UNCOMMITTED
        self._subs = SubscriptionState(c["auto.offset.reset"], iso)
        self._fetcher = Fetcher(self._network, self._cluster, self._subs, c)
        self._meta_wake = None   # the metadata request poll() has asked to be woken by
        self._max_poll_records = c["max.poll.records"]
        self._api_timeout = c["default.api.timeout.ms"] / 1000
        self._closed = False
        self._group = None
        self._manual = False
        self._lock = threading.RLock()
        if c["group.id"] is not None:
            from kohort.client.consumer.group import GroupMember
            self._group = GroupMember(self._network, self._cluster, self._subs, self._fetcher, c)
        self._stats = ClientStats.from_config("consumer", c, self._network)   # stats_cb, or None

    # -- subscription / assignment ----------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str | None = None, on_assign: Callable | None = None,
                  on_revoke: Callable | None = None, on_lost: Callable | None = None, *,
                  pattern: str | None = None) -> None:
        """Join the consumer group for `topics` (a list, or a regex string starting with ^), or for
        the topics matching `pattern` (a regex; with group.protocol=consumer the broker resolves it,
        KIP-848's SubscribedTopicRegex, full match).

        Callbacks take (consumer, [TopicPartition]) and run inside poll()."""
        self._check_open()
        if self._group is None:
            raise KohortError("subscribe() needs group.id; use assign() without a group")
        if self._manual:
            raise KohortError("subscribe() after assign(): call unsubscribe() first")
        if (topics is None) == (pattern is None):
            raise KohortError("subscribe() needs either topics or pattern=")
        if pattern is None and isinstance(topics, str):
            if topics.startswith("^"):
                pattern = topics
            else:
                topics = [topics]
        if pattern is not None:
            if not isinstance(pattern, str) or not pattern:
                raise KohortError(f"subscribe(pattern=...) needs a non-empty regex string, got {pattern!r}")
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise KohortError(f"invalid topic pattern {pattern!r}: {e}") from None
            self._group.subscribe(None, compiled, self, on_assign, on_revoke, on_lost)
            return
        topics = list(topics)
        if not topics or not all(isinstance(t, str) and t for t in topics):
            raise KohortError(f"subscribe() needs a non-empty list of topic names, got {topics!r}")
        self._group.subscribe(topics, None, self, on_assign, on_revoke, on_lost)

    def unsubscribe(self) -> None:
        self._check_open()
        if self._group is not None:
            self._group.unsubscribe()
        self._manual = False
        self._subs.assign([])
        self._fetcher.clear()

    def assign(self, partitions: Iterable) -> None:
        """Take these partitions without group management."""
        self._check_open()
        if self._group is not None and self._group.subscribed:
            raise KohortError("assign() while subscribed: call unsubscribe() first")
        tps = [_tp(p) for p in partitions]
        self._manual = True
        self._subs.assign(tps)
        self._fetcher.clear([tp for tp in self._fetcher_buffered() if tp not in set(tps)])
        self._cluster.set_topics({tp.topic for tp in tps})

    def _fetcher_buffered(self):
        return {c.tp for c in list(self._fetcher._buffer)}

    def assignment(self) -> set[TopicPartition]:
        return self._subs.assigned()

    def subscription(self) -> set[str]:
        return set(self._group.topics) if self._group is not None and self._group.subscribed else set()

    # -- polling ------------------------------------------------------------------------------------
    def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to max.poll.records records (a list, possibly empty), waiting at most `timeout` seconds."""
        self._check_open()
        n = max_records or self._max_poll_records
        deadline = time.monotonic() + max(0.0, timeout)
        group = self._group
        fetcher = self._fetcher
        if self._stats is not None:
            self._stats.maybe_emit(self._stats_extra)
        while True:
            if group is not None:
                group.poll_hook()   # rebalance callbacks, joins, auto commit; raises when kicked out
            self._update_positions()
            recs = fetcher.collect(n)
            fetcher.send_fetches()
            if recs:
                if self._stats is not None:
                    self._stats.on_records(recs)
                return recs
            left = deadline - time.monotonic()
            if left <= 0:
                return recs
            meta = self._cluster.maybe_refresh()
            if meta is not None and meta is not self._meta_wake:
                # positions resets and fetches wait for this metadata: go on as soon as it lands
                # rather than at the end of the wait below
                self._meta_wake = meta
                meta.add_done_callback(lambda f, w=fetcher.wakeup: w())
            fetcher.wait(min(left, 0.1 if group is not None and group.busy else left, 0.5))

    def __iter__(self):
        while not self._closed:
            yield from self.poll(1.0)

    def _update_positions(self) -> None:
        if self._group is not None:
            self._group.fetch_committed_if_needed()
        missing = self._subs.missing_position()
        if missing and self._group is None:
            self._subs.request_reset(missing)
        elif missing:
            # group member without committed offsets: the group code asks for the reset
            pass
        self._fetcher.reset_offsets()
        self._fetcher.validate_positions()

    # -- positions ------------------------------------------------------------------------------------
    def seek(self, partition, offset: int | None = None, leader_epoch: int | None = None) -> None:
        """Next poll() returns records of `partition` from `offset` (or partition may be a
        TopicPartition-like object with .offset)."""
        self._check_open()
        if offset is None:
            offset = getattr(partition, "offset", None)
            if offset is None:
                raise KohortError("seek() needs an offset")
        tp = _tp(partition)
        if offset < 0:
            raise KohortError(f"seek() to a negative offset {offset} of {tp}")
        self._subs.seek(tp, offset, leader_epoch)
        self._fetcher.clear([tp])

    def seek_to_beginning(self, partitions: Iterable | None = None) -> None:
        self._seek_to(partitions, "earliest")

    def seek_to_end(self, partitions: Iterable | None = None) -> None:
        self._seek_to(partitions, "latest")

    def _seek_to(self, partitions, strategy):
        self._check_open()
        tps = self._subs.assigned() if partitions is None else [_tp(p) for p in partitions]
        for tp in tps:
            self._subs.state(tp)
        self._subs.request_reset(tps, strategy)
        self._fetcher.clear(tps)

    def position(self, partition, timeout: float | None = None) -> int:
        """The offset of the next record poll() returns for `partition` (resolving it if needed)."""
        self._check_open()
        tp = _tp(partition)
        deadline = time.monotonic() + (self._api_timeout if timeout is None else timeout)
        while True:
            st = self._subs.state(tp)
            if st.has_valid_position:
                return st.position
            if self._group is not None:
                self._group.poll_hook(allow_callbacks=False)
            self._update_positions()
            if time.monotonic() >= deadline:
                from kohort.errors import KafkaTimeoutError
                raise KafkaTimeoutError(f"position of {tp} not known within the timeout")
            time.sleep(0.01)

    def group_metadata(self) -> ConsumerGroupMetadata | None:
        """The group, generation (the member epoch under KIP-848), member id and group.instance.id to
        pass to a transactional producer's send_offsets_to_transaction (Java's groupMetadata());
        generation -1 and "" before joining; None without group.id."""
        self._check_open()
        if self._group is None:
            return None
        g = self._group
        return ConsumerGroupMetadata(g.group_id, g.generation_id, g.member_id, self.config["group.instance.id"])

    def committed(self, partitions: Iterable[Any],
                  timeout: float | None = None) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """{tp: OffsetAndMetadata or None} as committed in the group (an OffsetFetch round trip)."""
        self._check_open()
        if self._group is None:
            raise KohortError("committed() needs group.id")
        tps = [_tp(p) for p in partitions]
        return self._group.fetch_committed(tps, self._api_timeout if timeout is None else timeout)

    def commit(self, offsets: dict[Any, Any] | Iterable[Any] | None = None, asynchronous: bool = False,
               callback: Callable[..., Any] | None = None,
               message: ConsumerRecord | None = None) -> dict[TopicPartition, OffsetAndMetadata] | None:
        """Commit `offsets` ({tp: offset | OffsetAndMetadata}) or the current positions.

        Synchronous by default (retries retriable errors until default.api.timeout.ms). With
        asynchronous=True returns at once; `callback(error_or_None, offsets)` runs inside a later
        poll()/commit()/close() on this thread, in commit order."""
        self._check_open()
        if self._group is None:
            raise KohortError("commit() needs group.id")
        if message is not None:
            offsets = {TopicPartition(message.topic, message.partition): message.offset + 1}
        if offsets is None:
            offs = self._subs.positions()
        elif isinstance(offsets, dict):
            offs = {_tp(k): (v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(int(v)))
                    for k, v in offsets.items()}
        else:
            offs = {}
            for p in offsets:
                off = getattr(p, "offset", None)
                if off is None:
                    raise KohortError(f"commit(): {p!r} carries no offset")
                offs[_tp(p)] = OffsetAndMetadata(off)
        if asynchronous:
            self._group.commit_async(offs, callback)
            return None
        self._group.commit_sync(offs, self._api_timeout)
        return offs

    def offsets_for_times(self, timestamps: dict[Any, int],
                          timeout: float | None = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """{tp: OffsetAndTimestamp or None}: the earliest offset whose timestamp is >= the given one."""
        self._check_open()
        req = {_tp(k): int(v) for k, v in timestamps.items()}
        for tp, ts in req.items():
            if ts < 0:
                raise KohortError(f"offsets_for_times(): negative timestamp {ts} for {tp}")
        got = list_offsets(self._network, self._cluster, req, self._subs.isolation_level,
                           self._api_timeout if timeout is None else timeout)
        return {tp: (OffsetAndTimestamp(*got[tp]) if got[tp][0] >= 0 else None) for tp in req}

    def beginning_offsets(self, partitions: Iterable[Any], timeout: float | None = None) -> dict[TopicPartition, int]:
        return self._list({_tp(p): EARLIEST_TIMESTAMP for p in partitions}, timeout)

    def end_offsets(self, partitions: Iterable[Any], timeout: float | None = None) -> dict[TopicPartition, int]:
        return self._list({_tp(p): LATEST_TIMESTAMP for p in partitions}, timeout)

    def _list(self, req, timeout):
        self._check_open()
        got = list_offsets(self._network, self._cluster, req, self._subs.isolation_level,
                           self._api_timeout if timeout is None else timeout)
        return {tp: got[tp][0] for tp in req}

    def pause(self, partitions: Iterable) -> None:
        with self._subs.lock:
            for p in partitions:
                self._subs.state(_tp(p)).paused = True

    def resume(self, partitions: Iterable) -> None:
        with self._subs.lock:
            for p in partitions:
                self._subs.state(_tp(p)).paused = False
        self._fetcher.send_fetches()

    def paused(self) -> set[TopicPartition]:
        with self._subs.lock:
            return {tp for tp, st in self._subs.partitions.items() if st.paused}

    def list_topics(self, timeout: float | None = None) -> dict[str, list[int]]:
        """{topic: [partition ids]} of the whole cluster."""
        self._check_open()
        c = Cluster(self._network, self.config, all_topics=True)
        snap = c.refresh(self._api_timeout if timeout is None else timeout)
        return {t: list(ps) for t, ps in snap.topics.items() if t not in snap.internal_topics}

    def partitions_for_topic(self, topic: str, timeout: float | None = None) -> list[int] | None:
        self._cluster.add_topics({topic})
        if self._cluster.partitions_for(topic) is None:
            try:
                self._cluster.wait_for_topics({topic}, self._api_timeout if timeout is None else timeout)
            except KohortError:
                return None
        return self._cluster.partitions_for(topic)

    # -- health ---------------------------------------------------------------------------------------
    def lag(self) -> dict[TopicPartition, int | None]:
        """Per assigned partition: high watermark (LSO for read_committed) minus position."""
        with self._subs.lock:
            return {tp: self._subs.lag(tp) for tp in self._subs.partitions}

    def health(self) -> dict:
        """Member state, last heartbeat, rebalance count/reason, per-partition lag and positions."""
        h = {"assignment": sorted(self._subs.assigned()), "lag": self.lag(),
             "positions": {tp: st.position for tp, st in self._subs.partitions.items()},
             "records_fetched": self._fetcher.records_fetched}
        if self._group is not None:
            h.update(self._group.health())
        return h

    def poll_group(self) -> None:
        """The group work poll() does (rebalance callbacks, joins, auto commit, the max.poll.interval.ms
        clock) without fetching: for an application that hands out records it already holds."""
        self._check_open()
        if self._group is not None:
            self._group.poll_hook()

    def add_disconnect_listener(self, fn: Callable) -> None:
        """fn(node_id, error) is called (on the I/O thread) whenever a broker connection is lost."""
        self._network.add_disconnect_listener(fn)

    def emit_statistics(self) -> None:
        """Call stats_cb if statistics.interval.ms has passed (poll() does this too)."""
        if self._stats is not None:
            self._stats.maybe_emit(self._stats_extra)

    def _stats_extra(self) -> dict:
        parts = {}
        with self._subs.lock:
            for tp, st in self._subs.partitions.items():
                lag = self._subs.lag(tp)
                parts[(tp.topic, tp.partition)] = {   # librdkafka's -1001: no offset yet, -1: lag unknown
                    "next_offset": st.position if st.position is not None else -1001,
                    "consumer_lag": -1 if lag is None else lag}
        out = {"addresses": self._network.brokers, "partitions": parts}
        if self._group is not None:
            h = self._group.health()
            out["cgrp"] = {"state": str(h["member_state"]), "rebalance_cnt": h["rebalance_count"],
                           "rebalance_reason": h["last_rebalance_reason"] or "", "assignment_size": len(parts),
                           "generation_id": h["generation_id"], "member_id": h["member_id"]}
        return out

    # -- lifecycle ----------------------------------------------------------------------------------------
    def close(self, autocommit: bool = True, timeout: float | None = None) -> None:
        """Commit (if auto commit is on), leave the group, close connections."""
        if self._closed:
            return
        try:
            if self._group is not None:
                self._group.close(autocommit, self._api_timeout if timeout is None else timeout)
        finally:
            self._closed = True
            self._fetcher.close()
            self._network.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")


def _tp(p) -> TopicPartition:
    if isinstance(p, TopicPartition):
        return p
    if isinstance(p, tuple) and len(p) >= 2 and isinstance(p[0], str):
        return TopicPartition(p[0], int(p[1]))
    t, part = getattr(p, "topic", None), getattr(p, "partition", None)
    if isinstance(t, str) and isinstance(part, int):
        return TopicPartition(t, part)
    raise KohortError(f"not a topic partition: {p!r}")


__all__ = ["Consumer", "ConsumerClosedError"]
