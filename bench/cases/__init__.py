"""Benchmark cases for bench/run.py: each module builds its `Section`s and `Job`s (parent side) and
holds the worker functions the jobs run in their own subprocesses (see bench/harness.py)."""
