"""Consume-transform-produce with transactional offsets on kohort broker, real clients:
confluent-kafka's send_offsets_to_transaction (tests/helpers/txn_ck_client.py `copy`, a subprocess) and
Apache Kafka's own TransactionalMessageCopier (kafka-tools 4.3.1, Java client). The group's committed
offset moves only when a transaction commits, an abort leaves it where it was, and the output read
with read_committed holds every input record exactly once -- also after the broker is SIGKILLed
between TxnOffsetCommit and EndTxn."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import types
import uuid

import pytest

from kohort.errors import ErrorCode as E
from tests.helpers.brokers import KohortBroker
from tests.interop.test_txn_clients import SCRIPT, ck, create
from tests.broker.coordinator.test_txn_offsets_broker import Txn
from tests.helpers.broker_wire import Wire


@pytest.fixture(scope="module")
def broker():
    from tests.helpers.brokers import free_port
    with KohortBroker(config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500},
                      metrics_port=free_port()) as b:
        yield b


def versions_seen(broker) -> dict[str, set[int]]:
    """{api name: versions} the broker has served (its Prometheus metrics)."""
    import re
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    out: dict[str, set[int]] = {}
    for api, ver in re.findall(r'kohort_requests_by_version_total\{api="(\w+)",version="(\d+)"\}', text):
        out.setdefault(api, set()).add(int(ver))
    return out


def fill(broker, topic: str, n: int) -> list[str]:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    values = [f"v-{i}" for i in range(n)]
    for v in values:
        p.produce(topic, value=v.encode(), partition=0)
    assert p.flush(30) == 0
    return values


def offset_fetch(broker, group: str, topic: str, stable: bool):
    """(error code, committed offset) of partition 0, OffsetFetch v7 on the raw protocol."""
    async def main():
        w = await Wire.connect(types.SimpleNamespace(host="127.0.0.1", port=broker.port))
        try:
            return await Txn(w, "-", group, topic).fetch(stable)
        finally:
            await w.close()
    return asyncio.run(main())


def copier(broker, src, dst, tid, group, size=10, abort_every=0, pause_at=-1, protocol="classic"):
    return subprocess.Popen([sys.executable, SCRIPT, broker.bootstrap, "copy", src, tid, group, dst, str(size),
                             str(abort_every), str(pause_at), protocol], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(p, timeout=120) -> list[dict]:
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        p.kill()
        p.wait(10)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert p.returncode == 0 and lines and lines[-1] == {"done": "copied"}, (out[-2000:], err[-3000:])
    return lines


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_confluent_copier_with_aborts(broker, protocol):
    """librdkafka's send_offsets_to_transaction (TxnOffsetCommit v3 with the group metadata: the
    generation, or the member epoch of a KIP-848 consumer group), every third transaction aborted and
    rewound: the output is the input exactly once, in order."""
    tag = uuid.uuid4().hex[:8]
    src, dst, group = f"cin-{tag}", f"cout-{tag}", f"cg-{tag}"
    create(broker, src)
    create(broker, dst)
    values = fill(broker, src, 60)
    lines = finish(copier(broker, src, dst, "ctx-" + tag, group, size=10, abort_every=3, protocol=protocol))
    assert any("aborted" in x for x in lines)
    assert ck(broker, "consume", dst, "read_committed")[-1]["done"] == values
    assert offset_fetch(broker, group, src, True) == (0, 60)


@pytest.mark.slow
def test_confluent_copier_broker_sigkill_between_offsets_and_end_txn(tmp_path):
    """The copier has committed two transactions (offset 20) and sent the offsets of the third (30)
    when the broker is SIGKILLed (the copier dies too): 30 was never visible, it is still pending
    after the restart, the transaction timeout aborts it (offset back to a stable 20, its output
    hidden), and a new copier finishes with every input record exactly once."""
    tag = uuid.uuid4().hex[:8]
    src, dst, group, tid = "kin", "kout", "kg", "ktx"
    with KohortBroker(str(tmp_path), config={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}) as b:
        create(b, src)
        create(b, dst)
        values = fill(b, src, 50)
        p = copier(b, src, dst, tid, group, size=10, pause_at=2)
        try:
            events = []
            while not events or "paused" not in events[-1]:
                line = p.stdout.readline()
                assert line, (events, p.stderr.read()[-3000:])
                events.append(json.loads(line))
            assert [e.get("committed") for e in events[:2]] == [[0, 9], [10, 19]]
            # TxnOffsetCommit done, EndTxn not sent: the offset is not visible, and unstable
            assert offset_fetch(b, group, src, False) == (0, 20)
            assert offset_fetch(b, group, src, True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
            b.kill()
        finally:
            p.kill()
            p.wait(10)
        b.start()
        assert offset_fetch(b, group, src, False) == (0, 20)
        deadline = time.monotonic() + 60
        while True:          # pending until the 10 s transaction timeout aborts it
            got = offset_fetch(b, group, src, True)
            if got[0] != E.UNSTABLE_OFFSET_COMMIT or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert got == (0, 20)
        assert ck(b, "consume", dst, "read_committed")[-1]["done"] == values[:20]
        finish(copier(b, src, dst, tid, group, size=10))
        assert ck(b, "consume", dst, "read_committed")[-1]["done"] == values
        assert offset_fetch(b, group, src, True) == (0, 50)


@pytest.fixture(scope="module")
def tv_brokers():
    """Brokers by transaction.version (1: Java stays on transactions v1; 2: it switches to v2)."""
    from tests.helpers.brokers import free_port
    made = {}

    def get(tv):
        if tv not in made:
            made[tv] = KohortBroker(config={"transaction.version": tv}, metrics_port=free_port()).start()
        return made[tv]
    try:
        yield get
    finally:
        for b in made.values():
            b.stop()


@pytest.mark.parametrize("mode,tv", [("group", 2), pytest.param("group", 1, marks=pytest.mark.slow),
                                     pytest.param("assign", 2, marks=pytest.mark.slow),
                                     pytest.param("assign", 1, marks=pytest.mark.slow)])
def test_java_transactional_message_copier(tv_brokers, mode, tv):
    """Kafka's TransactionalMessageCopier (Java client 4.3.1) with random aborts, by assignment or as a
    group member with group metadata (KIP-447 generation/member checks), on a broker advertising
    transaction.version 1 (AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit v4, EndTxn v4) or 2
    (KIP-890 part 2: Produce v12 and TxnOffsetCommit v5 add the partitions, EndTxn v5 bumps the epoch):
    output read_committed = input, exactly once, and the group's stable committed offset is the input's
    end."""
    from tests.helpers.kafka_cluster import run_tool
    broker = tv_brokers(tv)
    tag = uuid.uuid4().hex[:8]
    src, dst, group = f"jin-{tag}", f"jout-{tag}", f"jg-{tag}"
    create(broker, src)
    create(broker, dst)
    values = fill(broker, src, 500)
    args = ["--broker-list", broker.bootstrap, "--input-topic", src, "--input-partition", "0", "--output-topic", dst,
            "--consumer-group", group, "--transactional-id", "jtx-" + tag, "--transaction-size", "50",
            "--enable-random-aborts", "--max-messages", "500"]
    if mode == "group":
        args += ["--group-mode", "--use-group-metadata"]
    r = run_tool("org.apache.kafka.tools.TransactionalMessageCopier", *args, check=False, timeout=150)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert '"shutdown_complete"' in r.stdout or "ShutdownComplete" in r.stdout, r.stdout[-2000:]
    got = ck(broker, "consume", dst, "read_committed")[-1]["done"]
    assert sorted(got) == sorted(values) and len(got) == len(set(got))
    assert offset_fetch(broker, group, src, True) == (0, 500)
    seen = versions_seen(broker)
    if tv == 1:     # partitions and offsets added explicitly, EndTxn v4
        assert seen["TxnOffsetCommit"] == {4} and seen["EndTxn"] == {4} and seen["AddPartitionsToTxn"] == {3}, seen
        assert max(seen["Produce"]) <= 11 and seen["AddOffsetsToTxn"], seen
    else:           # transactions v2: no AddPartitionsToTxn / AddOffsetsToTxn at all
        assert seen["TxnOffsetCommit"] == {5} and seen["EndTxn"] == {5} and 12 in seen["Produce"], seen
        assert "AddPartitionsToTxn" not in seen and "AddOffsetsToTxn" not in seen, seen


def _output_end(bootstrap: str, topic: str) -> int:
    from kohort.client.admin import LATEST, Admin
    try:
        with Admin({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 5000}) as a:
            return a.list_offsets({(topic, 0): LATEST})[(topic, 0)]
    except Exception:   # noqa: BLE001 - the broker may be restarting
        return -1


def soak(b, start, dst, copier_kills=5, broker_kills=(1, 3), seed=7):
    """Run copiers from `start()` (a Popen), SIGKILLing each once the output has grown (plus a random
    moment), `copier_kills` times; the broker is SIGKILLed and restarted mid-run during the copier runs
    numbered in `broker_kills`. Then one copier runs to its end. -> its Popen, finished."""
    import random
    from tests.helpers.kafka_cluster import kill_tree
    rnd = random.Random(seed)
    for k in range(copier_kills):
        before = _output_end(b.bootstrap, dst)
        p = start()
        try:
            deadline = time.monotonic() + 60
            while _output_end(b.bootstrap, dst) <= before and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(rnd.uniform(0, 1.0))
            if k in broker_kills:
                b.kill()
                time.sleep(0.3)
                b.start()
                time.sleep(rnd.uniform(0.5, 2.0))
        finally:
            kill_tree(p)
    return start()


def _check_exactly_once(b, dst, values):
    got = ck(b, "consume", dst, "read_committed", timeout=180)[-1]["done"]
    dupes = len(got) - len(set(got))
    missing = set(values) - set(got)
    print(f"soak: {len(got)} records read_committed, {dupes} duplicates, {len(missing)} missing")
    assert dupes == 0 and not missing and set(got) == set(values)


@pytest.mark.slow
def test_confluent_copier_soak_with_sigkills(tmp_path):
    """confluent-kafka copiers SIGKILLed 5 times mid-run and kohort broker SIGKILLed twice: the output
    read_committed holds every input record exactly once, and the group's offset is the input's end."""
    with KohortBroker(str(tmp_path), config={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}) as b:
        create(b, "sin")
        create(b, "sout")
        values = fill(b, "sin", 3000)
        last = soak(b, lambda: copier(b, "sin", "sout", "stx", "sg", size=50), "sout")
        finish(last, timeout=240)
        _check_exactly_once(b, "sout", values)
        assert offset_fetch(b, "sg", "sin", True) == (0, 3000)


@pytest.mark.slow
def test_java_copier_soak_with_sigkills(tmp_path):
    """Kafka's TransactionalMessageCopier (Java 4.3.1, group metadata) SIGKILLed 5 times mid-run and
    kohort broker SIGKILLed twice: read_committed output = input, exactly once."""
    from tests.helpers.kafka_cluster import KAFKA_CP, TOOL_JVM, spawn
    with KohortBroker(str(tmp_path), config={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}) as b:
        create(b, "jin")
        create(b, "jout")
        values = fill(b, "jin", 3000)

        def start():
            return spawn(["java", *TOOL_JVM, "-cp", KAFKA_CP, "org.apache.kafka.tools.TransactionalMessageCopier",
                          "--broker-list", b.bootstrap, "--input-topic", "jin", "--input-partition", "0",
                          "--output-topic", "jout", "--consumer-group", "jg", "--transactional-id", "jtx",
                          "--transaction-size", "50", "--transaction-timeout", "10000", "--group-mode",
                          "--use-group-metadata"], stdout=subprocess.PIPE)
        last = soak(b, start, "jout")
        out, err = last.communicate(timeout=240)
        assert last.returncode == 0, (out[-3000:], err[-3000:])
        _check_exactly_once(b, "jout", values)
        assert offset_fetch(b, "jg", "jin", True) == (0, 3000)
