"""What sealing a compressed producer batch costs the thread that produces: the Python path
(records.write_batch_buffer: compress, header, CRC on the calling thread) against the native
sealer (the compiled twin's NativeSealer: the calling thread only submits and collects; the
compression runs on the sealer's own thread without the GIL). CPU of the calling thread
(time.thread_time) per 1 MB batch of the bench's values, for lz4 and zstd.

    .venv/bin/python bench/bench_sealer.py [--batches 40]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))


def main(argv=None) -> int:
    from bench.cases.common import values
    from kohort.client.sealer import native_sealer
    from kohort.protocol import records as R
    from kohort.protocol.compression import COMPRESSION_LZ4, COMPRESSION_ZSTD
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40)
    k = ap.parse_args(argv).batches
    for size in (1024, 16384):
        value = values(size, 1)[0]
        buf, n = bytearray(), 0
        while len(buf) < 1_000_000:
            R.append_record(buf, n, 0, None, value, None)
            n += 1
        for codec, name in ((COMPRESSION_LZ4, "lz4"), (COMPRESSION_ZSTD, "zstd")):
            t = time.thread_time()
            for _ in range(k):
                R.write_batch_buffer(buf, n, 1, 1, compression=codec, producer_id=1, producer_epoch=0,
                                     base_sequence=0)
            py = (time.thread_time() - t) / k
            sealer = native_sealer(codec)
            if sealer is None:
                print(f"{name}: no native sealer here (see the producer's DEBUG log)")
                continue
            t = time.thread_time()
            for i in range(k):
                sealer.submit(i, buf, n, 1, 1, 0, 1, 0, 0)
            got: list = []
            while len(got) < k:
                got += sealer.collect()
                time.sleep(0.0005)
            native = (time.thread_time() - t) / k
            sealer.close()
            print(f"{size:>5} B records, 1 MB batches, {name:4s}: calling thread per batch: Python path "
                  f"{py * 1e3:.3f} ms, native sealer {native * 1e3:.3f} ms (submit + collect)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
