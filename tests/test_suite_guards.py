"""The run's guards against hangs and leftovers (issue 11), exercised for real: tests/helpers/watchdog.py ends a
process stuck in C code with the GIL held (where pytest-timeout's signal cannot reach it) and kills
everything carrying the run's marker, also processes in sessions of their own."""
import os
import subprocess
import sys
import tempfile
import time
import uuid

from tests.helpers.watchdog import MARKER, run_processes

WATCHDOG = os.path.join(os.path.dirname(__file__), "helpers", "watchdog.py")

# stuck in C with the GIL held: libc's sleep called through ctypes.PyDLL (which keeps the GIL), SIGALRM
# blocked so the interrupted sleep is not even cut short; its handler (exit 3) can never run
STUCK = ("import ctypes, faulthandler, signal, subprocess, sys\n"
         "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
         "signal.signal(signal.SIGALRM, lambda *a: sys.exit(3))\n"
         "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM}); signal.alarm(1)\n"
         "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
         "print('spinning', flush=True)\n"
         "while True: ctypes.PyDLL(None).sleep(300)\n")


def test_watchdog_ends_a_test_stuck_with_the_gil_held_and_kills_its_children():
    run_id = "guard-" + uuid.uuid4().hex
    env = {**os.environ, MARKER: run_id}
    stuck = subprocess.Popen([sys.executable, "-c", STUCK], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    fd, state = tempfile.mkstemp(prefix="kohort-watchdog-test-")
    os.close(fd)
    try:
        assert stuck.stdout.readline().strip() == "spinning"
        time.sleep(1.5)                       # its own SIGALRM has fired and could not be handled
        assert stuck.poll() is None
        assert len(run_processes(run_id, {os.getpid()})) == 2     # the spinner and its sleep child
        with open(state, "w") as fh:
            fh.write(f"{time.time() - 1} tests/fake.py::test_stuck")
        wd = subprocess.run([sys.executable, WATCHDOG, str(stuck.pid), state, run_id],
                            capture_output=True, text=True, timeout=30)
        assert wd.returncode == 1
        assert "test_stuck passed its hard deadline" in wd.stderr
        assert stuck.wait(5) == -9
        assert 'line 7 in <module>' in stuck.stderr.read()      # faulthandler's dump: where it was stuck
        deadline = time.monotonic() + 5
        while run_processes(run_id, {os.getpid()}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert run_processes(run_id, {os.getpid()}) == []
    finally:
        if stuck.poll() is None:
            stuck.kill()
        os.unlink(state)


def test_watchdog_sweeps_the_run_when_pytest_is_gone():
    run_id = "guard-" + uuid.uuid4().hex
    env = {**os.environ, MARKER: run_id}
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"], env=env)
    orphan = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    fd, state = tempfile.mkstemp(prefix="kohort-watchdog-test-")
    os.close(fd)
    try:
        wd = subprocess.run([sys.executable, WATCHDOG, str(parent.pid), state, run_id],
                            capture_output=True, text=True, timeout=30)
        assert wd.returncode == 0
        assert orphan.wait(5) == -9
    finally:
        for p in (parent, orphan):
            if p.poll() is None:
                p.kill()
            p.wait()
        os.unlink(state)


def test_every_child_of_the_run_carries_the_marker():
    out = subprocess.run(["sh", "-c", f"echo ${MARKER}"], capture_output=True, text=True).stdout.strip()
    assert out and out == os.environ[MARKER]


def test_confluent_kafka_clients_left_open_are_closed_before_the_broker_stops():
    import confluent_kafka

    from tests.helpers import ck_tracking
    from tests.helpers.brokers import KohortBroker
    with KohortBroker() as b:
        c = confluent_kafka.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "left-open",
                                      "log_level": 0})
        c.subscribe(["left-open"])
        c.poll(0.5)
        p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "log_level": 0})
        p.produce("left-open", b"x")
        assert ck_tracking.open_count() >= 2
    # the fixture's exit closed both while the broker was still up
    assert ck_tracking.open_count() == 0
    import pytest
    with pytest.raises(RuntimeError):
        c.poll(0)          # a closed Consumer refuses to poll


def test_a_sweep_of_the_run_matches_the_workers_processes_and_a_workers_sweep_only_its_own():
    """xdist: a worker marks its processes <run id>.<worker>; the run's sweep (controller, .ci/run)
    finds them, another worker's does not."""
    run_id = "guard-" + uuid.uuid4().hex
    procs = {w: subprocess.Popen(["sleep", "300"], env={**os.environ, MARKER: f"{run_id}.{w}"},
                                 start_new_session=True) for w in ("gw0", "gw1")}
    other = subprocess.Popen(["sleep", "300"], env={**os.environ, MARKER: run_id + "x.gw0"})
    try:
        found = {pid for pid, _ in run_processes(run_id, {os.getpid()})}
        assert found == {procs["gw0"].pid, procs["gw1"].pid}
        assert {pid for pid, _ in run_processes(f"{run_id}.gw1", set())} == {procs["gw1"].pid}
    finally:
        for p in (*procs.values(), other):
            p.kill()
            p.wait()


def test_a_test_stuck_in_an_xdist_worker_is_ended_reported_and_leaves_nothing():
    """A pytest of its own on tests/helpers/xdist_stuck_case.py with two workers: the stuck test is killed by
    its worker's watchdog (timeout 3 s + grace 2 s), xdist reports it and runs the rest."""
    run_id = "guard-xdist-" + uuid.uuid4().hex
    env = {**os.environ, MARKER: run_id, "KOHORT_WATCHDOG_GRACE_S": "2"}
    env.pop("PYTEST_XDIST_WORKER", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pytest", "tests/helpers/xdist_stuck_case.py", "-n", "2", "-o", "timeout=3",
                          "-p", "no:cacheprovider", "-q"], cwd=root, env=env, capture_output=True, text=True,
                         timeout=120)
    took = time.monotonic() - t0
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "test_stuck_with_the_gil_held" in text and "2 passed" in text, text
    assert "crashed" in text, text
    assert took < 60, took
    deadline = time.monotonic() + 5
    while run_processes(run_id, {os.getpid()}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run_processes(run_id, {os.getpid()}) == []
