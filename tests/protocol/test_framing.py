"""Framing, headers and the sans-I/O client connection."""
import pytest

from kohort.errors import DecodeError
from kohort.protocol.framing import (
    ClientProtocol, FrameReader, FrameTooLargeError, ProtocolViolation, TooManyInFlightError, UnsupportedRequestError,
    UnsupportedVersionError,
    decode_request, encode_request, encode_response, frame, pick_version,
)
from kohort.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse


def join_req():
    return JoinGroupRequest(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=30000,
                            member_id="", protocol_type="consumer",
                            protocols=[JoinGroupRequest.Protocol(name="range", metadata=b"\x00\x01")])


@pytest.mark.parametrize("version", range(10))
def test_request_frame_round_trip(version):
    data = encode_request(join_req(), version, 7, "cid")
    fr = FrameReader()
    (payload,) = fr.feed(data)
    header, body = decode_request(payload)
    assert header.correlation_id == 7 and header.client_id == "cid"
    assert header.request_api_version == version
    assert body == JoinGroupRequest.decode(join_req().encode(version), version)


def test_flexible_request_uses_header_v2_with_legacy_client_id():
    data = encode_request(join_req(), 6, 1, "ab")
    # size(4) key(2) ver(2) corr(4) client_id int16 len + "ab" then empty tag section (0)
    assert data[4:18] == bytes.fromhex("000b000600000001") + b"\x00\x02ab" + b"\x00" + data[17:18]
    assert data[16] == 0


def test_frame_reader_splits_and_refuses_oversize_from_prefix():
    fr = FrameReader(max_frame=10)
    assert fr.feed(frame(b"abc")[:2]) == []
    assert fr.feed(frame(b"abc")[2:] + frame(b"")) == [b"abc", b""]
    with pytest.raises(FrameTooLargeError):
        fr.feed(b"\x00\x00\x00\x0b")   # 11 > 10, refused with no body present
    with pytest.raises(DecodeError):
        FrameReader().feed(b"\xff\xff\xff\xff")


def test_client_protocol_in_order_and_unexpected_correlation():
    cp = ClientProtocol("c")
    c0, _ = cp.send_request(join_req(), 5, handle="first")
    c1, _ = cp.send_request(join_req(), 5, handle="second")
    resp = JoinGroupResponse(error_code=0, generation_id=1, protocol_name="range", leader="m", member_id="m")
    got = cp.receive_data(encode_response(resp, 5, c0) + encode_response(resp, 5, c1)[:5])
    assert [(r.correlation_id, r.handle) for r in got] == [(c0, "first")] and got[0].response.leader == "m"
    assert got[0].size == len(encode_response(resp, 5, c0))
    assert cp.receive_data(encode_response(resp, 5, c1)[5:])[0].correlation_id == c1
    assert cp.in_flight == 0
    with pytest.raises(DecodeError):
        cp.receive_data(encode_response(resp, 5, 99))


def _join_answer(corr):
    resp = JoinGroupResponse(error_code=0, generation_id=1, protocol_name="range", leader="m", member_id="m")
    return encode_response(resp, 5, corr)


def test_client_protocol_violation_keeps_the_responses_before_it_and_closes():
    cp = ClientProtocol("c")
    c0, _ = cp.send_request(join_req(), 5, handle="a")
    c1, _ = cp.send_request(join_req(), 5, handle="b")
    cp.send_request(join_req(), 5, handle="c")
    with pytest.raises(ProtocolViolation) as e:
        cp.receive_data(_join_answer(c0) + _join_answer(c1) + _join_answer(77))
    assert [r.handle for r in e.value.completed] == ["a", "b"]
    assert "does not match the oldest request" in str(e.value)
    assert cp.connection_lost() == ["c"] and cp.in_flight == 0 and cp.state == "CLOSED"
    # a response with nothing in flight, and a frame too short for its correlation id
    cp = ClientProtocol("c")
    with pytest.raises(ProtocolViolation, match="nothing in flight"):
        cp.receive_data(_join_answer(0))
    cp = ClientProtocol("c")
    cp.send_request(join_req(), 5)
    with pytest.raises(ProtocolViolation, match="no correlation id"):
        cp.receive_data(frame(b"\x00\x01"))


def test_client_protocol_receives_large_frames_in_place():
    """A frame larger than what has arrived gets its own bytearray and get_buffer() hands out its
    rest, so the bytes read after the first chunk land where the decoder reads them."""
    recv = bytearray(64)
    cp = ClientProtocol("c", recv_buffer=recv)
    c0, _ = cp.send_request(join_req(), 5)
    c1, _ = cp.send_request(join_req(), 5)
    big = JoinGroupResponse(error_code=0, generation_id=1, protocol_name="range", leader="m" * 500, member_id="m")
    first = encode_response(big, 5, c0)
    stream = first + _join_answer(c1)
    got, pos, own = [], 0, []
    while pos < len(stream):
        buf = cp.get_buffer()
        if buf.obj is not recv:
            own.append((len(buf.obj), len(buf)))
        k = min(len(buf), 7, len(stream) - pos)
        buf[:k] = stream[pos:pos + k]
        pos += k
        got += cp.buffer_updated(k)
    assert [r.correlation_id for r in got] == [c0, c1]
    assert got[0].response.leader == "m" * 500
    # after the first 7 bytes, the rest of the big frame went straight into one bytearray of its size
    big_chunks = [rest for size, rest in own if size == len(first) - 4]
    assert big_chunks[0] == len(first) - 7 and sum(min(7, r) for r in big_chunks) == len(first) - 7
    with pytest.raises(ProtocolViolation, match="exceeds the limit"):
        ClientProtocol("c", max_frame=10).receive_data(b"\x00\x00\x00\x0b")


def test_client_protocol_max_in_flight():
    cp = ClientProtocol("c", max_in_flight=2)
    c0, _ = cp.send_request(join_req(), 5)
    cp.send_request(join_req(), 5)
    assert not cp.can_send
    with pytest.raises(TooManyInFlightError):
        cp.send_request(join_req(), 5)
    cp.send_request(join_req(), 5, expect_response=False)     # nothing awaited: not counted
    cp.receive_data(_join_answer(c0))
    assert cp.can_send and cp.in_flight == 1


def test_unsupported_request_reports_header():
    data = encode_request(join_req(), 5, 3, "x")
    payload = bytearray(data[4:])
    payload[2:4] = (77).to_bytes(2, "big")   # version 77
    with pytest.raises(UnsupportedRequestError) as e:
        decode_request(bytes(payload))
    assert (e.value.api_key, e.value.api_version, e.value.correlation_id, e.value.client_id) == (11, 77, 3, "x")


def test_pick_version():
    assert pick_version(11, {11: (0, 5)}) == 5
    assert pick_version(11, {11: (2, 20)}) == 9
    assert pick_version(11, {11: (0, 20)}, cap=7) == 7
    with pytest.raises(UnsupportedVersionError):
        pick_version(11, {})
    with pytest.raises(UnsupportedVersionError):
        pick_version(11, {11: (10, 12)})


# -- the ApiVersions handshake, sans I/O (issue 12) --------------------------------------------------
def _api_versions_answer(version, corr, error_code=0, keys=((18, 0, 4), (3, 0, 12), (14, 0, 5)), trailing=b""):
    from kohort.protocol.messages.api_versions import ApiVersionsResponse
    resp = ApiVersionsResponse(error_code=error_code, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in keys])
    data = encode_response(resp, version, corr)
    return frame(data[4:] + trailing)


def _sent_api_versions(cp):
    (payload,) = FrameReader().feed(cp.data_to_send())
    header, body = decode_request(payload)
    assert header.request_api_key == 18
    return header.request_api_version, header.correlation_id


def test_handshake_tolerates_trailing_bytes_after_api_versions_v3():
    # librdkafka's mock cluster appends 5 bytes to its ApiVersionsResponse v3; every stack of the
    # client used to fail on that except NetworkClient ("ApiVersionsResponse v3: 5 trailing bytes")
    cp = ClientProtocol("c")
    cp.initiate()
    v, corr = _sent_api_versions(cp)
    assert v == 3
    assert cp.receive_data(_api_versions_answer(3, corr, trailing=b"\x00" * 5)) == []
    assert cp.ready and cp.versions[3] == (0, 12) and cp.pick(3) == 12


def test_handshake_steps_down_on_unsupported_version_and_caps_flexible_versions():
    cp = ClientProtocol("c")
    cp.initiate()
    _, corr = _sent_api_versions(cp)
    # KIP-511: an old broker answers UNSUPPORTED_VERSION in v0 with its own ranges (ApiVersions 0-2)
    cp.receive_data(_api_versions_answer(0, corr, error_code=35, keys=((18, 0, 2), (3, 0, 12))))
    assert not cp.ready
    v, corr = _sent_api_versions(cp)
    assert v == 2
    cp.receive_data(_api_versions_answer(2, corr, keys=((18, 0, 2), (3, 0, 12), (14, 0, 5))))
    assert cp.ready
    # ApiVersions < v3 means no flexible versions (KIP-482): Metadata stops at v8, SyncGroup at v3
    assert cp.pick(3) == 8 and cp.pick(14) == 3 and cp.pick(3, cap=5) == 5
    with pytest.raises(UnsupportedVersionError):
        cp.pick(3, floor=9)
    with pytest.raises(UnsupportedVersionError):
        cp.check(3, 13)


def test_handshake_errors_are_clear():
    from kohort.protocol.framing import HandshakeError
    cp = ClientProtocol("c")
    cp.initiate()
    _, corr = _sent_api_versions(cp)
    with pytest.raises(HandshakeError, match="error code 31"):
        cp.receive_data(_api_versions_answer(3, corr, error_code=31))
    cp = ClientProtocol("c")
    cp.initiate()
    with pytest.raises(HandshakeError, match="not an ApiVersions response"):
        cp.receive_data(frame(b"\x00\x00\x00\x00\xff"))


# -- gathering writes: a Produce request's record batches by reference --------------------------------
def produce_req(sizes, records_type=bytes):
    from kohort.protocol.messages.produce import ProduceRequest
    PD = ProduceRequest.TopicProduceData
    PPD = PD.PartitionProduceData
    parts = [PPD(index=i, records=None if n is None else records_type(bytes([i % 251]) * n))
             for i, n in enumerate(sizes)]
    return ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=30000,
                          topic_data=[PD(name="a", partition_data=parts[:2]), PD(name="b", partition_data=parts[2:])])


@pytest.mark.parametrize("version", [3, 8, 9, 12])
@pytest.mark.parametrize("records_type", [bytes, bytearray])
def test_request_buffers_are_the_same_frame_with_large_batches_by_reference(version, records_type):
    from kohort.protocol.framing import encode_request_buffers
    from kohort.protocol.records import GATHER_MIN
    sizes = [GATHER_MIN, None, 100, GATHER_MIN - 1, 0, 300_000, GATHER_MIN + 1]
    req = produce_req(sizes, records_type)
    bufs = encode_request_buffers(req, version, 42, "cid")
    assert b"".join(bufs) == encode_request(req, version, 42, "cid")
    records = [p.records for t in req.topic_data for p in t.partition_data]
    by_ref = [r for r in records if r is not None and any(b is r for b in bufs)]
    assert by_ref == [r for r in records if r is not None and len(r) >= GATHER_MIN]
    # the rest is one small buffer, sliced around each batch (nothing after the last in v3-v8)
    assert len(bufs) == 2 * len(by_ref) + (version >= 9)
    rest = [b for b in bufs if not any(b is r for r in by_ref)]
    assert all(isinstance(b, memoryview) for b in rest) and len({id(b.obj) for b in rest}) == 1
    header, body = decode_request(b"".join(bufs)[4:])
    assert header.correlation_id == 42 and header.request_api_version == version
    assert [None if p.records is None else bytes(p.records) for t in body.topic_data for p in t.partition_data] \
        == [None if r is None else bytes(r) for r in records]


def test_request_buffers_of_a_request_without_large_records_are_one_buffer():
    from kohort.protocol.framing import encode_request_buffers
    bufs = encode_request_buffers(join_req(), 5, 3, "cid")
    assert len(bufs) == 1 and bytes(bufs[0]) == encode_request(join_req(), 5, 3, "cid")
    bufs = encode_request_buffers(produce_req([10, None, 2000]), 9, 3, "cid")
    assert len(bufs) == 1 and bytes(bufs[0]) == encode_request(produce_req([10, None, 2000]), 9, 3, "cid")


def test_external_records_in_a_request_are_read_into_its_buffers():
    from kohort.protocol.framing import encode_request_buffers
    from kohort.protocol.records import ExternalRecords

    class Held(ExternalRecords):
        def __init__(self, data):
            super().__init__(len(data))
            self.data = data

        def read(self):
            return self.data

    plain = produce_req([40_000, 10])
    held = produce_req([40_000, 10])
    for t in held.topic_data:
        for p in t.partition_data:
            p.records = Held(p.records)
    assert b"".join(encode_request_buffers(held, 9, 1)) == encode_request(plain, 9, 1)


def test_send_request_buffers_puts_the_request_in_flight_like_send_request():
    cp = ClientProtocol("c", max_in_flight=2)
    c0, bufs = cp.send_request_buffers(produce_req([100_000]), 9, handle="p")
    c1, data = cp.send_request(join_req(), 5, handle="j")
    assert (c0, c1) == (0, 1) and cp.in_flight_handles() == ["p", "j"]
    assert b"".join(bufs) == encode_request(produce_req([100_000]), 9, 0, "c")
    with pytest.raises(TooManyInFlightError):
        cp.send_request_buffers(produce_req([100_000]), 9)
    cp.send_request_buffers(produce_req([100_000]), 9, expect_response=False)
    assert cp.in_flight == 2


def test_client_protocol_reuses_a_large_frame_buffer_only_once_nothing_refers_to_it():
    """Frames from 256 KiB (Fetch answers) are received into pooled buffers: one whose records are
    still referenced is never written again, one no longer referenced is reused."""
    from kohort.protocol.messages.fetch import FetchRequest, FetchResponse as R

    def answer(fill: bytes):
        part = R.FetchableTopicResponse.PartitionData(partition_index=0, records=fill * 1_200_000)
        return R(responses=[R.FetchableTopicResponse(topic="t", partitions=[part])])

    def records(got):
        return got[0].response.responses[0].partitions[0].records

    cp = ClientProtocol("c", recv_buffer=bytearray(65536))
    req = FetchRequest(max_wait_ms=1, min_bytes=1, max_bytes=1 << 21, topics=[])
    corr = [cp.send_request(req, 12)[0] for _ in range(4)]
    held = records(cp.receive_data(encode_response(answer(b"a"), 12, corr[0])))
    second = records(cp.receive_data(encode_response(answer(b"b"), 12, corr[1])))
    assert held.obj is not second.obj
    assert bytes(held) == b"a" * 1_200_000 and bytes(second) == b"b" * 1_200_000
    free = id(second.obj)       # the pool keeps it alive, so the id stays its own
    del second
    third = records(cp.receive_data(encode_response(answer(b"c"), 12, corr[2])))
    assert id(third.obj) == free and bytes(third) == b"c" * 1_200_000
    assert bytes(held) == b"a" * 1_200_000
    fourth = records(cp.receive_data(encode_response(answer(b"d"), 12, corr[3])))
    assert fourth.obj is not held.obj and fourth.obj is not third.obj
    assert bytes(held) == b"a" * 1_200_000 and bytes(third) == b"c" * 1_200_000
