"""The share coordinator's driver (KIP-932): keeps the pure `ShareStateStore`
(kohort.broker.share.state) in the `__share_group_state` topic, as kohort.broker.txn drives the
transaction coordinator over its own topic.

* The topic is created when the first share state is written, as Kafka creates it on first need
  (share.coordinator.state.topic.num.partitions partitions, Kafka's 50 by default;
  cleanup.policy=delete, retention.ms=-1 as Kafka makes it): a broker without share groups has none. A
  share-partition's records go to `state_partition(group, topic id, partition)` (Kafka's hash).
* Load: every partition is read from its log start, each record decoded (ShareSnapshot type 0,
  ShareUpdate type 1, Kafka's formats in kohort.protocol.share_state_records) and replayed in log
  order: the state after a restart is the state before it (acknowledged records stay
  acknowledged; records that were acquired come back AVAILABLE, as `SharePartition.from_state`
  makes them).
* Writes: `initialize` (a fresh ShareSnapshot at a start offset), `write` (a ShareUpdate, or a
  ShareSnapshot every share.coordinator.snapshot.update.records.per.snapshot updates), `delete`
  (a tombstone) append one record at once; `wait_durable()` returns once they are fsynced (the
  broker's group commit), which ShareFetch/ShareAcknowledge await before answering acknowledgements.
The internal RPCs 83-87 are not served: on one node the leader calls this driver directly.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from kohort.broker.share.partition import StateBatch, StateWrite
from kohort.broker.share.state import DEFAULT_UPDATES_PER_SNAPSHOT, ShareStateStore, StateKey, WriteRefused
from kohort.errors import DecodeError
from kohort.protocol import share_state_records as R
from kohort.protocol.records import build_batch, iter_batch_records, iter_batches
from kohort.storage import TopicAlreadyExistsError

log = logging.getLogger("kohort.broker.share")

STATE_TOPIC = "__share_group_state"
READ_CHUNK = 1 << 20


def _now_ms() -> int:
    return int(time.time() * 1000)


class ShareStateRuntime:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.num_partitions = int(cfg.get("share.coordinator.state.topic.num.partitions")
                                  or R.DEFAULT_NUM_PARTITIONS)
        self.store = ShareStateStore(int(cfg.get("share.coordinator.snapshot.update.records.per.snapshot")
                                         or DEFAULT_UPDATES_PER_SNAPSHOT))
        self.loaded_records = 0

    # -- start ---------------------------------------------------------------------------------------
    def open(self) -> "ShareStateRuntime":
        """Load the topic when it exists."""
        storage = self.broker.storage
        if storage.has_topic(STATE_TOPIC):
            self.num_partitions = storage.topic(STATE_TOPIC).num_partitions
            for p in range(self.num_partitions):
                self._load_partition(p)
        return self

    def _ensure_topic(self) -> None:
        storage = self.broker.storage
        if storage.has_topic(STATE_TOPIC):
            return
        try:
            storage.create_topic(STATE_TOPIC, self.num_partitions,
                                 {"cleanup.policy": "delete", "retention.ms": -1}, now_ms=_now_ms())
            log.info("created %s with %d partitions", STATE_TOPIC, self.num_partitions)
        except TopicAlreadyExistsError:
            pass
        self.num_partitions = storage.topic(STATE_TOPIC).num_partitions

    def _load_partition(self, p: int) -> None:
        lg = self.broker.storage.log(STATE_TOPIC, p)
        offset, end = lg.log_start_offset, lg.log_end_offset
        while offset < end:
            data = lg.read(offset, READ_CHUNK, max_offset=end)
            if not data:
                break
            start = offset
            for pos, h in iter_batches(data):
                if h.last_offset < start:
                    continue
                offset = max(offset, h.last_offset + 1)
                for rec in iter_batch_records(data, pos, h):
                    off, key, value = rec[0], rec[2], rec[3]
                    if off < start or key is None:
                        continue
                    try:
                        k, v = R.decode(bytes(key), None if value is None else bytes(value))
                    except DecodeError as e:
                        log.warning("%s-%d offset %d: skipping record: %s", STATE_TOPIC, p, off, e)
                        continue
                    self.store.replay(k, v)
                    self.loaded_records += 1
            if offset <= start:
                break

    # -- the leader's calls ----------------------------------------------------------------------------
    def read(self, key: StateKey) -> tuple[int, list[StateBatch]] | None:
        """(start offset, batches) persisted for `key`, or None when there is none."""
        st = self.store.states.get(key)
        return None if st is None else (st.start_offset, list(st.batches))

    def initialize(self, key: StateKey, start_offset: int) -> None:
        old = self.store.states.get(key)
        epoch = old.state_epoch if old is not None else 0
        self._append(key, self.store.initialize(key, epoch, start_offset, _now_ms()))

    def write(self, key: StateKey, write: StateWrite) -> None:
        if key not in self.store.states:
            self.initialize(key, write.start_offset)
        try:
            record = self.store.write(key, write, -1, self.broker.leader_epoch, _now_ms())
        except WriteRefused as e:
            log.warning("share state write of %r refused: %s", key, e)
            return
        self._append(key, record)

    def delete(self, key: StateKey) -> None:
        if key in self.store.states:
            self._append(key, self.store.delete(key))

    async def wait_durable(self) -> None:
        await self.broker.sync.wait_synced()

    def _append(self, key: StateKey, record: tuple[Any, Any]) -> None:
        k, v = record
        self._ensure_topic()
        now = _now_ms()
        p = R.state_partition(key[0], key[1], key[2], self.num_partitions)
        batch = build_batch([(R.encode_key(k), R.encode_value(v), [], now)])
        self.broker.storage.log(STATE_TOPIC, p).append(batch, leader_epoch=self.broker.leader_epoch, now_ms=now)
