"""`kohort demo --seconds N` produces events for N seconds (issue 13 item 8: it produced for Spark's
start-up time plus N, ~28 s for 12). The events' own "ts" fields tell how long production lasted."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import pytest

from kohort.cli.demo import TOPIC, EventProducer
from tests.helpers.brokers import KohortBroker, kohort_broker  # noqa: F401


def event_times(bootstrap: str) -> list[float]:
    from kohort.client.consumer import Consumer
    from kohort.structs import TopicPartition
    with Consumer({"bootstrap.servers": bootstrap}) as c:
        tps = [TopicPartition(TOPIC, p) for p in c.partitions_for_topic(TOPIC, timeout=10)]
        c.assign(tps)
        c.seek_to_beginning(tps)
        ends = c.end_offsets(tps, timeout=10)
        out = []
        while any(c.position(tp, timeout=10) < ends[tp] for tp in tps):
            for r in c.poll(1.0):
                ts = json.loads(r.value)["ts"]
                out.append(datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp())
    return sorted(out)


def test_event_producer_stops_after_its_seconds(kohort_broker):
    p = EventProducer(kohort_broker.bootstrap, rate=200, seconds=1.0)
    p.start()
    assert p.finished.wait(30)
    p.join(5)
    assert p.error is None
    times = event_times(kohort_broker.bootstrap)
    assert len(times) == p.sent and 150 <= p.sent <= 220
    assert 0.7 <= times[-1] - times[0] <= 1.05         # ten ticks of 0.1 s: the first at 0, the last at 0.9


@pytest.mark.slow
def test_demo_produces_for_the_seconds_asked(tmp_path):
    keep = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "demo", "--seconds", "6", "--keep", str(keep)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with KohortBroker(os.path.join(keep, "broker-data")) as b:
        times = event_times(b.bootstrap)
    assert 5.0 <= times[-1] - times[0] <= 6.0, (times[0], times[-1])
