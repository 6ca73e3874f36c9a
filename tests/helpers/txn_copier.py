"""A consume-transform-produce copier (exactly-once, KIP-98 + KIP-447), run as a subprocess by
tests/interop/test_txn_copier_eos.py so it can be SIGKILLed mid-transaction.

usage: txn_copier.py CLIENT BOOTSTRAP INPUT OUTPUT GROUP TXN_ID [--per-txn N] [--exit-when-idle S]
                     [--instance-id ID] [--pause S]
  CLIENT: kohort (kohort's Producer/Consumer) or confluent (confluent-kafka), the same program shape
  as Kafka's TransactionalMessageCopier: a read_committed group member with auto commit off polls,
  begins a transaction, produces each record's key and value (upper-cased: the "transform") to OUTPUT,
  sends the consumer's positions with its group metadata, commits. An abortable error aborts and
  rewinds to the committed offsets; a fatal one (fenced) ends the program with status 3.
  --exit-when-idle S: exit 0 once every assigned partition has been copied to its end and nothing
  arrived for S seconds. --instance-id: a static member (KIP-345), so a restarted copier takes its
  predecessor's place at once instead of after the session timeout. --pause S: sleep S seconds inside
  each transaction, after its records are sent (so that a kill lands inside a transaction).
Prints one JSON line per committed transaction: {"committed": records copied by this process}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def out(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def transform(value: bytes | None) -> bytes | None:
    return None if value is None else value.upper()


class KohortSide:
    def __init__(self, a):
        from kohort.client.consumer.consumer import Consumer
        from kohort.client.producer import Producer
        self.consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                                  "heartbeat.interval.ms": 500, "group.instance.id": a.instance_id})
        self.producer = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": a.txn_id,
                                  "transaction.timeout.ms": 10000, "linger.ms": 5})
        self.consumer.subscribe([a.input])

    def init(self):
        self.producer.init_transactions(60)

    def poll(self, n):
        return [(r.topic, r.partition, r.offset, r.key, r.value) for r in self.consumer.poll(0.5, max_records=n)]

    def produce(self, topic, key, value):
        self.producer.produce(topic, value, key=key)

    def positions(self):
        from kohort.structs import OffsetAndMetadata
        return {tp: OffsetAndMetadata(self.consumer.position(tp)) for tp in self.consumer.assignment()}

    def send_offsets(self):
        self.producer.send_offsets_to_transaction(self.positions(), self.consumer.group_metadata(), 60)

    def rewind(self):
        parts = list(self.consumer.assignment())
        committed = self.consumer.committed(parts, 30)
        for tp in parts:
            om = committed.get(tp)
            if om is not None:
                self.consumer.seek(tp, om.offset)
            else:
                self.consumer.seek_to_beginning([tp])

    def caught_up(self) -> bool:
        parts = list(self.consumer.assignment())
        if not parts:
            return False
        ends = self.consumer.end_offsets(parts, 30)
        return all(self.consumer.position(tp) >= ends[tp] for tp in parts)

    def classify(self, e):
        from kohort.errors import AbortableTransactionError, FatalTransactionError
        if isinstance(e, AbortableTransactionError):
            return "abort"
        if isinstance(e, FatalTransactionError):
            return "fatal"
        return None

    def close(self):
        self.producer.close(10)
        self.consumer.close()


class ConfluentSide(KohortSide):
    def __init__(self, a):
        from confluent_kafka import Consumer, Producer
        dbg = {"debug": "cgrp,eos,fetch,protocol,broker", "log_level": 7} if os.environ.get("CK_DEBUG") else {}
        self.consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                                  "heartbeat.interval.ms": 500, "log_level": 0,
                                  **({"group.instance.id": a.instance_id} if a.instance_id else {}), **dbg})
        self.producer = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": a.txn_id,
                                  "transaction.timeout.ms": 10000, "linger.ms": 5, "log_level": 0, **dbg})
        self.consumer.subscribe([a.input])

    def poll(self, n):
        msgs = self.consumer.consume(n, 0.5)
        outl = []
        for m in msgs:
            if m.error():
                continue
            outl.append((m.topic(), m.partition(), m.offset(), m.key(), m.value()))
        return outl

    def produce(self, topic, key, value):
        while True:
            try:
                self.producer.produce(topic, value, key=key)
                return
            except BufferError:
                self.producer.poll(0.1)

    def send_offsets(self):
        parts = self.consumer.position(self.consumer.assignment())
        self.producer.send_offsets_to_transaction(parts, self.consumer.consumer_group_metadata(), 60)

    def rewind(self):
        from confluent_kafka import OFFSET_BEGINNING
        committed = self.consumer.committed(self.consumer.assignment(), 30)
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            self.consumer.seek(tp)

    def caught_up(self) -> bool:
        parts = self.consumer.assignment()
        if not parts:
            return False
        committed = {(t.topic, t.partition): t.offset for t in self.consumer.committed(parts, 30)}
        for tp in self.consumer.position(parts):
            lo, hi = self.consumer.get_watermark_offsets(tp, 30)
            # no position until a record is consumed: then the committed offset is where it stands
            off = tp.offset if tp.offset >= 0 else committed.get((tp.topic, tp.partition), -1)
            if off < 0 and hi > lo or off >= 0 and off < hi:
                return False
        return True

    def close(self):
        self.producer.flush(10)
        self.consumer.close()

    def classify(self, e):
        from confluent_kafka import KafkaException
        if isinstance(e, KafkaException):
            err = e.args[0]
            if err.txn_requires_abort():
                return "abort"
            if err.fatal():
                return "fatal"
            if err.retriable():
                return "retry"
        return None


def main(argv=None) -> int:
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1)          # the test asks for stacks of a stalled copier
    if os.environ.get("KOHORT_COPIER_DEBUG"):
        import logging
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(message)s")
    ap = argparse.ArgumentParser()
    ap.add_argument("client", choices=("kohort", "confluent"))
    ap.add_argument("bootstrap")
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("group")
    ap.add_argument("txn_id")
    ap.add_argument("--per-txn", type=int, default=50)
    ap.add_argument("--exit-when-idle", type=float, default=0.0)
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--pause", type=float, default=0.0)
    a = ap.parse_args(argv)
    side = (KohortSide if a.client == "kohort" else ConfluentSide)(a)
    side.init()
    out({"ready": True})
    copied = 0
    idle_since = time.monotonic()
    while True:
        recs = side.poll(a.per_txn)
        if not recs:
            if a.exit_when_idle and time.monotonic() - idle_since > a.exit_when_idle and side.caught_up():
                break
            continue
        idle_since = time.monotonic()
        try:
            side.producer.begin_transaction()
            for _t, _p, _o, key, value in recs:
                side.produce(a.output, key, transform(value))
            if a.pause:
                time.sleep(a.pause)
            side.send_offsets()
            side.producer.commit_transaction(60)
        except Exception as e:  # noqa: BLE001 - classified below, as Kafka's copier does
            kind = side.classify(e)
            out({"error": repr(e), "kind": kind})
            if kind == "fatal" or kind is None:
                return 3
            side.producer.abort_transaction(60)
            side.rewind()
            continue
        copied += len(recs)
        out({"committed": copied})
    side.close()
    out({"done": copied})
    return 0


if __name__ == "__main__":
    sys.exit(main())
