"""get_watermark_offsets.py-style: list_topics(topic, timeout=), committed(), get_watermark_offsets(), OFFSET_INVALID."""
import sys

import confluent_kafka

brokers, group = sys.argv[1:3]
consumer = confluent_kafka.Consumer({'bootstrap.servers': brokers, 'group.id': group})
print("%-50s  %9s  %9s" % ("Topic [Partition]", "Committed", "Lag"))
for topic in sys.argv[3:]:
    metadata = consumer.list_topics(topic, timeout=10)
    if metadata.topics[topic].error is not None:
        raise confluent_kafka.KafkaException(metadata.topics[topic].error)
    partitions = [confluent_kafka.TopicPartition(topic, p) for p in metadata.topics[topic].partitions]
    committed = consumer.committed(partitions, timeout=10)
    for partition in sorted(committed, key=lambda p: p.partition):
        (lo, hi) = consumer.get_watermark_offsets(partition, timeout=10, cached=False)
        offset = "-" if partition.offset == confluent_kafka.OFFSET_INVALID else "%d" % partition.offset
        lag = "%d" % (hi - lo) if partition.offset < 0 else "%d" % (hi - partition.offset)
        print("%-50s  %9s  %9s" % ("{} [{}]".format(partition.topic, partition.partition), offset, lag))
consumer.close()
