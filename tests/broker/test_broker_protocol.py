"""The broker's handlers over a real socket (in-process Broker, raw kohort framing): error codes,
idempotent producer checks, fetch long polls and sessions, offsets, configs, admin APIs."""
from __future__ import annotations

import asyncio
import time
import uuid


from kohort.broker.handlers import HANDLERS
from kohort.errors import ErrorCode as E
from kohort.protocol.messages.api_versions import ApiVersionsRequest
from kohort.protocol.messages.create_partitions import CreatePartitionsRequest
from kohort.protocol.messages.create_topics import CreateTopicsRequest
from kohort.protocol.messages.delete_records import DeleteRecordsRequest
from kohort.protocol.messages.delete_topics import DeleteTopicsRequest
from kohort.protocol.messages.describe_cluster import DescribeClusterRequest
from kohort.protocol.messages.describe_configs import DescribeConfigsRequest
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from kohort.protocol.messages.produce import ProduceRequest
from kohort.protocol.records import iter_records
from tests.helpers.broker_wire import Wire, batch, running_broker

ZERO_ID = uuid.UUID(int=0)

CT = CreateTopicsRequest.CreatableTopic
PT = ProduceRequest.TopicProduceData
FT = FetchRequest.FetchTopic


def run(coro):
    return asyncio.run(coro)


async def create(w, name, partitions=1, configs=None, version=7, validate_only=False, rf=1):
    cfgs = [CT.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()]
    resp = await w.call(CreateTopicsRequest(topics=[CT(name=name, num_partitions=partitions,
                                                       replication_factor=rf, assignments=[], configs=cfgs)],
                                            timeout_ms=1000, validate_only=validate_only), version)
    return resp.topics[0]


async def produce(w, topic, records, partition=0, acks=-1, version=9):
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[
        PT(name=topic, partition_data=[PT.PartitionProduceData(index=partition, records=records)])])
    if acks == 0:
        await w.send(req, version, expect_response=False)
        return None
    resp = await w.call(req, version)
    return resp.responses[0].partition_responses[0]


def fetch_req(topic, offset, partition=0, max_wait=0, min_bytes=1, max_bytes=1 << 20, pmax=1 << 20,
              session_id=0, session_epoch=-1, topic_id=None, forgotten=()):
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=0, session_id=session_id, session_epoch=session_epoch,
                        topics=[] if topic is None else [FT(topic=topic, topic_id=topic_id, partitions=[
                            FT.FetchPartition(partition=partition, fetch_offset=offset,
                                              partition_max_bytes=pmax)])],
                        forgotten_topics_data=list(forgotten), rack_id="")


def values(records) -> list[bytes]:
    return [r[3] for r in iter_records(bytes(records or b""))]


def test_api_versions_advertise_exactly_the_handlers(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            resp = await w.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
            got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert got == {k: (h.advertised_min, h.max_version) for k, h in HANDLERS.items()}
            assert got[0] == (0, 12) and got[1] == (4, 17) and got[3] == (0, 13)
            # Produce v2 is advertised (KAFKA-18659) but refused: the connection closes
            await w.send(ProduceRequest(acks=1, timeout_ms=1, topic_data=[]), 2, expect_response=False)
            assert await asyncio.wait_for(w.reader.read(), 5) == b""
    run(main())


def test_create_topics_errors_and_validate_only(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            r = await create(w, "a", 3, {"cleanup.policy": "compact"})
            assert r.error_code == 0 and r.num_partitions == 3 and r.topic_id.int != 0
            assert {c.name: (c.value, c.config_source) for c in r.configs}["cleanup.policy"] == ("compact", 1)
            assert (await create(w, "a")).error_code == E.TOPIC_ALREADY_EXISTS
            assert (await create(w, "b", 0)).error_code == E.INVALID_PARTITIONS
            assert (await create(w, "b", 1, rf=3)).error_code == E.INVALID_REPLICATION_FACTOR
            r = await create(w, "b", 1, {"retention.ms": "soon"})
            assert r.error_code == E.INVALID_CONFIG and "retention.ms" in r.error_message
            assert (await create(w, "b", 1, {"no.such": "1"})).error_code == E.INVALID_CONFIG
            assert (await create(w, "bad name!")).error_code == E.INVALID_TOPIC_EXCEPTION
            assert (await create(w, "c", 2, validate_only=True)).error_code == 0
            assert not b.storage.has_topic("c")
            r = await w.call(CreateTopicsRequest(topics=[CT(name="d", num_partitions=1, replication_factor=1),
                                                         CT(name="d", num_partitions=1, replication_factor=1)],
                                                 timeout_ms=1), 4)
            assert [t.error_code for t in r.topics] == [E.INVALID_REQUEST] * 2
            r = await create(w, "e", -1, rf=-1)     # broker defaults (KIP-464)
            assert r.error_code == 0 and r.num_partitions == 1
    run(main())


def test_produce_validation(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "t", 1, {"max.message.bytes": "300"})
            good = batch(3)
            assert (await produce(w, "t", good)).base_offset == 0
            bad = bytearray(good)
            bad[-1] ^= 0xFF
            assert (await produce(w, "t", bytes(bad))).error_code == E.CORRUPT_MESSAGE
            legacy = bytearray(good)
            legacy[16] = 1
            assert (await produce(w, "t", bytes(legacy))).error_code == E.INVALID_RECORD
            assert (await produce(w, "t", good + good)).error_code == E.INVALID_RECORD
            # as Kafka: a client's batch starts at offset 0; one with a producer id has a sequence
            assert (await produce(w, "t", batch(2, base_offset=4))).error_code == E.INVALID_RECORD
            no_seq = batch(2, producer_id=9, producer_epoch=0, base_sequence=-1)
            assert (await produce(w, "t", no_seq)).error_code == E.INVALID_RECORD
            assert (await produce(w, "t", batch(40))).error_code == E.MESSAGE_TOO_LARGE
            assert (await produce(w, "nope", good)).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
            assert (await produce(w, "t", good, partition=7)).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
            assert (await produce(w, "t", good, acks=2)).error_code == E.INVALID_REQUIRED_ACKS
            # acks=0: no response, and the next answer still carries the next correlation id
            await produce(w, "t", batch(2), acks=0)
            r = await produce(w, "t", batch(1))
            assert r.error_code == 0 and r.base_offset == 5
            assert b.storage.log("t", 0).log_end_offset == 6
    run(main())


def test_idempotent_producer_sequences_survive_restart(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "i")
            r = await w.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 4)
            pid, epoch = r.producer_id, r.producer_epoch
            r2 = await w.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 4)
            assert r2.producer_id != pid

            def b_(seq, n=2, ep=epoch):
                return batch(n, producer_id=pid, producer_epoch=ep, base_sequence=seq)
            assert (await produce(w, "i", b_(0))).base_offset == 0
            assert (await produce(w, "i", b_(2))).base_offset == 2
            dup = await produce(w, "i", b_(0))          # retried: original offset, nothing appended
            assert (dup.error_code, dup.base_offset) == (0, 0)
            assert b.storage.log("i", 0).log_end_offset == 4
            assert (await produce(w, "i", b_(7))).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert (await produce(w, "i", b_(4))).base_offset == 4
        async with running_broker(tmp_path) as b:    # state rebuilt from the log
            w = await Wire.connect(b)
            dup = await produce(w, "i", b_(4))
            assert (dup.error_code, dup.base_offset) == (0, 4)
            assert (await produce(w, "i", b_(9))).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert (await produce(w, "i", b_(1, ep=epoch + 1))).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert (await produce(w, "i", b_(0, ep=epoch + 1))).base_offset == 6
            assert (await produce(w, "i", b_(6))).error_code == E.INVALID_PRODUCER_EPOCH
            r = await w.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 4)
            assert r.producer_id > pid + 1              # ids are never reused after a restart
            r = await w.call(InitProducerIdRequest(transactional_id="", transaction_timeout_ms=1000), 4)
            assert r.error_code == E.INVALID_REQUEST
    run(main())


def test_fetch_long_poll_is_woken_by_produce(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w, w2 = await Wire.connect(b), await Wire.connect(b)
            await create(w, "f")
            t0 = time.monotonic()
            r = await w.call(fetch_req("f", 0, max_wait=300), 12)
            assert 0.25 < time.monotonic() - t0 < 2        # nothing there: waited max_wait
            assert r.responses[0].partitions[0].records in (None, b"") or not r.responses[0].partitions[0].records
            pending = asyncio.ensure_future(w.call(fetch_req("f", 0, max_wait=5000), 12))
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            await produce(w2, "f", batch(3))
            r = await asyncio.wait_for(pending, 3)
            assert time.monotonic() - t0 < 1.0
            p = r.responses[0].partitions[0]
            assert (p.error_code, p.high_watermark, values(p.records)) == (0, 3, [b"v0", b"v1", b"v2"])
            # min_bytes larger than what is there waits for more
            pending = asyncio.ensure_future(w.call(fetch_req("f", 0, max_wait=5000, min_bytes=10_000), 12))
            await asyncio.sleep(0.1)
            await produce(w2, "f", batch(1, prefix="x" * 20_000))
            r = await asyncio.wait_for(pending, 3)
            assert len(values(r.responses[0].partitions[0].records)) == 4
    run(main())


def test_fetch_limits_and_out_of_range(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "m", 2)
            for i in range(3):
                await produce(w, "m", batch(5, prefix=f"b{i}-" + "y" * 200))
            await produce(w, "m", batch(2), partition=1)
            one = len(b.storage.log("m", 0).read(0, 1))
            # partition_max_bytes smaller than one batch: the first batch still comes back whole
            r = await w.call(fetch_req("m", 0, pmax=10), 12)
            assert len(r.responses[0].partitions[0].records) == one
            r = await w.call(fetch_req("m", 0, pmax=2 * one), 12)
            assert len(values(r.responses[0].partitions[0].records)) == 10
            # response max_bytes: only the first partition may exceed it
            req = fetch_req("m", 0, max_bytes=10)
            req.topics[0].partitions.append(FT.FetchPartition(partition=1, fetch_offset=0,
                                                              partition_max_bytes=1 << 20))
            r = await w.call(req, 12)
            p0, p1 = r.responses[0].partitions
            assert len(p0.records) == one and not p1.records and p1.high_watermark == 2
            r = await w.call(fetch_req("m", 99), 12)
            p = r.responses[0].partitions[0]
            assert (p.error_code, p.high_watermark, p.log_start_offset) == (E.OFFSET_OUT_OF_RANGE, 15, 0)
            r = await w.call(fetch_req("zz", 0), 12)
            assert r.responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    run(main())


def test_fetch_sessions_and_topic_ids(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "s", 2)
            await produce(w, "s", batch(2))
            tid = b.storage.topic("s").topic_id
            req = fetch_req(None, 0, session_id=0, session_epoch=0, topic_id=tid)
            req.topics = [FT(topic_id=tid, partitions=[
                FT.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in (0, 1)])]
            r = await w.call(req, 13)
            sid = r.session_id
            assert sid != 0 and r.error_code == 0
            assert [p.partition_index for p in r.responses[0].partitions] == [0, 1]
            assert r.responses[0].topic_id == tid
            # incremental, position of p0 moved to 2, nothing new: empty response
            inc = fetch_req(None, 0, session_id=sid, session_epoch=1)
            inc.topics = [FT(topic_id=tid, partitions=[FT.FetchPartition(partition=0, fetch_offset=2,
                                                                          partition_max_bytes=1 << 20)])]
            r = await w.call(inc, 13)
            assert r.error_code == 0 and r.responses == []
            # data on p1 only: only p1 comes back
            await produce(w, "s", batch(1), partition=1)
            inc = fetch_req(None, 0, session_id=sid, session_epoch=2)
            inc.topics = []
            r = await w.call(inc, 13)
            assert [(p.partition_index, p.high_watermark) for p in r.responses[0].partitions] == [(1, 1)]
            # forget p1, produce there: nothing returned
            inc = fetch_req(None, 0, session_id=sid, session_epoch=3,
                            forgotten=[FetchRequest.ForgottenTopic(topic_id=tid, partitions=[1])])
            inc.topics = []
            await produce(w, "s", batch(1), partition=1)
            r = await w.call(inc, 13)
            assert r.responses == []
            r = await w.call(fetch_req(None, 0, session_id=sid, session_epoch=9), 13)
            assert r.error_code == E.INVALID_FETCH_SESSION_EPOCH
            r = await w.call(fetch_req(None, 0, session_id=12345, session_epoch=1), 13)
            assert r.error_code == E.FETCH_SESSION_ID_NOT_FOUND
            import uuid
            req = fetch_req(None, 0)
            req.topics = [FT(topic_id=uuid.uuid4(), partitions=[FT.FetchPartition(partition=0, fetch_offset=0,
                                                                                  partition_max_bytes=100)])]
            r = await w.call(req, 13)
            assert r.responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_ID
    run(main())


def test_list_offsets_and_leader_epochs(tmp_path):
    LT = ListOffsetsRequest.ListOffsetsTopic

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "o")
            from kohort.protocol.records import build_batch
            await produce(w, "o", build_batch([(b"a", b"1", [], 1000), (b"b", b"2", [], 5000)]))
            await produce(w, "o", build_batch([(b"c", b"3", [], 3000)]))

            async def lo(ts, version=7):
                r = await w.call(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[LT(
                    name="o", partitions=[LT.ListOffsetsPartition(partition_index=0, timestamp=ts)])]), version)
                p = r.topics[0].partitions[0]
                return p.error_code, p.offset, p.timestamp
            assert await lo(-2) == (0, 0, -1)
            assert await lo(-1) == (0, 3, -1)
            assert await lo(-3) == (0, 1, 5000)
            assert await lo(2000) == (0, 1, 5000)
            assert await lo(5001) == (0, -1, -1)
            assert (await lo(-1, 1))[:2] == (0, 3)
            r = await w.call(DeleteRecordsRequest(topics=[DeleteRecordsRequest.DeleteRecordsTopic(
                name="o", partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                    partition_index=0, offset=2)])], timeout_ms=1000), 2)
            assert r.topics[0].partitions[0].low_watermark == 2
            assert await lo(-2) == (0, 2, -1)
            r = await w.call(fetch_req("o", 1), 12)
            assert r.responses[0].partitions[0].error_code == E.OFFSET_OUT_OF_RANGE
            OT = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
            r = await w.call(OffsetForLeaderEpochRequest(topics=[OT(topic="o", partitions=[
                OT.OffsetForLeaderPartition(partition=0, current_leader_epoch=0, leader_epoch=0)])]), 4)
            p = r.topics[0].partitions[0]
            assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 3)
            r = await w.call(OffsetForLeaderEpochRequest(topics=[OT(topic="o", partitions=[
                OT.OffsetForLeaderPartition(partition=0, current_leader_epoch=5, leader_epoch=0)])]), 4)
            assert r.topics[0].partitions[0].error_code == E.UNKNOWN_LEADER_EPOCH
    run(main())


def test_metadata_auto_create_and_topic_ids(tmp_path):
    MT = MetadataRequest.MetadataRequestTopic

    async def main():
        async with running_broker(tmp_path, {"num.partitions": "3"}) as b:
            w = await Wire.connect(b)
            r = await w.call(MetadataRequest(topics=[MT(name="auto")], allow_auto_topic_creation=True), 12)
            t = r.topics[0]
            assert t.error_code == 0 and len(t.partitions) == 3 and t.topic_id == b.storage.topic("auto").topic_id
            assert t.partitions[0].leader_id == b.node_id and t.partitions[0].leader_epoch == 0
            assert r.cluster_id == b.cluster_id and r.brokers[0].port == b.port
            r = await w.call(MetadataRequest(topics=[MT(name="noauto")], allow_auto_topic_creation=False), 12)
            assert r.topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
            user = lambda r: [t.name for t in r.topics if not t.is_internal]   # noqa: E731
            r = await w.call(MetadataRequest(topics=None), 12)
            assert user(r) == ["auto"]
            assert all(t.name.startswith("__") for t in r.topics if t.is_internal)
            r = await w.call(MetadataRequest(topics=[]), 0)      # v0: empty = all topics
            assert [t.name for t in r.topics if not t.name.startswith("__")] == ["auto"]
            cid = b.cluster_id
        async with running_broker(tmp_path) as b:
            assert b.cluster_id == cid
    run(main())


def test_metadata_partitions_follow_the_partition_count_and_the_leader_epoch(tmp_path):
    """Metadata's partition entries are shared between answers (built once per partition count, node
    and leader epoch): they follow CreatePartitions and the new leader epoch of a restarted broker."""
    MT = MetadataRequest.MetadataRequestTopic
    CP = CreatePartitionsRequest.CreatePartitionsTopic

    async def parts(w):
        r = await w.call(MetadataRequest(topics=[MT(name="m")], allow_auto_topic_creation=False), 12)
        return [(p.partition_index, p.leader_epoch) for p in r.topics[0].partitions]

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "m", 2)
            epoch = b.leader_epoch
            assert await parts(w) == [(0, epoch), (1, epoch)]
            r = await w.call(CreatePartitionsRequest(topics=[CP(name="m", count=5, assignments=None)],
                                                     timeout_ms=1, validate_only=False), 3)
            assert r.results[0].error_code == 0
            assert await parts(w) == [(p, epoch) for p in range(5)]
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            assert b.leader_epoch != epoch
            assert await parts(w) == [(p, b.leader_epoch) for p in range(5)]
    run(main())


def test_metadata_shared_answers_follow_topic_changes(tmp_path):
    """Answers to the same Metadata question are built and encoded once and shared; a topic created,
    deleted or re-created under the same name with the same partition count (a new topic id) is a
    new answer, never a stale one, for the all-topics form and the named form alike."""
    MT = MetadataRequest.MetadataRequestTopic

    async def named(w):
        r = await w.call(MetadataRequest(topics=[MT(name="s")], allow_auto_topic_creation=False), 12)
        return [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in r.topics]

    async def listed(w):
        r = await w.call(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
        return sorted((t.name, t.topic_id) for t in r.topics if not t.name.startswith("__"))

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            assert await listed(w) == []
            await create(w, "s", 2)
            first = await named(w)
            tid = first[0][2]
            assert first == [(0, "s", tid, 2)] and await named(w) == first
            assert await listed(w) == [("s", tid)]
            r = await w.call(DeleteTopicsRequest(topic_names=["s"], timeout_ms=1), 4)
            assert r.responses[0].error_code == 0
            assert await named(w) == [(E.UNKNOWN_TOPIC_OR_PARTITION, "s", ZERO_ID, 0)]
            assert await listed(w) == []
            await create(w, "s", 2)
            again = await named(w)
            assert again[0][2] not in (tid, ZERO_ID) and again == [(0, "s", again[0][2], 2)]
            assert await listed(w) == [("s", again[0][2])]
    run(main())


def test_configs_describe_alter_and_admin(tmp_path):
    RES = DescribeConfigsRequest.DescribeConfigsResource
    AR = IncrementalAlterConfigsRequest.AlterConfigsResource
    AC = AR.AlterableConfig

    async def main():
        async with running_broker(tmp_path, {"log.retention.ms": "1000000"}) as b:
            w = await Wire.connect(b)
            await create(w, "c", 1, {"segment.bytes": "1048576"})

            async def describe(version=4, keys=None):
                r = await w.call(DescribeConfigsRequest(resources=[RES(resource_type=2, resource_name="c",
                                                                       configuration_keys=keys)],
                                                        include_synonyms=True, include_documentation=True), version)
                return {c.name: c for c in r.results[0].configs}
            d = await describe()
            assert (d["segment.bytes"].value, d["segment.bytes"].config_source) == ("1048576", 1)
            assert [(s.name, s.source) for s in d["segment.bytes"].synonyms] == [
                ("segment.bytes", 1), ("log.segment.bytes", 5)]
            assert (d["retention.ms"].value, d["retention.ms"].config_source) == ("1000000", 4)
            assert d["cleanup.policy"].config_type == 7 and d["cleanup.policy"].documentation
            assert list(await describe(keys=["retention.ms"])) == ["retention.ms"]
            d0 = await describe(version=0)
            assert d0["cleanup.policy"].is_default and not d0["segment.bytes"].is_default

            async def alter(*ops, validate_only=False):
                r = await w.call(IncrementalAlterConfigsRequest(resources=[AR(
                    resource_type=2, resource_name="c", configs=[AC(name=n, config_operation=o, value=v)
                                                                 for n, o, v in ops])],
                    validate_only=validate_only), 1)
                return r.responses[0].error_code
            assert await alter(("cleanup.policy", 2, "compact")) == 0
            assert b.storage.topic("c").config.cleanup_policy == "compact,delete"
            assert await alter(("cleanup.policy", 3, "delete")) == 0
            assert b.storage.topic("c").config.cleanup_policy == "compact"
            assert await alter(("segment.bytes", 1, None), ("retention.ms", 0, "5000")) == 0
            cfg = b.storage.topic("c").config
            assert (cfg.segment_bytes, cfg.retention_ms) == (1 << 30, 5000)
            assert await alter(("retention.ms", 0, "x")) == E.INVALID_CONFIG
            assert await alter(("retention.ms", 2, "1")) == E.INVALID_CONFIG
            assert await alter(("retention.ms", 0, "7"), validate_only=True) == 0
            assert b.storage.topic("c").config.retention_ms == 5000
            r = await w.call(DescribeConfigsRequest(resources=[RES(resource_type=4, resource_name="0",
                                                                   configuration_keys=None)]), 4)
            bc = {c.name: c for c in r.results[0].configs}
            assert bc["log.retention.ms"].value == "1000000" and bc["log.retention.ms"].config_source == 4
            r = await w.call(DescribeClusterRequest(include_cluster_authorized_operations=False), 1)
            assert (r.cluster_id, r.controller_id, r.brokers[0].port) == (b.cluster_id, 0, b.port)
            CP = CreatePartitionsRequest.CreatePartitionsTopic
            r = await w.call(CreatePartitionsRequest(topics=[CP(name="c", count=4, assignments=None)],
                                                     timeout_ms=1, validate_only=False), 3)
            assert r.results[0].error_code == 0 and b.storage.topic("c").num_partitions == 4
            r = await w.call(CreatePartitionsRequest(topics=[CP(name="c", count=2, assignments=None)],
                                                     timeout_ms=1, validate_only=False), 3)
            assert r.results[0].error_code == E.INVALID_PARTITIONS
            # a fetch parked on a topic is woken when it is deleted
            w2 = await Wire.connect(b)
            pending = asyncio.ensure_future(w2.call(fetch_req("c", 0, max_wait=10_000), 12))
            await asyncio.sleep(0.1)
            DT = DeleteTopicsRequest.DeleteTopicState
            tid = b.storage.topic("c").topic_id
            r = await w.call(DeleteTopicsRequest(topics=[DT(topic_id=tid)], timeout_ms=1), 6)
            assert (r.responses[0].error_code, r.responses[0].name) == (0, "c")
            r = await asyncio.wait_for(pending, 3)
            assert r.responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
            r = await w.call(DeleteTopicsRequest(topic_names=["c"], timeout_ms=1), 4)
            assert r.responses[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    run(main())


def test_log_append_time_topics_stamp_batches(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "lat", 1, {"message.timestamp.type": "LogAppendTime"})
            before = int(time.time() * 1000)
            r = await produce(w, "lat", batch(3))
            assert r.error_code == 0 and before <= r.log_append_time_ms <= int(time.time() * 1000)
            await create(w, "ct")
            assert (await produce(w, "ct", batch(1))).log_append_time_ms == -1
            f = await w.call(fetch_req("lat", 0), 12)
            from kohort.protocol.records import TIMESTAMP_LOG_APPEND_TIME, decode_batch, validate_batch
            recs = bytes(f.responses[0].partitions[0].records)
            h = validate_batch(recs)                         # CRC recomputed by the broker
            assert h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == r.log_append_time_ms
            _, records = decode_batch(recs)
            assert {x.timestamp for x in records} == {r.log_append_time_ms}
    run(main())


def test_concurrent_produce_requests_share_fsyncs(tmp_path):
    """fsync-before-ack: each acks=1/all answer comes after an fsync round that covered its append,
    and concurrent producers share rounds (group commit)."""
    async def main():
        async with running_broker(tmp_path) as b:
            ws = [await Wire.connect(b) for _ in range(16)]
            await create(ws[0], "gc", 8)
            r0, f0 = b.sync.rounds, b.storage.fsyncs
            assert (await produce(ws[0], "gc", batch(1))).error_code == 0
            assert b.sync.rounds == r0 + 1 and b.storage.fsyncs > f0       # waited for a round
            r0 = b.sync.rounds
            rs = await asyncio.gather(*[produce(w, "gc", batch(2), partition=i % 8) for i, w in enumerate(ws)])
            assert all(r.error_code == 0 for r in rs)
            assert b.sync.waiters_served >= 17
            assert b.sync.rounds - r0 < 16, b.sync.rounds - r0          # 16 requests, shared rounds
            await produce(ws[0], "gc", batch(1), acks=0)                # acks=0 does not wait
    run(main())


def test_policy_os_answers_without_fsync(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"log.flush.policy": "os"}) as b:
            w = await Wire.connect(b)
            await create(w, "os")
            assert (await produce(w, "os", batch(1))).error_code == 0
            assert b.sync.rounds == 0
    run(main())


def test_alter_configs_replaces_all_overrides(tmp_path):
    from kohort.protocol.messages.alter_configs import AlterConfigsRequest
    R = AlterConfigsRequest.AlterConfigsResource

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "ac", 1, {"retention.ms": "1000", "segment.bytes": "1048576"})
            r = await w.call(AlterConfigsRequest(resources=[R(resource_type=2, resource_name="ac", configs=[
                R.AlterableConfig(name="cleanup.policy", value="compact")])], validate_only=False), 2)
            assert r.responses[0].error_code == 0
            set_ = {n: v for n, v, is_default in b.storage.describe_configs("ac") if not is_default}
            assert set_ == {"cleanup.policy": "compact"}
            r = await w.call(AlterConfigsRequest(resources=[R(resource_type=4, resource_name="0", configs=[
                R.AlterableConfig(name="num.partitions", value="3")])], validate_only=False), 1)
            assert r.responses[0].error_code == E.INVALID_REQUEST
            r = await w.call(AlterConfigsRequest(resources=[R(resource_type=2, resource_name="nope", configs=[])],
                                                 validate_only=False), 1)
            assert r.responses[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    run(main())


def test_topic_compression_type_recompresses(tmp_path):
    from kohort.protocol.records import decode_batch
    from kohort.protocol.compression import COMPRESSION_GZIP, COMPRESSION_NONE, COMPRESSION_ZSTD

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "gz", 1, {"compression.type": "gzip"})
            await create(w, "raw", 1, {"compression.type": "uncompressed"})
            await create(w, "asis", 1)
            sent = batch(20, producer_id=5, producer_epoch=0, base_sequence=0)
            for topic in ("gz", "asis"):
                assert (await produce(w, topic, sent)).error_code == 0
            assert (await produce(w, "raw", batch(4, compression=COMPRESSION_ZSTD))).error_code == 0
            out = {}
            for topic in ("gz", "raw", "asis"):
                f = await w.call(fetch_req(topic, 0), 12)
                out[topic] = decode_batch(bytes(f.responses[0].partitions[0].records))
            h, recs = out["gz"]
            assert h.compression == COMPRESSION_GZIP and (h.producer_id, h.base_sequence) == (5, 0)
            assert [(r.key, r.value, r.timestamp) for r in recs] == [
                (r.key, r.value, r.timestamp) for r in out["asis"][1]]
            assert out["asis"][0].compression == COMPRESSION_NONE
            assert out["raw"][0].compression == COMPRESSION_NONE and len(out["raw"][1]) == 4
    run(main())


def test_idle_connections_are_closed_but_not_while_answering(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"connections.max.idle.ms": "300"}) as b:
            w = await Wire.connect(b)
            await create(w, "idle")
            # a long poll longer than the idle limit is not cut short
            r = await w.call(fetch_req("idle", 0, max_wait=900), 12)
            assert r.responses[0].partitions[0].error_code == 0
            t0 = time.monotonic()
            assert await asyncio.wait_for(w.reader.read(), 5) == b""          # then idle: closed
            assert time.monotonic() - t0 < 2
            # a half-sent frame (size prefix promising more) is reaped too
            r2, w2 = await asyncio.open_connection(b.host, b.port)
            w2.write(b"\x00\x00\x01\x00" + b"\x00" * 10)
            assert await asyncio.wait_for(r2.read(), 5) == b""
            assert b._conn_states == {}
    run(main())


def test_advertised_address():
    from kohort.broker.server import advertised_address
    assert advertised_address("", "127.0.0.1", 9) == ("127.0.0.1", 9)
    assert advertised_address("PLAINTEXT://kafka.example:9093,SSL://x:1", "0.0.0.0", 9) == ("kafka.example", 9093)
    host, port = advertised_address("", "0.0.0.0", 9)
    assert port == 9 and host not in ("0.0.0.0", "")


def test_metadata_advertises_the_configured_listener(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"advertised.listeners": "PLAINTEXT://kafka.example:19092"}) as b:
            w = await Wire.connect(b)      # connects to the listen address
            r = await w.call(MetadataRequest(topics=[]), 12)
            assert [(x.host, x.port) for x in r.brokers] == [("kafka.example", 19092)]
    run(main())


def test_failed_fsync_round_fails_the_produce_answers(tmp_path, monkeypatch):
    """fsync-before-ack: when the round covering an append fails, its Produce answers carry
    KAFKA_STORAGE_ERROR (no offset) instead of an acknowledgement; a request that wrote nothing
    keeps its own error; later requests are refused too (a failed fsync is sticky)."""
    from kohort.storage.fs import OsFileHandle

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "ff", 2)
            assert (await produce(w, "ff", batch(1))).error_code == 0

            def broken(self):
                raise OSError(5, "Input/output error")
            monkeypatch.setattr(OsFileHandle, "datasync", broken)
            try:
                req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
                    PT(name="ff", partition_data=[PT.PartitionProduceData(index=0, records=batch(2)),
                                                  PT.PartitionProduceData(index=5, records=batch(1))])])
                parts = (await w.call(req, 9)).responses[0].partition_responses
                assert [(p.index, p.error_code, p.base_offset) for p in parts] == [
                    (0, E.KAFKA_STORAGE_ERROR, -1), (5, E.UNKNOWN_TOPIC_OR_PARTITION, -1)]
                assert "fsync" in parts[0].error_message
                again = await produce(w, "ff", batch(1))
                assert again.error_code == E.KAFKA_STORAGE_ERROR and again.base_offset == -1
            finally:
                monkeypatch.undo()
    run(main())
