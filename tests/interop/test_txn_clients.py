"""Transactions with real clients against `kohort broker` (a subprocess): confluent-kafka's
transactional producer (init/begin/produce/commit/abort), zombie fencing of a second producer with
the same transactional.id, and confluent-kafka consumers with isolation.level read_committed (only
committed records) and read_uncommitted (all of them). Each librdkafka client runs in its own
process (tests/helpers/txn_ck_client.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.helpers.brokers import KohortBroker

SCRIPT = __file__.rsplit("/", 2)[0] + "/helpers/txn_ck_client.py"


@pytest.fixture(scope="module")
def broker():
    with KohortBroker(config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000}) as b:
        yield b


def ck(broker, *args, timeout=90) -> list[dict]:
    p = subprocess.run([sys.executable, SCRIPT, broker.bootstrap, *args], capture_output=True, text=True,
                       timeout=timeout)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    assert p.returncode == 0 and lines and "done" in lines[-1], (p.returncode, p.stdout, p.stderr[-3000:])
    return lines


def create(broker, topic):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        f.result(10)


def test_confluent_transactions_and_read_committed(broker):
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    ck(broker, "produce", topic, "tx-" + topic)
    committed = ck(broker, "consume", topic, "read_committed")
    want = [f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(10)]
    assert committed[-1]["done"] == want
    # 30 records + 3 markers; the committed consumer's position passes them all
    assert committed[0]["watermarks"] == [0, 33]
    assert committed[-2]["position"] == 33
    everything = ck(broker, "consume", topic, "read_uncommitted")
    assert everything[-1]["done"] == want[:10] + [f"a-{i}" for i in range(10)] + want[10:]


def test_confluent_zombie_fencing(broker):
    topic = f"fence-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    lines = ck(broker, "fence", topic, "fx-" + topic)
    z = next(x for x in lines if "zombie_commit" in x)
    assert z["zombie_commit"] == "failed" and z["fatal"], z
    got = ck(broker, "consume", topic, "read_committed")[-1]["done"]
    assert got == [f"b-{i}" for i in range(5)]


@pytest.mark.slow
def test_java_transactional_producer(broker):
    """Apache Kafka's Java producer (ProducerPerformance with --transactional-id: a transaction
    committed every 100 ms) on kohort broker; a read_committed confluent-kafka consumer reads them all."""
    from tests.helpers.kafka_cluster import run_tool
    topic = f"java-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    n = 3000
    r = run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(n),
                 "--record-size", "40", "--throughput", "5000", "--transactional-id", "jtx-" + topic,
                 "--transaction-duration-ms", "100", "--command-property", f"bootstrap.servers={broker.bootstrap}",
                 check=False, timeout=120)
    assert r.returncode == 0 and f"{n} records sent" in r.stdout, (r.stdout[-2000:], r.stderr[-2000:])
    lines = ck(broker, "consume", topic, "read_committed")
    assert len(lines[-1]["done"]) == n
    end = lines[0]["watermarks"][1]
    assert end > n and lines[-2]["position"] == end      # one COMMIT marker per transaction


@pytest.mark.slow
def test_broker_sigkill_with_open_transaction(tmp_path):
    """The broker is SIGKILLed while a confluent-kafka producer has a transaction open (after a
    committed and an aborted one) and the producer dies too: after the restart the transaction state
    is replayed from __transaction_state, the aborted index and open transaction are rebuilt from the
    log, the LSO holds at the open transaction until the timeout abort, and read_committed then reads
    exactly the committed records."""
    import time
    topic = "sigkill"
    with KohortBroker(str(tmp_path), config={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}) as b:
        create(b, topic)
        p = subprocess.Popen([sys.executable, SCRIPT, b.bootstrap, "hang", topic, "tx-hang"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = p.stdout.readline()
            assert json.loads(line) == {"open": True}
            b.kill()
        finally:
            p.kill()
            p.wait(10)
        b.start()
        first = ck(b, "consume", topic, "read_committed")
        assert first[-1]["done"] == [f"c1-{i}" for i in range(10)]
        assert first[-2]["position"] <= 22            # held below the open transaction (offset 22)
        deadline = time.monotonic() + 30
        while True:                                   # the 5 s timeout abort, then a marker at 27
            lines = ck(b, "consume", topic, "read_committed")
            # (read_committed watermarks are the LSO: 22 until the abort is written)
            if (lines[-2]["position"], lines[0]["watermarks"]) == (28, [0, 28]) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert lines[-2]["position"] == 28 and lines[0]["watermarks"] == [0, 28]
        assert lines[-1]["done"] == [f"c1-{i}" for i in range(10)]


@pytest.mark.slow
def test_kafka_transactions_command(broker):
    """Kafka's kafka-transactions.sh (TransactionsCommand) against kohort broker while a
    confluent-kafka producer holds a transaction open: list, describe, describe-producers, find-hanging."""
    from tests.helpers.kafka_cluster import run_tool
    topic = f"tc-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    p = subprocess.Popen([sys.executable, SCRIPT, broker.bootstrap, "hang", topic, "tc-" + topic, "60000"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert json.loads(p.stdout.readline()) == {"open": True}

        def tool(*args):
            r = run_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", broker.bootstrap,
                         *args, check=False, timeout=60)
            assert r.returncode == 0, r.stderr[-2000:]
            return [line.split() for line in r.stdout.splitlines()[1:] if line.strip()]
        assert ["tc-" + topic, "0", "Ongoing"] in [row[:1] + row[1:2] + row[3:4] for row in tool("list")]
        d = tool("describe", "--transactional-id", "tc-" + topic)
        assert d[0][4] == "Ongoing" and d[0][-1] == f"{topic}-0"
        prods = tool("describe-producers", "--topic", topic, "--partition", "0")
        assert len(prods) == 1 and prods[0][-1] == "22"              # the open transaction's first offset
        assert tool("find-hanging", "--broker-id", "0") == []        # within its timeout: not hanging
    finally:
        p.kill()
        p.wait(10)


def test_kohort_consumer_read_committed(broker):
    """kohort's own Consumer on confluent-kafka's committed + aborted transactions: read_committed
    returns exactly the committed records and its position passes the markers; read_uncommitted
    returns all of them."""
    import time
    from kohort import Consumer
    from kohort.structs import TopicPartition
    topic = f"krc-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    ck(broker, "produce", topic, "tx-" + topic)
    want = [f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(10)]
    for isolation, expected in (("read_committed", want),
                                ("read_uncommitted", want[:10] + [f"a-{i}" for i in range(10)] + want[10:])):
        with Consumer({"bootstrap.servers": broker.bootstrap, "isolation.level": isolation,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False}) as c:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            got = []
            deadline = time.monotonic() + 20
            while c.position(tp) < 33 and time.monotonic() < deadline:
                got += [r.value.decode() for r in c.poll(0.5)]
            assert (got, c.position(tp)) == (expected, 33)


@pytest.mark.slow
def test_transactions_survive_broker_sigkill(tmp_path):
    """A confluent-kafka producer runs 60 transactions (every 4th aborted on purpose, failed attempts
    aborted and retried) while kohort broker is SIGKILLed twice. read_committed afterwards: every
    transaction attempt is all-or-nothing, every acknowledged commit is there, no aborted attempt and
    no duplicate record is visible."""
    import collections
    import time
    topic = "soak"
    with KohortBroker(str(tmp_path), config={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}) as b:
        create(b, topic)
        p = subprocess.Popen([sys.executable, SCRIPT, b.bootstrap, "soak", topic, "tx-soak", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        events = []
        try:
            for kill_after in (10, 30):
                while sum("committed" in e for e in events) < kill_after:
                    line = p.stdout.readline()
                    assert line, events
                    events.append(json.loads(line))
                b.kill()
                time.sleep(0.3)
                b.start()
            for line in p.stdout:
                events.append(json.loads(line))
            assert p.wait(120) == 0 and events[-1] == {"done": "soak"}, events[-5:]
        finally:
            p.kill()
            p.wait(10)
        time.sleep(11)          # attempts left open by the kills reach transaction.timeout.ms and abort
        values = ck(b, "consume", topic, "read_committed", timeout=120)[-1]["done"]
    counts = collections.Counter(v.rsplit("-", 1)[0] for v in values)
    assert len(values) == len(set(values))                                  # no duplicate record
    assert all(c == 10 for c in counts.values()), counts                    # all-or-nothing
    committed = {f"{i}-{a}" for e in events if "committed" in e for i, a in [e["committed"]]}
    aborted = {f"{i}-{a}" for e in events if "aborted" in e for i, a in [e["aborted"]]}
    unknown = {f"{i}-{a}" for e in events if "unknown" in e for i, a in [e["unknown"]]}
    assert committed <= set(counts)                                          # acknowledged => visible
    assert not (aborted & set(counts))                                       # aborted => never visible
    assert set(counts) <= committed | unknown                                # nothing else appears
    assert {int(k.split("-")[0]) for k in committed} == {i for i in range(60) if i % 4 != 3}
    retried = sum(1 for k in committed | aborted | unknown if not k.endswith("-0"))
    print(f"soak: {len(committed)} committed, {len(aborted)} aborted, {len(unknown)} unknown, "
          f"{retried} retried attempts, {len(values)} records read_committed")


def _compile_java(name: str, out) -> None:
    """Compile tests/interop/txn_java/<name>.java against Kafka's jars into `out`."""
    import shutil
    from tests.helpers.kafka_cluster import KAFKA_CP, require_peers
    require_peers()
    shutil.copy(__file__.rsplit("/", 1)[0] + f"/txn_java/{name}.java", out / f"{name}.java")
    subprocess.run(["javac", "-cp", KAFKA_CP, "-d", str(out), str(out / f"{name}.java")], check=True, timeout=120)


@pytest.mark.slow
def test_java_producer_abort_commit_fencing(broker, tmp_path):
    """Apache Kafka's Java producer (tests/interop/txn_java/TxnCheck.java): an aborted and a committed
    transaction, then a second producer with the same transactional.id fences the first, whose commit
    fails with ProducerFencedException; read_committed sees only the committed records."""
    from tests.helpers.kafka_cluster import KAFKA_CP, TOOL_JVM
    _compile_java("TxnCheck", tmp_path)
    topic = f"jc-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    r = subprocess.run(["java", *TOOL_JVM, "-cp", f"{tmp_path}:{KAFKA_CP}", "TxnCheck", broker.bootstrap, topic],
                       capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert r.returncode == 0 and lines[-1] == {"done": True}, (r.stdout, r.stderr[-2000:])
    assert {"zombie_commit": "fenced"} in lines
    got = ck(broker, "consume", topic, "read_committed")
    assert got[-1]["done"] == [f"committed-{i}" for i in range(5)] + ["new-0"]
    assert got[-2]["position"] == 16            # 12 records + 4 markers, all passed


@pytest.mark.slow
def test_java_producer_many_batches_in_flight(broker, tmp_path):
    """Apache Kafka's Java producer with 5 requests in flight and 50 transactions of 400 records in
    2 KiB batches (tests/interop/txn_java/TxnBatches.java): the next transaction's first batches reach
    the broker while the previous one's markers are written, and its partition is added by Produce
    v12. Every transaction commits (no OutOfOrderSequenceException) and read_committed sees them all."""
    from tests.helpers.kafka_cluster import KAFKA_CP, TOOL_JVM
    _compile_java("TxnBatches", tmp_path)
    topic = f"jb-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    txns, per_txn = 50, 400
    r = subprocess.run(["java", *TOOL_JVM, "-cp", f"{tmp_path}:{KAFKA_CP}", "TxnBatches", broker.bootstrap, topic,
                        str(txns), str(per_txn)], capture_output=True, text=True, timeout=180)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert r.returncode == 0 and lines[-1] == {"done": True}, (r.stdout, r.stderr[-2000:])
    assert lines[0] == {"committed": txns}
    got = ck(broker, "consume", topic, "read_committed")
    assert got[-1]["done"] == [f"t{t}-{i:05d}-{'0' * 60}" for t in range(txns) for i in range(per_txn)]
    assert got[-2]["position"] == txns * per_txn + txns          # one COMMIT marker per transaction
