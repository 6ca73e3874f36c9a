"""`kohort demo`: the whole system in about a minute and a half, on this machine only.

    kohort demo [--seconds N] [--rate EVENTS_PER_S] [--keep DIR]

1. starts the embedded broker (`kohort broker` as a subprocess on a free port, temp data dir) and
   waits for its ready line;
2. creates the topic `events` (3 partitions);
3. starts the Spark pipeline (kohort source -> 10 s windows per user with a watermark -> Parquet,
   committing finished batches to the group `kohort-demo`), and once it runs produces sample JSON
   click events for --seconds, printing rows/s and the group's lag;
4. after --seconds of producing, waits for the group lag to fall to zero, prints the aggregates read back from
   Parquet and `kohort groups lag kohort-demo`, and stops everything it started.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from kohort.cli.common import positive_int, positive_number
from kohort.errors import KohortError

READY = "kohort broker ready on "
TOPIC = "events"
GROUP = "kohort-demo"
USERS = ["ada", "grace", "linus", "barbara", "ken"]
ACTIONS = ["view", "click", "cart", "buy"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class BrokerProcess:
    """`kohort broker` in a subprocess; `start()` waits for the ready line."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kohort.cli.main", "broker", "--listen", self.bootstrap,
             "--data-dir", self.data_dir, "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        ready = threading.Event()

        def pump(proc=self.proc):
            for line in proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if line.startswith(READY):
                    ready.set()
        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise KohortError("the embedded broker did not start:\n  " + "\n  ".join(self.lines[-20:]))

    def stop(self) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


class EventProducer(threading.Thread):
    """Produces JSON events at about `rate` per second for `seconds` (counted from its first
    event), or until stopped; `finished` is set once the last event is flushed."""

    def __init__(self, bootstrap: str, rate: int, seconds: float | None = None):
        super().__init__(daemon=True, name="demo-producer")
        self.bootstrap, self.rate, self.seconds = bootstrap, rate, seconds
        self.sent = 0
        self.error: Exception | None = None
        self._halt = threading.Event()
        self.finished = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        from kohort.client.producer import Producer
        rnd = random.Random(7)
        try:
            with Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                           "client.id": "kohort-demo-producer"}) as p:
                tick = 0.1
                per_tick = max(1, int(self.rate * tick))
                next_t = time.monotonic()
                end = None if self.seconds is None else next_t + self.seconds
                while not self._halt.is_set() and (end is None or time.monotonic() < end):
                    now = time.time()
                    for _ in range(per_tick):
                        user = rnd.choice(USERS)
                        ev = {"user": user, "action": rnd.choice(ACTIONS),
                              "amount": round(rnd.uniform(1, 100), 2),
                              "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
                              + f".{int(now * 1000) % 1000:03d}Z"}
                        p.produce(TOPIC, json.dumps(ev).encode(), key=user.encode())
                    self.sent += per_tick
                    next_t += tick
                    self._halt.wait(max(0.0, next_t - time.monotonic()))
                p.flush(30)
        except Exception as e:   # noqa: BLE001 - reported by the demo
            self.error = e
        finally:
            self.finished.set()


def group_lag(cluster, group: str, tps) -> int | None:
    """Log end minus the group's committed offset, summed; None if the broker cannot tell."""
    try:
        committed = cluster.committed_offsets(group, tps)
        ends = cluster.offset_bounds(tps)
    except Exception:   # noqa: BLE001 - progress display only
        return None
    return sum(max(ends[tp][1] - committed.get(tp, 0), 0) for tp in tps if tp in ends)


def pipeline_lag(cluster, progress, tps) -> int | None:
    """Log end minus the end offsets of the last finished micro-batch (from the query's progress)."""
    if not progress:
        return None
    try:
        ends = cluster.offset_bounds(tps)
    except Exception:   # noqa: BLE001 - progress display only
        return None
    done = {}
    for s in progress.get("sources") or []:
        end = s.get("endOffset")
        if isinstance(end, dict):
            for t, parts in (end.get("offsets") or {}).items():
                for p, o in parts.items():
                    done[(t, int(p))] = int(o)
    return sum(max(ends[tp][1] - done.get(tp, 0), 0) for tp in tps if tp in ends)


def run(args) -> int:
    from kohort.spark.pipeline import PipelineConfig, build_session, progress_dict, source_lag, start_queries
    from kohort.spark.wire import Cluster
    t_start = time.monotonic()
    work = args.keep or tempfile.mkdtemp(prefix="kohort-demo-")
    os.makedirs(work, exist_ok=True)
    broker = BrokerProcess(os.path.join(work, "broker-data"))
    producer = None
    spark = None
    queries = []
    cluster = None
    try:
        say(f"starting the embedded broker (data in {broker.data_dir})")
        broker.start()
        say(f"broker ready on {broker.bootstrap}")
        cluster = Cluster({"bootstrap.servers": broker.bootstrap, "client.id": "kohort-demo"})
        cluster.create_topics({TOPIC: 3})
        tps = [(TOPIC, p) for p in range(3)]
        cfg = PipelineConfig(
            bootstrap_servers=broker.bootstrap, topic=TOPIC,
            fields={"user": "string", "action": "string", "amount": "double", "ts": "timestamp"},
            event_time="ts", key="user", window="10 seconds", watermark="2 seconds",
            metrics=["count", "sum(amount)", "avg(amount)"], group_id=GROUP,
            max_offsets_per_trigger=max(10 * args.rate, 1000), path=os.path.join(work, "aggregates"),
            checkpoint=os.path.join(work, "checkpoint"), trigger="2 seconds")
        cfg.validate()
        say("starting Spark (local[2]) and the pipeline: kohort source -> 10 s windows per user -> Parquet")
        spark = build_session(cfg)
        queries = start_queries(spark, cfg)
        q = queries[0]
        say(f"pipeline running; offsets of finished batches are committed to group '{GROUP}'")
        # the events start once Spark is up (its start takes 10-20 s): --seconds is the time
        # spent producing, not Spark's start-up plus that
        producer = EventProducer(broker.bootstrap, args.rate, args.seconds)
        producer.start()
        say(f"producing ~{args.rate} JSON events/s to '{TOPIC}' (3 partitions) for {args.seconds:g} s, e.g. "
            '{"user": "ada", "action": "click", "amount": 42.5, "ts": "..."}')
        last_batch = None
        stopped_producing = False
        lag_zero_since = None
        catch_up_deadline = None
        while True:
            if not q.isActive:
                exc = q.exception()
                raise KohortError(f"the pipeline stopped: {exc}")
            if producer.error is not None:
                raise KohortError(f"the sample producer failed: {producer.error}")
            p = progress_dict(q.lastProgress)
            if p is not None and p.get("batchId") != last_batch:
                last_batch = p.get("batchId")
                lag = group_lag(cluster, GROUP, tps)
                say(f"batch {last_batch:>3}: {p.get('numInputRows', 0):>5} rows, "
                    f"{(p.get('processedRowsPerSecond') or 0):>8,.0f} rows/s | produced {producer.sent:>6} | "
                    f"source lag {source_lag(p)} | group lag {lag if lag is not None else '?'}")
            now = time.monotonic()
            if not stopped_producing and producer.finished.is_set():
                producer.join(30)
                stopped_producing = True
                catch_up_deadline = now + 60
                say(f"stopped producing after {producer.sent} events; waiting for the group lag to reach 0")
            if stopped_producing:
                lag = group_lag(cluster, GROUP, tps)
                if lag is None:          # the broker keeps no group offsets: use the query's own progress
                    lag = pipeline_lag(cluster, progress_dict(q.lastProgress), tps)
                if lag == 0:
                    lag_zero_since = lag_zero_since or now
                    if now - lag_zero_since >= 2:
                        say("lag is 0: every produced event was processed (and committed to the group)")
                        break
                elif now > catch_up_deadline:
                    say(f"the group lag is still {lag} after 60 s; stopping anyway")
                    break
            time.sleep(1.0)
        for qq in queries:
            qq.stop()
        queries = []
        _print_aggregates(spark, cfg.path)
        _print_group_lag(broker.bootstrap)
        say(f"done in {time.monotonic() - t_start:.0f} s")
        return 0
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        if producer is not None:
            producer.stop()
        for qq in queries:
            try:
                qq.stop()
            except Exception:   # noqa: BLE001
                pass
        if spark is not None:
            spark.stop()
        if cluster is not None:
            cluster.close()
        broker.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"kept the broker data, checkpoint and Parquet output in {work}")


def _print_aggregates(spark, path: str) -> None:
    from pyspark.sql import functions as F
    try:
        df = spark.read.parquet(path)
    except Exception:   # noqa: BLE001 - no window finished yet
        say("no window has closed yet (the watermark holds the last ones back)")
        return
    n = df.count()
    say(f"{n} closed (user, 10 s window) aggregates in Parquet at {path}; the latest windows:")
    rows = (df.orderBy(F.col("window_start").desc(), F.col("user")).limit(10)
            .select("window_start", "user", "count", "sum_amount", "avg_amount").collect())
    print(f"  {'WINDOW-START':<20} {'USER':<8} {'COUNT':>6} {'SUM':>10} {'AVG':>7}")
    for r in rows:
        print(f"  {r.window_start.strftime('%Y-%m-%d %H:%M:%S'):<20} {r.user:<8} {r['count']:>6} "
              f"{r.sum_amount:>10.2f} {r.avg_amount:>7.2f}")
    total = df.agg(F.sum("count")).first()[0]
    say(f"events counted in closed windows: {total}")


def _print_group_lag(bootstrap: str) -> None:
    say(f"kohort groups lag {GROUP}:")
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "groups", "lag", GROUP, "-b", bootstrap],
                       capture_output=True, text=True, timeout=60)
    out = (r.stdout or "") + (r.stderr or "")
    for line in out.strip().splitlines():
        print("  " + line)


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="embedded broker + sample events + the Spark pipeline (~1.5 min)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=positive_number, default=40.0, help="how long to produce events (default 40)")
    p.add_argument("--rate", type=positive_int, default=300, help="events per second to produce (default 300)")
    p.add_argument("--keep", metavar="DIR", default=None,
                   help="keep broker data, checkpoint and Parquet output in DIR (default: a temp dir, removed)")
    from kohort.cli.common import add_log_level
    add_log_level(p)
    p.set_defaults(func=run)
