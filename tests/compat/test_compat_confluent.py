"""kohort.compat.confluent_kafka: confluent-kafka programs run unchanged but for the import line.

Each program in tests/compat/ck_examples/ (written in the call shapes of confluent-kafka-python's own examples)
runs twice per broker — as written, on confluent-kafka (librdkafka), and with `confluent_kafka` replaced by
`kohort.compat.confluent_kafka` in its import lines — against kohort's broker and Apache Kafka (`kafka1`);
the two outputs must be equal, line for line, once the run's topic and group names are replaced by
placeholders. Plus unit checks of the value types and the config translation.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

import pytest

from kohort.client.admin import Admin
from tests.helpers.brokers import KohortBroker, kohort_broker  # noqa: F401  (fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "ck_examples")
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
LINES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]


def _switch(source: str) -> str:
    """The one change a user makes: import kohort's compatibility module instead of confluent_kafka."""
    out = re.sub(r"^import confluent_kafka$", "import kohort.compat.confluent_kafka as confluent_kafka",
                 source, flags=re.M)
    out = re.sub(r"^from confluent_kafka(\.admin)? import", r"from kohort.compat.confluent_kafka\1 import",
                 out, flags=re.M)
    assert out != source
    return out


def _run(tmp_path, name: str, lib: str, args: list[str], stdin: str = "") -> str:
    with open(os.path.join(EXAMPLES, name)) as fh:
        source = fh.read()
    if lib == "kohort":
        source = _switch(source)
    path = tmp_path / f"{lib}-{name}"
    path.write_text(source)
    env = dict(os.environ, PYTHONPATH=SRC)
    r = subprocess.run([sys.executable, str(path), *args], input=stdin, capture_output=True, text=True,
                       timeout=40, env=env)
    assert r.returncode == 0, f"{lib} {name} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _norm(text: str, names: dict[str, str]) -> list[str]:
    for real, shown in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(real, shown)
    return text.splitlines()


def _scenario(tmp_path, bootstrap: str, lib: str) -> list[str]:
    run = uuid.uuid4().hex[:8]
    tag = lib[:2]                # same length for both, so padded columns line up
    topic, group, admin_topic = f"ck-{tag}-{run}", f"ckg-{tag}-{run}", f"cka-{tag}-{run}"
    with Admin({"bootstrap.servers": bootstrap}) as a:
        assert a.create_topics({topic: 2}, replication_factor=1)[topic] is None
    out = []
    out += _run(tmp_path, "admin_example.py", lib, [bootstrap, admin_topic]).splitlines()
    out += _run(tmp_path, "producer_example.py", lib, [bootstrap, topic], "\n".join(LINES) + "\n").splitlines()
    out += _run(tmp_path, "consumer_example.py", lib, [bootstrap, group, topic]).splitlines()
    out += _run(tmp_path, "lag_example.py", lib, [bootstrap, group, topic]).splitlines()
    out += _run(tmp_path, "groups_example.py", lib, [bootstrap, group]).splitlines()
    out += _run(tmp_path, "assign_example.py", lib, [bootstrap, group + "-a", topic]).splitlines()
    eos_topic = f"cke-{tag}-{run}"
    with Admin({"bootstrap.servers": bootstrap}) as a:
        assert a.create_topics({eos_topic: 1}, replication_factor=1)[eos_topic] is None
    out += _run(tmp_path, "eos_example.py", lib, [bootstrap, group + "-e", topic, eos_topic]).splitlines()
    with Admin({"bootstrap.servers": bootstrap}) as a:
        a.delete_topics([topic, eos_topic])
    return _norm("\n".join(out), {topic: "TOPIC", group: "GROUP", admin_topic: "ATOPIC", eos_topic: "ETOPIC"})


def _compare(tmp_path, bootstrap: str) -> None:
    real = _scenario(tmp_path, bootstrap, "confluent")
    ours = _scenario(tmp_path, bootstrap, "kohort")
    assert ours == real, "\n".join(["confluent:", *real, "kohort:", *ours])
    assert len(real) > 30


@pytest.mark.slow       # ~12 s: ten interpreters, two librdkafka
def test_examples_same_output_on_kohort_broker(tmp_path):
    # as the Apache Kafka fixture: librdkafka's AdminClient.list_topics(topic) asks the broker to create a
    # missing topic, the compatibility module never does (README: deliberate difference)
    with KohortBroker(config={"auto.create.topics.enable": "false"}) as b:
        _compare(tmp_path, b.bootstrap)


@pytest.mark.slow
def test_examples_same_output_on_apache_kafka(tmp_path, kafka1):
    _compare(tmp_path, kafka1.bootstrap)


# -- value types and config, against confluent-kafka's own ------------------------------------------------
def test_error_codes_and_constants_match_confluent_kafka():
    import confluent_kafka as real
    from kohort.compat import confluent_kafka as ours
    names = [n for n in dir(real.KafkaError) if n.isupper() and not n.startswith("__")]
    both = [n for n in names if hasattr(ours.KafkaError, n)]
    assert [(n, getattr(ours.KafkaError, n)) for n in both] == [(n, getattr(real.KafkaError, n)) for n in both]
    local = [n for n in names if n.startswith("_")]
    assert set(local) <= set(both)          # every client-side code programs compare against
    for n in ("UNKNOWN_TOPIC_OR_PART", "NOT_LEADER_FOR_PARTITION", "TOPIC_ALREADY_EXISTS", "OFFSET_OUT_OF_RANGE",
              "REBALANCE_IN_PROGRESS", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "NOT_COORDINATOR",
              "COORDINATOR_LOAD_IN_PROGRESS", "MSG_SIZE_TOO_LARGE", "REQUEST_TIMED_OUT"):
        assert n in both, n
        assert ours.KafkaError(getattr(ours.KafkaError, n)).name() == real.KafkaError(getattr(real.KafkaError, n)).name()
    for n in ("OFFSET_BEGINNING", "OFFSET_END", "OFFSET_STORED", "OFFSET_INVALID", "TIMESTAMP_CREATE_TIME",
              "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE"):
        assert getattr(ours, n) == getattr(real, n), n
    for code in (3, 6, 16, 27, -191, -185):
        e, r = ours.KafkaError(code), real.KafkaError(code)
        assert (e.code(), e.name(), e.retriable(), e.fatal()) == (r.code(), r.name(), r.retriable(), r.fatal())
    exc = ours.KafkaException(ours.KafkaError(ours.KafkaError._PARTITION_EOF))
    assert exc.args[0].code() == -191
    tp, rtp = ours.TopicPartition("t", 1), real.TopicPartition("t", 1)
    assert repr(tp) == repr(rtp) and (tp.offset, tp.metadata, tp.leader_epoch) == (rtp.offset, rtp.metadata, rtp.leader_epoch)
    assert ours.TopicPartition("t", 1, 5) == tp and len({tp, ours.TopicPartition("t", 1, 7)}) == 1


def test_config_translation_and_refusals():
    from kohort.compat.confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from kohort.compat.confluent_kafka._config import translate
    kc, extras = translate("producer", {"bootstrap.servers": "h:1", "queue.buffering.max.ms": 7,
                                        "queue.buffering.max.kbytes": 10, "compression.codec": "lz4",
                                        "message.timeout.ms": 1000, "request.required.acks": 1,
                                        "batch.num.messages": 10, "error_cb": print, "log_level": 7})
    assert kc == {"bootstrap.servers": "h:1", "linger.ms": 7, "buffer.memory": 10240, "compression.type": "lz4",
                  "delivery.timeout.ms": 1000, "acks": 1}
    assert set(extras) == {"error_cb", "log_level"}
    kc, extras = translate("consumer", {"bootstrap.servers": "h:1", "group.id": "g", "fetch.wait.max.ms": 10,
                                        "default.topic.config": {"auto.offset.reset": "smallest"},
                                        "enable.auto.offset.store": False, "max.poll.records": 5})
    assert kc == {"bootstrap.servers": "h:1", "group.id": "g", "fetch.max.wait.ms": 10,
                  "auto.offset.reset": "earliest", "max.poll.records": 5}
    assert extras == {"enable.auto.offset.store": False}
    with pytest.raises(KafkaException) as ei:
        Consumer({"bootstrap.servers": "h:1", "group.id": "g", "enable.auto.ofset.store": False})
    assert ei.value.args[0].code() == KafkaError._INVALID_ARG
    assert "'enable.auto.ofset.store'" in str(ei.value) and "did you mean 'enable.auto.offset.store'" in str(ei.value)
    sec = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "u",
           "sasl.password": "p", "ssl.ca.location": "/ca.pem"}
    kc, _ = translate("producer", {"bootstrap.servers": "h:1", **sec})      # librdkafka's names are kohort's
    assert kc == {"bootstrap.servers": "h:1", **sec, "security.protocol": "sasl_ssl"}
    kc, _ = translate("producer", {"bootstrap.servers": "h:1", "transactional.id": "x"})
    assert kc == {"bootstrap.servers": "h:1", "transactional.id": "x"}


def test_stats_cb_and_on_commit(kohort_broker):
    """stats_cb gets a JSON subset of librdkafka's statistics from poll(); on_commit reports auto commits."""
    import json
    from kohort.compat.confluent_kafka import Consumer, Producer
    topic = f"ck-stats-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": kohort_broker.bootstrap}) as a:
        a.create_topics({topic: 1})
    stats, commits = [], []
    p = Producer({"bootstrap.servers": kohort_broker.bootstrap, "stats_cb": stats.append,
                  "statistics.interval.ms": 10})
    try:
        for i in range(3):
            p.produce(topic, b"v%d" % i)
        assert p.flush(10) == 0 and len(p) == 0
        import time
        time.sleep(0.02)
        p.poll(0)
    finally:
        p.close()
    s = json.loads(stats[-1])
    assert s["type"] == "producer" and s["txmsgs"] == 3 and s["msg_cnt"] == 0
    c = Consumer({"bootstrap.servers": kohort_broker.bootstrap, "group.id": "g-" + topic,
                  "auto.offset.reset": "earliest", "auto.commit.interval.ms": 50,
                  "on_commit": lambda err, tps: commits.append((err, [(t.partition, t.offset) for t in tps])),
                  "stats_cb": stats.append, "statistics.interval.ms": 10})
    try:
        c.subscribe([topic])
        got = []
        while len(got) < 3:
            m = c.poll(5)
            assert m is not None and m.error() is None
            got.append(m.value())
        import time
        end = time.monotonic() + 5
        while not commits and time.monotonic() < end:
            c.poll(0.1)
        assert got == [b"v0", b"v1", b"v2"]
        assert commits and commits[-1] == (None, [(0, 3)])
        s = json.loads(stats[-1])
        assert s["type"] == "consumer" and s["topics"][topic]["partitions"]["0"]["app_offset"] == 3
    finally:
        c.close()


def test_revocation_commits_the_stored_offsets_and_drops_buffered_messages(kohort_broker):
    """A second member joins: the first one's on_revoke runs inside poll(), then the offsets of the
    messages it handed out (not of what it had fetched) are committed, as librdkafka does; nothing is
    read twice by the group."""
    import time
    from kohort.compat.confluent_kafka import Consumer, Producer
    topic = f"ck-rb-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": kohort_broker.bootstrap}) as a:
        a.create_topics({topic: 2})
    p = Producer({"bootstrap.servers": kohort_broker.bootstrap})
    for i in range(20):
        p.produce(topic, b"%d" % i, partition=i % 2)
    assert p.flush(10) == 0
    p.close()
    conf = {"bootstrap.servers": kohort_broker.bootstrap, "group.id": "g-" + topic, "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 600000, "partition.assignment.strategy": "range",
            "heartbeat.interval.ms": 100}
    events = []
    c1 = Consumer(conf)
    c2 = None
    try:
        c1.subscribe([topic], on_revoke=lambda c, ps: events.append(("revoke", sorted(x.partition for x in ps))))
        first = []
        while len(first) < 3:                     # c1 has fetched everything, handed out 3
            m = c1.poll(5)
            assert m is not None and m.error() is None
            first.append((m.partition(), m.offset()))
        c2 = Consumer(conf)
        c2.subscribe([topic])
        seen = list(first)
        end = time.monotonic() + 20
        while not events and time.monotonic() < end:     # c1 takes a message now and then until revoked
            assert c2.poll(0.2) is None
            m = c1.poll(0)
            if m is not None:
                seen.append((m.partition(), m.offset()))
        assert len(seen) < 20
        while len(seen) < 20 and time.monotonic() < end:
            for c in (c1, c2):
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    seen.append((m.partition(), m.offset()))
        assert ("revoke", [0, 1]) in events
        assert sorted(seen) == sorted(set(seen)) and len(seen) == 20   # no duplicates, nothing lost
    finally:
        c1.close()
        if c2 is not None:
            c2.close()


def test_error_cb_reports_an_unreachable_broker():
    """librdkafka reports connection failures to error_cb from poll(); so does the compat module."""
    from tests.helpers.brokers import free_port
    from kohort.compat.confluent_kafka import Consumer, KafkaError, Producer
    addr = f"127.0.0.1:{free_port()}"        # nothing listens there
    for make in (lambda cb: Consumer({"bootstrap.servers": addr, "group.id": "g", "error_cb": cb}),
                 lambda cb: Producer({"bootstrap.servers": addr, "error_cb": cb})):
        errors = []
        client = make(errors.append)
        try:
            if isinstance(client, Consumer):
                client.subscribe(["t"])
            for _ in range(20):
                client.poll(0.1)
                if errors:
                    break
        finally:
            client.close(*(() if isinstance(client, Consumer) else (1,)))
        assert errors and errors[0].code() == KafkaError._TRANSPORT and errors[0].retriable(), errors


def test_logger_receives_the_clients_logs():
    """Consumer(conf, logger=L) with debug set: kohort's client log records reach L (librdkafka's logs go
    to the logger passed, as in confluent-kafka's consumer.py example)."""
    import logging
    from tests.helpers.brokers import free_port
    from kohort.compat.confluent_kafka import Consumer

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, record):
            self.records.append(record)

    target = logging.getLogger(f"ck-test-{uuid.uuid4().hex[:6]}")
    target.propagate = False
    keep = Keep()
    target.addHandler(keep)
    old = logging.getLogger("kohort.client").level
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "group.id": "g", "debug": "all"}, logger=target)
    try:
        c.subscribe(["t"])
        for _ in range(20):
            c.poll(0.1)
            if keep.records:
                break
    finally:
        c.close()
        logging.getLogger("kohort.client").setLevel(old)
    assert keep.records and all(r.name.startswith("kohort.client") for r in keep.records)
    n = len(keep.records)
    logging.getLogger("kohort.client.x").warning("after close")
    assert len(keep.records) == n            # the forwarding ends with close()


def test_incremental_assign_and_unassign(kohort_broker):
    from kohort.compat.confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    topic = f"ck-inc-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": kohort_broker.bootstrap}) as a:
        a.create_topics({topic: 2})
    p = Producer({"bootstrap.servers": kohort_broker.bootstrap})
    for i in range(6):
        p.produce(topic, b"%d" % i, partition=i % 2)
    assert p.flush(10) == 0
    p.close()
    c = Consumer({"bootstrap.servers": kohort_broker.bootstrap, "group.id": "g-" + topic})
    try:
        c.incremental_assign([TopicPartition(topic, 0, 1)])
        c.incremental_assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
        assert [(t.topic, t.partition) for t in c.assignment()] == [(topic, 0), (topic, 1)]
        got = sorted((m.partition(), m.offset()) for m in c.consume(5, 10))
        assert got == [(0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
        c.incremental_unassign([TopicPartition(topic, 0)])
        assert [(t.partition, t.offset) for t in c.position([TopicPartition(topic, 1), TopicPartition(topic, 0)])] \
            == [(1, 3), (0, -1001)]
        assert [(t.topic, t.partition) for t in c.assignment()] == [(topic, 1)]
    finally:
        c.close()


def test_poll_zero_in_a_loop_gets_messages(kohort_broker):
    """poll(0) never waits but still drives the consumer (a busy loop of poll(0) gets the messages)."""
    import time
    from kohort.compat.confluent_kafka import Consumer, Producer
    topic = f"ck-p0-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": kohort_broker.bootstrap}) as a:
        a.create_topics({topic: 1})
    p = Producer({"bootstrap.servers": kohort_broker.bootstrap})
    p.produce(topic, b"x")
    assert p.flush(10) == 0
    p.close()
    c = Consumer({"bootstrap.servers": kohort_broker.bootstrap, "group.id": "g-" + topic,
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        end = time.monotonic() + 15
        m = None
        while m is None and time.monotonic() < end:
            m = c.poll(0)
            time.sleep(0.01)
        assert m is not None and m.value() == b"x"
    finally:
        c.close()


def test_buffer_error_at_queue_buffering_max_messages(kohort_broker):
    """librdkafka's queue limit: produce() raises BufferError while len(p) is at queue.buffering.max.messages
    (the official producer.py catches it); poll()/flush() make room."""
    from kohort.compat.confluent_kafka import Producer
    topic = f"ck-q-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": kohort_broker.bootstrap}) as a:
        a.create_topics({topic: 1})
    reports = []
    p = Producer({"bootstrap.servers": kohort_broker.bootstrap, "queue.buffering.max.messages": 3,
                  "on_delivery": lambda err, msg: reports.append(err)})
    try:
        for i in range(3):
            p.produce(topic, b"%d" % i)
        with pytest.raises(BufferError, match="queue.buffering.max.messages=3"):
            p.produce(topic, b"3")
        assert len(p) == 3
        assert p.flush(10) == 0 and reports == [None, None, None]
        p.produce(topic, b"3")
        assert p.flush(10) == 0 and len(reports) == 4
    finally:
        p.close()
