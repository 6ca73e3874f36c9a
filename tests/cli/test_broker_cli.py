"""`kohort broker` as a command: ready line, clean stop on SIGTERM and SIGINT (clean-shutdown marker),
--config properties (topic defaults, log.dirs), argument errors as one line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.helpers.brokers import KohortBroker, free_port


def test_ready_line_and_sigint_stop(tmp_path):
    b = KohortBroker(str(tmp_path / "d"))
    b.start()
    assert b.log_lines[0] == f"kohort broker ready on 127.0.0.1:{b.port}"
    b.proc.send_signal(signal.SIGINT)
    assert b.proc.wait(20) == 0
    assert os.path.exists(tmp_path / "d" / ".kohort_cleanshutdown")
    b.proc = None


def test_config_file_sets_topic_defaults_and_log_dirs(tmp_path):
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource
    data = tmp_path / "from-props"
    props = tmp_path / "server.properties"
    props.write_text(f"# kafka style\nnum.partitions=4\nlog.retention.ms=5000\nlog.dirs={data}\n")
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "kohort.cli.main", "broker", "--listen", f"127.0.0.1:{port}",
                          "--config", str(props), "--log-level", "warning"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert p.stdout.readline().strip() == f"kohort broker ready on 127.0.0.1:{port}"
        a = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        md = a.list_topics("auto", timeout=10)                  # auto-created with num.partitions
        assert len(md.topics["auto"].partitions) == 4
        res = ConfigResource(ConfigResource.Type.TOPIC, "auto")
        cfg = a.describe_configs([res])[res].result(10)
        assert cfg["retention.ms"].value == "5000"
        assert cfg["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 0
    assert (data / "auto-0").is_dir()


def test_bad_arguments_are_one_line_errors(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "kohort.cli.main", "broker", *args],
                              capture_output=True, text=True, timeout=30)
    r = run("--listen", "nohostport")
    assert r.returncode == 1 and r.stderr.strip() == "kohort broker: --listen must be HOST:PORT, got 'nohostport'"
    props = tmp_path / "p.properties"
    props.write_text("num.partition=3\n")
    r = run("--config", str(props), "--data-dir", str(tmp_path / "x"))
    assert r.returncode == 1 and "did you mean 'num.partitions'" in r.stderr and "Traceback" not in r.stderr
    r = run("--config", str(tmp_path / "missing.properties"))
    assert r.returncode == 1 and "no such file" in r.stderr


def test_metrics_port_in_use_is_a_clear_error_and_a_clean_stop(tmp_path):
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        mport = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "broker", "--listen", f"127.0.0.1:{free_port()}",
                            "--data-dir", str(tmp_path / "d"), "--metrics", f"127.0.0.1:{mport}"],
                           capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith("kohort broker: cannot start:")
    assert "Traceback" not in r.stderr
    assert os.path.exists(tmp_path / "d" / ".kohort_cleanshutdown")
