"""Python workers whose interpreter lacks kohort: `kohort.spark.register` ships kohort to them.

The workers' Python is a bare virtualenv (`python -m venv --without-pip`, same base interpreter) that
holds only kohort's third-party dependencies (pyarrow, crc32c, lz4, cramjam), linked from
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
import time

import pytest

from kohort.spark.wire import Cluster
from tests.helpers.brokers import KohortBroker, free_port

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
WORKER_DEPS = ["pyarrow", "crc32c", "lz4", "cramjam"]


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


def test_package_zip_holds_kohort_python_modules_and_the_decoder_next_to_it(tmp_path):
    import zipfile
    import kohort
    from kohort.protocol import records
    from kohort.spark import package_zip
    path = package_zip(str(tmp_path))
    assert package_zip(str(tmp_path)) == path                 # content-addressed: built once
    beside = sorted(os.listdir(os.path.dirname(path)))
    if records.HAVE_EXTENSION:
        from kohort.protocol import _crecords
        assert beside == sorted([os.path.basename(path), os.path.basename(_crecords.__file__)])
    else:
        assert beside == [os.path.basename(path)]
    names = zipfile.ZipFile(path).namelist()
    assert {"kohort/__init__.py", "kohort/spark/source.py", "kohort/protocol/records.py"} <= set(names)
    assert all(n.startswith("kohort/") and n.endswith((".py", ".typed")) for n in names)
    here = os.path.dirname(kohort.__file__)
    assert len(names) == sum(1 for d, _, fs in os.walk(here) if "__pycache__" not in d
                             for f in fs if f.endswith((".py", ".typed")))


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
    import kohort.spark                        # as unpickling the data source does, before records
    from kohort.protocol import records
    ext = records._ext.__file__ if records.HAVE_EXTENSION else None
    yield (sys.executable, kohort.__file__, ext)
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
                       text=True, timeout=150, env=driver_env(bare_python), cwd=str(tmp_path))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, r.stdout[-2000:] + r.stderr[-6000:]
    got = json.loads(lines[0][len("RESULT "):])
    want = sorted(v.decode() for v in values)
    assert got["batch"] == want and got["stream"] == want
    [(exe, kohort_file, decoder)] = got["workers"]
    assert exe == bare_python and ".zip" + os.sep + "kohort" in kohort_file
    from kohort.protocol import records
    if records.HAVE_EXTENSION:                 # the compiled decoder travelled next to the zip
        assert decoder and os.path.dirname(decoder) == os.path.dirname(kohort_file.split(".zip" + os.sep)[0])
    with Cluster({"bootstrap.servers": broker}) as c:
        assert c.offset_bounds([(out_topic, 0)])[(out_topic, 0)] == (0, len(values))


# -- a Spark standalone cluster on loopback ------------------------------------------------------------------
class StandaloneCluster:
    """A Spark standalone master and `workers` workers (1 core, 1 GiB each) started from pyspark's own
    jars, each in its own process group; `env` is the workers' environment (their executors inherit it)."""

    def __init__(self, root: str, env: dict, workers: int = 2):
        import pyspark
        self.home = os.path.dirname(os.path.abspath(pyspark.__file__))
        self.root, self.env, self.n = root, env, workers
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.work_dirs = [os.path.join(root, f"worker-{i}") for i in range(workers)]
        self.logs = [os.path.join(root, "master.log")] + [d + ".log" for d in self.work_dirs]
        os.makedirs(root, exist_ok=True)

    def _java(self, cls: str, args: list, log: str) -> None:
        cmd = ["java", "-Xmx256m", "-cp", os.path.join(self.home, "jars", "*"), cls, *args]
        # SPARK_SCALA_VERSION: what bin/load-spark-env.sh sets; the worker's executor launcher needs it
        env = {**self.env, "SPARK_HOME": self.home, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_SCALA_VERSION": "2.13"}
        with open(log, "ab") as fh:
            self.procs.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True, cwd=self.root))

    def _wait_log(self, log: str, text: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(log, errors="replace") as fh:
                if fh.read().count(text) >= count:
                    return
            for p in self.procs:
                assert p.poll() is None, f"{p.args[4]} exited:\n" + self.tail()
            time.sleep(0.3)
        raise AssertionError(f"no {text!r} in {log} after {timeout} s:\n" + self.tail())

    def start(self) -> "StandaloneCluster":
        self._java("org.apache.spark.deploy.master.Master",
                   ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0"], self.logs[0])
        self._wait_log(self.logs[0], "Starting Spark master at", 1, 60)
        for d, log in zip(self.work_dirs, self.logs[1:]):
            os.makedirs(d)
            self._java("org.apache.spark.deploy.worker.Worker",
                       [self.master_url, "--cores", "1", "--memory", "1g", "--host", "127.0.0.1",
                        "--webui-port", "0", "--work-dir", d], log)
        self._wait_log(self.logs[0], "Registering worker", self.n, 60)
        return self

    def tail(self) -> str:
        out = []
        for log in self.logs:
            if os.path.exists(log):
                with open(log, errors="replace") as fh:
                    out.append(f"--- {log}\n" + fh.read()[-1500:])
        return "\n".join(out)

    def stop(self) -> None:
        for p in reversed(self.procs):                  # workers (and their executors), then the master
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                pass
            try:                                        # whatever is left in its group (executors)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)


PIPELINE = """
[source]
bootstrap_servers = "{addr}"
topic = "{topic}"
starting_offsets = "earliest"
group_id = "cluster-pipeline"

[events]
fields = {{ user = "string", amount = "double", ts = "timestamp" }}
event_time = "ts"

[aggregate]
key = "user"
window = "10 seconds"
watermark = "5 seconds"
metrics = ["count", "sum(amount)"]

[sink]
path = "{out}/agg"
checkpoint = "{out}/cp"
trigger = "1 second"
dead_letter_topic = "{dlq}"

[spark]
conf = {{ "spark.executor.memory" = "512m", "spark.cores.max" = "2", "spark.sql.shuffle.partitions" = "2" }}
"""


def committed_parquet(path: str) -> list:
    """The files of a Spark streaming Parquet sink that its log (_spark_metadata) lists as committed."""
    log = os.path.join(path, "_spark_metadata")
    files = []
    for name in sorted(os.listdir(log)) if os.path.isdir(log) else []:
        if name.startswith("."):
            continue
        with open(os.path.join(log, name)) as fh:
            lines = fh.read().splitlines()[1:]                # the first line is the format version
        files += [json.loads(ln)["path"].removeprefix("file://") for ln in lines if ln.strip()]
    return files


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_pipeline_on_a_standalone_cluster_whose_python_lacks_kohort(broker, tmp_path):
    import pyarrow.dataset as ds
    pylog = str(tmp_path / "python-starts.log")
    bare = make_bare_python(str(tmp_path / "bare"), log_path=pylog)
    topic, dlq = f"cluster-{os.getpid()}", f"cluster-dlq-{os.getpid()}"
    events = [{"user": u, "amount": a, "ts": f"2026-01-01T00:00:{s:02d}Z"}
              for s in range(30) for u, a in (("ada", 1.0), ("ken", 2.5))]
    events.append({"user": "ada", "amount": 0.0, "ts": "2026-01-01T00:01:40Z"})     # moves the watermark
    values = [json.dumps(e).encode() for e in events] + [b"not json"]
    produce(broker, topic, 2, values)
    with Cluster({"bootstrap.servers": broker}) as c:
        c.create_topics({dlq: 1})
    out = str(tmp_path / "out")
    config = tmp_path / "pipeline.toml"
    config.write_text(PIPELINE.format(addr=broker, topic=topic, out=out, dlq=dlq))
    env = driver_env(bare)                                  # the workers' Python: the bare one
    cluster = StandaloneCluster(str(tmp_path / "spark"), {**env, "PYSPARK_PYTHON": bare})
    driver = None
    try:
        cluster.start()
        log = open(tmp_path / "driver.log", "wb")
        driver = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
             "from kohort.cli.main import main; sys.exit(main(sys.argv[1:]))", SRC,
             "pipeline", "--config", str(config), "--master", cluster.master_url, "--duration", "300"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=str(tmp_path))
        want = {(f"2026-01-01 00:00:{w}0", u): (10, 10 * a) for w in range(3) for u, a in (("ada", 1.0), ("ken", 2.5))}
        got = {}
        deadline = time.monotonic() + 240           # Spark start, 3 windows closed
        while time.monotonic() < deadline and got != want:
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-4000:] + cluster.tail()
            time.sleep(2)
            files = committed_parquet(out + "/agg")
            if files:
                rows = ds.dataset(files, format="parquet").to_table().to_pylist()
                got = {(r["window_start"].strftime("%Y-%m-%d %H:%M:%S"), r["user"]): (r["count"], r["sum_amount"])
                       for r in rows}
        assert got == want, (tmp_path / "driver.log").read_text()[-4000:]
        time.sleep(3)                                      # the dead-letter query's batch
        driver.send_signal(signal.SIGINT)                  # Ctrl-C: stops the queries, prints the totals
        driver.wait(60)
    finally:
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(10)
        cluster.stop()
    text = (tmp_path / "driver.log").read_text()
    assert f"events {len(values)}, malformed 1 (written to {dlq})" in text, text[-3000:]
    with Cluster({"bootstrap.servers": broker}) as c:
        assert c.offset_bounds([(dlq, 0)])[(dlq, 0)] == (0, 1)
    # Python workers ran on both executors (cwd in a worker's directory), all from the bare venv
    starts = [line.split(" ", 1) for line in open(pylog).read().splitlines()]
    assert {exe for exe, _ in starts} == {bare}
    on = {d for _, cwd in starts for d in cluster.work_dirs if cwd.startswith(d + os.sep)}
    assert on == set(cluster.work_dirs), starts
