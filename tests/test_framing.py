"""Framing, headers and the sans-I/O client connection."""
import pytest

from kohort.errors import DecodeError
from kohort.protocol.framing import (
    ClientProtocol, FrameReader, FrameTooLargeError, UnsupportedRequestError, UnsupportedVersionError,
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
    c0, _ = cp.send(join_req(), 5)
    c1, _ = cp.send(join_req(), 5)
    resp = JoinGroupResponse(error_code=0, generation_id=1, protocol_name="range", leader="m", member_id="m")
    got = cp.receive_data(encode_response(resp, 5, c0) + encode_response(resp, 5, c1)[:5])
    assert [c for c, _ in got] == [c0] and got[0][1].leader == "m"
    assert cp.receive_data(encode_response(resp, 5, c1)[5:])[0][0] == c1
    assert cp.in_flight == 0
    with pytest.raises(DecodeError):
        cp.receive_data(encode_response(resp, 5, 99))


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
