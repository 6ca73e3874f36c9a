"""The Spark source's driver and executor logic against a real kohort broker, without a SparkSession:
offset resolution (earliest/latest/JSON/timestamp/group), admission control through
latestOffset(start, limit), Trigger.AvailableNow, and data-loss classification (retention-deleted
range vs recreated topic) with failOnDataLoss on and off, plus the executor read path (read_range).
Data is produced with confluent-kafka; records are deleted with a DeleteRecords request."""
import time

import confluent_kafka as ck
import pytest

from kohort.spark import planning as P
from kohort.spark.compat import ReadAllAvailable, ReadMaxRows
from kohort.spark.options import parse_source_options
from kohort.spark.source import DataLossError, KohortStreamReader, RangePartition, read_range, _Driver
from kohort.spark.wire import Cluster
from tests.helpers.brokers import KohortBroker


@pytest.fixture(scope="module")
def addr():
    with KohortBroker() as b:
        yield b.bootstrap


_n = iter(range(10_000))


def topic_with(addr, counts: dict, ts0: int | None = None, batch_size: int | None = None) -> str:
    """A new topic whose partition p holds counts[p] records 'p-i', timestamps ts0 + i (if given),
    in record batches of at most `batch_size` bytes (if given)."""
    name = f"d{next(_n)}"
    with Cluster({"bootstrap.servers": addr}) as c:
        c.create_topics({name: len(counts)})
    p = ck.Producer({"bootstrap.servers": addr, "linger.ms": 2, "log_level": 0,
                     **({"batch.size": batch_size} if batch_size else {})})
    for part, n in counts.items():
        for i in range(n):
            kw = {"timestamp": ts0 + i} if ts0 is not None else {}
            p.produce(name, b"%d-%d" % (part, i), partition=part, **kw)
    assert p.flush(30) == 0
    return name


def reader(addr, **opts) -> KohortStreamReader:
    return KohortStreamReader(parse_source_options({"kafka.bootstrap.servers": addr, **opts}), clock=time.time)


def test_starting_offsets_resolution(addr):
    t = topic_with(addr, {0: 10, 1: 4}, ts0=1_000_000)

    def start(**o):
        return P.decode_offsets(reader(addr, subscribe=t, **o).initialOffset())[0]
    assert start() == {(t, 0): 10, (t, 1): 4}                       # streaming default: latest
    assert start(startingOffsets="earliest") == {(t, 0): 0, (t, 1): 0}
    assert start(startingOffsets=f'{{"{t}":{{"0":3,"1":-1}}}}') == {(t, 0): 3, (t, 1): 4}
    assert start(startingTimestamp="1000002") == {(t, 0): 2, (t, 1): 2}
    with pytest.raises(Exception, match="missing"):
        start(startingOffsets=f'{{"{t}":{{"0":3}}}}')
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        start(startingOffsetsByTimestamp=f'{{"{t}":{{"0":1000002,"1":9000000}}}}')
    assert start(startingOffsetsByTimestamp=f'{{"{t}":{{"0":1000002,"1":9000000}}}}',
                 startingOffsetsByTimestampStrategy="latest") == {(t, 0): 2, (t, 1): 4}
    with Cluster({"bootstrap.servers": addr}) as c:
        c.commit_offsets("grp-" + t, {(t, 0): 7})
    assert start(startingOffsets="group", **{"kafka.group.id": "grp-" + t}) == {(t, 0): 7, (t, 1): 0}


def test_admission_control_and_available_now(addr):
    t = topic_with(addr, {0: 60, 1: 20})
    r = reader(addr, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger="40")
    assert r.getDefaultReadLimit() == ReadMaxRows(40)
    start = r.initialOffset()
    end1 = r.latestOffset(start, ReadMaxRows(40))
    assert P.decode_offsets(end1)[0] == {(t, 0): 30, (t, 1): 10}         # split by lag 60:20
    parts = r.partitions(start, end1)
    assert [(p.partition, p.from_offset, p.until_offset) for p in parts] == [(0, 0, 30), (1, 0, 10)]
    end2 = r.latestOffset(end1, ReadAllAvailable())                    # ignores the option
    assert P.decode_offsets(end2)[0] == {(t, 0): 60, (t, 1): 20}
    assert r.latestOffset(end2, ReadMaxRows(40)) == end2               # nothing new: same offset back
    assert P.decode_offsets(r.reportLatestOffset())[0] == {(t, 0): 60, (t, 1): 20}
    # Trigger.AvailableNow: records produced after prepareForTriggerAvailableNow are not admitted
    r2 = reader(addr, subscribe=t, startingOffsets="earliest")
    s2 = r2.initialOffset()
    r2.prepareForTriggerAvailableNow()
    p = ck.Producer({"bootstrap.servers": addr, "log_level": 0})
    p.produce(t, b"late", partition=0)
    p.flush(10)
    assert P.decode_offsets(r2.latestOffset(s2, ReadAllAvailable()))[0] == {(t, 0): 60, (t, 1): 20}


def test_legacy_latest_offset_call_of_pyspark_4_0_and_4_1(addr, caplog):
    """PySpark 4.0/4.1 call latestOffset() with no start and no limit, a new query before initialOffset(),
    and take everything it answers (under Trigger.AvailableNow its first answer is the query's end), so
    the reader answers with all available; a restarted query is first told its checkpoint offset through
    partitions(S, S)."""
    t = topic_with(addr, {0: 60, 1: 20})
    r = reader(addr, subscribe=t, startingOffsets="earliest", maxOffsetsPerTrigger="40")
    end1 = r.latestOffset()
    assert P.decode_offsets(end1)[0] == {(t, 0): 60, (t, 1): 20}
    assert "no admission control" in caplog.text
    assert P.decode_offsets(r.initialOffset())[0] == {(t, 0): 0, (t, 1): 0}
    assert r.initialOffset() == r.initialOffset()                     # resolved once
    parts = r.partitions(r.initialOffset(), end1)
    assert [(p.partition, p.from_offset, p.until_offset) for p in parts] == [(0, 0, 60), (1, 0, 20)]
    assert r.latestOffset() == end1                                    # nothing new
    p = ck.Producer({"bootstrap.servers": addr, "log_level": 0})
    p.produce(t, b"more", partition=1)
    assert p.flush(10) == 0
    assert P.decode_offsets(r.latestOffset())[0] == {(t, 0): 60, (t, 1): 21}
    # a restart: Spark hands the checkpoint's offset over as partitions(S, S) before asking for more
    r2 = reader(addr, subscribe=t, startingOffsets="latest")
    s = P.encode_offsets({(t, 0): 50, (t, 1): 20})
    assert r2.partitions(s, s) == []
    end = r2.latestOffset()
    assert P.decode_offsets(end)[0] == {(t, 0): 60, (t, 1): 21}
    assert [(p.partition, p.from_offset, p.until_offset) for p in r2.partitions(s, end)] == [(0, 50, 60), (1, 20, 21)]


def test_min_offsets_per_trigger_waits_for_delay(addr):
    t = topic_with(addr, {0: 5})
    now = [1000.0]
    r = KohortStreamReader(parse_source_options({"kafka.bootstrap.servers": addr, "subscribe": t,
                                                 "startingOffsets": "earliest", "minOffsetsPerTrigger": "50",
                                                 "maxTriggerDelay": "10s"}), clock=lambda: now[0])
    s = r.initialOffset()
    from kohort.spark.compat import ReadMinRows
    assert r.getDefaultReadLimit() == ReadMinRows(50)
    assert r.latestOffset(s, ReadMinRows(50)) == s          # 5 < 50 and no delay passed
    now[0] += 11
    assert P.decode_offsets(r.latestOffset(s, ReadMinRows(50)))[0] == {(t, 0): 5}


def test_executor_read_range_exact_records(addr):
    t = topic_with(addr, {0: 500})
    opts = parse_source_options({"kafka.bootstrap.servers": addr, "subscribe": t})
    with Cluster(opts.client_config) as c:
        rows = [v for rb in read_range(opts, RangePartition(t, 0, 123, 377), cluster=c)
                for v in rb.column("value").to_pylist()]
    assert rows == [b"0-%d" % i for i in range(123, 377)]


def test_split_partitions_read_in_offset_order_and_cover_the_range_once(addr, monkeypatch):
    # one busy partition and one small one, on 4 cores: the busy one becomes several Spark
    # partitions; small fetches make each piece take many fetches, each sent before the previous
    # answer is decoded
    t = topic_with(addr, {0: 3000, 1: 40}, batch_size=400)
    monkeypatch.setattr(P, "MIN_OFFSETS_PER_SPLIT", 100)
    opts = {"subscribe": t, "startingOffsets": "earliest", "kafka.max.partition.fetch.bytes": "1024"}
    r = KohortStreamReader(parse_source_options({"kafka.bootstrap.servers": addr, **opts}), clock=time.time,
                           default_parallelism=4)
    start = r.initialOffset()
    end = r.latestOffset(start, ReadAllAvailable())
    parts = r.partitions(start, end)
    busy = [p for p in parts if p.partition == 0]
    assert len(busy) == 3 and [p for p in parts if p.partition == 1] == [RangePartition(t, 1, 0, 40)]
    assert busy[0].from_offset == 0 and busy[-1].until_offset == 3000
    assert all(a.until_offset == b.from_offset for a, b in zip(busy, busy[1:]))
    got = {}
    with Cluster(r.opts.client_config) as c:
        for p in parts:
            batches = list(read_range(r.opts, p, cluster=c))
            assert p.partition == 1 or len(batches) > 1   # one RecordBatch per fetch answer
            offsets = [o for rb in batches for o in rb.column("offset").to_pylist()]
            assert offsets == list(range(p.from_offset, p.until_offset))
            got[(p.partition, p.from_offset)] = [v for rb in batches for v in rb.column("value").to_pylist()]
    vals0 = [v for (part, _), vs in sorted(got.items()) if part == 0 for v in vs]
    assert vals0 == [b"0-%d" % i for i in range(3000)]
    assert got[(1, 0)] == [b"1-%d" % i for i in range(40)]
    # an option set: spark-sql-kafka's rule, one task per Kafka partition here
    one = KohortStreamReader(parse_source_options({"kafka.bootstrap.servers": addr, **opts, "minPartitions": "2"}),
                             clock=time.time, default_parallelism=4)
    assert len(one.partitions(start, end)) == 2


def test_read_ahead_that_times_out_while_spark_holds_the_task_is_fetched_again(addr):
    # the task is suspended (Spark not taking batches) longer than the request timeout: the Fetch
    # sent ahead expires and its connection closes; reading goes on from the same offset, nothing
    # lost or repeated
    t = topic_with(addr, {0: 600}, batch_size=400)
    opts = parse_source_options({"kafka.bootstrap.servers": addr, "subscribe": t,
                                 "kafka.max.partition.fetch.bytes": "2048", "kafka.request.timeout.ms": "1000"})
    offsets = []
    with Cluster(opts.client_config) as c:
        for i, rb in enumerate(read_range(opts, RangePartition(t, 0, 0, 600), cluster=c)):
            offsets.extend(rb.column("offset").to_pylist())
            if i in (1, 3):
                time.sleep(2.5)
    assert offsets == list(range(600))


def _delete_records(addr, t, part, before):
    """DeleteRecords (API 21) to the single node: what retention does to a log's head."""
    from kohort.protocol.messages.delete_records import DeleteRecordsRequest as D
    from tests.helpers.rawclient import RawClient
    c = RawClient(addr)
    try:
        resp = c.request(D(topics=[D.DeleteRecordsTopic(name=t, partitions=[
            D.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=part, offset=before)])], timeout_ms=10000))
    finally:
        c.close()
    assert resp.topics[0].partitions[0].error_code == 0


def test_retention_loss_is_named_and_failondataloss_decides(addr):
    t = topic_with(addr, {0: 100})
    r = reader(addr, subscribe=t, startingOffsets="earliest")
    start = r.initialOffset()
    _delete_records(addr, t, 0, 40)
    with pytest.raises(DataLossError, match=r"records 0\.\.39 of .* deleted by retention"):
        r.latestOffset(start, ReadAllAvailable())
    lenient = reader(addr, subscribe=t, startingOffsets="earliest", failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadAllAvailable())
    parts = lenient.partitions(start, end)
    # Spark hands the checkpointed start back; the executor skips the deleted range
    opts = lenient.opts
    with Cluster(opts.client_config) as c:
        vals = [v for p in parts for rb in read_range(opts, p, cluster=c) for v in rb.column("value").to_pylist()]
    assert vals == [b"0-%d" % i for i in range(40, 100)]
    # the executor, too, tells retention loss apart when it meets it
    strict = parse_source_options({"kafka.bootstrap.servers": addr, "subscribe": t})
    with Cluster(strict.client_config) as c, pytest.raises(DataLossError, match="retention"):
        list(read_range(strict, RangePartition(t, 0, 10, 100), cluster=c))


def test_recreated_topic_is_not_called_retention(addr):
    t = topic_with(addr, {0: 30})
    r = reader(addr, subscribe=t, startingOffsets="earliest")
    start = r.initialOffset()
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": addr})
    for f in admin.delete_topics([t]).values():
        f.result(15)
    deadline = time.monotonic() + 20
    while True:
        try:
            for f in admin.create_topics([NewTopic(t, 1, 1)]).values():
                f.result(15)
            break
        except ck.KafkaException:                  # the old topic may still be being deleted
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with pytest.raises(DataLossError, match="deleted and recreated"):
        r.latestOffset(start, ReadAllAvailable())
    p = ck.Producer({"bootstrap.servers": addr, "log_level": 0})
    for i in range(3):
        p.produce(t, b"new-%d" % i, partition=0)
    p.flush(10)
    lenient = reader(addr, subscribe=t, failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadAllAvailable())
    offsets, ids = P.decode_offsets(end)
    assert offsets == {(t, 0): 3} and ids[t] != P.decode_offsets(start)[1][t]
    # the old topic's offset 30 means nothing in the new one: it is read from its start
    assert [(q.from_offset, q.until_offset) for q in lenient.partitions(start, end)] == [(0, 3)]


def test_driver_lists_pattern_and_assign(addr):
    a = topic_with(addr, {0: 1, 1: 1})
    d = _Driver(parse_source_options({"kafka.bootstrap.servers": addr, "subscribePattern": a + "$"}))
    assert d.topic_partitions() == [(a, 0), (a, 1)]
    d2 = _Driver(parse_source_options({"kafka.bootstrap.servers": addr, "assign": f'{{"{a}":[1,7]}}'}))
    assert d2.topic_partitions() == [(a, 1)]


def test_transaction_markers_are_gaps_not_loss(tansu, caplog):
    """Transactions through librdkafka on Tansu: commit markers take offsets but hold no data record;
    read_range returns exactly the data records and names the holes as not being data loss."""
    import logging
    with Cluster({"bootstrap.servers": tansu}) as c:
        c.create_topics({"txgaps": 1})
    p = ck.Producer({"bootstrap.servers": tansu, "transactional.id": "kohort-txgaps", "log_level": 0})
    p.init_transactions(30)
    for batch in ([b"c%d" % i for i in range(5)], [b"d0", b"d1"]):
        p.begin_transaction()
        for v in batch:
            p.produce("txgaps", v, partition=0)
        p.commit_transaction(30)
    for iso in ("read_uncommitted", "read_committed"):
        o = parse_source_options({"kafka.bootstrap.servers": tansu, "subscribe": "txgaps",
                                  "kafka.isolation.level": iso})
        with Cluster(o.client_config) as c, caplog.at_level(logging.INFO, logger="kohort.spark"):
            end = c.offset_bounds([("txgaps", 0)], 1 if iso == "read_committed" else 0)[("txgaps", 0)][1]
            assert end == 9                                  # 7 records + 2 commit markers
            vals = [v for rb in read_range(o, RangePartition("txgaps", 0, 0, end), cluster=c)
                    for v in rb.column("value").to_pylist()]
        assert vals == [b"c0", b"c1", b"c2", b"c3", b"c4", b"d0", b"d1"]
        assert "2 offsets hold no data record" in caplog.text and "not data loss" in caplog.text
        caplog.clear()


def test_batch_plan_by_timestamps(addr):
    from kohort.spark.source import KohortBatchReader
    t = topic_with(addr, {0: 50, 1: 50}, ts0=2_000_000)

    def plan(**o):
        rd = KohortBatchReader(parse_source_options({"kafka.bootstrap.servers": addr, "subscribe": t, **o},
                                                    batch=True))
        return [(r.partition, r.from_offset, r.until_offset) for r in rd.plan()]
    assert plan() == [(0, 0, 50), (1, 0, 50)]
    assert plan(startingTimestamp="2000010", endingTimestamp="2000040") == [(0, 10, 40), (1, 10, 40)]
    assert plan(startingOffsetsByTimestamp=f'{{"{t}":{{"0":2000005,"1":2000045}}}}',
                endingOffsetsByTimestamp=f'{{"{t}":{{"0":2000020,"1":9999999}}}}') == [(0, 5, 20), (1, 45, 50)]
    # sizes 30 and 50 of 80 with minPartitions 4: round(1.5) = 2 and round(2.5) = 3 pieces (Spark rounds
    # half up, so the task count is "approximately" minPartitions)
    assert plan(endingOffsets=f'{{"{t}":{{"0":30,"1":-1}}}}', minPartitions="4") == \
        [(0, 0, 15), (0, 15, 30), (1, 0, 16), (1, 16, 33), (1, 33, 50)]
    with pytest.raises(Exception, match="before starting offset"):
        plan(startingOffsets=f'{{"{t}":{{"0":40,"1":0}}}}', endingOffsets=f'{{"{t}":{{"0":30,"1":-1}}}}')


def test_batch_ending_offsets_past_the_log_end_fail_at_planning(addr):
    """spark-sql-kafka's executor fails such a range with "Could not read records in offset [10, 20)"
    (failOnDataLoss=false: reads up to the latest offset); kohort says so while planning, at once --
    it used to wait kafkaConsumer.pollTimeoutMs (120 s) and then blame an unclean leader election."""
    from kohort.spark.source import KohortBatchReader
    t = topic_with(addr, {0: 10, 1: 5})

    def reader_(**o):
        return KohortBatchReader(parse_source_options({"kafka.bootstrap.servers": addr, "subscribe": t,
                                                       "endingOffsets": f'{{"{t}":{{"0":20,"1":-1}}}}', **o},
                                                      batch=True))
    with pytest.raises(DataLossError) as ei:
        reader_().plan()
    msg = str(ei.value)
    assert f"{t}-0 up to offset 20, but its latest offset is 10" in msg and "[10, 20) do not exist" in msg
    assert "failOnDataLoss=false" in msg and "unclean" not in msg
    lenient = reader_(failOnDataLoss="false")
    ranges = lenient.plan()
    assert [(r.partition, r.from_offset, r.until_offset) for r in ranges] == [(0, 0, 10), (1, 0, 5)]
    with Cluster(lenient.opts.client_config) as c:
        part = RangePartition(t, 0, 0, 10)
        vals = [v for rb in read_range(lenient.opts, part, cluster=c) for v in rb.column("value").to_pylist()]
    assert vals == [b"0-%d" % i for i in range(10)]


def test_starting_offsets_past_the_log_end_are_named_not_called_truncation(addr):
    t = topic_with(addr, {0: 10})
    starting = f'{{"{t}":{{"0":50}}}}'
    r = reader(addr, subscribe=t, startingOffsets=starting)
    with pytest.raises(DataLossError) as ei:
        r.initialOffset()
    assert "from offset 50, but its latest offset is 10" in str(ei.value) and "unclean" not in str(ei.value)
    lenient = reader(addr, subscribe=t, startingOffsets=starting, failOnDataLoss="false")
    assert P.decode_offsets(lenient.initialOffset())[0] == {(t, 0): 10}
