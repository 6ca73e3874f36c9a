"""AIOKafkaProducer: aiokafka 0.14's producer API over `kohort.aio.AIOProducer`.

Keyword-only arguments by aiokafka's names and defaults (acks 1, or all when idempotent;
max_batch_size 16384; linger_ms 0; request_timeout_ms 40000); serializers and aiokafka's callable
partitioners are applied here. `send()` returns a future of aiokafka's RecordMetadata (two awaits, as
in aiokafka; a view of kohort.aio's per-batch RecordFuture, usable as an asyncio future, no future or
callback per record); `create_batch()`/`send_batch()`; transactions without init (the producer id is
fetched at start), `transaction()` as an async context manager. kohort's errors are raised as
aiokafka's (`errors.translate`).
"""
from __future__ import annotations

import asyncio
import contextlib
import time
import warnings
from collections.abc import Callable
from typing import Any

import kohort.errors as _k
from kohort.aio.producer import AIOProducer
from kohort.aio.record_future import RecordFuture
import kohort.compat.aiokafka.errors as E
from kohort.compat.aiokafka.structs import RecordMetadata, TopicPartition
from kohort.protocol.records import append_record

_COUNTER = [0]
_CODECS = (None, "gzip", "snappy", "lz4", "zstd")


class BatchBuilder:
    """Records for one send_batch(): append() returns None once the batch is full."""

    def __init__(self, max_size: int, key_serializer, value_serializer):
        self._records: list = []
        self._size = 61                    # a v2 batch header
        self._max = max_size
        self._ks, self._vs = key_serializer, value_serializer
        self._closed = False
        self._first_ts = None

    def append(self, *, timestamp, key, value, headers=()):
        """Add a record (timestamp in ms, None: now) -> its metadata, or None when it does not fit
        (the first record always fits), sized exactly as its v2 encoding."""
        if self._closed:
            return None
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        k = self._ks(key) if self._ks is not None and key is not None else key
        v = self._vs(value) if self._vs is not None and value is not None else value
        hs = list(headers) if headers else None
        if self._first_ts is None:
            self._first_ts = timestamp
        scratch = bytearray()
        append_record(scratch, len(self._records), timestamp - self._first_ts, k, v, hs)
        if self._records and self._size + len(scratch) > self._max:
            return None
        self._records.append((k, v, timestamp, hs))
        self._size += len(scratch)
        return _BatchRecordInfo(len(self._records) - 1, timestamp, len(scratch))

    def size(self) -> int:
        return self._size

    def record_count(self) -> int:
        return len(self._records)

    def close(self) -> None:
        self._closed = True


class _BatchRecordInfo:
    __slots__ = ("offset", "timestamp", "crc", "size")

    def __init__(self, offset, timestamp, size):
        self.offset, self.timestamp, self.crc, self.size = offset, timestamp, None, size


class AIOKafkaProducer:
    _PRODUCER_CLIENT_ID_SEQUENCE = 0

    def __init__(self, *, loop: Any = None, bootstrap_servers: str | list[str] = "localhost",
                 client_id: str | None = None, metadata_max_age_ms: int = 300000,
                 request_timeout_ms: int = 40000, api_version: str = "auto", acks: int | str | None = None,
                 key_serializer: Callable[[Any], bytes] | None = None,
                 value_serializer: Callable[[Any], bytes] | None = None, compression_type: str | None = None,
                 max_batch_size: int = 16384, partitioner: Any = None,
                 max_request_size: int = 1048576, linger_ms: int = 0, retry_backoff_ms: int = 100,
                 security_protocol: str = "PLAINTEXT", ssl_context: Any = None,
                 connections_max_idle_ms: int = 540000, enable_idempotence: bool = False,
                 transactional_id: str | None = None, transaction_timeout_ms: int = 60000,
                 sasl_mechanism: str = "PLAIN", sasl_plain_password: str | None = None,
                 sasl_plain_username: str | None = None, sasl_kerberos_service_name: str = "kafka",
                 sasl_kerberos_domain_name: str | None = None, sasl_oauth_token_provider: Any = None,
                 client_rack: str | None = None) -> None:
        if api_version != "auto":
            warnings.warn("api_version is ignored (aiokafka 0.14 ignores it too)", DeprecationWarning, stacklevel=2)
        if compression_type not in _CODECS:
            raise ValueError(f"Invalid compression type {compression_type!r}")
        if transactional_id is not None:
            enable_idempotence = True
        if acks is None:
            acks = -1 if enable_idempotence else 1
        elif acks == "all":
            acks = -1
        if acks not in (0, 1, -1):
            raise ValueError(f"Invalid ACKS parameter {acks!r}")
        if enable_idempotence and acks != -1:
            raise ValueError("acks should be set to 'all' if enable_idempotence is True")
        if client_id is None:
            _COUNTER[0] += 1
            client_id = f"aiokafka-producer-{_COUNTER[0]}"
        self.client_id = client_id
        self._key_serializer, self._value_serializer = key_serializer, value_serializer
        self._partitioner = partitioner
        self._max_batch_size = max_batch_size
        self._transactional = transactional_id is not None
        self._p = AIOProducer(
            bootstrap_servers, acks=acks, linger_ms=linger_ms, batch_size=max_batch_size,
            max_request_size=max_request_size, compression_type=compression_type,
            enable_idempotence=enable_idempotence, transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms, client_id=client_id,
            request_timeout_ms=request_timeout_ms, metadata_max_age_ms=metadata_max_age_ms,
            retry_backoff_ms=retry_backoff_ms, security_protocol=security_protocol, ssl_context=ssl_context,
            sasl_mechanism=sasl_mechanism, sasl_plain_username=sasl_plain_username,
            sasl_plain_password=sasl_plain_password)
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------------
    @E.translated
    async def start(self) -> None:
        await self._p.start()

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._p.stop()

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.stop()

    # -- sending ---------------------------------------------------------------------------------------
    @E.translated
    async def partitions_for(self, topic: str) -> set[int]:
        return set(await self._p.partitions_for(topic))

    def _serialize(self, key, value):
        k = self._key_serializer(key) if self._key_serializer is not None else key
        v = self._value_serializer(value) if self._value_serializer is not None else value
        return k, v

    async def _partition(self, topic, partition, key, key_bytes):
        if partition is not None or self._partitioner is None:
            return partition
        parts = sorted(await self._p.partitions_for(topic))
        return self._partitioner(key_bytes, parts, parts)

    def _check_txn(self) -> None:
        t = self._p.txn
        if t is not None and (not t.has_ongoing_transaction() or t.is_completing()) and not t.has_error():
            raise E.IllegalOperation("Can't send messages while not in transaction")

    @E.translated
    async def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                   timestamp_ms: int | None = None,
                   headers: list[tuple[str, bytes | None]] | None = None) -> "_RecordFuture":
        if value is None and key is None:
            raise ValueError("Need at least one: key or value")
        if self._closed:
            raise E.ProducerClosed()          # noqa: F821 (defined in errors)
        self._check_txn()
        k, v = self._serialize(key, value)
        if headers is not None:
            for hk, hv in headers:
                if not isinstance(hk, str) or not isinstance(hv, (bytes, bytearray, type(None))):
                    raise ValueError(f"headers must be (str, bytes) pairs, not ({hk!r}, {hv!r})")
        partition = await self._partition(topic, partition, key, k)
        fut = await self._p.send(topic, v, k, partition, timestamp_ms, headers)
        return _RecordFuture.of(fut)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                            timestamp_ms: int | None = None,
                            headers: list[tuple[str, bytes | None]] | None = None) -> RecordMetadata:
        fut = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await fut

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self._max_batch_size, None, None)

    @E.translated
    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int):
        self._check_txn()
        batch.close()
        futs = [await self._p.send(topic, v, k, partition, ts, hs) for k, v, ts, hs in batch._records]
        if not futs:
            raise ValueError("empty batch")
        out = asyncio.get_running_loop().create_future()

        def done(_):
            if out.done():
                return
            errs = [f.exception() for f in futs if f.done() and f.exception() is not None]
            if errs:
                out.set_exception(E.translate(errs[0]))
            elif all(f.done() for f in futs):
                md = futs[0].result()
                out.set_result(RecordMetadata(md.topic, md.partition, TopicPartition(md.topic, md.partition),
                                              md.offset, md.timestamp,
                                              md.timestamp_type, md.log_start_offset))
        for f in futs:
            f.add_done_callback(done)
        return out

    @E.translated
    async def flush(self) -> None:
        await self._p.flush()

    # -- transactions ----------------------------------------------------------------------------------
    def _need_txn(self) -> None:
        if not self._transactional:
            raise E.IllegalOperation("You need to configure transaction_id to use transactions")

    @E.translated
    async def begin_transaction(self) -> None:
        self._need_txn()
        await self._p.begin_transaction()

    @E.translated
    async def commit_transaction(self) -> None:
        self._need_txn()
        await asyncio.shield(self._p.commit_transaction())

    @E.translated
    async def abort_transaction(self) -> None:
        self._need_txn()
        await asyncio.shield(self._p.abort_transaction())

    @contextlib.asynccontextmanager
    async def transaction(self):
        await self.begin_transaction()
        try:
            yield
        except BaseException:
            if not self._p.txn.has_fatal_error():
                await self.abort_transaction()
            raise
        else:
            await self.commit_transaction()

    @E.translated
    async def send_offsets_to_transaction(self, offsets, group_id) -> None:
        self._need_txn()
        plain = {}
        for tp, o in offsets.items():
            plain[TopicPartition(*tp)] = o[0] if isinstance(o, tuple) else o
        await self._p.send_offsets_to_transaction(plain, group_id)


class _RecordFuture(RecordFuture):
    """send()'s future as aiokafka gives it: aiokafka's RecordMetadata, aiokafka's errors. A view of
    kohort.aio's RecordFuture (the batch's one shared future), so no future or callback per record."""

    __slots__ = ()

    def exception(self) -> BaseException | None:
        err = super().exception()
        return None if err is None else E.translate(err)

    def result(self) -> RecordMetadata:            # type: ignore[override]
        try:
            md = super().result()
        except _k.KohortError as e:
            raise E.translate(e) from e
        return RecordMetadata(md.topic, md.partition, TopicPartition(md.topic, md.partition), md.offset,
                              md.timestamp, md.timestamp_type, md.log_start_offset)


__all__ = ["AIOKafkaProducer", "BatchBuilder"]
