"""Pure planning for the Spark source: offset ranges, their splitting, admission control, data loss.

Nothing here does I/O or reads a clock (time is an argument), so every rule is unit tested directly.

* `OffsetRange`, `plan_ranges(start, end)` and `split_ranges(ranges, min_partitions,
  max_records_per_partition)` -- spark-sql-kafka's KafkaOffsetRangeCalculator rule: drop empty ranges;
  cut each range into ceil(size / maxRecordsPerPartition) pieces; then, while fewer pieces than
  minPartitions, ranges whose proportional share rounds to 1 stay whole and the others are divided
  into round(size / splitTotal * (minPartitions - #whole)) pieces by integer division (the last
  piece takes the remainder). Sizes are offset counts, an estimate under compaction/transactions.
  `task_ranges(ranges, min_partitions, max_records_per_partition, default_parallelism)` is what the
  source plans with: that rule unchanged when either option is set; with neither, when the ranges
  are fewer than Spark's default parallelism, the rule runs with minPartitions = the parallelism
  (capped so that no piece is expected below MIN_OFFSETS_PER_SPLIT offsets). spark-sql-kafka keeps
  one task per Kafka partition there; a Python task (fetch, decode, Arrow) plus the JVM's Arrow to
  row conversion is slower than a JVM consumer, so one Kafka partition read by one task would leave
  the other cores idle. Rows are the same either way; only the task count differs.
* `apportion(start, latest, max_offsets)` -- maxOffsetsPerTrigger split over partitions in
  proportion to their lag by largest remainder, so exactly min(limit, total lag) offsets are admitted.
* `TriggerGate` -- minOffsetsPerTrigger held back until maxTriggerDelay passed since the last batch.
* Checkpoint offsets: ``{"offsets": {topic: {"p": offset}}, "topic_ids": {topic: uuid}}`` via
  `encode_offsets` / `decode_offsets`.
* `check_partition(...)` -- tells data loss kinds apart: retention-deleted range, recreated topic
  (topic id change), partition gone, offsets moved backwards. Compaction and transaction-marker gaps
  are never loss (a range's records simply have holes); the reader only counts them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    from_offset: int
    until_offset: int          # exclusive

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    @property
    def tp(self) -> tuple:
        return (self.topic, self.partition)


def plan_ranges(start: dict, end: dict) -> list[OffsetRange]:
    """One range per partition of `end` ({(topic, partition): offset}), sorted. Every partition of
    `end` needs a start (callers resolve new partitions to their earliest offset first)."""
    out = []
    for tp in sorted(end):
        if tp not in start:
            raise ValueError(f"no start offset for {tp[0]}-{tp[1]}")
        out.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
    return out


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    remaining = r.size
    begin = r.from_offset
    out = []
    for i in range(parts):
        this = remaining // (parts - i)       # integer division; the last piece takes the rest
        remaining -= this
        stop = min(begin + this, r.until_offset)
        if stop > begin:
            out.append(OffsetRange(r.topic, r.partition, begin, stop))
        begin = stop
    return out


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def _part_count(size: int, total: int, parts: int) -> int:
    return max(_round_half_up(size / total * parts), 1)


def split_ranges(ranges, min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Spark's split of offset ranges into Spark partitions (see module docstring)."""
    ranges = [r for r in ranges if r.size > 0]
    if (min_partitions is None or len(ranges) >= min_partitions) and max_records_per_partition is None:
        return ranges
    if max_records_per_partition is not None:
        divided = []
        for r in ranges:
            divided.extend(_divide(r, math.ceil(r.size / max_records_per_partition)))
    else:
        divided = ranges
    if min_partitions is None or min_partitions <= len(divided):
        return divided
    total = sum(r.size for r in divided)
    whole = [r for r in divided if _part_count(r.size, total, min_partitions) == 1]
    split_total = total - sum(r.size for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    out = []
    for r in divided:
        if _part_count(r.size, total, min_partitions) == 1:
            out.append(r)
        else:
            out.extend(_divide(r, _part_count(r.size, split_total, split_min)))
    return out


MIN_OFFSETS_PER_SPLIT = 100_000


def task_ranges(ranges, min_partitions: int | None = None, max_records_per_partition: int | None = None,
                default_parallelism: int | None = None, min_split_offsets: int | None = None) -> list[OffsetRange]:
    """The source's Spark partitions (see module docstring): split_ranges with the options given;
    with neither, ranges fewer than `default_parallelism` are split towards it, into pieces
    expected to hold at least `min_split_offsets` (default MIN_OFFSETS_PER_SPLIT) offsets."""
    if min_partitions is None and max_records_per_partition is None and default_parallelism:
        ranges = [r for r in ranges if r.size > 0]
        floor = MIN_OFFSETS_PER_SPLIT if min_split_offsets is None else min_split_offsets
        want = min(default_parallelism, sum(r.size for r in ranges) // max(floor, 1))
        if want > len(ranges):
            min_partitions = want
    return split_ranges(ranges, min_partitions, max_records_per_partition)


# -- admission control --------------------------------------------------------------------------------
def apportion(start: dict, latest: dict, max_offsets: int) -> dict:
    """End offsets admitting at most `max_offsets` in total, split by lag with largest remainder.

    `start` covers every partition of `latest` (one missing is taken as caught up)."""
    lags = {tp: max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(lags.values())
    if total <= max_offsets:
        return dict(latest)
    shares = {tp: max_offsets * lag / total for tp, lag in lags.items()}
    take = {tp: int(math.floor(s)) for tp, s in shares.items()}
    left = max_offsets - sum(take.values())
    # largest fractional remainders first; ties by larger lag, then by partition for determinism
    for tp in sorted(shares, key=lambda tp: (-(shares[tp] - take[tp]), -lags[tp], tp))[:left]:
        take[tp] += 1
    return {tp: start.get(tp, latest[tp]) + min(take[tp], lags[tp]) for tp in latest}


def total_lag(start: dict, latest: dict) -> int:
    return sum(max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest)


class TriggerGate:
    """minOffsetsPerTrigger with maxTriggerDelay (SPARK-35312): hold a batch back while fewer offsets
    than the minimum are available, unless `delay_ms` passed since the last batch fired."""

    def __init__(self, min_offsets: int, delay_ms: int, now_ms: int):
        self.min_offsets, self.delay_ms = min_offsets, delay_ms
        self.last_fire_ms = now_ms

    def admit(self, available: int, now_ms: int) -> bool:
        if available <= 0:
            return False
        if available >= self.min_offsets or now_ms - self.last_fire_ms >= self.delay_ms:
            self.last_fire_ms = now_ms
            return True
        return False


# -- checkpointed offsets --------------------------------------------------------------------------------
def encode_offsets(offsets: dict, topic_ids: dict | None = None) -> dict:
    """{(topic, p): offset} + {topic: id} -> the JSON-able dict Spark stores in the checkpoint."""
    by_topic: dict = {}
    for (t, p), o in sorted(offsets.items()):
        by_topic.setdefault(t, {})[str(p)] = int(o)
    out = {"offsets": by_topic}
    if topic_ids:
        out["topic_ids"] = {t: str(i) for t, i in sorted(topic_ids.items()) if t in by_topic}
    return out


def decode_offsets(obj: dict) -> tuple[dict, dict]:
    """Inverse of encode_offsets -> ({(topic, p): offset}, {topic: id})."""
    if not isinstance(obj, dict) or "offsets" not in obj:
        raise ValueError(f"not a kohort source offset: {obj!r}")
    offsets = {(t, int(p)): int(o) for t, parts in obj["offsets"].items() for p, o in parts.items()}
    return offsets, dict(obj.get("topic_ids") or {})


# -- data loss ---------------------------------------------------------------------------------------------
RETENTION = "retention"            # start offset below the log start: records deleted by retention
RECREATED = "recreated"            # the topic id changed: the topic was deleted and created again
PARTITION_GONE = "partition-gone"  # a partition the query read no longer exists
RESET = "offsets-reset"            # the log end is now below the start: truncation / unclean election


@dataclass(frozen=True)
class DataLoss:
    kind: str
    topic: str
    partition: int
    lost_from: int                 # first offset that may be lost
    lost_until: int | None         # exclusive; None = unknown
    resume_at: int | None          # where reading continues when failOnDataLoss=false
    message: str


def check_partition(tp: tuple, start: int, log_start: int | None, log_end: int | None,
                    old_topic_id: str | None, new_topic_id: str | None) -> DataLoss | None:
    """Classify what happened to the records from `start` on, given the partition's current state.

    log_start/log_end None = the partition no longer exists. Returns None when nothing is lost."""
    t, p = tp
    zero = "00000000-0000-0000-0000-000000000000"
    if old_topic_id and new_topic_id and old_topic_id != new_topic_id and zero not in (old_topic_id, new_topic_id):
        return DataLoss(RECREATED, t, p, start, None, log_start if log_start is not None else 0,
                        f"topic {t} was deleted and recreated (topic id {old_topic_id} -> {new_topic_id}): "
                        f"records of the old topic from offset {start} of partition {p} that were not yet "
                        f"read are gone; the new topic is read from its earliest offset")
    if log_start is None or log_end is None:
        return DataLoss(PARTITION_GONE, t, p, start, None, None,
                        f"partition {t}-{p} no longer exists (topic deleted or partitions reduced); "
                        f"records from offset {start} on were not read")
    if start < log_start:
        return DataLoss(RETENTION, t, p, start, log_start, log_start,
                        f"records {start}..{log_start - 1} of {t}-{p} were deleted by retention "
                        f"(log start offset is now {log_start}) before the query read them: "
                        f"{log_start - start} offsets lost")
    if start > log_end:
        return DataLoss(RESET, t, p, log_end, start, log_end,
                        f"the end of {t}-{p} moved back from at least {start} to {log_end} "
                        f"(log truncated, e.g. an unclean leader election or a recreated topic without "
                        f"topic ids); offsets {log_end}..{start - 1} now name different records")
    return None
