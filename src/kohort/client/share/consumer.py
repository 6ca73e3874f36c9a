"""ShareConsumer: kohort's share-group consumer (KIP-932, "queues for Kafka"), with the semantics of
Java's KafkaShareConsumer.

    with ShareConsumer({"bootstrap.servers": "h:9092", "group.id": "workers"}) as c:
        c.subscribe(["jobs"])
        for record in c.poll(1.0):
            ...                      # implicit mode: the next poll (or commit_sync) ACCEPTs them

Members of a share group read the same partitions together; the partition leader hands each record to
one member under a time-limited acquisition lock, and the member acknowledges it: ACCEPT (done),
RELEASE (deliver again, `delivery_count` + 1), REJECT (archive, never again) or RENEW (keep the lock;
KIP-1222, brokers 4.2+). A record released `share.delivery.count.limit` times is archived.

This module is the thin driver of three pure parts:
* `membership.ShareMembership`: ShareGroupHeartbeat (join, heartbeat, leave, fencing);
* `session.ShareSession`, one per partition leader: ShareFetch / ShareAcknowledge with session epochs;
* `acknowledgements.Acknowledgements`: implicit/explicit mode, GAPs, the batches sent.
What it does alike with `kohort.aio.AIOShareConsumer` (configuration checks, reading ShareFetch and
ShareAcknowledge answers, records from acquired ranges, handing records out, the acknowledgements
and commits on their way to the leaders in a `CommitBook`) is in `driving.py`.

Threads: the application thread calls the API; one driver thread per consumer turns the machines
(heartbeats on time, one ShareFetch or ShareAcknowledge in flight per leader, metadata) and sends
through NetworkClient, whose I/O thread completes the futures; their callbacks only queue the answer.
While poll() or commit_sync() waits, the application thread turns the same machines itself (the
fetch or acknowledgement goes out, the queued answer is taken, without a detour through the driver).
A thread is woken only by a change (an answer queued, records buffered, a member action), never by
a step that did nothing. One lock guards every machine; answers of acknowledgements are reported to
`acknowledgement_commit_callback` on the application thread (inside poll, commit_sync, commit_async
or close). A leader is sent a ShareFetch only while the application waits in poll(),
no records are buffered and the application holds none unacknowledged (as Java's share consumer: the
acknowledgements of the last batch ride on the fetch the next poll causes), so a member holds no
locks on records it has not handed out; buffered records whose lock has expired are dropped. Heartbeats and FindCoordinator use their own connection to the coordinator, so they never
wait behind a long-polling ShareFetch.

Configuration by Kafka's names (the consumer's keys), plus `share.acknowledgement.mode`
(implicit | explicit) and `share.acquire.mode` (batch_optimized | record_limit, KIP-1206); the keys
KafkaShareConsumer rejects (auto.offset.reset, enable.auto.commit, group.instance.id, isolation.level,
partition.assignment.strategy, interceptor.classes, session.timeout.ms, heartbeat.interval.ms,
group.protocol, group.remote.assignor) are a ConfigError: those are group configs of a share group
(`share.auto.offset.reset`, `share.isolation.level`, ...) set with Admin.alter_configs on the group.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid as _uuid
from collections import deque
from typing import Any, Callable, Iterable, Mapping

from kohort.client.cluster import Cluster
from kohort.client.consumer.membership import Raise, Send
from kohort.client.network import NetworkClient
from kohort.client.requests import find_coordinator_request, read_find_coordinator
from kohort.client.share import membership as M
from kohort.client.share.acknowledgements import ACCEPT, REJECT, RELEASE, RENEW, IllegalStateError
from kohort.client.share.driving import (  # noqa: F401 - UNSUPPORTED_CONFIGS and _decode_acquired re-exported
    UNSUPPORTED_CONFIGS, CommitBook, Leader, _decode_acquired, acquired_records, share_settings,
)
from kohort.client.share.session import FetchLimits, ShareSession
from kohort.errors import (
    ErrorCode, IncompatibleBrokerVersionError, KafkaError, KohortError, for_code,
)
from kohort.structs import ConsumerRecord, TopicPartition

log = logging.getLogger("kohort.client.share")

__all__ = ["ShareConsumer", "AcknowledgeType", "IllegalStateError", "WakeupError", "ShareConsumerClosedError",
           "UNSUPPORTED_CONFIGS"]

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
COORDINATOR_CONN_BASE = 2**31 - 1     # the coordinator's own connection: id 2**31-1-node, as the consumer's

# callback(offsets, error): the offsets acknowledged per share-partition, and None or the error of their commit
AcknowledgementCommitCallback = Callable[[dict[TopicPartition, set[int]], KafkaError | None], None]


class AcknowledgeType:
    """Kafka's AcknowledgeType ids (ShareFetch/ShareAcknowledge AcknowledgeTypes)."""
    ACCEPT = ACCEPT
    RELEASE = RELEASE
    REJECT = REJECT
    RENEW = RENEW


class WakeupError(KohortError):
    """poll() was interrupted by wakeup() (Java: WakeupException)."""


class ShareConsumerClosedError(IllegalStateError):
    """The share consumer was used after close()."""


TIP = tuple  # (topic id, partition): the key of the pure machines


class ShareConsumer:
    """A share-group consumer. See the module docstring and Java's KafkaShareConsumer."""

    def __init__(self, config: Mapping[str, Any] | None = None, *,
                 acknowledgement_commit_callback: AcknowledgementCommitCallback | None = None,
                 **kwargs: Any) -> None:
        """`config`: Kafka's consumer keys (see the module docstring); keyword arguments with "_" for
        "." too. `acknowledgement_commit_callback(offsets, error)`: see set_acknowledgement_commit_callback."""
        st = share_settings(config, kwargs, acknowledgement_commit_callback)
        mode, acquire, callback = st.acknowledgement_mode, st.acquire_mode, st.callback
        self.config = st.config
        c = self.config
        self.group_id: str = c["group.id"]
        self.acknowledgement_mode = mode
        self.acquire_mode = acquire
        self._acquire_mode_id = st.acquire_mode_id
        self._max_poll_records = c["max.poll.records"]
        self._api_timeout = c["default.api.timeout.ms"] / 1000
        self._kd, self._vd = c["key.deserializer"], c["value.deserializer"]
        self._check_crcs = c["check.crcs"]
        self._limits_base = dict(max_wait_ms=c["fetch.max.wait.ms"], min_bytes=c["fetch.min.bytes"],
                                 max_bytes=c["fetch.max.bytes"], max_records=self._max_poll_records,
                                 batch_size=self._max_poll_records)
        self.acknowledgement_commit_callback: Callable | None = callback

        self._network = NetworkClient(c, name=f"kohort-share-io-{c['client.id']}")
        self._cluster = Cluster(self._network, c, auto_create=False)
        self._member = M.ShareMembership(M.ShareMemberConfig(
            group_id=self.group_id, rack_id=c["client.rack"] or None, retry_backoff_ms=c["retry.backoff.ms"],
            request_timeout_ms=c["request.timeout.ms"]))
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._events: deque = deque()            # answers queued by the I/O thread for the driver
        self._leaders: dict[int, Leader] = {}
        self._assignment: dict[_uuid.UUID, frozenset] = {}
        self._names: dict[_uuid.UUID, str] = {}
        self._ids: dict[str, _uuid.UUID] = {}
        self._buffer: deque = deque()            # (tip, [ConsumerRecord with delivery counts], acquired at)
        self._want_records = False               # the application is in poll(): fetching is wanted
        self._book = CommitBook(mode, self._names, self._ids, self._buffer, time.monotonic)
        self._subscribed: tuple[str, ...] = ()
        self._leaving = False
        self._left = threading.Event()
        self._left.set()
        self._wakeup = False
        self._closed = False
        self._stop = False
        self._fatal: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"kohort-share-{c['client.id']}", daemon=True)
        self._thread.start()

    # -- subscription ---------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str) -> None:
        """Join the share group for `topics` (names; no patterns). Replaces the subscription;
        an empty list is unsubscribe()."""
        self._check_open()
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics:
            self.unsubscribe()
            return
        if not all(isinstance(t, str) and t for t in topics):
            raise KohortError(f"subscribe() needs a list of topic names, got {topics!r}")
        with self._cond:
            if self._leaving:
                raise IllegalStateError("subscribe() while the previous subscription is still leaving")
            self._subscribed = tuple(sorted(set(topics)))
            self._cluster.set_topics(self._subscribed)
            self._left.clear()
            self._apply(self._member.handle(M.Subscribe(self._subscribed), _now_ms()))
            self._cond.notify_all()

    def subscription(self) -> set[str]:
        return set(self._subscribed)

    def unsubscribe(self, timeout: float | None = None) -> None:
        """Leave the share group: acknowledgements pending are sent and what this member holds is
        released (ShareAcknowledge epoch -1 per leader), then the leave heartbeat (epoch -1)."""
        self._check_open()
        self._leave(self._api_timeout if timeout is None else timeout)

    # -- consuming ------------------------------------------------------------------------------------
    def poll(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        """Up to max.poll.records records acquired for this member (possibly none), waiting at most
        `timeout` seconds. Implicit mode ACCEPTs the records the previous poll returned; explicit
        mode raises IllegalStateError while any of them is unacknowledged."""
        self._check_open()
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            if not self._subscribed:
                raise IllegalStateError("poll() on a share consumer that is not subscribed to any topic")
            self._raise_pending()
            self._book.acks.before_poll()
            self._want_records = True
            self._cond.notify_all()
            try:
                while True:
                    # the application thread turns the machines itself while it waits: the fetch goes
                    # out and its answer is handed out without a detour through the driver thread
                    self._step()
                    self._dispatch_callbacks()
                    self._raise_pending()
                    if self._wakeup:
                        self._wakeup = False
                        raise WakeupError("poll() interrupted by wakeup()")
                    if self._buffer:
                        out = self._hand_out()
                        if out:
                            return out
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return []
                    self._cond.wait(left)
            finally:
                self._want_records = False       # no fetching while the application is elsewhere

    def acknowledge(self, record: ConsumerRecord, type: int = ACCEPT) -> None:
        """Acknowledge one record the last poll returned (explicit mode): ACCEPT, RELEASE (deliver it
        again), REJECT (archive it) or RENEW (keep it: its lock restarts and a later poll returns it
        again; brokers with ShareFetch v2). Sent with the next poll's fetch or by commit_sync/async."""
        if not isinstance(record, ConsumerRecord):
            raise TypeError(f"acknowledge() takes a ConsumerRecord returned by poll(), got {record!r}")
        self._acknowledge(record.topic, record.partition, record.offset, type, record)

    def acknowledge_offset(self, topic: str, partition: int, offset: int, type: int = ACCEPT) -> None:
        """acknowledge() by coordinates (Java's acknowledge(topic, partition, offset, type))."""
        self._acknowledge(topic, partition, offset, type, None)

    def _acknowledge(self, topic: str, partition: int, offset: int, type: int, record) -> None:
        self._check_open()
        with self._cond:
            self._book.acknowledge(topic, partition, offset, type, record, self._leaders)

    def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Send the acknowledgements pending (implicit mode: the last poll's records as ACCEPT) in
        ShareAcknowledge requests and wait for the answers: {partition: None or the error}."""
        self._check_open()
        t = self._api_timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        with self._cond:
            cid = self._commit(sync=True)
            if cid is None:
                self._dispatch_callbacks()
                return {}
            while True:
                self._step()                     # sends the ShareAcknowledges, takes their answers
                if self._book.unanswered(cid) <= 0:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            result, waiting = self._book.finish(cid)
            self._dispatch_callbacks()
            if waiting:
                from kohort.errors import KafkaTimeoutError
                raise KafkaTimeoutError(f"commit_sync: no answer to the acknowledgements within {t:.1f}s")
            return result

    def commit_async(self) -> None:
        """Send the acknowledgements pending; the outcome goes to acknowledgement_commit_callback."""
        self._check_open()
        with self._cond:
            self._commit(sync=False)
            self._dispatch_callbacks()

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        """callback(offsets: {TopicPartition: set[int]}, error: KafkaError | None), run on the
        application thread (in poll, commit_sync, commit_async or close)."""
        if callback is not None and not callable(callback):
            raise TypeError("the acknowledgement commit callback must be callable or None")
        self.acknowledgement_commit_callback = callback

    def acquisition_lock_timeout_ms(self) -> int | None:
        """The acquisition lock duration the leaders reported (None before the first answer)."""
        return self._book.lock_timeout_ms

    def wakeup(self) -> None:
        """Make a poll() in progress (or the next one) raise WakeupError."""
        with self._cond:
            self._wakeup = True
            self._cond.notify_all()

    def assignment(self) -> set[TopicPartition]:
        """The partitions the coordinator assigned to this member (shared with other members)."""
        with self._cond:
            return {TopicPartition(self._names[t], p) for t, ps in self._assignment.items()
                    if t in self._names for p in ps}

    @property
    def member_id(self) -> str:
        return self._member.member_id

    def close(self, timeout: float | None = None) -> None:
        """Send pending acknowledgements and release what this member holds (ShareAcknowledge
        epoch -1 to each leader with a session), leave the group (heartbeat epoch -1), stop."""
        if self._closed:
            return
        t = self._api_timeout if timeout is None else timeout
        try:
            if self._subscribed or self._leaving:
                self._leave(t)
        finally:
            with self._cond:
                self._closed = True
                self._stop = True
                self._dispatch_callbacks()
                self._cond.notify_all()
            self._thread.join(5.0)
            self._network.close()

    def __enter__(self) -> "ShareConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- application-side helpers (lock held) ------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ShareConsumerClosedError("the share consumer is closed")

    def _raise_pending(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        # the Poll event may find a heartbeat due: the member marks it in flight and returns its Send,
        # which must go out (else the member waits forever for an answer to a request never sent)
        actions = self._member.handle(M.Poll(), _now_ms())
        self._apply(actions)
        for a in actions:
            if isinstance(a, Raise):
                raise a.error

    def _hand_out(self) -> list[ConsumerRecord]:
        out = self._book.hand_out(self._max_poll_records, time.monotonic())
        self._cond.notify_all()
        return out

    def _commit(self, sync: bool) -> int | None:
        cid = self._book.commit(sync, self._leaders, self._leader_of)
        if cid is not None:
            self._cond.notify_all()
        return cid

    def _dispatch_callbacks(self) -> None:
        cb = self.acknowledgement_commit_callback
        reports = self._book.reports
        while reports:
            offsets, error = reports.popleft()
            if cb is not None:
                try:
                    cb(offsets, error)
                except Exception:
                    log.exception("acknowledgement_commit_callback raised")

    def _leave(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            self._leaving = True
            self._book.close_sessions(self._leaders, self._leader_of)
            self._buffer.clear()
            self._cond.notify_all()
            while any(lead.acks_out or lead.busy for lead in self._leaders.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
            self._apply(self._member.handle(M.Close(), _now_ms()))
            self._cond.notify_all()
            while not self._left.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
            self._subscribed = ()
            self._buffer.clear()
            self._leaving = False
            self._leaders.clear()
            self._assignment = {}
            self._book.reset()
            self._dispatch_callbacks()

    # -- the driver thread ------------------------------------------------------------------------------------
    def _run(self) -> None:
        with self._cond:
            while not self._stop:
                try:
                    self._step()
                except Exception as e:           # a bug must not leave poll() waiting forever
                    log.exception("share consumer driver failed")
                    self._fatal = KohortError(f"share consumer driver failed: {e!r}")
                    self._cond.notify_all()
                    return
                self._cond.wait(self._wait_s())

    def _wait_s(self) -> float:
        due = self._member.next_deadline_ms()
        if due is None:
            return 0.1
        return min(0.1, max(0.0, (due - _now_ms()) / 1000))

    def _step(self) -> None:
        now = _now_ms()
        while self._events:
            kind, *args = self._events.popleft()
            getattr(self, kind)(*args)
        self._apply(self._member.handle(M.Tick(), now))
        self._cluster.maybe_refresh()
        self._names_from_metadata()
        self._drive_leaders()

    def _apply(self, actions: list) -> None:
        for a in actions:
            if isinstance(a, Send):
                fut = self._network.send(a.to, a.request, timeout_ms=a.timeout_ms)
                fut.add_done_callback(lambda f, tag=a.tag: self._queue("_on_heartbeat", tag, f))
            elif isinstance(a, M.LookupCoordinator):
                fut = self._network.send(None, find_coordinator_request(self.group_id))
                fut.add_done_callback(lambda f: self._queue("_on_find_coordinator", f))
            elif isinstance(a, M.AssignmentChanged):
                self._assignment = dict(a.assignment)
                log.debug("share member %s assignment %s", self.member_id, self._assignment)
            elif isinstance(a, M.Left):
                self._left.set()
            elif isinstance(a, Raise):
                pass                             # the member raises it again from the next Poll event
        if actions:
            # only a change wakes the other thread: the application's poll() loop and the driver
            # both turn the member with no actions most of the time, and notifying then would
            # wake each other back and forth for as long as poll() waits (a busy loop)
            self._cond.notify_all()

    def _queue(self, kind: str, *args) -> None:
        with self._cond:
            self._events.append((kind, *args))
            self._cond.notify_all()

    def _on_heartbeat(self, tag, fut) -> None:
        try:
            resp = fut.result()
        except IncompatibleBrokerVersionError as e:
            self._apply(self._member.handle(M.RequestFailed(tag, str(e), unsupported=True), _now_ms()))
            return
        except Exception as e:
            self._apply(self._member.handle(M.RequestFailed(tag, str(e)), _now_ms()))
            return
        if resp.error_code:
            log.debug("ShareGroupHeartbeat: %s %s", for_code(resp.error_code).__name__, resp.error_message)
        self._apply(self._member.handle(M.Response(tag, resp), _now_ms()))

    def _on_find_coordinator(self, fut) -> None:
        try:
            code, node, host, port, msg = read_find_coordinator(fut.result())
        except Exception as e:
            log.debug("FindCoordinator failed: %s", e)
            code, node, host, port, msg = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", 0, str(e)
        if code:
            self._apply(self._member.handle(M.CoordinatorLost(), _now_ms()))
            if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                self._fatal = for_code(code)(msg or f"group {self.group_id!r}")
            return
        conn = COORDINATOR_CONN_BASE - node
        self._network.set_node_address(conn, host, port)
        self._apply(self._member.handle(M.CoordinatorFound(conn), _now_ms()))

    def _names_from_metadata(self) -> None:
        ids = self._cluster.snapshot.topic_ids
        for name in self._subscribed:
            tid = ids.get(name)
            if tid is not None and self._ids.get(name) != tid:
                self._ids[name] = tid
                self._names[tid] = name

    def _leader_of(self, tip) -> int | None:
        name = self._names.get(tip[0])
        if name is None:
            return None
        return self._cluster.leader_for(TopicPartition(name, tip[1]))

    def _wanted(self) -> dict[int, set]:
        """Assigned partitions by leader (leaders unknown: metadata is asked for)."""
        out: dict[int, set] = {}
        missing = False
        for tid, parts in self._assignment.items():
            for p in parts:
                node = self._leader_of((tid, p))
                if node is None:
                    missing = True
                    continue
                out.setdefault(node, set()).add((tid, p))
        if missing:
            self._cluster.request_update()
        return out

    def _drive_leaders(self) -> None:
        wanted = {} if self._leaving else self._wanted()
        for node in set(wanted) | set(self._leaders):
            lead = self._leaders.get(node)
            if lead is None:
                if not self._network.ready(node):
                    continue
                rng = self._network.api_versions(node).get(SHARE_FETCH)
                if rng is None or rng[1] < 1:
                    self._fatal = IncompatibleBrokerVersionError("ShareFetch (share groups, KIP-932)", (1, 2), rng)
                    return
                lead = self._leaders[node] = Leader(node, ShareSession(self.group_id, self.member_id,
                                                                       version=min(2, rng[1])))
            if lead.busy:
                continue
            if lead.acks_out:
                self._send_acknowledge(lead)
            elif (self._want_records and not self._leaving and wanted.get(node) and not self._buffer
                  and not self._book.holding()):
                self._send_fetch(lead, wanted[node])

    def _send_fetch(self, lead: Leader, parts: set) -> None:
        built = self._book.fetch(lead, parts, FetchLimits(acquire_mode=self._acquire_mode_id, **self._limits_base),
                                 self._leader_of)
        fut = self._network.send(lead.node, built.request, max_version=lead.session.version,
                                 timeout_ms=self.config["request.timeout.ms"] + self._limits_base["max_wait_ms"])
        fut.add_done_callback(lambda f: self._queue("_on_fetch", lead, built, f))

    def _send_acknowledge(self, lead: Leader) -> None:
        step = self._book.next_acknowledge(lead)
        if step is None:                         # nothing to send: what could not go is reported
            self._cond.notify_all()
            return
        cid, built = step
        fut = self._network.send(lead.node, built.request, max_version=lead.session.version)
        fut.add_done_callback(lambda f: self._queue("_on_acknowledge", lead, cid, built, f))

    def _on_fetch(self, lead: Leader, built, fut) -> None:
        try:
            resp = fut.result()
        except Exception as e:
            log.debug("ShareFetch to %s failed: %s", lead.node, e)
            self._book.fetch_failed(lead, built, e)
            return
        out = self._book.fetch_answered(lead, built, resp)
        if out.error is not None:
            log.debug("ShareFetch to %s: %s", lead.node, out.error)
        if out.fatal:
            self._fatal = out.error
        if out.refresh_metadata:
            self._cluster.request_update()
        for tip, p in out.acquired:
            self._buffer_records(tip, p)

    def _buffer_records(self, tip, p) -> None:
        recs = acquired_records(self._names.get(tip[0]), tip, p, self._book.acks, self._check_crcs, self._kd, self._vd,
                                log)
        if recs:
            self._buffer.append((tip, recs, time.monotonic()))
            self._cond.notify_all()

    def _on_acknowledge(self, lead: Leader, cid, built, fut) -> None:
        try:
            resp, error = fut.result(), None
        except Exception as e:
            resp, error = None, e
        self._book.acknowledge_answered(lead, cid, built, resp, error)
        self._cond.notify_all()


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
