"""`kohort topics describe --configs` marks where each config comes from, as kafka-configs.sh --describe
--all does (Kafka 4.3.1's ConfigCommand run against the same kohort broker): DYNAMIC_TOPIC_CONFIG for
what the topic sets, STATIC_BROKER_CONFIG for the broker's --config, DEFAULT_CONFIG for Kafka's defaults."""
import json
import re

import pytest

from kohort.cli.main import main
from tests.helpers.brokers import KohortBroker
from tests.helpers.kafka_cluster import run_tool

CONFIG_COMMAND = "kafka.admin.ConfigCommand"


def _sources(capsys, b):
    assert main(["topics", "create", "tc", "-c", "cleanup.policy=compact", "-b", b.bootstrap]) == 0
    capsys.readouterr()
    assert main(["topics", "describe", "tc", "--configs", "--json", "-b", b.bootstrap]) == 0
    ours = json.loads(capsys.readouterr().out)[0]["configs"]
    assert ours["cleanup.policy"]["source"] == "DYNAMIC_TOPIC_CONFIG" and ours["cleanup.policy"]["override"]
    assert ours["retention.ms"] == {"value": "3600000", "source": "STATIC_BROKER_CONFIG", "override": False,
                                    "read_only": False, "sensitive": False}
    assert ours["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    # the table: a SOURCE column; --overrides keeps what the topic sets
    assert main(["topics", "describe", "tc", "--configs", "--overrides", "-b", b.bootstrap]) == 0
    lines = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert lines[0].split() == ["TOPIC", "CONFIG", "VALUE", "SOURCE"]
    assert [ln.split() for ln in lines[1:]] == [["tc", "cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG"]]
    return ours


def test_config_sources(capsys):
    with KohortBroker(config={"log.retention.ms": 3600000}) as b:
        _sources(capsys, b)


@pytest.mark.slow
def test_config_sources_match_kafka_configs(capsys):
    with KohortBroker(config={"log.retention.ms": 3600000}) as b:
        ours = _sources(capsys, b)
        out = run_tool(CONFIG_COMMAND, "--bootstrap-server", b.bootstrap, "--describe", "--all",
                       "--entity-type", "topics", "--entity-name", "tc").stdout
        theirs = {}
        for line in out.splitlines():
            m = re.match(r"\s+([a-z0-9.]+)=(.*?) sensitive=\S+ synonyms=\{([A-Z_]+):", line)
            if m:
                theirs[m.group(1)] = (m.group(2), m.group(3))
        assert len(theirs) > 10
        assert {k: (v["value"] if v["value"] is not None else "null", v["source"]) for k, v in ours.items()} == theirs


def test_every_command_takes_log_level():
    """`--log-level debug` on a client command shows kohort's client log on stderr (it was broker-only)."""
    import argparse
    import os
    import subprocess
    import sys
    from pathlib import Path
    from kohort.cli.main import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        leaves = list(subs[0].choices.values()) if subs else [p]
        for leaf in leaves:
            if leaf.prog.endswith("validate-regex"):
                continue                    # no broker, no logging
            assert "--log-level" in leaf._option_string_actions, leaf.prog
    with KohortBroker() as b:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
        r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "topics", "list", "-b", b.bootstrap,
                            "--log-level", "debug"], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0 and " DEBUG kohort.client" in r.stderr, r.stderr[-2000:]
        r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "topics", "list", "-b", b.bootstrap],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0 and "DEBUG" not in r.stderr
