"""Group-coordinator configuration by Kafka's broker property names, with Kafka's defaults.

`CoordinatorConfig.from_properties(mapping)` picks the coordinator's keys out of a broker property
mapping (unrelated keys are ignored: the broker config validates names). One kohort-only key:
`group.initial.rebalance.quiet.ms`, the quiet window of the adaptive initial rebalance delay (see
kohort.broker.coordinator.coordinator's header).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# property name -> dataclass field
PROPERTY_FIELDS = {
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "group.initial.rebalance.quiet.ms": "group_initial_rebalance_quiet_ms",
    "group.max.size": "group_max_size",
    "offsets.retention.minutes": "offsets_retention_minutes",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "group.classic.new.member.join.timeout.ms": "group_new_member_join_timeout_ms",
}


@dataclass(frozen=True)
class CoordinatorConfig:
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # cap of the initial rebalance delay (Kafka's fixed delay; kohort: the upper bound of an adaptive one)
    group_initial_rebalance_delay_ms: int = 3000
    # kohort: the initial rebalance completes after this long without a new member joining
    group_initial_rebalance_quiet_ms: int = 200
    group_max_size: int = 2**31 - 1
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    # Kafka's CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS (a constant there, 5 min)
    group_new_member_join_timeout_ms: int = 300_000

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"coordinator config {name} must be an int, got {value!r}")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms > group.max.session.timeout.ms")
        if self.group_initial_rebalance_delay_ms < 0 or self.group_initial_rebalance_quiet_ms < 0:
            raise ValueError("initial rebalance delay/quiet windows must be >= 0")
        if self.group_max_size < 1:
            raise ValueError("group.max.size must be >= 1")
        if self.offsets_retention_minutes < 1 or self.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets.retention.minutes and the check interval must be >= 1")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> "CoordinatorConfig":
        kwargs = {}
        for prop, fld in PROPERTY_FIELDS.items():
            if prop in props:
                try:
                    kwargs[fld] = int(props[prop])
                except (TypeError, ValueError):
                    raise ValueError(f"bad value for {prop}: {props[prop]!r}") from None
        return cls(**kwargs)
