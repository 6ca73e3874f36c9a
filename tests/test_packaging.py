"""kohort as a user installs it: `python -m build` gives an sdist and a wheel carrying the compiled twin,
`twine check --strict` accepts both, and the wheel installs into a fresh venv (pip may fetch the three core
dependencies from PyPI) where, without PySpark or pyarrow, `kohort broker` starts and answers, kohort's
producer and consumer round-trip records through it with the compiled twin loaded, `import kohort.spark`
and `kohort pipeline` fail with one line naming `pip install 'kohort[spark]'`, mypy --strict accepts the
typed usage examples (threaded and asyncio) against the installed wheel (py.typed), the pytest plugin
serves a throwaway project with no conftest
(README's example, per-test brokers, restart), and the venv stays small: its size beyond
Python's own empty venv is printed per package and held to a budget (slow: about 100 s). Fast: every
module outside kohort.spark imports, and the CLI runs, with pyspark/pyarrow/numpy/pandas refused."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers.brokers import READY, free_port

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [ROOT / "examples" / "typed_usage.py", ROOT / "examples" / "typed_usage_async.py"]
# The goal is 30 MB beyond an empty venv: kohort with the .pyc pip writes, lz4, cramjam (snappy and zstd)
# and crc32c. python-zstandard (23.5 MB: its wheels carry two 12 MB backends, C and cffi) is not a core
# dependency. The budget guards that figure, printed per package; the core install pulling PySpark back
# (a 699 MB venv) is checked separately below.
SIZE_BUDGET_MB = 30.0

CLIENT = r"""
import json, sys, time
import kohort
from kohort import Admin, Consumer, Producer
from kohort.protocol import records
boot = sys.argv[1]
admin = Admin({"bootstrap.servers": boot})
admin.create_topics(["wheel"], num_partitions=2)
admin.close()
p = Producer({"bootstrap.servers": boot, "compression.type": "zstd"})   # zstd without python-zstandard
for i in range(200):
    p.produce("wheel", value=b"v%03d" % i, key=b"k%d" % (i % 5))
assert p.flush(30) == 0
p.close()
c = Consumer({"bootstrap.servers": boot, "group.id": "wheel-g", "auto.offset.reset": "earliest"})
c.subscribe(["wheel"])
got, deadline = [], time.monotonic() + 60
while len(got) < 200 and time.monotonic() < deadline:
    got += [r.value for r in c.poll(1.0)]
c.close()
print(json.dumps({"file": kohort.__file__, "twin": records.HAVE_EXTENSION,
                  "values": sorted(v.decode() for v in got)}))
"""


def _env() -> dict:
    """The environment of a command in the fresh venv: nothing of this checkout or of the suite's venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(args, timeout=600, check=True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=_env(),
                       stdin=subprocess.DEVNULL, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{args} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def _size_mb(path: Path) -> float:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            fp = os.path.join(dirpath, f)
            if not os.path.islink(fp):
                total += os.path.getsize(fp)
    return total / 1e6


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src") / "kohort"
    # build from a clean copy of the sources: no in-place extension, no build/ left by others
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", ".peers", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".pytest_cache",
        ".hypothesis", "data", "out"))
    _run([sys.executable, "-m", "build", "--outdir", out, src], timeout=900)
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> tuple[Path, float]:
    """A fresh venv with only the wheel installed; returns (its path, its size beyond an empty venv)."""
    base = tmp_path_factory.mktemp("venvs")
    empty, fresh = base / "empty", base / "fresh"
    _run([sys.executable, "-m", "venv", empty])
    _run([sys.executable, "-m", "venv", fresh])
    wheel = next(dist.glob("*.whl"))
    _run([fresh / "bin" / "python", "-m", "pip", "install", "-q", wheel], timeout=900)
    return fresh, _size_mb(fresh) - _size_mb(empty)


BLOCKED = r"""
import importlib, importlib.abc, pkgutil, sys
HEAVY = ("pyspark", "pyarrow", "numpy", "pandas", "py4j")

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
import kohort
for m in pkgutil.walk_packages(kohort.__path__, "kohort."):
    if not m.name.startswith("kohort.spark"):
        importlib.import_module(m.name)
try:
    import kohort.spark
except ModuleNotFoundError as e:
    print("spark:", e)
from kohort.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_core_imports_and_cli_work_without_spark_packages(tmp_path):
    """Every module outside kohort.spark imports with pyspark, pyarrow, numpy and pandas refused, and the
    CLI answers; kohort.spark and the pipeline command fail with the one-line hint."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-c", BLOCKED, "topics", "--help"], capture_output=True, text=True,
                       timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("spark: kohort.spark needs pyspark (PySpark 4.0-4.3 and pyarrow): pip install 'kohort[spark]'"
            in r.stdout.splitlines())
    cfg = tmp_path / "p.toml"
    cfg.write_text("[source]\nbootstrap_servers = \"127.0.0.1:1\"\ntopic = \"t\"\n")
    r = subprocess.run([sys.executable, "-c", BLOCKED, "pipeline", "--config", str(cfg)], capture_output=True,
                       text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "kohort pipeline: kohort.spark needs pyspark (PySpark 4.0-4.3 and pyarrow): pip install 'kohort[spark]'"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sdist_and_wheel_build_and_pass_twine(dist):
    sdists, wheels = list(dist.glob("*.tar.gz")), list(dist.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1
    _run([sys.executable, "-m", "twine", "check", "--strict", *sdists, *wheels])
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert any(n.startswith("kohort/protocol/_crecords") and n.endswith(".so") for n in names), names
    assert "kohort/py.typed" in names
    assert not any(n.endswith((".pyc", ".c")) or n.startswith("tests/") for n in names)
    meta = zipfile.ZipFile(wheels[0]).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [ln.split(":", 1)[1].strip() for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    core = sorted(r.split(">")[0].split("<")[0].split("=")[0].strip() for r in requires if "extra ==" not in r)
    assert core == ["cramjam", "crc32c", "lz4"], requires
    assert any(r.startswith("pyspark") and "<4.4" in r and "extra == \"spark\"" in r for r in requires), requires


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_wheel_in_a_fresh_venv_runs_broker_client_and_cli(venv, tmp_path):
    path, extra_mb = venv
    py, kohort_cli = path / "bin" / "python", path / "bin" / "kohort"
    site = next((path / "lib").glob("python3*/site-packages"))
    sizes = sorted(((_size_mb(p), p.name) for p in site.iterdir() if p.is_dir()), reverse=True)
    print(f"fresh venv with the kohort wheel: {extra_mb:.1f} MB beyond Python's empty venv; "
          + ", ".join(f"{n} {mb:.1f}" for mb, n in sizes[:8]))
    assert extra_mb <= SIZE_BUDGET_MB, f"{extra_mb:.1f} MB beyond an empty venv (budget {SIZE_BUDGET_MB} MB)"
    heavy = ("pyspark", "pyarrow", "numpy", "pandas", "py4j")
    assert not [n for _, n in sizes if n.lower().split("-")[0] in heavy], sizes
    assert not [n for _, n in sizes if n.lower().startswith("zstandard")], sizes

    port = free_port()
    broker = subprocess.Popen([kohort_cli, "broker", "--listen", f"127.0.0.1:{port}",
                               "--data-dir", tmp_path / "data", "--log-level", "warning"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                              stdin=subprocess.DEVNULL)
    try:
        first = broker.stdout.readline()
        assert first.startswith(READY), first
        r = _run([py, "-c", CLIENT, f"127.0.0.1:{port}"], timeout=180, cwd=tmp_path)
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["file"].startswith(str(path)), out["file"]          # the installed wheel, not src/
        assert out["twin"] is True
        assert out["values"] == [f"v{i:03d}" for i in range(200)]
        topics = _run([kohort_cli, "topics", "list", "-b", f"127.0.0.1:{port}"], cwd=tmp_path)
        assert "wheel" in topics.stdout.split()
    finally:
        broker.terminate()
        broker.wait(30)

    r = _run([py, "-c", "import kohort.spark"], check=False, cwd=tmp_path)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("ModuleNotFoundError: kohort.spark needs pyspark (PySpark 4.0-4.3 and pyarrow): "
                    "pip install 'kohort[spark]'"), r.stderr
    cfg = tmp_path / "p.toml"
    cfg.write_text("[source]\nbootstrap_servers = \"127.0.0.1:1\"\ntopic = \"t\"\n")
    r = _run([kohort_cli, "pipeline", "--config", cfg], check=False, cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "pip install 'kohort[spark]'" in r.stderr


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_typed_example_checks_against_the_installed_wheel(venv, tmp_path):
    """mypy --strict on the usage examples (threaded and asyncio), kohort's types taken from the wheel
    (py.typed), not src/."""
    path, _ = venv
    r = _run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
              path / "bin" / "python", *EXAMPLES], check=False, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


THROWAWAY_TESTS = '''
from confluent_kafka import Consumer, Producer
import pytest


@pytest.mark.parametrize("n", range(20))
def test_each_test_gets_its_own_broker(kafka_broker, n):
    assert kafka_broker.topics() == []
    kafka_broker.create_topic(f"t{n}")
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    p.produce(f"t{n}", f"v{n}".encode())
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "g",
                  "auto.offset.reset": "earliest"})
    c.subscribe([f"t{n}"])
    msg = c.poll(10)
    c.close()
    assert msg is not None and msg.error() is None and msg.value() == f"v{n}".encode()


def test_restart_keeps_acknowledged_records(kafka_broker):
    kafka_broker.create_topic("kept")
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    p.produce("kept", b"before")
    assert p.flush(10) == 0
    kafka_broker.restart()
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "g",
                  "auto.offset.reset": "earliest"})
    c.assign([__import__("confluent_kafka").TopicPartition("kept", 0, 0)])
    msg = c.poll(10)
    c.close()
    assert msg is not None and msg.value() == b"before"
'''


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_pytest_plugin_from_the_wheel_serves_a_project_without_conftest(venv, tmp_path):
    """A throwaway project whose venv holds only the wheel (+ pytest, confluent-kafka) and which has no
    conftest: the entry point alone brings `kafka_broker`; README's example and per-test brokers pass;
    the median fixture set-up measured by `pytest --durations` is printed."""
    from tests.testing.test_testing_plugin import readme_example
    path, _ = venv
    py = path / "bin" / "python"
    _run([py, "-m", "pip", "install", "-q", "pytest>=8,<10", "confluent-kafka>=2.6,<3"], timeout=900)
    project = tmp_path / "app"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_readme.py").write_text(readme_example())
    (project / "tests" / "test_app.py").write_text(THROWAWAY_TESTS)
    r = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", "--durations-min=0", "-vv",
              "tests"], timeout=900, check=False, cwd=project)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "23 passed" in r.stdout, r.stdout[-2000:]
    setups = sorted(float(line.split("s ", 1)[0]) for line in r.stdout.splitlines()
                    if " setup " in line and "tests/test_app.py::test_each_test_gets_its_own_broker" in line)
    assert len(setups) == 20, r.stdout[-3000:]
    median_ms = (setups[9] + setups[10]) / 2 * 1000
    print(f"kafka_broker fixture set-up in a wheel-only venv: median {median_ms:.1f} ms, max {setups[-1] * 1000:.1f} ms "
          f"over {len(setups)} tests (pytest --durations prints 10 ms steps; the first set-up imports the broker)")
