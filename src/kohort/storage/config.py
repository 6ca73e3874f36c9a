"""Per-topic log configuration by Kafka's topic-config names and defaults, and the broker-level
storage options.

`LogConfig.from_overrides({"segment.bytes": "1048576", ...})` validates names and values (unknown
names are an InvalidConfigError naming the closest known one); the effective values are attributes
in snake_case (`cfg.segment_bytes`), `cfg.overrides` holds only what was set, and `cfg.describe()`
lists every config for DescribeConfigs.

Configs the storage acts on: segment.bytes, segment.ms, index.interval.bytes, retention.ms,
retention.bytes, cleanup.policy, delete.retention.ms, min.compaction.lag.ms, max.compaction.lag.ms,
min.cleanable.dirty.ratio, message.timestamp.type, max.message.bytes. Configs stored for the broker
to enforce (the storage only keeps them): compression.type, min.insync.replicas.

Broker-level flush policy (our own name, not a Kafka config) — `log.flush.policy`:
  * "fsync-before-ack" (default): the broker calls `Storage.sync_dirty()` before acknowledging a
    produce with acks=1/all; concurrent callers share one fsync (group commit). A machine crash
    loses nothing that was acknowledged.
  * "os": Kafka's default (flush.ms/flush.messages = Long.MAX_VALUE): rely on the page cache;
    `sync_dirty()` returns at once. A process kill loses nothing acknowledged; a machine crash can.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from kohort.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1

FLUSH_POLICIES = ("fsync-before-ack", "os")
DEFAULT_FLUSH_POLICY = "fsync-before-ack"


def _int(lo: int, hi: int = LONG_MAX):
    def parse(name, v):
        if isinstance(v, bool):
            raise InvalidConfigError(f"{name}: expected an integer, got {v!r}")
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{name}: expected an integer, got {v!r}") from None
        if not lo <= n <= hi:
            raise InvalidConfigError(f"{name}: {n} is out of range [{lo}, {hi}]")
        return n
    return parse


def _float(lo: float, hi: float):
    def parse(name, v):
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{name}: expected a number, got {v!r}") from None
        if not lo <= x <= hi:
            raise InvalidConfigError(f"{name}: {x} is out of range [{lo}, {hi}]")
        return x
    return parse


def _choice(*allowed: str):
    def parse(name, v):
        s = str(v)
        if s not in allowed:
            raise InvalidConfigError(f"{name}: {s!r} is not one of {', '.join(allowed)}")
        return s
    return parse


def _cleanup_policy(name, v):
    parts = [p.strip() for p in str(v).split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise InvalidConfigError(f"{name}: {v!r} must be a list of 'delete' and/or 'compact'")
    return ",".join(sorted(set(parts), key=("compact", "delete").index))


# name -> (default, parser)
TOPIC_CONFIGS: dict[str, tuple[object, object]] = {
    "cleanup.policy": ("delete", _cleanup_policy),
    "compression.type": ("producer", _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    "delete.retention.ms": (86_400_000, _int(0)),
    "index.interval.bytes": (4096, _int(0, 2**31 - 1)),
    "max.compaction.lag.ms": (LONG_MAX, _int(1)),
    "max.message.bytes": (1_048_588, _int(0, 2**31 - 1)),
    "message.timestamp.type": ("CreateTime", _choice("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": (0.5, _float(0.0, 1.0)),
    "min.compaction.lag.ms": (0, _int(0)),
    "min.insync.replicas": (1, _int(1, 2**31 - 1)),
    "retention.bytes": (-1, _int(-1)),
    "retention.ms": (604_800_000, _int(-1)),
    "segment.bytes": (1_073_741_824, _int(14, 2**31 - 1)),
    "segment.ms": (604_800_000, _int(1)),
}


def _attr(name: str) -> str:
    return name.replace(".", "_")


def closest_name(name: str, known) -> str | None:
    m = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return m[0] if m else None


def validate_name(name: str) -> None:
    if name not in TOPIC_CONFIGS:
        hint = closest_name(name, TOPIC_CONFIGS)
        raise InvalidConfigError(
            f"unknown topic config {name!r}" + (f" (did you mean {hint!r}?)" if hint else ""))


@dataclass(frozen=True)
class LogConfig:
    """Effective topic configuration. Build with `from_overrides`; attributes are snake_case."""

    overrides: dict
    cleanup_policy: str = "delete"
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    index_interval_bytes: int = 4096
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    retention_bytes: int = -1
    retention_ms: int = 604_800_000
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000

    @classmethod
    def from_overrides(cls, overrides: dict | None = None) -> "LogConfig":
        parsed: dict = {}
        for name, value in (overrides or {}).items():
            validate_name(name)
            if value is None:        # None = back to the default
                continue
            parsed[name] = TOPIC_CONFIGS[name][1](name, value)
        values = {_attr(n): parsed.get(n, d) for n, (d, _) in TOPIC_CONFIGS.items()}
        return cls(overrides={n: _to_str(v) for n, v in parsed.items()}, **values)

    def with_overrides(self, changes: dict) -> "LogConfig":
        """A new config: `changes` set (value None deletes an override) on top of this one's
        overrides (IncrementalAlterConfigs SET/DELETE)."""
        merged = dict(self.overrides)
        for name, value in changes.items():
            validate_name(name)
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        return LogConfig.from_overrides(merged)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def get(self, name: str):
        validate_name(name)
        return getattr(self, _attr(name))

    def describe(self) -> list[tuple[str, str, bool]]:
        """(name, value as Kafka prints it, is_default) for every topic config, sorted by name."""
        return [(n, _to_str(getattr(self, _attr(n))), n not in self.overrides)
                for n in sorted(TOPIC_CONFIGS)]


def _to_str(v) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def check_flush_policy(policy: str) -> str:
    if policy not in FLUSH_POLICIES:
        raise InvalidConfigError(
            f"log.flush.policy: {policy!r} is not one of {', '.join(FLUSH_POLICIES)}")
    return policy
