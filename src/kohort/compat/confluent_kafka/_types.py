"""confluent-kafka's value types over kohort: KafkaError/KafkaException, TopicPartition, Message, the
OFFSET_* constants and the ClusterMetadata family that `list_topics()` returns.

KafkaError carries librdkafka's codes: negative ones are client-side (`_PARTITION_EOF`, `_TIMED_OUT`,
...), non-negative ones are Kafka's protocol codes, named as librdkafka names them where it renamed
them (`UNKNOWN_TOPIC_OR_PART`, `NOT_LEADER_FOR_PARTITION`) and also by Kafka's own names.
"""
from __future__ import annotations

from typing import Any

from kohort import errors as kerrors

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

TIMESTAMP_NOT_AVAILABLE = 0       # confluent-kafka's Message.timestamp() types
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

# librdkafka's client-side (negative) error codes (rdkafka.h, rd_kafka_resp_err_t)
_LOCAL = {
    "_BAD_MSG": -199, "_BAD_COMPRESSION": -198, "_DESTROY": -197, "_FAIL": -196, "_TRANSPORT": -195,
    "_CRIT_SYS_RESOURCE": -194, "_RESOLVE": -193, "_MSG_TIMED_OUT": -192, "_PARTITION_EOF": -191,
    "_UNKNOWN_PARTITION": -190, "_FS": -189, "_UNKNOWN_TOPIC": -188, "_ALL_BROKERS_DOWN": -187,
    "_INVALID_ARG": -186, "_TIMED_OUT": -185, "_QUEUE_FULL": -184, "_ISR_INSUFF": -183,
    "_NODE_UPDATE": -182, "_SSL": -181, "_WAIT_COORD": -180, "_UNKNOWN_GROUP": -179, "_IN_PROGRESS": -178,
    "_PREV_IN_PROGRESS": -177, "_EXISTING_SUBSCRIPTION": -176, "_ASSIGN_PARTITIONS": -175,
    "_REVOKE_PARTITIONS": -174, "_CONFLICT": -173, "_STATE": -172, "_UNKNOWN_PROTOCOL": -171,
    "_NOT_IMPLEMENTED": -170, "_AUTHENTICATION": -169, "_NO_OFFSET": -168, "_OUTDATED": -167,
    "_TIMED_OUT_QUEUE": -166, "_UNSUPPORTED_FEATURE": -165, "_WAIT_CACHE": -164, "_INTR": -163,
    "_KEY_SERIALIZATION": -162, "_VALUE_SERIALIZATION": -161, "_KEY_DESERIALIZATION": -160,
    "_VALUE_DESERIALIZATION": -159, "_PARTIAL": -158, "_READ_ONLY": -157, "_NOENT": -156,
    "_UNDERFLOW": -155, "_INVALID_TYPE": -154, "_RETRY": -153, "_PURGE_QUEUE": -152,
    "_PURGE_INFLIGHT": -151, "_FATAL": -150, "_INCONSISTENT": -149, "_GAPLESS_GUARANTEE": -148,
    "_MAX_POLL_EXCEEDED": -147, "_UNKNOWN_BROKER": -146, "_NOT_CONFIGURED": -145, "_FENCED": -144,
    "_APPLICATION": -143, "_ASSIGNMENT_LOST": -142, "_NOOP": -141, "_AUTO_OFFSET_RESET": -140,
    "_LOG_TRUNCATION": -139, "_INVALID_DIFFERENT_RECORD": -138, "_DESTROY_BROKER": -137,
}
_LOCAL_TEXT = {-191: "Broker: No more messages", -185: "Local: Timed out", -195: "Local: Broker transport failure",
               -187: "Local: All broker connections are down", -186: "Local: Invalid argument or configuration",
               -168: "Local: No offset stored", -170: "Local: Not implemented",
               -192: "Local: Message timed out", -188: "Local: Unknown topic", -190: "Local: Unknown partition"}
# where librdkafka's name for a Kafka protocol code differs from Kafka's
_RDKAFKA_NAMES = {
    1: "OFFSET_OUT_OF_RANGE", 2: "INVALID_MSG", 3: "UNKNOWN_TOPIC_OR_PART", 4: "INVALID_MSG_SIZE",
    6: "NOT_LEADER_FOR_PARTITION", 10: "MSG_SIZE_TOO_LARGE", 13: "NETWORK_EXCEPTION",
    14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
    17: "TOPIC_EXCEPTION", 18: "RECORD_LIST_TOO_LARGE", 56: "KAFKA_STORAGE_ERROR",
}
_RDKAFKA_ALIASES = {"GROUP_LOAD_IN_PROGRESS": 14, "GROUP_COORDINATOR_NOT_AVAILABLE": 15,
                    "NOT_COORDINATOR_FOR_GROUP": 16, "NOT_LEADER_OR_FOLLOWER": 6, "UNKNOWN": -1,
                    "NO_ERROR": 0}


def _name_of(code: int) -> str:
    for n, c in _LOCAL.items():
        if c == code:
            return n
    if code in _RDKAFKA_NAMES:
        return _RDKAFKA_NAMES[code]
    if code == -1:
        return "UNKNOWN"
    if code == 0:
        return "NO_ERROR"
    try:
        return kerrors.ErrorCode(code).name
    except ValueError:
        return f"ERR_{code}"


class KafkaError:
    """An error as confluent-kafka reports it: `code()`, `name()`, `str()`, `retriable()`, `fatal()`."""

    def __init__(self, error, reason: str | None = None, fatal: bool = False, retriable: bool = False,
                 txn_requires_abort: bool = False):
        self._code = int(error)
        self._reason = reason
        self._fatal, self._retriable, self._txn = bool(fatal), bool(retriable), bool(txn_requires_abort)

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return _name_of(self._code)

    def str(self) -> str:
        if self._reason:
            return self._reason
        if self._code in _LOCAL_TEXT:
            return _LOCAL_TEXT[self._code]
        if self._code >= 0 or self._code == -1:
            cls = kerrors.for_code(self._code)
            return f"Broker: {cls.description or cls.name}"
        return f"Local: {self.name()[1:].replace('_', ' ').lower()}"

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._txn

    def __str__(self) -> str:
        return self.str()

    def __repr__(self) -> str:
        return f'KafkaError{{code={self.name()},val={self._code},str="{self.str()}"}}'

    def __eq__(self, other) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        return isinstance(other, int) and self._code == other

    def __hash__(self) -> int:
        return hash(self._code)


for _n, _c in _LOCAL.items():
    setattr(KafkaError, _n, _c)
for _ec in kerrors.ErrorCode:
    if _ec.value > 0:
        setattr(KafkaError, _ec.name, _ec.value)
for _c, _n in _RDKAFKA_NAMES.items():
    setattr(KafkaError, _n, _c)
for _n, _c in _RDKAFKA_ALIASES.items():
    setattr(KafkaError, _n, _c)


class KafkaException(Exception):
    """confluent-kafka's exception: `args[0]` is a KafkaError."""

    def __init__(self, error: KafkaError | int, *args: Any, **kwargs: Any) -> None:
        if not isinstance(error, KafkaError):
            error = KafkaError(error, *args, **kwargs)
        super().__init__(error)

    def __str__(self) -> str:
        return str(self.args[0])


def error_from(exc: BaseException) -> KafkaError:
    """A kohort exception as the KafkaError librdkafka would report."""
    if isinstance(exc, KafkaException):
        return exc.args[0]
    if isinstance(exc, kerrors.TransactionError):          # librdkafka: txn_requires_abort() / fatal()
        cause = exc.cause if isinstance(exc.cause, kerrors.KafkaError) else None
        code = cause.code if cause is not None else (KafkaError._STATE if exc.abortable else KafkaError._FATAL)
        return KafkaError(code, str(exc), fatal=not exc.abortable, txn_requires_abort=exc.abortable)
    if isinstance(exc, kerrors.IllegalTransactionStateError):
        return KafkaError(KafkaError._STATE, str(exc))
    if isinstance(exc, kerrors.KafkaTimeoutError):
        return KafkaError(KafkaError._TIMED_OUT, str(exc), retriable=True)
    if isinstance(exc, kerrors.KafkaConnectionError):
        return KafkaError(KafkaError._TRANSPORT, str(exc), retriable=True)
    if isinstance(exc, kerrors.ConfigError):
        return KafkaError(KafkaError._INVALID_ARG, str(exc))
    if isinstance(exc, kerrors.KafkaError):
        return KafkaError(exc.code, str(exc), retriable=exc.retriable)
    return KafkaError(KafkaError._FAIL, str(exc))


def wrap(exc: BaseException) -> KafkaException:
    return exc if isinstance(exc, KafkaException) else KafkaException(error_from(exc))


class TopicPartition:
    """confluent-kafka's TopicPartition: equal and hashed by (topic, partition); carries an offset."""

    __slots__ = ("topic", "partition", "offset", "metadata", "leader_epoch", "error")

    def __init__(self, topic: str, partition: int = -1, offset: int = OFFSET_INVALID, metadata: str | None = None,
                 leader_epoch: int | None = None):
        self.topic, self.partition, self.offset = topic, int(partition), int(offset)
        self.metadata, self.leader_epoch, self.error = metadata, leader_epoch, None

    def _key(self):
        return (self.topic, self.partition)

    def __eq__(self, other) -> bool:
        return isinstance(other, TopicPartition) and self._key() == other._key()

    def __lt__(self, other) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset},"
                f"leader_epoch={self.leader_epoch},error={self.error}}}")

    __str__ = __repr__


_new = object.__new__
_TS_TYPES = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME, -1: TIMESTAMP_NOT_AVAILABLE}


class Message:
    """One consumed (or delivered) message, read through methods as in confluent-kafka."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers", "_ts", "_error",
                 "_leader_epoch", "_latency", "_delivery_count")

    def __init__(self, topic=None, partition=None, offset=None, key=None, value=None, headers=None,
                 timestamp=(TIMESTAMP_NOT_AVAILABLE, 0), error=None, leader_epoch=None, latency=None,
                 delivery_count=None):
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers, self._ts = key, value, headers, timestamp
        self._error, self._leader_epoch, self._latency = error, leader_epoch, latency
        self._delivery_count = delivery_count

    @classmethod
    def from_record(cls, r) -> "Message":
        """A kohort ConsumerRecord (topic, partition, offset, timestamp, timestamp_type, key, value, headers,
        leader_epoch[, delivery_count]) as a Message."""
        m = _new(cls)
        if len(r) > 9:                   # a share consumer's record (KIP-932)
            m._delivery_count = r[9]
            r = r[:9]
        else:
            m._delivery_count = None
        m._topic, m._partition, m._offset, ts, tt, m._key, m._value, h, m._leader_epoch = r
        m._headers = h or None
        m._ts = _TS_TYPES[tt], ts if tt >= 0 else 0
        m._error = m._latency = None
        return m

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._ts

    def error(self) -> KafkaError | None:
        return self._error

    def leader_epoch(self) -> int | None:
        return self._leader_epoch

    def latency(self) -> float | None:
        return self._latency

    def delivery_count(self) -> int | None:
        """How many times a share group delivered this record (1 the first time); None outside share
        consumers."""
        return self._delivery_count

    def set_key(self, key: bytes | None) -> None:
        self._key = key

    def set_value(self, value: bytes | None) -> None:
        self._value = value

    def set_headers(self, headers: list[tuple[str, bytes | None]] | None) -> None:
        self._headers = headers

    def __len__(self) -> int:
        return len(self._value) if self._value is not None else 0

    def __repr__(self) -> str:
        return (f"Message(topic={self._topic!r}, partition={self._partition}, offset={self._offset}, "
                f"error={self._error!r})")


# -- list_topics() results (confluent_kafka.admin's metadata classes) -------------------------------------
class BrokerMetadata:
    def __init__(self, id: int, host: str, port: int):
        self.id, self.host, self.port = id, host, port

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.id}"


class PartitionMetadata:
    def __init__(self, id: int, leader: int, replicas: list, isrs: list, error=None):
        self.id, self.leader, self.replicas, self.isrs, self.error = id, leader, replicas, isrs, error

    def __repr__(self) -> str:
        return f"PartitionMetadata({self.id})"


class TopicMetadata:
    def __init__(self, topic: str, partitions: dict, error=None):
        self.topic, self.partitions, self.error = topic, partitions, error

    def __repr__(self) -> str:
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"

    def __str__(self) -> str:
        return self.topic


class ClusterMetadata:
    def __init__(self, cluster_id, controller_id, brokers: dict, topics: dict, orig_broker_id=-1,
                 orig_broker_name=None):
        self.cluster_id, self.controller_id, self.brokers, self.topics = cluster_id, controller_id, brokers, topics
        self.orig_broker_id, self.orig_broker_name = orig_broker_id, orig_broker_name

    def __repr__(self) -> str:
        return f"ClusterMetadata({self.cluster_id})"


def cluster_metadata(admin, topic: str | None, timeout: float | None) -> ClusterMetadata:
    """A Metadata round trip through a kohort Admin, shaped as confluent-kafka's ClusterMetadata."""
    md = admin.metadata(None if topic is None else [topic], timeout)
    brokers = {b.node_id: BrokerMetadata(b.node_id, b.host, b.port) for b in md.brokers}
    topics = {}
    for t in md.topics:
        if topic is None and t.is_internal:
            continue
        parts = {p.partition_index: PartitionMetadata(p.partition_index, p.leader_id, list(p.replica_nodes),
                                                      list(p.isr_nodes),
                                                      KafkaError(p.error_code) if p.error_code else None)
                 for p in t.partitions}
        topics[t.name] = TopicMetadata(t.name, parts, KafkaError(t.error_code) if t.error_code else None)
    b0 = next(iter(brokers.values()), None)
    return ClusterMetadata(md.cluster_id, md.controller_id, brokers, topics,
                           b0.id if b0 else -1, str(b0) if b0 else None)


def timeout_s(timeout) -> float | None:
    """confluent-kafka's timeouts: None or a negative number is 'forever'."""
    if timeout is None or timeout < 0:
        return None
    return float(timeout)
