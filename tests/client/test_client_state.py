"""Pure client pieces: subscription state (positions, resets, lag), version capping for pre-KIP-482
brokers, the lenient SyncGroup response, ConsumerRecord."""
import pickle

import pytest

from kohort.protocol.messages.sync_group import LenientSyncGroupResponse
from kohort.client.consumer.offsets import READ_COMMITTED, NotAssignedError, SubscriptionState
from kohort.protocol.framing import last_rigid_version as _last_rigid_version
from kohort.protocol.messages.sync_group import SyncGroupResponse
from kohort.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition


def test_subscription_state_positions_resets_and_lag():
    s = SubscriptionState("earliest")
    tp = TopicPartition("t", 0)
    s.assign([("t", 0), ("t", 1)])
    assert s.missing_position() == [tp, ("t", 1)]
    s.seek(tp, 5, 2)
    st = s.state(tp)
    assert (st.position, st.position_epoch, st.fetch_offset, st.seek_epoch) == (5, 2, 5, 1)
    assert s.fetchable() == [tp]
    s.request_reset([("t", 1)])
    assert s.needs_reset() == {("t", 1): "earliest"}
    st.high_watermark = 12
    assert s.lag(tp) == 7
    assert s.positions() == {tp: OffsetAndMetadata(5, "", 2)}
    s.assign([tp])            # state of kept partitions survives a reassignment
    assert s.state(tp).position == 5
    with pytest.raises(NotAssignedError, match="t-1 is not assigned"):
        s.state(TopicPartition("t", 1))
    rc = SubscriptionState("latest", READ_COMMITTED)
    rc.assign([tp])
    rc.seek(tp, 3)
    rc.state(tp).high_watermark, rc.state(tp).last_stable_offset = 10, 6
    assert rc.lag(tp) == 3


def test_no_flexible_versions_for_pre_kip482_brokers():
    assert _last_rigid_version(14, None) == 3    # SyncGroup flexible from v4
    assert _last_rigid_version(3, None) == 8     # Metadata flexible from v9
    assert _last_rigid_version(3, 5) == 5
    assert _last_rigid_version(11, None) == 5    # JoinGroup flexible from v6


def test_lenient_sync_group_reads_null_assignment():
    for v in (0, 3, 4, 5):
        body = SyncGroupResponse(error_code=27, assignment=b"").encode(v)
        # null assignment on the wire: replace the empty bytes (last field) with a null marker
        if v >= 4:
            raw = body[:-2] + b"\x00\x00"                    # compact: 0 = null, then tagged fields
        else:
            raw = body[:-4] + b"\xff\xff\xff\xff"
        resp = LenientSyncGroupResponse.decode(raw, v)
        assert resp.assignment is None and resp.error_code == 27


def test_consumer_record_fields_and_pickle():
    r = ConsumerRecord("t", 1, 7, 1000, 0, b"k", b"v", [("h", b"x")], 3)
    assert (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers,
            r.leader_epoch) == ("t", 1, 7, 1000, 0, b"k", b"v", [("h", b"x")], 3)
    assert r.topic_partition == TopicPartition("t", 1) == ("t", 1)
    assert pickle.loads(pickle.dumps(r)) == r and type(pickle.loads(pickle.dumps(r))) is ConsumerRecord
    assert "offset=7" in repr(r)
