"""format("kohort") through Spark Connect (SparkSession.builder.remote, SPARK-47367): the data source is
registered from the Connect client and runs in the server's Python workers; a batch read, a streaming read,
a batch write and a streaming write against a real kohort broker. The client runs in its own process
(tests/helpers/spark_connect_job.py: one Connect server per process, and this test process may already hold a
classic SparkContext); its output topic is read back here with kohort's consumer."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kohort import Consumer, Producer
from kohort.spark.wire import Cluster
from tests.helpers.brokers import KohortBroker

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "helpers" / "spark_connect_job.py"


@pytest.mark.slow                  # a Connect server's start: minutes on a busy 2-core machine
@pytest.mark.timeout(600)
def test_format_kohort_reads_and_writes_through_spark_connect(tmp_path):
    with KohortBroker() as b:
        with Cluster({"bootstrap.servers": b.bootstrap}) as c:
            c.create_topics({"connect-in": 2, "connect-out": 1})
        p = Producer({"bootstrap.servers": b.bootstrap})
        for i in range(40):
            p.produce("connect-in", value=b"in-%02d" % i, key=b"k%d" % i)
        assert p.flush(30) == 0
        p.close()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
                   PYSPARK_PYTHON=sys.executable)
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        r = subprocess.run([sys.executable, str(JOB), b.bootstrap, "connect-in", "connect-out", str(tmp_path)],
                           capture_output=True, text=True, timeout=540, env=env, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["connect"].startswith("pyspark.sql.connect"), out
        want_in = [f"in-{i:02d}" for i in range(40)]
        assert out["batch_read"] == want_in
        assert out["stream_read"] == want_in
        assert out["stream_exception"] is None

        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "connect-check",
                      "auto.offset.reset": "earliest"})
        c.subscribe(["connect-out"])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 90 and time.monotonic() < deadline:
            got += [rec.value for rec in c.poll(1.0) if rec.value is not None]
        c.close()
    assert sorted(got) == sorted([b"batch-%d" % i for i in range(50)] + [b"stream-in-%02d" % i for i in range(40)])
