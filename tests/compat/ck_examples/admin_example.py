"""adminapi.py-style: NewTopic/NewPartitions, {name: future}, list_topics metadata, errors by name."""
import sys

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from confluent_kafka import KafkaException, TopicCollection

broker, topic = sys.argv[1], sys.argv[2]
a = AdminClient({'bootstrap.servers': broker})

fs = a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)], request_timeout=15.0)
for t, f in fs.items():
    f.result()
    print("Topic {} created".format(t))

for t, f in a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).items():
    try:
        f.result()
        print("unexpected: created twice")
    except KafkaException as e:
        print("Failed to create topic {}: {}".format(t, e.args[0].name()))

for t, f in a.create_partitions([NewPartitions(topic, 4)], validate_only=False).items():
    f.result()
    print("Additional partitions created for topic {}".format(t))

import time
deadline = time.monotonic() + 10
md = a.list_topics(timeout=10)
while len(md.topics[topic].partitions) < 4 and time.monotonic() < deadline:   # Kafka's metadata catches up
    time.sleep(0.1)
    md = a.list_topics(timeout=10)
print("cluster has brokers:", len(md.brokers) >= 1, "controller known:", md.controller_id >= 0)
for b in md.brokers.values():
    assert b.host and b.port > 0
t = md.topics[topic]
print("topic {} with {} partition(s), error {}".format(t, len(t.partitions), t.error))
for p in sorted(t.partitions.values(), key=lambda p: p.id):
    print("  partition {} leader known {} replicas {} isrs {} errstr {}".format(
        p.id, p.leader in md.brokers, len(p.replicas), len(p.isrs), p.error))

for name, f in a.describe_topics(TopicCollection([topic, topic + "-missing"]), request_timeout=10).items():
    try:
        d = f.result()
        print("describe_topics", d.name, d.is_internal, "topic id set", d.topic_id is not None,
              [(p.id, p.leader.id == p.replicas[0].id, len(p.replicas), len(p.isr)) for p in d.partitions])
    except KafkaException as e:
        print("describe_topics", name, e.args[0].name())
missing = a.list_topics(topic + "-missing", timeout=10).topics[topic + "-missing"]
print("missing topic error:", missing.error.name() if missing.error else None)

for t, f in a.delete_topics([topic], operation_timeout=30).items():
    f.result()
    print("Topic {} deleted".format(t))
for t, f in a.delete_topics([topic + "-missing"], operation_timeout=30).items():
    try:
        f.result()
    except KafkaException as e:
        print("Failed to delete topic {}: {}".format(t, e.args[0].name()))
