"""The `kohort` Spark data source: batch and streaming readers over Kafka-compatible brokers.

* `KohortDataSource` -- `format("kohort")`: schema, reader, streamReader, writer, streamWriter.
* `KohortBatchReader` -- plans [startingOffsets, endingOffsets) on the driver (ListOffsets), splits by
  minPartitions / maxRecordsPerPartition (neither set: fewer Kafka partitions than Spark's default
  parallelism are split towards it, planning.task_ranges), reads ranges on executors.
* `KohortStreamReader` -- offsets as ``{"offsets": {topic: {"p": n}}, "topic_ids": {...}}`` in the
  Spark checkpoint; admission control through `latestOffset(start, limit)` (maxOffsetsPerTrigger as
  `ReadMaxRows`, minOffsetsPerTrigger + maxTriggerDelay by our own gate), Trigger.AvailableNow, and
  with `kafka.group.id` a simple OffsetCommit of every finished batch's end offsets (from `commit(end)`
  and from the next `latestOffset(start)`, since Spark only calls commit when it plans new data).
  PySpark 4.0/4.1 call `latestOffset()` without a start or a limit, and give Python sources no
  admission control: the reader then answers with everything available (maxOffsetsPerTrigger and
  minOffsetsPerTrigger are not applied, with a warning). Capping by itself would be wrong there:
  under Trigger.AvailableNow those Sparks take the source's first latestOffset() as the query's final
  end. A new query calls latestOffset() before initialOffset(), so the first call resolves the
  initial offset (kept: initialOffset() returns the same one); a query restarted from its checkpoint
  first calls `partitions(S, S)` with the checkpoint's offset S (Spark's setLatestSeenOffset).
* `read_range(...)` -- the executor side: explicit-assignment fetches from the leader (no group
  membership, the next fetch in flight while an answer is decoded), decoded straight into Arrow
  columns (`kohort.spark.arrow.ColumnBuilder`), one RecordBatch per answer.

Data loss (see planning.check_partition) is classified on the driver before a batch is planned and on
the executor when a fetch finds its offset gone; under failOnDataLoss=true real loss fails the query
with the classified message, otherwise the message is logged and reading resumes where data exists.
Compaction holes and transaction markers inside a range are not loss.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from kohort.spark.compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from kohort.errors import ConfigError, ErrorCode, KafkaError, KohortError, for_code
import kohort.spark.planning as P
from kohort.spark.arrow import ColumnBuilder, next_fetch_offset, schema_ddl
from kohort.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, parse_source_options
from kohort.spark.profile import profiled

log = logging.getLogger("kohort.spark")

ROWS_PER_ARROW_BATCH = 16384
# max.partition.fetch.bytes unless kafka.max.partition.fetch.bytes is set (spark-sql-kafka keeps the
# consumer's 1 MiB): each answer becomes one Arrow batch, and Spark's per-batch cost on the way to the
# JVM made 8 MiB read 3M x 100 B records into the noop sink 1.6x (batch) / 1.3x (stream) as fast as
# 1 MiB did (interleaved, one session, busy 2-core machine)
FETCH_BYTES = 8 << 20
OFFSET_OUT_OF_RANGE = ErrorCode.OFFSET_OUT_OF_RANGE


class DataLossError(KohortError):
    """Records the query should have read are gone (failOnDataLoss=true)."""


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark partition: offsets [from_offset, until_offset) of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int


# -- executor side -------------------------------------------------------------------------------------
_CLUSTERS: dict = {}


def _executor_cluster(config: dict):
    """A Cluster per client config, kept for the life of a (reused) Python worker."""
    from kohort.spark.wire import Cluster
    key = tuple(sorted(config.items()))
    c = _CLUSTERS.get(key)
    if c is None:
        c = _CLUSTERS[key] = Cluster(config)
    return c


def read_range(opts: SourceOptions, part: RangePartition, cluster=None, now=time.monotonic,
               sleep=time.sleep):
    """Yield pyarrow.RecordBatches of the records of `part` (offsets in [from, until)), in offset order.

    One fetch is kept in flight: as soon as an answer's batch headers give the next offset (and it is
    inside the range), the next Fetch is sent, then the answer is decoded while the broker reads.
    Each decoded answer is yielded as its own RecordBatch (no concatenation); rows from the Python
    walk (read_committed, legacy formats) are gathered up to ROWS_PER_ARROW_BATCH first."""
    cfg = opts.client_config
    cluster = cluster or _executor_cluster(cfg)
    tp = (part.topic, part.partition)
    iso = 1 if cfg.get("isolation.level") == "read_committed" else 0
    builder = ColumnBuilder(part.topic, part.partition, opts.include_headers, read_committed=bool(iso))
    max_bytes = int(cfg.get("max.partition.fetch.bytes", FETCH_BYTES))
    max_wait_ms = int(cfg.get("fetch.max.wait.ms", 500))
    pos, until = part.from_offset, part.until_offset
    deadline = now() + opts.poll_timeout_ms / 1000.0
    rows = skipped = 0
    ahead = None                      # the Fetch sent for `pos` while the previous answer was decoded
    while pos < until:
        pd = None
        sent, ahead = ahead, None
        if sent is not None and sent.offset == pos:
            try:
                pd = cluster.fetch_result(sent)
            except (KafkaError, OSError):
                pd = None             # e.g. timed out while Spark held the task: fetched again below
        try:
            if pd is None:
                pd = cluster.fetch(tp, pos, max_bytes=max_bytes, max_wait_ms=max_wait_ms, isolation_level=iso)
        except KafkaError as e:
            if not e.retriable or now() > deadline:
                raise
            sleep(0.2)
            cluster.refresh([part.topic])
            continue
        except OSError:
            if now() > deadline:
                raise
            sleep(0.2)
            continue
        if pd.error_code == OFFSET_OUT_OF_RANGE:
            bounds = cluster.offset_bounds([tp], iso).get(tp)
            loss = P.check_partition(tp, pos, *(bounds or (None, None)), None, None)
            if loss is None:          # raced with a leader change; try again
                sleep(0.1)
                continue
            if opts.fail_on_data_loss:
                raise DataLossError(loss.message + " (set failOnDataLoss=false to skip lost ranges)")
            log.warning("kohort: %s; continuing", loss.message)
            if loss.resume_at is None or loss.resume_at >= until or loss.resume_at <= pos:
                break                 # nothing readable is left in this range
            skipped += loss.resume_at - pos
            pos = loss.resume_at
            continue
        if pd.error_code:
            err = for_code(pd.error_code)(f"Fetch {tp[0]}-{tp[1]} at {pos}")
            if not err.retriable or now() > deadline:
                raise err
            sleep(0.2)
            cluster.refresh([part.topic])
            continue
        records = pd.records or b""
        if records:
            nxt, _ = next_fetch_offset(records)
            if nxt is not None and pos < nxt < until:
                try:
                    ahead = cluster.send_fetch(tp, nxt, max_bytes=max_bytes, max_wait_ms=max_wait_ms,
                                               isolation_level=iso)
                except (KafkaError, OSError):
                    ahead = None      # fetched again, with the retry rules above, once it is needed
        nxt = builder.add_payload(records, pos, until, pd.aborted_transactions and
                                  [(a.producer_id, a.first_offset) for a in pd.aborted_transactions] or ())
        if nxt is None:
            if records:
                max_bytes *= 2        # only part of a batch larger than the fetch size: ask for more
                continue
            # nothing at pos yet: the range was planned past what the broker now has (truncation)
            if now() > deadline:
                loss = P.check_partition(tp, until, pd.log_start_offset, pd.high_watermark, None, None)
                msg = (loss.message if loss else
                       f"offsets {pos}..{until - 1} of {tp[0]}-{tp[1]} never became readable")
                if opts.fail_on_data_loss:
                    raise DataLossError(msg)
                log.warning("kohort: %s; continuing", msg)
                break
            sleep(0.05)
            continue
        if nxt <= pos:
            raise KohortError(f"fetch of {tp[0]}-{tp[1]} at {pos} made no progress")
        pos = nxt
        deadline = now() + opts.poll_timeout_ms / 1000.0
        if builder.has_batches(ROWS_PER_ARROW_BATCH):
            for rb in builder.take_batches():
                rows += rb.num_rows
                yield rb
    last = builder.take_batches()
    for rb in last:
        rows += rb.num_rows
        yield rb
    if rows == 0:
        yield builder.to_record_batch()
    gaps = until - part.from_offset - skipped - rows
    if gaps > 0 and pos >= until:
        # offsets in a range with no data record: compacted away, transaction markers, aborted
        # transactional data under read_committed -- holes in the offset sequence, not lost data
        log.info("kohort: %s-%d [%d, %d): %d offsets hold no data record (compaction or transaction "
                 "markers); this is not data loss", tp[0], tp[1], part.from_offset, until, gaps)


def _task_name(part: RangePartition) -> str:
    return f"read-{part.topic}-{part.partition}-{part.from_offset}"


# -- driver side: resolving offsets -------------------------------------------------------------------
class _Driver:
    """Shared driver-side logic of the batch and stream readers (not pickled: the cluster is dropped)."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._cluster = None

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_cluster"] = None
        return d

    @property
    def cluster(self):
        if self._cluster is None:
            from kohort.spark.wire import Cluster
            self._cluster = Cluster(self.opts.client_config)
        return self._cluster

    @property
    def isolation(self) -> int:
        return 1 if self.opts.client_config.get("isolation.level") == "read_committed" else 0

    def _retry(self, fn):
        n = self.opts.fetch_offset_num_retries
        for i in range(n + 1):
            try:
                return fn()
            except (KafkaError, OSError) as e:
                if i == n or (isinstance(e, KafkaError) and not e.retriable):
                    raise
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000.0)
                if self._cluster is not None:
                    self._cluster.close()

    def topic_partitions(self) -> list[tuple]:
        """The partitions the query reads now (assign / subscribe / subscribePattern)."""
        o = self.opts
        c = self.cluster
        if o.strategy == "assign":
            known = c.partitions_of(sorted({t for t, _ in o.assign}))
            return [tp for tp in o.assign if tp[1] in known.get(tp[0], [])]
        if o.strategy == "subscribe":
            topics = o.topics
        else:
            rx = re.compile(o.pattern)
            topics = [t for t in c.all_topics() if rx.fullmatch(t)]
        parts = c.partitions_of(topics)
        return sorted((t, p) for t, ps in parts.items() for p in ps)

    def bounds(self, tps) -> dict:
        return self._retry(lambda: self.cluster.offset_bounds(tps, self.isolation))

    def resolve(self, spec: OffsetSpec, tps: list, bounds: dict, starting: bool) -> dict:
        """{tp: offset} for a starting/ending spec over `tps` (bounds = {tp: (earliest, latest)})."""
        kind = spec.kind
        if kind == "earliest":
            return {tp: bounds[tp][0] for tp in tps}
        if kind == "latest":
            return {tp: bounds[tp][1] for tp in tps}
        if kind == "group":
            group = self.opts.group_id
            got = self._retry(lambda: self.cluster.committed_offsets(group, tps))
            out = {}
            for tp in tps:
                lo, hi = bounds[tp]
                out[tp] = min(max(got[tp], lo), hi) if tp in got else lo
            return out
        if kind == "offsets":
            missing = [tp for tp in tps if tp not in spec.offsets]
            unknown = [tp for tp in spec.offsets if tp not in bounds]
            which = "startingOffsets" if starting else "endingOffsets"
            if unknown:
                raise ConfigError(f"{which} names partitions that do not exist or are not read: "
                                  + ", ".join(f"{t}-{p}" for t, p in sorted(unknown)))
            if missing:
                raise ConfigError(f"{which} must give an offset for every partition read; missing "
                                  + ", ".join(f"{t}-{p}" for t, p in missing))
            out = {}
            for tp in tps:
                v = spec.offsets[tp]
                out[tp] = bounds[tp][0] if v == EARLIEST else bounds[tp][1] if v == LATEST else v
                latest = bounds[tp][1]
                if starting and out[tp] > latest:
                    # spark-sql-kafka reports this at the first batch as data loss ("a user error that
                    # the start offset is set beyond available offset"); not a truncated log
                    msg = (f"startingOffsets asks for {tp[0]}-{tp[1]} from offset {v}, but its latest offset "
                           f"is {latest}: offsets [{latest}, {v}) do not exist")
                    if self.opts.fail_on_data_loss:
                        raise DataLossError(msg + " (set failOnDataLoss=false to start at the latest offset)")
                    log.warning("kohort: %s; starting at offset %d", msg, latest)
                    out[tp] = latest
            return out
        # timestamps
        ts = {tp: spec.timestamp if kind == "timestamp" else spec.offsets.get(tp) for tp in tps}
        if kind == "timestamps":
            missing = [tp for tp in tps if ts[tp] is None]
            if missing:
                raise ConfigError("offsets by timestamp must name every partition read; missing "
                                  + ", ".join(f"{t}-{p}" for t, p in missing))
        found = self._retry(lambda: self.cluster.list_offsets(ts, self.isolation))
        out = {}
        for tp in tps:
            off = found.get(tp, (-1, -1))[0]
            if off < 0:
                if starting and self.opts.starting_by_timestamp_strategy == "error":
                    raise KohortError(f"no record of {tp[0]}-{tp[1]} has a timestamp >= {ts[tp]} "
                                      "(set startingOffsetsByTimestampStrategy=latest to start at the end)")
                off = bounds[tp][1]
            out[tp] = off
        return out

    def topic_ids(self, tps) -> dict:
        ids = self.cluster.topic_ids
        return {t: ids[t] for t, _ in tps if t in ids}


# -- batch --------------------------------------------------------------------------------------------
class KohortBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, default_parallelism: int | None = None):
        self.opts = opts
        self.default_parallelism = default_parallelism
        self.driver = _Driver(opts)

    def plan(self) -> list[P.OffsetRange]:
        d = self.driver
        try:
            tps = d.topic_partitions()
            if not tps:
                raise KohortError("no partitions to read: " + (
                    f"topics {', '.join(self.opts.topics)} do not exist" if self.opts.topics else
                    "nothing matches the subscription"))
            bounds = d.bounds(tps)
            start = d.resolve(self.opts.starting_for(batch=True), tps, bounds, starting=True)
            end = d.resolve(self.opts.ending_for_batch(), tps, bounds, starting=False)
        finally:
            if d._cluster is not None:
                d._cluster.close()
                d._cluster = None
        for tp in tps:
            latest = bounds[tp][1]
            if end[tp] > latest:
                # spark-sql-kafka plans this range and its executor fails after an empty poll with
                # "Some data may have been lost ... Could not read records in offset [latest, end)"
                # (failOnDataLoss=false: reads up to the latest offset); the driver knows it already
                msg = (f"endingOffsets asks for {tp[0]}-{tp[1]} up to offset {end[tp]}, but its latest "
                       f"offset is {latest}: records in offset [{latest}, {end[tp]}) do not exist")
                if self.opts.fail_on_data_loss:
                    raise DataLossError(msg + " (set failOnDataLoss=false to read up to the latest offset)")
                log.warning("kohort: %s; reading up to offset %d", msg, latest)
                end[tp] = latest
            if end[tp] < start[tp]:
                raise KohortError(f"{tp[0]}-{tp[1]}: ending offset {end[tp]} is before starting offset {start[tp]}")
            lo = bounds[tp][0]
            if start[tp] < lo:
                msg = (f"records {start[tp]}..{lo - 1} of {tp[0]}-{tp[1]} were deleted by retention "
                       f"(earliest offset now {lo})")
                if self.opts.fail_on_data_loss:
                    raise DataLossError(msg + " (set failOnDataLoss=false to skip them)")
                log.warning("kohort: %s; reading from %d", msg, lo)
                start[tp] = lo
        return P.task_ranges(P.plan_ranges(start, end), self.opts.min_partitions,
                             self.opts.max_records_per_partition, self.default_parallelism)

    def partitions(self):
        ranges = self.plan()
        parts = [RangePartition(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges]
        return parts or [RangePartition("", -1, 0, 0)]

    def read(self, partition: RangePartition):
        if partition.partition < 0 or partition.until_offset <= partition.from_offset:
            from kohort.spark.arrow import arrow_schema
            import pyarrow as pa
            yield pa.RecordBatch.from_pylist([], schema=arrow_schema(self.opts.include_headers))
            return
        yield from profiled(read_range(self.opts, partition), _task_name(partition))


# -- streaming ----------------------------------------------------------------------------------------
class KohortStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions, clock=time.time, default_parallelism: int | None = None):
        self.opts = opts
        self.default_parallelism = default_parallelism
        self.driver = _Driver(opts)
        self._clock = clock
        self._gate = (P.TriggerGate(opts.min_offsets_per_trigger, opts.max_trigger_delay_ms,
                                    int(clock() * 1000)) if opts.min_offsets_per_trigger else None)
        self._latest: dict | None = None
        self._target: dict | None = None          # Trigger.AvailableNow
        self._committed: dict | None = None
        self._commit_warned = False
        self._started = False       # the first latestOffset's start may be an unprocessed initial offset
        self._handed_out: dict | None = None   # the last offset Spark has seen (legacy latestOffset())
        self._initial: dict | None = None
        self._legacy_warned = False

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_clock"] = None
        return d

    # offsets ------------------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        if self._initial is None:
            d = self.driver
            tps = d.topic_partitions()
            bounds = d.bounds(tps)
            start = d.resolve(self.opts.starting_for(batch=False), tps, bounds, starting=True)
            self._initial = P.encode_offsets(start, d.topic_ids(tps))
        return self._initial

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        d = self.driver
        tps = d.topic_partitions()
        self._target = {tp: b[1] for tp, b in d.bounds(tps).items()}

    def _check_loss(self, start: dict, start_ids: dict, bounds: dict, cur_ids: dict) -> dict:
        """Data-loss classification for every partition of `start`; returns {tp: resume offset}
        for partitions to move (failOnDataLoss=false), raises DataLossError otherwise."""
        moves = {}
        for tp, off in start.items():
            b = bounds.get(tp)
            loss = P.check_partition(tp, off, b[0] if b else None, b[1] if b else None,
                                     start_ids.get(tp[0]), cur_ids.get(tp[0]))
            if loss is None:
                continue
            if self.opts.fail_on_data_loss:
                raise DataLossError(loss.message + " (set failOnDataLoss=false to continue past it)")
            log.warning("kohort: %s; continuing", loss.message)
            moves[tp] = loss.resume_at
        return moves

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:           # PySpark 4.0/4.1: latestOffset() with neither start nor limit
            if (self.opts.max_offsets_per_trigger or self.opts.min_offsets_per_trigger) and not self._legacy_warned:
                log.warning("kohort: this PySpark gives Python sources no admission control (4.2+ does): "
                            "maxOffsetsPerTrigger / minOffsetsPerTrigger are not applied, each batch "
                            "reads everything available")
                self._legacy_warned = True
            begin = self._handed_out if self._handed_out is not None else self.initialOffset()
            self._handed_out = self._latest_offset(begin, ReadAllAvailable())
            return self._handed_out
        return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict, limit: ReadLimit | None) -> dict:
        d = self.driver
        start_offsets, start_ids = P.decode_offsets(start)
        if self._started:
            self._commit_group(start_offsets)
        self._started = True
        tps = d.topic_partitions()
        current = set(tps)
        bounds = d.bounds(sorted(current | set(start_offsets)))
        cur_ids = d.topic_ids(tps)
        moves = self._check_loss(start_offsets, start_ids, bounds, cur_ids)
        base = {}
        for tp in tps:
            if tp not in bounds:
                continue
            if tp in moves:
                base[tp] = moves[tp]
            elif tp in start_offsets:
                base[tp] = start_offsets[tp]
            else:
                base[tp] = bounds[tp][0]          # a new partition starts at its earliest offset
        latest = {tp: bounds[tp][1] for tp in base}
        if self._target is not None:
            latest = {tp: min(v, self._target.get(tp, base[tp])) if tp in self._target else base[tp]
                      for tp, v in latest.items()}
        latest = {tp: max(v, base[tp]) for tp, v in latest.items()}
        self._latest = latest
        end = latest
        if isinstance(limit, ReadMaxRows):            # maxOffsetsPerTrigger (also under AvailableNow)
            end = P.apportion(base, latest, limit.max_rows)
        if (self._gate is not None and self._target is None
                and isinstance(limit, (ReadMaxRows, ReadMinRows))):
            if not self._gate.admit(P.total_lag(base, end), int(self._clock() * 1000)):
                return start                          # minOffsetsPerTrigger not reached yet
        if end == start_offsets and set(cur_ids.items()) >= set(start_ids.items()):
            return start
        return P.encode_offsets(end, cur_ids)

    def reportLatestOffset(self):
        if self._latest is None:
            return None
        return P.encode_offsets(self._latest, self.driver.topic_ids(list(self._latest)))

    def partitions(self, start: dict, end: dict):
        self._handed_out = end
        s, s_ids = P.decode_offsets(start)
        e, e_ids = P.decode_offsets(end)
        # new partitions, and partitions of a topic recreated since `start` (failOnDataLoss=false),
        # are read from their earliest offset
        fresh = [tp for tp in e if tp not in s or (s_ids.get(tp[0]) and e_ids.get(tp[0])
                                                   and s_ids[tp[0]] != e_ids[tp[0]])]
        if fresh:
            bounds = self.driver.bounds(fresh)
            for tp in fresh:
                s[tp] = min(bounds[tp][0], e[tp]) if tp in bounds else e[tp]
        for tp in e:
            if s[tp] > e[tp]:          # the end was moved back past a loss we decided to skip
                s[tp] = e[tp]
        ranges = P.task_ranges(P.plan_ranges({tp: s[tp] for tp in e}, e), self.opts.min_partitions,
                               self.opts.max_records_per_partition, self.default_parallelism)
        return [RangePartition(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges]

    def read(self, partition: RangePartition):
        yield from profiled(read_range(self.opts, partition), _task_name(partition))

    def commit(self, end: dict) -> None:
        """Spark finished every batch up to `end`: commit it to kafka.group.id (if set)."""
        offsets, _ = P.decode_offsets(end)
        self._commit_group(offsets)

    def _commit_group(self, offsets: dict) -> None:
        # Spark calls commit(end) of batch N only when it plans batch N+1 with new data, so the last
        # batch before the topic goes quiet would never be committed; latestOffset(start) therefore
        # also commits `start` -- the end of the last batch, which Spark has finished (its commit log
        # entry is written before the next batch is planned). Simple commits: generation -1, no member.
        group = self.opts.group_id
        if not group or not offsets or offsets == self._committed:
            return
        try:
            self.driver.cluster.commit_offsets(group, offsets, metadata="kohort-spark")
            self._committed = dict(offsets)
        except (KohortError, OSError) as e:     # commits only report progress; never fail the query
            if not self._commit_warned:
                log.warning("kohort: committing offsets of group %s failed: %s", group, e)
                self._commit_warned = True
            if self.driver._cluster is not None:
                self.driver._cluster.close()

    def stop(self) -> None:
        if self.driver._cluster is not None:
            self.driver._cluster.close()


class _InvalidStreamReader(DataSourceStreamReader):
    """Stands in for a streaming reader whose options are invalid for a streaming query: every call
    raises the option error."""

    def __init__(self, error: ConfigError):
        self.error = error

    def _fail(self, *args, **kwargs):
        raise ConfigError(str(self.error))

    initialOffset = latestOffset = partitions = read = commit = _fail

    def stop(self) -> None:
        pass


# -- the data source ---------------------------------------------------------------------------------------
class KohortDataSource(DataSource):
    """format("kohort"): spark-sql-kafka's options and schema over kohort's client.

    `default_parallelism`: Spark's default parallelism when known (`kohort.spark.register` registers
    a subclass carrying the session's); with neither minPartitions nor maxRecordsPerPartition set,
    fewer Kafka partitions than that are split into more Spark partitions (planning.task_ranges)."""

    default_parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        return "kohort"

    def schema(self):
        # Spark calls schema() at load() for reads of both kinds (not for writes): every option is
        # checked here, so a bad value fails load(); the rules of one query type wait for reader()
        # / streamReader().
        return schema_ddl(parse_source_options(self.options, batch=None).include_headers)

    def reader(self, schema):
        return KohortBatchReader(parse_source_options(self.options, batch=True), self.default_parallelism)

    def streamReader(self, schema):
        try:
            opts = parse_source_options(self.options, batch=False)
        except ConfigError as e:
            # pyspark 4.2's streaming runner calls reader.stop() in a `finally` after streamReader(),
            # so an exception here is reported as an UnboundLocalError; a reader that fails its first
            # call reports ours instead
            return _InvalidStreamReader(e)
        return KohortStreamReader(opts, default_parallelism=self.default_parallelism)

    def writer(self, schema, overwrite: bool):
        from kohort.spark.sink import KohortBatchWriter
        from kohort.spark.options import parse_sink_options
        return KohortBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema, overwrite: bool):
        from kohort.spark.sink import KohortStreamWriter
        from kohort.spark.options import parse_sink_options
        return KohortStreamWriter(parse_sink_options(self.options), schema)
