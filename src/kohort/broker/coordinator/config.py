"""Group-coordinator configuration by Kafka's broker property names, with Kafka's defaults.

`CoordinatorConfig.from_properties(mapping)` picks the coordinator's keys out of a broker property
mapping (unrelated keys are ignored: the broker config validates names). One kohort-only key:
`group.initial.rebalance.quiet.ms`, the quiet window of the adaptive initial rebalance delay (see
kohort.broker.coordinator.coordinator's header).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kohort.errors import ConfigError

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
FIELD_PROPERTIES = {fld: prop for prop, fld in PROPERTY_FIELDS.items()}


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
        """Raises ConfigError (a ValueError) naming the Kafka property that is wrong."""
        for name, value in self.__dict__.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{FIELD_PROPERTIES[name]} must be an integer, got {value!r}")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(f"group.min.session.timeout.ms ({self.group_min_session_timeout_ms}) is above "
                              f"group.max.session.timeout.ms ({self.group_max_session_timeout_ms})")
        for name in ("group_initial_rebalance_delay_ms", "group_initial_rebalance_quiet_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{FIELD_PROPERTIES[name]} must be >= 0, got {getattr(self, name)}")
        for name in ("group_max_size", "offsets_retention_minutes", "offsets_retention_check_interval_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{FIELD_PROPERTIES[name]} must be >= 1, got {getattr(self, name)}")

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
                    raise ConfigError(f"{prop} must be an integer, got {props[prop]!r}") from None
        return cls(**kwargs)
