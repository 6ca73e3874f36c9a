"""Group convergence, classic vs KIP-848 consumer protocol, kohort broker vs Apache Kafka 4.3.1, with the
same clients (kohort's consumers; issue 14). The measurement is the `kip848` case of `make bench`
(bench/cases/kip848.py); this script runs that case alone:

    PYTHONPATH=src .venv/bin/python bench/bench_kip848.py            # 3, 30 and 100 members
    PYTHONPATH=src .venv/bin/python bench/bench_kip848.py --quick    # 3 and 30 members

(Before issue 14's client work this script timed confluent-kafka members; kohort's own consumer now
speaks both protocols, so the case uses it on both brokers.)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run.main(["--only", "kip848", *sys.argv[1:]]))
