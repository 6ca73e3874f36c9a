"""The broker's write loop with a pipelined connection: answers stay in request order, answers ready
together are joined into few writes, an answer still waiting (a long poll) does not hold back the
ones before it, and large answers (fetches) arrive whole among small ones."""
from __future__ import annotations

import asyncio
import time

from kohort.protocol.framing import encode_request
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.protocol.messages.produce import ProduceRequest
from kohort.protocol.records import iter_records
from tests.helpers.broker_wire import Wire, batch, running_broker
from tests.broker.test_broker_protocol import create, fetch_req

PT = ProduceRequest.TopicProduceData


def produce_req(topic: str, records: bytes, acks: int = 1) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[
        PT(name=topic, partition_data=[PT.PartitionProduceData(index=0, records=records)])])


def send_raw(w: Wire, req, version: int) -> int:
    w.corr += 1
    w.writer.write(encode_request(req, version, w.corr))
    return w.corr


def count_writes(b, monkeypatch) -> list[int]:
    """Sizes of the broker's writes to its client sockets (the real transports, counted)."""
    sizes: list[int] = []
    served = {id(conn.transport) for conn in b._conn_states.values()}
    transport_cls = type(next(iter(b._conn_states.values())).transport)
    real = transport_cls.write

    def write(self, data):
        if id(self) in served:
            sizes.append(len(data))
        return real(self, data)
    monkeypatch.setattr(transport_cls, "write", write)
    return sizes


def test_pipelined_answers_in_order_and_joined(tmp_path, monkeypatch):
    async def main():
        async with running_broker(tmp_path) as b:          # fsync-before-ack: answers wait for rounds
            w = await Wire.connect(b)
            await create(w, "p")
            await create(w, "empty")
            writes = count_writes(b, monkeypatch)
            n = 40
            corrs = [send_raw(w, produce_req("p", batch(1, prefix="r%d-" % i)), 9) for i in range(n)]
            poll = send_raw(w, fetch_req("empty", 0, max_wait=400), 12)
            after = send_raw(w, MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
            await w.writer.drain()
            t0 = time.monotonic()
            offsets = []
            for c in corrs:
                corr, resp = await w.recv(0, 9)
                assert corr == c
                p = resp.responses[0].partition_responses[0]
                assert p.error_code == 0
                offsets.append(p.base_offset)
            # the produce answers did not wait for the long poll queued behind them
            assert time.monotonic() - t0 < 0.3
            assert offsets == list(range(n))
            corr, _ = await w.recv(1, 12)
            assert corr == poll and time.monotonic() - t0 >= 0.3
            corr, _ = await w.recv(3, 12)
            assert corr == after
            assert len(writes) < n                         # answers ready together share writes
            await w.close()
    asyncio.run(main())


def test_large_answers_whole_among_small_ones(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"log.flush.policy": "os"}) as b:
            w = await Wire.connect(b)
            await create(w, "big")
            big = batch(40, prefix="x" * 5000)             # ~200 KB per fetch answer
            corr, resp = await w.send(produce_req("big", big), 9)
            assert resp.responses[0].partition_responses[0].error_code == 0
            expect = []
            for i in range(12):
                if i % 3 == 0:
                    expect.append(("fetch", send_raw(w, fetch_req("big", 0), 12)))
                else:
                    expect.append(("produce", send_raw(w, produce_req("big", batch(1, prefix="s%d-" % i)), 9)))
            await w.writer.drain()
            for kind, c in expect:
                if kind == "fetch":
                    corr, resp = await w.recv(1, 12)
                    recs = list(iter_records(bytes(resp.responses[0].partitions[0].records)))
                    assert len(recs) >= 40 and recs[0][3] == b"x" * 5000 + b"0"
                else:
                    corr, resp = await w.recv(0, 9)
                    assert resp.responses[0].partition_responses[0].error_code == 0
                assert corr == c
            await w.close()
    asyncio.run(main())


def test_an_answer_ready_at_once_is_written_before_the_next_frame_is_worked_on(tmp_path, monkeypatch):
    """Frames that arrive in one read: each ready answer goes out before the broker works on the next
    frame, so a pipelining client gets it while the broker is still busy (no lockstep rounds)."""
    async def main():
        async with running_broker(tmp_path, {"log.flush.policy": "os"}) as b:
            w = await Wire.connect(b)
            await create(w, "eager")
            conn = next(iter(b._conn_states.values()))
            events: list[str] = []
            real_frame = type(conn)._on_frame
            real_write = type(conn.transport).write

            def on_frame(self, payload):
                events.append("frame")
                return real_frame(self, payload)

            def write(self, data):
                if self is conn.transport:
                    events.append("write")
                return real_write(self, data)
            monkeypatch.setattr(type(conn), "_on_frame", on_frame)
            monkeypatch.setattr(type(conn.transport), "write", write)
            frames = b"".join(encode_request(produce_req("eager", batch(1, prefix="e%d-" % i)), 9, 100 + i)
                              for i in range(5))
            w.writer.write(frames)                        # one write: the broker reads them together
            await w.writer.drain()
            for i in range(5):
                corr, resp = await w.recv(0, 9)
                assert corr == 100 + i and resp.responses[0].partition_responses[0].error_code == 0
            assert events.count("frame") == 5
            assert events.index("write") < len(events) - 1 - events[::-1].index("frame")
            await w.close()
    asyncio.run(main())
