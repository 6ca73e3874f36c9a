"""bench/harness.py: jobs really run in subprocesses (results, errors, crashes, timeouts, subrows),
interleaved order, stats and ratios, and the report writers."""
from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
import harness  # noqa: E402
from harness import Job, Result, Section  # noqa: E402


@pytest.fixture
def workers(tmp_path, monkeypatch):
    """A worker module importable by the job subprocesses (through PYTHONPATH)."""
    (tmp_path / "bench_test_workers.py").write_text(textwrap.dedent("""
        import os, sys, threading, time

        def ok(x, log=None):
            if log:
                with open(log, "a") as fh:
                    fh.write(f"{x}\\n")
            return {"value": x * 2, "note": "fine"}

        def boom():
            raise ValueError("bad input 42")

        def crash():
            os.kill(os.getpid(), 9)

        def slow():
            time.sleep(30)

        def not_a_dict():
            return 5

        def two_rows(a, b):
            return {"value": a + b, "rows": {"produce": a, "consume": b}}

        def threaded():
            def spin():
                s = 0
                for i in range(200000):
                    s += i
            t = threading.Thread(target=spin)
            t.start(); t.join()
            return {"value": 1.0}
    """))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_job_result_and_errors(workers):
    (r,) = harness.run_job(Job("s", "row", "col", "bench_test_workers:ok", {"x": 21}), 0)
    assert r.value == 42.0 and r.error is None and r.extra == {"note": "fine"}
    (r,) = harness.run_job(Job("s", "row", "col", "bench_test_workers:boom", {}), 0)
    assert r.value is None and r.error == "ValueError: bad input 42"
    (r,) = harness.run_job(Job("s", "row", "col", "bench_test_workers:crash", {}), 0)
    assert r.value is None and r.error.startswith("killed by signal 9")
    (r,) = harness.run_job(Job("s", "row", "col", "bench_test_workers:not_a_dict", {}), 0)
    assert "TypeError" in r.error
    (r,) = harness.run_job(Job("s", "row", "col", "bench_test_workers:slow", {}, timeout=1.0), 0)
    assert r.error == "timeout after 1s"


def test_setup_failure_in_parent_is_a_cell_error(workers):
    def before(job, round_no):
        raise RuntimeError("no broker")
    (r,) = harness.run_job(Job("s", "row", "col", "bench_test_workers:ok", {"x": 1}, before=before), 0)
    assert r.error == "setup: RuntimeError: no broker"


def test_before_updates_kwargs_per_round(workers):
    (r,) = harness.run_job(Job("s", "row", "col", "bench_test_workers:ok", {"x": 1},
                               before=lambda job, rnd: {"x": 10 + rnd}), 3)
    assert r.value == 26.0


def test_subrows(workers):
    job = Job("s", "1 KiB", "kohort", "bench_test_workers:two_rows", {"a": 3, "b": 4},
              subrows=["produce", "consume", "missing"])
    got = {r.job.row: (r.value, r.error) for r in harness.run_job(job, 0)}
    assert got["1 KiB · produce"] == (3.0, None)
    assert got["1 KiB · consume"] == (4.0, None)
    assert got["1 KiB · missing"][0] is None and "missing" in got["1 KiB · missing"][1]
    failing = Job("s", "r", "c", "bench_test_workers:boom", {}, subrows=["a", "b"])
    assert [r.error for r in harness.run_job(failing, 0)] == ["ValueError: bad input 42"] * 2


def test_rounds_are_interleaved(workers, tmp_path):
    log = str(tmp_path / "order.log")
    jobs = [Job("s", "r", c, "bench_test_workers:ok", {"x": x, "log": log}) for c, x in (("A", 1), ("B", 2), ("C", 3))]
    results = harness.run_rounds(jobs, 2)
    assert [r.job.column for r in results] == ["A", "B", "C", "A", "B", "C"]
    assert [r.round for r in results] == [0, 0, 0, 1, 1, 1]
    with open(log) as fh:
        assert fh.read().split() == ["1", "2", "3", "1", "2", "3"]


def test_profile_merges_threads(workers, tmp_path):
    job = Job("s", "r", "kohort", "bench_test_workers:threaded", {}, profile=True)
    (r,) = harness.run_job(job, 0, profile_dir=str(tmp_path / "prof"))
    assert r.value == 1.0
    (txt,) = [f for f in os.listdir(tmp_path / "prof") if f.endswith(".txt")]
    text = (tmp_path / "prof" / txt).read_text()
    assert "2 threads merged" in text and "spin" in text


def _res(section, row, col, value, error=None):
    return Result(Job(section, row, col, "m:f", {}), 0, value, error, {}, 0.1)


def test_summary_medians_and_ratios():
    secs = {"t": Section("t", "throughput", "records/s"),
            "l": Section("l", "latency", "ms", higher_is_better=False, ours="kohort broker", peers=["Tansu"])}
    results = [_res("t", "100 B", "kohort", v) for v in (90, 100, 130)]
    results += [_res("t", "100 B", "confluent-kafka", v) for v in (190, 200, 400)]
    results += [_res("t", "100 B", "aiokafka", 50), _res("t", "100 B", "kafka-python", None, "boom")]
    results += [_res("l", "leave", "kohort broker", 300), _res("l", "leave", "Tansu", 3000),
                _res("l", "leave", "other", 10)]
    s = harness.summarize(results, secs)
    cell = s["t"]["cells"][("100 B", "kohort")]
    assert cell.median == 100 and min(cell.values) == 90
    assert s["t"]["ratios"]["100 B"] == (0.5, "confluent-kafka")
    assert s["l"]["ratios"]["leave"] == (10.0, "Tansu")        # peers only; lower is better
    table = harness.format_table(list(secs.values()), s)
    assert "100 (90–130)" in table and "ERROR: boom" in table and "×0.50 vs confluent-kafka" in table
    md = harness.markdown_tables(list(secs.values()), s)
    assert md.count("\n| 100 B |") == 1 and "×10.00 vs Tansu" in md


def test_ratio_absent_without_our_value():
    secs = {"t": Section("t", "x", "records/s")}
    s = harness.summarize([_res("t", "r", "kohort", None, "failed"), _res("t", "r", "aiokafka", 5)], secs)
    assert s["t"]["ratios"]["r"] is None


def test_writers(tmp_path):
    secs = {"t": Section("t", "throughput", "records/s", notes=["a note"])}
    results = [_res("t", "r", "kohort", 1000.0), _res("t", "r", "aiokafka", None, "x")]
    machine = harness.machine_info()
    assert machine["cores"] == os.cpu_count() and "confluent-kafka" in machine["versions"]
    run = {"started": "now", "mode": "quick", "rounds": 1, "elapsed_s": 1.0}
    p = tmp_path / "out.jsonl"
    harness.write_jsonl(str(p), results, machine, run, secs)
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["value"] == 1000.0 and lines[1]["error"] == "x"
    assert lines[0]["machine"]["cpu"] == machine["cpu"] and lines[0]["unit"] == "records/s"
    md = harness.write_markdown(str(tmp_path / "r.md"), list(secs.values()), harness.summarize(results, secs),
                                machine, run)
    assert "| throughput [records/s] | kohort | aiokafka |" in md and "a note" in md


def test_fmt_value():
    assert harness.fmt_value(1_234_567, "records/s") == "1.23M"
    assert harness.fmt_value(45_600, "records/s") == "46k"
    assert harness.fmt_value(5_600, "records/s") == "5.6k"
    assert harness.fmt_value(12.345, "ms") == "12.3"
    assert harness.fmt_value(6001, "ms") == "6,001"
    assert harness.fmt_value(None, "ms") == "-"
