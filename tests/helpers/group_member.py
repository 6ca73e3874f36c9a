"""A consumer-group member run as a subprocess by the group tests and bench: one real client
(confluent-kafka, kafka-python, aiokafka or kohort.aio; "-848" variants speak KIP-848's
consumer protocol) subscribes to a topic, consumes, and commits explicit
offsets after each polled batch (at-least-once). It reports on stdout, one line per event:

    READY                          client constructed, subscribe() called
    ASSIGNED 0,3                   partitions after a rebalance (eager: the full set)
    REC <partition> <offset> <value>
    COMMIT <partition>:<next offset>,...   a commit that succeeded
    COMMITFAIL <error>
    CLOSED                         after a clean close (SIGTERM -> close(), which sends LeaveGroup)

usage: python -m tests.helpers.group_member CLIENT BOOTSTRAP GROUP TOPIC [SESSION_MS]
"""
from __future__ import annotations

import signal
import sys
import threading

stop = threading.Event()


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_confluent(bootstrap, group, topic, session_ms, kip848=False):
    from confluent_kafka import Consumer, TopicPartition
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    if kip848:
        conf["group.protocol"] = "consumer"      # session and heartbeat timing are the broker's
    else:
        conf.update({"session.timeout.ms": session_ms, "heartbeat.interval.ms": max(100, session_ms // 10),
                     "partition.assignment.strategy": "roundrobin"})
    c = Consumer(conf)

    def on_assign(consumer, parts):
        out("ASSIGNED " + ",".join(str(p.partition) for p in sorted(parts, key=lambda p: p.partition)))

    c.subscribe([topic], on_assign=on_assign)
    out("READY")
    while not stop.is_set():
        msgs = c.consume(100, 0.1)
        pending = {}
        for m in msgs:
            if m.error():
                continue
            out(f"REC {m.partition()} {m.offset()} {m.value().decode()}")
            pending[m.partition()] = m.offset() + 1
        if pending:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in pending.items()], asynchronous=False)
                out("COMMIT " + ",".join(f"{p}:{o}" for p, o in sorted(pending.items())))
            except Exception as e:   # noqa: BLE001 - a rebalance may fence the commit
                out(f"COMMITFAIL {e}")
    c.close()
    out("CLOSED")


def run_kafka_python(bootstrap, group, topic, session_ms):
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.consumer.subscription_state import OffsetAndMetadata
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=session_ms,
                      heartbeat_interval_ms=max(100, session_ms // 10),
                      partition_assignment_strategy=[RoundRobinPartitionAssignor])

    class L(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned):
            out("ASSIGNED " + ",".join(str(p.partition) for p in sorted(assigned, key=lambda p: p.partition)))

    c.subscribe([topic], listener=L())
    out("READY")
    while not stop.is_set():
        batches = c.poll(timeout_ms=100)
        pending = {}
        for tp, msgs in batches.items():
            for m in msgs:
                out(f"REC {m.partition} {m.offset} {m.value.decode()}")
                pending[m.partition] = m.offset + 1
        if pending:
            try:
                c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in pending.items()})
                out("COMMIT " + ",".join(f"{p}:{o}" for p, o in sorted(pending.items())))
            except Exception as e:   # noqa: BLE001
                out(f"COMMITFAIL {e}")
    c.close()
    out("CLOSED")


def run_aiokafka(bootstrap, group, topic, session_ms):
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

    class L(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            pass

        async def on_partitions_assigned(self, assigned):
            out("ASSIGNED " + ",".join(str(p.partition) for p in sorted(assigned, key=lambda p: p.partition)))

    async def main():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=session_ms,
                             heartbeat_interval_ms=max(100, session_ms // 10))
        await c.start()
        c.subscribe([topic], listener=L())
        out("READY")
        while not stop.is_set():
            batches = await c.getmany(timeout_ms=100)
            pending = {}
            for tp, msgs in batches.items():
                for m in msgs:
                    out(f"REC {m.partition} {m.offset} {m.value.decode()}")
                    pending[m.partition] = m.offset + 1
            if pending:
                try:
                    await c.commit({TopicPartition(topic, p): o for p, o in pending.items()})
                    out("COMMIT " + ",".join(f"{p}:{o}" for p, o in sorted(pending.items())))
                except Exception as e:   # noqa: BLE001
                    out(f"COMMITFAIL {e}")
        await c.stop()
        out("CLOSED")

    asyncio.run(main())


def run_kohort_aio(bootstrap, group, topic, session_ms, kip848=False):
    import asyncio

    from kohort.aio import AIOConsumer
    from kohort.structs import TopicPartition

    class L:
        async def on_partitions_revoked(self, revoked):
            pass

        async def on_partitions_assigned(self, assigned):
            out("ASSIGNED " + ",".join(str(p.partition) for p in sorted(c.assignment(), key=lambda p: p.partition)))

    kw = {"group_protocol": "consumer"} if kip848 else {
        "session_timeout_ms": session_ms, "heartbeat_interval_ms": max(100, session_ms // 10),
        "partition_assignment_strategy": ("roundrobin",)}

    async def main():
        nonlocal c
        c = AIOConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, **kw)
        await c.start()
        c.subscribe([topic], listener=L())
        out("READY")
        while not stop.is_set():
            batches = await c.getmany(timeout_ms=100)
            pending = {}
            for tp, msgs in batches.items():
                for m in msgs:
                    out(f"REC {m.partition} {m.offset} {m.value.decode()}")
                    pending[m.partition] = m.offset + 1
            if pending:
                try:
                    await c.commit({TopicPartition(topic, p): o for p, o in pending.items()})
                    out("COMMIT " + ",".join(f"{p}:{o}" for p, o in sorted(pending.items())))
                except Exception as e:   # noqa: BLE001
                    out(f"COMMITFAIL {e}")
        await c.stop()
        out("CLOSED")

    c = None
    asyncio.run(main())


CLIENTS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka,
           "kohort-aio": run_kohort_aio,
           "confluent-848": lambda *a: run_confluent(*a, kip848=True),
           "kohort-aio-848": lambda *a: run_kohort_aio(*a, kip848=True)}


def main(argv: list[str]) -> None:
    if len(argv) not in (4, 5) or argv[0] not in CLIENTS:
        sys.exit(f"usage: group_member {{{'|'.join(CLIENTS)}}} BOOTSTRAP GROUP TOPIC [SESSION_MS]")
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    session_ms = int(argv[4]) if len(argv) == 5 else 6000
    CLIENTS[argv[0]](argv[1], argv[2], argv[3], session_ms)


if __name__ == "__main__":
    main(sys.argv[1:])
