"""kohort's public API as a typed program uses it; the suite checks it with `mypy --strict`
(tests/test_typing.py against src/, tests/test_packaging.py against the installed wheel) and runs it
against a broker: `python examples/typed_usage.py HOST:PORT`.

Covers the client (Producer, Consumer, Admin), the structs and errors they exchange, and the
confluent-kafka compatibility layer.
"""
from __future__ import annotations

import sys
import time

from kohort import Admin, Consumer, Producer
from kohort.client.admin import TopicDescription
from kohort.compat import confluent_kafka as ck
from kohort.compat.confluent_kafka.admin import AdminClient, NewTopic
from kohort.errors import ErrorCode, KafkaError, KohortError, for_code
from kohort.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition


def produce(bootstrap: str, topic: str, n: int) -> list[int]:
    """n records into `topic`; returns the offsets the broker gave them."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    futures = [producer.produce(topic, value=f"value-{i}".encode(), key=b"k%d" % (i % 3),
                                headers=[("seq", str(i).encode())]) for i in range(n)]
    left: int = producer.flush(30.0)
    if left:
        raise KohortError(f"{left} records not delivered")
    offsets = [f.result(10.0).offset for f in futures]
    producer.close()
    return offsets


def consume(bootstrap: str, topic: str, group: str, n: int) -> list[ConsumerRecord]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + 60
    while len(records) < n and time.monotonic() < deadline:
        records.extend(consumer.poll(timeout=1.0))
    ends: dict[TopicPartition, OffsetAndMetadata] = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        ends[tp] = OffsetAndMetadata(r.offset + 1, "")
    consumer.commit(ends)
    committed = consumer.committed(list(ends))
    for tp, om in ends.items():
        got = committed[tp]
        if got is None or got.offset != om.offset:
            raise KohortError(f"{tp}: committed {got}, expected {om.offset}")
    lag: dict[TopicPartition, int | None] = consumer.lag()
    assert all(v is None or v >= 0 for v in lag.values())
    consumer.close()
    return records


def admin(bootstrap: str, topic: str) -> TopicDescription:
    a = Admin({"bootstrap.servers": bootstrap})
    try:
        a.create_topics([topic], num_partitions=3)
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    names: list[str] = a.list_topics()
    assert topic in names
    [desc] = a.describe_topics([topic])
    a.close()
    return desc


def compat(bootstrap: str, topic: str) -> int:
    """The same through confluent-kafka's API (kohort.compat.confluent_kafka)."""
    AdminClient({"bootstrap.servers": bootstrap}).create_topics([NewTopic(topic + "-ck", 1)])
    delivered: list[ck.Message] = []

    def on_delivery(err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            delivered.append(msg)

    p = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        p.produce(topic + "-ck", value=b"%d" % i, on_delivery=on_delivery)
    p.flush(30.0)
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "typed-ck", "auto.offset.reset": "earliest"})
    c.subscribe([topic + "-ck"])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 10 and time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            raise ck.KafkaException(err)
        value = msg.value()
        assert value is not None
        seen += 1
    c.close()
    return min(seen, len(delivered))


def main(bootstrap: str) -> int:
    topic = "typed-usage"
    desc = admin(bootstrap, topic)
    offsets = produce(bootstrap, topic, 30)
    records = consume(bootstrap, topic, "typed-usage-g", 30)
    values = sorted(r.value for r in records if r.value is not None)
    assert len(values) == 30 and len(offsets) == 30, (len(values), len(offsets))
    error: KafkaError = for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER)("typed usage")
    assert error.retriable
    print(f"{desc.name}: {len(desc.partitions)} partitions, {len(records)} records; "
          f"compat: {compat(bootstrap, topic)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9092"))
