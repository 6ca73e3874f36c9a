"""The Spark source's pure parts: option parsing/validation, offset-range planning and splitting
(Spark's minPartitions / maxRecordsPerPartition rule), admission control, data-loss classification,
checkpoint offsets, and Arrow batches built from fetched record batches. No Spark session, no broker."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kohort.errors import ConfigError
from kohort.protocol import records as R
from kohort.spark import planning as P
from kohort.spark.arrow import ColumnBuilder, arrow_schema, next_fetch_offset, schema_ddl
from kohort.spark.options import parse_sink_options, parse_source_options

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


# -- options ---------------------------------------------------------------------------------------------
def test_subscribe_defaults_match_spark():
    o = parse_source_options({**BS, "subscribe": "a, b"})
    assert o.strategy == "subscribe" and o.topics == ("a", "b")
    assert o.starting_for(batch=False).kind == "latest" and o.starting_for(batch=True).kind == "earliest"
    assert o.ending_for_batch().kind == "latest"
    assert o.fail_on_data_loss and not o.include_headers and o.max_trigger_delay_ms == 15 * 60_000
    assert o.client_config == {"bootstrap.servers": "127.0.0.1:9092"}


def test_keys_are_case_insensitive_like_spark():
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBEPATTERN": "ev.*",
                              "startingoffsets": "earliest", "MAXOFFSETSPERTRIGGER": "10",
                              "includeheaders": "TRUE"})
    assert o.pattern == "ev.*" and o.starting.kind == "earliest" and o.max_offsets_per_trigger == 10
    assert o.include_headers


def test_assign_and_offsets_json():
    o = parse_source_options({**BS, "assign": '{"t":[0,1],"u":[2]}',
                              "startingOffsets": '{"t":{"0":5,"1":-2},"u":{"2":-1}}'})
    assert o.assign == (("t", 0), ("t", 1), ("u", 2))
    assert o.starting.kind == "offsets" and o.starting.offsets == {("t", 0): 5, ("t", 1): -2, ("u", 2): -1}


def test_timestamp_precedence():
    o = parse_source_options({**BS, "subscribe": "t", "startingOffsets": "earliest",
                              "startingOffsetsByTimestamp": '{"t":{"0":1000}}', "startingTimestamp": "42"})
    assert o.starting.kind == "timestamp" and o.starting.timestamp == 42
    o = parse_source_options({**BS, "subscribe": "t", "startingOffsets": "earliest",
                              "startingOffsetsByTimestamp": '{"t":{"0":1000}}'})
    assert o.starting.kind == "timestamps" and o.starting.offsets == {("t", 0): 1000}


@pytest.mark.parametrize("opts, words", [
    ({"subscribe": "t", "startingOffset": "earliest"}, ["startingOffset", "did you mean 'startingOffsets'"]),
    ({"subscribe": "t", "minPartition": "3"}, ["did you mean 'minPartitions'"]),
    ({"subscribe": "t", "kafka.fetch.max.byte": "1"}, ["fetch.max.byte", "fetch.max.bytes"]),
    ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, ["startingOffsets"]),
    ({"subscribe": "t", "kafka.enable.auto.commit": "true"}, ["kafka.group.id"]),
    ({}, ["exactly one of"]),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, ["exactly one of", "assign, subscribe"]),
    ({"assign": "[1]"}, ["assign"]),
    ({"assign": '{"t":["x"]}'}, ["list of partition numbers"]),
    ({"subscribePattern": "("}, ["regex"]),
    ({"subscribe": "t", "startingOffsets": "group"}, ["kafka.group.id"]),
    ({"subscribe": "t", "startingOffsets": "{bad"}, ["not valid JSON"]),
    ({"subscribe": "t", "endingOffsets": "latest"}, ["batch queries only"]),
    ({"subscribe": "t", "minPartitions": "0"}, ["positive integer"]),
    ({"subscribe": "t", "failOnDataLoss": "maybe"}, ["true or false"]),
    ({"subscribe": "t", "maxTriggerDelay": "soon"}, ["duration"]),
    ({"subscribe": "t", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, ["larger than"]),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "closest"}, ["error or latest"]),
])
def test_bad_stream_options_name_the_problem(opts, words):
    with pytest.raises(ConfigError) as ei:
        parse_source_options({**BS, **opts})
    for w in words:
        assert w in str(ei.value)


def test_bootstrap_required():
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        parse_source_options({"subscribe": "t"})


@pytest.mark.parametrize("opts, words", [
    ({"startingOffsets": "latest"}, ["not allowed for batch"]),
    ({"startingOffsets": '{"t":{"0":-1}}'}, ["latest (-1) is not allowed"]),
    ({"endingOffsets": '{"t":{"0":-2}}'}, ["earliest (-2) is not allowed"]),
    ({"endingOffsets": "earliest"}, ["not allowed"]),
])
def test_batch_only_rules(opts, words):
    with pytest.raises(ConfigError) as ei:
        parse_source_options({**BS, "subscribe": "t", **opts}, batch=True)
    for w in words:
        assert w in str(ei.value)


def test_durations_and_group_option():
    o = parse_source_options({**BS, "subscribe": "t", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "30s",
                              "kafka.group.id": "g", "startingOffsets": "group"})
    assert o.max_trigger_delay_ms == 30_000 and o.group_id == "g" and o.starting.kind == "group"


def test_sink_options():
    s = parse_sink_options({**BS, "topic": "out"})
    assert s.topic == "out" and s.client_config["bootstrap.servers"] == "127.0.0.1:9092"
    with pytest.raises(ConfigError, match="did you mean 'topic'"):
        parse_sink_options({**BS, "topics": "out"})
    with pytest.raises(ConfigError, match="acks"):
        parse_sink_options({**BS, "kafka.acks": "1"})
    with pytest.raises(ConfigError, match="value.serializer|serialized"):
        parse_sink_options({**BS, "kafka.value.serializer": "x"})


# -- range splitting ----------------------------------------------------------------------------------------
def R_(t, p, a, b):
    return P.OffsetRange(t, p, a, b)


def test_one_task_per_partition_when_enough_partitions():
    ranges = [R_("t", 0, 0, 100), R_("t", 1, 5, 5), R_("t", 2, 0, 10)]
    assert P.split_ranges(ranges) == [R_("t", 0, 0, 100), R_("t", 2, 0, 10)]   # empty range dropped
    assert P.split_ranges(ranges, min_partitions=2) == [R_("t", 0, 0, 100), R_("t", 2, 0, 10)]


def test_min_partitions_splits_equal_ranges():
    ranges = [R_("t", p, 0, 100) for p in range(3)]
    out = P.split_ranges(ranges, min_partitions=7)     # each share round(7/3)=2
    assert out == [R_("t", p, a, b) for p in range(3) for a, b in ((0, 50), (50, 100))]


def test_min_partitions_keeps_small_ranges_whole():
    ranges = [R_("big", 0, 0, 1000), R_("s", 0, 0, 10), R_("s", 1, 0, 10)]
    out = P.split_ranges(ranges, min_partitions=5)
    # small shares round to 1 and stay whole; the big range gets the remaining 3 parts
    assert out == [R_("big", 0, 0, 333), R_("big", 0, 333, 666), R_("big", 0, 666, 1000),
                   R_("s", 0, 0, 10), R_("s", 1, 0, 10)]


def test_max_records_per_partition():
    out = P.split_ranges([R_("t", 0, 0, 100), R_("t", 1, 0, 30)], max_records_per_partition=30)
    assert out == [R_("t", 0, 0, 25), R_("t", 0, 25, 50), R_("t", 0, 50, 75), R_("t", 0, 75, 100),
                   R_("t", 1, 0, 30)]
    both = P.split_ranges([R_("t", 0, 0, 100)], min_partitions=8, max_records_per_partition=50)
    assert len(both) == 8 and sum(r.size for r in both) == 100


def test_default_parallelism_splits_fewer_kafka_partitions_than_cores():
    n = P.MIN_OFFSETS_PER_SPLIT
    one = [R_("t", 0, 7, 7 + 3 * n)]
    assert P.task_ranges(one) == one                                      # parallelism unknown
    assert P.task_ranges(one, default_parallelism=2) == [R_("t", 0, 7, 7 + 3 * n // 2),
                                                         R_("t", 0, 7 + 3 * n // 2, 7 + 3 * n)]
    assert len(P.task_ranges(one, default_parallelism=8)) == 3            # no piece under n offsets
    assert P.task_ranges([R_("t", 0, 0, n + 5)], default_parallelism=8) == [R_("t", 0, 0, n + 5)]
    # enough Kafka partitions for the cores: one task each, as spark-sql-kafka
    three = [R_("t", p, 0, 2 * n) for p in range(3)]
    assert P.task_ranges(three, default_parallelism=2) == three
    # an option set: spark-sql-kafka's rule alone, whatever the parallelism
    assert P.task_ranges(one, min_partitions=1, default_parallelism=8) == one
    assert P.task_ranges(one, max_records_per_partition=2 * n, default_parallelism=8) == \
        P.split_ranges(one, max_records_per_partition=2 * n)
    # a big and a small partition on 4 cores: the small one stays whole
    mixed = [R_("big", 0, 0, 100), R_("s", 0, 0, 10)]
    assert P.task_ranges(mixed, default_parallelism=4, min_split_offsets=10) == [
        R_("big", 0, 0, 33), R_("big", 0, 33, 66), R_("big", 0, 66, 100), R_("s", 0, 0, 10)]
    assert P.task_ranges([R_("t", 0, 5, 5)], default_parallelism=4, min_split_offsets=1) == []


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
       parallelism=st.integers(1, 16), floor=st.integers(1, 2000))
def test_default_split_covers_every_offset_exactly_once_in_order(sizes, parallelism, floor):
    ranges = [R_("t", p, 10 * p, 10 * p + n) for p, n in enumerate(sizes)]
    out = P.task_ranges(ranges, default_parallelism=parallelism, min_split_offsets=floor)
    for p, n in enumerate(sizes):
        mine = [r for r in out if r.partition == p]
        assert mine == sorted(mine, key=lambda r: r.from_offset)           # planned in offset order
        covered = [o for r in mine for o in range(r.from_offset, r.until_offset)]
        assert covered == list(range(10 * p, 10 * p + n))
    assert all(r.size > 0 for r in out)
    assert len(out) >= sum(1 for n in sizes if n)                          # never fewer than one per partition


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
       min_parts=st.one_of(st.none(), st.integers(1, 40)),
       max_recs=st.one_of(st.none(), st.integers(1, 3000)))
def test_split_covers_every_offset_exactly_once(sizes, min_parts, max_recs):
    ranges = [R_("t", p, 10 * p, 10 * p + n) for p, n in enumerate(sizes)]
    out = P.split_ranges(ranges, min_parts, max_recs)
    for p, n in enumerate(sizes):
        mine = sorted((r for r in out if r.partition == p), key=lambda r: r.from_offset)
        covered = [o for r in mine for o in range(r.from_offset, r.until_offset)]
        assert covered == list(range(10 * p, 10 * p + n))
    assert all(r.size > 0 for r in out)
    if max_recs:
        assert all(r.size <= max_recs for r in out)


# -- admission control ------------------------------------------------------------------------------------------
def test_apportion_by_lag_largest_remainder():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 100, ("t", 1): 50, ("t", 2): 50}
    end = P.apportion(start, latest, 7)
    assert end == {("t", 0): 3, ("t", 1): 2, ("t", 2): 2}      # 3.5/1.75/1.75 -> 3+0, 1+1, 1+1
    assert P.apportion(start, latest, 1000) == latest
    assert P.total_lag(start, P.apportion(start, latest, 123)) == 123


@settings(max_examples=100, deadline=None)
@given(lags=st.lists(st.integers(0, 10_000), min_size=1, max_size=10), limit=st.integers(1, 20_000))
def test_apportion_admits_exactly_the_limit(lags, limit):
    start = {("t", p): 5 for p in range(len(lags))}
    latest = {("t", p): 5 + lag for p, lag in enumerate(lags)}
    end = P.apportion(start, latest, limit)
    assert P.total_lag(start, end) == min(limit, sum(lags))
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_trigger_gate_waits_for_min_or_delay():
    g = P.TriggerGate(min_offsets=100, delay_ms=1000, now_ms=0)
    assert not g.admit(50, now_ms=500)
    assert g.admit(50, now_ms=1000)          # delay passed since the last batch
    assert not g.admit(99, now_ms=1500)
    assert g.admit(100, now_ms=1600)
    assert not g.admit(0, now_ms=10_000)     # never an empty batch


# -- checkpoint offsets and data loss -------------------------------------------------------------------------
def test_offsets_round_trip():
    offs = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    enc = P.encode_offsets(offs, {"a": "id-a", "b": "id-b", "c": "unused"})
    assert enc == {"offsets": {"a": {"0": 5, "1": 7}, "b": {"0": 0}}, "topic_ids": {"a": "id-a", "b": "id-b"}}
    assert P.decode_offsets(enc) == (offs, {"a": "id-a", "b": "id-b"})
    with pytest.raises(ValueError):
        P.decode_offsets({"t": {"0": 1}})


def test_data_loss_kinds_are_told_apart():
    tp = ("t", 0)
    assert P.check_partition(tp, 50, 0, 100, "A", "A") is None
    assert P.check_partition(tp, 100, 0, 100, "A", "A") is None           # caught up
    ret = P.check_partition(tp, 10, 40, 100, "A", "A")
    assert ret.kind == P.RETENTION and ret.resume_at == 40 and "10..39" in ret.message and "retention" in ret.message
    rec = P.check_partition(tp, 10, 0, 3, "A", "B")
    assert rec.kind == P.RECREATED and rec.resume_at == 0 and "recreated" in rec.message
    gone = P.check_partition(tp, 10, None, None, "A", None)
    assert gone.kind == P.PARTITION_GONE and "no longer exists" in gone.message
    back = P.check_partition(tp, 80, 0, 60, "A", "A")
    assert back.kind == P.RESET and back.resume_at == 60 and "moved back" in back.message


# -- Arrow --------------------------------------------------------------------------------------------------
def _recs(n, base=0):
    return [(b"k%d" % i if i % 3 else None, b"v%d" % i, [("h", b"x")] if i % 2 else [], 1000 + i)
            for i in range(base, base + n)]


@pytest.mark.parametrize("c_ext", [True, False] if R.HAVE_EXTENSION else [False])
def test_arrow_columns_from_fetched_batches(c_ext):
    old = R.use_extension(c_ext)
    try:
        payload = (R.build_batch(_recs(5), base_offset=0)
                   + R.build_batch(_recs(5, 5), base_offset=5, compression=R.COMPRESSION_LZ4)
                   + R.build_batch(_recs(3, 10), base_offset=10, timestamp_type=R.TIMESTAMP_LOG_APPEND_TIME))
        b = ColumnBuilder("topic", 3, include_headers=True)
        assert b.add_payload(payload[:-5], 2, 12) == 10          # partial trailing batch ignored
        assert b.add_payload(payload, 10, 12) == 13
        rb = b.to_record_batch()
        assert rb.schema == arrow_schema(True)
        d = rb.to_pydict()
        assert d["offset"] == list(range(2, 12))
        assert d["value"] == [b"v%d" % i for i in range(2, 12)]
        assert d["key"] == [b"k%d" % i if i % 3 else None for i in range(2, 12)]
        assert set(d["topic"]) == {"topic"} and set(d["partition"]) == {3}
        assert d["timestampType"] == [0] * 8 + [1, 1]
        assert [t.timestamp() for t in d["timestamp"][:8]] == [(1000 + i) / 1000 for i in range(2, 10)]
        assert d["headers"][1] == [{"key": "h", "value": b"x"}] and d["headers"][0] == []
    finally:
        R.use_extension(old)


def test_read_committed_drops_aborted_transactions_and_markers():
    pid_ok, pid_bad = 7, 9
    payload = (R.build_batch(_recs(2, 0), base_offset=0, producer_id=pid_bad, producer_epoch=0,
                             base_sequence=0, transactional=True)
               + R.build_batch(_recs(2, 2), base_offset=2, producer_id=pid_ok, producer_epoch=0,
                               base_sequence=0, transactional=True)
               + R.build_control_batch(False, pid_bad, 0, base_offset=4)
               + R.build_control_batch(True, pid_ok, 0, base_offset=5)
               + R.build_batch(_recs(2, 6), base_offset=6))
    uncommitted = ColumnBuilder("t", 0)
    assert uncommitted.add_payload(payload, 0, 100) == 8
    assert uncommitted.to_record_batch().column("offset").to_pylist() == [0, 1, 2, 3, 6, 7]
    committed = ColumnBuilder("t", 0, read_committed=True)
    assert committed.add_payload(payload, 0, 100, [(pid_bad, 0)]) == 8
    assert committed.to_record_batch().column("offset").to_pylist() == [2, 3, 6, 7]


def test_next_fetch_offset_and_schema_ddl():
    payload = R.build_batch(_recs(4), base_offset=20)
    assert next_fetch_offset(payload) == (24, False)
    assert next_fetch_offset(payload[:30]) == (None, False)
    assert schema_ddl(False).split(", ")[-1] == "timestampType int"
    assert schema_ddl(True).endswith("headers array<struct<key:string,value:binary>>")
