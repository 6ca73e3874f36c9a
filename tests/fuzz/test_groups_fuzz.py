"""Schema-valid but arbitrary group requests (every field random, every served version) against a
running `kohort broker`: each is answered with a decodable response of its version -- or, for a
JoinGroup/SyncGroup the coordinator legitimately parks, not yet -- and the connection is never
closed (a handler or coordinator exception closes it). The broker stays up throughout."""
from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kohort.broker.handlers import HANDLERS, load_all
from kohort.protocol.framing import decode_response, encode_request
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from tests.helpers.brokers import KohortBroker
from tests.helpers.protocol_strategies import message_strategy

GROUP_APIS = (8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47)
PARKABLE = (11, 14)           # JoinGroup / SyncGroup may wait for the rest of the group

load_all()
CASES = [(HANDLERS[k].request_cls, v) for k in GROUP_APIS
         for v in range(HANDLERS[k].min_version, HANDLERS[k].max_version + 1)]


@pytest.fixture(scope="module")
def broker():
    with KohortBroker(config={"group.initial.rebalance.quiet.ms": 10,
                              "group.min.session.timeout.ms": 1}) as b:
        yield b


def _recv_exact(sock, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf


def _call(addr, req, version: int, timeout: float):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.settimeout(timeout)
        sock.sendall(encode_request(req, version, 7))
        try:
            size = struct.unpack(">i", _recv_exact(sock, 4))[0]
        except socket.timeout:
            return None
        corr, resp = decode_response(_recv_exact(sock, size), type(req).API_KEY, version)
        assert corr == 7
        return resp


@st.composite
def group_requests(draw):
    cls, version = draw(st.sampled_from(CASES))
    return cls, version, draw(message_strategy(cls, version))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(case=group_requests())
def test_any_group_request_is_answered(broker, case):
    cls, version, req = case
    parkable = cls.API_KEY in PARKABLE
    resp = _call(broker.bootstrap, req, version, 0.3 if parkable else 10)
    if resp is None:
        assert parkable, f"{cls.__name__} v{version} got no answer"
    assert broker.proc.poll() is None
    if cls.API_KEY == 10 and resp is not None and version >= 4:
        assert [c.key for c in resp.coordinators] == list(req.coordinator_keys)


def test_broker_still_serves_after_fuzz(broker):
    resp = _call(broker.bootstrap, ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                 3, 5)
    assert resp.error_code == 0
    assert not [line for line in broker.log_lines if "Traceback" in line or "failed" in line], broker.log_lines
