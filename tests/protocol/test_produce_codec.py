"""The straight-line Produce codecs (ProduceRequest.read and encode_into, ProduceResponse.encode_into, read and
decode_frame for v3-v12)
against the schema's codec: equal objects, identical bytes, the same errors, and the fallback for
every shape the straight line leaves to the schema."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from kohort.errors import DecodeError, EncodeError
from kohort.protocol.messages.produce import ProduceRequest, ProduceResponse, produce_request
from kohort.protocol.primitives import Reader

PT = ProduceRequest.TopicProduceData
PD = PT.PartitionProduceData
TR = ProduceResponse.TopicProduceResponse
PR = TR.PartitionProduceResponse
VERSIONS = range(3, 13)


def schema_decode(cls, data, version):
    r = Reader(data)
    obj = cls._codec(version, cls.is_flexible(version))[0](r)
    return obj, r.pos


def schema_encode(obj, version) -> bytes:
    out = bytearray()
    type(obj)._codec(version, type(obj).is_flexible(version))[1](out, obj)
    return bytes(out)


def fast_decode(data, version):
    r = Reader(data)
    return ProduceRequest.read(r, version), r.pos


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
records = st.one_of(st.none(), st.binary(max_size=300))
requests = st.builds(
    lambda tid, acks, timeout, topics: ProduceRequest(
        transactional_id=tid, acks=acks, timeout_ms=timeout,
        topic_data=[PT(name=n, partition_data=[PD(index=i, records=r) for i, r in parts]) for n, parts in topics]),
    st.one_of(st.none(), names), st.sampled_from([-1, 0, 1, 2]), st.integers(-2**31, 2**31 - 1),
    st.lists(st.tuples(names, st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), records), max_size=4)),
             max_size=4))


def _norm(obj):
    """Records come back as memoryviews: compare their bytes."""
    d = obj.to_dict()
    return d


@settings(max_examples=150, deadline=None)
@given(requests, st.sampled_from(VERSIONS))
def test_request_read_equals_the_schema(req, version):
    data = schema_encode(req, version)
    fast, fpos = fast_decode(data, version)
    slow, spos = schema_decode(ProduceRequest, data, version)
    assert fpos == spos == len(data)
    assert _norm(fast) == _norm(slow)
    assert fast.__dict__.keys() == slow.__dict__.keys()
    for ft, stt in zip(fast.topic_data, slow.topic_data):
        assert ft.__dict__.keys() == stt.__dict__.keys()


def test_request_read_takes_the_straight_line(monkeypatch):
    """The common request never reaches the schema's decoder (which would hide a dead fast path)."""
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000,
                         topic_data=[PT(name="t", partition_data=[PD(index=0, records=b"x" * 70)])])
    datas = {v: schema_encode(req, v) for v in VERSIONS}

    def boom(*a, **k):
        raise AssertionError("schema decoder used")
    monkeypatch.setattr(ProduceRequest, "_codecs", {k: (boom, boom) for k in
                                                    [(v, ProduceRequest.is_flexible(v)) for v in VERSIONS]})
    for v, data in datas.items():
        got, pos = fast_decode(data, v)
        assert pos == len(data) and bytes(got.topic_data[0].partition_data[0].records) == b"x" * 70


def test_request_with_tagged_fields_keeps_them():
    """v9+: a tagged field anywhere goes to the schema, which keeps it (unknown tags written back)."""
    req = ProduceRequest(transactional_id="tx", acks=1, timeout_ms=5,
                         topic_data=[PT(name="t", partition_data=[PD(index=3, records=b"abc")])])
    req.topic_data[0].partition_data[0]._unknown_tags = {7: b"\x01\x02"}
    for v in range(9, 13):
        data = schema_encode(req, v)
        fast, _ = fast_decode(data, v)
        assert fast.topic_data[0].partition_data[0]._unknown_tags == {7: b"\x01\x02"}
        assert schema_encode(fast, v) == data


@pytest.mark.parametrize("version", VERSIONS)
def test_request_cut_anywhere_fails_as_the_schema(version):
    req = ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=30000,
                         topic_data=[PT(name="topic", partition_data=[PD(index=0, records=b"r" * 20),
                                                                      PD(index=1, records=None)])])
    data = schema_encode(req, version)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            ProduceRequest.decode(data[:cut], version)
    bad = bytearray(data)
    # an invalid UTF-8 topic name: the schema's DecodeError
    i = bytes(bad).index(b"topic")
    bad[i] = 0xFF
    with pytest.raises(DecodeError):
        ProduceRequest.decode(bytes(bad), version)


results = st.builds(
    lambda code, base, lat, lso, msg: PR(index=0, error_code=code, base_offset=base, log_append_time_ms=lat,
                                         log_start_offset=lso, record_errors=[], error_message=msg),
    st.integers(0, 120), st.integers(-1, 2**63 - 1), st.integers(-1, 2**40), st.integers(-1, 2**40),
    st.one_of(st.none(), st.text(max_size=40)))
responses = st.builds(
    lambda topics, throttle: ProduceResponse(
        responses=[TR(name=n, partition_responses=ps) for n, ps in topics], throttle_time_ms=throttle),
    st.lists(st.tuples(names, st.lists(results, max_size=4)), max_size=4), st.integers(0, 2**31 - 1))


@settings(max_examples=150, deadline=None)
@given(responses, st.sampled_from(VERSIONS))
def test_response_encode_equals_the_schema(resp, version):
    fast = bytearray()
    resp.encode_into(fast, version)
    assert bytes(fast) == schema_encode(resp, version)
    back, _ = schema_decode(ProduceResponse, bytes(fast), version)
    assert schema_encode(back, version) == bytes(fast)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_shapes_left_to_the_schema(version):
    def one(**kw):
        p = PR(index=2, error_code=0, base_offset=7, log_append_time_ms=-1, log_start_offset=0, record_errors=[])
        for k, v in kw.items():
            setattr(p, k, v)
        return ProduceResponse(responses=[TR(name="t", partition_responses=[p])], throttle_time_ms=0)
    cases = [one(record_errors=[PR.BatchIndexAndErrorMessage(batch_index=1, batch_index_error_message="no")]),
             one(current_leader=PR.LeaderIdAndEpoch(leader_id=1, leader_epoch=4))]
    node = ProduceResponse(responses=[], throttle_time_ms=0,
                           node_endpoints=[ProduceResponse.NodeEndpoint(node_id=1, host="h", port=9, rack=None)])
    cases.append(node)
    for resp in cases:
        fast = bytearray()
        resp.encode_into(fast, version)
        assert bytes(fast) == schema_encode(resp, version)


def test_response_encode_errors_stay_the_schemas():
    resp = ProduceResponse(responses=[TR(name=None, partition_responses=[])], throttle_time_ms=0)
    for v in VERSIONS:
        out = bytearray(b"head")
        with pytest.raises(EncodeError):
            resp.encode_into(out, v)


def test_handler_answer_objects_equal_the_schemas():
    """The Produce handler builds its answer field by field; the objects equal the constructors'."""
    from kohort.broker.handlers.produce import _err, _part, _response, _topic
    assert _part(3, 0, 17, -1, 5) == PR(index=3, error_code=0, base_offset=17, log_append_time_ms=-1,
                                         log_start_offset=5, record_errors=[])
    assert _err(1, 87, "bad") == PR(index=1, error_code=87, base_offset=-1, log_append_time_ms=-1,
                                     log_start_offset=-1, record_errors=[], error_message="bad")
    parts = [_part(0, 0, 1, 2, 3)]
    assert _topic("t", parts) == TR(name="t", partition_responses=parts)
    assert _response([_topic("t", parts)]) == ProduceResponse(responses=[TR(name="t", partition_responses=parts)],
                                                              throttle_time_ms=0)


@settings(max_examples=150, deadline=None)
@given(st.integers(-2**15, 2**15 - 1), st.integers(-2**15, 2**15 - 1), st.integers(-2**31, 2**31 - 1),
       st.one_of(st.none(), st.text(max_size=30)), st.sampled_from([0, 1, 2]), st.booleans())
def test_request_header_read_equals_the_schema(key, version, corr, client_id, hv, tagged):
    """RequestHeader.read (every request passes through it) against the schema's decoder: v0-v2,
    with a tagged field (kept by the schema), and every truncation."""
    from kohort.protocol.headers import RequestHeader
    h = RequestHeader(request_api_key=key, request_api_version=version, correlation_id=corr,
                      client_id=client_id)
    if tagged and hv == 2:
        h._unknown_tags = {3: b"\x09"}
    data = schema_encode_header(h, hv) + b"\x01\x02"          # a body follows
    fast, fpos = RequestHeader.read(Reader(data), hv), None
    r = Reader(data)
    slow = RequestHeader._codec(hv, hv >= 2)[0](r)
    r2 = Reader(data)
    RequestHeader.read(r2, hv)
    assert fast == slow and r2.pos == r.pos == len(data) - 2
    for cut in range(len(data) - 2):
        with pytest.raises(DecodeError):
            RequestHeader.read(Reader(data[:cut]), hv)


def schema_encode_header(h, hv) -> bytes:
    out = bytearray()
    type(h)._codec(hv, hv >= 2)[1](out, h)
    return bytes(out)


def _joined(out) -> bytes:
    return b"".join(bytes(b) for b in out.buffers())


@settings(max_examples=150, deadline=None)
@given(requests, st.sampled_from(VERSIONS))
def test_request_encode_equals_the_schema(req, version):
    """The producer's straight-line encoder writes the schema's bytes, into a bytearray and into a
    GatherBuffer (large records as pieces, the frame the same)."""
    from kohort.protocol.records import GatherBuffer
    want = schema_encode(req, version)
    assert req.encode(version) == want
    out = GatherBuffer(b"\0\0")
    req.encode_into(out, version)
    assert _joined(out) == b"\0\0" + want


@pytest.mark.parametrize("version", VERSIONS)
def test_request_encode_takes_the_straight_line_and_gathers_large_records(version, monkeypatch):
    from kohort.protocol.framing import encode_request, encode_request_buffers
    from kohort.protocol.records import GATHER_MIN
    big = bytearray(b"b" * GATHER_MIN)
    req = ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=30000,
                         topic_data=[PT(name="t", partition_data=[PD(index=0, records=big),
                                                                  PD(index=1, records=memoryview(b"small")),
                                                                  PD(index=2, records=None)])])
    want = encode_request(req, version, 77, "client-é")       # the schema's header and body
    codecs = dict(ProduceRequest._codecs)

    def boom(*a, **k):
        raise AssertionError("schema encoder used")
    monkeypatch.setattr(ProduceRequest, "_codecs", {**codecs, (version, ProduceRequest.is_flexible(version)):
                                                    (boom, boom)})
    bufs = encode_request_buffers(req, version, 77, "client-é")
    assert any(b is big for b in bufs)                         # referred to, not copied
    assert b"".join(bytes(b) for b in bufs) == want
    assert b"".join(bytes(b) for b in encode_request_buffers(req, version, 77, None)) == \
        encode_request(req, version, 77, None)


def test_request_encode_leaves_odd_shapes_to_the_schema():
    """Tagged fields, a value out of range: the schema's codec writes or refuses it, as before."""
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5,
                         topic_data=[PT(name="t", partition_data=[PD(index=3, records=b"abc")])])
    req.topic_data[0].partition_data[0]._unknown_tags = {7: b"\x01\x02"}
    for v in range(9, 13):
        assert req.encode(v) == schema_encode(req, v)
    bad = ProduceRequest(transactional_id=None, acks=1 << 20, timeout_ms=5, topic_data=[])
    with pytest.raises(Exception) as fast:
        bad.encode(11)
    with pytest.raises(Exception) as slow:
        schema_encode(bad, 11)
    assert (type(fast.value), str(fast.value)) == (type(slow.value), str(slow.value))


def _deep_keys(obj):
    """Every object's field names, nested (equal objects with different fields would hide a gap)."""
    from kohort.protocol.schema import Struct  # noqa: F401 - the nested classes are Messages/Structs
    out = [tuple(sorted(obj.__dict__))]
    for v in obj.__dict__.values():
        for item in v if isinstance(v, list) else [v]:
            if hasattr(item, "__dict__") and hasattr(type(item), "SCHEMA"):
                out += _deep_keys(item)
    return out


@settings(max_examples=150, deadline=None)
@given(responses, st.sampled_from(VERSIONS))
def test_response_read_equals_the_schema(resp, version):
    """The producer's straight-line reader gives the schema's objects (or leaves them to it: error
    messages), and stops where the schema does."""
    data = schema_encode(resp, version) + b"trail"
    r = Reader(data)
    fast = ProduceResponse.read(r, version)
    slow, spos = schema_decode(ProduceResponse, data, version)
    assert r.pos == spos == len(data) - 5
    assert fast == slow and _deep_keys(fast) == _deep_keys(slow)
    # the client's one-call reader of a whole frame (correlation id, header tags) gives the same or None
    framed = ProduceResponse.decode_frame(_frame(data, version), version)
    assert framed is None or (framed == slow and _deep_keys(framed) == _deep_keys(slow))


def _frame(body: bytes, version: int) -> bytes:
    """A response frame's payload: correlation id 7, the empty tagged fields of header v1 when flexible."""
    return b"\0\0\0\x07" + (b"\0" if version >= 9 else b"") + body


@pytest.mark.parametrize("version", VERSIONS)
def test_response_read_takes_the_straight_line(version, monkeypatch):
    resp = ProduceResponse(responses=[TR(name="t", partition_responses=[
        PR(index=0, error_code=0, base_offset=41, log_append_time_ms=-1, log_start_offset=3, record_errors=[])])],
        throttle_time_ms=0)
    data = schema_encode(resp, version)
    want, _ = schema_decode(ProduceResponse, data, version)

    def boom(*a, **k):
        raise AssertionError("schema decoder used")
    monkeypatch.setattr(ProduceResponse, "_codecs", {(version, ProduceResponse.is_flexible(version)): (boom, boom)})
    assert ProduceResponse.decode(data, version) == want
    assert ProduceResponse.decode_frame(_frame(data, version), version) == want
    for cut in range(len(data)):                  # cut short: left to the schema (here: boom)
        with pytest.raises(AssertionError):
            ProduceResponse.decode(data[:cut], version)
        assert ProduceResponse.decode_frame(_frame(data[:cut], version), version) is None
    if version >= 9:                              # header tagged fields: left to the general decoder
        assert ProduceResponse.decode_frame(b"\0\0\0\x07\x01\x00\x00" + data, version) is None


# -- one partition from and to whole frames (the broker's produce_one path) --------------------------
def _frame_payload(req, version, corr=5, client_id="c"):
    from kohort.protocol.framing import encode_request
    return bytearray(encode_request(req, version, corr, client_id=client_id)[4:])


one_partition = st.builds(
    lambda acks, timeout, name, index, recs: ProduceRequest(
        transactional_id=None, acks=acks, timeout_ms=timeout,
        topic_data=[PT(name=name, partition_data=[PD(index=index, records=recs)])]),
    st.sampled_from([-1, 1]), st.integers(-2**31, 2**31 - 1), st.one_of(names, st.text(min_size=120, max_size=130)),
    st.integers(-2**31, 2**31 - 1), st.binary(min_size=1, max_size=300))


@settings(max_examples=300, deadline=None)
@given(st.one_of(requests, one_partition), st.sampled_from(VERSIONS), st.one_of(st.none(), st.text(max_size=10)))
def test_read_one_partition_equals_the_general_decoder(req, version, client_id):
    """Every request: the one-partition reader gives the general decoder's fields, or None for a
    shape it leaves to it (a transactional id, acks other than -1/1, not one topic with one
    partition carrying records, from v9 a topic name of 127 bytes or more)."""
    from kohort.broker.connection import decode_request
    from kohort.protocol.messages.produce import read_one_partition
    payload = _frame_payload(req, version, 77, client_id)
    header, slow = decode_request(payload)
    got = read_one_partition(payload)
    topics = slow.topic_data
    common = (slow.transactional_id is None and slow.acks in (-1, 1) and len(topics) == 1
              and len(topics[0].partition_data) == 1 and topics[0].partition_data[0].records
              and (version < 9 or len(topics[0].name.encode()) < 127))
    if not common:
        assert got is None
        return
    v, corr, cid, acks, timeout, topic, index, start, stop = got
    pd = topics[0].partition_data[0]
    assert (v, corr, cid, acks, timeout, topic, index) == (
        version, 77, header.client_id, slow.acks, slow.timeout_ms, topics[0].name, pd.index)
    assert bytes(payload[start:stop]) == bytes(pd.records)
    # a trailing byte (which the general decoder ignores) or any cut: left to the general decoder
    assert read_one_partition(payload + b"\0") is None
    for cut in range(len(payload)):
        assert read_one_partition(payload[:cut]) is None


@settings(max_examples=200, deadline=None)
@given(names, st.integers(-2**31, 2**31 - 1), results, st.sampled_from(VERSIONS), st.integers(0, 2**31 - 1))
def test_encode_one_partition_equals_the_general_encoder(name, index, part, version, corr):
    from kohort.broker.handlers.produce import _part, _response, _topic
    from kohort.protocol.framing import encode_response_buffer
    from kohort.protocol.messages.produce import encode_one_partition
    p = part.__dict__
    args = (index, p["error_code"], p["base_offset"], p["log_append_time_ms"], p["log_start_offset"],
            p["error_message"])
    general = encode_response_buffer(_response([_topic(name, [_part(*args)])]), version, corr)
    assert encode_one_partition(version, corr, name, *args) == general


@settings(max_examples=150, deadline=None)
@given(requests, st.sampled_from(range(3, 14)))
def test_produce_request_equals_the_constructors(req, version):
    """produce_request (the producers' send path) makes the request the schema's constructors make:
    equal objects, the same bytes in every version (v13 too, whose topics go by topic_id)."""
    made = produce_request(req.transactional_id, req.acks, req.timeout_ms,
                           [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in req.topic_data])
    assert made == req
    assert made.encode(version) == req.encode(version)


# -- one partition's answer (the producer's answer path) ----------------------------------------------
one_answer = st.builds(
    lambda name, index, part, throttle: ProduceResponse(
        responses=[TR(name=name, partition_responses=[_indexed(part, index)])], throttle_time_ms=throttle),
    st.one_of(names, st.text(min_size=120, max_size=130)), st.integers(-2**31, 2**31 - 1), results,
    st.integers(0, 2**31 - 1))


def _indexed(part, index):
    part.index = index
    return part


@settings(max_examples=300, deadline=None)
@given(st.one_of(responses, one_answer), st.sampled_from(VERSIONS))
def test_read_one_partition_answer_equals_the_schema(resp, version):
    """Every answer: the one-partition reader gives the schema's fields, or None for a shape it leaves
    to ProduceResponse (not one topic with one partition, an error message, from v9 a topic name of
    127 bytes or more); OnePartitionProduceResponse.decode_frame gives that tuple or the object
    ProduceResponse reads."""
    from kohort.protocol.messages.produce import OnePartitionProduceResponse, read_one_partition_answer
    data = schema_encode(resp, version)
    slow, _ = schema_decode(ProduceResponse, data, version)
    frame = _frame(data, version)
    got = read_one_partition_answer(frame, version)
    topics = slow.responses
    common = (len(topics) == 1 and len(topics[0].partition_responses) == 1
              and (version < 8 or topics[0].partition_responses[0].error_message is None)
              and (version < 9 or len(topics[0].name.encode()) < 127))
    if not common:
        assert got is None
        decoded = OnePartitionProduceResponse.decode_frame(frame, version)
        assert decoded is None or decoded == slow
        return
    pr = topics[0].partition_responses[0]
    assert got == (topics[0].name, pr.index, pr.error_code, pr.base_offset,
                   pr.log_append_time_ms if version >= 2 else -1)
    assert OnePartitionProduceResponse.decode_frame(frame, version) == got
    assert read_one_partition_answer(frame + b"trail", version) == got      # trailing bytes ignored
    for cut in range(len(frame)):
        assert read_one_partition_answer(frame[:cut], version) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_one_partition_answer_shapes_left_to_produce_response(version):
    """Record errors, current_leader (v10+), node endpoints (v10+), header tags: no tuple, and the
    answer is read as ProduceResponse reads it (by the schema where its straight line stops)."""
    from kohort.protocol.framing import decode_response_lenient
    from kohort.protocol.messages.produce import OnePartitionProduceResponse, read_one_partition_answer

    def one(**kw):
        p = PR(index=2, error_code=0, base_offset=7, log_append_time_ms=-1, log_start_offset=0, record_errors=[])
        for k, v in kw.items():
            setattr(p, k, v)
        return ProduceResponse(responses=[TR(name="t", partition_responses=[p])], throttle_time_ms=0)
    cases = []
    if version >= 8:
        cases.append(one(record_errors=[PR.BatchIndexAndErrorMessage(batch_index=1, batch_index_error_message="no")]))
        cases.append(one(error_message="why"))
    if version >= 10:
        cases.append(one(current_leader=PR.LeaderIdAndEpoch(leader_id=1, leader_epoch=4)))
        node = one()
        node.node_endpoints = [ProduceResponse.NodeEndpoint(node_id=1, host="h", port=9, rack=None)]
        cases.append(node)
    for resp in cases:
        frame = _frame(schema_encode(resp, version), version)
        assert read_one_partition_answer(frame, version) is None
        want = decode_response_lenient(frame, 0, version)[1]
        got = OnePartitionProduceResponse.decode_frame(frame, version)
        if got is None:                           # ClientProtocol's general decoder, with the class
            got = decode_response_lenient(frame, 0, version, OnePartitionProduceResponse)[1]
            assert isinstance(got, ProduceResponse) and got.to_dict() == want.to_dict()
        else:
            assert got == want
    plain = _frame(schema_encode(one(), version), version)
    assert read_one_partition_answer(plain, version) == ("t", 2, 0, 7, -1)
    if version >= 9:                              # header tagged fields
        assert read_one_partition_answer(b"\0\0\0\x07\x01\x00\x00" + plain[5:], version) is None
