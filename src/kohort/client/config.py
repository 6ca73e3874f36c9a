"""Client configuration by Kafka's dotted names, with Kafka's defaults, validated up front.

`load_config(role, user)` takes a dict such as ``{"bootstrap.servers": "h:9092", "group.id": "g"}``
and returns a `Config` (a read-only mapping holding every key of that role, defaults filled in).
Roles are "consumer", "producer" and "admin"; each has its own key set on top of the common
(connection) keys. Values may be given as Python values or as strings the way a .properties file
holds them ("true", "500"). An unknown key is an error naming the closest known key (difflib).

Deliberate differences from Java's defaults, each for a reason:
* receive.buffer.bytes / send.buffer.bytes default to -1 (leave the OS to autotune, as librdkafka
  does) -- pinning 64 KiB disables Linux autotuning and halves consumer throughput on loopback.
* client.id defaults to "kohort".
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from kohort.errors import ConfigError

_REQUIRED = object()


class Key:
    """One configuration key: its type ('int', 'bool', 'str', 'list', 'choice', 'callable', 'any'),
    default, allowed range or choices, and whether it may be None."""

    __slots__ = ("name", "kind", "default", "lo", "hi", "choices", "nullable", "doc")

    def __init__(self, name, kind, default, lo=None, hi=None, choices=None, nullable=False, doc=""):
        self.name, self.kind, self.default = name, kind, default
        self.lo, self.hi, self.choices, self.nullable, self.doc = lo, hi, choices, nullable, doc

    def coerce(self, value: Any) -> Any:
        n = self.name
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(f"{n} must not be None")
        k = self.kind
        if k == "int":
            if isinstance(value, bool):
                raise ConfigError(f"{n} must be an integer, got {value!r}")
            if isinstance(value, str):
                try:
                    value = int(value.strip())
                except ValueError:
                    raise ConfigError(f"{n} must be an integer, got {value!r}") from None
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int):
                raise ConfigError(f"{n} must be an integer, got {value!r}")
            if self.lo is not None and value < self.lo:
                raise ConfigError(f"{n} must be >= {self.lo}, got {value}")
            if self.hi is not None and value > self.hi:
                raise ConfigError(f"{n} must be <= {self.hi}, got {value}")
            return value
        if k == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            raise ConfigError(f"{n} must be true or false, got {value!r}")
        if k == "str":
            if not isinstance(value, str):
                raise ConfigError(f"{n} must be a string, got {value!r}")
            return value
        if k == "choice":
            v = str(value).strip().lower() if isinstance(value, str) else value
            if v not in self.choices:
                shown = ", ".join(dict.fromkeys(map(str, self.choices)))   # "1" and 1 are listed once
                raise ConfigError(f"{n} must be one of {shown}; got {value!r}")
            return v
        if k == "list":
            if isinstance(value, str):
                items = [x.strip() for x in value.split(",") if x.strip()]
            elif isinstance(value, (list, tuple)):
                items = [str(x).strip() for x in value]
            else:
                raise ConfigError(f"{n} must be a comma-separated string or a list, got {value!r}")
            if self.choices is not None:
                bad = [x for x in items if x not in self.choices]
                if bad:
                    raise ConfigError(f"{n}: unknown value(s) {', '.join(bad)}; known: {', '.join(self.choices)}")
            return items
        if k == "callable":
            if not callable(value):
                raise ConfigError(f"{n} must be callable, got {value!r}")
            return value
        return value


def _k(*a, **kw) -> Key:
    return Key(*a, **kw)


_MECHS = ("plain", "scram-sha-256", "scram-sha-512", "oauthbearer")
_I32 = (1 << 31) - 1
_I64 = (1 << 63) - 1

COMMON_KEYS = [
    _k("bootstrap.servers", "list", _REQUIRED, doc="host:port[,host:port...] to discover the cluster from"),
    _k("client.id", "str", "kohort"),
    _k("client.rack", "str", ""),
    _k("request.timeout.ms", "int", 30000, lo=0, hi=_I32),
    _k("default.api.timeout.ms", "int", 60000, lo=0, hi=_I32),
    _k("reconnect.backoff.ms", "int", 50, lo=0),
    _k("reconnect.backoff.max.ms", "int", 1000, lo=0),
    _k("retry.backoff.ms", "int", 100, lo=0),
    _k("retry.backoff.max.ms", "int", 1000, lo=0),
    _k("socket.connection.setup.timeout.ms", "int", 10000, lo=0),
    _k("socket.connection.setup.timeout.max.ms", "int", 30000, lo=0),
    _k("connections.max.idle.ms", "int", 540000, lo=-1),
    _k("metadata.max.age.ms", "int", 300000, lo=0),
    _k("receive.buffer.bytes", "int", -1, lo=-1),
    _k("send.buffer.bytes", "int", -1, lo=-1),
    # security (librdkafka's names; KIP-43/KIP-84 SASL, PEM files for TLS)
    _k("security.protocol", "choice", "plaintext", choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")),
    _k("sasl.mechanism", "choice", None, nullable=True, choices=_MECHS),
    _k("sasl.mechanisms", "choice", None, nullable=True, choices=_MECHS,
       doc="librdkafka's name for sasl.mechanism"),
    _k("sasl.username", "str", None, nullable=True),
    _k("sasl.password", "str", None, nullable=True),
    _k("sasl.jaas.config", "str", None, nullable=True,
       doc="Java's form (Plain/ScramLoginModule required username=... password=...;), for Spark's kafka.* options"),
    # OAUTHBEARER (KIP-255): a token callback, librdkafka's (confluent-kafka's) `oauth_cb`, called with
    # sasl.oauthbearer.config and returning (token, expiry seconds since the epoch[, principal[,
    # extensions]]); or librdkafka's unsecured JWT for tests (enable.sasl.oauthbearer.unsecure.jwt with
    # sasl.oauthbearer.config="principal=NAME [scope=a,b] [lifeSeconds=N] [extension_K=V]"); or Java's
    # OAuthBearerLoginModule unsecuredLogin* options in sasl.jaas.config
    _k("oauth_cb", "callable", None, nullable=True),
    _k("sasl.oauthbearer.config", "str", None, nullable=True),
    _k("enable.sasl.oauthbearer.unsecure.jwt", "bool", False),
    _k("sasl.oauthbearer.method", "choice", "default", choices=("default",),
       doc="OIDC (librdkafka's 'oidc', KIP-768) is not implemented: use oauth_cb"),
    _k("ssl.ca.location", "str", None, nullable=True, doc="PEM file of the CA(s) to trust (default: the system's)"),
    _k("ssl.certificate.location", "str", None, nullable=True, doc="PEM client certificate (mutual TLS)"),
    _k("ssl.key.location", "str", None, nullable=True, doc="PEM private key of ssl.certificate.location"),
    _k("ssl.key.password", "str", None, nullable=True),
    _k("ssl.ca.pem", "str", None, nullable=True, doc="the CA certificate(s) as a PEM string"),
    _k("ssl.certificate.pem", "str", None, nullable=True, doc="the client certificate (chain) as a PEM string"),
    _k("ssl.key.pem", "str", None, nullable=True, doc="the client private key as a PEM string"),
    _k("ssl.endpoint.identification.algorithm", "choice", "https", choices=("https", "none", "")),
    _k("client.dns.lookup", "choice", "use_all_dns_ips", choices=("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")),
    _k("metadata.recovery.strategy", "choice", "rebootstrap", choices=("none", "rebootstrap")),
]

# librdkafka's statistics (kohort.client.stats), for consumers and producers
_STATS = [_k("statistics.interval.ms", "int", 0, lo=0, doc="how often stats_cb gets statistics; 0: never"),
          _k("stats_cb", "callable", None, nullable=True,
             doc="called with a dict of statistics (kohort.client.stats) every statistics.interval.ms")]

CONSUMER_KEYS = [
    _k("group.id", "str", None, nullable=True),
    _k("group.instance.id", "str", None, nullable=True),
    _k("group.protocol", "choice", "classic", choices=("classic", "consumer"),
       doc="consumer: the KIP-848 protocol (ConsumerGroupHeartbeat, broker-side assignment)"),
    _k("group.remote.assignor", "str", None, nullable=True,
       doc="group.protocol=consumer: the broker-side assignor to ask for (uniform, range); default: the broker's"),
    _k("session.timeout.ms", "int", 45000, lo=1, hi=_I32),
    _k("heartbeat.interval.ms", "int", 3000, lo=1, hi=_I32),
    _k("max.poll.interval.ms", "int", 300000, lo=1, hi=_I32),
    _k("max.poll.records", "int", 500, lo=1, hi=_I32),
    _k("auto.offset.reset", "choice", "latest", choices=("earliest", "latest", "none")),
    _k("enable.auto.commit", "bool", True),
    _k("auto.commit.interval.ms", "int", 5000, lo=0),
    _k("partition.assignment.strategy", "list", ["range", "cooperative-sticky"],
       choices=("range", "roundrobin", "sticky", "cooperative-sticky")),
    _k("fetch.min.bytes", "int", 1, lo=0),
    _k("fetch.max.bytes", "int", 52428800, lo=0),
    _k("fetch.max.wait.ms", "int", 500, lo=0),
    _k("max.partition.fetch.bytes", "int", 1048576, lo=0),
    _k("isolation.level", "choice", "read_uncommitted", choices=("read_uncommitted", "read_committed")),
    _k("check.crcs", "bool", True),
    _k("allow.auto.create.topics", "bool", True),
    _k("exclude.internal.topics", "bool", True),
    _k("key.deserializer", "callable", None, nullable=True),
    _k("value.deserializer", "callable", None, nullable=True),
    _k("internal.leave.group.on.close", "bool", True),
    *_STATS,
]

PRODUCER_KEYS = [
    _k("acks", "choice", "all", choices=("all", "-1", "0", "1", -1, 0, 1)),
    _k("batch.size", "int", 1_000_000, lo=0),         # librdkafka's; Java's is 16384 (README: Producer)
    _k("linger.ms", "int", 5, lo=0),
    _k("buffer.memory", "int", 33554432, lo=0),
    _k("compression.type", "choice", "none", choices=("none", "gzip", "snappy", "lz4", "zstd")),
    _k("compression.gzip.level", "int", -1, lo=-1, hi=9),
    _k("compression.lz4.level", "int", 9, lo=1, hi=17),
    _k("compression.zstd.level", "int", 3, lo=-131072, hi=22),
    _k("retries", "int", _I32, lo=0),
    _k("delivery.timeout.ms", "int", 120000, lo=0),
    _k("max.in.flight.requests.per.connection", "int", 5, lo=1),
    _k("enable.idempotence", "bool", True),
    _k("max.request.size", "int", 1048576, lo=0),
    _k("max.block.ms", "int", 60000, lo=0),
    _k("transactional.id", "str", None, nullable=True),
    _k("transaction.timeout.ms", "int", 60000, lo=1),
    _k("partitioner.class", "callable", None, nullable=True),
    _k("partitioner.ignore.keys", "bool", False),
    _k("partitioner.adaptive.partitioning.enable", "bool", True),
    _k("key.serializer", "callable", None, nullable=True),
    _k("value.serializer", "callable", None, nullable=True),
    *_STATS,
]

ADMIN_KEYS: list[Key] = []

ROLES: dict[str, dict[str, Key]] = {
    role: {k.name: k for k in COMMON_KEYS + extra}
    for role, extra in (("consumer", CONSUMER_KEYS), ("producer", PRODUCER_KEYS), ("admin", ADMIN_KEYS))
}


class Config(Mapping):
    """A validated, complete, read-only configuration of one role."""

    def __init__(self, role: str, values: dict[str, Any], given: frozenset):
        self.role = role
        self._values = values
        self.given = given          # the keys the user set explicitly

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(_unknown_message(self.role, key)) from None

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: ("[hidden]" if "password" in k or k.endswith(("jaas.config", "key.pem")) else v) for k, v in self._values.items() if k in self.given}
        return f"Config({self.role}, {shown})"

    def with_overrides(self, **by_name) -> "Config":
        """A copy with some keys changed (names with dots given as a dict: with_overrides(**{"a.b": 1}))."""
        merged = {k: self._values[k] for k in self.given}
        merged.update(by_name)
        return load_config(self.role, merged)


def _unknown_message(role: str, key: str) -> str:
    known = ROLES[role]
    where = f"unknown {role} configuration key {key!r}"
    other = [r for r, keys in ROLES.items() if key in keys and r != role]
    if other:
        return f"{where}; it is a {other[0]} setting"
    close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.5)
    if close:
        return f"{where}; did you mean {close[0]!r}?"
    return where


def load_config(role: str, user: Mapping[str, Any] | None) -> Config:
    """Validate `user` settings for `role` and fill in every default. Raises ConfigError."""
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    if isinstance(user, Config):
        user = {k: user[k] for k in user.given}
    user = dict(user or {})
    keys = ROLES[role]
    for name in user:
        if name not in keys:
            raise ConfigError(_unknown_message(role, name))
    values: dict[str, Any] = {}
    for name, key in keys.items():
        if name in user:
            values[name] = key.coerce(user[name])
        elif key.default is _REQUIRED:
            raise ConfigError(f"{name} is required ({key.doc})")
        else:
            d = key.default
            values[name] = list(d) if isinstance(d, list) else d
    _check(role, values, frozenset(user))
    return Config(role, values, frozenset(user))


def parse_bootstrap(servers: list[str]) -> list[tuple[str, int]]:
    """["h1:9092", "[::1]:9093"] -> [("h1", 9092), ("::1", 9093)], or ConfigError naming the bad entry."""
    out = []
    for s in servers:
        host, sep, port = s.rpartition(":")
        if s.startswith("PLAINTEXT://"):
            host, sep, port = s[len("PLAINTEXT://"):].rpartition(":")
        if not sep or not host or not port.isdigit() or not (0 < int(port) < 65536):
            raise ConfigError(f"bootstrap.servers: {s!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        out.append((host, int(port)))
    if not out:
        raise ConfigError("bootstrap.servers is empty")
    return out


def _check_oauth(v) -> None:
    """sasl.mechanism=OAUTHBEARER: exactly one token source, checked now."""
    if v["oauth_cb"] is not None:
        if v["enable.sasl.oauthbearer.unsecure.jwt"]:
            raise ConfigError("give oauth_cb or enable.sasl.oauthbearer.unsecure.jwt=true, not both")
        return
    if oauth_spec(v) is None:
        raise ConfigError("sasl.mechanism=OAUTHBEARER needs a token: oauth_cb (a callable returning "
                          "(token, expiry)), or for tests enable.sasl.oauthbearer.unsecure.jwt=true with "
                          "sasl.oauthbearer.config=\"principal=NAME [scope=a,b]\"")


def oauth_spec(c):
    """The unsecured JWT recipe (protocol.sasl.UnsecuredTokenSpec) the settings ask for, or None:
    from Java's OAuthBearerLoginModule options in sasl.jaas.config, or from librdkafka's
    sasl.oauthbearer.config when enable.sasl.oauthbearer.unsecure.jwt=true."""
    from kohort.errors import KohortError
    from kohort.protocol.sasl import UnsecuredTokenSpec, parse_jaas
    try:
        if c["sasl.jaas.config"]:
            module, opts = parse_jaas(c["sasl.jaas.config"])
            if module.endswith("OAuthBearerLoginModule"):
                return UnsecuredTokenSpec.from_jaas(opts)
        if c["enable.sasl.oauthbearer.unsecure.jwt"]:
            return UnsecuredTokenSpec.from_librdkafka(c["sasl.oauthbearer.config"] or "")
    except KohortError as e:
        raise ConfigError(str(e)) from None
    return None


def sasl_settings(c) -> tuple | None:
    """What the network layer's SASL exchange needs: (MECHANISM, username, password, oauth token
    source or None), or None without SASL."""
    if not c["security.protocol"].startswith("sasl_"):
        return None
    mech = c["sasl.mechanism"].upper()
    if mech != "OAUTHBEARER":
        return mech, c["sasl.username"], c["sasl.password"], None
    import time
    from kohort.protocol.sasl import OAuthTokenSource
    if c["oauth_cb"] is not None:
        return mech, None, None, OAuthTokenSource.from_callback(c["oauth_cb"], c["sasl.oauthbearer.config"],
                                                                time.time)
    return mech, None, None, OAuthTokenSource.unsecured(oauth_spec(c), time.time)


def _check(role: str, v: dict[str, Any], given: frozenset) -> None:
    parse_bootstrap(v["bootstrap.servers"])
    m1, m2 = v["sasl.mechanism"], v["sasl.mechanisms"]
    if m1 and m2 and m1 != m2:
        raise ConfigError(f"sasl.mechanism={m1} and sasl.mechanisms={m2} disagree; give one")
    v["sasl.mechanism"] = v["sasl.mechanisms"] = m1 = (m1 or m2)
    if v["sasl.jaas.config"]:
        from kohort.errors import KohortError
        from kohort.protocol.sasl import parse_jaas
        try:
            module, opts = parse_jaas(v["sasl.jaas.config"])
        except KohortError as e:
            raise ConfigError(str(e)) from None
        if not module.endswith(("PlainLoginModule", "ScramLoginModule", "OAuthBearerLoginModule")):
            raise ConfigError(f"sasl.jaas.config: {module} is not supported (PlainLoginModule, ScramLoginModule, "
                              "OAuthBearerLoginModule)")
        if module.endswith("OAuthBearerLoginModule"):
            if v["oauth_cb"] is not None or v["sasl.oauthbearer.config"] is not None:
                raise ConfigError("give sasl.jaas.config (OAuthBearerLoginModule) or oauth_cb / "
                                  "sasl.oauthbearer.config, not both")
            oauth_spec(v)          # checked now
        else:
            if v["sasl.username"] is not None or v["sasl.password"] is not None:
                raise ConfigError("give sasl.jaas.config or sasl.username/sasl.password, not both")
            v["sasl.username"], v["sasl.password"] = opts.get("username"), opts.get("password")
    if v["security.protocol"].startswith("sasl_"):
        if not m1:
            raise ConfigError(f"security.protocol={v['security.protocol']} needs sasl.mechanism "
                              "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)")
        if m1 == "oauthbearer":
            _check_oauth(v)
        elif not v["sasl.username"] or v["sasl.password"] is None:
            raise ConfigError(f"sasl.mechanism={m1.upper()} needs sasl.username and sasl.password")
    if bool(v["ssl.certificate.location"] or v["ssl.certificate.pem"]) != bool(v["ssl.key.location"] or v["ssl.key.pem"]):
        raise ConfigError("ssl.certificate.location (or .pem) and ssl.key.location (or .pem) go together (mutual TLS)")
    for what in ("ca", "certificate", "key"):
        if v[f"ssl.{what}.location"] and v[f"ssl.{what}.pem"]:
            raise ConfigError(f"give ssl.{what}.location or ssl.{what}.pem, not both")
    if v["reconnect.backoff.max.ms"] < v["reconnect.backoff.ms"] and "reconnect.backoff.max.ms" in given:
        raise ConfigError("reconnect.backoff.max.ms must be >= reconnect.backoff.ms")
    if role == "consumer":
        if v["heartbeat.interval.ms"] >= v["session.timeout.ms"] and v["group.protocol"] == "classic":
            raise ConfigError(f"heartbeat.interval.ms ({v['heartbeat.interval.ms']}) must be lower than "
                              f"session.timeout.ms ({v['session.timeout.ms']})")
        if v["group.instance.id"] is not None and not v["group.instance.id"]:
            raise ConfigError("group.instance.id must not be empty")
        if v["group.instance.id"] is not None and v["group.id"] is None:
            raise ConfigError("group.instance.id needs a group.id")
        if not v["partition.assignment.strategy"]:
            raise ConfigError("partition.assignment.strategy must name at least one assignor")
        if v["group.id"] is not None and not v["group.id"].strip():
            raise ConfigError("group.id must not be empty or blank (leave it unset for no group)")
        _check_group_protocol(v, given)
    if role == "producer":
        acks = v["acks"]
        v["acks"] = -1 if acks in ("all", "-1", -1) else int(acks)
        if v["enable.idempotence"] and v["acks"] != -1 and "enable.idempotence" in given:
            raise ConfigError("enable.idempotence=true needs acks=all")
        if v["enable.idempotence"] and v["max.in.flight.requests.per.connection"] > 5 \
                and "enable.idempotence" in given:
            raise ConfigError("enable.idempotence=true needs max.in.flight.requests.per.connection <= 5")


# Java's ConsumerConfig: with a group.id, keys of the other protocol are a ConfigException
CONSUMER_PROTOCOL_UNSUPPORTED = ("partition.assignment.strategy", "heartbeat.interval.ms", "session.timeout.ms")
CLASSIC_PROTOCOL_UNSUPPORTED = ("group.remote.assignor",)


def _check_group_protocol(v: dict[str, Any], given: frozenset) -> None:
    if v["group.id"] is None:
        return
    proto = v["group.protocol"]
    banned = CONSUMER_PROTOCOL_UNSUPPORTED if proto == "consumer" else CLASSIC_PROTOCOL_UNSUPPORTED
    bad = [k for k in banned if k in given and v[k] not in (None, "", [])]
    if bad:
        why = ("the broker assigns and times the group (KIP-848); choose a broker-side assignor with "
               "group.remote.assignor" if proto == "consumer" else "it is a group.protocol=consumer setting")
        raise ConfigError(f"{', '.join(bad)} cannot be set when group.protocol={proto.upper()}: {why}")
    ra = v["group.remote.assignor"]
    if ra is not None and not ra.strip():
        raise ConfigError("group.remote.assignor must not be blank (leave it unset for the broker's default)")


__all__ = ["Config", "ConfigError", "Key", "ROLES", "load_config", "parse_bootstrap", "sasl_settings"]
