"""Data/admin API schemas: round trips for every version, hand-checked golden bytes, and byte-for-byte
agreement with an independent implementation (kafka-python 3.0.12's protocol classes).

Covers Produce, Fetch, ListOffsets, Metadata, ApiVersions, CreateTopics, DeleteTopics, DeleteRecords,
InitProducerId, OffsetForLeaderEpoch, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
CreatePartitions, DescribeCluster, SaslHandshake, SaslAuthenticate, Describe/Create/DeleteAcls and
DescribeClientQuotas.
"""
from __future__ import annotations

import importlib
import random
import uuid

import pytest

from kohort.errors import DecodeError, EncodeError
from kohort.protocol.messages import REQUESTS, RESPONSES
from kohort.protocol.schema import (BOOL, BYTES, FLOAT64, INT8, INT16, INT32, INT64, RECORDS, STRING,
                                    UINT16, UINT32, UUID, Array, _StructType, _in)

# module name -> (API key, kafka-python module holding its Request/Response classes)
APIS = {
    "produce": (0, "kafka.protocol.producer.produce"),
    "fetch": (1, "kafka.protocol.consumer.fetch"),
    "list_offsets": (2, "kafka.protocol.consumer.offsets"),
    "metadata": (3, "kafka.protocol.metadata.metadata"),
    "sasl_handshake": (17, "kafka.protocol.sasl"),
    "api_versions": (18, "kafka.protocol.metadata.api_versions"),
    "create_topics": (19, "kafka.protocol.admin.topics"),
    "delete_topics": (20, "kafka.protocol.admin.topics"),
    "delete_records": (21, "kafka.protocol.admin.topics"),
    "init_producer_id": (22, "kafka.protocol.producer.transaction"),
    "offset_for_leader_epoch": (23, "kafka.protocol.consumer.offsets"),
    "describe_acls": (29, "kafka.protocol.admin.acl"),
    "create_acls": (30, "kafka.protocol.admin.acl"),
    "delete_acls": (31, "kafka.protocol.admin.acl"),
    "describe_configs": (32, "kafka.protocol.admin.configs"),
    "alter_configs": (33, "kafka.protocol.admin.configs"),
    "sasl_authenticate": (36, "kafka.protocol.sasl"),
    "create_partitions": (37, "kafka.protocol.admin.topics"),
    "incremental_alter_configs": (44, "kafka.protocol.admin.configs"),
    "describe_client_quotas": (48, "kafka.protocol.admin.client_quotas"),
    "describe_cluster": (60, "kafka.protocol.admin.cluster"),
}
# Highest version per API in Kafka 4.x's message specs (validVersions max).
MAX_VERSION = {0: 13, 1: 18, 2: 11, 3: 13, 17: 1, 18: 4, 19: 7, 20: 6, 21: 2, 22: 6, 23: 4, 29: 3, 30: 3,
               31: 3, 32: 4, 33: 2, 36: 2, 37: 3, 44: 1, 48: 1, 60: 2}

CLASSES = [c for key in MAX_VERSION for c in (REQUESTS[key], RESPONSES[key])]
CASES = [(c, v) for c in CLASSES for v in range(c.MAX_VERSION + 1)]


def _id(case):
    cls, v = case
    return f"{cls.__name__}-v{v}"


# -- random population from kohort's own schema ----------------------------------------------------
_INT_RANGES = {INT8: 7, INT16: 15, INT32: 31, INT64: 63}


def _prim(t, rng: random.Random):
    if t in _INT_RANGES:
        b = _INT_RANGES[t]
        return rng.choice([0, 1, -1, rng.randint(-(1 << b), (1 << b) - 1)])
    if t is UINT16:
        return rng.randint(0, 0xFFFF)
    if t is UINT32:
        return rng.randint(0, 0xFFFFFFFF)
    if t is FLOAT64:
        return rng.choice([0.0, 1.5, -2.25e10, rng.random()])
    if t is BOOL:
        return rng.random() < 0.5
    if t is UUID:
        return uuid.UUID(int=rng.getrandbits(128))
    if t is STRING:
        return rng.choice(["", "t", "topic-ü", "x" * rng.randint(0, 130)])
    if t in (BYTES, RECORDS):
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 3, 200])))
    raise AssertionError(f"no generator for {t!r}")


def populate(struct_cls, version: int, flexible: bool, rng: random.Random, depth: int = 0):
    """An instance with random values in every field present in `version`."""
    kw = {}
    for fld in struct_cls.FIELDS:
        if not _in(fld.versions, version) or (fld.tag is not None and not flexible):
            continue
        nullable = _in(fld.nullable, version)
        if nullable and rng.random() < 0.25:
            kw[fld.name] = None
            continue
        t = fld.type
        if isinstance(t, Array):
            n = rng.randint(0, 2 if depth < 3 else 0)
            if isinstance(t.item, _StructType):
                kw[fld.name] = [populate(t.item.cls, version, flexible, rng, depth + 1) for _ in range(n)]
            else:
                kw[fld.name] = [_prim(t.item, rng) for _ in range(n)]
        elif isinstance(t, _StructType):
            kw[fld.name] = populate(t.cls, version, flexible, rng, depth + 1)
        else:
            kw[fld.name] = _prim(t, rng)
    return struct_cls(**kw)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_round_trip_every_version(case):
    cls, v = case
    rng = random.Random(f"{cls.__name__}{v}")
    for _ in range(8):
        obj = populate(cls, v, cls.is_flexible(v), rng)
        data = obj.encode(v)
        back = cls.decode(data, v)
        assert back == obj
        assert back.encode(v) == data
    # a default instance encodes and decodes too
    assert cls.decode(cls().encode(v), v) == cls()


def test_versions_match_kafka_specs():
    for key, mx in MAX_VERSION.items():
        for cls in (REQUESTS[key], RESPONSES[key]):
            assert (cls.MIN_VERSION, cls.MAX_VERSION) == (0, mx), cls.__name__
    for mod, (key, _) in APIS.items():
        m = importlib.import_module(f"kohort.protocol.messages.{mod}")
        assert m.__doc__ and f"API key {key}" in m.__doc__
        assert REQUESTS[key].__module__ == m.__name__


def test_truncated_and_trailing_bytes_raise_decode_error():
    rng = random.Random(7)
    for cls, v in CASES:
        data = populate(cls, v, cls.is_flexible(v), rng).encode(v)
        for cut in {0, len(data) // 2, len(data) - 1} - {len(data)}:
            if cut < len(data):
                try:
                    cls.decode(data[:cut], v)
                except DecodeError:
                    pass
                else:   # a prefix may itself be valid only if it re-encodes to exactly that prefix
                    assert cls.decode(data[:cut], v).encode(v) == data[:cut]
        with pytest.raises(DecodeError):
            cls.decode(data + b"\x00", v)
    with pytest.raises(DecodeError):
        REQUESTS[0].decode(b"", 14)


def test_fields_outside_their_version_are_dropped_and_defaulted():
    produce = RESPONSES[0]
    resp = produce(responses=[produce.TopicProduceResponse(name="t", partition_responses=[
        produce.TopicProduceResponse.PartitionProduceResponse(index=0, base_offset=5, log_start_offset=3)])])
    back = produce.decode(resp.encode(4), 4)       # log_start_offset is v5+
    part = back.responses[0].partition_responses[0]
    assert part.base_offset == 5 and part.log_start_offset == -1 and part.log_append_time_ms == -1
    with pytest.raises(EncodeError):
        REQUESTS[3](topics=None).encode(0)          # null topics only from v1


# -- hand-checked golden bytes -------------------------------------------------------------------
def H(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


def test_golden_produce_v3_and_v9():
    req = REQUESTS[0]
    obj = req(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        req.TopicProduceData(name="t", partition_data=[
            req.TopicProduceData.PartitionProduceData(index=0, records=b"\x01\x02\x03")])])
    v3 = H("ffff"                     # transactional_id null (int16 -1)
           "ffff" "00007530"          # acks -1, timeout_ms 30000
           "00000001" "0001" "74"     # 1 topic, name "t"
           "00000001" "00000000"      # 1 partition, index 0
           "00000003" "010203")       # records: int32 length + bytes
    assert obj.encode(3) == v3
    v9 = H("00" "ffff" "00007530" "02" "0274" "02" "00000000" "04010203" "00" "00" "00")
    # null compact string; acks; timeout; compact array of 1; compact "t"; 1 partition; index;
    # compact records (len+1); partition tags; topic tags; top-level tags
    assert obj.encode(9) == v9
    assert req.decode(v9, 9) == obj and req.decode(v3, 3) == obj


def test_golden_produce_response_v10_tagged_current_leader():
    resp = RESPONSES[0]
    P = resp.TopicProduceResponse.PartitionProduceResponse
    obj = resp(responses=[resp.TopicProduceResponse(name="t", partition_responses=[
        P(index=0, error_code=6, base_offset=-1,
          current_leader=P.LeaderIdAndEpoch(leader_id=2, leader_epoch=7))])], throttle_time_ms=0)
    expected = H("02" "0274" "02"                     # 1 topic "t", 1 partition
                 "00000000" "0006" "ffffffffffffffff"  # index, NOT_LEADER_OR_FOLLOWER, base_offset -1
                 "ffffffffffffffff" "ffffffffffffffff"  # log_append_time_ms, log_start_offset defaults
                 "01" "00"                            # record_errors empty, error_message null
                 "01" "00" "09" "00000002" "00000007" "00"  # 1 tag: 0, size 9, leader 2, epoch 7, tags
                 "00"                                 # topic tags
                 "00000000"                           # throttle_time_ms
                 "00")                                # no node_endpoints -> no top-level tags
    assert obj.encode(10) == expected
    assert resp.decode(expected, 10) == obj


def test_golden_fetch_v4_and_v12():
    req = REQUESTS[1]
    FP = req.FetchTopic.FetchPartition
    obj = req(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=0x7FFFFFFF, isolation_level=1,
              topics=[req.FetchTopic(topic="t", partitions=[
                  FP(partition=0, current_leader_epoch=5, fetch_offset=100, partition_max_bytes=1 << 20)])])
    v4 = H("ffffffff" "000001f4" "00000001" "7fffffff" "01"  # replica, wait, min, max, read_committed
           "00000001" "0001" "74"                           # 1 topic "t"
           "00000001" "00000000" "0000000000000064" "00100000")  # 1 partition: 0, offset 100, 1 MiB
    assert obj.encode(4) == v4
    obj.cluster_id = "c"                                     # tag 0 of the v12+ request
    v12 = H("ffffffff" "000001f4" "00000001" "7fffffff" "01"
            "00000000" "ffffffff"                            # session_id 0, session_epoch -1
            "02" "0274" "02"                                 # 1 topic "t", 1 partition
            "00000000" "00000005" "0000000000000064"         # partition, current_leader_epoch, offset
            "ffffffff" "ffffffffffffffff" "00100000" "00"    # last_fetched_epoch, log_start, max, tags
            "00"                                             # topic tags
            "01"                                             # forgotten_topics_data: empty
            "01"                                             # rack_id ""
            "01" "00" "02" "0263")                           # 1 tag: 0, size 2, compact "c"
    assert obj.encode(12) == v12
    back = req.decode(v12, 12)
    assert back.cluster_id == "c" and back == obj


def test_golden_metadata_v1_and_v9():
    req = REQUESTS[3]
    assert req(topics=[req.MetadataRequestTopic(name="t")]).encode(1) == H("00000001" "0001" "74")
    assert req(topics=None).encode(1) == H("ffffffff")
    assert req(topics=None, allow_auto_topic_creation=True).encode(9) == H("00" "01" "00" "00" "00")

    resp = RESPONSES[3]
    T, B = resp.MetadataResponseTopic, resp.MetadataResponseBroker
    obj = resp(brokers=[B(node_id=1, host="h", port=9092)], cluster_id="c", controller_id=1,
               topics=[T(name="t", partitions=[T.MetadataResponsePartition(
                   partition_index=0, leader_id=1, replica_nodes=[1], isr_nodes=[1])])])
    v1 = H("00000001" "00000001" "0001" "68" "00002384" "ffff"  # broker 1 "h":9092 rack null
           "00000001"                                          # controller_id
           "00000001" "0000" "0001" "74" "00"                  # topic "t", not internal
           "00000001" "0000" "00000000" "00000001"             # partition 0, leader 1
           "00000001" "00000001" "00000001" "00000001")        # replicas [1], isr [1]
    assert obj.encode(1) == v1
    v9 = H("00000000"                                          # throttle_time_ms
           "02" "00000001" "0268" "00002384" "00" "00"         # broker, rack null, tags
           "0263" "00000001"                                   # cluster_id "c", controller 1
           "02" "0000" "0274" "00"                             # topic "t", not internal
           "02" "0000" "00000000" "00000001" "ffffffff"        # partition 0, leader 1, epoch -1
           "0200000001" "0200000001" "01" "00"                 # replicas, isr, offline [], tags
           "80000000" "00"                                     # topic_authorized_operations, tags
           "80000000" "00")                                    # cluster_authorized_operations, tags
    assert obj.encode(9) == v9
    assert resp.decode(v9, 9) == obj
    # v1 has no cluster_id: decoding gives the default
    assert resp.decode(v1, 1).cluster_id is None


def test_golden_api_versions_v0_and_v3():
    req, resp = REQUESTS[18], RESPONSES[18]
    assert req().encode(0) == b""
    r3 = req(client_software_name="kohort", client_software_version="0.1")
    assert r3.encode(3) == H("07" "6b6f686f7274" "04" "302e31" "00")
    obj = resp(error_code=0, api_keys=[resp.ApiVersion(api_key=18, min_version=0, max_version=4)])
    assert obj.encode(0) == H("0000" "00000001" "0012" "0000" "0004")
    obj.finalized_features_epoch = 5
    assert obj.encode(3) == H("0000" "02" "0012" "0000" "0004" "00" "00000000"
                              "01" "01" "08" "0000000000000005")   # tag 1 (finalized epoch)
    assert resp.decode(obj.encode(3), 3) == obj


# -- agreement with kafka-python 3.0.12 ----------------------------------------------------------
def _kp_class(cls):
    mod = APIS[cls.__module__.rsplit(".", 1)[1]][1]
    return getattr(importlib.import_module(mod), cls.__name__)


def _kp_prim(type_str, rng, tagged_default=None):
    while True:
        v = {
            "int8": lambda: rng.randint(-128, 127),
            "int16": lambda: rng.randint(-(1 << 15), (1 << 15) - 1),
            "uint16": lambda: rng.randint(0, 0xFFFF),
            "int32": lambda: rng.randint(-(1 << 31), (1 << 31) - 1),
            "int64": lambda: rng.randint(-(1 << 63), (1 << 63) - 1),
            "float64": lambda: rng.uniform(-1e9, 1e9),
            "bool": lambda: rng.random() < 0.5,
            "uuid": lambda: uuid.UUID(int=rng.getrandbits(128)),
            "string": lambda: rng.choice(["", "a", "topic-é", "y" * rng.randint(1, 140)]),
            "bytes": lambda: bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 5, 130]))),
            "records": lambda: bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 5, 130]))),
            # kafka-python's view of *_authorized_operations (an int32 on the wire) as a set of bits
            "bitfield": lambda: set(rng.sample(range(31), rng.randint(0, 5))),
        }[type_str]()
        if tagged_default is None or v != tagged_default:
            return v


def _kp_fill(struct_field, version, flexible, rng, depth=0):
    """kwargs for a kafka-python data class, walking kafka-python's own parse of the JSON spec."""
    kw = {}
    for fld in struct_field._fields:
        if not fld.for_version_q(version):
            continue
        tagged = fld.tagged_field_q(version)
        if tagged and not flexible:
            continue
        if fld.nullable_for_version_q(version) and rng.random() < 0.25 and not tagged:
            kw[fld.name] = None
        elif fld.is_struct_array():
            n = rng.randint(0, 2 if depth < 3 else 0)
            if tagged and n == 0:
                n = 1
            kw[fld.name] = [fld.data_class(**_kp_fill(fld.array_of, version, flexible, rng, depth + 1))
                            for _ in range(n)]
        elif fld.is_struct():
            kw[fld.name] = fld.data_class(**_kp_fill(fld, version, flexible, rng, depth + 1))
        elif fld.is_array():
            n = rng.randint(1 if tagged else 0, 3)
            kw[fld.name] = [_kp_prim(fld.array_of.type_str, rng) for _ in range(n)]
        else:
            # a tagged field equal to its default is not written by either side; avoid it
            kw[fld.name] = _kp_prim(fld.type_str, rng, fld.default if tagged else None)
    return kw


# kafka-python's mechanical snake_case of "Enable2Pc", and its renamed bitfield views
_KP_NAMES = {"enable_2pc": "enable2_pc", "topic_authorized_operations": "authorized_operations",
             "cluster_authorized_operations": "authorized_operations"}


def _same_values(ours, theirs, version, flexible, path):
    """Field-by-field: what kohort decoded equals what kafka-python encoded (catches wrong tags too)."""
    assert not ours.__dict__.get("_unknown_tags"), f"{path}: unexpected tags {ours._unknown_tags}"
    for fld in type(ours).FIELDS:
        if not _in(fld.versions, version) or (fld.tag is not None and not flexible):
            continue
        a = getattr(ours, fld.name)
        b = getattr(theirs, _KP_NAMES.get(fld.name, fld.name))
        where = f"{path}.{fld.name}"
        t = fld.type
        if isinstance(b, set) or (b is None and fld.name.endswith("authorized_operations")):
            bits = sum(1 << i for i in (b if b is not None else {31}))
            b = bits - (1 << 32) if bits >= 1 << 31 else bits
        if isinstance(t, Array) and isinstance(t.item, _StructType) and a is not None and b is not None:
            assert len(a) == len(b), where
            for i, (x, y) in enumerate(zip(a, b)):
                _same_values(x, y, version, flexible, f"{where}[{i}]")
        elif isinstance(t, _StructType) and a is not None and b is not None:
            _same_values(a, b, version, flexible, where)
        elif t is RECORDS and a is not None:
            assert bytes(a) == b, where
        else:
            if b is None and fld.tag is not None:   # kafka-python leaves unset tagged fields at None
                b = fld.default
            assert a == b, where


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_kafka_python_bytes_decode_and_reencode_identically(case):
    cls, v = case
    kp = _kp_class(cls)
    assert kp.API_KEY == cls.API_KEY
    if v > kp.max_version:
        pytest.skip(f"kafka-python defines {kp.__name__} only up to v{kp.max_version}")
    rng = random.Random(f"kp-{cls.__name__}-{v}")
    flexible = kp.flexible_version_q(v)
    assert flexible == cls.is_flexible(v)
    for _ in range(6):
        kw = _kp_fill(kp._struct, v, flexible, rng)
        if cls is RESPONSES[18]:
            # kafka-python decodes an ApiVersions response carrying an error as v0 (KIP-511 fallback)
            kw["error_code"] = 0
        msg = kp(version=v, **kw)
        data = msg.encode(version=v)
        ours = cls.decode(data, v)
        _same_values(ours, msg, v, flexible, cls.__name__)
        assert ours.encode(v) == data
        # and kafka-python reads our encoding back to an equal message
        assert kp.decode(ours.encode(v), version=v) == msg


def _old_value(t, rng, depth=0):
    from kafka.protocol.old import types as T
    if isinstance(t, T.Schema):
        return tuple(_old_value(ft, rng, depth + 1) for ft in t.fields)
    if isinstance(t, T.Array):           # CompactArray too
        return [_old_value(t.array_of, rng, depth + 1) for _ in range(rng.randint(0, 2 if depth < 4 else 0))]
    if isinstance(t, T.String):          # CompactString too
        return rng.choice(["", "t", "node-ø"])
    kind = t if isinstance(t, type) else type(t)
    if kind is T.TaggedFields:
        return {}
    if kind is T.BitField:
        return set(rng.sample(range(31), 2))
    gen = {T.Int8: 7, T.Int16: 15, T.Int32: 31, T.Int64: 63}
    if kind in gen:
        return rng.randint(-(1 << gen[kind]), (1 << gen[kind]) - 1)
    if kind is T.Boolean:
        return rng.random() < 0.5
    if kind is T.Float64:
        return rng.uniform(-1e6, 1e6)
    if kind is T.UUID:
        return uuid.UUID(int=rng.getrandbits(128))
    if kind in (T.Bytes, T.CompactBytes):
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 4])))
    raise AssertionError(f"no generator for {t!r}")


# kafka-python's hand-written DescribeAcls v2 reuses the v1 (non-compact) schema although Kafka's spec
# makes v2 flexible; its JSON-based classes (tested above) get v2 right.
OLD_KNOWN_BAD = {"DescribeAclsRequest_v2", "DescribeAclsResponse_v2"}


def _old_classes():
    import inspect
    import pkgutil
    import kafka.protocol.old as old
    out = {}
    for info in pkgutil.iter_modules(old.__path__):
        mod = importlib.import_module(f"kafka.protocol.old.{info.name}")
        for name, c in inspect.getmembers(mod, inspect.isclass):
            key, ver = getattr(c, "API_KEY", None), getattr(c, "API_VERSION", None)
            if key in MAX_VERSION and isinstance(ver, int) and "_v" in name and name not in OLD_KNOWN_BAD:
                kind = "Request" if "Request" in name else "Response"
                out[(key, kind, ver)] = c
    return sorted(out.items(), key=lambda kv: kv[0])


OLD = _old_classes()


def test_old_handwritten_classes_exist_for_most_apis():
    assert len(OLD) > 60 and {k for (k, _, _), _ in OLD} >= {0, 1, 2, 3, 18, 19, 20, 22, 23, 32, 36}


@pytest.mark.parametrize("item", OLD, ids=lambda kv: f"{kv[1].__name__}-{kv[1].__module__.rsplit('.', 1)[1]}")
def test_kafka_python_old_handwritten_classes_agree(item):
    """kafka.protocol.old holds kafka-python's hand-written (pre-JSON) structs: independent of the spec
    files, and the only kafka-python encoders for some versions Kafka 4.x removed."""
    (key, kind, v), old_cls = item
    ours = (REQUESTS if kind == "Request" else RESPONSES)[key]
    rng = random.Random(f"old-{old_cls.__name__}-{v}")
    for _ in range(4):
        data = old_cls(*_old_value(old_cls.SCHEMA, rng)).encode()
        assert ours.decode(data, v).encode(v) == data


def _norm(rng):
    if rng is None or rng == (-1, -1):
        return None
    lo, hi = rng
    return (lo, min(hi, 32767))


def _compare_schema(fields, kp_fields, path):
    theirs = {f.name: f for f in kp_fields}
    names = [_KP_NAMES.get(f.name, f.name) for f in fields]
    assert names == [f.name for f in kp_fields], path
    for fld in fields:
        kf = theirs[_KP_NAMES.get(fld.name, fld.name)]
        where = f"{path}.{fld.name}"
        assert _norm(fld.versions) == _norm(kf._versions), where
        ours_null = _norm(fld.nullable) if fld.nullable[0] <= fld.nullable[1] else None
        assert ours_null == _norm(kf._nullable_versions), where
        assert fld.tag == kf.tag, where
        t = fld.type
        if isinstance(t, Array) and isinstance(t.item, _StructType):
            _compare_schema(t.item.cls.FIELDS, kf.array_of._fields, where)
        elif isinstance(t, _StructType):
            _compare_schema(t.cls.FIELDS, kf._fields, where)
        elif not isinstance(t, Array) and getattr(kf, "type_str", "") != "bitfield":
            assert t.name == kf.type_str, where
            default = kf.default
            if isinstance(default, uuid.UUID) or t is UUID:
                default = default or uuid.UUID(int=0)
            if t is RECORDS and default == b"":
                default = None       # kafka-python's bytes default; kohort keeps absent records as null
            assert fld.default == default, where


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_schema_matches_kafka_python_parse_of_the_json_spec(cls):
    """Names, order, versions, nullability, tags, types and defaults, against kafka-python's own
    parse of Kafka's JSON; this also covers versions kafka-python does not encode round-trip."""
    kp = _kp_class(cls)
    _compare_schema(cls.FIELDS, kp._struct._fields, cls.__name__)
