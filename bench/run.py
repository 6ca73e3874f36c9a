"""Run every kohort benchmark side by side with its peers, in one run on one machine.

    .venv/bin/python bench/run.py            # full: 3 interleaved rounds, realistic sizes (make bench)
    .venv/bin/python bench/run.py --quick    # small sizes, fewer variants, under two minutes
    .venv/bin/python bench/run.py --only consumer,producer --rounds 5
    .venv/bin/python bench/run.py --quick --only consumer --profile kohort   # cProfile the kohort runs

Sections (bench/cases/): consumer and producer throughput (kohort vs confluent-kafka, kafka-python,
aiokafka on a kohort broker and on Tansu), broker end-to-end with confluent-kafka clients (kohort
broker vs Tansu), group latencies (subscribe -> first record, clean-leave and SIGKILL handovers),
Spark streaming into Parquet vs the raw consumer, consumer scaling with partitions and record size, and
group convergence after a member joins or leaves, classic vs KIP-848 consumer protocol, kohort broker vs
Apache Kafka 4.3.1 with kohort's consumers (kip848), and how the broker's cost grows with group size,
partition count and connection count, kohort broker vs Apache Kafka (scale: growth curves in
bench/out/scale-<dimension>.png, drawn by bench/plots.py with matplotlib), the asyncio clients
(aio: kohort.aio vs aiokafka, confluent_kafka.aio and kohort's sync consumer, with the event loop's stall),
and share groups (share: KIP-932 throughput with 1, 3 and 10 members and redelivery latency after a
RELEASE, kohort's ShareConsumer vs confluent-kafka's and Java's KafkaShareConsumer, kohort broker vs
Apache Kafka 4.3.1).
Prints the tables and writes bench/out/bench-<time>.jsonl (one line per measurement, with machine
info), bench/out/bench-<time>.md, and latest.jsonl / latest.md copies.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (HERE, ROOT, os.path.join(ROOT, "src")):
    if p not in sys.path:
        sys.path.insert(0, p)

import harness  # noqa: E402

CASES = ["consumer", "producer", "broker", "groups", "spark", "scaling", "kip848", "tls", "txn", "scale", "aio",
         "share"]


class Env:
    def __init__(self, brokers, out_dir):
        self.brokers = brokers
        self.out_dir = out_dir


FULL_RUN_FREE_GB = 30


def _free_gb() -> float:
    st = os.statvfs(tempfile.gettempdir())
    return st.f_bavail * st.f_frsize / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes and fewer variants (< 2 minutes)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; quick 1)")
    ap.add_argument("--only", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--profile", default="", help="comma-separated columns to run under cProfile "
                    "(e.g. kohort); summaries go to bench/out/profiles/")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    opts = ap.parse_args(argv)
    mode = "quick" if opts.quick else "full"
    rounds = opts.rounds or (1 if opts.quick else 3)
    only = [c.strip() for c in opts.only.split(",") if c.strip()]
    unknown = [c for c in only if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {CASES}")
    profile = {c.strip() for c in opts.profile.split(",") if c.strip()}
    os.makedirs(opts.out, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    profile_dir = os.path.join(opts.out, "profiles", stamp) if profile else None

    machine = harness.machine_info()
    run_info = {"started": harness.now_utc(), "mode": mode, "rounds": rounds, "cases": only, "id": stamp}
    print(f"kohort bench ({mode}, {rounds} round(s)) on {machine['cpu']}, {machine['cores']} cores, "
          f"load {machine['loadavg_at_start']}, {_free_gb():.0f} GB free in {tempfile.gettempdir()}", flush=True)
    if mode == "full" and _free_gb() < FULL_RUN_FREE_GB:
        print(f"  warning: a full run keeps its brokers' topics until it ends and may need ~{FULL_RUN_FREE_GB} GB "
              f"in {tempfile.gettempdir()} (the brokers' data directories)", flush=True)
    t0 = time.monotonic()
    from cases.common import Brokers
    brokers = Brokers()
    for name, err in brokers.errors.items():
        print(f"  {name} did not start: {err}", flush=True)
    env = Env(brokers, opts.out)
    sections: list[harness.Section] = []
    results: list[harness.Result] = []

    def show(res: harness.Result):
        j = res.job
        what = f"{j.section} | {j.row} | {j.column} | round {res.round + 1}"
        got = res.error if res.error else harness.fmt_value(res.value, by_key[j.section].unit)
        try:
            print(f"  {what}: {got}  ({res.seconds:.1f}s)", flush=True)
        except OSError:             # stdout to a full disk: the result is kept and reported
            pass

    by_key: dict[str, harness.Section] = {}
    built = []
    try:
        for case in only:
            mod = importlib.import_module(f"cases.{case}")
            built.append(mod)
            tc = time.monotonic()
            try:
                secs, jobs = mod.build(env, mode, profile)
            except Exception as e:      # a case that cannot even set up: one error row, the run goes on
                secs = [harness.Section(case, case, "-", ours=None)]
                jobs = [harness.Job(case, "setup", "error", "cases.common:values", {},
                                    before=_raiser(f"{type(e).__name__}: {e}"))]
            for s in secs:
                by_key[s.key] = s
                sections.append(s)
            print(f"[{case}] {_free_gb():.0f} GB free; {len(jobs)} jobs x {min(rounds, getattr(mod, 'MAX_ROUNDS', rounds))} round(s) "
                  f"(setup {time.monotonic() - tc:.1f}s)",
                  flush=True)
            n_rounds = min(rounds, getattr(mod, "MAX_ROUNDS", rounds))
            results += harness.run_rounds(jobs, n_rounds, on_result=show, profile_dir=profile_dir)
    except KeyboardInterrupt:
        print("interrupted: reporting what ran", flush=True)
    except Exception:               # e.g. the disk filled up: what ran is still reported
        traceback.print_exc()
        print("failed: reporting what ran", flush=True)
    finally:
        for mod in built:           # brokers a case started for itself
            if hasattr(mod, "finish"):
                try:
                    mod.finish(env)
                except Exception as e:
                    print(f"  {mod.__name__}.finish: {e}", flush=True)
        brokers.stop()
    run_info["elapsed_s"] = round(time.monotonic() - t0, 1)
    summary = harness.summarize(results, by_key)
    table = harness.format_table(sections, summary)
    print("\n" + table)
    jsonl = os.path.join(opts.out, f"bench-{stamp}.jsonl")
    md = os.path.join(opts.out, f"bench-{stamp}.md")
    harness.write_jsonl(jsonl, results, machine, run_info, by_key)
    profiles = []
    if profile_dir and os.path.isdir(profile_dir):
        profiles = sorted(os.path.join(profile_dir, f) for f in os.listdir(profile_dir) if f.endswith(".txt"))
    harness.write_markdown(md, sections, summary, machine, run_info, profiles)
    shutil.copyfile(jsonl, os.path.join(opts.out, "latest.jsonl"))
    shutil.copyfile(md, os.path.join(opts.out, "latest.md"))
    print(f"wrote {os.path.relpath(jsonl)} and {os.path.relpath(md)} ({run_info['elapsed_s']} s)")
    return 0


def _raiser(msg):
    def before(job, round_no):
        raise RuntimeError(msg)
    return before


if __name__ == "__main__":
    sys.exit(main())
