"""Describing configs the way Kafka's DescribeConfigs does: value, source, synonyms, type, docs.

Topic configs come from kohort.storage (effective value + whether the topic overrides it); each
maps to a broker-level synonym (Kafka's names: segment.bytes <- log.segment.bytes, ...). A config's
source is DYNAMIC_TOPIC_CONFIG when the topic sets it, STATIC_BROKER_CONFIG when the broker's
.properties changed the synonym from its default, else DEFAULT_CONFIG.
"""
from __future__ import annotations

from kohort.broker.config import SPEC as BROKER_SPEC

# DescribeConfigs config_source values (Kafka's ConfigSource)
UNKNOWN = 0
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# config_type values (v3+)
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST = 1, 2, 3, 4, 5, 6, 7

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# topic config -> (broker synonym, type, documentation)
TOPIC_CONFIG_INFO: dict[str, tuple[str | None, int, str]] = {
    "cleanup.policy": ("log.cleanup.policy", LIST,
                       "delete: drop old segments by time/size; compact: keep the latest record per key."),
    "compression.type": (None, STRING, "Codec the topic stores batches in; producer keeps the producer's."),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms", LONG,
                            "How long tombstones survive compaction."),
    "index.interval.bytes": ("log.index.interval.bytes", INT,
                             "Bytes between entries of the sparse offset index."),
    "max.compaction.lag.ms": (None, LONG, "Longest time a record may stay uncompacted."),
    "max.message.bytes": ("message.max.bytes", INT, "Largest record batch the topic accepts."),
    "message.timestamp.type": ("log.message.timestamp.type", STRING,
                               "CreateTime keeps the producer's timestamps; LogAppendTime uses the broker's clock."),
    "min.cleanable.dirty.ratio": (None, DOUBLE, "Dirty fraction of the log before compaction runs."),
    "min.compaction.lag.ms": (None, LONG, "Shortest time a record stays uncompacted."),
    "min.insync.replicas": (None, INT, "Replicas that must acknowledge acks=all writes (one node here)."),
    "retention.bytes": ("log.retention.bytes", LONG, "Size a partition may grow to before old segments go; -1 unlimited."),
    "retention.ms": ("log.retention.ms", LONG, "Age after which old segments are deleted; -1 forever."),
    "segment.bytes": ("log.segment.bytes", INT, "Size at which a new segment file is started."),
    "segment.ms": ("log.roll.ms", LONG, "Age at which a new segment file is started."),
}


def broker_value_set(config, name: str) -> bool:
    """Did the broker's properties change `name` from its default?"""
    spec = BROKER_SPEC.get(name)
    return spec is not None and config.get(name) != spec[1]


def _str(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def topic_config_entries(broker, topic: str):
    """-> [(name, value, source, synonyms [(name, value, source)], type, doc)] for a topic."""
    overrides = broker.storage.describe_configs(topic)   # (name, value, is_default)
    out = []
    for name, value, is_default in overrides:
        syn_name, ctype, doc = TOPIC_CONFIG_INFO.get(name, (None, STRING, ""))
        synonyms = []
        if not is_default:
            synonyms.append((name, value, DYNAMIC_TOPIC_CONFIG))
        if syn_name and broker_value_set(broker.config, syn_name):
            synonyms.append((syn_name, _str(broker.config[syn_name]), STATIC_BROKER_CONFIG))
        default = _default_str(name)
        synonyms.append((syn_name or name, default, DEFAULT_CONFIG))
        source = synonyms[0][2]
        out.append((name, value, source, synonyms, ctype, doc))
    return out


def _default_str(name: str) -> str:
    from kohort.storage import TOPIC_CONFIGS
    v = TOPIC_CONFIGS[name][0]
    return repr(v) if isinstance(v, float) else str(v)


def broker_config_entries(broker):
    out = []
    for name, (parser, default) in sorted(BROKER_SPEC.items()):
        value = broker.config.get(name)
        set_ = value != default
        synonyms = ([(name, _str(value), STATIC_BROKER_CONFIG)] if set_ else []) + [
            (name, _str(default), DEFAULT_CONFIG)]
        ctype = BOOLEAN if isinstance(default, bool) else INT if isinstance(default, int) else STRING
        out.append((name, _str(value), synonyms[0][2], synonyms, ctype, ""))
    return out
