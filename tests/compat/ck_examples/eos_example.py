"""eos-transactions.py-style: consume-transform-produce in a transaction (init_transactions,
begin_transaction, send_offsets_to_transaction with consumer_group_metadata(), commit_transaction), then an
aborted transaction; the output read back with isolation.level=read_committed."""
import sys

import confluent_kafka

brokers, group, in_topic, out_topic = sys.argv[1:5]
consumer = confluent_kafka.Consumer({'bootstrap.servers': brokers, 'group.id': group,
                                     'auto.offset.reset': 'earliest', 'enable.auto.commit': False,
                                     'isolation.level': 'read_committed'})
producer = confluent_kafka.Producer({'bootstrap.servers': brokers, 'transactional.id': group + '-txn'})
producer.init_transactions(30)
consumer.subscribe([in_topic])
producer.begin_transaction()
copied = 0
for _ in range(120):
    msg = consumer.poll(0.5)
    if msg is None or msg.error():
        continue
    producer.produce(out_topic, (msg.value() or b"<null>").upper(), key=msg.key())
    copied += 1
    if copied == 8:                    # the 8 records producer_example.py wrote (one a tombstone)
        break
positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
producer.commit_transaction(30)
print("committed a transaction of %d records" % copied)
producer.begin_transaction()
producer.produce(out_topic, b"NEVER-SEEN")
producer.flush(10)
producer.abort_transaction(30)
print("aborted a transaction of 1 record")
consumer.close()

reader = confluent_kafka.Consumer({'bootstrap.servers': brokers, 'group.id': group + '-reader',
                                   'auto.offset.reset': 'earliest', 'isolation.level': 'read_committed'})
reader.subscribe([out_topic])
values = []
for _ in range(30):                    # read until quiet: an aborted record would show up here
    msg = reader.poll(0.5)
    if msg is not None and not msg.error():
        values.append(msg.value().decode())
    elif len(values) >= 8:
        break
reader.close()
print("read_committed:", " ".join(sorted(values)))
check = confluent_kafka.Consumer({'bootstrap.servers': brokers, 'group.id': group})
meta = check.list_topics(in_topic, timeout=10)
committed = check.committed([confluent_kafka.TopicPartition(in_topic, p) for p in meta.topics[in_topic].partitions],
                            timeout=10)
print("committed offsets add up to %d" % sum(max(tp.offset, 0) for tp in committed))
check.close()
