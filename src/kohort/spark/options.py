"""Options of the `kohort` Spark format: spark-sql-kafka's names, parsed and validated once.

`parse_source_options(options)` turns the case-insensitive option map Spark hands a data source into a
`SourceOptions`; `parse_sink_options(options)` does the same for writes. Names and defaults follow
spark-sql-kafka-0-10 (so a job switches by changing the format name); the few extras are kohort's:

* `startingOffsets=group` -- a *new* query starts from `kafka.group.id`'s committed offsets;
* `kafka.group.id` -- when set, each finished micro-batch's end offsets are committed to that group
  (a simple commit: generation -1, empty member id), so lag tools see the pipeline's lag.

Security options are spark-sql-kafka's (Kafka's Java client names): `kafka.security.protocol`,
`kafka.sasl.mechanism`, `kafka.sasl.jaas.config` (PlainLoginModule / ScramLoginModule username and
password, OAuthBearerLoginModule unsecuredLogin* options), `kafka.ssl.truststore.type=PEM` with
`kafka.ssl.truststore.location` or `.certificates`, `kafka.ssl.keystore.type=PEM` with
`kafka.ssl.keystore.location` (key + certificate chain in one file) or `.key` + `.certificate.chain`,
`kafka.ssl.key.password`, `kafka.ssl.endpoint.identification.algorithm`. They are turned into kohort's
client settings (librdkafka's names: ssl.ca.location, ssl.certificate.pem, ...); JKS and PKCS12 stores
are refused with a pointer to PEM.

An unknown option is an error naming the closest known option. Offsets JSON is spark-sql-kafka's:
``{"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}`` with -2 = earliest and -1 = latest.
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field

from kohort.errors import ConfigError

EARLIEST = -2
LATEST = -1

# lower-cased key -> the spelling users know (Spark lower-cases keys before handing them over)
_SOURCE_KEYS = [
    "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign",
    "startingOffsets", "endingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "endingTimestamp", "endingOffsetsByTimestamp",
    "failOnDataLoss", "minPartitions", "maxRecordsPerPartition", "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger", "maxTriggerDelay", "includeHeaders", "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "groupIdPrefix",
]
# spark-sql-kafka options kohort does not take, with the reason
_UNSUPPORTED = {
    "groupidprefix": "kohort's source reads by explicit assignment without any consumer group, so "
                     "there is no generated group id to prefix (spark-sql-kafka only names its consumers' "
                     "throwaway groups with it); remove the option, or set kafka.group.id to have "
                     "finished batches committed to that group",
}
_SINK_KEYS = ["kafka.bootstrap.servers", "topic", "includeHeaders", "kohort.sink.semantic",
              "kohort.sink.transactionalIdPrefix"]
# added by Spark itself (load(path)/save(path), writeStream's queryName / checkpointLocation)
_IGNORED = {"path", "queryname", "checkpointlocation"}

# the keys spark-sql-kafka refuses, with its reasons
_REJECTED = {
    "auto.offset.reset": "set startingOffsets instead (offsets are managed by the Spark checkpoint)",
    "key.deserializer": "keys are always read as bytes; cast or parse them in a DataFrame operation",
    "value.deserializer": "values are always read as bytes; cast or parse them in a DataFrame operation",
    "key.serializer": "keys are serialized as bytes; cast them to string or binary in the DataFrame",
    "value.serializer": "values are serialized as bytes; cast them to string or binary in the DataFrame",
    "enable.auto.commit": "the source never auto-commits; set kafka.group.id to have batch ends committed",
    "interceptor.classes": "interceptors are not supported",
}


def _closest(word: str, candidates) -> str:
    m = difflib.get_close_matches(word.lower(), [c.lower() for c in candidates], n=1, cutoff=0.5)
    if not m:
        return ""
    canon = {c.lower(): c for c in candidates}[m[0]]
    return f"; did you mean '{canon}'?"


def _normalise(options, known: list[str], what: str) -> tuple[dict[str, str], dict[str, str]]:
    """-> (our options by lower-cased key, kafka.* client config by Kafka's key). Errors on unknowns;
    kafka.* keys are checked by kohort's client configuration (role consumer for reads, producer for
    writes), which names the closest key of a misspelt one."""
    lower = {k.lower(): k for k in known}
    ours: dict[str, str] = {}
    client: dict[str, str] = {}
    for key, value in dict(options).items():
        k = key.lower()
        if k in _IGNORED:
            continue
        if value is None:
            continue
        value = str(value)
        if k.startswith("kafka.") and k != "kafka.bootstrap.servers":
            ck = key[len("kafka."):]
            ckl = ck.lower()
            if ckl in _REJECTED:
                raise ConfigError(f"option 'kafka.{ckl}' is not supported: {_REJECTED[ckl]}")
            client[ckl] = value
            continue
        if k not in lower:
            raise ConfigError(f"unknown {what} option '{key}'{_closest(key, known)}")
        if k in _UNSUPPORTED:
            raise ConfigError(f"option '{lower[k]}' is not supported: {_UNSUPPORTED[k]}")
        ours[k] = value
    if "kafka.bootstrap.servers" not in ours:
        raise ConfigError("option 'kafka.bootstrap.servers' is required")
    _java_tls_options(client)
    client["bootstrap.servers"] = ours["kafka.bootstrap.servers"]
    from kohort.client.config import load_config
    try:
        load_config("consumer" if what == "source" else "producer", client)
    except ConfigError as e:
        raise ConfigError(f"{e} (options 'kafka.*' are kohort client settings)") from None
    return ours, client


_PEM_HINT = ("kohort reads PEM only: convert the store (keytool -importkeystore -deststoretype PKCS12, then "
             "openssl pkcs12 -nodes) and set kafka.ssl.{0}.type=PEM")


def _java_tls_options(client: dict) -> None:
    """Kafka's Java TLS settings (spark-sql-kafka users' kafka.ssl.* options) -> kohort's client names, in
    place. Java's store types default to JKS, so a store location needs type PEM."""
    def pem(s: str) -> str:
        return s.replace("\\n", "\n")

    for store in ("truststore", "keystore"):
        given = [k for k in client if k.startswith(f"ssl.{store}.")]
        if not given:
            continue
        stype = client.pop(f"ssl.{store}.type", "JKS").strip().upper()
        if stype != "PEM":
            raise ConfigError(f"option 'kafka.ssl.{store}.type={stype}' is not supported: " + _PEM_HINT.format(store))
        if client.pop(f"ssl.{store}.password", None):
            raise ConfigError(f"option 'kafka.ssl.{store}.password' is not supported with a PEM {store} (Kafka "
                              f"refuses it too); for an encrypted private key use kafka.ssl.key.password")
        if store == "truststore":
            loc, certs = client.pop("ssl.truststore.location", None), client.pop("ssl.truststore.certificates", None)
            if loc and certs:
                raise ConfigError("give kafka.ssl.truststore.location or kafka.ssl.truststore.certificates, not both")
            if loc:
                client["ssl.ca.location"] = loc
            elif certs:
                client["ssl.ca.pem"] = pem(certs)
        else:
            loc = client.pop("ssl.keystore.location", None)
            key, chain = client.pop("ssl.keystore.key", None), client.pop("ssl.keystore.certificate.chain", None)
            if loc and (key or chain):
                raise ConfigError("give kafka.ssl.keystore.location or kafka.ssl.keystore.key + "
                                  "kafka.ssl.keystore.certificate.chain, not both")
            if loc:          # one PEM file holding the private key and the certificate chain
                client["ssl.certificate.location"] = client["ssl.key.location"] = loc
            elif key and chain:
                client["ssl.key.pem"], client["ssl.certificate.pem"] = pem(key), pem(chain)
            else:
                raise ConfigError("a PEM keystore needs kafka.ssl.keystore.location, or kafka.ssl.keystore.key "
                                  "and kafka.ssl.keystore.certificate.chain")
        rest = [k for k in client if k.startswith(f"ssl.{store}.")]
        if rest:
            raise ConfigError(f"option 'kafka.{rest[0]}' is not supported (PEM {store}s take "
                              f"kafka.ssl.{store}.type/.location"
                              + ("/.certificates)" if store == "truststore" else "/.key/.certificate.chain)"))


def _bool(ours: dict, key: str, default: bool) -> bool:
    v = ours.get(key.lower())
    if v is None:
        return default
    if v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise ConfigError(f"option '{key}' must be true or false, got {v!r}")


def _pos_int(ours: dict, key: str) -> int | None:
    v = ours.get(key.lower())
    if v is None:
        return None
    try:
        n = int(v)
    except ValueError:
        raise ConfigError(f"option '{key}' must be a positive integer, got {v!r}") from None
    if n <= 0:
        raise ConfigError(f"option '{key}' must be a positive integer, got {v!r}")
    return n


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.I)
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, key: str = "duration") -> int:
    """'15m' / '30s' / '500ms' / '1000' (ms) -> milliseconds."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"option '{key}' must be a duration like 500ms, 30s, 15m or 1h, got {text!r}")
    return int(m.group(1)) * _UNIT_MS[m.group(2).lower() if m.group(2) else None]


# -- offset specifications ----------------------------------------------------------------------------
@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends.

    kind: 'earliest' | 'latest' | 'group' | 'offsets' (per partition, -2/-1 allowed) |
    'timestamp' (one timestamp for every partition) | 'timestamps' (per partition)."""

    kind: str
    offsets: dict = field(default_factory=dict)     # {(topic, partition): int}
    timestamp: int | None = None


def _parse_partition_json(text: str, key: str) -> dict:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"option '{key}' is not valid JSON ({e}); expected "
                          '{"topic":{"0":23,"1":-2}}') from None
    if not isinstance(obj, dict):
        raise ConfigError(f"option '{key}' must be a JSON object of topics, got {text!r}")
    out = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"option '{key}': topic {topic!r} must map partition numbers to values")
        for p, v in parts.items():
            try:
                pi = int(p)
            except ValueError:
                raise ConfigError(f"option '{key}': partition {p!r} of {topic!r} is not a number") from None
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"option '{key}': value for {topic}-{p} must be an integer, got {v!r}")
            out[(topic, pi)] = v
    return out


def _offset_spec(ours: dict, prefix: str, batch: bool | None) -> OffsetSpec | None:
    """The starting/ending spec with spark-sql-kafka's precedence: timestamp > by-timestamp > offsets."""
    ts_key, by_ts_key, off_key = f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp", f"{prefix}Offsets"
    if ts_key.lower() in ours:
        try:
            ts = int(ours[ts_key.lower()])
        except ValueError:
            raise ConfigError(f"option '{ts_key}' must be a timestamp in milliseconds") from None
        if ts < 0:
            raise ConfigError(f"option '{ts_key}' must be a non-negative timestamp in milliseconds")
        return OffsetSpec("timestamp", timestamp=ts)
    if by_ts_key.lower() in ours:
        return OffsetSpec("timestamps", offsets=_parse_partition_json(ours[by_ts_key.lower()], by_ts_key))
    v = ours.get(off_key.lower())
    if v is None:
        return None
    s = v.strip().lower()
    if s in ("earliest", "latest"):
        return OffsetSpec(s)
    if s == "group":
        if prefix == "ending":
            raise ConfigError("endingOffsets=group is not supported; use latest or a JSON of offsets")
        return OffsetSpec("group")
    offsets = _parse_partition_json(v, off_key)
    for (t, p), o in offsets.items():
        if o < EARLIEST:
            raise ConfigError(f"option '{off_key}': offset {o} for {t}-{p} is invalid (use >= 0, -2 or -1)")
        if prefix == "ending" and o == EARLIEST:
            raise ConfigError(f"option 'endingOffsets': earliest (-2) is not allowed, found for {t}-{p}")
        if prefix == "starting" and batch and o == LATEST:
            raise ConfigError(f"option 'startingOffsets': latest (-1) is not allowed for batch queries, "
                              f"found for {t}-{p}")
    return OffsetSpec("offsets", offsets=offsets)


# -- the parsed options -----------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    strategy: str                          # 'assign' | 'subscribe' | 'subscribePattern'
    assign: tuple = ()                     # ((topic, partition), ...)
    topics: tuple = ()                     # subscribe
    pattern: str | None = None             # subscribePattern (Python `re` dialect)
    starting: OffsetSpec | None = None     # None = the query type's default
    ending: OffsetSpec | None = None
    starting_by_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    client_config: dict = field(default_factory=dict)

    @property
    def group_id(self) -> str | None:
        return self.client_config.get("group.id") or None

    def starting_for(self, batch: bool) -> OffsetSpec:
        return self.starting or OffsetSpec("earliest" if batch else "latest")

    def ending_for_batch(self) -> OffsetSpec:
        return self.ending or OffsetSpec("latest")


def parse_source_options(options, batch: bool | None = False) -> SourceOptions:
    """Validate read options. `batch`: True = a batch query, False = a streaming query, None = not
    known yet (`DataSource.schema()` at load(), which Spark calls for both query types): every
    option's value is checked, the rules that depend on the query type are left to reader() /
    streamReader()."""
    ours, client = _normalise(options, _SOURCE_KEYS, "source")
    given = [k for k in ("assign", "subscribe", "subscribePattern") if k.lower() in ours]
    if len(given) != 1:
        raise ConfigError("exactly one of 'assign', 'subscribe' or 'subscribePattern' must be set"
                          + (f" (got {', '.join(given)})" if given else ""))
    strategy = given[0]
    kw: dict = {}
    raw = ours[strategy.lower()]
    if strategy == "assign":
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise ConfigError(f"option 'assign' is not valid JSON ({e}); expected "
                              '{"topicA":[0,1],"topicB":[2,4]}') from None
        if not isinstance(obj, dict) or not obj:
            raise ConfigError(f"option 'assign' must be a non-empty JSON object like "
                              f'{{"topicA":[0,1]}}, got {raw!r}')
        tps = []
        for t, parts in obj.items():
            if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool)
                                                      and p >= 0 for p in parts):
                raise ConfigError(f"option 'assign': {t!r} must map to a list of partition numbers")
            tps.extend((t, p) for p in parts)
        if not tps:
            raise ConfigError("option 'assign' names no partitions")
        kw["assign"] = tuple(sorted(set(tps)))
    elif strategy == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise ConfigError("option 'subscribe' names no topics")
        kw["topics"] = topics
    else:
        try:
            re.compile(raw)
        except re.error as e:
            raise ConfigError(f"option 'subscribePattern' is not a valid (Python) regex: {e}") from None
        kw["pattern"] = raw

    starting = _offset_spec(ours, "starting", batch)
    ending = _offset_spec(ours, "ending", batch)
    if batch is False and ending is not None:
        raise ConfigError("ending offsets (endingOffsets, endingTimestamp, endingOffsetsByTimestamp) "
                          "are for batch queries only; remove them from this streaming query")
    if batch and starting is not None and starting.kind == "latest":
        raise ConfigError("startingOffsets=latest is not allowed for batch queries")
    if ending is not None and ending.kind == "earliest":
        raise ConfigError("endingOffsets=earliest is not allowed for batch queries")
    if starting is not None and starting.kind == "group" and not client.get("group.id"):
        raise ConfigError("startingOffsets=group needs kafka.group.id")
    strat = ours.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strat not in ("error", "latest"):
        raise ConfigError(f"option 'startingOffsetsByTimestampStrategy' must be error or latest, got {strat!r}")
    iso = client.get("isolation.level", "read_uncommitted")
    if iso not in ("read_uncommitted", "read_committed"):
        raise ConfigError(f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, got {iso!r}")
    delay = ours.get("maxtriggerdelay")
    min_opt = _pos_int(ours, "minOffsetsPerTrigger")
    max_opt = _pos_int(ours, "maxOffsetsPerTrigger")
    if min_opt is not None and max_opt is not None and min_opt > max_opt:
        raise ConfigError(f"minOffsetsPerTrigger ({min_opt}) is larger than maxOffsetsPerTrigger ({max_opt})")
    return SourceOptions(
        bootstrap_servers=ours["kafka.bootstrap.servers"], strategy=strategy,
        starting=starting, ending=ending, starting_by_timestamp_strategy=strat,
        fail_on_data_loss=_bool(ours, "failOnDataLoss", True),
        min_partitions=_pos_int(ours, "minPartitions"),
        max_records_per_partition=_pos_int(ours, "maxRecordsPerPartition"),
        max_offsets_per_trigger=max_opt, min_offsets_per_trigger=min_opt,
        max_trigger_delay_ms=parse_duration_ms(delay, "maxTriggerDelay") if delay else 15 * 60_000,
        include_headers=_bool(ours, "includeHeaders", False),
        poll_timeout_ms=_pos_int(ours, "kafkaConsumer.pollTimeoutMs") or 120_000,
        fetch_offset_num_retries=_pos_int(ours, "fetchOffset.numRetries") or 3,
        fetch_offset_retry_interval_ms=_pos_int(ours, "fetchOffset.retryIntervalMs") or 10,
        client_config=client, **kw)


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None = None
    include_headers: bool = False
    client_config: dict = field(default_factory=dict)
    semantic: str = "at_least_once"              # kohort.sink.semantic: at_least_once | exactly_once
    transactional_id_prefix: str = "kohort-sink-"


def parse_sink_options(options) -> SinkOptions:
    ours, client = _normalise(options, _SINK_KEYS, "sink")
    acks = client.get("acks", "all")
    if acks not in ("all", "-1", "1", "0"):
        raise ConfigError(f"option 'kafka.acks' must be all, -1, 1 or 0, got {acks!r}")
    if client.get("enable.idempotence", "true").lower() == "true" and acks not in ("all", "-1"):
        raise ConfigError("the idempotent producer needs kafka.acks=all (or set kafka.enable.idempotence=false)")
    topic = ours.get("topic")
    semantic = ours.get("kohort.sink.semantic", "at_least_once").strip().lower().replace("-", "_")
    if semantic not in ("at_least_once", "exactly_once"):
        raise ConfigError(f"option 'kohort.sink.semantic' must be at_least_once or exactly_once, got {semantic!r}")
    if semantic == "exactly_once" and "transactional.id" in client:
        raise ConfigError("kohort.sink.semantic=exactly_once derives each task's transactional.id itself; "
                          "remove kafka.transactional.id (set kohort.sink.transactionalIdPrefix instead)")
    return SinkOptions(bootstrap_servers=ours["kafka.bootstrap.servers"],
                       topic=topic.strip() if topic else None,
                       include_headers=_bool(ours, "includeHeaders", False), client_config=client,
                       semantic=semantic,
                       transactional_id_prefix=ours.get("kohort.sink.transactionalidprefix", "kohort-sink-"))
