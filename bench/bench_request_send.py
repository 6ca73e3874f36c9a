"""CPU on the sending thread per Produce request: encoding plus the socket writes, copied or gathered.

Builds one Produce request holding `--partitions` record batches of `--size` bytes in all (1 MB by
default, 1 KiB records, uncompressed), then sends it `--requests` times over a loopback TCP
connection whose peer only drains, the way NetworkClient writes on a non-blocking socket: either

* copy: `ClientProtocol.send_request` (the batches copied into one request buffer) and send() of
  the rest after each partial write, or
* gather: `ClientProtocol.send_request_buffers` (the batches by reference) and sendmsg() of the
  buffers left, cut as NetworkClient cuts them (its own `_drop_written`).

Prints the sending thread's CPU time (time.thread_time: waits for the socket are not counted) per
request, median of `--rounds` interleaved rounds. Run:
    .venv/bin/python bench/bench_request_send.py [--size 1000000] [--partitions 1] [--requests 200]
"""
from __future__ import annotations

import argparse
import os
import select
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from kohort.client.network import _drop_written  # noqa: E402
from kohort.protocol.framing import ClientProtocol  # noqa: E402
from kohort.protocol.messages.produce import ProduceRequest  # noqa: E402
from kohort.protocol.records import BatchBuilder  # noqa: E402


def make_request(total: int, partitions: int, record: int = 1024) -> ProduceRequest:
    PD = ProduceRequest.TopicProduceData
    PPD = PD.PartitionProduceData
    value = os.urandom(record)
    parts = []
    for p in range(partitions):
        b = BatchBuilder(base_offset=0)
        for i in range(max(1, total // partitions // (record + 10))):
            b.append(None, value, None, 1_700_000_000_000 + i)
        parts.append(PPD(index=p, records=b.build()))
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000,
                          topic_data=[PD(name="bench", partition_data=parts)])


def drain(sock: socket.socket) -> None:
    buf = bytearray(1 << 20)
    while sock.recv_into(buf):
        pass


def send_copy(sock: socket.socket, proto: ClientProtocol, req) -> None:
    _, data = proto.send_request(req, 9, expect_response=False)
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view):]
        except BlockingIOError:
            select.select([], [sock], [])


def send_gather(sock: socket.socket, proto: ClientProtocol, req) -> None:
    _, out = proto.send_request_buffers(req, 9, expect_response=False)
    while out:
        try:
            n = sock.sendmsg(out)
            if len(out) == 1 and n == len(out[0]):
                out.clear()
            else:
                _drop_written(out, n)
        except BlockingIOError:
            select.select([], [sock], [])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1_000_000, help="record bytes per request")
    ap.add_argument("--partitions", type=int, default=1, help="batches per request")
    ap.add_argument("--requests", type=int, default=200, help="requests per round and mode")
    ap.add_argument("--rounds", type=int, default=5)
    opts = ap.parse_args(argv)
    req = make_request(opts.size, opts.partitions)
    srv = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(srv.getsockname())
    b, _ = srv.accept()
    srv.close()
    t = threading.Thread(target=drain, args=(b,), daemon=True)
    t.start()
    a.setblocking(False)
    proto = ClientProtocol()
    size = sum(map(len, proto.send_request_buffers(req, 9, expect_response=False)[1]))
    modes = {"copy": send_copy, "gather": send_gather}
    res: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(opts.rounds):
        for name, fn in modes.items():
            c0 = time.thread_time()
            for _ in range(opts.requests):
                fn(a, proto, req)
            res[name].append((time.thread_time() - c0) / opts.requests * 1e6)
    a.close()
    t.join(5)
    b.close()
    print(f"Produce v9 request of {size:,} bytes ({opts.partitions} batch(es)), {opts.requests} requests x "
          f"{opts.rounds} rounds, sending thread's CPU per request (median):")
    med = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
    for k, v in med.items():
        print(f"  {k:7s} {v:8.1f} us   (rounds: {', '.join(f'{x:.0f}' for x in res[k])})")
    print(f"  gather/copy x{med['gather'] / med['copy']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
