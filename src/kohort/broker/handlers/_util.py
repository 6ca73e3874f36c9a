"""Helpers shared by the handlers: clock, error-code mapping for storage exceptions, auto-creation."""
from __future__ import annotations

import logging
import time

from kohort.errors import ErrorCode
from kohort.storage import StorageError, TopicAlreadyExistsError

log = logging.getLogger("kohort.broker")


def now_ms() -> int:
    return int(time.time() * 1000)


def error_of(exc: Exception) -> tuple[int, str]:
    """(Kafka error code, message) for an exception raised by storage or a handler."""
    if isinstance(exc, StorageError):
        return exc.error_code, str(exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


def auto_create(broker, name: str) -> int:
    """Create topic `name` with the broker defaults (auto.create.topics.enable). Error code."""
    try:
        broker.storage.create_topic(name, broker.config["num.partitions"], now_ms=now_ms())
        log.info("auto-created topic %s with %d partitions", name, broker.config["num.partitions"])
        return ErrorCode.NONE
    except TopicAlreadyExistsError:
        return ErrorCode.NONE
    except StorageError as e:
        return e.error_code


def check_leader_epoch(broker, current_leader_epoch: int) -> int:
    """KIP-320 fencing: the client's idea of the leader epoch against ours (-1 = not checked)."""
    if current_leader_epoch < 0 or current_leader_epoch == broker.leader_epoch:
        return ErrorCode.NONE
    if current_leader_epoch < broker.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH
