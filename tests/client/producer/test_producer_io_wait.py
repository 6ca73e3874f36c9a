"""The producer's I/O thread and its waits: it sleeps while nothing is queued, and a batch opened
while nobody else calls the producer leaves when its linger.ms ends (the I/O thread wakes for it,
whatever its own turn was doing when the batch opened)."""
import threading
import time

import pytest

from kohort.client import producer as producer_module
from kohort.client.producer import Producer
from tests.helpers.scripted_broker import ScriptedCluster


@pytest.fixture
def cluster():
    c = ScriptedCluster(1, {"t": 1})
    yield c
    c.close()


def _count_prepares(p: Producer) -> list:
    calls = []
    prepare = p.sender.prepare

    def counted():
        calls.append(threading.current_thread().name)
        return prepare()
    p.sender.prepare = counted
    return calls


def test_an_idle_producer_thread_turns_about_ten_times_a_second(cluster):
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    try:
        p.produce("t", b"first").result(10)
        time.sleep(0.15)                    # the answer's own turns are over
        calls = _count_prepares(p)
        time.sleep(0.5)
        # one turn per 100 ms wait (not one per linger.ms, 5 ms: 100 turns in this time)
        assert 2 <= len(calls) <= 12, len(calls)
    finally:
        p.close(5)


def test_a_batch_opened_during_the_io_threads_turn_leaves_at_its_linger_end(cluster, monkeypatch):
    """A batch opened after the I/O thread's prepare() looked, before its wait (its wake-up byte is
    read by that turn's own select): the wait still ends when the batch's linger.ms does. No pokes
    from the producing thread (TICK_MS out of reach), nothing else queued."""
    monkeypatch.setattr(producer_module, "TICK_MS", 1e9)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    try:
        p.produce("t", b"first").result(10)
        time.sleep(0.15)
        opened = []
        prepare = p.sender.prepare

        def prepare_then_open_a_batch():
            wait_s = prepare()
            if threading.current_thread() is p.sender.thread and not opened:
                opened.append(time.perf_counter())
                opened.append(p.produce("t", b"late"))
            return wait_s
        p.sender.prepare = prepare_then_open_a_batch
        p.sender.wakeup()                       # a turn of the I/O thread
        deadline = time.monotonic() + 5
        while not opened and time.monotonic() < deadline:
            time.sleep(0.001)
        opened[1].result(5)
        took_ms = (time.perf_counter() - opened[0]) * 1000
        # waiting out the idle 100 ms instead would take ~100 ms
        assert took_ms < 60, took_ms
        assert cluster.values("t", 0) == [b"first", b"late"]
    finally:
        p.close(5)


def test_a_lingering_batch_is_rehearsed_before_its_linger_end_and_sent_once_after_it(cluster, monkeypatch):
    """The I/O thread wakes REHEARSAL_MS before the batch is due, builds and encodes its request
    without sending it, and sends it when linger.ms has passed: one Produce request reaches the
    broker, never early. (REHEARSAL_MS widened to 20 ms: a wake-up up to 10 ms late on a busy machine still rehearses.)"""
    monkeypatch.setattr(producer_module, "TICK_MS", 1e9)
    monkeypatch.setattr(producer_module, "REHEARSAL_MS", 20.0)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 100})
    try:
        p.produce("t", b"first").result(10)
        time.sleep(0.15)
        clock = producer_module._linger_clock_ms
        rehearsed, sent = [], []
        rehearse, send_batches = p.sender._rehearse, p.sender._send_batches

        def counted_rehearse():
            rehearsed.append(clock())
            rehearse()

        def counted_send(node, batches):
            sent.append(clock())
            send_batches(node, batches)
        monkeypatch.setattr(p.sender, "_rehearse", counted_rehearse)
        monkeypatch.setattr(p.sender, "_send_batches", counted_send)
        requests = cluster.produce_requests
        opened = clock()
        p.produce("t", b"lingering").result(5)
        assert len(sent) == 1 and sent[0] >= opened + 100
        assert rehearsed and opened + 100 - 2 * 20.0 <= rehearsed[0] < sent[0], (opened, rehearsed, sent)
        assert cluster.produce_requests == requests + 1
        assert cluster.values("t", 0) == [b"first", b"lingering"]
    finally:
        p.close(5)


def _produce_spaced(p: Producer, n: int, gap_s: float) -> list:
    futs = []
    for i in range(n):
        futs.append(p.produce("t", b"r%d" % i))
        time.sleep(gap_s)
    return futs


def test_a_producing_threads_tick_runs_no_idle_io_turn(cluster):
    """Records more than TICK_MS apart into a batch lingering 300 ms, nothing in flight: each record's
    tick finds no answer to read and nothing due, so the producing thread runs no I/O turn (Sender.tick);
    the I/O thread sends the batch when its linger.ms ends."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 300})
    try:
        p.produce("t", b"first").result(10)
        time.sleep(0.15)                    # the answer's own turns are over
        calls = _count_prepares(p)
        futs = _produce_spaced(p, 10, 0.003)
        mine = [c for c in calls if c == threading.current_thread().name]
        # at most one: a tick past the deadline of the I/O thread's 100 ms idle turn takes that turn
        # (a tick per record, 10, without the check)
        assert len(mine) <= 1, calls
        for f in futs:
            f.result(10)
        assert cluster.values("t", 0) == [b"first"] + [b"r%d" % i for i in range(10)]
    finally:
        p.close(5)


def test_a_producing_threads_tick_turns_at_the_io_when_a_batch_is_due(cluster):
    """The I/O thread parked in its wait: a record produced after the open batch's linger.ms ended
    has its tick send the batch (a poke: the producing thread's own turn), and the next tick, with
    the request in flight, reads the answer."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    parked = threading.Event()
    release = threading.Event()
    wait = p.sender.net.wait

    def parked_wait(timeout_s):
        parked.set()
        release.wait(10)
        return wait(0.0)
    try:
        p.produce("t", b"first").result(10)
        p.sender.net.wait = parked_wait
        assert parked.wait(5)
        calls = _count_prepares(p)
        a = p.produce("t", b"a")
        time.sleep(0.02)                    # past the batch's linger.ms
        b = p.produce("t", b"b")            # its tick finds the batch due
        assert threading.current_thread().name in calls, calls
        deadline = time.monotonic() + 5
        while not b.done() and time.monotonic() < deadline:
            time.sleep(0.002)
            p.produce("t", b"c")            # ticks while the request is in flight read its answer
        assert a.done() and b.done()
        assert cluster.values("t", 0)[:3] == [b"first", b"a", b"b"]
    finally:
        release.set()
        p.sender.net.wait = wait
        p.close(5)
