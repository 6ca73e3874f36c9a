"""A confluent-kafka (librdkafka) consumer with group.protocol=consumer (KIP-848), run as a subprocess
by tests/broker/coordinator/test_kip848_broker.py.
usage: kip848_member.py BOOTSTRAP GROUP TOPICS [SECONDS] [REMOTE_ASSIGNOR]
Prints one JSON object per line: {"assigned": [[t, p], ...]}, {"revoked": ...}, {"lost": ...} from the
(incremental) rebalance callbacks, {"records": [[t, p, offset], ...]} for every batch (then committed
synchronously), {"error": "..."} for consumer errors, then {"done": true}.
"""
import json
import sys
import time


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    from confluent_kafka import Consumer
    bs, group, topics = sys.argv[1:4]
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 3600
    conf = {"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0,
            "error_cb": lambda e: out({"error": str(e)})}
    if len(sys.argv) > 5:
        conf["group.remote.assignor"] = sys.argv[5]
    c = Consumer(conf)

    def on_assign(cons, parts):
        out({"assigned": [[p.topic, p.partition] for p in parts]})
        cons.incremental_assign(parts)

    def on_revoke(cons, parts):
        out({"revoked": [[p.topic, p.partition] for p in parts]})
        cons.incremental_unassign(parts)

    def on_lost(cons, parts):
        out({"lost": [[p.topic, p.partition] for p in parts]})
        cons.incremental_unassign(parts)

    c.subscribe(topics.split(","), on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        msgs = c.consume(200, 0.3)
        good = [m for m in msgs if m.error() is None]
        for m in msgs:
            if m.error() is not None:
                out({"error": str(m.error())})
        if good:
            out({"records": [[m.topic(), m.partition(), m.offset()] for m in good]})
            try:
                c.commit(asynchronous=False)
            except Exception as e:   # noqa: BLE001 - a rebalance in between: the next owner re-reads
                out({"commit_failed": str(e)})
    c.close()
    out({"done": True})


if __name__ == "__main__":
    main()
