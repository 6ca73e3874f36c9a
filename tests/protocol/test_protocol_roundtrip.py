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


def test_encoded_once_array_writes_the_same_bytes_in_every_version():
    import uuid

    from kohort.protocol.messages.metadata import MetadataResponse
    from kohort.protocol.schema import EncodedOnce
    Topic = MetadataResponse.MetadataResponseTopic
    items = [Topic.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=1, leader_epoch=2,
                                             replica_nodes=[1], isr_nodes=[1], offline_replicas=[])
             for p in range(5)]
    shared = EncodedOnce(items)

    def answer(parts):
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1, error_code=0,
                                topics=[Topic(error_code=0, name="t", topic_id=uuid.UUID(int=3), partitions=parts)])
    for v in range(MetadataResponse.MIN_VERSION, MetadataResponse.MAX_VERSION + 1):
        plain = answer(list(items)).encode(v)
        assert answer(shared).encode(v) == plain
        assert answer(shared).encode(v) == plain          # the second time from the kept bytes
        assert [p.partition_index for t in MetadataResponse.decode(plain, v).topics
                for p in t.partitions] == list(range(5))
    assert {k for k, _ in shared.wire} == set(range(MetadataResponse.MIN_VERSION, MetadataResponse.MAX_VERSION + 1))
