"""asyncio clients: kohort.aio beside aiokafka, confluent_kafka.aio and kohort's threaded consumer, on
kohort broker and on Apache Kafka 4.3.1, plus the event loop's stall while each asyncio client works.

The client functions are bench/bench_aio.py's (one per client, each run here in a fresh process):
producers send per record (`await send()` / `await produce()`) to a fresh 1-partition topic, then flush;
consumers read a seeded topic from offset 0 by explicit assignment, every value touched. Beside every
asyncio client a ticker task sleeps 1 ms in a loop; the stall rows give the p99 and the worst of the
ticker's lateness (wall clock: what the client held the loop for, plus whatever else the machine ran).

Sections: "aio_consumer" (kohort.aio vs aiokafka vs kohort's sync Consumer), "aio_producer" (kohort.aio vs
confluent_kafka.aio.AIOProducer vs aiokafka), "aio_stall" (ms, lower is better: kohort.aio vs aiokafka,
rows per broker, size and direction, sub-rows p99 / max).
"""
from __future__ import annotations

import itertools

from cases.common import KAFKA, KOHORT_BROKER, create_topic, seed, values
from cases.consumer import size_label

_seq = itertools.count()
OURS = "kohort.aio"
CONSUMERS = {OURS: "kohort-aio", "aiokafka": "aiokafka", "kohort sync": "kohort-sync"}
PRODUCERS = {OURS: "kohort-aio", "confluent_kafka.aio": "confluent-aio", "aiokafka": "aiokafka"}
TIMEOUT_S = 180.0


def _stall(tk) -> dict:
    import statistics
    late = tk.late or [0.0]
    p99 = statistics.quantiles(late, n=100, method="inclusive")[98] if len(late) > 1 else late[0]
    return {"p99": p99, "max": max(late)}


def consume(client: str, addr: str, topic: str, n: int, size: int) -> dict:
    import asyncio

    import bench_aio
    fn = bench_aio.CONSUMERS[CONSUMERS[client]]
    if asyncio.iscoroutinefunction(fn):
        rate, tk = asyncio.run(fn(addr, topic, n))
    else:
        rate, tk = fn(addr, topic, n)
    out = {"value": rate, "records": n, "mb_per_s": rate * size / 1e6}
    if tk is not None:
        out["stall_ms"] = _stall(tk)
    return out


def produce(client: str, addr: str, topic: str, n: int, size: int) -> dict:
    import asyncio

    import bench_aio
    rate, tk = asyncio.run(bench_aio.PRODUCERS[PRODUCERS[client]](addr, topic, n, values(size, 1)[0]))
    return {"value": rate, "records": n, "mb_per_s": rate * size / 1e6, "stall_ms": _stall(tk)}


def stall(direction: str, client: str, addr: str, topic: str, n: int, size: int) -> dict:
    """One run of the client (as consume()/produce()); value = the ticker's worst lateness, rows p99/max."""
    r = consume(client, addr, topic, n, size) if direction == "consume" else produce(client, addr, topic, n, size)
    s = r["stall_ms"]
    return {"value": s["max"], "rows": s, "records_per_s": r["value"]}


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    sizes = {100: 100_000} if quick else {100: 1_000_000, 1024: 200_000}
    env.brokers.kafka()
    cons = Section("aio_consumer", "asyncio consumer throughput", "records/s", ours=OURS,
                   notes=["bench_aio.py's consumers in fresh processes: assign() of the seeded 1-partition "
                          "topic, read from offset 0 with getmany(timeout_ms=1000) (kohort sync: poll(1.0), "
                          "max.poll.records 10000), every value touched; each client at its defaults "
                          "otherwise. Ratio: kohort.aio / the best other column."])
    prod = Section("aio_producer", "asyncio producer throughput", "records/s", ours=OURS,
                   notes=["`await send()` per record (confluent_kafka.aio: `await produce()`), then flush, "
                          "to a fresh 1-partition topic; kohort.aio at its defaults, aiokafka with "
                          "linger_ms=5 and max_batch_size 256 KiB, confluent_kafka.aio with linger.ms=5."])
    st = Section("aio_stall", "event loop stall (1 ms ticker)", "ms",
                 higher_is_better=False, ours=OURS, peers=["aiokafka"],
                 notes=["A task sleeping 1 ms in a loop next to the client; its lateness (wall clock) p99 "
                        "and worst over a run of the client as in the throughput rows above (a run of its own, "
                        "same size and broker). On a busy machine the lateness also counts other processes' "
                        "time slices."])
    jobs = []
    for broker in (KOHORT_BROKER, KAFKA):
        addr = env.brokers.addr.get(broker)
        for size, n in sizes.items():
            row = f"{broker} · {size_label(size)} × {n:,}"
            topic = f"aio-cons-{size}-{n}"
            setup_err = env.brokers.errors.get(broker)
            if addr is not None:
                try:
                    seed(addr, topic, n, size)
                except Exception as e:
                    setup_err = f"seeding: {type(e).__name__}: {e}"
            elif setup_err is None:
                setup_err = "broker not running"
            for client in CONSUMERS:
                jobs.append(Job("aio_consumer", row, client, "cases.aio:consume",
                                {"client": client, "addr": addr, "topic": topic, "n": n, "size": size},
                                timeout=TIMEOUT_S, profile=client in profile, before=_fail(setup_err)))
            for client in PRODUCERS:
                jobs.append(Job("aio_producer", row, client, "cases.aio:produce",
                                {"client": client, "addr": addr, "topic": None, "n": n, "size": size},
                                timeout=TIMEOUT_S, profile=client in profile,
                                before=_fresh_topic(addr, broker, env)))
            srow = f"{broker} · {size_label(size)}"
            for client in (OURS, "aiokafka"):
                jobs.append(Job("aio_stall", f"{srow} · consume", client, "cases.aio:stall",
                                {"direction": "consume", "client": client, "addr": addr, "topic": topic,
                                 "n": n, "size": size},
                                timeout=TIMEOUT_S, subrows=["p99", "max"], before=_fail(setup_err)))
                jobs.append(Job("aio_stall", f"{srow} · produce", client, "cases.aio:stall",
                                {"direction": "produce", "client": client, "addr": addr, "topic": None,
                                 "n": n, "size": size},
                                timeout=TIMEOUT_S, subrows=["p99", "max"], before=_fresh_topic(addr, broker, env)))
    return [cons, prod, st], jobs


def _fail(err):
    if err is None:
        return None

    def before(job, round_no):
        raise RuntimeError(err)
    return before


def _fresh_topic(addr, broker, env):
    def before(job, round_no):
        if addr is None:
            raise RuntimeError(env.brokers.errors.get(broker, "broker not running"))
        topic = f"aio-prod-{next(_seq)}"
        create_topic(addr, topic, 1)
        return {"topic": topic}
    return before
