"""Opt-in profiling of the source's read tasks inside Spark's Python workers.

With the environment variable KOHORT_SPARK_PROFILE set to a directory (in local mode: set before the
SparkSession starts, the workers inherit it; on a cluster: `spark.executorEnv.KOHORT_SPARK_PROFILE`),
every read task writes there

* `read-<topic>-<partition>-<from>-<pid>.prof` -- cProfile of the reader's own work (fetching,
  decoding, building Arrow batches), enabled only while the reader runs, not while Spark consumes
  a batch;
* `read-<topic>-<partition>-<from>-<pid>.json` -- wall-clock split of the task: seconds inside the
  reader, seconds outside it (Spark writing the batches to the JVM and the JVM taking them: when
  this dominates, the reader is waiting on Spark), rows and batches yielded.

Unset (the default), `profiled` returns the reader's iterator unchanged.
"""
from __future__ import annotations

import json
import os
import time
from typing import Iterator

PROFILE_ENV = "KOHORT_SPARK_PROFILE"


def profiled(batches: Iterator, name: str) -> Iterator:
    """`batches` as is, or wrapped in the profiler when KOHORT_SPARK_PROFILE names a directory."""
    out_dir = os.environ.get(PROFILE_ENV)
    if not out_dir:
        return batches
    return _profiled(batches, os.path.join(out_dir, f"{name}-{os.getpid()}"))


def _profiled(batches: Iterator, base: str) -> Iterator:
    import cProfile
    prof = cProfile.Profile()
    inside = outside = 0.0
    rows = count = 0
    started = time.perf_counter()
    try:
        while True:
            t = time.perf_counter()
            prof.enable()
            try:
                rb = next(batches)
            except StopIteration:
                return
            finally:
                prof.disable()
                inside += time.perf_counter() - t
            rows += rb.num_rows
            count += 1
            t = time.perf_counter()
            yield rb
            outside += time.perf_counter() - t
    finally:
        os.makedirs(os.path.dirname(base) or ".", exist_ok=True)
        prof.dump_stats(base + ".prof")
        with open(base + ".json", "w") as fh:
            json.dump({"inside_reader_s": round(inside, 4), "outside_reader_s": round(outside, 4),
                       "task_s": round(time.perf_counter() - started, 4), "rows": rows, "batches": count}, fh)
