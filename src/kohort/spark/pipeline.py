"""The ready pipeline: JSON events from a topic -> windowed aggregates per key -> Parquet (+ a topic).

    cfg = load_pipeline_config("pipeline.toml")        # or PipelineConfig.from_dict({...})
    spark = build_session(cfg, master=None)
    queries = start_queries(spark, cfg)
    run(cfg) / watch(queries, ...)                       # progress lines: rows/s and lag

TOML layout (see examples/pipeline.toml):

    [source]     bootstrap_servers, topic, starting_offsets ("earliest"), group_id (commits so lag
                 tools see the pipeline), max_offsets_per_trigger, options = {any kohort option}
    [events]     fields = {name = "spark type"}, event_time = "<field>" or "kafka_timestamp"
    [aggregate]  key, window ("10 seconds"), slide (optional), watermark ("5 seconds"),
                 metrics = ["count", "sum(amount)", "avg(amount)", "max(amount)", "min(amount)"]
                 mode = "windowed" (default) | "raw" (no aggregation: every record's key, value,
                 partition, offset -- the exactly-once check uses it)
    [sink]       path, checkpoint, trigger ("2 seconds"), results_topic (optional),
                 dead_letter_topic (optional: malformed events are written there as they came)
    [spark]      master ("local[2]"), conf = {...}, ship_kohort (default: unless the workers run
                 this interpreter; false where kohort is installed on the workers -- see
                 kohort.spark.register)

Output rows: window_start, window_end, <key>, then one column per metric (`count`, `sum_amount`, ...).

Parquet is written in append mode, so a window appears once the watermark passes its end; the
checkpoint keeps source offsets and aggregation state, so a killed driver restarts where it left off
and the Parquet output holds each window exactly once.

Malformed events (windowed mode) -- a value that is not a JSON object of the declared field types,
or has no event time -- are left out of the aggregates and counted: each micro-batch's progress
carries the observed metrics `kohort_pipeline` = {events, malformed}, the progress line shows them
and `run` ends with the totals. With [sink] dead_letter_topic a third query writes each malformed
record's key and value unchanged to that topic, with headers `kohort.error` (why) and
`kohort.source` (topic-partition@offset).
"""
from __future__ import annotations

import difflib
import os
import re
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass, field

from kohort.errors import ConfigError

_SPARK_TYPES = {"string", "int", "integer", "bigint", "long", "double", "float", "boolean",
                "timestamp", "date", "binary", "short", "smallint", "tinyint", "byte"}
_METRIC = re.compile(r"^(count|(sum|avg|min|max)\((\w+)\))$")
_INTERVAL = re.compile(r"^\d+\s+(millisecond|second|minute|hour|day)s?$")


@dataclass
class PipelineConfig:
    bootstrap_servers: str
    topic: str
    fields: dict
    path: str
    checkpoint: str
    event_time: str = "kafka_timestamp"
    key: str | None = None
    window: str = "10 seconds"
    slide: str | None = None
    watermark: str = "10 seconds"
    metrics: list = field(default_factory=lambda: ["count"])
    mode: str = "windowed"
    starting_offsets: str = "earliest"
    group_id: str | None = "kohort-pipeline"
    max_offsets_per_trigger: int | None = None
    source_options: dict = field(default_factory=dict)
    trigger: str = "2 seconds"
    results_topic: str | None = None
    dead_letter_topic: str | None = None
    master: str = "local[2]"
    spark_conf: dict = field(default_factory=dict)
    ship_kohort: bool | None = None

    @classmethod
    def from_dict(cls, d: dict, base_dir: str = ".") -> "PipelineConfig":
        known = {"source", "events", "aggregate", "sink", "spark"}
        extra = set(d) - known
        if extra:
            raise ConfigError(f"pipeline config: unknown section(s) {', '.join(sorted(extra))}; "
                              f"sections are {', '.join(sorted(known))}")
        src, ev, agg, sink, sp = (dict(d.get(k) or {}) for k in ("source", "events", "aggregate", "sink", "spark"))

        asked: dict[str, list[str]] = {}          # the keys each section may have

        def take(sec: dict, name: str, key: str, default=..., typ=str):
            asked.setdefault(name, []).append(key)
            if key in sec:
                v = sec.pop(key)
                if typ is int and not isinstance(v, int):
                    raise ConfigError(f"pipeline config: [{name}] {key} must be an integer")
                if typ is str and v is not None and not isinstance(v, str):
                    raise ConfigError(f"pipeline config: [{name}] {key} must be a string")
                if typ is dict and not isinstance(v, dict):
                    raise ConfigError(f"pipeline config: [{name}] {key} must be a table")
                if typ is list and not isinstance(v, list):
                    raise ConfigError(f"pipeline config: [{name}] {key} must be a list")
                if typ is bool and not isinstance(v, bool):
                    raise ConfigError(f"pipeline config: [{name}] {key} must be true or false")
                return v
            if default is ...:
                near = difflib.get_close_matches(key, [str(k) for k in sec], n=1)
                hint = f" (is {near[0]!r} a misspelling of it?)" if near else ""
                raise ConfigError(f"pipeline config: [{name}] {key} is required{hint}")
            return default

        def resolve(p: str) -> str:
            return p if os.path.isabs(p) or "://" in p else os.path.normpath(os.path.join(base_dir, p))

        cfg = cls(
            bootstrap_servers=take(src, "source", "bootstrap_servers", "127.0.0.1:9092"),
            topic=take(src, "source", "topic"),
            starting_offsets=take(src, "source", "starting_offsets", "earliest"),
            group_id=take(src, "source", "group_id", "kohort-pipeline"),
            max_offsets_per_trigger=take(src, "source", "max_offsets_per_trigger", None, int),
            source_options={str(k): str(v) for k, v in take(src, "source", "options", {}, dict).items()},
            fields=take(ev, "events", "fields", {}, dict),
            event_time=take(ev, "events", "event_time", "kafka_timestamp"),
            key=take(agg, "aggregate", "key", None),
            window=take(agg, "aggregate", "window", "10 seconds"),
            slide=take(agg, "aggregate", "slide", None),
            watermark=take(agg, "aggregate", "watermark", "10 seconds"),
            metrics=take(agg, "aggregate", "metrics", ["count"], list),
            mode=take(agg, "aggregate", "mode", "windowed"),
            path=resolve(take(sink, "sink", "path")),
            checkpoint=resolve(take(sink, "sink", "checkpoint")),
            trigger=take(sink, "sink", "trigger", "2 seconds"),
            results_topic=take(sink, "sink", "results_topic", None) or None,
            dead_letter_topic=take(sink, "sink", "dead_letter_topic", None) or None,
            master=take(sp, "spark", "master", "local[2]"),
            spark_conf={str(k): str(v) for k, v in take(sp, "spark", "conf", {}, dict).items()},
            ship_kohort=take(sp, "spark", "ship_kohort", None, bool),
        )
        for name, sec in (("source", src), ("events", ev), ("aggregate", agg), ("sink", sink), ("spark", sp)):
            if sec:
                unknown = []
                for k in sorted(map(str, sec)):
                    near = difflib.get_close_matches(k, asked[name], n=1)
                    unknown.append(f"{k} (did you mean {near[0]}?)" if near else k)
                raise ConfigError(f"pipeline config: unknown key(s) in [{name}]: {', '.join(unknown)}; "
                                  f"known: {', '.join(asked[name])}")
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.mode not in ("windowed", "raw"):
            raise ConfigError(f"pipeline config: [aggregate] mode must be windowed or raw, got {self.mode!r}")
        for name, typ in self.fields.items():
            if not isinstance(typ, str) or typ.lower() not in _SPARK_TYPES:
                raise ConfigError(f"pipeline config: [events] field {name!r} has unsupported type {typ!r} "
                                  f"(use one of {', '.join(sorted(_SPARK_TYPES))})")
        if self.dead_letter_topic and self.dead_letter_topic in (self.topic, self.results_topic):
            raise ConfigError(f"pipeline config: [sink] dead_letter_topic {self.dead_letter_topic!r} must differ "
                              "from the source topic and results_topic")
        if self.mode == "raw":
            if self.dead_letter_topic:
                raise ConfigError("pipeline config: [sink] dead_letter_topic needs [aggregate] mode = "
                                  "\"windowed\" (raw mode does not parse events, so none is malformed)")
            return
        if not self.fields:
            raise ConfigError("pipeline config: [events] fields must declare the JSON event schema")
        if self.key is not None and self.key not in self.fields:
            raise ConfigError(f"pipeline config: [aggregate] key {self.key!r} is not a declared field")
        if self.event_time != "kafka_timestamp":
            if self.event_time not in self.fields:
                raise ConfigError(f"pipeline config: [events] event_time {self.event_time!r} is not a declared "
                                  "field (or use kafka_timestamp)")
            if self.fields[self.event_time].lower() not in ("timestamp", "long", "bigint", "double"):
                raise ConfigError(f"pipeline config: event_time field {self.event_time!r} must be a timestamp "
                                  "(or epoch seconds as long/double)")
        for label, iv in (("window", self.window), ("watermark", self.watermark), ("slide", self.slide),
                          ("trigger", self.trigger)):
            if iv is not None and not _INTERVAL.match(iv.strip()):
                raise ConfigError(f"pipeline config: {label} must look like '10 seconds', got {iv!r}")
        if not self.metrics:
            raise ConfigError("pipeline config: [aggregate] metrics is empty")
        for m in self.metrics:
            mm = _METRIC.match(str(m).strip())
            if not mm:
                raise ConfigError(f"pipeline config: metric {m!r} must be count or sum/avg/min/max(<field>)")
            if mm.group(3) and mm.group(3) not in self.fields:
                raise ConfigError(f"pipeline config: metric {m!r} uses undeclared field {mm.group(3)!r}")


def load_pipeline_config(path: str, **overrides) -> PipelineConfig:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"pipeline config {path!r} not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"pipeline config {path!r} is not valid TOML: {e}") from None
    cfg = PipelineConfig.from_dict(data, base_dir=os.path.dirname(os.path.abspath(path)))
    for k, v in overrides.items():
        if v is not None:
            setattr(cfg, k, v)
    cfg.validate()
    return cfg


# -- Spark ------------------------------------------------------------------------------------------------
def build_session(cfg: PipelineConfig, master: str | None = None, app_name: str = "kohort-pipeline"):
    """A SparkSession for the pipeline with the kohort format registered. With a local master the
    Python workers use this interpreter unless PYSPARK_PYTHON says otherwise; on a cluster (--master
    spark://..., yarn, k8s://...) `kohort.spark.register` ships kohort to the executors, whose Python
    needs kohort's third-party packages (pyarrow, crc32c, lz4, cramjam)."""
    master = master or cfg.master
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))) and not shutil.which("java"):
        raise ConfigError("Spark needs a Java runtime (17 or newer): install one (e.g. openjdk-17-jre-headless) "
                          "or set JAVA_HOME")
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.appName(app_name).master(master)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.noDataMicroBatches.enabled", "true"))
    if "spark.driver.extraJavaOptions" not in cfg.spark_conf:
        b = b.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_quiet_log4j()}")
    for k, v in cfg.spark_conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    import kohort.spark
    kohort.spark.register(spark, ship=cfg.ship_kohort)
    return spark


_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_log4j() -> str:
    """A log4j2 config showing Spark's errors only (the pipeline prints its own progress)."""
    import tempfile
    path = os.path.join(tempfile.gettempdir(), "kohort-spark-log4j2.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(_LOG4J)
        os.replace(tmp, path)
    return path


def source_options(cfg: PipelineConfig, commit_group: bool = True) -> dict:
    opts = {"kafka.bootstrap.servers": cfg.bootstrap_servers, "subscribe": cfg.topic,
            "startingOffsets": cfg.starting_offsets}
    if cfg.max_offsets_per_trigger:
        opts["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
    if cfg.group_id and commit_group:
        opts["kafka.group.id"] = cfg.group_id
    opts.update(cfg.source_options)
    return opts


METRICS_NAME = "kohort_pipeline"          # the observed metrics of each micro-batch: events, malformed
_CORRUPT = "__kohort_corrupt_record__"


def parsed_events(spark, cfg: PipelineConfig, commit_group: bool = True):
    """The source records with each value parsed against [events] fields: columns `e` (the event),
    `kafka_timestamp`, the record's key, value, topic, partition, offset, and `malformed` (null, or
    why the event cannot be aggregated)."""
    from pyspark.sql import functions as F
    raw = spark.readStream.format("kohort").options(**source_options(cfg, commit_group)).load()
    ddl = ", ".join(f"`{n}` {t}" for n, t in cfg.fields.items()) + f", `{_CORRUPT}` string"
    parsed = raw.select(F.from_json(F.col("value").cast("string"), ddl,
                                    {"columnNameOfCorruptRecord": _CORRUPT, "mode": "PERMISSIVE"}).alias("e"),
                        F.col("timestamp").alias("kafka_timestamp"),
                        "key", "value", "topic", "partition", "offset")
    et = cfg.event_time
    if et == "kafka_timestamp":
        et_col = F.col("kafka_timestamp")
    elif cfg.fields[et].lower() == "timestamp":
        et_col = F.col(f"e.{et}")
    else:                                    # epoch seconds as long/double
        et_col = F.col(f"e.{et}").cast("double").cast("timestamp")
    bad_json = F.col("e").isNull() | F.col(f"e.{_CORRUPT}").isNotNull()
    why = (F.when(bad_json, F.lit("not a JSON object of the declared [events] fields"))
           .when(et_col.isNull(), F.lit(f"no event time (field {et!r} missing, null or not a timestamp)")))
    return parsed.withColumn("event_time", et_col).withColumn("malformed", why)


def aggregates(spark, cfg: PipelineConfig, commit_group: bool = True, observe: bool = False):
    """The streaming DataFrame the pipeline writes (windowed aggregates, or raw records). `observe`
    attaches the `kohort_pipeline` metrics (events, malformed) to the query's progress."""
    from pyspark.sql import functions as F
    if cfg.mode == "raw":
        raw = spark.readStream.format("kohort").options(**source_options(cfg, commit_group)).load()
        return raw.select("key", "value", "partition", "offset", "timestamp")
    parsed = parsed_events(spark, cfg, commit_group)
    if observe:
        parsed = parsed.observe(METRICS_NAME, F.count(F.lit(1)).alias("events"),
                                F.count(F.col("malformed")).alias("malformed"))
    et = cfg.event_time
    cols = [F.col(f"e.{n}").alias(n) for n in cfg.fields if n != et] + [F.col("event_time").alias(et)]
    if et != "kafka_timestamp":
        cols.append("kafka_timestamp")
    events = parsed.where(F.col("malformed").isNull()).select(*cols).withWatermark(et, cfg.watermark)
    win = F.window(F.col(et), cfg.window, cfg.slide) if cfg.slide else F.window(F.col(et), cfg.window)
    groups = [win] + ([F.col(cfg.key)] if cfg.key else [])
    aggs = []
    for m in cfg.metrics:
        mm = _METRIC.match(m.strip())
        if mm.group(1) == "count":
            aggs.append(F.count(F.lit(1)).alias("count"))
        else:
            fn, col = mm.group(2), mm.group(3)
            aggs.append(getattr(F, fn)(F.col(col)).alias(f"{fn}_{col}"))
    out = events.groupBy(*groups).agg(*aggs)
    cols = [F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end")]
    if cfg.key:
        cols.append(F.col(cfg.key))
    return out.select(*cols, *[a for a in out.columns if a not in ("window", cfg.key)])


def dead_letters(spark, cfg: PipelineConfig):
    """The malformed records as the kohort sink takes them: key, value, headers (kohort.error,
    kohort.source)."""
    from pyspark.sql import functions as F
    bad = parsed_events(spark, cfg, commit_group=False).where(F.col("malformed").isNotNull())
    source = F.concat_ws("", F.col("topic"), F.lit("-"), F.col("partition").cast("string"), F.lit("@"),
                         F.col("offset").cast("string"))
    headers = F.array(
        F.struct(F.lit("kohort.error").alias("key"), F.col("malformed").cast("binary").alias("value")),
        F.struct(F.lit("kohort.source").alias("key"), source.cast("binary").alias("value")))
    return bad.select("key", "value", headers.alias("headers"))


def start_queries(spark, cfg: PipelineConfig):
    """Start the Parquet query (and the results-topic and dead-letter queries); returns them, Parquet
    first."""
    from pyspark.sql import functions as F
    df = aggregates(spark, cfg, observe=True)
    qs = [df.writeStream.queryName("kohort_pipeline_parquet").format("parquet").outputMode("append")
          .option("path", cfg.path).option("checkpointLocation", os.path.join(cfg.checkpoint, "parquet"))
          .trigger(processingTime=cfg.trigger).start()]

    def to_topic(frame, name: str, topic: str, checkpoint: str):
        return (frame.writeStream.queryName(name).format("kohort")
                .option("kafka.bootstrap.servers", cfg.bootstrap_servers).option("topic", topic)
                .option("checkpointLocation", os.path.join(cfg.checkpoint, checkpoint))
                .outputMode("append").trigger(processingTime=cfg.trigger).start())
    if cfg.results_topic:
        df2 = aggregates(spark, cfg, commit_group=False)        # only the Parquet query commits offsets
        key_col = F.col(cfg.key).cast("string") if cfg.key and cfg.mode != "raw" else F.lit(None).cast("string")
        kafka_df = df2.select(key_col.alias("key"), F.to_json(F.struct(*df2.columns)).alias("value"))
        qs.append(to_topic(kafka_df, "kohort_pipeline_results", cfg.results_topic, "results"))
    if cfg.dead_letter_topic:
        qs.append(to_topic(dead_letters(spark, cfg), "kohort_pipeline_deadletters", cfg.dead_letter_topic,
                           "deadletters"))
    return qs


def progress_dict(p) -> dict | None:
    """A StreamingQueryProgress (or its dict) as plain JSON data, offsets included."""
    if p is None:
        return None
    import json
    if hasattr(p, "json"):
        p = json.loads(p.json)
    elif not isinstance(p, dict):
        p = json.loads(json.dumps(p, default=str))
    for s in p.get("sources") or []:
        for k in ("startOffset", "endOffset", "latestOffset"):
            if isinstance(s.get(k), str):
                try:
                    s[k] = json.loads(s[k])
                except ValueError:
                    pass
    return p


def progress_line(p: dict | None) -> str | None:
    """One progress line from a StreamingQueryProgress dict: batch, rows, rows/s, lag."""
    if not p:
        return None
    lag = source_lag(p)
    rate = p.get("processedRowsPerSecond") or 0.0
    line = (f"batch {p.get('batchId')}: {p.get('numInputRows', 0)} rows, {rate:,.0f} rows/s, "
            f"lag {lag if lag is not None else '?'}")
    m = observed(p)
    if m is not None:
        line += f", malformed {m['malformed']}"
    return line


def observed(p: dict | None) -> dict | None:
    """The pipeline's observed metrics of one progress: {"events": n, "malformed": m}, or None."""
    m = ((p or {}).get("observedMetrics") or {}).get(METRICS_NAME)
    if not m:
        return None
    return {k: int(m.get(k) or 0) for k in ("events", "malformed")}


def source_lag(p: dict) -> int | None:
    """Offsets behind the head after this batch: latestOffset - endOffset summed over partitions."""
    total = None
    for s in p.get("sources") or []:
        end, latest = s.get("endOffset"), s.get("latestOffset")
        if not isinstance(end, dict) or not isinstance(latest, dict) or "offsets" not in latest:
            continue
        e = end.get("offsets", {})
        for t, parts in latest["offsets"].items():
            for part, off in parts.items():
                total = (total or 0) + max(int(off) - int(e.get(t, {}).get(part, 0)), 0)
    return total


def watch(queries, duration_s: float | None = None, out=print, interval_s: float = 2.0,
          should_stop=lambda: False, totals: dict | None = None) -> dict:
    """Print each new progress of the first query until `duration_s` passes or a query fails.
    Returns (and keeps in `totals`) the events and malformed events counted so far."""
    totals = {"events": 0, "malformed": 0} if totals is None else totals
    counted = -1                                  # the last batch id whose metrics are in totals
    t0 = time.monotonic()
    last = None
    while True:
        for prog in queries[0].recentProgress:       # every batch once, also those between two looks
            d = progress_dict(prog)
            m = observed(d)
            if m is not None and d.get("batchId", -1) > counted:
                counted = d["batchId"]
                for k in totals:
                    totals[k] += m[k]
        for q in queries:
            if not q.isActive:
                exc = q.exception()
                if exc is not None:
                    raise ConfigError(f"query {q.name} failed: {str(exc).splitlines()[0]}")
        p = progress_dict(queries[0].lastProgress)
        if p is not None and p.get("batchId") != last:
            last = p.get("batchId")
            line = progress_line(p)
            if line:
                out(line)
        if duration_s is not None and time.monotonic() - t0 >= duration_s:
            return totals
        if should_stop():
            return totals
        time.sleep(interval_s)


def run(cfg: PipelineConfig, master: str | None = None, duration_s: float | None = None, out=print) -> None:
    spark = build_session(cfg, master)
    queries = start_queries(spark, cfg)
    totals = {"events": 0, "malformed": 0}
    try:
        watch(queries, duration_s, out, totals=totals)
    finally:
        if cfg.mode != "raw":
            where = f" (written to {cfg.dead_letter_topic})" if cfg.dead_letter_topic else " (dropped)"
            out(f"events {totals['events']}, malformed {totals['malformed']}"
                + (where if totals["malformed"] else ""))
        for q in queries:
            try:
                q.stop()
            except Exception:   # noqa: BLE001 - stopping a failed query
                pass
        spark.stop()
