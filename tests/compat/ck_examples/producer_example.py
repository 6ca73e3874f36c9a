"""producer.py-style: lines from stdin, callback=, poll(0), len(p), flush(); plus headers, key, partition."""
import sys

from confluent_kafka import Producer

broker, topic = sys.argv[1], sys.argv[2]
conf = {'bootstrap.servers': broker, 'queue.buffering.max.ms': 5}
p = Producer(**conf)
delivered = []


def delivery_callback(err, msg):
    if err:
        print('%% Message failed delivery: %s' % err.name())
    else:
        delivered.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                          msg.timestamp()[0]))


for i, line in enumerate(sys.stdin):
    try:
        p.produce(topic, line.rstrip(), key="k%d" % (i % 3), partition=i % 2, callback=delivery_callback,
                  headers={"n": str(i)} if i % 2 else [("n", str(i).encode())])
    except BufferError:
        print('%% Local producer queue is full (%d messages awaiting delivery): try again' % len(p))
    p.poll(0)

p.produce(topic, None, key=b"tombstone", partition=0, on_delivery=delivery_callback)
print('%% Waiting for deliveries: more than zero:', len(p) > 0)
left = p.flush(30)
print('flush left', left, 'len', len(p))
for d in sorted(delivered, key=lambda d: (d[1], d[2])):
    print('delivered to partition %d @ %d key %s value %s tstype %d' % (d[1], d[2], d[3], d[4], d[5]))
md = p.list_topics(topic, timeout=10)
print('partitions', sorted(md.topics[topic].partitions))
