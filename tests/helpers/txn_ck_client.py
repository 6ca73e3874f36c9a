"""confluent-kafka (librdkafka) transactional producer / read_committed consumer, run as a subprocess
by tests/interop/test_txn_clients.py (a hang in librdkafka's destroy can then be killed).

usage: txn_ck_client.py BOOTSTRAP MODE TOPIC [TXN_ID]
  produce  TXN_ID: commit 10 "c1-i", abort 10 "a-i", commit 10 "c2-i" (one transaction each)
  fence    TXN_ID: producer A opens a transaction and produces; producer B (same id) initialises;
           A's commit must fail fatally (fenced); B commits 5 "b-i"
  hang     TXN_ID [TIMEOUT_MS]: commit 10 "c1-i", abort 10 "a-i", then open a transaction with 5
           "open-i", flush, print {"open": true} and wait to be killed (transaction.timeout.ms 5000)
  soak     TXN_ID N: transactions 0..N-1 of 10 records "i-attempt-j", every 4th aborted on purpose;
           a failed attempt is aborted (or the producer recreated) and retried as attempt+1. Prints
           {"committed"|"aborted"|"unknown": [i, attempt]} per attempt (unknown: commit raised)
  consume  ISOLATION: read partition 0 from the start to its end (read_committed / read_uncommitted)
  copy     TXN_ID GROUP OUT SIZE ABORT_EVERY PAUSE_AT: consume-transform-produce (KIP-98/447): the group
           GROUP (read_committed) reads TOPIC, each transaction copies up to SIZE records to OUT
           partition 0 and sends the consumed positions with send_offsets_to_transaction(offsets,
           group_metadata); every ABORT_EVERY-th transaction (0: none) is aborted and the consumer
           rewound to the committed offsets; transaction number PAUSE_AT (-1: none) stops after its
           offsets were sent, prints {"paused": [first, last]} and waits to be killed. Prints
           {"committed"|"aborted": [first, last]}; done once the group's committed offset is TOPIC's end.
           An optional last argument "consumer" makes the group a KIP-848 consumer group.
Prints one JSON object per line; the last is {"done": ...}.
"""
import json
import sys


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def producer(bs, tid, timeout_ms=30000):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": bs, "transactional.id": tid, "transaction.timeout.ms": timeout_ms,
                     "linger.ms": 5, "log_level": 0})


def txn(p, topic, prefix, n, commit):
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, value=f"{prefix}-{i}".encode(), partition=0)
    if commit:
        p.commit_transaction(20)
    else:
        p.flush(20)
        p.abort_transaction(20)


def main():
    bs, mode, topic = sys.argv[1:4]
    arg = sys.argv[4] if len(sys.argv) > 4 else None
    if mode == "produce":
        p = producer(bs, arg)
        p.init_transactions(20)
        txn(p, topic, "c1", 10, True)
        txn(p, topic, "a", 10, False)
        txn(p, topic, "c2", 10, True)
        out({"done": "produced"})
    elif mode == "hang":
        import time
        p = producer(bs, arg, int(sys.argv[5]) if len(sys.argv) > 5 else 5000)
        p.init_transactions(20)
        txn(p, topic, "c1", 10, True)
        txn(p, topic, "a", 10, False)
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=f"open-{i}".encode(), partition=0)
        p.flush(20)
        out({"open": True})
        time.sleep(3600)
    elif mode == "soak":
        import time
        from confluent_kafka import KafkaException
        n = int(sys.argv[5])

        def fresh():
            while True:
                p = producer(bs, arg, 10000)
                try:
                    p.init_transactions(10)
                    return p
                except KafkaException:
                    time.sleep(0.2)
        p = fresh()
        for i in range(n):
            attempt = 0
            while True:
                stage = "begin"
                try:
                    p.begin_transaction()
                    stage = "produce"
                    for j in range(10):
                        p.produce(topic, value=f"{i}-{attempt}-{j}".encode(), partition=0)
                    if i % 4 == 3:
                        stage = "abort"
                        p.flush(10)
                        p.abort_transaction(10)
                        out({"aborted": [i, attempt]})
                    else:
                        stage = "commit"
                        p.commit_transaction(10)
                        out({"committed": [i, attempt]})
                    break
                except KafkaException as e:
                    if stage == "commit":
                        out({"unknown": [i, attempt], "error": str(e.args[0])})
                    try:
                        p.abort_transaction(10)
                    except KafkaException:
                        p = fresh()
                    attempt += 1
        out({"done": "soak"})
    elif mode == "fence":
        from confluent_kafka import KafkaException
        a = producer(bs, arg)
        a.init_transactions(20)
        a.begin_transaction()
        for i in range(5):
            a.produce(topic, value=f"zombie-{i}".encode(), partition=0)
        a.flush(20)
        b = producer(bs, arg)
        b.init_transactions(30)            # fences A and aborts its transaction
        try:
            a.commit_transaction(20)
            out({"zombie_commit": "succeeded"})
        except KafkaException as e:
            err = e.args[0]
            out({"zombie_commit": "failed", "fatal": err.fatal(), "name": err.name()})
        txn(b, topic, "b", 5, True)
        out({"done": "fenced"})
    elif mode == "copy":
        copy(bs, topic, *sys.argv[4:])
    elif mode == "consume":
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False,
                      "isolation.level": arg, "fetch.wait.max.ms": 100, "log_level": 0,
                      "enable.partition.eof": True})
        try:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            out({"watermarks": [lo, hi]})
            c.assign([TopicPartition(topic, 0, 0)])
            values = []
            while True:
                m = c.poll(5)
                if m is None:
                    break                       # nothing more within 5 s
                if m.error():
                    if m.error().code() == -191:    # _PARTITION_EOF
                        break
                    out({"error": str(m.error())})
                    continue
                values.append(m.value().decode())
            out({"position": c.position([TopicPartition(topic, 0)])[0].offset})
            out({"done": values})
        finally:
            c.close()


def copy(bs, topic, tid, group, out_topic, size, abort_every, pause_at, protocol="classic"):
    import time
    from confluent_kafka import Consumer, TopicPartition
    size, abort_every, pause_at = int(size), int(abort_every), int(pause_at)
    cfg = {"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
           "isolation.level": "read_committed", "auto.offset.reset": "earliest", "log_level": 0,
           "fetch.wait.max.ms": 100, "group.protocol": protocol}
    if protocol == "classic":
        cfg["session.timeout.ms"] = 6000
    c = Consumer(cfg)
    p = producer(bs, tid, 10000)
    try:
        p.init_transactions(30)
        c.subscribe([topic])
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        k = 0
        while True:
            msgs = [m for m in c.consume(size, 1) if not m.error()]
            if not msgs:
                got = c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
                if got == end:
                    break
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(out_topic, value=m.value(), partition=0)
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 20)
            span = [msgs[0].offset(), msgs[-1].offset()]
            if k == pause_at:
                p.flush(20)
                out({"paused": span})
                time.sleep(3600)
            if abort_every and k % abort_every == abort_every - 1:
                p.abort_transaction(20)
                for tp in c.committed(c.assignment(), timeout=10):
                    c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
                out({"aborted": span})
            else:
                p.commit_transaction(20)
                out({"committed": span})
            k += 1
        out({"done": "copied"})
    finally:
        c.close()


if __name__ == "__main__":
    main()
