"""A data directory that fills up: an in-process kohort broker on the storage seam's in-memory filesystem
given a capacity (writes past it write what fits, then fail with ENOSPC, as write(2) does), driven by
kohort's producer and consumer over real sockets.

The broker answers KAFKA_STORAGE_ERROR for what it could not store, never acknowledges a record it did
not store, keeps what it had readable (no torn batch: the failed write is cut back), serves writes
again once space returns, and the log is whole after a restart on the same files.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import threading
import time

import pytest

from kohort.broker import components
from kohort.broker.config import BrokerConfig
from kohort.broker.server import Broker
from kohort.storage import MemoryStorage
from kohort.storage.fs import MemoryFileHandle, MemoryFileSystem


class FullableFileSystem(MemoryFileSystem):
    """A MemoryFileSystem with a capacity in bytes of file contents (None: unlimited)."""

    def __init__(self) -> None:
        super().__init__()
        self.capacity: int | None = None
        self.enospc = 0

    def used(self) -> int:
        with self.lock:
            return sum(len(f.data) for f in self.files.values())

    def open(self, path: str, create: bool = True) -> MemoryFileHandle:
        h = super().open(path, create)
        return _FullableHandle(self, h.file)


class _FullableHandle(MemoryFileHandle):
    __slots__ = ()

    def append(self, data) -> None:
        fs = self.fs
        with fs.lock:
            room = None if fs.capacity is None else max(0, fs.capacity - fs.used())
            if room is not None and len(data) > room:
                if room:
                    super().append(bytes(data)[:room])      # a short write, then ENOSPC
                fs.enospc += 1
                raise OSError(errno.ENOSPC, "No space left on device")
            super().append(data)

    def truncate(self, size: int) -> None:
        fs = self.fs
        with fs.lock:
            grow = size - len(self.file.data)
            if grow > 0 and fs.capacity is not None and grow > fs.capacity - fs.used():
                fs.enospc += 1
                raise OSError(errno.ENOSPC, "No space left on device")
            super().truncate(size)


@contextlib.contextmanager
def broker_on(fs: FullableFileSystem, monkeypatch):
    """An in-process broker (its own event loop in a thread) whose storage lives on `fs`."""
    make = MemoryStorage
    # the broker passes its own `memory_fs` (None here); the storage is built on `fs` instead
    monkeypatch.setattr(components, "MemoryStorage", lambda **kw: make(**{**kw, "fs": fs}))
    loop = asyncio.new_event_loop()
    b = Broker(BrokerConfig.from_properties({}), "127.0.0.1", 0, None)
    ready = threading.Event()
    errors: list = []

    def run():
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(b.start())
        except BaseException as e:      # noqa: BLE001 - reported to the test below
            errors.append(e)
            ready.set()
            return
        ready.set()
        loop.run_forever()

    t = threading.Thread(target=run, name="disk-full-broker", daemon=True)
    t.start()
    assert ready.wait(30) and not errors, errors
    try:
        yield f"127.0.0.1:{b.listen_port}"
    finally:
        asyncio.run_coroutine_threadsafe(b.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()


def producer(bs: str, delivery_timeout_ms: int = 4000):
    """One idempotent producer (acks=all) for the whole test: its producer id is taken while there
    is space, as for a producer already running when the disk fills."""
    from kohort import Producer
    return Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 0, "request.timeout.ms": 2000,
                     "delivery.timeout.ms": delivery_timeout_ms, "retry.backoff.ms": 100})


def _produce(p, topic: str, values: list[str], timeout_s: float = 10.0) -> tuple[dict, dict]:
    """Send `values` one at a time; returns ({value: offset} acknowledged, {value: error})."""
    acked, failed = {}, {}

    def cb(err, md, v):
        if err is None:
            acked[v] = md.offset
        else:
            failed[v] = err
    for v in values:
        p.produce(topic, value=v.encode() + b"." * 1000, partition=0, on_delivery=lambda e, m, v=v: cb(e, m, v))
        p.flush(timeout_s)                              # one at a time: each fails or lands alone
    return acked, failed


def _read_all(bs: str, topic: str) -> list[tuple[int, str]]:
    from kohort import Consumer
    from kohort.structs import TopicPartition
    tp = TopicPartition(topic, 0)
    out = []
    with Consumer({"bootstrap.servers": bs, "enable.auto.commit": False}) as c:
        end = c.end_offsets([tp], 10)[tp]
        c.assign([tp])
        c.seek_to_beginning([tp])
        deadline = time.monotonic() + 20
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            out += [(r.offset, r.value.decode().rstrip(".")) for r in c.poll(0.2)]
    return out


def test_disk_full_refuses_keeps_the_log_survives_a_stop_while_full_and_serves_again(monkeypatch):
    from kohort.client.admin import Admin
    from kohort.errors import ErrorCode, KafkaTimeoutError
    fs = FullableFileSystem()
    storages = []
    real = MemoryStorage

    def tracked(**kw):
        storages.append(real(**kw))
        return storages[-1]
    monkeypatch.setattr("tests.faults.test_disk_full.MemoryStorage", tracked)
    with broker_on(fs, monkeypatch) as bs:
        with Admin({"bootstrap.servers": bs}) as a:
            a.create_topics({"full": 1})
        p = producer(bs, delivery_timeout_ms=2000)
        before, failed = _produce(p, "full", [f"a{i}" for i in range(20)])
        assert len(before) == 20 and not failed
        fs.capacity = fs.used() + 8_000                    # room for a few more records
        during, failed = _produce(p, "full", [f"b{i}" for i in range(12)])
        assert fs.enospc > 0
        assert 0 < len(during) < 12 and failed, (len(during), len(failed))
        # the producer retries KAFKA_STORAGE_ERROR (retriable) until delivery.timeout.ms: the record
        # fails with that error, or with the timeout when it expires waiting for its next retry
        assert all(getattr(e, "code", None) == ErrorCode.KAFKA_STORAGE_ERROR or isinstance(e, KafkaTimeoutError)
                   for e in failed.values()), failed
        log = _read_all(bs, "full")
        acked = {**before, **during}
        assert [v for _, v in log] == [v for v, _ in sorted(acked.items(), key=lambda kv: kv[1])]
        assert [o for o, _ in log] == list(range(len(log)))          # contiguous: no torn batch
        assert not set(failed) & {v for _, v in log}                  # nothing unacknowledged stored
        p.close()
    # stopped while the disk was full: no clean-shutdown marker, the files closed all the same
    assert storages[-1].closed and isinstance(storages[-1].close_error, OSError)
    fs.capacity = None                                                # space returns
    with broker_on(fs, monkeypatch) as bs:
        assert _read_all(bs, "full") == log                           # recovered whole
        p = producer(bs)
        after, failed = _produce(p, "full", [f"c{i}" for i in range(10)])
        p.close()
        assert len(after) == 10 and not failed
        assert min(after.values()) == len(log)                        # the log goes on where it stopped
        whole = _read_all(bs, "full")
    assert [v for _, v in whole] == [v for _, v in log] + [f"c{i}" for i in range(10)]


@pytest.mark.parametrize("room", [0, 100])
def test_produce_on_a_full_disk_answers_kafka_storage_error_and_cuts_back_the_short_write(monkeypatch, room):
    """On the wire: Produce is answered KAFKA_STORAGE_ERROR with the disk's error; with no room at all
    or room for part of the batch (a short write) the partial bytes are cut, the partition stays
    led (Metadata), and once space returns the next batch gets the next offset."""
    from kohort.client.admin import Admin
    from kohort.errors import ErrorCode
    from kohort.protocol.messages.metadata import MetadataRequest
    from kohort.protocol.messages.produce import ProduceRequest as P
    from tests.helpers.broker_wire import batch
    from tests.helpers.rawclient import RawClient

    def produce(c, n):
        r = c.request(P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name="edge", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch(n))])]), 9)
        pr = r.responses[0].partition_responses[0]
        return pr.error_code, pr.base_offset, pr.error_message

    fs = FullableFileSystem()
    with broker_on(fs, monkeypatch) as bs:
        with Admin({"bootstrap.servers": bs}) as a:
            a.create_topics({"edge": 1})
        c = RawClient(bs)
        try:
            assert produce(c, 3)[:2] == (0, 0)
            fs.capacity = fs.used() + room
            size_before = fs.used()
            code, offset, message = produce(c, 50)
            assert (code, offset) == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
            assert "No space left on device" in message
            assert fs.used() == size_before                         # the short write was cut back
            md = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="edge")]), 9)
            part = md.topics[0].partitions[0]
            assert (md.topics[0].error_code, part.error_code, part.leader_id) == (0, 0, 0)
            fs.capacity = None
            assert produce(c, 2)[:2] == (0, 3)                      # the next offset, nothing skipped
        finally:
            c.close()
