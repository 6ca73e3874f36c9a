"""Every message round-trips through every version it defines (property tests)."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohort.protocol.messages import REQUESTS, RESPONSES
from tests.helpers.protocol_strategies import message_strategy

CASES = [(cls, v) for reg in (REQUESTS, RESPONSES) for cls in reg.values()
         for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]


@pytest.mark.parametrize("cls,version", CASES, ids=[f"{c.__name__}-v{v}" for c, v in CASES])
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_round_trip(cls, version, data):
    msg = data.draw(message_strategy(cls, version))
    raw = msg.encode(version)
    back = cls.decode(raw, version)
    assert back.encode(version) == raw
    assert back == cls.decode(back.encode(version), version)


def test_registry_covers_the_issue_apis():
    wanted = {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
              28, 29, 30, 31, 32, 33, 36, 37, 42, 44, 47, 60, 68, 69}
    missing = wanted - set(REQUESTS)
    assert not missing, f"no request schema for api keys {sorted(missing)}"
    assert set(REQUESTS) == set(RESPONSES)
