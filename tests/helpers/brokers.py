"""Test fixture: run `kohort broker` as a subprocess on a free 127.0.0.1 port with a temp data dir.

    with KohortBroker(data_dir) as b:       # waits for the ready line
        b.bootstrap                         # "127.0.0.1:PORT"
        b.restart() / b.kill() / b.start()

`kohort_broker` is a pytest fixture yielding a started KohortBroker, stopped (SIGTERM) afterwards.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

READY = "kohort broker ready on "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KohortBroker:
    def __init__(self, data_dir: str | None = None, port: int | None = None, config: dict | None = None,
                 metrics_port: int | None = None, extra_args: list[str] | None = None):
        self._tmp = None
        self._cfgdir = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kohort-broker-")
            data_dir = self._tmp.name
        self.data_dir = data_dir
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.metrics_port = metrics_port
        self.config = dict(config or {})
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen | None = None
        self.log_lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "KohortBroker":
        # `listeners` in the config (security tests) replaces --listen; `port` is then the first one's
        listen = [] if "listeners" in self.config else ["--listen", self.bootstrap]
        args = [sys.executable, "-m", "kohort.cli.main", "broker", *listen,
                "--data-dir", self.data_dir, "--log-level", "warning", *self.extra_args]
        if self.config:
            if self._cfgdir is None:
                self._cfgdir = tempfile.TemporaryDirectory(prefix="kohort-props-")
            path = os.path.join(self._cfgdir.name, "broker.properties")
            with open(path, "w") as fh:
                for k, v in self.config.items():
                    fh.write(f"{k}={v}\n")
            args += ["--config", path]
        if self.metrics_port:
            args += ["--metrics", f"127.0.0.1:{self.metrics_port}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1)
        deadline = time.monotonic() + timeout
        ready = threading.Event()

        def pump(proc=self.proc):
            for line in proc.stdout:
                self.log_lines.append(line.rstrip("\n"))
                if line.startswith(READY):
                    ready.set()
        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("kohort broker did not become ready:\n" + "\n".join(self.log_lines))
        return self

    def stop(self, timeout: float = 20.0) -> int | None:
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._reader is not None:
            self._reader.join(5)
        self.proc = None
        return p.returncode

    def kill(self) -> None:
        p = self.proc
        if p is not None:
            p.kill()
            p.wait()
            if self._reader is not None:
                self._reader.join(5)
            self.proc = None

    def restart(self) -> "KohortBroker":
        self.stop()
        return self.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def __enter__(self) -> "KohortBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        from tests.helpers.ck_tracking import close_open_clients
        close_open_clients()          # librdkafka clients close while their broker is still up
        self.stop()
        self.cleanup()

    def cleanup(self) -> None:
        for d in (self._tmp, self._cfgdir):
            if d is not None:
                d.cleanup()


@pytest.fixture
def kohort_broker():
    b = KohortBroker()
    with b:
        yield b
