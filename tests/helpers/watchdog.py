"""The test run's watchdog: a separate process that ends a test stuck where Python cannot stop it.

pytest-timeout's signal method fails a slow test from inside pytest, but a thread spinning in C code
that holds the GIL (librdkafka's destroy in a Consumer's dealloc, for one) never lets that signal be
handled. conftest.py starts this script once per run; before each test it writes the test's hard
deadline to STATE_FILE ("<epoch seconds> <nodeid>"), after it empties the file. Every second:

- pytest gone → kill what the run started (below) and exit;
- deadline passed → SIGUSR1 to pytest (faulthandler dumps every thread's stack to stderr, even with the
  GIL held), then SIGKILL pytest and everything the run started, and exit 1.

"Everything the run started" = every process whose environment carries KOHORT_TEST_RUN=<this run's id>
(children inherit it, also those started in a new session, like JVMs and brokers), or
KOHORT_TEST_RUN=<this run's id>.<suffix>: an xdist worker marks its processes <run id>.<worker> and
runs its own watchdog with that id, so a sweep of the run id also ends every worker's processes while
a worker's sweep ends only its own.

usage: python watchdog.py PYTEST_PID STATE_FILE RUN_ID
"""
from __future__ import annotations

import os
import signal
import sys
import time

MARKER = "KOHORT_TEST_RUN"


def run_processes(run_id: str, exclude: set[int]) -> list[tuple[int, str]]:
    """(pid, command line) of live processes whose environment has KOHORT_TEST_RUN=run_id."""
    needle = f"{MARKER}={run_id}".encode()
    prefix = needle + b"."
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in exclude:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            if needle not in env and not any(e.startswith(prefix) for e in env):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat", "rb") as fh:
                if fh.read().split(b") ", 1)[1][:1] == b"Z":     # a zombie is already dead
                    continue
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        found.append((pid, cmd[:200]))
    return found


def kill_run(run_id: str, exclude: set[int]) -> list[tuple[int, str]]:
    """SIGKILL every process of the run (except `exclude`); returns what was killed."""
    killed = []
    for _ in range(3):               # a dying parent may still fork; sweep a few times
        procs = run_processes(run_id, exclude)
        if not procs:
            break
        for pid, cmd in procs:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append((pid, cmd))
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return killed


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().split(b") ", 1)[1][:1] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def ancestors(pid: int) -> set[int]:
    """pid and its parents (make, the CI script): never killed by the sweep."""
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                pid = int(fh.read().split(b") ", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            break
    return out


def main() -> int:
    pytest_pid, state_file, run_id = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    me = {os.getpid()} | (ancestors(pytest_pid) - {pytest_pid})
    while True:
        time.sleep(1.0)
        if not alive(pytest_pid):
            kill_run(run_id, me)
            return 0
        try:
            with open(state_file) as fh:
                text = fh.read().strip()
        except FileNotFoundError:
            text = ""
        if not text:
            continue
        deadline_s, _, nodeid = text.partition(" ")
        if time.time() < float(deadline_s):
            continue
        sys.stderr.write(f"\nwatchdog: {nodeid} passed its hard deadline; dumping stacks and ending the run\n")
        sys.stderr.flush()
        try:
            os.kill(pytest_pid, signal.SIGUSR1)
            time.sleep(2.0)
            os.kill(pytest_pid, signal.SIGKILL)      # an xdist worker: the controller reports its test failed
        except ProcessLookupError:
            pass
        killed = kill_run(run_id, me)
        for pid, cmd in killed:
            sys.stderr.write(f"watchdog: killed {pid} {cmd}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
