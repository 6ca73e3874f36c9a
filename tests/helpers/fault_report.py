"""The Jepsen-style table of every fault run recorded by tests/helpers/fault_workloads.record (a JSON-lines
file, $KOHORT_FAULT_RESULTS or <tmp>/kohort-fault-results.jsonl): one line per fault × workload ×
broker with the runs, the records and each anomaly count summed over the runs, then the details of
every run that had an anomaly.

    KOHORT_FAULT_RESULTS=/tmp/r.jsonl pytest tests/faults/test_faults.py -m slow -s -n 0
    python -m tests.helpers.fault_report [/tmp/r.jsonl]
"""
from __future__ import annotations

import json
import sys

KINDS = ("lost", "duplicates", "out_of_order", "two_owners", "stalled", "hung_calls")


def load(path: str) -> list[dict]:
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not a JSON row ({e}): {line[:80]!r}")
    return rows


def table(rows: list[dict]) -> str:
    groups: dict = {}
    for r in rows:
        g = groups.setdefault((r["fault"], r["workload"], r["broker"]),
                              {"runs": 0, "records": 0, **dict.fromkeys(KINDS, 0)})
        g["runs"] += 1
        g["records"] += r["records"]
        for k in KINDS:
            g[k] += r["anomalies"].get(k, 0)
    head = ["fault", "workload", "broker", "runs", "records", *KINDS]
    body = [[f, w, b, *(str(g[k]) for k in head[3:])] for (f, w, b), g in sorted(groups.items())]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [fmt(head), fmt(["-" * w for w in widths]), *map(fmt, body)]
    bad = [r for r in rows if any(r["anomalies"].get(k) for k in KINDS)]
    if bad:
        out.append("\nruns with anomalies:")
        for r in bad:
            out.append(f"  {r['fault']} / {r['workload']} / {r['broker']}:")
            out.extend(f"    {d}" for d in r["details"])
    return "\n".join(out)


def main(argv: list[str]) -> int:
    from tests.helpers.fault_workloads import results_path
    path = argv[0] if argv else results_path()
    try:
        rows = load(path)
    except FileNotFoundError:
        print(f"no fault runs recorded at {path}", file=sys.stderr)
        return 1
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
