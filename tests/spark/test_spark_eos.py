"""The exactly-once Spark sink (kohort.sink.semantic=exactly_once, issue 15): a streaming query from
a Kafka topic into another, its driver SIGKILLed twice after the batch's tasks have written but before
Spark recorded the batch as committed (so Spark replays it on restart); afterwards the output read with
read_committed holds every input row exactly once (on Apache Kafka 4.3.1 and on kohort broker). The
same query through the default (at-least-once) sink writes the replayed batches twice (on Kafka). The
driver is tests/helpers/spark_eos_query.py in its own process group."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import _LIVE, kill_tree
from tests.interop.test_txn_copier_eos import create_topic, produce_input, read_all

QUERY = str(Path(__file__).parents[1] / "helpers" / "spark_eos_query.py")
ROOT = Path(__file__).resolve().parents[2]


def run_query(bootstrap, inp, out, checkpoint, semantic, pause_dir, pause_s, log):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    fh = open(log, "ab")
    p = subprocess.Popen([sys.executable, QUERY, bootstrap, inp, out, str(checkpoint), semantic, str(pause_dir),
                          str(pause_s)], stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, env=env)
    fh.close()
    _LIVE.add(p.pid)
    return p


def run_with_driver_kills(bootstrap, tmp: Path, semantic: str, n: int = 1000, kills: int = 2) -> dict:
    u = uuid.uuid4().hex[:8]
    inp, out = f"eos-in-{u}", f"eos-out-{semantic}-{u}"
    create_topic(bootstrap, inp, 2)
    create_topic(bootstrap, out, 2)
    produce_input(bootstrap, inp, n, 2)
    checkpoint, pause_dir, log = tmp / f"ckpt-{semantic}", tmp / f"pause-{semantic}", tmp / f"driver-{semantic}.log"
    pause_dir.mkdir()
    killed_in = []
    for k in range(kills):
        seen = set(os.listdir(pause_dir))
        p = run_query(bootstrap, inp, out, checkpoint, semantic, pause_dir, 12, log)
        try:
            deadline = time.monotonic() + 180
            while not (set(os.listdir(pause_dir)) - seen):
                assert p.poll() is None, f"the query ended early:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"no batch reached its commit:\n{log.read_text()[-3000:]}"
                time.sleep(0.2)
            killed_in += sorted(set(os.listdir(pause_dir)) - seen)
        finally:
            kill_tree(p)                    # SIGKILL: the batch is written but not in the commit log
    p = run_query(bootstrap, inp, out, checkpoint, semantic, pause_dir, 0, log)
    try:
        rc = p.wait(300)
    finally:
        kill_tree(p)
    assert rc == 0, log.read_text()[-3000:]
    values = read_all(bootstrap, out, 2, "read_committed")
    counts = collections.Counter(values)
    want = {f"V{i}".encode() for i in range(n)}
    assert set(counts) == want, f"missing {len(want - set(counts))}, unexpected {len(set(counts) - want)}"
    return {"semantic": semantic, "rows": n, "read_committed": len(values),
            "duplicates": sum(c - 1 for c in counts.values()), "driver_killed_while_committing": killed_in}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("broker", ["kafka", "kohort"])
def test_exactly_once_sink_survives_driver_sigkill(broker, tmp_path, request):
    if broker == "kafka":
        bootstrap = request.getfixturevalue("kafka1").bootstrap
    else:
        kb = KohortBroker(data_dir=str(tmp_path / "data"))
        kb.start()
        request.addfinalizer(lambda: (kb.stop(), kb.cleanup()))
        bootstrap = kb.bootstrap
    r = run_with_driver_kills(bootstrap, tmp_path, "exactly_once")
    print("spark exactly_once:", r)
    assert r["duplicates"] == 0 and r["read_committed"] == r["rows"]
    assert len(r["driver_killed_while_committing"]) == 2


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_default_sink_duplicates_replayed_batches(kafka1, tmp_path):
    r = run_with_driver_kills(kafka1.bootstrap, tmp_path, "at_least_once")
    print("spark at_least_once:", r)
    assert r["duplicates"] > 0                # the replayed batches were written a second time
