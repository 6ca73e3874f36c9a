"""What a Broker holds besides connections, opened by `open_components(broker)` from Broker.open():

* `broker.storage`      kohort.storage Storage (disk) on `broker.data_dir`, or MemoryStorage when
                        data_dir is None (on `broker.memory_fs` when set: a restart keeps the files);
                        recovery runs here; closed (clean-shutdown marker) on stop
* `broker.cluster_id`   persisted in <data_dir>/meta.properties (Kafka's file and key names)
* `broker.sync`         SyncPump: the group-commit fsync before acks=1/all answers
* `broker.waiters`      DataWaiters: per-partition wakeups for Fetch long polls
* `broker.producers`    ProducerStates (idempotence), `broker.producer_ids` ProducerIdAllocator
* `broker.fetch_sessions`  FetchSessionCache (KIP-227)
* `broker.metrics`      Metrics
* `broker.txn`          the transaction coordinator's TxnRuntime (kohort.broker.txn.runtime), loaded
                        from `__transaction_state` before the group coordinator opens
* `broker.coordinator`  attached by `kohort.broker.coordinator_runtime.open(broker)` when that module
                        exists (the group coordinator, written separately); None otherwise
* a background task running storage retention/compaction and producer-id expiry
  (producer.id.expiration.ms) every log.retention.check.interval.ms.

Closers run in reverse order on Broker.stop().
"""
from __future__ import annotations

import asyncio
import base64
import importlib
import inspect
import logging
import time
import uuid

from kohort.broker.durability import SyncPump
from kohort.broker.fetch_sessions import FetchSessionCache
from kohort.broker.metrics import Metrics
from kohort.broker.producer_state import ProducerIdAllocator, ProducerStates
from kohort.broker.txn.runtime import open_txn
from kohort.broker.waiters import DataWaiters
from kohort.storage import MemoryStorage, Storage

log = logging.getLogger("kohort.broker")

META_PROPERTIES = "meta.properties"
PRODUCER_ID_FILE = "producer-id-block"
LEADER_EPOCH_FILE = "leader-epoch"   # the node's leader epoch: one node leads every partition


def _now_ms() -> int:
    return int(time.time() * 1000)


def _load_cluster_id(storage, configured: str) -> str:
    fs = storage.fs
    path = fs.join(storage.data_dir, META_PROPERTIES)
    props = {}
    if fs.exists(path):
        for line in fs.read_file(path).decode("utf-8", "replace").splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.split("=", 1)
                props[k.strip()] = v.strip()
    cid = props.get("cluster.id")
    if cid:
        return cid
    cid = configured or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    fs.write_file_atomic(path, f"version=1\ncluster.id={cid}\n".encode())
    return cid


def _next_leader_epoch(storage) -> int:
    """The leader epoch of this run: one more than the last run's (and than any epoch in a log), as
    KRaft elects the restarted broker leader again with a new epoch; 0 for a new data dir. Clients
    holding the old epoch get FENCED_LEADER_EPOCH and validate their positions (KIP-320)."""
    fs = storage.fs
    path = fs.join(storage.data_dir, LEADER_EPOCH_FILE)
    last = -1
    if fs.exists(path):
        try:
            last = int(fs.read_file(path).decode().strip())
        except ValueError:
            last = -1
    last = max([last] + [lg.latest_epoch for lg in storage.logs()])
    epoch = last + 1
    fs.write_file_atomic(path, b"%d\n" % epoch)
    return epoch


def _producer_id_allocator(storage) -> ProducerIdAllocator:
    fs = storage.fs
    path = fs.join(storage.data_dir, PRODUCER_ID_FILE)

    def load() -> int:
        if not fs.exists(path):
            return 0
        try:
            return int(fs.read_file(path).decode().strip())
        except ValueError:
            raise RuntimeError(f"{path} is damaged; refusing to risk reusing producer ids") from None

    def save(n: int) -> None:
        fs.write_file_atomic(path, b"%d\n" % n)

    return ProducerIdAllocator(load, save)


async def open_components(broker) -> None:
    cfg = broker.config
    t0 = time.perf_counter()
    kwargs = dict(flush_policy=cfg["log.flush.policy"], topic_defaults=cfg.topic_defaults())
    if broker.data_dir is None:
        storage = MemoryStorage(fs=getattr(broker, "memory_fs", None), **kwargs)
    else:
        storage = Storage(broker.data_dir, **kwargs)
    broker.storage = storage
    log.info("storage opened in %.3fs: %d topics", time.perf_counter() - t0, len(storage.topics()))
    broker.cluster_id = _load_cluster_id(storage, cfg["cluster.id"])
    broker.leader_epoch = _next_leader_epoch(storage)
    for lg in storage.logs():               # this run's epoch starts at each log's end (Kafka's makeLeader)
        lg.become_leader(broker.leader_epoch)
    broker.sync = SyncPump(storage)
    broker.waiters = DataWaiters()
    broker.producers = ProducerStates(storage)
    broker.producer_ids = _producer_id_allocator(storage)
    broker.fetch_sessions = FetchSessionCache()
    broker.metrics = Metrics(broker)
    broker.coordinator = None

    async def close_storage():
        await broker.sync.close()
        storage.close()
        if storage.close_error is not None:
            log.warning("storage closed without its clean-shutdown marker (the next start recovers the "
                        "logs): %s", storage.close_error)
    broker._closers.append(close_storage)

    broker.spawn(_maintenance(broker))

    await open_txn(broker)

    # the group coordinator (another module) plugs in here when present
    try:
        runtime = importlib.import_module("kohort.broker.coordinator_runtime")
    except ModuleNotFoundError as e:
        if e.name != "kohort.broker.coordinator_runtime":
            raise
        runtime = None
    if runtime is not None and hasattr(runtime, "open"):
        r = runtime.open(broker)
        if inspect.isawaitable(r):
            await r


async def _maintenance(broker) -> None:
    interval = max(broker.config["log.retention.check.interval.ms"], 1000) / 1000
    while True:
        await asyncio.sleep(interval)
        try:
            now = _now_ms()
            stats = broker.storage.run_maintenance(now)
            stats["producers_expired"] = broker.producers.expire(now, broker.config["producer.id.expiration.ms"])
            if any(stats.values()):
                log.info("maintenance: %s", stats)
        except Exception:   # noqa: BLE001 - keep the broker up, report it
            log.exception("storage maintenance failed")
