"""The broker's two Produce paths give the same answers and the same log: the common request (one
partition, no transactional id: read_one_partition / produce_one, no request or answer objects)
and the general one (decode_request, _produce), which takes the same request when a trailing byte
follows it (the general decoder ignores trailing bytes, the one-partition reader does not). Each
request, valid or refused for each of Kafka's reasons, goes to two brokers, one per path."""
from __future__ import annotations

import asyncio
import os
import struct

import pytest
from crc32c import crc32c

from kohort.errors import ErrorCode as E
from kohort.protocol.framing import encode_request
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.produce import ProduceRequest
from kohort.protocol.records import ATTRIBUTES_OFFSET, CRC_OFFSET, build_batch
from tests.helpers.broker_wire import Wire, running_broker

PT = ProduceRequest.TopicProduceData
CT = CreateTopicsRequest.CreatableTopic


def records(n=3, seq=-1, pid=-1, prefix=b"v"):
    return bytearray(build_batch([(b"k%d" % i, prefix + b"%d" % i, [], 1_700_000_000_000 + i) for i in range(n)],
                                 producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq))


def recrc(b: bytearray) -> bytearray:
    struct.pack_into(">I", b, CRC_OFFSET, crc32c(bytes(b[ATTRIBUTES_OFFSET:])))
    return b


def cases():
    """(topic, partition, records, version, acks) in order; each answer and the final logs compared."""
    out = [("t", 0, records(), 9, -1), ("t", 0, records(), 3, 1), ("t", 0, records(), 8, -1),
           ("t", 1, records(5), 12, -1)]
    out += [("t", 0, records(3, 0, 7), 9, -1), ("t", 0, records(3, 3, 7), 9, -1),
            ("t", 0, records(3, 0, 7), 9, -1),          # a duplicate: its original offsets
            ("t", 0, records(3, 100, 7), 9, -1)]        # OUT_OF_ORDER_SEQUENCE_NUMBER
    bad_crc = records()
    bad_crc[-1] ^= 1
    magic1 = records()
    magic1[16] = 1
    base = records()
    struct.pack_into(">q", base, 0, 5)
    control = records()
    control[ATTRIBUTES_OFFSET + 1] |= 0x20
    two = records() + records()
    count = records()
    struct.pack_into(">i", count, 57, 9)
    out += [("t", 0, bad_crc, 9, -1), ("t", 0, magic1, 9, -1), ("t", 0, base, 9, -1),
            ("t", 0, recrc(control), 9, -1), ("t", 0, two, 9, -1), ("t", 0, recrc(count), 9, -1),
            ("t", 0, records(3, -1, 9), 9, -1), ("t", 9, records(), 9, -1), ("nope", 0, records(), 9, -1),
            ("small", 0, records(40), 9, -1), ("__consumer_offsets", 0, records(), 9, -1),
            ("t", 0, records(2, prefix=b"last"), 12, 1)]
    return out


async def run_path(data_dir, policy: str, general: bool, pipelined: bool = False):
    answers = []
    async with running_broker(data_dir, {"log.flush.policy": policy}) as b:
        w = await Wire.connect(b)
        await w.call(CreateTopicsRequest(topics=[
            CT(name="t", num_partitions=2, replication_factor=1, assignments=[], configs=[]),
            CT(name="small", num_partitions=1, replication_factor=1, assignments=[], configs=[
                CT.CreatableTopicConfig(name="max.message.bytes", value="200")])], timeout_ms=1000), 5)
        frames = []
        for i, (topic, part, recs, version, acks) in enumerate(cases()):
            req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[
                PT(name=topic, partition_data=[PT.PartitionProduceData(index=part, records=bytes(recs))])])
            frame = bytearray(encode_request(req, version, 100 + i, client_id="t"))
            if general:
                frame += b"\0"
                struct.pack_into(">i", frame, 0, len(frame) - 4)
            frames.append(frame)
        # one request at a time, or all in one write (read and patched in place in one receive buffer)
        sends = [(b"".join(frames), len(frames))] if pipelined else [(f, 1) for f in frames]
        for data, n in sends:
            w.writer.write(data)
            for _ in range(n):
                size = struct.unpack(">i", await asyncio.wait_for(w.reader.readexactly(4), 10))[0]
                answers.append(await asyncio.wait_for(w.reader.readexactly(size), 10))
        await w.close()
        logs = {}
        for name, n in (("t", 2), ("small", 1)):
            for p in range(n):
                d = b.storage.log(name, p).directory
                logs[(name, p)] = {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))
                                   if f.endswith(".log")}
    return answers, logs


@pytest.mark.parametrize("policy", ["os", "fsync-before-ack"])
def test_one_partition_path_answers_and_logs_as_the_general_path(tmp_path, policy):
    fast = asyncio.run(run_path(tmp_path / "fast", policy, False))
    general = asyncio.run(run_path(tmp_path / "general", policy, True))
    assert fast[0] == general[0]
    assert fast[1] == general[1]
    # the refusals are the ones Kafka gives (so the comparison covers each path's checks)
    from kohort.protocol.framing import decode_response
    codes = [decode_response(a, 0, v)[1].responses[0].partition_responses[0].error_code
             for a, (_, _, _, v, _) in zip(fast[0], cases())]
    assert codes == [0, 0, 0, 0, 0, 0, 0, E.OUT_OF_ORDER_SEQUENCE_NUMBER, E.CORRUPT_MESSAGE, E.INVALID_RECORD,
                     E.INVALID_RECORD, E.INVALID_RECORD, E.INVALID_RECORD, E.INVALID_RECORD, E.INVALID_RECORD,
                     E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_OR_PARTITION, E.MESSAGE_TOO_LARGE,
                     E.INVALID_TOPIC_EXCEPTION, 0]
    assert sum(len(v) for v in fast[1][("t", 0)].values()) > 0
    # pipelined: the frames cut from one receive buffer, each batch patched and written where it lies
    assert asyncio.run(run_path(tmp_path / "pipelined", policy, False, True)) == fast
