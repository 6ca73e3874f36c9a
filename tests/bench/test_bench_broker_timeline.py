"""bench_broker.java_timeline: Apache Kafka's Java producer and consumer (bench/java/ProduceBench,
ConsumeBench) against a real kohort broker with their NetworkClient at DEBUG, and what the parser
reads from that log (request counts, bytes, times, requests in flight, the broker's CPU)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
import bench_broker  # noqa: E402
import pytest  # noqa: E402


# two JVM runs for a bench tool: the slow suite; test_java_requests_pairs_sends_with_answers is its
# default-suite twin (the parser on NetworkClient's own lines)
@pytest.mark.slow
def test_java_timeline_on_kohort_broker():
    proc, port = bench_broker.start_kohort("os")
    try:
        n, size, batch = 3000, 1024, 200_000
        st = bench_broker.java_timeline(port, n, size, 1, proc.pid, batch_size=batch)
    finally:
        bench_broker._stop(proc)
    pr, fe = st["produce"], st["fetch"]
    # 3,000 KiB in batches of at most 200 kB: several Produce requests, each carrying records
    assert pr["requests"] >= n * size // batch
    assert size < pr["bytes"] <= batch
    assert pr["rtt_ms"] > 0 and pr["in_flight"] >= 1
    # the consumer's Fetch answers with records: whole batches, within max.partition.fetch.bytes
    assert fe["answers"] >= 1
    assert size < fe["bytes"] <= 1 << 20
    assert fe["rtt_ms"] > 0
    assert pr["broker_cpu_s"] >= 0 and fe["broker_cpu_s"] >= 0


def test_java_requests_pairs_sends_with_answers(tmp_path):
    """The parser on NetworkClient's own line shapes (Kafka 4.3.1): answers paired by correlation id,
    Produce bytes from partitionSizes, Fetch bytes from the answer's MemoryRecords, other APIs ignored."""
    log = tmp_path / "nc.log"
    hdr = "RequestHeader(apiKey={api}, apiVersion=12, clientId=c, correlationId={c}, headerVersion=2)"
    log.write_text("\n".join([
        f"10:00:00.000000 [Producer clientId=c] Sending PRODUCE request with header {hdr.format(api='PRODUCE', c=4)} "
        "and timeout 30000 to node 0: {acks=-1,timeout=30000,partitionSizes=[id:t-0=1000, id:t-1=24]}",
        f"10:00:00.001000 [Producer clientId=c] Sending PRODUCE request with header {hdr.format(api='PRODUCE', c=5)} "
        "and timeout 30000 to node 0: {acks=-1,timeout=30000,partitionSizes=[id:t-0=500]}",
        f"10:00:00.001500 [Producer clientId=c] Sending METADATA request with header {hdr.format(api='METADATA', c=6)}",
        f"10:00:00.002500 [Producer clientId=c] Received PRODUCE response from node 0 for request with header "
        f"{hdr.format(api='PRODUCE', c=4)}: ProduceResponseData(responses=[])",
        f"10:00:00.004000 [Producer clientId=c] Received PRODUCE response from node 0 for request with header "
        f"{hdr.format(api='PRODUCE', c=5)}: ProduceResponseData(responses=[])",
        f"10:00:01.000000 [Consumer clientId=c] Sending FETCH request with header {hdr.format(api='FETCH', c=7)} "
        "and timeout 30000 to node 0: FetchRequestData(maxBytes=52428800)",
        f"10:00:01.003000 [Consumer clientId=c] Received FETCH response from node 0 for request with header "
        f"{hdr.format(api='FETCH', c=7)}: FetchResponseData(responses=[PartitionData(records=MemoryRecords(size=999, "
        "buffer=x)), PartitionData(records=MemoryRecords(size=1, buffer=y))])",
    ]) + "\n")
    prod = bench_broker._java_requests(str(log), "PRODUCE")
    assert [(round(t1 - t0, 3), b) for t0, t1, b, _ in prod] == [(2.5, 1024), (3.0, 500)]
    fetch = bench_broker._java_requests(str(log), "FETCH")
    assert [(round(t1 - t0, 3), b) for t0, t1, b, _ in fetch] == [(3.0, 1000)]
