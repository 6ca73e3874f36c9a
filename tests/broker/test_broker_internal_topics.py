"""`__consumer_offsets` belongs to the broker: clients can't append to it, delete it or grow it."""
import asyncio

from kohort.errors import ErrorCode
from kohort.protocol.messages.create_partitions import CreatePartitionsRequest
from kohort.protocol.messages.delete_topics import DeleteTopicsRequest
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.protocol.messages.produce import ProduceRequest
from tests.helpers.broker_wire import Wire, batch, running_broker

OFFSETS = "__consumer_offsets"


def test_internal_topic_is_protected(tmp_path):
    async def go():
        async with running_broker(tmp_path, {"offsets.topic.num.partitions": "3"}) as b:
            w = await Wire.connect(b)
            T = ProduceRequest.TopicProduceData
            resp = await w.call(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[T(
                name=OFFSETS, partition_data=[T.PartitionProduceData(index=0, records=batch(2))])]), 9)
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
            assert b.storage.log(OFFSETS, 0).log_end_offset == 0

            resp = await w.call(DeleteTopicsRequest(topic_names=[OFFSETS], timeout_ms=5000), 5)
            assert resp.responses[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
            resp = await w.call(CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
                name=OFFSETS, count=10)], timeout_ms=5000), 3)
            assert resp.results[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
            assert b.storage.topic(OFFSETS).num_partitions == 3

            md = await w.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=OFFSETS)]), 9)
            assert md.topics[0].is_internal
            await w.close()
    asyncio.run(go())
