"""A kohort group member run as a subprocess by tests/test_client_group.py.

usage: client_group_member.py BOOTSTRAP GROUP TOPICS STRATEGY [SECONDS]
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


def main():
    if os.environ.get("KOHORT_LOG"):
        import logging
        logging.basicConfig(level=os.environ["KOHORT_LOG"], format="%(asctime)s %(name)s %(message)s")
    bs, group, topics, strategy = sys.argv[1:5]
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 3600
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "partition.assignment.strategy": strategy,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.records": 200})
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
