"""Broker: produce then consume with confluent-kafka (librdkafka) clients, kohort broker vs Tansu.

The worker calls bench/bench_broker.py's `run_one(port, n, size, partitions)` (acks=all, idempotent,
linger 5 ms, batch.size 1 MB, then an assign()-from-0 consumer) in its own process and reports
produce, consume (steady state: first record to last, as bench_broker measures it) and end-to-end
(n / (produce + consumer start-up + consume time)) records/s. Columns: the run's kohort
broker (default log.flush.policy=fsync-before-ack), a second kohort broker with log.flush.policy=os
(no fsync before acks, like Kafka's default), and Tansu (memory storage).
"""
from __future__ import annotations

from cases.common import KOHORT_BROKER, TANSU
from cases.consumer import size_label

KOHORT_OS = "kohort broker (flush=os)"
_extra = []


def end_to_end(port: int, n: int, size: int, partitions: int) -> dict:
    import bench_broker
    got = bench_broker.run_one(port, n, size, partitions)
    ps, cs = got[0], got[1]
    startup = got[2] if len(got) > 2 else 0.0     # consumer start-up, timed apart since f721146
    total = ps + cs + startup
    return {"value": n / total, "rows": {"produce": n / ps, "consume": n / cs, "end-to-end": n / total},
            "produce_s": ps, "consume_s": cs, "consumer_startup_s": startup}


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    sizes = {100: 100_000} if quick else {100: 300_000, 1024: 50_000}
    brokers = dict(env.brokers.addr)
    errors = dict(env.brokers.errors)
    try:
        from tests.brokers import KohortBroker
        b = KohortBroker(config={"log.flush.policy": "os"})
        b.__enter__()
        _extra.append(b)
        brokers[KOHORT_OS] = b.bootstrap
    except Exception as e:
        errors[KOHORT_OS] = f"{type(e).__name__}: {e}"
    sec = Section("broker", "broker, confluent-kafka clients", "records/s", ours=KOHORT_BROKER,
                  peers=[TANSU],
                  notes=["bench_broker.run_one: acks=all idempotent producer (linger 5 ms, batch.size 1 MB), "
                         "then an assign()-from-0 consumer (consume: first record to last); end-to-end = n / (produce + consumer "
                         "start-up + consume time). "
                         "Ratio: the default kohort broker vs Tansu."])
    jobs = []
    for size, n in sizes.items():
        for name in (KOHORT_BROKER, KOHORT_OS, TANSU):
            addr = brokers.get(name)
            port = int(addr.rsplit(":", 1)[1]) if addr else 0
            before = None
            if addr is None:
                msg = errors.get(name, "broker not running")

                def before(job, round_no, msg=msg):
                    raise RuntimeError(msg)
            jobs.append(Job("broker", f"{size_label(size)} × {n:,}", name, "cases.broker:end_to_end",
                            {"port": port, "n": n, "size": size, "partitions": 1}, timeout=240,
                            subrows=["produce", "consume", "end-to-end"], before=before))
    return [sec], jobs


def finish(env) -> None:
    while _extra:
        _extra.pop().__exit__(None, None, None)
