"""Scaling: consumer throughput as partitions grow (1, 4, 16, 64; 100 B records) and as the record
size grows (100 B .. 16 KiB, 50-160 MB per row, in MB/s), every client, kohort broker.

Same worker as the consumer section (cases.consumer.consume -> bench_consumer's client functions);
the n records are spread round-robin over the partitions.
"""
from __future__ import annotations

from cases.common import KOHORT_BROKER, seed
from cases.consumer import COLUMNS, size_label


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    parts = [1, 64] if quick else [1, 4, 16, 64]
    n_parts = 100_000 if quick else 300_000
    # record counts are multiples of 10,000: bench_consumer's confluent loop asks consume(10000, 1.0),
    # which waits out its timeout for a last partial batch
    sizes = {1024: 20_000, 8192: 10_000} if quick else {100: 300_000, 1024: 100_000, 4096: 30_000,
                                                         16_384: 10_000}
    broker = KOHORT_BROKER
    addr = env.brokers.addr.get(broker)
    s_parts = Section("scaling-partitions", f"consumer vs partitions ({n_parts:,} × 100 B, {broker})",
                      "records/s")
    s_size = Section("scaling-size", f"consumer vs record size (1 partition, {broker})",
                     "MB/s", notes=["Scaling: bench_consumer's clients, assign() from offset 0, uncompressed."])
    jobs = []

    def add(section, row, topic, n, size, p, unit):
        err = env.brokers.errors.get(broker) if addr is None else None
        if err is None:
            try:
                seed(addr, topic, n, size, "none", p)
            except Exception as e:
                err = f"seeding: {type(e).__name__}: {e}"
        before = None
        if err is not None:
            def before(job, round_no, err=err):
                raise RuntimeError(err)
        for client in COLUMNS:
            jobs.append(Job(section, row, client, "cases.consumer:consume",
                            {"client": client, "addr": addr, "topic": topic, "partitions": p, "n": n,
                             "size": size, "unit": unit}, timeout=200, before=before,
                            profile=client in profile))

    for p in parts:
        add("scaling-partitions", f"{p} partition{'s' if p > 1 else ''}", f"scale-p{p}", n_parts, 100, p,
            "records/s")
    for size, n in sizes.items():
        add("scaling-size", f"{size_label(size)} × {n:,}", f"scale-s{size}", n, size, 1, "MB/s")
    return [s_parts, s_size], jobs
