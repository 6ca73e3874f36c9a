"""Decoder fuzzing: random and mutated frames raise only DecodeError, never hang or over-allocate."""
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohort.errors import DecodeError
from kohort.protocol.framing import UnsupportedRequestError, decode_request, encode_request
from kohort.protocol.messages import REQUESTS, RESPONSES
from tests.helpers.protocol_strategies import message_strategy

ALL = [(cls, v) for reg in (REQUESTS, RESPONSES) for cls in reg.values()
       for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]


@pytest.mark.parametrize("cls,version", ALL, ids=[f"{c.__name__}-v{v}" for c, v in ALL])
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(garbage=st.binary(max_size=64))
def test_random_bytes_raise_only_decode_error(cls, version, garbage):
    try:
        cls.decode(garbage, version)
    except DecodeError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_valid_frames(data):
    cls, version = data.draw(st.sampled_from(ALL))
    msg = data.draw(message_strategy(cls, version))
    raw = bytearray(msg.encode(version))
    rnd = random.Random(data.draw(st.integers(0, 2**32)))
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(3)
        if op == 0 and raw:
            raw[rnd.randrange(len(raw))] = rnd.randrange(256)
        elif op == 1 and raw:
            del raw[rnd.randrange(len(raw)):]
        else:
            raw[rnd.randrange(len(raw) + 1):0] = bytes([0xFF, 0xFF, 0xFF, 0x7F][: rnd.randint(1, 4)])
    try:
        cls.decode(bytes(raw), version)
    except DecodeError:
        pass


def test_huge_declared_lengths_do_not_allocate():
    # an array claiming 2**31-1 elements in 8 bytes must fail fast on the length check
    from kohort.protocol.primitives import Reader
    r = Reader(b"\x7f\xff\xff\xff" + b"\x00" * 4)
    with pytest.raises(DecodeError):
        r.array_len()
    r = Reader(b"\xff\xff\xff\xff\x07")
    with pytest.raises(DecodeError):
        r.compact_bytes()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=st.binary(max_size=80))
def test_request_decoder_on_garbage(payload):
    try:
        decode_request(payload)
    except (DecodeError, UnsupportedRequestError):
        pass
