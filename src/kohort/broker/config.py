"""Broker configuration by Kafka's property names, with Kafka's defaults (and kohort's where noted).

`BrokerConfig.from_properties(dict)` validates names and values; an unknown key is an error naming the
closest known key. `load_properties(path)` reads a Java-style .properties file.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from kohort.errors import KohortError


class BrokerConfigError(KohortError, ValueError):
    pass


def _b(v):
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


def _rebalance_protocols(v) -> str:
    """group.coordinator.rebalance.protocols: a list of classic/consumer that must contain classic
    (Kafka: "Disabling the 'classic' protocol is not supported"); kohort has no share/streams groups."""
    names = [x.strip().lower() for x in str(v).split(",") if x.strip()]
    unknown = [n for n in names if n not in ("classic", "consumer")]
    if unknown:
        raise ValueError(f"unsupported rebalance protocol(s) {unknown}: kohort has classic and consumer")
    if "classic" not in names:
        raise ValueError("disabling the 'classic' protocol is not supported")
    return ",".join(dict.fromkeys(names))


# name -> (parser, default). Topic-level defaults use the broker's log.* names (Kafka's mapping).
SPEC: dict[str, tuple] = {
    "node.id": (int, 0),
    "broker.id": (int, 0),
    "cluster.id": (str, ""),
    "listeners": (str, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": (str, ""),
    "log.dirs": (str, ""),
    "log.dir": (str, ""),
    "num.partitions": (int, 1),
    "default.replication.factor": (int, 1),
    "auto.create.topics.enable": (_b, True),
    "delete.topic.enable": (_b, True),
    "socket.request.max.bytes": (int, 100 * 1024 * 1024),
    "message.max.bytes": (int, 1048588),
    "connections.max.idle.ms": (int, 600000),
    "queued.max.requests": (int, 500),
    # log defaults for topics (topic-level names in parentheses are what topics use)
    "log.segment.bytes": (int, 1024 * 1024 * 1024),
    "log.roll.ms": (int, 7 * 24 * 3600 * 1000),
    "log.retention.ms": (int, 7 * 24 * 3600 * 1000),
    "log.retention.bytes": (int, -1),
    "log.cleanup.policy": (str, "delete"),
    "log.index.interval.bytes": (int, 4096),
    "log.message.timestamp.type": (str, "CreateTime"),
    "log.cleaner.delete.retention.ms": (int, 24 * 3600 * 1000),
    "log.retention.check.interval.ms": (int, 300000),
    # kohort: durability policy (see DESIGN.md). fsync-before-ack: acks=1/all answered after fsync
    # (group commit across concurrent producers); os: rely on the page cache like Kafka's defaults.
    "log.flush.policy": (str, "fsync-before-ack"),
    # group coordinator
    "group.min.session.timeout.ms": (int, 6000),
    "group.max.session.timeout.ms": (int, 1800000),
    "group.initial.rebalance.delay.ms": (int, 3000),
    "group.max.size": (int, 2**31 - 1),
    # KIP-848 consumer-protocol groups (Kafka's GroupCoordinatorConfig names and defaults; kohort
    # applies the min/max bounds but lets them go below Kafka's floors, e.g. for tests)
    "group.coordinator.rebalance.protocols": (_rebalance_protocols, "classic,consumer"),
    "group.consumer.session.timeout.ms": (int, 45000),
    "group.consumer.min.session.timeout.ms": (int, 45000),
    "group.consumer.max.session.timeout.ms": (int, 60000),
    "group.consumer.heartbeat.interval.ms": (int, 5000),
    "group.consumer.min.heartbeat.interval.ms": (int, 5000),
    "group.consumer.max.heartbeat.interval.ms": (int, 15000),
    "group.consumer.max.size": (int, 2**31 - 1),
    "group.consumer.assignors": (str, "uniform,range"),
    "offsets.topic.num.partitions": (int, 50),
    "offsets.topic.replication.factor": (int, 1),
    "offsets.topic.segment.bytes": (int, 100 * 1024 * 1024),
    "offsets.retention.minutes": (int, 10080),
    "offsets.retention.check.interval.ms": (int, 600000),
    "offset.metadata.max.bytes": (int, 4096),
    "offsets.commit.timeout.ms": (int, 5000),
    # transactions / idempotence
    "transactional.id.expiration.ms": (int, 7 * 24 * 3600 * 1000),
    "producer.id.expiration.ms": (int, 86400000),
    "transaction.max.timeout.ms": (int, 900000),
    "transaction.state.log.num.partitions": (int, 50),
    "transaction.state.log.segment.bytes": (int, 100 * 1024 * 1024),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (int, 10000),
}
SPEC.update({
    # kohort: the adaptive initial-rebalance quiet window (see broker/coordinator). A new group's first
    # join completes after this much quiet (no new member), but never later than
    # group.initial.rebalance.delay.ms after it started.
    "group.initial.rebalance.quiet.ms": (int, 200),
    # kohort: upper bound on a topic's partition count (CreateTopics, CreatePartitions, auto-create);
    # Kafka has none, but one request must not be able to make a single node create millions of
    # partition directories.
    "kohort.topic.max.partitions": (int, 10000),
})
# kohort: the web console (broker/console/), off unless console.listener=HOST:PORT (or --console);
# read-only unless console.allow.writes; lag sampled every console.lag.sample.ms
def _positive_int(v) -> int:
    n = int(v)
    if n <= 0:
        raise ValueError("must be > 0")
    return n


SPEC.update({"console.listener": (str, ""), "console.allow.writes": (_b, False),
             "console.lag.sample.ms": (_positive_int, 5000)})
# security (broker/security.py): listeners and their protocols, TLS with PEM files, SASL. Each of these
# may also be given for one listener as listener.name.<listener>.<key>; SASL's JAAS config also as
# [listener.name.<listener>.]<mechanism>.sasl.jaas.config.
SECURITY_KEYS: dict[str, tuple] = {
    "listener.security.protocol.map": (str, ""),
    "sasl.enabled.mechanisms": (str, "GSSAPI"),
    "sasl.jaas.config": (str, ""),
    "ssl.keystore.type": (str, "JKS"),
    "ssl.keystore.location": (str, ""),
    "ssl.keystore.key": (str, ""),
    "ssl.keystore.certificate.chain": (str, ""),
    "ssl.key.password": (str, ""),
    "ssl.truststore.type": (str, "JKS"),
    "ssl.truststore.location": (str, ""),
    "ssl.truststore.certificates": (str, ""),
    "ssl.client.auth": (str, "none"),
    "connection.failed.authentication.delay.ms": (int, 100),
    "sasl.server.max.receive.size": (int, 524288),
}
SPEC.update(SECURITY_KEYS)
_MECH_JAAS = re.compile(r"(plain|scram-sha-256|scram-sha-512|gssapi|oauthbearer)\.sasl\.jaas\.config")


def _spec_for(key: str):
    """The parser of `key`, also for listener-prefixed and per-mechanism security keys; else None."""
    if key in SPEC:
        return SPEC[key][0]
    rest = key
    m = re.fullmatch(r"listener\.name\.[a-z0-9_]+\.(.+)", key)
    if m:
        rest = m.group(1)
        if rest in SECURITY_KEYS and rest != "listener.security.protocol.map":
            return SECURITY_KEYS[rest][0]
    if _MECH_JAAS.fullmatch(rest):
        return str
    return None


@dataclass
class BrokerConfig:
    values: dict = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: dict | None = None) -> "BrokerConfig":
        vals = {k: d for k, (_, d) in SPEC.items()}
        for k, v in (props or {}).items():
            parser = _spec_for(k)
            if parser is None:
                close = difflib.get_close_matches(k, SPEC.keys(), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise BrokerConfigError(f"unknown broker config {k!r}{hint}")
            try:
                vals[k] = parser(v)
            except (TypeError, ValueError) as e:
                raise BrokerConfigError(f"bad value for {k}: {v!r} ({e})") from None
        return cls(vals)

    def __getitem__(self, k):
        return self.values[k]

    def get(self, k, default=None):
        return self.values.get(k, default)

    def topic_defaults(self) -> dict:
        """Topic-level config defaults derived from the broker's log.* settings (Kafka's mapping)."""
        v = self.values
        return {
            "segment.bytes": v["log.segment.bytes"],
            "segment.ms": v["log.roll.ms"],
            "retention.ms": v["log.retention.ms"],
            "retention.bytes": v["log.retention.bytes"],
            "cleanup.policy": v["log.cleanup.policy"],
            "index.interval.bytes": v["log.index.interval.bytes"],
            "message.timestamp.type": v["log.message.timestamp.type"],
            "delete.retention.ms": v["log.cleaner.delete.retention.ms"],
            "max.message.bytes": v["message.max.bytes"],
        }


def load_properties(path: str) -> dict:
    props = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s or s[0] in "#!":
                continue
            for sep in ("=", ":"):
                if sep in s:
                    k, v = s.split(sep, 1)
                    props[k.strip()] = v.strip()
                    break
            else:
                raise BrokerConfigError(f"{path}:{lineno}: expected key=value, got {s!r}")
    return props
