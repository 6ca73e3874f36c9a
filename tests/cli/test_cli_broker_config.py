"""`kohort broker --config` takes a stock Kafka server.properties (Kafka 4.x KRaft and 3.x ZooKeeper
mode, tests/cli/configs/): settings with no meaning for one node are accepted with one notice line each, the
controller listener is not opened, log.retention.hours is read as Kafka reads it; an unknown name is still
refused, naming the closest known one."""
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kohort.broker.config import BrokerConfig, BrokerConfigError, load_properties, unused_reason
from tests.helpers.brokers import READY, free_port

CONFIGS = Path(__file__).with_name("configs")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _start(args):
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.Popen([sys.executable, "-m", "kohort.cli.main", "broker", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env)
    lines, ready = [], threading.Event()

    def pump():
        for ln in p.stdout:
            lines.append(ln.rstrip("\n"))
            if ln.startswith(READY):
                ready.set()
        ready.set()
    threading.Thread(target=pump, daemon=True).start()
    ready.wait(60)
    return p, lines


def _stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def _round_trip(bootstrap):
    from kohort.client.admin import Admin
    from kohort.client.consumer import Consumer
    from kohort.client.producer import Producer
    with Admin({"bootstrap.servers": bootstrap}) as a:
        a.create_topics({"stock": 1})
        cfg = a.describe_configs([("topic", "stock")])[(2, "stock")]
    with Producer({"bootstrap.servers": bootstrap}) as p:
        p.produce("stock", b"hello").result(10)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([("stock", 0)])
        got = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = c.poll(0.5)
    assert [r.value for r in got] == [b"hello"]
    return cfg


def test_stock_kafka4_server_properties_starts_kohort(tmp_path):
    port, cport = free_port(), free_port()
    text = (CONFIGS / "kafka-4-server.properties").read_text()
    text = text.replace(":9092", f":{port}").replace(":9093", f":{cport}")
    text = text.replace("log.dirs=/tmp/kraft-combined-logs", f"log.dirs={tmp_path / 'data'}")
    conf = tmp_path / "server.properties"
    conf.write_text(text)
    p, lines = _start(["--config", str(conf)])
    try:
        assert any(ln.startswith(READY) for ln in lines), lines
        notices = [ln for ln in lines if "accepted and ignored" in ln]
        ignored = [k for k in load_properties(str(conf)) if unused_reason(k)]
        assert sorted(ln.split(": ", 1)[1].split("=")[0] for ln in notices) == sorted(ignored)
        assert {"num.network.threads", "process.roles", "controller.quorum.bootstrap.servers",
                "socket.send.buffer.bytes"} <= set(ignored)
        assert any("listener CONTROLLER" in ln and "not opened" in ln for ln in lines)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", cport), timeout=2).close()
        cfg = _round_trip(f"localhost:{port}")
        assert cfg["retention.ms"].value == str(168 * 3600_000)
    finally:
        _stop(p)


def test_stock_kafka3_zookeeper_server_properties_starts_kohort(tmp_path):
    port = free_port()
    p, lines = _start(["--config", str(CONFIGS / "kafka-3-zk-server.properties"), "--listen", f"127.0.0.1:{port}",
                       "--data-dir", str(tmp_path / "data")])
    try:
        assert any(ln.startswith(READY) for ln in lines), lines
        assert any(re.search(r"zookeeper\.connect=localhost:2181 accepted and ignored: KRaft only", ln)
                   for ln in lines)
        _round_trip(f"127.0.0.1:{port}")
    finally:
        _stop(p)


def test_unknown_names_are_still_refused_with_the_closest():
    with pytest.raises(BrokerConfigError, match="did you mean 'num.network.threads'"):
        BrokerConfig.from_properties({"num.netwrok.threads": "3"})
    with pytest.raises(BrokerConfigError, match="did you mean 'log.retention.hours'"):
        BrokerConfig.from_properties({"log.retention.hour": "3"})


def test_retention_in_hours_and_minutes_as_kafka_reads_them():
    assert BrokerConfig.from_properties({"log.retention.hours": "2"})["log.retention.ms"] == 7200_000
    assert BrokerConfig.from_properties({"log.retention.hours": "2", "log.retention.minutes": "3"}
                                        )["log.retention.ms"] == 180_000
    assert BrokerConfig.from_properties({"log.retention.minutes": "3", "log.retention.ms": "5"}
                                        )["log.retention.ms"] == 5
    assert BrokerConfig.from_properties({"log.roll.hours": "1"})["log.roll.ms"] == 3600_000
    with pytest.raises(BrokerConfigError, match="log.retention.hours"):
        BrokerConfig.from_properties({"log.retention.hours": "a week"})


def test_properties_continuation_lines(tmp_path):
    f = tmp_path / "x.properties"
    f.write_text("a=1\nsasl.jaas.config=org.Foo required \\\n    username=\"u\";\nb = 2\n")
    assert load_properties(str(f)) == {"a": "1", "sasl.jaas.config": 'org.Foo required username="u";', "b": "2"}
