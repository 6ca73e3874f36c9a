"""Hostile bytes against a running `kohort broker` (subprocess): thousands of random and mutated
frames over several connections while a well-behaved client keeps producing and consuming. The
broker must stay up, the client must never stall, and the broker's RSS must stay bounded. An
oversize size prefix is refused from the prefix alone."""
from __future__ import annotations

import asyncio
import random
import struct
import time

from kohort.protocol.framing import encode_request
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.describe_configs import DescribeConfigsRequest
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.protocol.messages.produce import ProduceRequest
from kohort.protocol.records import iter_records
from tests.helpers.broker_wire import Wire, batch
from tests.helpers.brokers import KohortBroker
from tests.broker.test_broker_protocol import fetch_req, produce

FUZZ_TOPIC = "fuzz-t"


def _seeds() -> list[bytes]:
    PT = ProduceRequest.TopicProduceData
    FT = FetchRequest.FetchTopic
    LT = ListOffsetsRequest.ListOffsetsTopic
    CT = CreateTopicsRequest.CreatableTopic
    reqs = [
        (ApiVersionsRequest(client_software_name="fz", client_software_version="1"), 3),
        (ApiVersionsRequest(), 0),
        (MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=FUZZ_TOPIC)]), 12),
        (MetadataRequest(topics=None), 1),
        (ProduceRequest(acks=1, timeout_ms=100, topic_data=[PT(name=FUZZ_TOPIC, partition_data=[
            PT.PartitionProduceData(index=0, records=batch(3))])]), 9),
        (ProduceRequest(acks=-1, timeout_ms=100, topic_data=[PT(name=FUZZ_TOPIC, partition_data=[
            PT.PartitionProduceData(index=0, records=batch(2))])]), 7),
        (FetchRequest(max_wait_ms=50, min_bytes=1, max_bytes=1 << 16, isolation_level=0, session_id=0,
                      session_epoch=0, topics=[FT(topic=FUZZ_TOPIC, partitions=[FT.FetchPartition(
                          partition=0, fetch_offset=0, partition_max_bytes=1 << 16)])],
                      forgotten_topics_data=[], rack_id=""), 12),
        (FetchRequest(max_wait_ms=50, min_bytes=1, max_bytes=1 << 16, isolation_level=0, topics=[
            FT(topic=FUZZ_TOPIC, partitions=[FT.FetchPartition(partition=0, fetch_offset=0,
                                                              partition_max_bytes=1 << 16)])]), 4),
        (ListOffsetsRequest(replica_id=-1, topics=[LT(name=FUZZ_TOPIC, partitions=[
            LT.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 7),
        (CreateTopicsRequest(topics=[CT(name="fz-new", num_partitions=1, replication_factor=1)],
                             timeout_ms=100), 5),
        (DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=2, resource_name=FUZZ_TOPIC, configuration_keys=None)]), 4),
        (InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=100), 4),
    ]
    return [encode_request(r, v, i + 1, client_id="fuzzer") for i, (r, v) in enumerate(reqs)]


def _mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    kind = rng.random()
    if kind < 0.15:                                  # pure noise with a plausible prefix
        body = rng.randbytes(rng.randint(0, 300))
        return struct.pack(">i", len(body)) + body
    f = bytearray(rng.choice(seeds))
    body = f[4:]
    if kind < 0.55:                                  # flip bytes in the body
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(body))
            body[i] = rng.randrange(256)
    elif kind < 0.7:                                 # truncate
        body = body[:rng.randrange(len(body))]
    elif kind < 0.8:                                 # append junk
        body += rng.randbytes(rng.randint(1, 50))
    elif kind < 0.9:                                 # random api version
        body[2:4] = struct.pack(">h", rng.randint(-2, 40))
    else:                                            # interesting integers somewhere
        i = rng.randrange(max(len(body) - 4, 1))
        body[i:i + 4] = struct.pack(">i", rng.choice([0, -1, 1 << 30, 0x7FFFFFFF, -0x80000000, 65536]))
    if rng.random() < 0.1:                           # a lying size prefix
        return struct.pack(">i", max(len(body) + rng.randint(-3, 3), 0)) + bytes(body)
    return struct.pack(">i", len(body)) + bytes(body)


async def _fuzz_connection(b, rng, frames: int, counter: list) -> None:
    """Send `frames` hostile frames one at a time; after each, read until the broker answers,
    closes the connection (then reconnect) or 50 ms pass (it may be waiting for bytes we lied
    about: reconnect too)."""
    seeds = _seeds()
    sent = 0
    r = w = None
    while sent < frames:
        if w is None:
            try:
                r, w = await asyncio.open_connection("127.0.0.1", b.port)
            except OSError:
                await asyncio.sleep(0.01)
                continue
        try:
            w.write(_mutate(rng, seeds))
            sent += 1
            counter[0] += 1
            await w.drain()
            data = await asyncio.wait_for(r.read(65536), 0.05)
            counter[1] += bool(data)
            if not data:
                raise ConnectionResetError
        except (ConnectionError, OSError, asyncio.TimeoutError):
            w.close()
            r = w = None
    if w is not None:
        w.close()


async def _good_client(b, stop: asyncio.Event, latencies: list) -> int:
    w = await Wire.connect(b)
    offset = 0
    n = 0
    while not stop.is_set():
        t0 = time.monotonic()
        r = await asyncio.wait_for(produce(w, "good", batch(5, prefix=f"g{n}-")), 5)
        assert r.error_code == 0 and r.base_offset == offset
        got = []
        while len(got) < 5:
            resp = await asyncio.wait_for(w.call(fetch_req("good", offset + len(got), max_wait=500), 12), 5)
            p = resp.responses[0].partitions[0]
            assert p.error_code == 0
            got += [v for _, _, _, v, _ in iter_records(bytes(p.records or b""))]
        assert got == [f"g{n}-{i}".encode() for i in range(5)]
        offset += 5
        n += 1
        latencies.append(time.monotonic() - t0)
        await asyncio.sleep(0.005)
    await w.close()
    return n


def test_random_and_mutated_frames_do_not_hurt_the_broker():
    with KohortBroker(config={"kohort.topic.max.partitions": "4"}) as b:
        async def main():
            w = await Wire.connect(b)
            from tests.broker.test_broker_protocol import create
            await create(w, FUZZ_TOPIC)
            await create(w, "good")
            await w.close()
            rss0 = b.rss_kb()
            stop = asyncio.Event()
            latencies: list = []
            counter = [0, 0]
            good = asyncio.ensure_future(_good_client(b, stop, latencies))
            rngs = [random.Random(1000 + i) for i in range(4)]
            await asyncio.gather(*[_fuzz_connection(b, rngs[i], 1000, counter) for i in range(4)])
            await asyncio.sleep(0.3)
            stop.set()
            rounds = await asyncio.wait_for(good, 10)
            return rss0, b.rss_kb(), latencies, rounds, counter
        rss0, rss1, latencies, rounds, (frames, answered) = asyncio.run(main())
        assert b.proc.poll() is None, "broker died:\n" + "\n".join(b.log_lines[-20:])
        assert frames >= 4000 and answered >= 500, (frames, answered)
        assert rounds >= 5 and max(latencies) < 3.0, (rounds, max(latencies))
        assert rss1 - rss0 < 64 * 1024, f"RSS grew from {rss0} kB to {rss1} kB"
        crashes = [line for line in b.log_lines if "failed" in line or "Traceback" in line]
        assert not crashes, "\n".join(crashes[:20])


def test_oversize_size_prefix_is_refused_without_reading_the_body():
    with KohortBroker() as b:
        async def main():
            for prefix in (0x7FFFFFFF, 100 * 1024 * 1024 + 1, -5):
                r, w = await asyncio.open_connection("127.0.0.1", b.port)
                w.write(struct.pack(">i", prefix))       # and never any body
                await w.drain()
                t0 = time.monotonic()
                assert await asyncio.wait_for(r.read(), 3) == b""     # closed at once
                assert time.monotonic() - t0 < 2
                w.close()
            # the broker still serves
            w = await Wire.connect(b)
            resp = await w.call(ApiVersionsRequest(), 0)
            assert resp.error_code == 0
            await w.close()
        asyncio.run(main())
        assert any("exceeds socket.request.max.bytes" in line for line in b.log_lines)


def test_a_client_that_never_reads_cannot_grow_the_broker():
    """Pipelined 1 MiB fetches whose answers are never read: the broker stops reading that
    connection (back-pressure) instead of buffering every answer."""
    with KohortBroker() as b:
        async def main():
            w = await Wire.connect(b)
            from tests.broker.test_broker_protocol import create
            await create(w, "big")
            for _ in range(4):
                assert (await produce(w, "big", batch(1, prefix="z" * 900_000))).error_code == 0
            rss0 = b.rss_kb()
            frame = encode_request(fetch_req("big", 0, max_bytes=4 << 20, pmax=4 << 20), 12, 99)
            r, wr = await asyncio.open_connection("127.0.0.1", b.port)
            wr.transport.set_write_buffer_limits(high=1 << 30)
            for _ in range(400):                        # ~1.4 GB of answers if all were built
                wr.write(frame)
            await asyncio.sleep(2.0)
            rss1 = b.rss_kb()
            # the well-behaved connection is still served meanwhile
            resp = await asyncio.wait_for(w.call(fetch_req("big", 0, max_bytes=1000), 12), 5)
            assert resp.responses[0].partitions[0].error_code == 0
            wr.close()
            await w.close()
            return rss0, rss1
        rss0, rss1 = asyncio.run(main())
        assert rss1 - rss0 < 200 * 1024, f"RSS grew from {rss0} kB to {rss1} kB"
