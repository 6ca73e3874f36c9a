"""Share-group (KIP-932) wire formats: ShareGroupHeartbeat/Describe, ShareFetch, ShareAcknowledge and
the share-group offsets APIs, round trips across every version, and golden bytes written by hand from
the order of fields in Kafka's message specs (not from kohort's schema); the `__share_group_state`
records and the share-group records of `__consumer_offsets` likewise."""
from __future__ import annotations

import random
import struct
import uuid

import pytest

from kohort.errors import DecodeError
from kohort.protocol import share_group_records as SG
from kohort.protocol import share_state_records as SS
from kohort.protocol.messages import REQUESTS, RESPONSES
from tests.protocol.test_messages_data import populate

SHARE_APIS = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0), 92: (0, 0)}
CASES = [(cls, v) for key, (lo, hi) in SHARE_APIS.items() for cls in (REQUESTS[key], RESPONSES[key])
         for v in range(lo, hi + 1)]
RECORD_CLASSES = list(SS.KEYS.values()) + list(SS.VALUES.values()) + list(SG.KEYS.values()) + list(SG.VALUES.values())


# -- an independent writer for the golden bytes --------------------------------------------------
def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def carr(items: list[bytes] | None) -> bytes:
    if items is None:
        return b"\x00"
    return uvarint(len(items) + 1) + b"".join(items)


def i8(n): return struct.pack(">b", n)
def i16(n): return struct.pack(">h", n)
def i32(n): return struct.pack(">i", n)
def i64(n): return struct.pack(">q", n)


NO_TAGS = b"\x00"
TID = uuid.UUID("0123456789abcdef0123456789abcdef")


# -- round trips ----------------------------------------------------------------------------------
def test_versions_are_kafkas():
    for key, (lo, hi) in SHARE_APIS.items():
        for cls in (REQUESTS[key], RESPONSES[key]):
            assert (cls.MIN_VERSION, cls.MAX_VERSION) == (lo, hi), cls.__name__
            assert cls.is_flexible(lo)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}-v{c[1]}")
def test_round_trip_every_version(case):
    cls, v = case
    rng = random.Random(f"{cls.__name__}{v}")
    for _ in range(10):
        obj = populate(cls, v, True, rng)
        data = obj.encode(v)
        back = cls.decode(data, v)
        assert back == obj
        assert back.encode(v) == data
        for cut in (0, len(data) // 2, len(data) - 1):
            with pytest.raises(DecodeError):
                cls.decode(data[:cut], v)
    assert cls.decode(cls().encode(v), v) == cls()


@pytest.mark.parametrize("cls", RECORD_CLASSES, ids=lambda c: c.__name__)
def test_records_round_trip(cls):
    rng = random.Random(cls.__name__)
    for _ in range(10):
        obj = populate(cls, 0, cls.is_flexible(0), rng)
        assert cls.decode(obj.encode(0), 0) == obj


def test_the_broker_serves_the_share_apis_but_not_the_internal_state_rpcs():
    from kohort.broker.handlers import HANDLERS, load_all
    load_all()
    served = {k: (HANDLERS[k].min_version, HANDLERS[k].max_version) for k in SHARE_APIS if k in HANDLERS}
    assert served == SHARE_APIS
    assert not {83, 84, 85, 86, 87} & set(HANDLERS)       # one node: the leader calls its share coordinator


# -- golden bytes from the specs' field order -------------------------------------------------------
def test_share_group_heartbeat_request_v1_bytes():
    req = REQUESTS[76](group_id="g", member_id="m1", member_epoch=0, rack_id=None,
                       subscribed_topic_names=["t"])
    expect = cstr("g") + cstr("m1") + i32(0) + cstr(None) + carr([cstr("t")]) + NO_TAGS
    assert req.encode(1) == expect


def test_share_group_heartbeat_response_v1_bytes():
    R = RESPONSES[76]
    resp = R(throttle_time_ms=0, error_code=0, member_id="m1", member_epoch=3, heartbeat_interval_ms=5000,
             assignment=R.Assignment(topic_partitions=[R.Assignment.TopicPartitions(topic_id=TID, partitions=[0, 2])]))
    expect = (i32(0) + i16(0) + cstr(None) + cstr("m1") + i32(3) + i32(5000)
              + b"\x01" + carr([TID.bytes + carr([i32(0), i32(2)]) + NO_TAGS]) + NO_TAGS + NO_TAGS)
    assert resp.encode(1) == expect
    assert R.decode(expect, 1) == resp


def test_share_group_describe_response_v1_bytes():
    R = RESPONSES[77]
    G = R.DescribedGroup
    M = G.Member
    member = M(member_id="m", rack_id=None, member_epoch=2, client_id="c", client_host="/127.0.0.1",
               subscribed_topic_names=["t"],
               assignment=M.Assignment(topic_partitions=[M.Assignment.TopicPartitions(
                   topic_id=TID, topic_name="t", partitions=[1])]))
    resp = R(groups=[G(group_id="g", group_state="Stable", group_epoch=2, assignment_epoch=2,
                       assignor_name="simple", members=[member])])
    m_bytes = (cstr("m") + cstr(None) + i32(2) + cstr("c") + cstr("/127.0.0.1") + carr([cstr("t")])
               + carr([TID.bytes + cstr("t") + carr([i32(1)]) + NO_TAGS]) + NO_TAGS + NO_TAGS)
    g_bytes = (i16(0) + cstr(None) + cstr("g") + cstr("Stable") + i32(2) + i32(2) + cstr("simple")
               + carr([m_bytes]) + i32(-(1 << 31)) + NO_TAGS)
    assert resp.encode(1) == i32(0) + carr([g_bytes]) + NO_TAGS


def _fetch_request(version):
    R = REQUESTS[78]
    T = R.FetchTopic
    P = T.FetchPartition
    return R(group_id="g", member_id="m", share_session_epoch=1, max_wait_ms=500, min_bytes=1,
             max_bytes=1 << 20, max_records=500, batch_size=500, share_acquire_mode=1, is_renew_ack=True,
             topics=[T(topic_id=TID, partitions=[P(partition_index=0, acknowledgement_batches=[
                 P.AcknowledgementBatch(first_offset=5, last_offset=6, acknowledge_types=[1, 4])])])],
             forgotten_topics_data=[R.ForgottenTopic(topic_id=TID, partitions=[3])])


def test_share_fetch_request_v1_and_v2_bytes():
    head = cstr("g") + cstr("m") + i32(1) + i32(500) + i32(1) + i32(1 << 20) + i32(500) + i32(500)
    tail = (carr([TID.bytes + carr([i32(0) + carr([i64(5) + i64(6) + carr([i8(1), i8(4)]) + NO_TAGS])
                                    + NO_TAGS]) + NO_TAGS])
            + carr([TID.bytes + carr([i32(3)]) + NO_TAGS]) + NO_TAGS)
    assert _fetch_request(2).encode(2) == head + i8(1) + b"\x01" + tail
    # v1 has neither ShareAcquireMode nor IsRenewAck
    assert _fetch_request(1).encode(1) == head + tail
    back = REQUESTS[78].decode(head + tail, 1)
    assert back.share_acquire_mode == 0 and back.is_renew_ack is False


def test_share_fetch_response_v1_bytes():
    R = RESPONSES[78]
    T = R.ShareFetchableTopicResponse
    P = T.PartitionData
    records = b"\x00" * 7
    resp = R(throttle_time_ms=0, error_code=0, acquisition_lock_timeout_ms=30000, responses=[T(
        topic_id=TID, partitions=[P(partition_index=2, error_code=0, acknowledge_error_code=121,
                                    current_leader=P.LeaderIdAndEpoch(leader_id=1, leader_epoch=4),
                                    records=records,
                                    acquired_records=[P.AcquiredRecords(first_offset=10, last_offset=19,
                                                                        delivery_count=2)])])],
        node_endpoints=[R.NodeEndpoint(node_id=1, host="h", port=9092, rack=None)])
    p = (i32(2) + i16(0) + cstr(None) + i16(121) + cstr(None) + i32(1) + i32(4) + NO_TAGS
         + uvarint(len(records) + 1) + records + carr([i64(10) + i64(19) + i16(2) + NO_TAGS]) + NO_TAGS)
    expect = (i32(0) + i16(0) + cstr(None) + i32(30000) + carr([TID.bytes + carr([p]) + NO_TAGS])
              + carr([i32(1) + cstr("h") + i32(9092) + cstr(None) + NO_TAGS]) + NO_TAGS)
    assert resp.encode(1) == expect
    assert bytes(R.decode(expect, 1).responses[0].partitions[0].records) == records


def test_share_acknowledge_v1_v2_bytes():
    R = REQUESTS[79]
    req = R(group_id="g", member_id="m", share_session_epoch=-1, is_renew_ack=False, topics=[])
    assert req.encode(1) == cstr("g") + cstr("m") + i32(-1) + carr([]) + NO_TAGS
    assert req.encode(2) == cstr("g") + cstr("m") + i32(-1) + b"\x00" + carr([]) + NO_TAGS
    S = RESPONSES[79]
    resp = S(acquisition_lock_timeout_ms=15000)
    base = i32(0) + i16(0) + cstr(None)
    assert resp.encode(1) == base + carr([]) + carr([]) + NO_TAGS
    assert resp.encode(2) == base + i32(15000) + carr([]) + carr([]) + NO_TAGS


def test_describe_share_group_offsets_lag_only_in_v1():
    R = RESPONSES[90]
    G = R.DescribeShareGroupOffsetsResponseGroup
    T = G.DescribeShareGroupOffsetsResponseTopic
    P = T.DescribeShareGroupOffsetsResponsePartition
    resp = R(groups=[G(group_id="g", topics=[T(topic_name="t", topic_id=TID, partitions=[
        P(partition_index=0, start_offset=7, leader_epoch=0, lag=3)])])])
    part = lambda lag: i32(0) + i64(7) + i32(0) + lag + i16(0) + cstr(None) + NO_TAGS  # noqa: E731
    body = lambda lag: (i32(0) + carr([cstr("g") + carr([cstr("t") + TID.bytes + carr([part(lag)]) + NO_TAGS])  # noqa: E731
                                       + i16(0) + cstr(None) + NO_TAGS]) + NO_TAGS)
    assert resp.encode(1) == body(i64(3))
    assert resp.encode(0) == body(b"")
    assert R.decode(body(b""), 0).groups[0].topics[0].partitions[0].lag == -1
    req = REQUESTS[90](groups=[REQUESTS[90].DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=None)])
    assert req.encode(0) == carr([cstr("g") + b"\x00" + NO_TAGS]) + NO_TAGS


def test_alter_and_delete_share_group_offsets_bytes():
    A = REQUESTS[91]
    T = A.AlterShareGroupOffsetsRequestTopic
    req = A(group_id="g", topics=[T(topic_name="t", partitions=[T.AlterShareGroupOffsetsRequestPartition(
        partition_index=1, start_offset=42)])])
    assert req.encode(0) == (cstr("g") + carr([cstr("t") + carr([i32(1) + i64(42) + NO_TAGS]) + NO_TAGS])
                             + NO_TAGS)
    D = RESPONSES[92]
    resp = D(error_code=68, responses=[D.DeleteShareGroupOffsetsResponseTopic(topic_name="t", topic_id=TID,
                                                                             error_code=3)])
    assert resp.encode(0) == (i32(0) + i16(68) + cstr(None)
                              + carr([cstr("t") + TID.bytes + i16(3) + cstr(None) + NO_TAGS]) + NO_TAGS)


# -- records ----------------------------------------------------------------------------------------
def test_share_update_record_bytes():
    key = SS.ShareUpdateKey(group_id="g", topic_id=TID, partition=3)
    kb = SS.encode_key(key)
    assert kb == i16(1) + i16(1) + b"g" + TID.bytes + i32(3)
    val = SS.ShareUpdateValue(snapshot_epoch=2, leader_epoch=5, start_offset=-1, delivery_complete_count=-1,
                              state_batches=[SS.ShareUpdateValue.StateBatch(first_offset=0, last_offset=9,
                                                                            delivery_state=2, delivery_count=1)])
    vb = SS.encode_value(val)
    # the tagged DeliveryCompleteCount is left out at its default -1
    assert vb == (i16(0) + i32(2) + i32(5) + i64(-1) + carr([i64(0) + i64(9) + i8(2) + i16(1) + NO_TAGS])
                  + NO_TAGS)
    assert SS.decode(kb, vb) == (key, val)
    assert SS.decode(kb, None) == (key, None)


def test_share_snapshot_record_bytes_with_delivery_complete_count():
    val = SS.ShareSnapshotValue(snapshot_epoch=1, state_epoch=0, leader_epoch=0, start_offset=10,
                                delivery_complete_count=4, create_timestamp=1000, write_timestamp=2000,
                                state_batches=[])
    vb = SS.encode_value(val)
    expect = (i16(0) + i32(1) + i32(0) + i32(0) + i64(10) + i64(1000) + i64(2000) + carr([])
              + uvarint(1) + uvarint(0) + uvarint(4) + i32(4))
    assert vb == expect
    key, back = SS.decode(SS.encode_key(SS.ShareSnapshotKey(group_id="g", topic_id=TID, partition=0)), vb)
    assert back.delivery_complete_count == 4 and key.TYPE == 0


def test_state_records_refuse_unknown_types_and_versions():
    with pytest.raises(DecodeError):
        SS.decode(i16(2) + i16(1) + b"g" + TID.bytes + i32(0), None)
    kb = SS.encode_key(SS.ShareUpdateKey(group_id="g", topic_id=TID, partition=0))
    with pytest.raises(DecodeError):
        SS.decode(kb, i16(1) + b"\x00" * 20)


def test_state_partition_is_kafkas_hash():
    # Kafka's Uuid.toString is URL-safe base64 without padding
    assert SS.kafka_uuid_str(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    key = SS.coordinator_key("g", uuid.UUID(int=0), 1)
    assert key == "g:AAAAAAAAAAAAAAAAAAAAAA:1"
    # Java: "g:AAAAAAAAAAAAAAAAAAAAAA:1".hashCode(), computed by the definition s[0]*31^(n-1)+...
    h = 0
    for ch in key:
        h = (h * 31 + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    assert SS.state_partition("g", uuid.UUID(int=0), 1, 50) == abs(h) % 50
    with pytest.raises(ValueError):
        SS.state_partition("g", TID, 0, 0)


def test_share_group_records_bytes():
    kb = SG.encode_key(SG.ShareGroupMemberMetadataKey(group_id="g", member_id="m"))
    assert kb == i16(10) + i16(1) + b"g" + i16(1) + b"m"
    vb = SG.encode_value(SG.ShareGroupMemberMetadataValue(rack_id=None, client_id="c", client_host="/h",
                                                          subscribed_topic_names=["t"]))
    assert vb == i16(0) + cstr(None) + cstr("c") + cstr("/h") + carr([cstr("t")]) + NO_TAGS
    vb = SG.encode_value(SG.ShareGroupMetadataValue(epoch=3, metadata_hash=-7))
    assert vb == i16(0) + i32(3) + i64(-7) + NO_TAGS
    vb = SG.encode_value(SG.ShareGroupCurrentMemberAssignmentValue(
        member_epoch=3, previous_member_epoch=2, state=0,
        assigned_partitions=[SG.ShareGroupCurrentMemberAssignmentValue.TopicPartitions(topic_id=TID,
                                                                                       partitions=[0])]))
    assert vb == (i16(0) + i32(3) + i32(2) + i8(0) + carr([TID.bytes + carr([i32(0)]) + NO_TAGS]) + NO_TAGS)
    V = SG.ShareGroupStatePartitionMetadataValue
    vb = SG.encode_value(V(initializing_topics=[], initialized_topics=[V.TopicPartitionsInfo(
        topic_id=TID, topic_name="t", partitions=[0, 1])], deleting_topics=[V.TopicInfo(topic_id=TID, topic_name="t")]))
    assert vb == (i16(0) + carr([]) + carr([TID.bytes + cstr("t") + carr([i32(0), i32(1)]) + NO_TAGS])
                  + carr([TID.bytes + cstr("t") + NO_TAGS]) + NO_TAGS)
    # Kafka 4.3's tagged AssignmentTimestamp is read and written back
    vb = i16(0) + i32(4) + uvarint(1) + uvarint(0) + uvarint(8) + i64(123)
    key, val = SG.decode(SG.encode_key(SG.ShareGroupTargetAssignmentMetadataKey(group_id="g")), vb)
    assert val.assignment_timestamp == 123 and SG.encode_value(val) == vb
    with pytest.raises(DecodeError):
        SG.decode(i16(9) + i16(1) + b"g", None)
