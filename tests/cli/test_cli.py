"""The `kohort topics|produce|consume|groups` subcommands against kohort's broker: tables, --json,
progress, errors as one line; `groups describe/lag` agree with confluent-kafka's admin API on a live group."""
import json
import os
import subprocess
import sys
import time

import pytest

from kohort.cli.common import Progress, table
from kohort.cli.main import main
from tests.helpers.brokers import KohortBroker


@pytest.fixture(scope="module")
def kb():
    with KohortBroker() as b:
        yield b.bootstrap


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# -- pure helpers ---------------------------------------------------------------------------------
def test_table_aligns_and_right_aligns_numbers():
    text = table(["TOPIC", "PARTITION", "LAG"], [("a", 0, 5), ("longer-name", 10, None)])
    lines = text.splitlines()
    assert lines[0] == "TOPIC        PARTITION  LAG"
    assert lines[1] == "a                    0    5"
    assert lines[2] == "longer-name         10    -"


def test_progress_renders_bar_and_rate():
    import io
    s = io.StringIO()
    p = Progress(200, "t", force=True, stream=s)
    p.update(50, force=True)
    p.close()
    out = s.getvalue()
    assert "[#######" in out and "25.0%" in out and "50/200 records" in out and out.endswith("\n")
    quiet = io.StringIO()
    Progress(10, stream=quiet).update(5, force=True)      # not a terminal: draws nothing
    assert quiet.getvalue() == ""


def test_bootstrap_default_from_environment(monkeypatch):
    from kohort.cli.common import default_bootstrap
    monkeypatch.delenv("KOHORT_BOOTSTRAP", raising=False)
    assert default_bootstrap() == "localhost:9092"
    monkeypatch.setenv("KOHORT_BOOTSTRAP", "h:1")
    assert default_bootstrap() == "h:1"


# -- against the broker ---------------------------------------------------------------------------
def test_topics_commands(capsys, kb):
    rc, out, _ = run(capsys, "topics", "create", "cli-a", "cli-b", "-p", "3", "-b", kb)
    assert rc == 0 and "topic cli-a created" in out and "topic cli-b created" in out
    rc, _, err = run(capsys, "topics", "create", "cli-a", "-b", kb)
    assert rc == 1 and "TOPIC_ALREADY_EXISTS" in err and len(err.strip().splitlines()) == 1
    rc, out, _ = run(capsys, "topics", "create", "cli-a", "--if-not-exists", "-b", kb)
    assert rc == 0
    rc, out, _ = run(capsys, "topics", "list", "-b", kb)
    assert rc == 0 and out.splitlines()[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"]
    assert any(line.split() == ["cli-a", "3", "1"] for line in out.splitlines())
    rc, out, _ = run(capsys, "topics", "list", "--json", "-b", kb)
    assert {"topic": "cli-b", "partitions": 3, "replication_factor": 1} in json.loads(out)
    rc, out, _ = run(capsys, "topics", "describe", "cli-a", "--configs", "-b", kb)
    assert rc == 0 and "LEADER" in out and "retention.ms" in out
    rc, out, _ = run(capsys, "topics", "alter-partitions", "cli-b", "-p", "4", "-b", kb)
    assert rc == 0
    rc, out, _ = run(capsys, "topics", "describe", "cli-b", "--json", "-b", kb)
    assert len(json.loads(out)[0]["partitions"]) == 4
    rc, out, _ = run(capsys, "topics", "config", "cli-b", "--set", "retention.ms=1234", "-b", kb)
    assert rc == 0
    rc, out, _ = run(capsys, "topics", "describe", "cli-b", "--configs", "--json", "-b", kb)
    assert json.loads(out)[0]["configs"]["retention.ms"] == {"value": "1234", "source": "DYNAMIC_TOPIC_CONFIG",
                                                          "override": True, "read_only": False, "sensitive": False}
    rc, out, _ = run(capsys, "topics", "delete", "cli-b", "-b", kb)
    assert rc == 0 and "deleted" in out
    rc, out, err = run(capsys, "topics", "describe", "cli-b", "-b", kb)
    assert rc == 1 and "does not exist" in err and len(err.strip().splitlines()) == 1


def test_produce_then_consume_with_keys_and_headers(capsys, kb, tmp_path):
    run(capsys, "topics", "create", "cli-pc", "-p", "2", "-b", kb)
    src = tmp_path / "in.txt"
    src.write_text("".join(f"key{i % 5}|value {i}\n" for i in range(300)) + "no-key-line\n")
    rc, out, err = run(capsys, "produce", "cli-pc", "-f", str(src), "-K", "|", "-H", "src=test", "-H", "n=1",
                       "-z", "lz4", "-b", kb)
    assert rc == 0 and "produced 301 record(s) to cli-pc" in err
    rc, out, _ = run(capsys, "consume", "cli-pc", "--from-beginning", "-e", "-f", "%k=%s;%h\\n", "-b", kb)
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 301
    assert sorted(lines) == sorted([f"key{i % 5}=value {i};src=test,n=1" for i in range(300)]
                                   + ["=no-key-line;src=test,n=1"])
    rc, out, _ = run(capsys, "consume", "cli-pc", "--from-beginning", "-c", "7", "-f", "json", "-b", kb)
    recs = [json.loads(x) for x in out.splitlines()]
    assert len(recs) == 7 and all(r["headers"] == [["src", "test"], ["n", "1"]] for r in recs)
    assert all(r["value"].startswith("value ") or r["value"] == "no-key-line" for r in recs)
    # the same records read by a peer: keys and headers intact
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": kb, "group.id": "x", "log_level": 0})
    c.assign([TopicPartition("cli-pc", p, OFFSET_BEGINNING) for p in range(2)])
    got = []
    deadline = time.time() + 20
    while len(got) < 301 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.key(), m.value(), m.headers()))
    c.close()
    assert len(got) == 301 and (b"key3", b"value 3", [("src", b"test"), ("n", b"1")]) in got


def test_produce_rate_limit_and_json_summary(capsys, kb, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{i}\n" for i in range(40)))
    t0 = time.monotonic()
    rc, out, _ = run(capsys, "produce", "cli-rate", "-f", str(src), "--rate", "100", "--json", "-b", kb)
    elapsed = time.monotonic() - t0
    summary = json.loads(out)
    assert rc == 0 and summary["records"] == 40 and summary["failed"] == 0
    assert elapsed >= 0.38


@pytest.mark.parametrize("argv,line", [
    (["produce", "t", "--rate=0"], "kohort produce: error: argument --rate: must be above 0, got 0"),
    (["produce", "t", "--rate=-5"], "kohort produce: error: argument --rate: must be above 0, got -5"),
    (["produce", "t", "--rate=nan"], "kohort produce: error: argument --rate: expected a number, got 'nan'"),
    (["topics", "list", "--timeout=0"], "kohort topics list: error: argument --timeout: must be above 0, got 0"),
    (["topics", "list", "--timeout=inf"],
     "kohort topics list: error: argument --timeout: expected a number, got 'inf'"),
    (["consume", "t", "--idle=-1"], "kohort consume: error: argument --idle: must be at least 0, got -1"),
    (["consume", "t", "-c", "0"], "kohort consume: error: argument -c/--count/--max-messages: must be at least 1, got 0"),
    (["consume", "t", "-c", "1.5"], "kohort consume: error: argument -c/--count/--max-messages: expected a whole number, got '1.5'"),
    (["pipeline", "--config", "x.toml", "--duration=-1"],
     "kohort pipeline: error: argument --duration: must be above 0, got -1"),
    (["demo", "--rate=0"], "kohort demo: error: argument --rate: must be at least 1, got 0"),
])
def test_numbers_out_of_range_are_usage_errors(capsys, argv, line):
    with pytest.raises(SystemExit) as ei:
        main([*argv, *(["-b", "127.0.0.1:1"] if argv[0] in ("produce", "topics", "consume") else [])])
    _, err = capsys.readouterr()
    assert ei.value.code == 2 and err.splitlines()[-1] == line, err
    assert "Traceback" not in err


def test_consume_with_group_commits(capsys, kb, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("".join(f"r{i}\n" for i in range(20)))
    run(capsys, "topics", "create", "cli-grp", "-p", "1", "-b", kb)
    run(capsys, "produce", "cli-grp", "-f", str(src), "-b", kb)
    rc, out, _ = run(capsys, "consume", "cli-grp", "-g", "cli-g1", "--from-beginning", "-c", "20", "-b", kb)
    assert rc == 0 and out.split() == [f"r{i}" for i in range(20)]
    rc, out, _ = run(capsys, "groups", "lag", "cli-g1", "--json", "-b", kb)
    (g,) = json.loads(out)
    assert g["partitions"][0]["log_end_offset"] == 20 and g["total_lag"] == 0


def test_groups_reset_offsets_dry_run_then_execute(capsys, kb, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{i}\n" for i in range(10)))
    run(capsys, "topics", "create", "cli-rs", "-p", "2", "-b", kb)
    run(capsys, "produce", "cli-rs", "-f", str(src), "-p", "0", "-b", kb)
    rc, out, err = run(capsys, "groups", "reset-offsets", "cli-g2", "--topic", "cli-rs", "--to-latest", "-b", kb)
    assert rc == 0 and "dry run" in err
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "OLD-OFFSET", "NEW-OFFSET"]
    assert rows[1] == ["cli-g2", "cli-rs", "0", "-", "10"]
    rc, out, err = run(capsys, "groups", "lag", "cli-g2", "--json", "-b", kb)
    assert rc == 1 and "'cli-g2' does not exist" in err             # the dry run committed nothing
    rc, out, _ = run(capsys, "groups", "reset-offsets", "cli-g2", "--topic", "cli-rs:0", "--to-offset", "4",
                     "--execute", "--json", "-b", kb)
    assert json.loads(out)["partitions"] == [{"topic": "cli-rs", "partition": 0, "old_offset": None,
                                              "new_offset": 4}]
    rc, out, _ = run(capsys, "groups", "reset-offsets", "cli-g2", "--all-topics", "--shift-by", "-3",
                     "--execute", "-b", kb)
    assert rc == 0
    rc, out, _ = run(capsys, "groups", "lag", "cli-g2", "-b", kb)
    assert "TOTAL LAG cli-g2: 9" in out
    rc, out, err = run(capsys, "groups", "describe", "cli-g2", "-b", kb)
    assert "has no active members" in err and "CURRENT-OFFSET" in out
    rc, out, _ = run(capsys, "groups", "list", "-b", kb)
    assert any(line.split()[0] == "cli-g2" for line in out.splitlines()[1:])
    rc, _, err = run(capsys, "groups", "reset-offsets", "cli-g2", "--topic", "cli-rs", "--to-datetime",
                     "yesterday", "-b", kb)
    assert rc == 1 and "--to-datetime" in err
    rc, out, _ = run(capsys, "groups", "delete", "cli-g2", "-b", kb)
    assert rc == 0 and "deleted" in out


def test_live_group_describe_and_lag_match_confluent_admin(capsys, kb):
    from tests.client.test_admin import _fill, confluent_view
    from confluent_kafka import Consumer, TopicPartition
    from kohort.client.admin import Admin
    topic, group = "t-live", "cli-live"
    with Admin({"bootstrap.servers": kb}) as a:
        a.create_topics({topic: 4})
    _fill(kb, topic, {0: 3, 1: 4, 2: 5, 3: 6})
    consumers = [Consumer({"bootstrap.servers": kb, "group.id": group, "client.id": f"cli-peer-{i}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "heartbeat.interval.ms": 500, "log_level": 0}) for i in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])
        deadline = time.time() + 40
        while time.time() < deadline and not all(len(c.assignment()) == 2 for c in consumers):
            for c in consumers:
                c.poll(0.2)
        for c in consumers:
            c.commit(offsets=[TopicPartition(topic, tp.partition, 1) for tp in c.assignment()],
                     asynchronous=False)
        state, members, committed, lag = confluent_view(kb, topic, group)
        rc, out, _ = run(capsys, "groups", "describe", group, "--members", "--json", "-b", kb)
        (d,) = json.loads(out)
        ours = sorted((m["member_id"], m["client_id"], m["host"], tuple(sorted(map(tuple, m["assignment"]))))
                      for m in d["members"])
        assert ours == members and d["state"].upper() == state.upper()
        rc, out, _ = run(capsys, "groups", "lag", group, "--json", "-b", kb)
        (g,) = json.loads(out)
        assert {(p["topic"], p["partition"]): p["lag"] for p in g["partitions"]} == lag
        assert {(p["topic"], p["partition"]): p["current_offset"] for p in g["partitions"]} == committed
        rc, out, _ = run(capsys, "groups", "describe", group, "-b", kb)
        header = out.splitlines()[0].split()
        assert header == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                          "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert len(out.splitlines()) == 5
        rc, _, err = run(capsys, "groups", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute",
                         "-b", kb)
        assert rc == 1 and "inactive" in err
    finally:
        for c in consumers:
            c.close()


# -- errors are one line --------------------------------------------------------------------------
def _cli(*argv, stdin=b""):
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "..", "src")}
    return subprocess.run([sys.executable, "-m", "kohort.cli.main", *argv], input=stdin, capture_output=True,
                          timeout=60, env=env)


@pytest.mark.parametrize("argv", [
    ["topics", "list"],
    ["groups", "list"],
    ["produce", "t"],
    ["consume", "t", "-e"],
])
def test_unreachable_broker_is_one_line_not_a_traceback(argv):
    from tests.helpers.brokers import free_port
    addr = f"127.0.0.1:{free_port()}"
    r = _cli(*argv, "-b", addr, "--timeout", "1.5", stdin=b"hello\n")
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert addr in lines[0] and ("bootstrap" in lines[0] or "reach" in lines[0]), lines[0]
    assert lines[0].startswith(f"kohort {argv[0]}: cannot reach any Kafka broker at {addr} ("), lines[0]


def test_bad_config_key_names_the_closest(capsys):
    rc, _, err = run(capsys, "topics", "list", "-b", "127.0.0.1:1", "-X", "request.timeout.msx=5")
    assert rc == 1 and "did you mean 'request.timeout.ms'" in err


@pytest.mark.parametrize("argv,role,key,right", [
    (["produce", "t"], "producer", "lingr.ms", "linger.ms"),
    (["consume", "t", "-e"], "consumer", "fetch.max.byte", "fetch.max.bytes"),
])
def test_bad_client_config_key_is_named_before_connecting(capsys, argv, role, key, right):
    t0 = time.monotonic()
    rc, _, err = run(capsys, *argv, "-b", "127.0.0.1:1", "-X", f"{key}=5")
    assert time.monotonic() - t0 < 5            # not after the 30 s wait for an unreachable broker
    assert rc == 1 and f"unknown {role} configuration key '{key}'; did you mean '{right}'?" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_bootstrap_env_is_used(monkeypatch, capsys, kb):
    monkeypatch.setenv("KOHORT_BOOTSTRAP", kb)
    rc, out, _ = run(capsys, "topics", "list", "--json")
    assert rc == 0 and isinstance(json.loads(out), list)


def test_produce_consume_on_tansu(capsys, tansu, tmp_path):
    topic = f"cli-tansu-{os.getpid()}"
    rc, _, _ = run(capsys, "topics", "create", topic, "-p", "1", "-b", tansu)
    assert rc == 0
    src = tmp_path / "in.txt"
    src.write_text("".join(f"k{i}:v{i}\n" for i in range(50)))
    rc, _, err = run(capsys, "produce", topic, "-f", str(src), "-K", ":", "-z", "zstd", "-b", tansu)
    assert rc == 0 and "produced 50" in err
    rc, out, _ = run(capsys, "consume", topic, "--from-beginning", "-c", "50", "-f", "%k %s\\n", "-b", tansu)
    assert rc == 0 and out.splitlines() == [f"k{i} v{i}" for i in range(50)]


def test_consume_takes_consumer_settings(capsys, kb, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("a\nb\n")
    run(capsys, "produce", "cli-x", "-f", str(src), "-b", kb)
    rc, out, _ = run(capsys, "consume", "cli-x", "--from-beginning", "-c", "2", "-X", "fetch.max.wait.ms=100",
                     "-b", kb)
    assert rc == 0 and out.split() == ["a", "b"]


def test_produce_reports_failed_deliveries(capsys, kb, tmp_path):
    run(capsys, "topics", "create", "cli-big", "-c", "max.message.bytes=2000", "-b", kb)
    src = tmp_path / "in.txt"
    src.write_text("small\n" + "x" * 5000 + "\n")
    rc, _, err = run(capsys, "produce", "cli-big", "-f", str(src), "-X", "linger.ms=0", "-X", "batch.size=100",
                     "-b", kb)
    assert rc == 1 and "1 failed" in err and "MESSAGE_TOO_LARGE" in err
    rc, _, err = run(capsys, "produce", "cli-big", "-f", str(src), "-p", "7", "-b", kb)
    assert rc == 1 and "partition 7 does not exist" in err and len(err.strip().splitlines()) == 1
