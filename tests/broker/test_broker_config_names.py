"""Altering a topic config with a misspelt name is refused with INVALID_CONFIG naming the right one."""
import asyncio

from kohort.errors import ErrorCode
from kohort.protocol.messages.alter_configs import AlterConfigsRequest as A
from kohort.protocol.messages.create_topics import CreateTopicsRequest as C
from kohort.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as R
from tests.helpers.broker_wire import Wire, running_broker


def test_misspelt_config_names_the_right_one(tmp_path):
    async def go():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await w.call(C(timeout_ms=5000, topics=[C.CreatableTopic(name="t", num_partitions=1,
                                                                     replication_factor=1)]), 5)
            inc = R.AlterConfigsResource(resource_type=2, resource_name="t", configs=[
                R.AlterConfigsResource.AlterableConfig(name="retention.mss", config_operation=0, value="1")])
            r = (await w.call(R(resources=[inc]), 1)).responses[0]
            assert r.error_code == ErrorCode.INVALID_CONFIG and "'retention.ms'" in r.error_message
            old = A.AlterConfigsResource(resource_type=2, resource_name="t", configs=[
                A.AlterConfigsResource.AlterableConfig(name="cleanup.polcy", value="compact")])
            r = (await w.call(A(resources=[old]), 1)).responses[0]
            assert r.error_code == ErrorCode.INVALID_CONFIG and "'cleanup.policy'" in r.error_message
            assert b.storage.topic("t").config.get("cleanup.policy") != "compact"
            await w.close()
    asyncio.run(go())
