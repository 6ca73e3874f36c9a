"""kohort.testing's pytest plugin as a user meets it: a throwaway project with no conftest (its tests
include README's example), run by pytest's own `pytester` in a subprocess, finds `kafka_broker`, `kafka_broker_session` and
`kafka_broker_factory` through the `pytest11` entry point alone; each test gets a fresh broker in
milliseconds (median fixture set-up by `pytest --durations`); `-p no:kohort` turns the plugin off."""
from __future__ import annotations

import os
import re
import statistics
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SRC = str(Path(__file__).resolve().parents[2] / "src")
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    """The example of README's "Testing your Kafka code", as the user would paste it."""
    text = README.read_text()
    section = text.split("## Testing your Kafka code", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]

APP_TESTS = '''
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient


def test_round_trip(kafka_broker):
    kafka_broker.create_topic("orders", partitions=2)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    p.produce("orders", b"order-1")
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "app",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["orders"])
    msg = None
    for _ in range(100):
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            break
    c.close()
    assert msg.value() == b"order-1"


def test_retriable_error_is_retried(kafka_broker):
    kafka_broker.create_topic("orders")
    kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    errors = []
    p.produce("orders", b"x", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(10) == 0
    assert errors == [None] and kafka_broker.faults_applied("Produce") == 1


def test_factory_config(kafka_broker_factory):
    b = kafka_broker_factory({"auto.create.topics.enable": "false", "num.partitions": 4})
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    md = admin.list_topics(timeout=10)
    assert "orders" not in md.topics


SESSION_PORTS = set()


@pytest.mark.parametrize("i", range(2))
def test_session_broker(kafka_broker_session, i):
    SESSION_PORTS.add(kafka_broker_session.port)
    assert len(SESSION_PORTS) == 1


@pytest.mark.parametrize("i", range(25))
def test_fresh_broker(kafka_broker, i):
    assert kafka_broker.topics() == []
    kafka_broker.create_topic("t%d" % i)
'''


def _install_entry_point(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `pip install kohort` gives pytest: a distribution whose pytest11 entry point names the
    plugin (kohort itself comes from this checkout's src, put first on the path)."""
    site = pytester.path / "site"
    dist = site / "kohort_entry_point-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kohort-entry-point\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\nkohort = kohort.testing.plugin\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), SRC]))
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


def test_throwaway_project_uses_the_fixtures_with_no_conftest(pytester, monkeypatch):
    _install_entry_point(pytester, monkeypatch)
    pytester.makepyfile(test_app=APP_TESTS, test_readme=readme_example())
    assert not list(pytester.path.rglob("conftest.py"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--durations=0", "--durations-min=0",
                                           "-vv", timeout=240)
    result.assert_outcomes(passed=32)
    setups = [float(m.group(1)) for m in
              (re.match(r"\s*([\d.]+)s setup\s+test_app.py::test_fresh_broker", line) for line in result.outlines)
              if m]
    assert len(setups) == 25, result.outlines[-60:]
    median = statistics.median(setups)
    print(f"kafka_broker set-up by pytest --durations (10 ms resolution): median {median * 1000:.0f} ms over 25 tests")
    assert median <= 0.1, result.outlines[-60:]


def test_fixtures_are_listed_and_the_plugin_can_be_turned_off(pytester, monkeypatch):
    _install_entry_point(pytester, monkeypatch)
    pytester.makepyfile(test_app="def test_x(kafka_broker):\n    assert kafka_broker.bootstrap_servers\n")
    listed = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider", timeout=120)
    text = "\n".join(listed.outlines)
    for name in ("kafka_broker", "kafka_broker_session", "kafka_broker_factory"):
        assert re.search(rf"^{name}( \[session scope\])? -- .*kohort[/\\]testing[/\\]plugin.py", text, re.M), text
    assert "A fresh in-process Kafka broker (kohort) for this test" in text
    off = pytester.runpytest_subprocess("-p", "no:kohort", "-p", "no:cacheprovider", timeout=120)
    off.assert_outcomes(errors=1)
    assert any("fixture 'kafka_broker' not found" in line for line in off.outlines)


def test_importing_the_plugin_imports_no_broker(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", SRC)
    r = pytester.run(sys.executable, "-c",
                     "import sys, kohort.testing.plugin; "
                     "print(sorted(m for m in sys.modules if m.startswith(('kohort.broker', 'kohort.protocol', "
                     "'kohort.client'))))")
    assert r.ret == 0 and r.outlines[-1] == "[]", r.outlines
