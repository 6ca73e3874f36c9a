"""What the compat Consumer and Producer share: logging (`logger`, `log_level`, `debug`), `error_cb` and
`stats_cb`: kohort's own client statistics (kohort.client.stats: statistics.interval.ms and stats_cb of
kohort's Consumer/Producer, a subset of librdkafka's statistics), passed on as librdkafka's JSON string
after the compat client added its own per-partition fields."""
from __future__ import annotations

import collections
import json
import logging

from ._types import KafkaError, KafkaException

# syslog levels (librdkafka's log_level) -> Python logging levels
_SYSLOG = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR, 4: logging.WARNING,
           5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG}


class _Forward(logging.Handler):
    def __init__(self, target: logging.Logger):
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        self.target.handle(record)


class Hooks:
    """Logging, error_cb and stats_cb of one compat client."""

    def __init__(self, kind: str, client_id: str, extras: dict, logger=None):
        self.kind, self.client_id = kind, client_id
        self.error_cb = extras.get("error_cb")
        self.stats_cb = extras.get("stats_cb")
        self.stats_interval = int(extras.get("statistics.interval.ms", 0) or 0) / 1000
        if self.stats_cb is not None and not callable(self.stats_cb):
            raise KafkaException(-186, "stats_cb must be callable")
        if self.error_cb is not None and not callable(self.error_cb):
            raise KafkaException(-186, "error_cb must be callable")
        self._queued: collections.deque = collections.deque()
        self._handler = None
        base = logging.getLogger("kohort.client")
        logger = logger or extras.get("logger")
        if logger is not None:
            self._handler = _Forward(logger)
            base.addHandler(self._handler)
        self._old_level = base.level
        level = extras.get("log_level")
        if extras.get("debug"):
            base.setLevel(logging.DEBUG)
        elif level is not None:
            base.setLevel(_SYSLOG.get(int(level), logging.DEBUG))

    def error(self, err) -> None:
        if self.error_cb is not None:
            self.error_cb(err)

    def watch(self, client) -> None:
        """Connection losses and failed connects of the kohort client become _TRANSPORT errors for
        error_cb, queued on the I/O thread and served by serve() on the application's thread."""
        if self.error_cb is not None:
            client.add_disconnect_listener(
                lambda node, e: self._queued.append(KafkaError(KafkaError._TRANSPORT, f"node {node}: {e}",
                                                               retriable=True)))

    def serve(self) -> None:
        while self._queued:
            self.error(self._queued.popleft())

    def kohort_config(self, enrich) -> dict:
        """The kohort client settings that make it call stats_cb: statistics.interval.ms, and a stats_cb
        that adds the compat client's fields (`enrich(stats) -> stats`) and passes librdkafka's JSON on."""
        if self.stats_cb is None or self.stats_interval <= 0:
            return {}
        user = self.stats_cb
        return {"statistics.interval.ms": int(self.stats_interval * 1000),
                "stats_cb": lambda stats: user(json.dumps(enrich(stats)))}

    def close(self) -> None:
        logging.getLogger("kohort.client").setLevel(self._old_level)
        if self._handler is not None:
            logging.getLogger("kohort.client").removeHandler(self._handler)
            self._handler = None
