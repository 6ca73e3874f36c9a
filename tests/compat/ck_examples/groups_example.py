"""adminapi.py-style group calls: describe_cluster, list_consumer_groups, describe_consumer_groups,
list_consumer_group_offsets, delete_consumer_groups (each returns futures)."""
import sys

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient

broker, group = sys.argv[1:3]
a = AdminClient({'bootstrap.servers': broker})

c = a.describe_cluster(request_timeout=10).result()
print("nodes", len(c.nodes), "controller known", c.controller is not None, "cluster id set", bool(c.cluster_id))

listed = a.list_consumer_groups(request_timeout=10).result()
mine = [g for g in listed.valid if g.group_id == group]
print("listed", [(g.group_id, g.is_simple_consumer_group, g.state) for g in mine], "errors", listed.errors)
only_stable = a.list_consumer_groups(request_timeout=10, states={ConsumerGroupState.STABLE}).result()
print("among stable:", any(g.group_id == group for g in only_stable.valid))

for gid, f in a.describe_consumer_groups([group], request_timeout=10).items():
    d = f.result()
    print("describe", gid, d.is_simple_consumer_group, d.state, len(d.members), "coordinator known", d.coordinator is not None)

for gid, f in a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).items():
    r = f.result()
    print("offsets", r.group_id, sorted((tp.topic, tp.partition, tp.offset) for tp in r.topic_partitions))

for gid, f in a.delete_consumer_groups([group], request_timeout=10).items():
    f.result()
    print("Deleted group", gid)
for gid, f in a.delete_consumer_groups([group], request_timeout=10).items():
    try:
        f.result()
        print("deleted twice?")
    except KafkaException as e:
        print("delete again:", e.args[0].name())
print("listed after delete", any(g.group_id == group for g in a.list_consumer_groups(request_timeout=10).result().valid))
