"""Not collected by the suite (no test_ prefix): run by tests/test_suite_guards.py in a pytest of its
own with -n 2, to show that a test stuck with the GIL held in one xdist worker is ended by that
worker's watchdog, reported as failed, and that the run goes on and leaves no process behind."""
import ctypes
import signal
import subprocess
import time


def test_stuck_with_the_gil_held():
    subprocess.Popen(["sleep", "300"], start_new_session=True)     # a child the sweep must end
    signal.signal(signal.SIGALRM, signal.SIG_IGN)                 # pytest-timeout's alarm never lands
    while True:                                                    # (the watchdog's SIGUSR1 cuts one sleep short)
        ctypes.PyDLL(None).sleep(300)                              # in C with the GIL held


def test_fine_one():
    time.sleep(0.2)


def test_fine_two():
    time.sleep(0.2)
