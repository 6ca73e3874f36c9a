"""confluent-kafka-python's API over kohort's client: change `import confluent_kafka` (or
`from confluent_kafka import ...`) to `kohort.compat.confluent_kafka` and the program runs on kohort.

    from kohort.compat.confluent_kafka import Consumer, Producer, KafkaError, KafkaException, TopicPartition
    from kohort.compat.confluent_kafka.admin import AdminClient, NewTopic, NewPartitions

What lives where: `_types.py` (KafkaError with librdkafka's codes, KafkaException, TopicPartition, Message,
OFFSET_* constants, ClusterMetadata), `_config.py` (librdkafka config names → Kafka's), `_common.py`
(logger/log_level/debug, error_cb, stats_cb), `_consumer.py`, `_producer.py`, `_share.py` (ShareConsumer,
AcknowledgeType, Messages, IllegalStateException: KIP-932 share groups), `admin.py`. What is offered
and what is not: README's "confluent-kafka compatibility" section.
"""
from ._consumer import Consumer
from ._producer import Producer
from ._share import AcknowledgeType, IllegalStateException, Messages, ShareConsumer
from ._types import (
    OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Message, TopicPartition,
)
from .admin import AdminClient, ConsumerGroupState, ConsumerGroupTopicPartitions, NewPartitions, NewTopic, Node, TopicCollection

import kohort as _kohort


def version():
    v = getattr(_kohort, "__version__", "0")
    return (f"kohort-compat-{v}", 0)


def libversion():
    return ("kohort", 0)


__all__ = ["AcknowledgeType", "IllegalStateException", "Messages", "ShareConsumer", "AdminClient", "Consumer", "ConsumerGroupState", "ConsumerGroupTopicPartitions", "Node", "TopicCollection", "KafkaError", "KafkaException", "Message", "NewPartitions", "NewTopic",
           "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "Producer",
           "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE", "TopicPartition",
           "libversion", "version"]
