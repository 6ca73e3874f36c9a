"""A kohort group member run as a subprocess by tests/client/consumer/test_client_group.py.

usage: client_group_member.py BOOTSTRAP GROUP TOPICS STRATEGY [SECONDS] [CLIENT]
STRATEGY "consumer" (or "consumer:ASSIGNOR") makes a kohort member use group.protocol=consumer
(KIP-848; the broker assigns, with ASSIGNOR as group.remote.assignor).
CLIENT is kohort (default) or confluent-kafka (librdkafka, in a process of its own so a hang in its
destroy can be killed: issue 11).
Prints one JSON object per line: {"assigned": [[t, p], ...]}, {"revoked": ...} and
{"records": [[t, p, offset], ...]} for every poll batch (then commits it synchronously), then
{"done": true}. Runs until killed or SECONDS pass.
"""
import json
import os
import sys
import time

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/src")

from kohort import Consumer  # noqa: E402


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main_confluent(bs, group, topics, strategy, seconds):
    from confluent_kafka import Consumer as CK
    c = CK({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "enable.auto.commit": False, "log_level": 0})
    coop = strategy == "cooperative-sticky"

    def on_assign(cons, parts):
        out({"assigned": [[p.topic, p.partition] for p in parts]})
        if coop:
            cons.incremental_assign(parts)

    def on_revoke(cons, parts):
        out({"revoked": [[p.topic, p.partition] for p in parts]})
        if coop:
            cons.incremental_unassign(parts)

    def on_lost(cons, parts):
        out({"lost": [[p.topic, p.partition] for p in parts]})
        if coop:
            cons.incremental_unassign(parts)

    c.subscribe(topics.split(","), on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        msgs = [m for m in c.consume(200, 0.3) if m.error() is None]
        if msgs:
            out({"records": [[m.topic(), m.partition(), m.offset()] for m in msgs]})
            try:
                c.commit(asynchronous=False)
            except Exception as e:   # a rebalance in between
                out({"commit_failed": str(e)})
    c.close()
    out({"done": True})


def main():
    if os.environ.get("KOHORT_LOG"):
        import logging
        logging.basicConfig(level=os.environ["KOHORT_LOG"], format="%(asctime)s %(name)s %(message)s")
    bs, group, topics, strategy = sys.argv[1:5]
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 3600
    if len(sys.argv) > 6 and sys.argv[6] == "confluent-kafka":
        return main_confluent(bs, group, topics, strategy, seconds)
    conf = {"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "max.poll.records": 200}
    if strategy.startswith("consumer"):
        conf["group.protocol"] = "consumer"
        if ":" in strategy:
            conf["group.remote.assignor"] = strategy.split(":", 1)[1]
    else:
        conf.update({"partition.assignment.strategy": strategy, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 500})
    c = Consumer(conf)
    c.subscribe(topics.split(","),
                on_assign=lambda c, tps: out({"assigned": [list(tp) for tp in tps]}),
                on_revoke=lambda c, tps: out({"revoked": [list(tp) for tp in tps]}),
                on_lost=lambda c, tps: out({"lost": [list(tp) for tp in tps]}))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        recs = c.poll(0.3)
        if recs:
            # print before committing: whatever is committed has been reported
            out({"records": [[r.topic, r.partition, r.offset] for r in recs]})
            try:
                c.commit()
            except Exception as e:   # a rebalance in between: the next owner re-reads the batch
                out({"commit_failed": str(e)})
    c.close()
    out({"done": True})


if __name__ == "__main__":
    main()
