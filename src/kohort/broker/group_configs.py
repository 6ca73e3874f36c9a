"""Group configs (KIP-848/KIP-932): per-group settings on the GROUP config resource (type 32), set
with IncrementalAlterConfigs and read with DescribeConfigs, as Kafka's GroupConfig.

`GROUP_CONFIGS` names each config Kafka 4.3 knows for consumer and share groups, its config type
(DescribeConfigs' ConfigType), the broker setting that gives its default and its check. An unknown
name or a bad value is refused (`GroupConfigError`, answered INVALID_CONFIG); a change is checked
on the group's whole config merged over the broker defaults (a share group's heartbeat interval
must stay below its session timeout). `GroupConfigStore` keeps the values by group id (pure: no
I/O; its file is kohort.broker.group_config_file's).

Who reads them: the share partitions (kohort.broker.share_leader) read share.auto.offset.reset,
share.isolation.level, share.record.lock.duration.ms, share.delivery.count.limit,
share.partition.max.record.locks and share.renew.acknowledge.enable when a share partition is
made; the share-group machine reads share.session.timeout.ms, share.heartbeat.interval.ms and
share.assignment.interval.ms at each heartbeat. The consumer.* ones are stored and described; the
consumer-group machine uses the broker's settings.
"""
from __future__ import annotations

import re
from typing import Callable, Mapping

STRING, INT, BOOLEAN = 2, 3, 1        # DescribeConfigs ConfigType
GROUP_CONFIG_SOURCE, DEFAULT_CONFIG_SOURCE = 8, 5

_DURATION = re.compile(r"^P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$", re.IGNORECASE)


class GroupConfigError(ValueError):
    """A group config change Kafka refuses (INVALID_CONFIG)."""


def _int_in(lo: int, hi: int) -> Callable[[str], None]:
    def check(v: str) -> None:
        try:
            n = int(v)
        except ValueError:
            raise GroupConfigError(f"{v!r} is not a whole number") from None
        if not lo <= n <= hi:
            raise GroupConfigError(f"{n} is not in [{lo}, {hi}]")
    return check


def _one_of(*allowed: str) -> Callable[[str], None]:
    def check(v: str) -> None:
        if v not in allowed:
            raise GroupConfigError(f"{v!r} is not one of {', '.join(allowed)}")
    return check


def _offset_reset(v: str) -> None:
    if v in ("earliest", "latest"):
        return
    if v.startswith("by_duration:"):
        d = v.split(":", 1)[1]
        if _DURATION.match(d) and d.upper() not in ("P", "PT"):
            return
        raise GroupConfigError(f"{d!r} is not an ISO-8601 duration (e.g. PT1H, P1D)")
    raise GroupConfigError(f"{v!r} is not earliest, latest or by_duration:<ISO-8601 duration>")


_INT_MAX = (1 << 31) - 1
# name -> (config type, broker setting giving its default or None, default when there is none, check)
GROUP_CONFIGS: dict[str, tuple[int, str | None, str, Callable[[str], None]]] = {
    "consumer.session.timeout.ms": (INT, "group.consumer.session.timeout.ms", "45000", _int_in(1, _INT_MAX)),
    "consumer.heartbeat.interval.ms": (INT, "group.consumer.heartbeat.interval.ms", "5000", _int_in(1, _INT_MAX)),
    "share.session.timeout.ms": (INT, "group.share.session.timeout.ms", "45000", _int_in(1, _INT_MAX)),
    "share.heartbeat.interval.ms": (INT, "group.share.heartbeat.interval.ms", "5000", _int_in(1, _INT_MAX)),
    "share.record.lock.duration.ms": (INT, "group.share.record.lock.duration.ms", "30000", _int_in(1000, 3600000)),
    "share.delivery.count.limit": (INT, "group.share.delivery.count.limit", "5", _int_in(2, 10)),
    "share.partition.max.record.locks": (INT, "group.share.partition.max.record.locks", "2000",
                                         _int_in(100, 10000)),
    "share.assignment.interval.ms": (INT, "group.share.assignment.interval.ms", "1000", _int_in(0, 15000)),
    "share.auto.offset.reset": (STRING, None, "latest", _offset_reset),
    "share.isolation.level": (STRING, None, "read_uncommitted", _one_of("read_committed", "read_uncommitted")),
    "share.renew.acknowledge.enable": (BOOLEAN, None, "true", _one_of("true", "false")),
}
_PAIRS = (("share.heartbeat.interval.ms", "share.session.timeout.ms"),
          ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"))


def default_value(name: str, broker_config: Mapping[str, object]) -> str:
    _, broker_key, fallback, _ = GROUP_CONFIGS[name]
    if broker_key is not None and broker_config.get(broker_key) is not None:
        return str(broker_config.get(broker_key))
    return fallback


class GroupConfigStore:
    def __init__(self, broker_config: Mapping[str, object], groups: Mapping[str, Mapping[str, str]] | None = None,
                 on_change: Callable[[dict[str, dict[str, str]]], None] | None = None) -> None:
        self.broker_config = broker_config
        self._groups: dict[str, dict[str, str]] = {g: dict(v) for g, v in (groups or {}).items() if v}
        self.on_change = on_change          # called with every group's configs after a change

    def get(self, group_id: str, default: dict | None = None) -> dict[str, str]:
        """The configs set on `group_id` (name -> value), without defaults."""
        return dict(self._groups.get(group_id, default or {}))

    def effective(self, group_id: str, name: str) -> str:
        return self._groups.get(group_id, {}).get(name) or default_value(name, self.broker_config)

    def describe(self, group_id: str) -> list[tuple[str, str, int, int]]:
        """(name, value, source, config type) of every group config, sorted by name."""
        own = self._groups.get(group_id, {})
        return [(n, own[n], GROUP_CONFIG_SOURCE, GROUP_CONFIGS[n][0]) if n in own
                else (n, default_value(n, self.broker_config), DEFAULT_CONFIG_SOURCE, GROUP_CONFIGS[n][0])
                for n in sorted(GROUP_CONFIGS)]

    def alter(self, group_id: str, changes: Mapping[str, str | None], validate_only: bool = False) -> None:
        """Apply SET (value) / DELETE (None) changes, all or nothing; GroupConfigError when refused."""
        merged = dict(self._groups.get(group_id, {}))
        for name, value in changes.items():
            if name not in GROUP_CONFIGS:
                raise GroupConfigError(f"unknown group config {name!r}")
            if value is None:
                merged.pop(name, None)
                continue
            try:
                GROUP_CONFIGS[name][3](str(value))
            except GroupConfigError as e:
                raise GroupConfigError(f"invalid value for {name}: {e}") from None
            merged[name] = str(value)
        for hb, session in _PAIRS:
            h = int(merged.get(hb) or default_value(hb, self.broker_config))
            s = int(merged.get(session) or default_value(session, self.broker_config))
            if (hb in changes or session in changes) and h >= s:
                raise GroupConfigError(f"{hb} ({h}) must be less than {session} ({s})")
        if not validate_only:
            if merged:
                self._groups[group_id] = merged
            else:
                self._groups.pop(group_id, None)
            if self.on_change is not None:
                self.on_change({g: dict(v) for g, v in self._groups.items()})
