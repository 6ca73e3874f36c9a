"""kohort's public API is typed (PEP 561, `py.typed`): `mypy --strict` accepts examples/typed_usage.py
(threaded client, structs, errors, confluent-kafka compat) and examples/typed_usage_async.py (kohort.aio,
kohort.testing, share groups, aiokafka and confluent_kafka.aio compat), rejects misuse of the same API
(so the check has teeth), the examples run against real brokers (kohort's in-process broker; the share-group
part on Apache Kafka 4.3.1, as a second broker beside kohort's own share-group tests), and the names spelled out for type
checkers (ErrorCode's members, ConsumerRecord's fields) match what exists at run time.
tests/test_packaging.py repeats the mypy check against the installed wheel."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kohort import errors
from kohort.structs import ConsumerRecord
from tests.helpers.brokers import KohortBroker

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "typed_usage.py"
ASYNC_EXAMPLE = ROOT / "examples" / "typed_usage_async.py"


def _mypy(tmp_path: Path, *files: Path) -> subprocess.CompletedProcess:
    """mypy --strict with kohort from this checkout's src/ (its own modules' internals not reported)."""
    env = dict(os.environ, MYPYPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "mypy-cache"), *map(str, files)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)


@pytest.mark.timeout(600)
def test_typed_usage_example_passes_mypy_strict_and_misuse_does_not(tmp_path):
    ok = _mypy(tmp_path, EXAMPLE, ASYNC_EXAMPLE)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "misuse.py"
    bad.write_text(
        "from kohort import Consumer, Producer\n"
        "from kohort.errors import ErrorCode\n"
        "from kohort.compat.confluent_kafka import Message\n"
        "def f(c: Consumer, p: Producer, m: Message) -> None:\n"
        "    n: int = c.poll(1.0)\n"                        # a list of records, not an int
        "    p.produce(b'topic', value=b'v')\n"             # the topic is a str
        "    v: str = m.value()\n"                          # bytes | None
        "    e: int = ErrorCode.NO_SUCH_ERROR\n"            # not one of Kafka's names
        "    k: str = c.poll()[0].key\n"                   # bytes | None
        "from kohort.aio import AIOConsumer, AIOProducer\n"
        "from kohort.compat import aiokafka, confluent_kafka as ck\n"
        "from kohort.compat.confluent_kafka import aio as ckaio\n"
        "from kohort.structs import TopicPartition\n"
        "from kohort.testing import BrokerFactory, InProcessBroker\n"
        "async def g(p: AIOProducer, c: AIOConsumer, cp: ckaio.AIOProducer) -> None:\n"
        "    await p.send_and_wait('t', value='text')\n"                          # value is bytes
        "    n: int = (await c.getmany())[TopicPartition('t', 0)]\n"           # a list of records
        "    m: ck.Message = await cp.produce('t', b'v')\n"                       # a Future of the Message
        "    aiokafka.AIOKafkaConsumer('t', group_id=1)\n"                        # group_id is a str
        "def h(f: BrokerFactory, b: InProcessBroker, ms: ck.Messages) -> None:\n"
        "    f(storage='disk')\n"                                                 # 'memory' or 'tmp'
        "    b.fail_next('Produce')\n"                                            # the error is required
        "    v: str = ms[0].value()\n")                                           # bytes | None
    r = _mypy(tmp_path, bad)
    assert r.returncode == 1, r.stdout
    lines = [ln for ln in r.stdout.splitlines() if ": error:" in ln]
    assert sorted(int(ln.split(":")[1]) for ln in lines) == [5, 6, 7, 8, 9, 16, 17, 18, 19, 21, 22, 23], r.stdout


def test_typed_usage_example_runs_against_a_broker():
    with KohortBroker() as b:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        r = subprocess.run([sys.executable, str(EXAMPLE), b.bootstrap], capture_output=True, text=True,
                           timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "typed-usage: 3 partitions, 30 records; compat: 10 records" in r.stdout


def test_typed_async_example_runs_on_the_in_process_broker():
    """No argument: the example starts kohort.testing's broker itself."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, str(ASYNC_EXAMPLE)], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "aio: 20 records; aiokafka: 10 records; confluent_kafka.aio: 10 records" in r.stdout
    assert "testing: fixtures ok" in r.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("broker", ["kohort", pytest.param("kafka", marks=pytest.mark.slow)])
def test_typed_async_example_share_groups_run(broker):
    """The share-group part (kohort.ShareConsumer, then confluent-kafka's ShareConsumer in the same group)
    against kohort broker and (slow) Apache Kafka, both with share groups on."""
    from tests.client.share.test_share_consumer_kafka import SHARE_BROKER_CONFIG
    if broker == "kohort":
        server = KohortBroker(config=SHARE_BROKER_CONFIG)
    else:
        from tests.helpers.kafka_cluster import KafkaCluster
        server = KafkaCluster(nodes=1, extra_config=SHARE_BROKER_CONFIG)
    with server:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        r = subprocess.run([sys.executable, str(ASYNC_EXAMPLE), "--share", server.bootstrap], capture_output=True,
                           text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "share: 10 records" in r.stdout


def test_error_code_members_for_type_checkers_match_the_table():
    tree = ast.parse((ROOT / "src" / "kohort" / "errors.py").read_text())
    spelled = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ErrorCode":
            spelled = [(t.targets[0].id, ast.literal_eval(t.value)) for t in node.body
                       if isinstance(t, ast.Assign)]
    assert spelled is not None
    assert spelled == [(name, code) for code, name, _, _ in errors._TABLE]
    assert spelled == [(m.name, m.value) for m in errors.ErrorCode]


def test_consumer_record_fields_for_type_checkers_match_the_tuple():
    r = ConsumerRecord("t", 1, 2, 3, 0, b"k", b"v", [("h", b"x")], 4)
    assert [getattr(r, f) for f in ConsumerRecord._fields] == list(r)
    tree = ast.parse((ROOT / "src" / "kohort" / "structs.py").read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ConsumerRecord")
    typed = [n.name for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)
             and any(isinstance(d, ast.Name) and d.id == "property" for d in n.decorator_list)
             and n.name in ConsumerRecord._fields]
    assert typed == list(ConsumerRecord._fields)
