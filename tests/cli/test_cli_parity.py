"""docs/parity.md is checked against the tools themselves: every option kafka-consumer-groups.sh,
kafka-share-groups.sh, kafka-console-consumer.sh and kafka-console-producer.sh (Kafka 4.3.1, `--help`) and kcat 1.7.1 (`-h`) list
has a row, every public method of confluent-kafka's Producer/Consumer/AdminClient/ShareConsumer has a row, every option
kohort's Spark source knows has a row; every row is same/extra/missing-on-purpose; every **same** command
line parses with kohort's own parser, every **same** confluent-kafka call exists in the compat module and
every **same** Spark option is accepted by format("kohort")."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.kafka_cluster import CONSOLE_CONSUMER, CONSOLE_PRODUCER, CONSUMER_GROUPS, SHARE_GROUPS, run_tool

DOC = Path(__file__).resolve().parents[2] / "docs" / "parity.md"
STATUSES = {"same", "extra", "missing-on-purpose"}


def sections() -> dict[str, list[tuple[str, str, str, str]]]:
    out: dict = {}
    name = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            out[name] = []
        elif name and line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip()[1:-1].split("|")]
            if len(cells) == 4 and cells[2] != "status":
                out[name].append(tuple(cells))
    return out


def ticks(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _parses(cmd: str) -> None:
    from kohort.cli.main import build_parser, parse
    argv = shlex.split(cmd)
    assert argv[0] == "kohort", cmd
    try:
        parse(build_parser(), argv[1:])
    except SystemExit as e:
        if e.code:                   # --help / --version exit 0
            raise AssertionError(f"kohort does not take: {cmd}") from None


@pytest.fixture(scope="module")
def doc():
    return sections()


def test_every_row_has_a_known_status(doc):
    assert {"kafka-consumer-groups.sh", "kcat"} <= set(doc)
    for name, rows in doc.items():
        assert rows, name
        for r in rows:
            assert r[2] in STATUSES, (name, r)


def _check_cli_section(rows, theirs: set[str], capsys):
    listed = {t.split()[-1] if t.startswith(("consumer ", "producer ")) else t
              for r in rows for t in ticks(r[0])}
    missing = theirs - listed
    assert not missing, f"options without a row: {sorted(missing)}"
    for r in rows:
        if r[2] == "same":
            cmds = [c for c in ticks(r[1]) if c.startswith("kohort")]
            assert cmds, r
            for c in cmds:
                _parses(c)
    capsys.readouterr()


def test_kafka_consumer_groups(doc, capsys):
    r = run_tool(CONSUMER_GROUPS, "--help", check=False)
    help_text = r.stdout + (r.stderr or "")
    theirs = set(re.findall(r"^(--[a-z-]+)", help_text, re.M)) - {"------"}
    assert len(theirs) > 25
    _check_cli_section(doc["kafka-consumer-groups.sh"], theirs, capsys)


def test_kafka_share_groups(doc, capsys):
    r = run_tool(SHARE_GROUPS, "--help", check=False)
    theirs = set(re.findall(r"^(--[a-z-]+)", r.stdout + (r.stderr or ""), re.M)) - {"------"}
    assert len(theirs) > 20
    _check_cli_section(doc["kafka-share-groups.sh"], theirs, capsys)


def test_console_consumer_and_producer(doc, capsys):
    rows = doc["kafka-console-consumer.sh and kafka-console-producer.sh"]
    for tool, role in ((CONSOLE_CONSUMER, "consumer"), (CONSOLE_PRODUCER, "producer")):
        r = run_tool(tool, "--help", check=False)
        theirs = set(re.findall(r"^(--[a-z.-]+)", r.stdout + (r.stderr or ""), re.M)) - {"------"}
        assert len(theirs) > 15
        mine = [r for r in rows if r[0].startswith(role) or r[0].startswith("`")]
        listed = {t for r in mine for t in re.findall(r"--[a-z.-]+", r[0])}
        assert not theirs - listed, f"{role} options without a row: {sorted(theirs - listed)}"
    _check_cli_section([r for r in rows if r[2] != "same" or ticks(r[1])], set(), capsys)


def test_kcat(doc, capsys):
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (make setup installs it)"
    help_text = subprocess.run([kcat, "-h"], capture_output=True, text=True, timeout=30).stdout
    theirs = set(re.findall(r"^\s+(-[A-Za-z])\b", help_text, re.M)) - {"-p -1"}
    listed = {f for r in doc["kcat"] for t in ticks(r[0]) for f in re.findall(r"-[A-Za-z]\b", t)}
    assert not theirs - listed, f"kcat flags without a row: {sorted(theirs - listed)}"
    _check_cli_section(doc["kcat"], set(), capsys)


def test_confluent_kafka_api(doc):
    import confluent_kafka
    import confluent_kafka.admin

    import kohort.compat.confluent_kafka as compat
    import kohort.compat.confluent_kafka.admin as compat_admin
    rows = doc["confluent-kafka-python (`kohort.compat.confluent_kafka`)"]
    listed = {t: r for r in rows for t in ticks(r[0])}
    classes = {"Producer": (confluent_kafka.Producer, compat.Producer),
               "Consumer": (confluent_kafka.Consumer, compat.Consumer),
               "AdminClient": (confluent_kafka.admin.AdminClient, compat_admin.AdminClient),
               "ShareConsumer": (confluent_kafka.ShareConsumer, compat.ShareConsumer)}
    for name, (real, _) in classes.items():
        public = {m for m in dir(real) if not m.startswith("_")} - set(dir(object))
        if name == "Producer":
            public.add("__len__")
        missing = {f"{name}.{m}" for m in public} - set(listed)
        assert not missing, f"confluent-kafka calls without a row: {sorted(missing)}"
    for t, r in listed.items():
        if r[2] == "same" and "." in t:
            cls, meth = t.split(".", 1)
            assert hasattr(classes[cls][1], meth), f"{t} is marked same but kohort.compat lacks it"


def test_java_share_consumer_rows(doc):
    """Every **same** kohort call of the KafkaShareConsumer section exists on kohort's classes."""
    from kohort import Admin, ShareConsumer
    from kohort.structs import ConsumerRecord
    rows = doc["Java KafkaShareConsumer (`kohort.ShareConsumer`)"]
    owners = {"ShareConsumer": ShareConsumer, "Admin": Admin, "record": ConsumerRecord}
    for r in rows:
        if r[2] != "same":
            continue
        for t in ticks(r[1]):
            m = re.match(r"(ShareConsumer|Admin|record)\.(\w+)", t)
            if m:
                assert hasattr(owners[m.group(1)], m.group(2)), f"{t} is marked same but kohort lacks it"


def test_aio_share_consumer_rows(doc):
    """Every **same** kohort call of the asyncio share consumer section exists on AIOShareConsumer."""
    from kohort.aio import AIOShareConsumer
    rows = doc["KafkaShareConsumer / confluent-kafka ShareConsumer on asyncio (`kohort.aio.AIOShareConsumer`)"]
    named = [m.group(1) for r in rows if r[2] == "same" for t in ticks(r[1])
             for m in [re.match(r"AIOShareConsumer\.(\w+)$", t)] if m]
    assert len(named) >= 15, named
    for name in named:
        assert hasattr(AIOShareConsumer, name), f"AIOShareConsumer.{name} is marked same but kohort lacks it"


def test_spark_options(doc):
    from kohort.spark import options as O
    rows = doc["spark-sql-kafka options (`format(\"kohort\")`)"]
    listed = {t: r for r in rows for t in ticks(r[0])}
    known = set(O._SOURCE_KEYS) | set(O._SINK_KEYS)
    assert not known - set(listed), f"options without a row: {sorted(known - set(listed))}"
    for t, r in listed.items():
        if r[2] == "same":
            opts = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}
            if t == "topic":
                O.parse_sink_options({"kafka.bootstrap.servers": "h:9092", "topic": "t"})
                continue
            if t in ("subscribe", "subscribePattern", "assign"):
                opts.pop("subscribe")
            value = {"assign": '{"t":[0]}', "startingOffsets": "earliest", "endingOffsets": "latest",
                     "startingTimestamp": "1000", "endingTimestamp": "2000",
                     "startingOffsetsByTimestamp": '{"t":{"0":1000}}', "endingOffsetsByTimestamp": '{"t":{"0":2000}}',
                     "startingOffsetsByTimestampStrategy": "error", "failOnDataLoss": "false",
                     "includeHeaders": "true", "maxTriggerDelay": "15m", "subscribePattern": "t.*",
                     "kafka.bootstrap.servers": "h:9092"}.get(t, "5")
            opts[t] = value if t != "kafka.group.id" else "g"
            O.parse_source_options(opts, batch=None)
        else:
            with pytest.raises(Exception):
                O.parse_source_options({"kafka.bootstrap.servers": "h:9092", "subscribe": "t", t: "x"})
