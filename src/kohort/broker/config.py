"""Broker configuration by Kafka's property names, with Kafka's defaults (and kohort's where noted).

`BrokerConfig.from_properties(dict)` validates names and values; an unknown key is an error naming the
closest known key. Kafka broker settings with no meaning for one kohort node (thread pools, socket
buffers, quorum, replication, ZooKeeper: `UNUSED`, `UNUSED_PREFIXES`) are accepted with a one-line notice
each (`BrokerConfig.notices`), so a stock Kafka server.properties starts kohort; log.retention.hours/
minutes and log.roll.hours are read as Kafka reads them (the .ms setting wins). `load_properties(path)` reads a Java-style .properties file.
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
    (Kafka: "Disabling the 'classic' protocol is not supported"); share groups are never listed here (they
    are on while the share.version feature is 1, as Kafka's), kohort has no streams groups."""
    names = [x.strip().lower() for x in str(v).split(",") if x.strip()]
    unknown = [n for n in names if n not in ("classic", "consumer")]
    if unknown:
        raise ValueError(f"unsupported rebalance protocol(s) {unknown}: kohort has classic and consumer")
    if "classic" not in names:
        raise ValueError("disabling the 'classic' protocol is not supported")
    return ",".join(dict.fromkeys(names))


def _share_version(v) -> int:
    """share.version: the share-groups feature level, 0 (off) or 1 (on)."""
    n = int(str(v).strip())
    if n not in (0, 1):
        raise ValueError("share.version is 0 or 1")
    return n


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
    # transactions v2: a Produce whose implicit add meets CONCURRENT_TRANSACTIONS is retried this
    # often, for at most this long (capped by request.timeout.ms in Kafka), before it is answered
    "add.partitions.to.txn.retry.backoff.ms": (int, 20),
    "add.partitions.to.txn.retry.backoff.max.ms": (int, 100),
    # the finalized transaction.version feature advertised in ApiVersions (Kafka sets it with
    # kafka-storage format --feature): 2 makes Java 4.x clients use transactions v2 (KIP-890 part 2)
    "transaction.version": (int, 2),
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


SPEC.update({
    # share groups (KIP-932): the share.version feature (0 off, 1 on, finalized in ApiVersions) and
    # Kafka's broker defaults of the group.share.* settings
    "share.version": (_share_version, 1),
    "group.share.session.timeout.ms": (_positive_int, 45000),
    "group.share.heartbeat.interval.ms": (_positive_int, 5000),
    "group.share.max.size": (_positive_int, 200),
    "group.share.assignment.interval.ms": (int, 1000),
    "group.share.record.lock.duration.ms": (_positive_int, 30000),
    "group.share.delivery.count.limit": (_positive_int, 5),
    "group.share.partition.max.record.locks": (_positive_int, 2000),
    "group.share.max.share.sessions": (_positive_int, 2000),
    # __share_group_state (kohort.broker.share_state_runtime)
    "share.coordinator.state.topic.num.partitions": (_positive_int, 50),
    "share.coordinator.snapshot.update.records.per.snapshot": (int, 500),
})


SPEC.update({"console.listener": (str, ""), "console.allow.writes": (_b, False),
             "console.lag.sample.ms": (_positive_int, 5000)})
# security (broker/security.py): listeners and their protocols, TLS with PEM files, SASL. Each of these
# may also be given for one listener as listener.name.<listener>.<key>; SASL's JAAS config also as
# [listener.name.<listener>.]<mechanism>.sasl.jaas.config.
SECURITY_KEYS: dict[str, tuple] = {
    "listener.security.protocol.map": (str, ""),
    "sasl.enabled.mechanisms": (str, "GSSAPI"),
    "sasl.jaas.config": (str, ""),
    "sasl.server.callback.handler.class": (str, ""),
    "connections.max.reauth.ms": (int, 0),
    "ssl.keystore.type": (str, "JKS"),
    "ssl.keystore.location": (str, ""),
    "ssl.keystore.key": (str, ""),
    "ssl.keystore.certificate.chain": (str, ""),
    "ssl.key.password": (str, ""),
    "ssl.truststore.type": (str, "JKS"),
    "ssl.truststore.location": (str, ""),
    "ssl.truststore.certificates": (str, ""),
    "ssl.client.auth": (str, "none"),
    "ssl.principal.mapping.rules": (str, "DEFAULT"),
    "connection.failed.authentication.delay.ms": (int, 100),
    "sasl.server.max.receive.size": (int, 524288),
}
SPEC.update(SECURITY_KEYS)


def _authorizer_class(v) -> str:
    from kohort.broker.authorizer import AUTHORIZER_CLASSES
    s = str(v).strip()
    if s and s not in AUTHORIZER_CLASSES:
        raise ValueError(f"unsupported authorizer; use {AUTHORIZER_CLASSES[0]} (or leave empty for none)")
    return s


# authorization (broker/authorizer.py, acl_store.py): Kafka's names; an empty class name = no authorizer
SPEC.update({
    "authorizer.class.name": (_authorizer_class, ""),
    "super.users": (str, ""),
    "allow.everyone.if.no.acl.found": (_b, False),
})
_MECH_JAAS = re.compile(r"(plain|scram-sha-256|scram-sha-512|gssapi|oauthbearer)\.sasl\."
                        r"(jaas\.config|server\.callback\.handler\.class)|"
                        r"(plain|scram-sha-256|scram-sha-512|gssapi|oauthbearer)\.connections\.max\.reauth\.ms")


# Kafka broker configs that have no meaning for one kohort node: accepted (a stock Kafka server.properties
# starts kohort) with a one-line notice each, naming why. Values are not checked.
_SINGLE_NODE = "one node: there is no quorum, replication or other broker"
_THREADS = "kohort's broker is one asyncio loop: no thread pools to size"
UNUSED: dict[str, str] = {
    "process.roles": "a kohort broker is always broker and controller (KRaft combined mode)",
    "controller.listener.names": "no controller listener: its listeners are not opened",
    "inter.broker.listener.name": _SINGLE_NODE, "inter.broker.protocol.version": _SINGLE_NODE,
    "security.inter.broker.protocol": _SINGLE_NODE,
    "num.network.threads": _THREADS, "num.io.threads": _THREADS, "background.threads": _THREADS,
    "num.recovery.threads.per.data.dir": _THREADS, "num.replica.fetchers": _SINGLE_NODE,
    "num.replica.alter.log.dirs.threads": _THREADS, "log.cleaner.threads": _THREADS,
    "socket.send.buffer.bytes": "the operating system's socket buffer sizes are used",
    "socket.receive.buffer.bytes": "the operating system's socket buffer sizes are used",
    "socket.listen.backlog.size": "asyncio's listen backlog is used",
    "transaction.state.log.replication.factor": _SINGLE_NODE, "transaction.state.log.min.isr": _SINGLE_NODE,
    "share.coordinator.state.topic.replication.factor": _SINGLE_NODE,
    "share.coordinator.state.topic.min.isr": _SINGLE_NODE,
    "group.share.enable": "Kafka 4.1-4.2's switch: share groups follow the share.version feature",
    "min.insync.replicas": "one replica per partition: acks=all is the leader's write",
    "unclean.leader.election.enable": _SINGLE_NODE, "auto.leader.rebalance.enable": _SINGLE_NODE,
    "broker.rack": _SINGLE_NODE, "broker.heartbeat.interval.ms": _SINGLE_NODE,
    "broker.session.timeout.ms": _SINGLE_NODE, "metadata.log.dir": "no KRaft metadata log",
    "log.flush.interval.messages": "kohort flushes by log.flush.policy (fsync-before-ack by default)",
    "log.flush.interval.ms": "kohort flushes by log.flush.policy (fsync-before-ack by default)",
    "log.flush.scheduler.interval.ms": "kohort flushes by log.flush.policy (fsync-before-ack by default)",
    "log.cleaner.enable": "compaction always runs for cleanup.policy=compact topics",
    "log.dir.failure.timeout.ms": "one log directory",
    "log.roll.jitter.ms": "segments roll at log.roll.ms", "log.roll.jitter.hours": "segments roll at log.roll.ms",
    "metric.reporters": "metrics are served by --metrics (Prometheus)",
}
# prefixes of whole families with no meaning for one node
UNUSED_PREFIXES: dict[str, str] = {
    "zookeeper.": "KRaft only, as Kafka 4: ZooKeeper is not used",
    "controller.quorum.": "one node is its own controller quorum",
    "controller.socket.": _SINGLE_NODE,
    "replica.": _SINGLE_NODE,
    "leader.imbalance.": _SINGLE_NODE,
    "controlled.shutdown.": _SINGLE_NODE,
    "metadata.log.": "no KRaft metadata log",
    "metadata.max.": "no KRaft metadata log",
    "share.coordinator.": "share-group state is kept by the one node's share coordinator: nothing to tune",
    "group.share.min.": "group configs are checked against their own ranges, not broker bounds",
    "group.share.max.": "group configs are checked against their own ranges, not broker bounds",
    "metrics.": "metrics are served by --metrics (Prometheus)",
}
# Kafka's other time units for the same settings (the *.ms setting wins, then minutes, then hours)
TIME_UNITS: dict[str, tuple[str, int]] = {
    "log.retention.hours": ("log.retention.ms", 3600_000),
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.roll.hours": ("log.roll.ms", 3600_000),
}


def unused_reason(key: str) -> str | None:
    """Why a Kafka broker setting means nothing to a kohort broker, or None if it is not such a setting."""
    if key in UNUSED:
        return UNUSED[key]
    for prefix, why in UNUSED_PREFIXES.items():
        if key.startswith(prefix):
            return why
    return None


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
    notices: list = field(default_factory=list)     # one line per accepted-but-unused Kafka setting

    @classmethod
    def from_properties(cls, props: dict | None = None) -> "BrokerConfig":
        vals = {k: d for k, (_, d) in SPEC.items()}
        notices = []
        props = dict(props or {})
        for unit, (target, factor) in sorted(TIME_UNITS.items(), key=lambda kv: kv[1][1]):
            if unit in props:       # minutes before hours: the finer unit wins, the .ms name over both
                v = props.pop(unit)
                try:
                    ms = int(str(v).strip()) * factor
                except ValueError:
                    raise BrokerConfigError(f"bad value for {unit}: {v!r} (not a whole number)") from None
                if target not in props:
                    props[target] = ms
        for k, v in props.items():
            parser = _spec_for(k)
            if parser is None:
                why = unused_reason(k)
                if why is not None:
                    notices.append(f"{k}={v} accepted and ignored: {why}")
                    continue
                known = list(SPEC) + list(UNUSED) + list(TIME_UNITS)
                close = difflib.get_close_matches(k, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise BrokerConfigError(f"unknown broker config {k!r}{hint}")
            try:
                vals[k] = parser(v)
            except (TypeError, ValueError) as e:
                raise BrokerConfigError(f"bad value for {k}: {v!r} ({e})") from None
        return cls(vals, notices)

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
    """A Java .properties file: `key=value` / `key: value` lines, `#`/`!` comments, a trailing backslash
    continues a value on the next line (as sasl.jaas.config often is written)."""
    props = {}
    with open(path, encoding="utf-8") as fh:
        pending, start = "", 0
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not pending and (not s or s[0] in "#!"):
                continue
            if pending:
                s, lineno = pending + s, start
                pending = ""
            if (len(s) - len(s.rstrip("\\"))) % 2 == 1:
                pending, start = s[:-1], lineno
                continue
            for sep in ("=", ":"):
                if sep in s:
                    k, v = s.split(sep, 1)
                    props[k.strip()] = v.strip()
                    break
            else:
                raise BrokerConfigError(f"{path}:{lineno}: expected key=value, got {s!r}")
    return props
