"""read_fetch_request (the consumers' Fetch v12-v17 read without the schema's codecs) makes the same
FetchRequest as the schema's decoder for every request it takes, declines (None) every request with
tagged fields, and declines or matches on any truncation or corruption of a valid body."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kohort.errors import DecodeError
from kohort.protocol.messages.fetch import FetchRequest, read_fetch_request
from kohort.protocol.primitives import Reader

FT = FetchRequest.FetchTopic
FP = FT.FetchPartition
FG = FetchRequest.ForgottenTopic
VERSIONS = list(range(12, 18))
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)


def body(req: FetchRequest, v: int) -> bytearray:
    out = bytearray()
    req.encode_into(out, v)
    return out


def general(buf, v: int) -> FetchRequest:
    return FetchRequest.read(Reader(buf), v)


def same(fast: FetchRequest, slow: FetchRequest) -> None:
    assert fast == slow
    assert vars(fast).keys() == vars(slow).keys()
    for a, b in zip(fast.topics, slow.topics):
        assert vars(a).keys() == vars(b).keys()
        for x, y in zip(a.partitions, b.partitions):
            assert vars(x).keys() == vars(y).keys()


partitions = st.builds(FP, partition=i32, current_leader_epoch=i32, fetch_offset=i64, last_fetched_epoch=i32,
                       log_start_offset=i64, partition_max_bytes=i32)
names = st.text(max_size=20)
topics = st.builds(FT, topic=names, topic_id=st.uuids(), partitions=st.lists(partitions, max_size=4))
forgotten = st.builds(FG, topic=names, topic_id=st.uuids(), partitions=st.lists(i32, max_size=4))
requests = st.builds(FetchRequest, replica_id=i32, max_wait_ms=i32, min_bytes=i32, max_bytes=i32,
                     isolation_level=st.integers(-128, 127), session_id=i32, session_epoch=i32,
                     topics=st.lists(topics, max_size=4), forgotten_topics_data=st.lists(forgotten, max_size=3),
                     rack_id=names)


@settings(max_examples=300, deadline=None)
@given(requests, st.sampled_from(VERSIONS))
def test_same_request_as_the_schema_decoder(req, v):
    buf = body(req, v)
    fast = read_fetch_request(buf, 0, v)
    assert fast is not None
    same(fast, general(buf, v))
    assert body(fast, v) == buf
    # trailing bytes are ignored by both readers (the broker's decode_request ignores them too)
    same(read_fetch_request(buf + b"\x07\x07", 0, v), general(buf + b"\x07\x07", v))


@settings(max_examples=300, deadline=None)
@given(requests, st.sampled_from(VERSIONS), st.data())
def test_truncated_or_corrupted_bodies_are_declined_or_read_alike(req, v, data):
    buf = body(req, v)
    if data.draw(st.booleans()):
        buf = buf[:data.draw(st.integers(0, len(buf) - 1))]
    else:
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    fast = read_fetch_request(buf, 0, v)
    try:
        slow = general(buf, v)
    except DecodeError:
        assert fast is None
        return
    if fast is not None:
        same(fast, slow)


TAGGED = [
    FetchRequest(max_wait_ms=500, min_bytes=1, topics=[], forgotten_topics_data=[], rack_id="", cluster_id="c"),
    FetchRequest(max_wait_ms=500, min_bytes=1, topics=[], forgotten_topics_data=[], rack_id="",
                 replica_state=FetchRequest.ReplicaState(replica_id=3, replica_epoch=5)),
    FetchRequest(max_wait_ms=500, min_bytes=1, forgotten_topics_data=[], rack_id="", topics=[FT(
        topic="t", topic_id=uuid.uuid4(), partitions=[FP(partition=0, fetch_offset=1, partition_max_bytes=9,
                                                         replica_directory_id=uuid.uuid4())])]),
]


def _tagged_cases():
    """(TAGGED index, version) where the version carries that tagged field (replica_directory_id,
    TAGGED[2], is v17+; the others are where the request's bytes differ from the untagged one's)."""
    for i, req in enumerate(TAGGED):
        for v in VERSIONS:
            plain = FetchRequest(max_wait_ms=500, min_bytes=1, topics=req.topics, forgotten_topics_data=[], rack_id="")
            if (v >= 17) if i == 2 else body(req, v) != body(plain, v):
                yield i, v


@pytest.mark.parametrize("i,v", list(_tagged_cases()))
def test_tagged_fields_go_to_the_schema_decoder(i, v):
    buf = body(TAGGED[i], v)
    assert read_fetch_request(buf, 0, v) is None
    general(buf, v)


def test_other_versions_are_not_the_readers():
    """decode_request hands it v12-v17 only; v4-v11 have no compact fields (what it would misread)."""
    from kohort.broker.connection import decode_request
    from kohort.protocol.framing import encode_request
    req = FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=100, isolation_level=1, session_id=3, session_epoch=4,
                       topics=[FT(topic="t", topic_id=uuid.uuid4(), partitions=[FP(partition=1, fetch_offset=7,
                                                                                   partition_max_bytes=9)])],
                       forgotten_topics_data=[], rack_id="r")
    for v in range(4, 18):
        _, got = decode_request(bytearray(encode_request(req, v, 9)[4:]))
        frame = bytearray(encode_request(req, v, 9)[4:])
        assert got == general(memoryview(frame)[len(frame) - len(body(req, v)):], v)
