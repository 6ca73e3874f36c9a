"""Group-coordinator and transaction messages, the consumer protocol payloads and the
__consumer_offsets records: spec conformance (Kafka's JSON as shipped in kafka-python), round trips in
every version, hand-computed golden bytes, and byte-for-byte interop with kafka-python 3.x."""
from __future__ import annotations

import re
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka.protocol.admin import groups as kp_groups
from kafka.protocol.consumer import group as kp_group
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription
from kafka.protocol.metadata import find_coordinator as kp_fc
from kafka.protocol.producer import transaction as kp_txn
from kafka.protocol.schemas import load_json

from kohort.errors import DecodeError, EncodeError
from kohort.protocol import consumer_offsets as CO
from kohort.protocol.coordinator_records import encode_versioned
from kohort.protocol import consumer_protocol as CP
from kohort.protocol import schema as S
from kohort.protocol.messages import REQUESTS, RESPONSES
from kohort.protocol.messages.consumer_group_describe import (ConsumerGroupDescribeRequest,
                                                              ConsumerGroupDescribeResponse)
from kohort.protocol.messages.consumer_group_heartbeat import (ConsumerGroupHeartbeatRequest,
                                                               ConsumerGroupHeartbeatResponse)
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kohort.protocol.messages.join_group import JoinGroupRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest
from kohort.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from tests.helpers.protocol_strategies import message_strategy, struct_strategy

MY_KEYS = [8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 25, 26, 27, 28, 42, 47, 68, 69]
MY_CLASSES = [reg[k] for k in MY_KEYS for reg in (REQUESTS, RESPONSES)]
EXPECTED_MAX = {8: 10, 9: 10, 10: 6, 11: 9, 12: 4, 13: 5, 14: 5, 15: 6, 16: 5, 24: 5, 25: 4, 26: 5,
                27: 2, 28: 5, 42: 2, 47: 0, 68: 1, 69: 1}
ALL_VERSIONS = [(c, v) for c in MY_CLASSES for v in range(0, c.MAX_VERSION + 1)]
HYP = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))

# kafka-python 3.x builds its protocol classes from Kafka's own JSON specs
KP = {c.__name__: c for mod in (kp_group, kp_groups, kp_fc, kp_txn) for c in vars(mod).values()
      if isinstance(c, type) and hasattr(c, "_struct") and c.__module__ == mod.__name__}
KP_CASES = [(c, v) for c, v in ALL_VERSIONS if c.__name__ in KP and v <= KP[c.__name__].max_version]


def _ids(cases):
    return [f"{c.__name__}-v{v}" for c, v in cases]


# -- spec conformance ------------------------------------------------------------------------------
_PRIM = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint16": "uint16",
         "float64": "float64", "bool": "bool", "uuid": "uuid", "string": "string", "bytes": "bytes",
         "records": "records"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _in(spec, v):
    return S._in(S.parse_versions(spec), v)


def _json_default(js, our_type):
    d = js["default"]
    if isinstance(d, str):
        if d == "null":
            return None
        if d in ("true", "false"):
            return d == "true"
        if our_type.name.startswith("int"):
            return int(d)
    return d


def _compare(json_fields, our_fields, v, flexible, path):
    exp = [j for j in json_fields if _in(j["versions"], v)
           and ("tag" not in j or (flexible and _in(j.get("taggedVersions", j["versions"]), v)))]
    ours = [fl for fl in our_fields if S._in(fl.versions, v) and (fl.tag is None or flexible)]
    assert [_snake(j["name"]) for j in exp] == [fl.name for fl in ours], f"{path} v{v}"
    for j, fl in zip(exp, ours):
        where = f"{path}.{fl.name} v{v}"
        assert fl.tag == j.get("tag"), where
        assert S._in(fl.nullable, v) == _in(j.get("nullableVersions", "none"), v), where
        t, jt = fl.type, j["type"]
        if jt.startswith("[]"):
            assert isinstance(t, S.Array), where
            inner = jt[2:]
            if inner in _PRIM:
                assert t.item.name == _PRIM[inner], where
            else:
                assert isinstance(t.item, S._StructType), where
                _compare(j["fields"], t.item.cls.FIELDS, v, flexible, where)
        elif jt in _PRIM:
            assert t.name == _PRIM[jt], where
            if "default" in j:
                assert fl.default == _json_default(j, t), where
        else:
            assert isinstance(t, S._StructType), where
            _compare(j["fields"], t.cls.FIELDS, v, flexible, where)


SPEC_CASES = [(c, v) for c, v in ALL_VERSIONS if c.__name__ in KP]


@pytest.mark.parametrize("cls,version", SPEC_CASES, ids=_ids(SPEC_CASES))
def test_schema_matches_kafka_json_spec(cls, version):
    spec = load_json(cls.__name__)
    assert spec["apiKey"] == cls.API_KEY
    assert S.parse_versions(spec["validVersions"])[1] == cls.MAX_VERSION
    assert S.parse_versions(spec["flexibleVersions"])[0] == cls._flex[0]
    _compare(spec["fields"], cls.FIELDS, version, cls.is_flexible(version), cls.__name__)


@pytest.mark.parametrize("cls", [CP.ConsumerProtocolSubscription, CP.ConsumerProtocolAssignment])
def test_consumer_protocol_matches_kafka_json_spec(cls):
    spec = load_json(cls.__name__)
    assert spec["flexibleVersions"] == "none"
    for v in range(0, cls.MAX_VERSION + 1):
        _compare(spec["fields"], cls.FIELDS, v, False, cls.__name__)


def test_registry_and_max_versions():
    for key, mx in EXPECTED_MAX.items():
        assert REQUESTS[key].MAX_VERSION == RESPONSES[key].MAX_VERSION == mx
        assert REQUESTS[key].MIN_VERSION == 0
    # the two KIP-848 APIs are not in kafka-python: checked by hand against Kafka's JSON
    assert ConsumerGroupHeartbeatRequest.is_flexible(0) and ConsumerGroupDescribeResponse.is_flexible(0)


# -- round trips ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,version", ALL_VERSIONS, ids=_ids(ALL_VERSIONS))
@HYP
@given(data=st.data())
def test_round_trip_every_version(cls, version, data):
    msg = data.draw(message_strategy(cls, version))
    raw = msg.encode(version)
    back = cls.decode(raw, version)
    assert back == msg
    assert back.encode(version) == raw
    with pytest.raises(DecodeError):
        cls.decode(raw + b"\x00", version)
    if raw:
        with pytest.raises(DecodeError):
            cls.decode(raw[:-1], version)


# -- interop with kafka-python ---------------------------------------------------------------------
@pytest.mark.parametrize("cls,version", KP_CASES, ids=_ids(KP_CASES))
@HYP
@given(data=st.data())
def test_kafka_python_bytes_round_trip_through_kohort(cls, version, data):
    kp = KP[cls.__name__]
    ours = data.draw(message_strategy(cls, version)).encode(version)
    kp_obj = kp.decode(ours, version=version)          # kafka-python reads our bytes ...
    kp_obj._header = None     # kafka-python 3.0.12 leaves this slot unset on decode; encode reads it
    theirs = kp_obj.encode(version=version)            # ... and writes them back
    assert bytes(theirs) == ours
    assert cls.decode(theirs, version).encode(version) == bytes(theirs)


def test_kafka_python_encodes_hand_built_messages_kohort_reencodes_identically():
    cases = [
        (kp_group.JoinGroupRequest(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=30000,
                                   member_id="m", group_instance_id="inst", protocol_type="consumer",
                                   protocols=[kp_group.JoinGroupRequest.JoinGroupRequestProtocol(
                                       name="range", metadata=b"\x00\x01")], reason="why"), 8),
        (kp_group.OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=3, member_id="m",
                                      topics=[kp_group.OffsetCommitRequest.OffsetCommitRequestTopic(
                                          name="t", partitions=[
                                              kp_group.OffsetCommitRequest.OffsetCommitRequestTopic
                                              .OffsetCommitRequestPartition(partition_index=4,
                                                                            committed_offset=99,
                                                                            committed_metadata=None)])]),
         8),
        (kp_fc.FindCoordinatorRequest(key_type=1, coordinator_keys=["a", "b"]), 4),
        (kp_fc.FindCoordinatorRequest(key="grp"), 0),
        (kp_txn.EndTxnRequest(transactional_id="tx", producer_id=7, producer_epoch=2, committed=True), 5),
    ]
    for obj, version in cases:
        raw = bytes(obj.encode(version=version))
        cls = REQUESTS[obj.API_KEY]
        ours = cls.decode(raw, version)
        assert ours.encode(version) == raw
    join = JoinGroupRequest.decode(bytes(cases[0][0].encode(version=8)), 8)
    assert (join.group_id, join.group_instance_id, join.reason, join.protocols[0].metadata) == \
        ("g", "inst", "why", b"\x00\x01")
    fc = FindCoordinatorRequest.decode(bytes(cases[2][0].encode(version=4)), 4)
    assert (fc.key_type, fc.coordinator_keys) == (1, ["a", "b"])


# -- golden bytes, computed by hand from the spec ----------------------------------------------------
def test_golden_join_group_v5():
    msg = JoinGroupRequest(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=30000,
                           member_id="", group_instance_id=None, protocol_type="consumer",
                           protocols=[JoinGroupRequest.Protocol(name="range", metadata=b"\x00\x01")])
    expect = ("0001" "67" "00002710" "00007530" "0000" "ffff" "0008" + b"consumer".hex()
              + "00000001" "0005" + b"range".hex() + "00000002" "0001")
    assert msg.encode(5).hex() == expect
    assert JoinGroupRequest.decode(bytes.fromhex(expect), 5) == msg


def test_golden_sync_group_v3():
    msg = SyncGroupRequest(group_id="g", generation_id=1, member_id="m", group_instance_id="i",
                           assignments=[SyncGroupRequest.Assignment(member_id="m", assignment=b"\xab")])
    expect = "000167" "00000001" "00016d" "000169" "00000001" "00016d" "00000001ab"
    assert msg.encode(3).hex() == expect
    resp = SyncGroupResponse(throttle_time_ms=5, error_code=27, assignment=b"")
    assert resp.encode(3).hex() == "00000005" "001b" "00000000"


def test_golden_offset_commit_v8_flexible():
    P = OffsetCommitRequest.Topic.Partition
    msg = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=3, member_id="m",
                              group_instance_id=None, topics=[OffsetCommitRequest.Topic(
                                  name="t", partitions=[P(partition_index=0, committed_offset=42,
                                                          committed_leader_epoch=7,
                                                          committed_metadata=None)])])
    expect = ("0267" "00000003" "026d" "00"          # group, generation, member, null instance id
              "02" "0274" "02"                       # 1 topic "t", 1 partition
              "00000000" "000000000000002a" "00000007" "00"   # index, offset, epoch, null metadata
              "00" "00" "00")                        # tagged sections: partition, topic, top level
    assert msg.encode(8).hex() == expect
    assert OffsetCommitRequest.decode(bytes.fromhex(expect), 8) == msg
    # an unknown tag at top level is kept and written back
    with_tag = bytes.fromhex(expect[:-2] + "01" "05" "02" "beef")
    back = OffsetCommitRequest.decode(with_tag, 8)
    assert back.encode(8) == with_tag


def test_golden_find_coordinator_v4():
    req = FindCoordinatorRequest(key_type=0, coordinator_keys=["g1", "g2"])
    assert req.encode(4).hex() == "00" "03" "036731" "036732" "00"
    resp = FindCoordinatorResponse(throttle_time_ms=0, coordinators=[FindCoordinatorResponse.Coordinator(
        key="g1", node_id=1, host="h", port=9092, error_code=0, error_message=None)])
    assert resp.encode(4).hex() == ("00000000" "02" "036731" "00000001" "0268" "00002384" "0000" "00" "00"
                                    "00")
    # v0-v3 carry a single key, never the batch
    assert FindCoordinatorRequest(key="g1").encode(0).hex() == "00026731"
    assert FindCoordinatorRequest(key="g1", key_type=0).encode(3).hex() == "036731" "00" "00"


def test_offset_fetch_v8_groups_and_null_topics():
    G = OffsetFetchRequest.Group
    msg = OffsetFetchRequest(groups=[G(group_id="a", topics=None),
                                     G(group_id="b", topics=[G.Topics(name="t", partition_indexes=[0, 1])])],
                             require_stable=True)
    expect = ("03" "0261" "00" "00" "0262" "02" "0274" "03" "00000000" "00000001" "00" "00" "01" "00")
    assert msg.encode(8).hex() == expect
    assert OffsetFetchRequest.decode(bytes.fromhex(expect), 8) == msg
    with pytest.raises(EncodeError):     # topics is not nullable before v2
        OffsetFetchRequest(group_id="g", topics=None).encode(1)


def test_golden_consumer_group_heartbeat():
    tid = uuid.UUID(int=1)
    req = ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=0,
                                        rebalance_timeout_ms=300000, subscribed_topic_names=["t"],
                                        subscribed_topic_regex=None, topic_partitions=[])
    expect_v0 = ("0267" "026d" "00000000" "00" "00" "000493e0" "02" "0274" "00" "01" "00")
    assert req.encode(0).hex() == expect_v0
    assert req.encode(1).hex() == expect_v0[:-6] + "00" + expect_v0[-6:]   # regex (null) before assignor
    resp = ConsumerGroupHeartbeatResponse(member_id="m", member_epoch=5, heartbeat_interval_ms=5000,
                                          assignment=ConsumerGroupHeartbeatResponse.Assignment(
                                              topic_partitions=[ConsumerGroupHeartbeatResponse.Assignment
                                                                .TopicPartitions(topic_id=tid, partitions=[2])]))
    expect = ("00000000" "0000" "00" "026d" "00000005" "00001388"
              "01" "02" + tid.bytes.hex() + "02" "00000002" "00" "00" "00")
    assert resp.encode(0).hex() == expect
    assert ConsumerGroupHeartbeatResponse.decode(bytes.fromhex(expect), 0) == resp
    assert ConsumerGroupHeartbeatResponse().encode(1).hex().endswith("ff" "00")   # null assignment


def test_consumer_group_describe_member_type_only_in_v1():
    M = ConsumerGroupDescribeResponse.DescribedGroup.Member
    g = ConsumerGroupDescribeResponse.DescribedGroup(group_id="g", members=[M(member_id="m", member_type=1)])
    r = ConsumerGroupDescribeResponse(groups=[g])
    v0, v1 = r.encode(0), r.encode(1)
    assert len(v1) == len(v0) + 1
    assert ConsumerGroupDescribeResponse.decode(v0, 0).groups[0].members[0].member_type == -1
    assert ConsumerGroupDescribeResponse.decode(v1, 1).groups[0].members[0].member_type == 1
    assert ConsumerGroupDescribeRequest(group_ids=["g"]).encode(1) == \
        ConsumerGroupDescribeRequest(group_ids=["g"]).encode(0)


# -- consumer protocol payloads ----------------------------------------------------------------------
def _sub(version):
    kw = dict(topics=["a", "b"], user_data=b"ud")
    if version >= 1:
        kw["owned_partitions"] = [CP.ConsumerProtocolSubscription.TopicPartition(topic="a", partitions=[0, 3])]
    if version >= 2:
        kw["generation_id"] = 9
    if version >= 3:
        kw["rack_id"] = "rack-1"
    return CP.ConsumerProtocolSubscription(**kw)


@pytest.mark.parametrize("version", range(4))
def test_subscription_interop_with_kafka_python(version):
    owned = [KpSubscription.TopicPartition(topic="a", partitions=[0, 3])] if version >= 1 else []
    kp = KpSubscription(topics=["a", "b"], user_data=b"ud", owned_partitions=owned,
                        generation_id=9 if version >= 2 else -1, rack_id="rack-1" if version >= 3 else None,
                        version=version)
    theirs = bytes(kp.encode(version=version))
    assert CP.decode_subscription(theirs) == _sub(version)
    assert CP.payload_version(theirs) == version
    ours = CP.encode_subscription(_sub(version), version=version)
    assert ours == theirs
    back = KpSubscription.decode(ours)
    assert (back.topics, back.user_data) == (["a", "b"], b"ud")
    if version >= 3:
        assert back.rack_id == "rack-1" and back.generation_id == 9


@pytest.mark.parametrize("version", range(4))
def test_assignment_interop_with_kafka_python(version):
    kp = KpAssignment(assigned_partitions=[KpAssignment.TopicPartition(topic="t", partitions=[1, 2]),
                                           KpAssignment.TopicPartition(topic="u", partitions=[])],
                      user_data=None, version=version)
    theirs = bytes(kp.encode(version=version))
    ours_obj = CP.decode_assignment(theirs)
    assert [(tp.topic, tp.partitions) for tp in ours_obj.assigned_partitions] == [("t", [1, 2]), ("u", [])]
    assert ours_obj.user_data is None
    assert CP.encode_assignment(ours_obj, version=version) == theirs
    back = KpAssignment.decode(CP.encode_assignment(ours_obj, version=version))
    assert [(t, list(p)) for t, p in back.assigned_partitions] == [("t", [1, 2]), ("u", [])]


def test_higher_version_subscription_with_extra_fields_still_decodes():
    v3 = CP.encode_subscription(_sub(3), version=3)
    # a hypothetical v5 appends fields after rack_id: an int32 and a string
    future = struct.pack(">h", 5) + v3[2:] + struct.pack(">i", 77) + b"\x00\x03new"
    got = CP.decode_subscription(future)
    assert got == _sub(3)
    assert CP.payload_version(future) == 5
    # an old reader of the older layout (v0) ignores owned_partitions etc. the same way
    fut_assign = struct.pack(">h", 9) + CP.encode_assignment(CP.ConsumerProtocolAssignment())[2:] + b"\x01\x02"
    assert CP.decode_assignment(fut_assign) == CP.ConsumerProtocolAssignment()
    # kafka-python applies the same rule
    assert KpSubscription.decode(future).rack_id == "rack-1"


def test_consumer_protocol_bad_input():
    with pytest.raises(DecodeError):
        CP.decode_subscription(b"\xff\xff" + b"\x00" * 8)      # negative version
    with pytest.raises(DecodeError):
        CP.decode_subscription(b"")
    with pytest.raises(DecodeError):
        CP.decode_assignment(None)
    with pytest.raises(DecodeError):
        CP.decode_subscription(b"\x00\x00\x00\x00\x00\x05\x00")    # array of 5 topics, 1 byte left
    with pytest.raises(EncodeError):
        CP.encode_subscription(CP.ConsumerProtocolAssignment())
    with pytest.raises(EncodeError):
        CP.encode_subscription(_sub(0), version=4)


@given(st.integers(0, 3), st.data())
@HYP
def test_consumer_protocol_round_trip(version, data):
    for cls, enc, dec in ((CP.ConsumerProtocolSubscription, CP.encode_subscription, CP.decode_subscription),
                          (CP.ConsumerProtocolAssignment, CP.encode_assignment, CP.decode_assignment)):
        obj = data.draw(struct_strategy(cls, version, False))   # these payloads are never flexible
        raw = enc(obj, version=version)
        assert enc(dec(raw), version=version) == raw


# -- __consumer_offsets records ---------------------------------------------------------------------
def test_offset_commit_record_golden():
    key, value = CO.offset_commit_record("g", "t", 3, offset=42, leader_epoch=7, metadata="md",
                                         commit_timestamp=1000)
    assert key.hex() == "0001" "000167" "000174" "00000003"
    assert value.hex() == "0003" "000000000000002a" "00000007" "00026d64" "00000000000003e8"
    k = CO.decode_key(key)
    assert isinstance(k, CO.OffsetCommitKey) and (k.group, k.topic, k.partition) == ("g", "t", 3)
    v = CO.decode_value(k, value)
    assert (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp) == (42, 7, "md", 1000, -1)


def test_offset_commit_record_with_expiry_uses_v1():
    _, value = CO.offset_commit_record("g", "t", 0, offset=1, leader_epoch=7, commit_timestamp=5,
                                       expire_timestamp=9)
    assert value.hex() == "0001" "0000000000000001" "0000" "0000000000000005" "0000000000000009"
    v = CO.decode_value(CO.OffsetCommitKey(), value)
    assert (v.leader_epoch, v.expire_timestamp) == (-1, 9)
    with pytest.raises(EncodeError):
        CO.encode_offset_commit_value(v, version=3)


def test_group_metadata_record_golden_and_tombstones():
    m = CO.GroupMember(member_id="m", client_id="c", client_host="/h", session_timeout=10, rebalance_timeout=20,
                       subscription=b"\x01", assignment=b"", group_instance_id=None)
    key, value = CO.group_metadata_record("g", "consumer", 1, "range", "m", 123, [m])
    assert key.hex() == "0002" "000167"
    assert value.hex() == ("0003" "0008" + b"consumer".hex() + "00000001" "000572616e6765" "00016d"
                           "000000000000007b" "00000001" "00016d" "ffff" "000163" "00022f68"
                           "00000014" "0000000a" "0000000101" "00000000")
    k, v = CO.decode_record(key, value)
    assert isinstance(k, CO.GroupMetadataKey) and k.group == "g"
    assert v.members[0].client_host == "/h" and v.current_state_timestamp == 123
    empty_key, empty_value = CO.group_metadata_record("g", "", 0, None, None, 5)
    ev = CO.decode_value(CO.decode_key(empty_key), empty_value)
    assert (ev.protocol, ev.leader, ev.members) == (None, None, [])
    tk, tv = CO.group_metadata_tombstone("g")
    assert tk == key and tv is None and CO.decode_value(CO.decode_key(tk), tv) is None
    ok, ov = CO.offset_commit_tombstone("g", "t", 3)
    assert ov is None and CO.decode_record(ok, ov) == (CO.OffsetCommitKey(group="g", topic="t", partition=3), None)


@pytest.mark.parametrize("cls", [CO.OffsetCommitKey, CO.OffsetCommitValue, CO.GroupMetadataKey,
                                 CO.GroupMetadataValue])
@HYP
@given(data=st.data())
def test_consumer_offsets_every_version_round_trips(cls, data):
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
        obj = data.draw(message_strategy(cls, version))
        raw = encode_versioned(obj, version)
        if cls in (CO.OffsetCommitKey, CO.GroupMetadataKey):
            back = CO.decode_key(raw)
        else:
            key = CO.OffsetCommitKey() if cls is CO.OffsetCommitValue else CO.GroupMetadataKey()
            back = CO.decode_value(key, raw)
        assert back == obj and encode_versioned(back, version) == raw


def test_consumer_offsets_flexible_v4_and_errors():
    v = CO.OffsetCommitValue(offset=1, leader_epoch=2, metadata="", commit_timestamp=3)
    raw = CO.encode_offset_commit_value(v, version=4)
    assert raw.hex() == "0004" "0000000000000001" "00000002" "01" "0000000000000003" "00"
    assert CO.decode_value(CO.OffsetCommitKey(), raw) == v
    gv = CO.GroupMetadataValue(protocol_type="consumer", generation=2)
    assert CO.decode_value(CO.GroupMetadataKey(), CO.encode_group_metadata_value(gv, 4)) == gv
    with pytest.raises(DecodeError):
        CO.decode_key(struct.pack(">h", 3) + b"\x00\x01g")      # a KIP-848 record type
    assert CO.key_version(struct.pack(">h", 3) + b"\x00\x01g") == 3
    with pytest.raises(DecodeError):
        CO.decode_value(CO.OffsetCommitKey(), struct.pack(">h", 5) + b"\x00" * 30)
    with pytest.raises(DecodeError):
        CO.decode_key(b"\x00")
    with pytest.raises(DecodeError):
        CO.decode_key(CO.offset_commit_record("g", "t", 0, 1)[0] + b"\x00")


# -- group -> __consumer_offsets partition -----------------------------------------------------------
def _java_hash_reference(s: str) -> int:
    # independent reimplementation: exact polynomial over UTF-16 units, then wrap to a signed int32
    units = struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be"))
    n = len(units)
    exact = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units))
    return struct.unpack(">i", struct.pack(">I", exact % 2**32))[0]


def test_group_partition_literals():
    assert CO.java_string_hash("") == 0
    assert CO.java_string_hash("hello") == 99162322          # well-known Java value
    assert CO.java_string_hash("Aa") == CO.java_string_hash("BB") == 2112
    assert CO.group_partition("hello") == 99162322 % 50 == 22
    assert CO.group_partition("a") == 97 % 50
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE; Utils.abs maps it to 0, Math.abs would not
    assert CO.java_string_hash("polygenelubricants") == -2**31
    assert CO.group_partition("polygenelubricants") == 0
    assert CO.group_partition("hello", 1) == 0
    with pytest.raises(ValueError):
        CO.group_partition("g", 0)


@given(st.text(max_size=40), st.integers(1, 200))
@settings(max_examples=200, deadline=None)
def test_group_partition_matches_reference(group_id, n):
    h = _java_hash_reference(group_id)
    assert CO.java_string_hash(group_id) == h
    expected = 0 if h == -2**31 else abs(h) % n
    assert CO.group_partition(group_id, n) == expected
    assert 0 <= CO.group_partition(group_id) < 50


def test_group_partition_counts_utf16_units():
    # U+1F600 is a surrogate pair in Java: hash over 0xD83D, 0xDE00
    assert CO.java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
