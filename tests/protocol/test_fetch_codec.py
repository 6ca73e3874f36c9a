"""The consumer's straight-line Fetch codecs (FetchResponse.decode_frame, fetch_request and
FetchRequest.encode_into for v4-v18) against the schema's codec: equal objects, identical bytes, a
cut or malformed answer never read as a different answer, and the fallback for every shape the straight
line leaves to the schema (tagged fields, node_endpoints)."""
from __future__ import annotations

import uuid

from hypothesis import given, settings, strategies as st

from kohort.errors import DecodeError
from kohort.protocol.framing import decode_response_lenient, encode_response
from kohort.protocol.messages.fetch import FetchRequest, FetchResponse, fetch_request

VERSIONS = range(4, 19)
FT = FetchResponse.FetchableTopicResponse
PD = FT.PartitionData
RT = FetchRequest.FetchTopic
RP = RT.FetchPartition

i16 = st.integers(-2**15, 2**15 - 1)
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
ids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
# lengths around the one-byte varint limit (127) as well as small ones
records = st.one_of(st.none(), st.binary(max_size=20), st.integers(120, 300).map(bytes))


@st.composite
def partitions(draw, tagged: bool):
    part = PD(partition_index=draw(i32), error_code=draw(i16), high_watermark=draw(i64),
              last_stable_offset=draw(i64), log_start_offset=draw(i64),
              aborted_transactions=draw(st.one_of(st.none(), st.lists(
                  st.builds(PD.AbortedTransaction, producer_id=i64, first_offset=i64), max_size=3))),
              preferred_read_replica=draw(i32), records=draw(records))
    if tagged and draw(st.booleans()):
        part.diverging_epoch = PD.EpochEndOffset(epoch=draw(i32), end_offset=draw(i64))
    if tagged and draw(st.booleans()):
        part.current_leader = PD.LeaderIdAndEpoch(leader_id=draw(i32), leader_epoch=draw(i32))
    if tagged and draw(st.booleans()):
        part.__dict__["_unknown_tags"] = {draw(st.integers(3, 200)): draw(st.binary(max_size=5))}
    if tagged and part.aborted_transactions and draw(st.booleans()):
        part.aborted_transactions[0].__dict__["_unknown_tags"] = {0: b"x"}
    return part


@st.composite
def responses(draw, tagged: bool = False):
    topics = [FT(topic=draw(names), topic_id=draw(ids), partitions=draw(st.lists(partitions(tagged), max_size=4)))
              for _ in range(draw(st.integers(0, 3)))]
    resp = FetchResponse(throttle_time_ms=draw(i32), error_code=draw(i16), session_id=draw(i32), responses=topics)
    if tagged and draw(st.booleans()):
        resp.node_endpoints = [FetchResponse.NodeEndpoint(node_id=1, host="h", port=9092, rack=None)]
    return resp


def frame(resp, version) -> bytes:
    """The answer's frame payload as the client receives it (size prefix removed)."""
    return bytes(encode_response(resp, version, 7))[4:]


def general(payload, version):
    return decode_response_lenient(payload, FetchResponse.API_KEY, version)[1]


@settings(max_examples=300, deadline=None)
@given(responses(), st.sampled_from(VERSIONS))
def test_common_answers_read_straight_equal_the_schema(resp, version):
    payload = frame(resp, version)
    fast = FetchResponse.decode_frame(payload, version)
    assert fast is not None                 # the common shape never falls back
    assert fast == general(payload, version)
    for t, ft in zip(general(payload, version).responses, fast.responses):
        for p, fp in zip(t.partitions, ft.partitions):
            assert type(fp.records) is type(p.records)      # views of the frame, as the schema's


@settings(max_examples=300, deadline=None)
@given(responses(tagged=True), st.sampled_from(VERSIONS))
def test_tagged_answers_equal_the_schema(resp, version):
    """Partitions with tagged fields (known or not) are read by the schema's codec of that partition,
    node_endpoints by the schema's codec of the whole answer: the same objects either way."""
    payload = frame(resp, version)
    fast = FetchResponse.decode_frame(payload, version)
    want = general(payload, version)
    if version >= 16 and resp.node_endpoints:
        assert fast is None
    else:
        assert fast == want


@settings(max_examples=300, deadline=None)
@given(responses(tagged=True), st.sampled_from(VERSIONS), st.data())
def test_cut_or_damaged_answers_are_never_misread(resp, version, data):
    """A frame cut short or with a byte changed: the straight line gives the schema's answer or leaves
    it to the schema (None), whose DecodeError then names the problem; never a different answer."""
    payload = bytearray(frame(resp, version))
    if data.draw(st.booleans()):
        payload = payload[:data.draw(st.integers(0, len(payload) - 1))]
    else:
        i = data.draw(st.integers(4, len(payload) - 1))
        payload[i] = data.draw(st.integers(0, 255))
    payload = bytes(payload)
    try:
        want = general(payload, version)
    except DecodeError:
        want = None
    fast = FetchResponse.decode_frame(payload, version)
    if fast is not None:
        assert want is not None and fast == want


def test_versions_outside_the_straight_line_are_left_to_the_schema():
    resp = FetchResponse(responses=[FT(topic="t", partitions=[PD(records=b"abc")])])
    for version in (0, 1, 2, 3):
        assert FetchResponse.decode_frame(frame(resp, version), version) is None


def schema_encode(req, version) -> bytes:
    out = bytearray()
    FetchRequest._codec(version, FetchRequest.is_flexible(version))[1](out, req)
    return bytes(out)


def fast_encode(req, version) -> bytes:
    out = bytearray(b"head")
    req.encode_into(out, version)
    assert out[:4] == b"head"
    return bytes(out[4:])


def constructed(max_wait, min_bytes, max_bytes, isolation, sid, sep, parts, forgotten, topic_ids, rack):
    """The request as the fetcher made it with the schema's constructors."""
    by_topic: dict[str, list] = {}
    for (t, p), (off, cur, last, mb) in parts.items():
        by_topic.setdefault(t, []).append(RP(partition=p, current_leader_epoch=cur, fetch_offset=off,
                                             last_fetched_epoch=last, partition_max_bytes=mb))
    fby: dict[str, list] = {}
    for t, p in forgotten:
        fby.setdefault(t, []).append(p)
    zero = uuid.UUID(int=0)
    return FetchRequest(
        max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation, session_id=sid,
        session_epoch=sep,
        topics=[RT(topic=t, topic_id=topic_ids.get(t) or zero, partitions=ps) for t, ps in by_topic.items()],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, topic_id=topic_ids.get(t) or zero, partitions=ps)
                               for t, ps in fby.items()],
        rack_id=rack)


topic_names = st.sampled_from(["a", "topic-b", "ü" * 70])
request_args = st.tuples(
    i32, i32, i32, st.integers(0, 1), i32, i32,
    st.dictionaries(st.tuples(topic_names, st.integers(0, 200)), st.tuples(i64, i32, i32, i32), max_size=70),
    st.lists(st.tuples(topic_names, i32), max_size=5),
    st.dictionaries(topic_names, st.one_of(st.none(), ids)),
    st.text(max_size=5))


@settings(max_examples=300, deadline=None)
@given(request_args, st.sampled_from(VERSIONS))
def test_requests_equal_the_constructors_and_the_schemas_bytes(args, version):
    req = fetch_request(*args)
    assert req == constructed(*args)
    assert fast_encode(req, version) == schema_encode(req, version)


@settings(max_examples=100, deadline=None)
@given(request_args, st.sampled_from(range(12, 19)), st.sampled_from(["cluster", "state", "hw", "dir", "seen"]))
def test_requests_with_tagged_fields_set_are_the_schemas_bytes(args, version, which):
    req = fetch_request(*args)
    if which == "cluster":
        req.cluster_id = "c"
    elif which == "state":
        req.replica_state = FetchRequest.ReplicaState(replica_id=3, replica_epoch=4)
    elif which == "seen":
        req.__dict__["_tags_seen"] = {0}
    elif req.topics:
        part = req.topics[0].partitions[0]
        if which == "hw":
            part.high_watermark = 42
        else:
            part.replica_directory_id = uuid.UUID(int=5)
    assert fast_encode(req, version) == schema_encode(req, version)
