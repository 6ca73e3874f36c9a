"""aiokafka 0.14's public API over kohort.aio: change `import aiokafka` / `from aiokafka import ...` to
`kohort.compat.aiokafka` and the program runs on kohort's asyncio client.

AIOKafkaProducer, AIOKafkaConsumer, ConsumerRebalanceListener, the structs (ConsumerRecord,
TopicPartition, OffsetAndMetadata, OffsetAndTimestamp, RecordMetadata in `structs`) and the errors by
aiokafka's names (`errors`). AIOKafkaClient (aiokafka's internal connection pool) has no equivalent:
kohort.aio's own client is `kohort.aio.AIOClient`.
"""
from kohort.compat.aiokafka.abc import ConsumerRebalanceListener
from kohort.compat.aiokafka.consumer import AIOKafkaConsumer
from kohort.compat.aiokafka.errors import ConsumerStoppedError, IllegalOperation
from kohort.compat.aiokafka.producer import AIOKafkaProducer
from kohort.compat.aiokafka.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

__version__ = "0.14.0"

__all__ = ["AIOKafkaConsumer", "AIOKafkaProducer", "ConsumerRebalanceListener", "ConsumerRecord",
           "ConsumerStoppedError", "IllegalOperation", "OffsetAndMetadata", "OffsetAndTimestamp", "TopicPartition"]
