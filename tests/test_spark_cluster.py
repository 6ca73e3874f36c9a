"""Python workers whose interpreter lacks kohort: `kohort.spark.register` ships kohort to them.

The workers' Python is a bare virtualenv (`python -m venv --without-pip`, same base interpreter) that
holds only kohort's third-party dependencies (pyarrow, crc32c, lz4, zstandard, cramjam), linked from
the test interpreter's site-packages; `import kohort` fails in it. The Spark driver runs in its own
process with no PYTHONPATH (the JVM would hand it to the workers) and no PYSPARK_PYTHON, with the bare
virtualenv first on PATH, so Spark's default `python3` is the bare one.

* fast: local mode -- a batch read, a streaming read and a write through format("kohort");
* slow: a Spark standalone cluster on loopback (a master and two workers started from pyspark's own
  jars, each worker's PYSPARK_PYTHON the bare Python) runs `kohort pipeline`; both executors start
  Python workers from the bare virtualenv (a sitecustomize there logs them) and the Parquet output
  holds the expected windows.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from kohort.spark.wire import Cluster
from tests.brokers import KohortBroker, free_port

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
WORKER_DEPS = ["pyarrow", "crc32c", "lz4", "zstandard", "cramjam"]


def make_bare_python(root: str, log_path: str | None = None) -> str:
    """A virtualenv without kohort (nor pip), holding only WORKER_DEPS; returns its python3. With
    `log_path`, every interpreter start appends "executable cwd" to it (sitecustomize)."""
    import importlib.metadata as md
    import sysconfig
    subprocess.run([sys.executable, "-c", "import sys, venv; venv.create(sys.argv[1], with_pip=False)",
                    root], check=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    here = sysconfig.get_paths()["purelib"]
    site = subprocess.run([os.path.join(root, "bin", "python3"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    for dep in WORKER_DEPS:
        dist = md.distribution(dep)
        os.symlink(os.path.join(here, dep), os.path.join(site, dep))
        info = os.path.basename(str(dist._path))             # the .dist-info directory
        os.symlink(os.path.join(here, info), os.path.join(site, info))
    if log_path:
        with open(os.path.join(site, "sitecustomize.py"), "w") as fh:
            fh.write("import os, sys\n"
                     f"with open({log_path!r}, 'a') as _f:\n"
                     "    _f.write(f'{sys.executable} {os.getcwd()}\\n')\n")
    py = os.path.join(root, "bin", "python3")
    check = subprocess.run([py, "-c", "import kohort"], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert "No module named 'kohort'" in check.stderr
    return py


def driver_env(bare_python: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = os.path.dirname(bare_python) + os.pathsep + env.get("PATH", "")
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    return make_bare_python(str(tmp_path_factory.mktemp("bare") / "venv"))


@pytest.fixture(scope="module")
def broker():
    with KohortBroker() as b:
        yield b.bootstrap


def produce(addr: str, topic: str, partitions: int, values: list) -> None:
    from kohort.client.producer import Producer
    with Cluster({"bootstrap.servers": addr}) as c:
        c.create_topics({topic: partitions})
    p = Producer({"bootstrap.servers": addr})
    try:
        futs = [p.produce(topic, v, partition=i % partitions) for i, v in enumerate(values)]
        p.flush()
        for f in futs:
            assert f.exception() is None
    finally:
        p.close()


LOCAL_DRIVER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])                    # kohort for the driver only (not via PYTHONPATH)
addr, topic, out_topic = sys.argv[2:5]
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
import kohort.spark
kohort.spark.register(spark)
opts = {"kafka.bootstrap.servers": addr, "subscribe": topic}
batch = sorted(bytes(r.value).decode() for r in spark.read.format("kohort").options(**opts).load().collect())
q = (spark.readStream.format("kohort").options(**opts).option("startingOffsets", "earliest").load()
     .writeStream.format("memory").queryName("m").start())
q.processAllAvailable()
stream = sorted(bytes(r.value).decode() for r in spark.sql("select value from m").collect())
q.stop()
(spark.read.format("kohort").options(**opts).load().selectExpr("key", "value")
 .write.format("kohort").mode("append").option("kafka.bootstrap.servers", addr).option("topic", out_topic).save())
def where(_):
    import sys, kohort
    yield (sys.executable, kohort.__file__)
workers = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
print("RESULT " + json.dumps({"batch": batch, "stream": stream, "workers": workers}), flush=True)
spark.stop()
"""


def test_local_workers_without_kohort_import_the_shipped_zip(bare_python, broker, tmp_path):
    topic, out_topic = f"ship-{os.getpid()}", f"ship-out-{os.getpid()}"
    values = [b"v%03d" % i for i in range(60)]
    produce(broker, topic, 2, values)
    with Cluster({"bootstrap.servers": broker}) as c:
        c.create_topics({out_topic: 1})
    script = tmp_path / "driver.py"
    script.write_text(LOCAL_DRIVER)
    r = subprocess.run([sys.executable, str(script), SRC, broker, topic, out_topic], capture_output=True,
                       text=True, timeout=240, env=driver_env(bare_python), cwd=str(tmp_path))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, r.stdout[-2000:] + r.stderr[-6000:]
    got = json.loads(lines[0][len("RESULT "):])
    want = sorted(v.decode() for v in values)
    assert got["batch"] == want and got["stream"] == want
    [(exe, kohort_file)] = got["workers"]
    assert exe == bare_python and ".zip" + os.sep + "kohort" in kohort_file
    with Cluster({"bootstrap.servers": broker}) as c:
        assert c.offset_bounds([(out_topic, 0)])[(out_topic, 0)] == (0, len(values))
