"""Micro-benchmark of kohort's record layer next to kafka-python's decoder on the same bytes.

Prints batch-decode throughput (records/s) for 100-byte values in ~1000-record batches, uncompressed
and lz4, through `iter_records` (the consumer fast path), `decode_records_list` and
`decode_columns` (Spark), each with the pure-Python decoder and the C extension side by side,
`decode_batch` (Record objects), kafka-python's MemoryRecords decoder and aiokafka's Cython one
when installed (for scale), and CRC-32C throughput. Run:
    .venv/bin/python bench/bench_protocol.py [--quick]
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import time

from crc32c import crc32c

from kohort.protocol import records as R


def make_payload(codec: int, batches: int, per_batch: int = 1000, value_size: int = 100) -> bytes:
    rnd = random.Random(codec)
    out = bytearray()
    offset = 0
    ts = 1_700_000_000_000
    for _ in range(batches):
        b = R.BatchBuilder(base_offset=offset, compression=codec)
        for i in range(per_batch):
            # half random, half repetitive: compressible like typical JSON-ish payloads
            value = rnd.randbytes(value_size // 2) + b"x" * (value_size - value_size // 2)
            b.append(b"key-%06d" % (offset + i), value, None, ts + i)
        out += b.build()
        offset += per_batch
        ts += per_batch
    return bytes(out)


def best_rate(fn, n_items: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        got = fn()
        dt = time.perf_counter() - t
        assert got == n_items, (got, n_items)
        best = min(best, dt)
    return n_items / best


def kohort_fast(payload):
    n = 0
    for _ in R.iter_records(payload):
        n += 1
    return n


def kohort_fast_crc(payload):
    n = 0
    for _ in R.iter_records(payload, check_crc=True):
        n += 1
    return n


def kohort_list(payload):
    return len(R.decode_records_list(payload))


def kohort_columns(payload):
    return R.decode_columns(payload).count


def kohort_objects(payload):
    n = 0
    for pos, h in R.iter_batches(payload):
        n += len(R.decode_batch(payload, pos, check_crc=False)[1])
    return n


def kafka_python(payload):
    from kafka.record.memory_records import MemoryRecords
    n = 0
    recs = MemoryRecords(payload)
    while recs.has_next():
        batch = recs.next_batch()
        for r in batch:
            r.offset, r.key, r.value  # touch the fields a consumer reads
            n += 1
    return n


def aiokafka_c(payload):
    from aiokafka.record.memory_records import MemoryRecords
    n = 0
    recs = MemoryRecords(payload)
    while recs.has_next():
        for r in recs.next_batch():
            r.offset, r.key, r.value
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer batches and repeats")
    args = ap.parse_args()
    batches, repeat = (5, 3) if args.quick else (20, 7)
    n = batches * 1000
    print(f"{n} records of 100-byte values in {batches} batches of 1000; best of {repeat} runs")
    print(f"{'decoder':46s} {'none':>14s} {'lz4':>14s}")
    payloads = {codec: make_payload(codec, batches) for codec in (0, 3)}
    impls = [("python", False)] + ([("C ext", True)] if R.HAVE_EXTENSION else [])
    rows = []
    for label, fn in (("iter_records", kohort_fast), ("iter_records check_crc=True", kohort_fast_crc),
                      ("decode_records_list", kohort_list), ("decode_columns", kohort_columns)):
        for impl, flag in impls:
            rows.append((f"kohort {label} [{impl}]", fn, flag))
    rows += [
        ("kohort decode_batch (Record objects)", kohort_objects, None),
        ("kafka-python 3.0.12 MemoryRecords", kafka_python, None),
    ]
    try:
        import aiokafka.record._crecords  # noqa: F401  (Cython decoder, for scale only)
        rows.append(("aiokafka (Cython decoder, reference)", aiokafka_c, None))
    except ImportError:
        pass
    if not R.HAVE_EXTENSION:
        print("(kohort's C extension is not built: Python rows only)")
    default = R.extension_enabled()
    for name, fn, flag in rows:
        R.use_extension(default if flag is None else flag)
        try:
            gc.collect()                   # no garbage of the previous row left to the next one
            for c in (0, 3):
                fn(payloads[c])            # warm-up, untimed
            rates = [best_rate(lambda: fn(payloads[c]), n, repeat) for c in (0, 3)]
        finally:
            R.use_extension(default)
        print(f"{name:46s} {rates[0]:>10,.0f} r/s {rates[1]:>10,.0f} r/s")

    data = os.urandom(16 << 20)
    mv = memoryview(data)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        crc32c(mv)
        best = min(best, time.perf_counter() - t)
    print(f"CRC-32C (crc32c package, 16 MiB buffer): {len(data) / best / 1e6:,.0f} MB/s")
    if R.HAVE_EXTENSION:
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            R._ext.crc32c(mv)
            best = min(best, time.perf_counter() - t)
        kind = "SSE4.2" if R._ext.HW_CRC32C else "table"
        print(f"CRC-32C (kohort C extension, {kind}, 16 MiB buffer): {len(data) / best / 1e6:,.0f} MB/s")
    batch = payloads[0][:R.read_batch_header(payloads[0]).total_size]
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(1000):
            R.validate_batch(batch)
        best = min(best, time.perf_counter() - t)
    print(f"validate_batch on a {len(batch):,}-byte batch: {1000 / best:,.0f} batches/s "
          f"({len(batch) * 1000 / best / 1e6:,.0f} MB/s)")


if __name__ == "__main__":
    main()
