"""What the broker's group event recorder (broker/group_events.py: the console's history, the group log
lines, the rebalance metrics; always on) costs a classic group coordinator per heartbeat, the most
frequent group step: a Stable group of N members on the pure coordinator (fake clock), heartbeats with and
without `GroupEvents.observe` after each one, as the runtime does it.

    PYTHONPATH=src .venv/bin/python bench/bench_group_events.py [MEMBERS] [HEARTBEATS]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kohort.broker.coordinator import HeartbeatParams  # noqa: E402
from kohort.broker.coordinator.registry import GroupRegistry  # noqa: E402
from kohort.broker.group_events import GroupEvents, log_event  # noqa: E402
from tests.helpers.coordinator_harness import Harness  # noqa: E402


def stable_group(n: int):
    h = Harness()
    mids = [h.join_single("g", client_id=f"c{i}")[1] for i in range(n)]
    h.advance(5000)
    gen = h.group("g").generation_id
    for m in mids:
        h.sync("g", gen, m, [(x, b"") for x in mids] if m == mids[0] else [])
    return h, mids, gen


def run(n: int, beats: int, observe: bool) -> float:
    h, mids, gen = stable_group(n)
    rt = SimpleNamespace(groups=GroupRegistry(h.c), clock=lambda: h.now)
    ev = GroupEvents()
    ev.subscribe(log_event)
    ev.baseline(rt)
    t0 = time.perf_counter()
    for i in range(beats):
        p = HeartbeatParams("g", gen, mids[i % n])
        out = h.c.heartbeat(p, h.now, i)
        if observe:
            ev.observe(rt, "heartbeat", (p,), out)
    return (time.perf_counter() - t0) / beats * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    beats = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    for rnd in range(2):
        plain, observed = run(n, beats, False), run(n, beats, True)
        print(f"round {rnd}: {n} members, heartbeat {plain:.1f} us, with the event recorder {observed:.1f} us")


if __name__ == "__main__":
    main()
