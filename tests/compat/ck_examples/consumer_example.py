"""consumer.py-style: subscribe(on_assign=), poll(timeout=1.0), msg.error() with _PARTITION_EOF, value/key/
headers/offset, KafkaException; default.topic.config; commit(asynchronous=False); committed(); close()."""
import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

broker, group, topics = sys.argv[1], sys.argv[2], sys.argv[3:]
conf = {'bootstrap.servers': broker, 'group.id': group, 'session.timeout.ms': 6000,
        'enable.partition.eof': True, 'enable.auto.commit': False,
        'default.topic.config': {'auto.offset.reset': 'smallest'}}
c = Consumer(conf)
assigned = []


def print_assignment(consumer, partitions):
    assigned.extend(partitions)
    print('Assignment:', sorted((p.topic, p.partition) for p in partitions))


c.subscribe(topics, on_assign=print_assignment)
eof = set()
got = []
try:
    while not assigned or len(eof) < len(assigned):
        msg = c.poll(timeout=1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                eof.add((msg.topic(), msg.partition(), msg.offset()))
            else:
                raise KafkaException(msg.error())
        else:
            got.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers(),
                        msg.timestamp()[0] in (1, 2), len(msg)))
    for e in sorted(eof):
        print('%% %s [%d] reached end at offset %d' % e)
    for g in sorted(got):
        print('%s [%d] at offset %d with key %s: %s headers %s ts %s len %d' % g)
    done = c.commit(asynchronous=False)
    print('committed', sorted((tp.topic, tp.partition, tp.offset) for tp in done))
    parts = [TopicPartition(t, p) for t, p, _ in sorted(eof)]
    print('committed()', sorted((tp.topic, tp.partition, tp.offset) for tp in c.committed(parts, timeout=10)))
    print('position()', sorted((tp.topic, tp.partition, tp.offset) for tp in c.position(parts)))
    try:
        c.commit(offsets=[TopicPartition(topics[0], 99, 5)], asynchronous=False)
    except KafkaException as e:
        print('commit to a missing partition:', e.args[0].name())
finally:
    c.close()
