"""encode_fetch_frame (the broker's Fetch v12-v17 answers written without the schema's codecs) writes
the same frame as framing.encode_response_spliced / encode_response_buffer: the same bytes and the
same splices (where ExternalRecords go); answers with a tagged field to write are left to them (None)."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from kohort.protocol.framing import encode_response_buffer, encode_response_spliced
from kohort.protocol.messages.fetch import FetchResponse, encode_fetch_frame
from kohort.protocol.records import ExternalRecords

TR = FetchResponse.FetchableTopicResponse
PD = TR.PartitionData
VERSIONS = list(range(12, 18))
i16 = st.integers(-2**15, 2**15 - 1)
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)


class Held(ExternalRecords):
    """Record bytes outside the answer (as a FileSlice of a segment is)."""
    __slots__ = ("data",)

    def __init__(self, data: bytes):
        super().__init__(len(data))
        self.data = data

    def read(self) -> bytes:
        return self.data


records = st.one_of(st.none(), st.binary(max_size=300), st.binary(min_size=1, max_size=300).map(Held))
aborted = st.one_of(st.none(), st.lists(st.builds(PD.AbortedTransaction, producer_id=i64, first_offset=i64),
                                        max_size=3))
partitions = st.builds(PD, partition_index=i32, error_code=i16, high_watermark=i64, last_stable_offset=i64,
                       log_start_offset=i64, aborted_transactions=aborted, preferred_read_replica=i32,
                       records=records)
topics = st.builds(TR, topic=st.text(max_size=20), topic_id=st.uuids(), partitions=st.lists(partitions, max_size=4))
answers = st.builds(FetchResponse, throttle_time_ms=i32, error_code=i16, session_id=i32,
                    responses=st.lists(topics, max_size=4))


def frame(buf) -> bytes:
    """The frame as sent: the buffer with each splice's bytes inserted at its place."""
    out, prev = bytearray(), 0
    for pos, recs in getattr(buf, "splices", ()):
        out += buf[prev:pos] + recs.read()
        prev = pos
    return bytes(out + buf[prev:])


@settings(max_examples=300, deadline=None)
@given(answers, st.sampled_from(VERSIONS), i32)
def test_same_frame_as_the_framing_encoders(resp, v, corr):
    fast, slow = encode_fetch_frame(resp, v, corr, True), encode_response_spliced(resp, v, corr)
    assert bytes(fast) == bytes(slow)
    assert [(pos, id(r)) for pos, r in fast.splices] == [(pos, id(r)) for pos, r in slow.splices]
    assert fast.frame_size == slow.frame_size == len(frame(slow))
    fast = encode_fetch_frame(resp, v, corr, False)
    assert bytes(fast) == bytes(encode_response_buffer(resp, v, corr)) == frame(slow)


def one_partition(**kw) -> FetchResponse:
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=5, responses=[
        TR(topic="t", topic_id=uuid.uuid4(), partitions=[PD(partition_index=0, high_watermark=3, records=b"x", **kw)])])


TAGGED = [
    one_partition(diverging_epoch=PD.EpochEndOffset(epoch=2, end_offset=9)),
    one_partition(current_leader=PD.LeaderIdAndEpoch(leader_id=1, leader_epoch=4)),
    one_partition(snapshot_id=PD.SnapshotId(end_offset=7, epoch=1)),
]


@pytest.mark.parametrize("v", VERSIONS)
@pytest.mark.parametrize("i", range(len(TAGGED)))
def test_tagged_fields_go_to_the_framing_encoders(i, v):
    assert encode_fetch_frame(TAGGED[i], v, 1, True) is None
    assert encode_fetch_frame(TAGGED[i], v, 1, False) is None


def test_node_endpoints_and_other_versions_go_to_the_framing_encoders():
    resp = one_partition()
    resp.node_endpoints = [FetchResponse.NodeEndpoint(node_id=1, host="h", port=9)]
    assert encode_fetch_frame(resp, 16, 1, True) is None
    assert encode_fetch_frame(one_partition(), 11, 1, True) is None
    assert encode_fetch_frame(one_partition(), 18, 1, True) is None


def test_values_out_of_range_go_to_the_framing_encoders():
    assert encode_fetch_frame(one_partition(error_code=1 << 20), 16, 1, False) is None
