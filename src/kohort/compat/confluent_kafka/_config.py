"""librdkafka configuration names -> kohort's client config (Kafka's names), for the compat module.

`translate(role, conf)` returns (kohort_config, extras): extras are the settings the compat layer
handles itself (callbacks, enable.auto.offset.store, enable.partition.eof, logging,
statistics.interval.ms, ...). A key that is neither librdkafka's nor Kafka's is refused as librdkafka
refuses it (KafkaException _INVALID_ARG) naming the closest known key; a librdkafka key for a feature
kohort has not got is refused naming the gap (librdkafka's named partitioners). TLS, SASL and OAUTHBEARER
keys (`security.protocol`, `ssl.*`, `sasl.*`, `oauth_cb`) and `transactional.id` are librdkafka's names
in kohort's client too and pass through unchanged.
"""
from __future__ import annotations

import difflib

from kohort.client.config import ROLES

from ._types import KafkaError, KafkaException

# librdkafka name -> (Kafka/kohort name, value converter or None)
_KB = 1024
RENAMES = {
    "queue.buffering.max.ms": ("linger.ms", None),
    "queue.buffering.max.kbytes": ("buffer.memory", lambda v: int(v) * _KB),
    "message.max.bytes": ("max.request.size", None),
    "compression.codec": ("compression.type", None),
    "message.timeout.ms": ("delivery.timeout.ms", None),
    "request.required.acks": ("acks", None),
    "fetch.wait.max.ms": ("fetch.max.wait.ms", None),
    "fetch.message.max.bytes": ("max.partition.fetch.bytes", None),
    "socket.timeout.ms": ("request.timeout.ms", None),
    "topic.metadata.refresh.interval.ms": ("metadata.max.age.ms", None),
    "retry.backoff.ms": ("retry.backoff.ms", None),
    "max.in.flight": ("max.in.flight.requests.per.connection", None),
    "auto.offset.reset": ("auto.offset.reset",
                          lambda v: {"smallest": "earliest", "beginning": "earliest", "largest": "latest",
                                     "end": "latest", "error": "none"}.get(str(v).lower(), v)),
    "partitioner": ("partitioner.class", None),     # refused below: librdkafka's names are not callables
}
# handled by the compat layer itself
EXTRAS = {"error_cb", "throttle_cb", "stats_cb", "on_commit", "on_delivery", "logger", "log_level", "debug",
          "statistics.interval.ms", "enable.auto.offset.store", "enable.partition.eof", "enable.auto.commit",
          "auto.commit.interval.ms", "log.connection.close", "delivery.report.only.error",
          "queue.buffering.max.messages"}
# librdkafka tuning knobs with no counterpart in kohort's client: accepted, no effect
NO_EFFECT = {"api.version.request", "api.version.fallback.ms", "broker.version.fallback", "socket.keepalive.enable",
             "socket.nagle.disable", "batch.num.messages", "queued.min.messages",
             "queued.max.messages.kbytes", "topic.metadata.refresh.sparse", "broker.address.family",
             "log.queue", "log.thread.name", "enable.random.seed", "internal.termination.signal",
             "sticky.partitioning.linger.ms", "coordinator.query.interval.ms", "fetch.error.backoff.ms",
             "statistics.interval.ms"}


def _refuse(msg: str, code: int = KafkaError._INVALID_ARG):
    raise KafkaException(KafkaError(code, msg))


def translate(role: str, conf: dict) -> tuple[dict, dict]:
    conf = dict(conf)
    nested = conf.pop("default.topic.config", None) or {}
    conf.update(nested)          # librdkafka's old per-topic block, flattened as librdkafka does
    known = ROLES[role]
    out, extras = {}, {}
    for k, v in conf.items():
        if k in EXTRAS:
            extras[k] = v
            continue
        if k in NO_EFFECT:
            continue
        if k in RENAMES:
            name, conv = RENAMES[k]
            if name == "partitioner.class":
                _refuse(f"partitioner={v!r}: librdkafka's named partitioners are not offered; kohort uses "
                        "Kafka's murmur2 partitioner (librdkafka's murmur2_random)", KafkaError._NOT_IMPLEMENTED)
            out[name] = conv(v) if conv else v
        elif k in known:
            out[k] = v.lower() if k == "security.protocol" and isinstance(v, str) else v
        else:
            names = sorted(set(known) | set(RENAMES) | EXTRAS | NO_EFFECT)
            close = difflib.get_close_matches(k, names, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            _refuse(f"No such configuration property: {k!r}{hint}")
    if "statistics.interval.ms" in conf:
        extras["statistics.interval.ms"] = conf["statistics.interval.ms"]
    return out, extras
