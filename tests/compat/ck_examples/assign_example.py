"""seek_specific_offset_partition.py-style: assign() with offsets, consume(num_messages, timeout), seek(),
pause()/resume(), store_offsets() with enable.auto.offset.store=false, offsets_for_times(), OFFSET_* constants."""
import sys

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

broker, group, topic = sys.argv[1:4]
c = Consumer({'bootstrap.servers': broker, 'group.id': group, 'enable.auto.offset.store': False,
              'auto.commit.interval.ms': 100, 'auto.offset.reset': 'earliest'})
tp0, tp1 = TopicPartition(topic, 0, 2), TopicPartition(topic, 1, OFFSET_BEGINNING)
c.assign([tp0, tp1])
print('assignment', sorted((p.topic, p.partition) for p in c.assignment()))


def take(n):
    out = []
    while len(out) < n:
        for m in c.consume(num_messages=n - len(out), timeout=5.0):
            if m.error():
                raise SystemExit('error %s' % m.error())
            out.append(m)
    return out


msgs = take(4)
print('first', sorted((m.partition(), m.offset(), m.value()) for m in msgs))
c.pause([TopicPartition(topic, 1)])
c.seek(TopicPartition(topic, 0, 0))
msgs = take(2)
print('after seek with 1 paused', [(m.partition(), m.offset(), m.value()) for m in msgs])
c.resume([TopicPartition(topic, 1)])
last = msgs[-1]
c.store_offsets(message=last)
c.store_offsets(offsets=[TopicPartition(topic, 1, 1)])
c.commit(asynchronous=False)
print('committed', sorted((p.partition, p.offset) for p in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])))
print('position', sorted((p.partition, p.offset) for p in c.position([TopicPartition(topic, 0)])))
print('watermarks', c.get_watermark_offsets(TopicPartition(topic, 0)))
found = c.offsets_for_times([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 2 ** 62)], timeout=10)
print('offsets_for_times', sorted((p.partition, p.offset) for p in found), 'end is', OFFSET_END)
c.unassign()
print('after unassign', c.assignment())
c.close()
