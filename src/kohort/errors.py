"""Kafka error codes by Kafka's names, and kohort's typed exceptions.

`KafkaError` subclasses exist for every protocol error code (see ERRORS / for_code); each has
`code`, `name`, `retriable` and a message a user can act on. DecodeError is what any malformed
bytes raise in kohort.protocol, and nothing else.

Protocol errors (codes -1..133, Kafka 4.x):
  * `ErrorCode` is an IntEnum of Kafka's names: `ErrorCode.NOT_COORDINATOR == 16`.
  * One class per code, named CamelCase + "Error" (`NotCoordinatorError`, `RebalanceInProgressError`;
    names already ending in _ERROR/_EXCEPTION drop that suffix: `KafkaStorageError`, `InvalidTopicError`,
    `NetworkError`; code 0 NONE is `NoneError` and is never raised).
  * `for_code(code)` gives the class (an unknown code gets a generic class carrying the number),
    `raise_for_code(code, context="")` raises unless the code is 0.
  * `retriable` follows Kafka's Java client (RetriableException / InvalidMetadataException): retrying
    the same request, possibly after refreshing metadata or finding the coordinator, can succeed.

Client-side errors (not on the wire): KafkaConnectionError, KafkaTimeoutError, ConfigError,
IncompatibleBrokerVersionError, RecordTooLargeError (a MessageTooLargeError the producer raises
before sending: the client's limit, not the broker's).

Transactions: a transactional producer's methods raise AbortableTransactionError (abort and go on) or
FatalTransactionError (close the producer), each with the typed `cause`, classified as Java's
TransactionManager does; IllegalTransactionStateError for a call out of order; TransactionAbortedError
for records of an aborted transaction.
"""
from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING


class KohortError(Exception):
    """Base of every exception kohort raises on purpose."""


class DecodeError(KohortError):
    """Bytes from the wire (or a file) do not decode as the expected Kafka structure."""


class EncodeError(KohortError, ValueError):
    """A value cannot be encoded in the requested version."""


# -- protocol error codes ------------------------------------------------------------------------------
# (code, Kafka's name, retriable, short description). Numbers and names as in Kafka 4.x's Errors
# enum; retriable as in the Java client's exception hierarchy; descriptions are kohort's own words.
_TABLE: list[tuple[int, str, bool, str]] = [
    (-1, "UNKNOWN_SERVER_ERROR", False, "the broker hit an unexpected error; see the broker log"),
    (0, "NONE", False, "no error"),
    (1, "OFFSET_OUT_OF_RANGE", False,
     "the requested offset is outside the partition's available range (apply auto.offset.reset)"),
    (2, "CORRUPT_MESSAGE", True, "a record failed its CRC or size check, or is otherwise corrupt"),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, "this broker does not host that topic-partition"),
    (4, "INVALID_FETCH_SIZE", False, "the requested fetch size is invalid"),
    (5, "LEADER_NOT_AVAILABLE", True, "the partition has no leader right now (election in progress)"),
    (6, "NOT_LEADER_OR_FOLLOWER", True,
     "this broker is not the leader (or not a replica) of the partition; refresh metadata"),
    (7, "REQUEST_TIMED_OUT", True, "the request timed out on the broker"),
    (8, "BROKER_NOT_AVAILABLE", False, "the broker is not available"),
    (9, "REPLICA_NOT_AVAILABLE", True, "a replica of the partition is not available"),
    (10, "MESSAGE_TOO_LARGE", False, "a record batch is larger than the broker's maximum message size"),
    (11, "STALE_CONTROLLER_EPOCH", False, "the request came from a controller that has been replaced"),
    (12, "OFFSET_METADATA_TOO_LARGE", False, "the committed offset metadata string is too large"),
    (13, "NETWORK_EXCEPTION", True, "the connection closed before a response arrived"),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, "the coordinator is still loading its state; retry shortly"),
    (15, "COORDINATOR_NOT_AVAILABLE", True, "the coordinator is not available; find it again and retry"),
    (16, "NOT_COORDINATOR", True, "this broker is not the coordinator for the group or transaction"),
    (17, "INVALID_TOPIC_EXCEPTION", False, "the topic name is invalid or the topic is internal"),
    (18, "RECORD_LIST_TOO_LARGE", False, "the record batch is larger than the broker's segment size"),
    (19, "NOT_ENOUGH_REPLICAS", True, "fewer in-sync replicas than min.insync.replicas; nothing was written"),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True,
     "the records were written, but to fewer in-sync replicas than required"),
    (21, "INVALID_REQUIRED_ACKS", False, "acks must be -1, 0 or 1"),
    (22, "ILLEGAL_GENERATION", False, "the group generation has moved on; rejoin the group"),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False,
     "the member's protocol type or protocols do not match the group's"),
    (24, "INVALID_GROUP_ID", False, "the group id is empty or invalid"),
    (25, "UNKNOWN_MEMBER_ID", False, "the coordinator does not know this member id; rejoin with an empty id"),
    (26, "INVALID_SESSION_TIMEOUT", False,
     "the session timeout is outside the broker's group.min/max.session.timeout.ms"),
    (27, "REBALANCE_IN_PROGRESS", False, "the group is rebalancing; rejoin the group"),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False, "the offset commit request is too large"),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, "not authorized to access the topic"),
    (30, "GROUP_AUTHORIZATION_FAILED", False, "not authorized to access the group"),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, "not authorized for this cluster operation"),
    (32, "INVALID_TIMESTAMP", False, "a record timestamp is outside the accepted range"),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, "the broker does not enable the requested SASL mechanism"),
    (34, "ILLEGAL_SASL_STATE", False, "the request is not valid in the current SASL state"),
    (35, "UNSUPPORTED_VERSION", False, "the broker does not support this API version"),
    (36, "TOPIC_ALREADY_EXISTS", False, "a topic with that name already exists"),
    (37, "INVALID_PARTITIONS", False, "the partition count is invalid (below 1, or not an increase)"),
    (38, "INVALID_REPLICATION_FACTOR", False,
     "the replication factor is below 1 or above the number of brokers"),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, "the replica assignment is invalid"),
    (40, "INVALID_CONFIG", False, "a configuration value is invalid"),
    (41, "NOT_CONTROLLER", True, "this broker is not the active controller"),
    (42, "INVALID_REQUEST", False,
     "the broker rejected the request as malformed or unsupported; see the broker log"),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False,
     "the topic's message format does not support this request"),
    (44, "POLICY_VIOLATION", False, "the request violates a configured broker policy"),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, "the broker got an out-of-order producer sequence number"),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, "the broker got a duplicate producer sequence number"),
    (47, "INVALID_PRODUCER_EPOCH", False, "the producer epoch is stale; a newer producer exists"),
    (48, "INVALID_TXN_STATE", False, "the transactional operation is not valid in the current state"),
    (49, "INVALID_PRODUCER_ID_MAPPING", False,
     "the producer id is not the one assigned to this transactional id"),
    (50, "INVALID_TRANSACTION_TIMEOUT", False,
     "the transaction timeout exceeds the broker's transaction.max.timeout.ms"),
    (51, "CONCURRENT_TRANSACTIONS", True, "another operation on the same transaction is in progress"),
    (52, "TRANSACTION_COORDINATOR_FENCED", False,
     "the transaction coordinator sending the markers is no longer current"),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, "not authorized to use the transactional id"),
    (54, "SECURITY_DISABLED", False, "security features are disabled on the broker"),
    (55, "OPERATION_NOT_ATTEMPTED", False,
     "the broker skipped this operation because another in the same batch failed"),
    (56, "KAFKA_STORAGE_ERROR", True, "the broker had a disk error on the partition's log directory"),
    (57, "LOG_DIR_NOT_FOUND", False, "the log directory is not configured on the broker"),
    (58, "SASL_AUTHENTICATION_FAILED", False, "SASL authentication failed; check the credentials"),
    (59, "UNKNOWN_PRODUCER_ID", False,
     "the broker no longer has state for this producer id (its records may have expired)"),
    (60, "REASSIGNMENT_IN_PROGRESS", False, "a partition reassignment is in progress"),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False, "delegation tokens are not enabled"),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False, "the delegation token was not found"),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False, "the principal is not the token's owner or renewer"),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False,
     "delegation token requests are not allowed on this kind of connection"),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False, "not authorized for the delegation token"),
    (66, "DELEGATION_TOKEN_EXPIRED", False, "the delegation token has expired"),
    (67, "INVALID_PRINCIPAL_TYPE", False, "the principal type is not supported"),
    (68, "NON_EMPTY_GROUP", False, "the group still has members"),
    (69, "GROUP_ID_NOT_FOUND", False, "the group does not exist"),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True, "the fetch session is unknown to the broker; start a new one"),
    (71, "INVALID_FETCH_SESSION_EPOCH", True, "the fetch session epoch is wrong; start a new session"),
    (72, "LISTENER_NOT_FOUND", True, "the leader has no listener matching the one this request used"),
    (73, "TOPIC_DELETION_DISABLED", False, "topic deletion is disabled (delete.topic.enable=false)"),
    (74, "FENCED_LEADER_EPOCH", True, "the leader epoch in the request is older than the broker's"),
    (75, "UNKNOWN_LEADER_EPOCH", True, "the leader epoch in the request is newer than the broker's"),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False,
     "the client does not support the partition's compression type"),
    (77, "STALE_BROKER_EPOCH", False, "the broker epoch has changed"),
    (78, "OFFSET_NOT_AVAILABLE", True,
     "the new leader's high watermark has not caught up yet; retry shortly"),
    (79, "MEMBER_ID_REQUIRED", False, "rejoin using the member id the coordinator returned (KIP-394)"),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True, "the preferred leader is not available"),
    (81, "GROUP_MAX_SIZE_REACHED", False, "the group is at group.max.size"),
    (82, "FENCED_INSTANCE_ID", False,
     "another member with the same group.instance.id has replaced this one (KIP-345)"),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True, "no eligible leader is available for the partition"),
    (84, "ELECTION_NOT_NEEDED", True, "leader election is not needed for the partition"),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, "no partition reassignment is in progress"),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False,
     "cannot delete offsets of a topic the group is subscribed to"),
    (87, "INVALID_RECORD", False, "the broker rejected a record as invalid"),
    (88, "UNSTABLE_OFFSET_COMMIT", True,
     "there are pending transactional offsets for the partition; retry shortly"),
    (89, "THROTTLING_QUOTA_EXCEEDED", True, "the request exceeded a throttling quota; retry later"),
    (90, "PRODUCER_FENCED", False, "a newer producer with the same transactional id fenced this one"),
    (91, "RESOURCE_NOT_FOUND", False, "the request refers to a resource that does not exist"),
    (92, "DUPLICATE_RESOURCE", False, "the request refers to the same resource twice"),
    (93, "UNACCEPTABLE_CREDENTIAL", False, "the credential does not meet the broker's criteria"),
    (94, "INCONSISTENT_VOTER_SET", False, "the sender or receiver is not one of the expected voters"),
    (95, "INVALID_UPDATE_VERSION", False, "the update version is invalid"),
    (96, "FEATURE_UPDATE_FAILED", False, "the finalized features could not be updated"),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", False,
     "a forwarded request's principal could not be deserialized"),
    (98, "SNAPSHOT_NOT_FOUND", False, "the requested snapshot does not exist"),
    (99, "POSITION_OUT_OF_RANGE", False, "the requested position is outside the snapshot"),
    (100, "UNKNOWN_TOPIC_ID", True, "this broker does not know that topic id"),
    (101, "DUPLICATE_BROKER_REGISTRATION", False, "that broker id is already registered"),
    (102, "BROKER_ID_NOT_REGISTERED", False, "that broker id is not registered"),
    (103, "INCONSISTENT_TOPIC_ID", True, "the topic id does not match the one in the log"),
    (104, "INCONSISTENT_CLUSTER_ID", False, "the cluster id does not match the server's"),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False, "the transactional id does not exist"),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True, "the fetch session mixed or changed topic ids"),
    (107, "INELIGIBLE_REPLICA", False, "the new ISR contains an ineligible replica"),
    (108, "NEW_LEADER_ELECTED", False, "the partition state was updated, but a new leader was elected"),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False, "the requested offset is only in tiered storage"),
    (110, "FENCED_MEMBER_EPOCH", False,
     "the member epoch was fenced; give up the partitions and rejoin (KIP-848)"),
    (111, "UNRELEASED_INSTANCE_ID", False,
     "the group.instance.id is still held by another member, which must leave first"),
    (112, "UNSUPPORTED_ASSIGNOR", False, "the group does not support that assignor or version"),
    (113, "STALE_MEMBER_EPOCH", False,
     "the member epoch is stale; retry after the next heartbeat returns the new epoch"),
    (114, "MISMATCHED_ENDPOINT_TYPE", False, "the request went to an endpoint of the wrong type"),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False, "that endpoint type is not supported"),
    (116, "UNKNOWN_CONTROLLER_ID", False, "that controller id is unknown"),
    (117, "UNKNOWN_SUBSCRIPTION_ID", False, "the telemetry subscription id is unknown or outdated"),
    (118, "TELEMETRY_TOO_LARGE", False, "the telemetry push is larger than the broker accepts"),
    (119, "INVALID_REGISTRATION", False, "the controller considers the broker registration invalid"),
    (120, "TRANSACTION_ABORTABLE", False,
     "the transaction hit an error; abort it to keep using the transactional id"),
    (121, "INVALID_RECORD_STATE", False, "the record is in a state that cannot be acknowledged"),
    (122, "SHARE_SESSION_NOT_FOUND", True, "the share session was not found"),
    (123, "INVALID_SHARE_SESSION_EPOCH", True, "the share session epoch is invalid"),
    (124, "FENCED_STATE_EPOCH", False, "the share-group state epoch did not match"),
    (125, "INVALID_VOTER_KEY", False, "the voter key does not match the receiving replica"),
    (126, "DUPLICATE_VOTER", False, "the voter is already in the voter set"),
    (127, "VOTER_NOT_FOUND", False, "the voter is not in the voter set"),
    (128, "INVALID_REGULAR_EXPRESSION", False, "the subscription regular expression is invalid"),
    (129, "REBOOTSTRAP_REQUIRED", False, "client metadata is stale; re-bootstrap from the bootstrap servers"),
    (130, "STREAMS_INVALID_TOPOLOGY", False, "the Streams topology is invalid"),
    (131, "STREAMS_INVALID_TOPOLOGY_EPOCH", False, "the Streams topology epoch is invalid"),
    (132, "STREAMS_TOPOLOGY_FENCED", False, "the Streams topology epoch is outdated"),
    (133, "SHARE_SESSION_LIMIT_REACHED", True, "the broker's share session limit has been reached"),
]

if TYPE_CHECKING:
    # The same enum spelled out for type checkers (built from _TABLE at run time);
    # tests/test_typing.py checks that the two agree.
    class ErrorCode(enum.IntEnum):
        """Kafka protocol error codes by Kafka's names (ErrorCode.NOT_COORDINATOR == 16)."""
        UNKNOWN_SERVER_ERROR = -1
        NONE = 0
        OFFSET_OUT_OF_RANGE = 1
        CORRUPT_MESSAGE = 2
        UNKNOWN_TOPIC_OR_PARTITION = 3
        INVALID_FETCH_SIZE = 4
        LEADER_NOT_AVAILABLE = 5
        NOT_LEADER_OR_FOLLOWER = 6
        REQUEST_TIMED_OUT = 7
        BROKER_NOT_AVAILABLE = 8
        REPLICA_NOT_AVAILABLE = 9
        MESSAGE_TOO_LARGE = 10
        STALE_CONTROLLER_EPOCH = 11
        OFFSET_METADATA_TOO_LARGE = 12
        NETWORK_EXCEPTION = 13
        COORDINATOR_LOAD_IN_PROGRESS = 14
        COORDINATOR_NOT_AVAILABLE = 15
        NOT_COORDINATOR = 16
        INVALID_TOPIC_EXCEPTION = 17
        RECORD_LIST_TOO_LARGE = 18
        NOT_ENOUGH_REPLICAS = 19
        NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
        INVALID_REQUIRED_ACKS = 21
        ILLEGAL_GENERATION = 22
        INCONSISTENT_GROUP_PROTOCOL = 23
        INVALID_GROUP_ID = 24
        UNKNOWN_MEMBER_ID = 25
        INVALID_SESSION_TIMEOUT = 26
        REBALANCE_IN_PROGRESS = 27
        INVALID_COMMIT_OFFSET_SIZE = 28
        TOPIC_AUTHORIZATION_FAILED = 29
        GROUP_AUTHORIZATION_FAILED = 30
        CLUSTER_AUTHORIZATION_FAILED = 31
        INVALID_TIMESTAMP = 32
        UNSUPPORTED_SASL_MECHANISM = 33
        ILLEGAL_SASL_STATE = 34
        UNSUPPORTED_VERSION = 35
        TOPIC_ALREADY_EXISTS = 36
        INVALID_PARTITIONS = 37
        INVALID_REPLICATION_FACTOR = 38
        INVALID_REPLICA_ASSIGNMENT = 39
        INVALID_CONFIG = 40
        NOT_CONTROLLER = 41
        INVALID_REQUEST = 42
        UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
        POLICY_VIOLATION = 44
        OUT_OF_ORDER_SEQUENCE_NUMBER = 45
        DUPLICATE_SEQUENCE_NUMBER = 46
        INVALID_PRODUCER_EPOCH = 47
        INVALID_TXN_STATE = 48
        INVALID_PRODUCER_ID_MAPPING = 49
        INVALID_TRANSACTION_TIMEOUT = 50
        CONCURRENT_TRANSACTIONS = 51
        TRANSACTION_COORDINATOR_FENCED = 52
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
        SECURITY_DISABLED = 54
        OPERATION_NOT_ATTEMPTED = 55
        KAFKA_STORAGE_ERROR = 56
        LOG_DIR_NOT_FOUND = 57
        SASL_AUTHENTICATION_FAILED = 58
        UNKNOWN_PRODUCER_ID = 59
        REASSIGNMENT_IN_PROGRESS = 60
        DELEGATION_TOKEN_AUTH_DISABLED = 61
        DELEGATION_TOKEN_NOT_FOUND = 62
        DELEGATION_TOKEN_OWNER_MISMATCH = 63
        DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
        DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
        DELEGATION_TOKEN_EXPIRED = 66
        INVALID_PRINCIPAL_TYPE = 67
        NON_EMPTY_GROUP = 68
        GROUP_ID_NOT_FOUND = 69
        FETCH_SESSION_ID_NOT_FOUND = 70
        INVALID_FETCH_SESSION_EPOCH = 71
        LISTENER_NOT_FOUND = 72
        TOPIC_DELETION_DISABLED = 73
        FENCED_LEADER_EPOCH = 74
        UNKNOWN_LEADER_EPOCH = 75
        UNSUPPORTED_COMPRESSION_TYPE = 76
        STALE_BROKER_EPOCH = 77
        OFFSET_NOT_AVAILABLE = 78
        MEMBER_ID_REQUIRED = 79
        PREFERRED_LEADER_NOT_AVAILABLE = 80
        GROUP_MAX_SIZE_REACHED = 81
        FENCED_INSTANCE_ID = 82
        ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
        ELECTION_NOT_NEEDED = 84
        NO_REASSIGNMENT_IN_PROGRESS = 85
        GROUP_SUBSCRIBED_TO_TOPIC = 86
        INVALID_RECORD = 87
        UNSTABLE_OFFSET_COMMIT = 88
        THROTTLING_QUOTA_EXCEEDED = 89
        PRODUCER_FENCED = 90
        RESOURCE_NOT_FOUND = 91
        DUPLICATE_RESOURCE = 92
        UNACCEPTABLE_CREDENTIAL = 93
        INCONSISTENT_VOTER_SET = 94
        INVALID_UPDATE_VERSION = 95
        FEATURE_UPDATE_FAILED = 96
        PRINCIPAL_DESERIALIZATION_FAILURE = 97
        SNAPSHOT_NOT_FOUND = 98
        POSITION_OUT_OF_RANGE = 99
        UNKNOWN_TOPIC_ID = 100
        DUPLICATE_BROKER_REGISTRATION = 101
        BROKER_ID_NOT_REGISTERED = 102
        INCONSISTENT_TOPIC_ID = 103
        INCONSISTENT_CLUSTER_ID = 104
        TRANSACTIONAL_ID_NOT_FOUND = 105
        FETCH_SESSION_TOPIC_ID_ERROR = 106
        INELIGIBLE_REPLICA = 107
        NEW_LEADER_ELECTED = 108
        OFFSET_MOVED_TO_TIERED_STORAGE = 109
        FENCED_MEMBER_EPOCH = 110
        UNRELEASED_INSTANCE_ID = 111
        UNSUPPORTED_ASSIGNOR = 112
        STALE_MEMBER_EPOCH = 113
        MISMATCHED_ENDPOINT_TYPE = 114
        UNSUPPORTED_ENDPOINT_TYPE = 115
        UNKNOWN_CONTROLLER_ID = 116
        UNKNOWN_SUBSCRIPTION_ID = 117
        TELEMETRY_TOO_LARGE = 118
        INVALID_REGISTRATION = 119
        TRANSACTION_ABORTABLE = 120
        INVALID_RECORD_STATE = 121
        SHARE_SESSION_NOT_FOUND = 122
        INVALID_SHARE_SESSION_EPOCH = 123
        FENCED_STATE_EPOCH = 124
        INVALID_VOTER_KEY = 125
        DUPLICATE_VOTER = 126
        VOTER_NOT_FOUND = 127
        INVALID_REGULAR_EXPRESSION = 128
        REBOOTSTRAP_REQUIRED = 129
        STREAMS_INVALID_TOPOLOGY = 130
        STREAMS_INVALID_TOPOLOGY_EPOCH = 131
        STREAMS_TOPOLOGY_FENCED = 132
        SHARE_SESSION_LIMIT_REACHED = 133
else:
    ErrorCode = enum.IntEnum("ErrorCode", [(name, code) for code, name, _, _ in _TABLE])
    ErrorCode.__doc__ = "Kafka protocol error codes by Kafka's names (ErrorCode.NOT_COORDINATOR == 16)."
    ErrorCode.__module__ = __name__


class KafkaError(KohortError):
    """An error code returned by a Kafka broker (or a coordinator in kohort's own broker).

    Subclasses set `code`, `name`, `retriable`, `description`. `str(err)` reads
    "NOT_COORDINATOR (16): <description>; <context>".
    """

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False
    description: str = ""

    def __init__(self, message: str | None = None):
        self.context = message or ""
        text = f"{self.name} ({self.code}): {self.description}"
        if message:
            text += f"; {message}"
        super().__init__(text)

    def __reduce__(self):
        # args hold the built text; rebuild from (code, context) so pickling does not repeat the prefix
        return (_rebuild, (self.code, self.context or None))


def class_name(name: str) -> str:
    """Kafka's error name -> kohort class name: NOT_COORDINATOR -> NotCoordinatorError."""
    base = re.sub(r"_(ERROR|EXCEPTION)$", "", name)
    return "".join(p.capitalize() for p in base.split("_")) + "Error"


ERRORS: dict[int, type[KafkaError]] = {}
for _code, _name, _retriable, _desc in _TABLE:
    _cls = type(class_name(_name), (KafkaError,), {
        "code": _code, "name": _name, "retriable": _retriable, "description": _desc,
        "__doc__": f"{_name} ({_code}): {_desc}.", "__module__": __name__,
    })
    ERRORS[_code] = _cls
    globals()[_cls.__name__] = _cls
del _code, _name, _retriable, _desc, _cls

_UNKNOWN: dict[int, type[KafkaError]] = {}

if TYPE_CHECKING:
    def __getattr__(name: str) -> type[KafkaError]:
        """The error classes built from _TABLE above (NotCoordinatorError, ...), as type checkers see them."""
        ...


def for_code(code: int) -> type[KafkaError]:
    """The KafkaError subclass for a wire error code; unknown codes get a generic class with that code."""
    cls = ERRORS.get(code)
    if cls is not None:
        return cls
    if not isinstance(code, int) or isinstance(code, bool):
        raise TypeError(f"error code must be an int, got {code!r}")
    cls = _UNKNOWN.get(code)
    if cls is None:
        cls = _UNKNOWN[code] = type(f"UnknownErrorCode{code}Error".replace("-", "Minus"), (KafkaError,), {
            "code": code, "name": f"UNKNOWN_ERROR_CODE_{code}", "retriable": False,
            "description": f"error code {code} is not known to kohort (newer broker?)",
            "__module__": __name__,
        })
    return cls


def _rebuild(code, message):
    return for_code(code)(message)


def raise_for_code(code: int, context: str = "") -> None:
    """Raise the KafkaError for `code` (with `context` appended to its message); do nothing for 0."""
    if code == 0:
        return
    raise for_code(code)(context or None)


def is_retriable(code: int) -> bool:
    """True when retrying a request that failed with `code` can succeed (Kafka's Java semantics)."""
    return for_code(code).retriable


# -- client-side errors (never on the wire) --------------------------------------------------------------
class KafkaConnectionError(KohortError, ConnectionError):
    """Could not connect to a broker, or the connection broke mid-request. Retriable."""

    retriable = True


class ConnectionClosedError(KafkaConnectionError):
    """The broker closed the connection (end of stream) while requests were in flight on it."""


class KafkaTimeoutError(KohortError, TimeoutError):
    """A client-side deadline passed before the operation completed. Retriable."""

    retriable = True


class RecordTooLargeError(ERRORS[10]):          # a MessageTooLargeError raised before sending
    """A record larger than the producer's own limit (max.request.size or buffer.memory): refused by
    the client before it was sent, so the broker never saw it (Kafka's RecordTooLargeException from
    KafkaProducer.send). A broker's refusal arrives as MessageTooLargeError naming max.message.bytes."""

    description = "a record is larger than the producer's own limit; it was not sent"

    def __reduce__(self):
        return (RecordTooLargeError, (self.context or None,))


class ConfigError(KohortError, ValueError):
    """A configuration value is missing, of the wrong type, or out of range."""

    retriable = False


class IncompatibleBrokerVersionError(KohortError):
    """The broker supports no version of an API that kohort can use (from ApiVersions)."""

    retriable = False

    def __init__(self, api: str, ours: tuple[int, int], broker: tuple[int, int] | None):
        self.api, self.ours, self.broker = api, ours, broker
        where = "does not support it at all" if broker is None else f"supports v{broker[0]}-v{broker[1]}"
        super().__init__(f"{api}: kohort speaks v{ours[0]}-v{ours[1]} but the broker {where}")


def pick_version(api: str, ours: tuple[int, int], broker: tuple[int, int] | None) -> int:
    """Highest version in both ranges (how Kafka clients negotiate), or IncompatibleBrokerVersionError."""
    if broker is not None:
        hi = min(ours[1], broker[1])
        if hi >= max(ours[0], broker[0]):
            return hi
    raise IncompatibleBrokerVersionError(api, ours, broker)


class SslAuthenticationError(KohortError):
    """The TLS handshake failed (certificate not trusted, host name mismatch, no TLS on the other
    side). Fatal, like Java's SslAuthenticationException: retrying cannot fix a configuration."""

    retriable = False


def is_authentication_error(err: BaseException) -> bool:
    """Whether `err` is an authentication failure (fatal for a client): TLS, or the SASL codes
    UNSUPPORTED_SASL_MECHANISM (33), ILLEGAL_SASL_STATE (34), SASL_AUTHENTICATION_FAILED (58)."""
    return isinstance(err, SslAuthenticationError) or (isinstance(err, KafkaError) and err.code in (33, 34, 58))


# -- transactions (KIP-98): how a transactional producer's failure is to be handled ----------------------
class TransactionError(KohortError):
    """A transactional producer method failed. `cause` is the error behind it (often a typed KafkaError
    such as ProducerFencedError); `abortable` says what the application may do next."""

    abortable: bool = False

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause
        self.__cause__ = cause


class AbortableTransactionError(TransactionError):
    """The current transaction cannot commit, but the producer is still usable: call
    abort_transaction() and carry on (Java's abortable errors, e.g. TRANSACTION_ABORTABLE, a failed
    produce, topic/group authorization, TxnOffsetCommit UNKNOWN_MEMBER_ID/ILLEGAL_GENERATION/
    FENCED_INSTANCE_ID, UNKNOWN_PRODUCER_ID when the epoch can be bumped)."""

    abortable = True


class FatalTransactionError(TransactionError):
    """The producer can do nothing more: close it (and create a new one to go on). Java's fatal errors:
    PRODUCER_FENCED (also for INVALID_PRODUCER_EPOCH from a coordinator), TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    INVALID_TXN_STATE from AddPartitions/AddOffsets/EndTxn, UNSUPPORTED_VERSION, anything unexpected."""

    abortable = False


class TransactionAbortedError(KohortError):
    """A record was not sent because its transaction was aborted (Java's TransactionAbortedException)."""

    retriable = False


class IllegalTransactionStateError(KohortError, RuntimeError):
    """A transactional method was called in a state that does not allow it (Java's IllegalStateException),
    e.g. begin_transaction() before init_transactions(), or commit after a timed-out abort."""
