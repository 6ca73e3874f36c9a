"""Broker start-up order and the data-directory lock (issue 13, items 1 and 4).

* A second broker on a data directory that a running broker holds refuses to start with one line
  naming the directory (Kafka's `.lock`); the first keeps every acknowledged record. The lock dies
  with its process: after a SIGKILL the next broker starts on the same directory.
* The listening socket is bound before storage is opened: a taken port leaves the data directory
  untouched (it is not even created). A file given as --data-dir is one clear line naming it.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from kohort.storage import Storage
from kohort.storage.lock import DataDirLockedError
from tests.helpers.brokers import KohortBroker, free_port


def broker_cmd(*args):
    return subprocess.run([sys.executable, "-m", "kohort.cli.main", "broker", "--log-level", "warning", *args],
                          capture_output=True, text=True, timeout=60)


def produce(bootstrap: str, topic: str, n: int) -> None:
    from kohort.client.producer import Producer
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as p:
        futs = [p.produce(topic, b"%d" % i) for i in range(n)]
        assert p.flush(30) == 0
    assert all(f.exception() is None for f in futs)


def log_end(bootstrap: str, topic: str) -> int:
    from kohort.client.admin import LATEST, Admin
    from kohort.structs import TopicPartition
    with Admin({"bootstrap.servers": bootstrap}) as a:
        offs = a.list_offsets({TopicPartition(topic, 0): LATEST})
    return offs[TopicPartition(topic, 0)]


def test_second_broker_on_a_locked_data_dir_refuses_to_start(tmp_path):
    data = str(tmp_path / "d")
    with KohortBroker(data) as first:
        produce(first.bootstrap, "locked", 200)
        r = broker_cmd("--listen", f"127.0.0.1:{free_port()}", "--data-dir", data)
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stderr.strip().splitlines()[-1] == (
            f"kohort broker: the data directory {data} is in use by another broker process "
            f"(it holds the lock on {os.path.join(data, '.lock')}); give each broker its own --data-dir")
        assert "Traceback" not in r.stderr and "ready" not in r.stdout
        produce(first.bootstrap, "locked", 100)          # the first broker is unaffected
        first.kill()                                     # SIGKILL: the OS drops the lock
        first.start()
        assert log_end(first.bootstrap, "locked") == 300


def test_storage_lock_within_one_process(tmp_path):
    s = Storage(str(tmp_path))
    try:
        with pytest.raises(DataDirLockedError, match="in use by another broker process"):
            Storage(str(tmp_path))
    finally:
        s.close()
    Storage(str(tmp_path)).close()                       # close() released it


def test_port_in_use_fails_before_storage_is_touched(tmp_path):
    data = tmp_path / "never-created"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = broker_cmd("--listen", f"127.0.0.1:{port}", "--data-dir", str(data))
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kohort broker: cannot start:") and "address already in use" in last, r.stderr
    assert not data.exists()                             # no storage, no __consumer_offsets


def test_data_dir_that_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("not a directory\n")
    r = broker_cmd("--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(f))
    assert r.returncode == 1
    assert r.stderr.strip() == f"kohort broker: --data-dir {f}: exists and is not a directory"
    assert f.read_text() == "not a directory\n"
