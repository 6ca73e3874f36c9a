"""The exactly-once copier proof (issue 15): a consume-transform-produce copier SIGKILLed 5 times
mid-run (and, on kohort broker, the broker SIGKILLed twice), restarted each time with the same
transactional.id (which fences the dead one and aborts its open transaction); at the end the output
topic read with read_committed holds every input record exactly once.

Copiers: tests/helpers/txn_copier.py with kohort's client or confluent-kafka, and Kafka's own
org.apache.kafka.tools.TransactionalMessageCopier (Java client). Brokers: Apache Kafka 4.3.1
(`kafka1`) and kohort broker. Each run also reports how many records read_uncommitted sees (the
aborted copies the kills left behind), to show the kills did land inside transactions.
"""
from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import _LIVE, kill_tree

COPIER = str(Path(__file__).parents[1] / "helpers" / "txn_copier.py")
KAFKA_LIB = "/work/main/.peers/kafka-lib/*"
ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT)
    return env


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": bootstrap}) as a:
        res = a.create_topics({name: partitions}, replication_factor=1)
        assert res[name] is None, res
    wait_for(lambda: _partitions(bootstrap, name) == partitions, 30, f"topic {name}")


def _partitions(bootstrap, topic):
    from kohort.client.consumer.consumer import Consumer
    c = Consumer({"bootstrap.servers": bootstrap})
    try:
        return len(c.partitions_for_topic(topic, 5) or [])
    except Exception:  # noqa: BLE001 - not there yet
        return 0
    finally:
        c.close()


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def produce_input(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    from kohort.client.producer import Producer
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        futs = [p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions)
                for i in range(n)]
        p.flush(60)
        for f in futs:
            f.result(0)


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted") -> int:
    from kohort.client.consumer.consumer import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation})
    try:
        return sum(c.end_offsets([(topic, p) for p in range(partitions)], 10).values())
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every record of the topic under `isolation`, read to the end (the last stable offset)."""
    from kohort.client.consumer.consumer import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation, "auto.offset.reset": "earliest"})
    try:
        tps = [(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = c.end_offsets(tps, 30)
        got = []
        deadline = time.monotonic() + 60
        while any(c.position(tp) < ends[tp] for tp in ends):
            assert time.monotonic() < deadline, "could not read the output to its end"
            got += [r.value for r in c.poll(0.5)]
        return got
    finally:
        c.close()


class Copier:
    """One copier process; its stdout is collected by a thread."""

    def __init__(self, args: list[str], log: list[str], stderr_path: str | None = None):
        err = open(stderr_path or os.devnull, "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                     text=True, start_new_session=True, env=_env())
        err.close()
        _LIVE.add(self.proc.pid)
        self.log = log
        self.t = threading.Thread(target=self._pump, daemon=True)
        self.t.start()

    def _pump(self):
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))

    def kill(self):
        kill_tree(self.proc)
        self.t.join(5)

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("the copier did not finish in time:\n" + "\n".join(self.log[-30:])) from None
        self.t.join(5)
        return rc


def copy_with_kills(bootstrap_of, make_args, *, n: int, in_parts: int, out_parts: int, input_topic: str,
                    output_topic: str, kills: int = 5, broker: KohortBroker | None = None,
                    broker_kills_at=(), progress: int = 150, final_timeout: float = 120.0,
                    transformed: bool = True, logdir: Path | None = None, stall_restart: float | None = None) -> dict:
    """Run the copier, SIGKILL it `kills` times after it has moved at least `progress` more records
    (output high watermark, aborted copies included) plus a random moment, restart it; at kill numbers
    in `broker_kills_at` the broker is SIGKILLed (and restarted) while the copier runs. Then a last
    copier runs to the end. Returns what was read back.

    `stall_restart`: a copier whose output has not grown for that many seconds is SIGKILLed and
    restarted too, as a supervisor would (librdkafka 2.16 can hang in send_offsets_to_transaction
    after its group coordinator's broker restarted: librdkafka#5511, seen on Apache Kafka too)."""
    rng = random.Random(15)
    log: list[str] = []
    state = {"copier": None, "runs": 0, "stalls": 0}

    def start(final=False):
        state["runs"] += 1
        name = "final" if final else str(state["runs"])
        state["err"] = logdir and logdir / f"copier-{name}.err"
        state["copier"] = Copier(make_args(final=final), log, state["err"] and str(state["err"]))

    def stderr_tail():
        c = state["copier"]
        if c is None or state.get("err") is None:
            return ""
        try:
            os.kill(c.proc.pid, signal.SIGUSR1)        # the Python copiers dump their threads' stacks
            time.sleep(1)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            return "\n--- copier stderr ---\n" + state["err"].read_text()[-6000:]
        except OSError:
            return ""

    def out_end():
        return end_offsets(bootstrap_of(), output_topic, out_parts)

    def wait_progress(amount, what):
        base = last = out_end()
        grew = time.monotonic()
        deadline = time.monotonic() + 120
        while True:
            c = state["copier"]
            if c.proc.poll() is not None:
                return
            now_end = out_end()
            if now_end >= base + amount:
                return
            if now_end > last:
                last, grew = now_end, time.monotonic()
            elif stall_restart and time.monotonic() - grew > stall_restart:
                c.kill()
                state["stalls"] += 1
                log.append(f"# copier stalled for {stall_restart}s: killed and restarted")
                start()
                grew = time.monotonic()
            if time.monotonic() > deadline:
                raise AssertionError(f"no copier progress ({what}): " + "\n".join(log[-10:]) + stderr_tail())
            time.sleep(0.2)

    try:
        for k in range(kills):
            start()
            if k in broker_kills_at and broker is not None:
                wait_progress(progress // 2, f"before broker kill {k}")
                broker.kill()
                time.sleep(rng.uniform(0.1, 0.5))
                broker.start()
            wait_progress(progress, f"before kill {k}")
            time.sleep(rng.uniform(0.0, 0.3))
            c = state["copier"]
            assert c.proc.poll() in (None, 1, 3), (
                f"copier {k} finished before it could be killed: give it more input\n" + "\n".join(log[-10:]))
            c.kill()
            state["copier"] = None
        start(final=True)
        c = state["copier"]
        deadline = time.monotonic() + final_timeout
        while c.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError("the last copier did not finish in time:\n" + "\n".join(log[-30:]))
            if stall_restart:
                before = out_end()
                time.sleep(stall_restart)
                if c.proc.poll() is None and out_end() == before and not log[-1].startswith('{"done"'):
                    c.kill()
                    state["stalls"] += 1
                    start(final=True)
                    c = state["copier"]
            else:
                time.sleep(0.2)
        c.t.join(5)
        state["copier"] = None
        assert c.proc.returncode == 0, "the last copier failed:\n" + "\n".join(log[-30:])
    finally:
        if state["copier"] is not None:
            state["copier"].kill()
    committed = read_all(bootstrap_of(), output_topic, out_parts, "read_committed")
    uncommitted = read_all(bootstrap_of(), output_topic, out_parts, "read_uncommitted")
    counts = collections.Counter(committed)
    want = {(f"V{i}" if transformed else f"v{i}").encode() for i in range(n)}
    missing = want - set(counts)
    dups = {v: c for v, c in counts.items() if c > 1}
    extra = set(counts) - want
    assert not missing and not dups and not extra, (
        f"{len(missing)} missing (e.g. {sorted(missing)[:5]}), {len(dups)} duplicated "
        f"(e.g. {list(dups.items())[:5]}), {len(extra)} unexpected")
    assert len(committed) == n
    result = {"records": n, "read_committed": len(committed), "read_uncommitted": len(uncommitted),
              "aborted_copies": len(uncommitted) - len(committed), "kills": kills,
              "broker_kills": len(broker_kills_at) if broker is not None else 0,
              "stalled_copiers_restarted": state["stalls"]}
    print("copier run:", json.dumps(result))
    return result


def python_copier(client: str, bootstrap_of, input_topic, output_topic, group, txn_id, pause=0.0):
    def make(final: bool):
        args = [sys.executable, COPIER, client, bootstrap_of(), input_topic, output_topic, group, txn_id,
                "--per-txn", "50", "--instance-id", group + "-0", "--pause", str(pause)]
        if final:
            args += ["--exit-when-idle", "3"]
        return args
    return make


def java_copier(bootstrap_of, input_topic, output_topic, group, txn_id):
    def make(final: bool):
        return ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", KAFKA_LIB,
                "-Dlog4j2.level=warn", "org.apache.kafka.tools.TransactionalMessageCopier",
                "--broker-list", bootstrap_of(), "--input-topic", input_topic, "--input-partition", "0",
                "--output-topic", output_topic, "--consumer-group", group, "--transactional-id", txn_id,
                "--transaction-size", "20", "--transaction-timeout", "10000", "--use-group-metadata"]
    return make


def _names(tag):
    u = uuid.uuid4().hex[:8]
    return f"cp-in-{tag}-{u}", f"cp-out-{tag}-{u}", f"cp-group-{tag}-{u}", f"cp-txn-{tag}-{u}"


# -- kohort's client on Apache Kafka 4.3.1 -------------------------------------------------------------
@pytest.mark.slow     # the default suite has the exactly-once copier under kills in test_aio_copier / test_txn_copier
def test_kohort_copier_on_kafka_sigkilled_5_times(kafka1, tmp_path):
    bs = kafka1.bootstrap
    inp, outp, group, tid = _names("kafka")
    create_topic(bs, inp, 2)
    create_topic(bs, outp, 3)
    n = 3000
    produce_input(bs, inp, n, 2)
    r = copy_with_kills(lambda: bs, python_copier("kohort", lambda: bs, inp, outp, group, tid, pause=0.05), n=n,
                        in_parts=2, out_parts=3, input_topic=inp, output_topic=outp, progress=100,
                        logdir=tmp_path)
    assert r["read_committed"] == n


# -- on kohort broker ----------------------------------------------------------------------------------
@pytest.fixture
def kbroker(tmp_path):
    b = KohortBroker(data_dir=str(tmp_path / "data"),
                     config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000})
    b.logdir = tmp_path
    b.start()
    try:
        yield b
    finally:
        from tests.helpers.ck_tracking import close_open_clients
        close_open_clients()
        b.stop()
        b.cleanup()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("client", ["kohort", "confluent"])
def test_python_copier_on_kohort_broker_sigkilled(kbroker, client):
    bs = kbroker.bootstrap
    inp, outp, group, tid = _names("kb-" + client)
    create_topic(bs, inp, 2)
    create_topic(bs, outp, 3)
    n = 3000
    produce_input(bs, inp, n, 2)
    copy_with_kills(lambda: kbroker.bootstrap, python_copier(client, lambda: kbroker.bootstrap, inp, outp, group,
                                                             tid, pause=0.05),
                    n=n, in_parts=2, out_parts=3, input_topic=inp, output_topic=outp, broker=kbroker,
                    broker_kills_at=(1, 3), progress=200, logdir=kbroker.logdir,
                    stall_restart=15.0 if client == "confluent" else None)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_java_copier_on_kohort_broker_sigkilled(kbroker):
    bs = kbroker.bootstrap
    inp, outp, group, tid = _names("kb-java")
    create_topic(bs, inp, 1)
    create_topic(bs, outp, 3)
    n = 20000
    produce_input(bs, inp, n, 1)
    copy_with_kills(lambda: kbroker.bootstrap, java_copier(lambda: kbroker.bootstrap, inp, outp, group, tid),
                    n=n, in_parts=1, out_parts=3, input_topic=inp, output_topic=outp, broker=kbroker,
                    broker_kills_at=(1, 3), progress=200, final_timeout=180, transformed=False,
                    logdir=kbroker.logdir)
