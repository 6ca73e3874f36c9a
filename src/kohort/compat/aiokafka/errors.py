"""aiokafka 0.14's exception classes by aiokafka's names, and `translate`, which turns an error of
kohort.aio into its aiokafka counterpart (a broker error keeps its Kafka code as `errno`);
`translated` wraps a coroutine method of the compat classes so that its kohort errors leave translated.

`KafkaError` is a RuntimeError with `retriable` and `invalid_metadata`; broker errors are
`BrokerResponseError`s with `errno`, `message` and `description`; `for_code(code)` gives the class of
a wire error code. A broker error is named as kohort names it (`ErrorCode` in CamelCase + Error)
unless aiokafka calls it otherwise (`ALIASES`), and then both names work.
"""
from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from kohort import errors as _k

__all__ = ["KafkaError", "BrokerResponseError", "for_code", "translate"]


class KafkaError(RuntimeError):
    retriable = False
    invalid_metadata = False

    def __str__(self) -> str:
        if not self.args:
            return self.__class__.__name__
        return f"{self.__class__.__name__}: {super().__str__()}"


def _simple(name: str, retriable: bool = False, base=KafkaError, **attrs):
    cls = type(name, (base,), {"retriable": retriable, **attrs})
    globals()[name] = cls
    __all__.append(name)
    return cls


for _n, _r in (("IllegalStateError", False), ("IllegalArgumentError", False), ("NoBrokersAvailable", True),
               ("NodeNotReadyError", True), ("KafkaProtocolError", True), ("CorrelationIdError", True),
               ("Cancelled", True), ("TooManyInFlightRequests", True), ("StaleMetadata", True),
               ("MetadataEmptyBrokerList", True), ("UnrecognizedBrokerVersion", False),
               ("IncompatibleBrokerVersion", False), ("CommitFailedError", False),
               ("AuthenticationMethodNotSupported", False), ("AuthenticationFailedError", False),
               ("KafkaUnavailableError", False), ("KafkaTimeoutError", False), ("KafkaConnectionError", True),
               ("UnsupportedCodecError", False), ("KafkaConfigurationError", False), ("QuotaViolationError", False),
               ("NoOffsetForPartitionError", False), ("RecordTooLargeError", False), ("ProducerClosed", False),
               ("ProducerFenced", False)):
    _simple(_n, _r)
StaleMetadata.invalid_metadata = True          # noqa: F821 (made above)


class ConsumerStoppedError(Exception):
    """The consumer was stopped (aiokafka: a plain Exception)."""


class IllegalOperation(Exception):
    """An operation the client's configuration does not allow (aiokafka: a plain Exception)."""


class BrokerResponseError(KafkaError):
    errno: int | None = None
    message: str | None = None
    description = ""

    def __str__(self) -> str:
        return f"[Error {self.errno}] {self.__class__.__name__}: {self.description}" + \
            (f" ({', '.join(map(str, self.args))})" if self.args else "")


__all__ += ["BrokerResponseError", "ConsumerStoppedError", "IllegalOperation"]

# aiokafka's names for the codes it names differently from kohort (Kafka's ErrorCode in CamelCase)
ALIASES = {
    -1: "UnknownError", 2: "CorruptRecordException", 4: "InvalidFetchRequestError", 6: "NotLeaderForPartitionError",
    10: "MessageSizeTooLargeError", 13: "StaleLeaderEpochCodeError", 14: "GroupLoadInProgressError",
    15: "GroupCoordinatorNotAvailableError", 16: "NotCoordinatorForGroupError",
    39: "InvalidReplicationAssignmentError", 40: "InvalidConfigurationError", 45: "OutOfOrderSequenceNumber",
    46: "DuplicateSequenceNumber", 47: "InvalidProducerEpoch", 48: "InvalidTxnState",
    49: "InvalidProducerIdMapping", 50: "InvalidTransactionTimeout", 51: "ConcurrentTransactions",
    52: "TransactionCoordinatorFenced", 53: "TransactionalIdAuthorizationFailed", 54: "SecurityDisabled",
    55: "OperationNotAttempted", 57: "LogDirNotFound", 58: "SaslAuthenticationFailed", 59: "UnknownProducerId",
    60: "ReassignmentInProgress", 61: "DelegationTokenAuthDisabled", 62: "DelegationTokenNotFound",
    63: "DelegationTokenOwnerMismatch", 64: "DelegationTokenRequestNotAllowed",
    65: "DelegationTokenAuthorizationFailed", 66: "DelegationTokenExpired", 67: "InvalidPrincipalType",
    68: "NonEmptyGroup", 69: "GroupIdNotFound", 70: "FetchSessionIdNotFound", 71: "InvalidFetchSessionEpoch",
    72: "ListenerNotFound", 79: "MemberIdRequired",
}
_INVALID_METADATA = {3, 5, 6, 74, 75, 100}

_BY_CODE: dict[int, type] = {}
for _code, _kcls in sorted(_k.ERRORS.items()):
    if _code == 0:
        continue
    _name = ALIASES.get(_code, _kcls.__name__)
    _cls = type(_name, (BrokerResponseError,), {
        "errno": _code, "message": _kcls.name, "description": getattr(_kcls, "description", "") or "",
        "retriable": bool(_kcls.retriable), "invalid_metadata": _code in _INVALID_METADATA})
    _BY_CODE[_code] = _cls
    globals()[_name] = _cls
    __all__.append(_name)
    if _name != _kcls.__name__:
        globals()[_kcls.__name__] = _cls
        __all__.append(_kcls.__name__)


class UnknownError(BrokerResponseError):       # for codes no class names
    errno = -1
    message = "UNKNOWN"


if -1 in _BY_CODE:
    UnknownError = _BY_CODE[-1]    # noqa: F811


def for_code(code: int) -> type:
    """The aiokafka error class of a Kafka error code."""
    return _BY_CODE.get(code, UnknownError)


def translate(err: BaseException) -> BaseException:
    """kohort's error -> the aiokafka error an aiokafka program expects for it."""
    from kohort.aio.consumer import ConsumerStoppedError as _Stopped
    from kohort.client.consumer.membership_common import CommitFailedError as _CF, RebalanceInProgressError as _RIP
    from kohort.client.consumer.offsets import NoOffsetForPartitionError as _NoOffset
    cause = getattr(err, "cause", None)
    if isinstance(err, (_k.AbortableTransactionError, _k.FatalTransactionError)) and isinstance(cause, BaseException):
        err = cause
    if isinstance(err, _Stopped):
        return ConsumerStoppedError(str(err))
    if isinstance(err, _RIP):
        return _BY_CODE[27](str(err))
    if isinstance(err, _CF):
        return CommitFailedError(str(err))       # noqa: F821
    if isinstance(err, _NoOffset):
        return NoOffsetForPartitionError(str(err))   # noqa: F821
    if isinstance(err, _k.KafkaError):
        code = err.code
        if code in (_k.ErrorCode.PRODUCER_FENCED, _k.ErrorCode.INVALID_PRODUCER_EPOCH):
            return ProducerFenced(str(err))      # noqa: F821
        e = for_code(code)(str(err))
        if code == _k.ErrorCode.OFFSET_OUT_OF_RANGE and getattr(err, "partitions", None):
            e = for_code(code)(err.partitions)
        return e
    if isinstance(err, _k.KafkaTimeoutError):
        return KafkaTimeoutError(str(err))       # noqa: F821
    if isinstance(err, _k.KafkaConnectionError):
        return KafkaConnectionError(str(err))    # noqa: F821
    if isinstance(err, _k.KohortError):
        return KafkaError(str(err))
    return err


_P = ParamSpec("_P")
_T = TypeVar("_T")


def translated(fn: Callable[_P, Awaitable[_T]]) -> Callable[_P, Coroutine[Any, Any, _T]]:
    """`fn` (a coroutine function) with its kohort errors raised as `translate` makes them."""
    @functools.wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await fn(*args, **kwargs)
        except _k.KohortError as e:
            raise translate(e) from e
    return wrapper
