"""Fault injection at the broker's request dispatch: a `FaultPlan` says, per API, what the next
requests get instead of their normal answer (kohort.testing's `fail_next`, `delay`, `drop_connection`).

A broker has `faults = None` unless a test sets a plan; the connection then consults it once per
request (`FaultPlan.take(api_key)`), after authentication and before the handler runs:

* `ERROR`  the handler does not run; the answer is `error_response(ctx, request, code)`: a
           well-formed response of that API and version whose every error field (top-level, per
           topic, per partition, per group, per member) carries the code, mirroring the request's
           topics/partitions/groups the way the real answer would (a Produce request with acks=0
           gets no answer, as always);
* `DELAY`  the handler runs as usual; its answer is held back for the given time (answers stay in
           request order, so later answers of that connection wait too, as behind a slow link);
* `DROP`   the handler does not run; the connection is closed once the answers already due are
           written, as a broker that went away mid-request.

Faults of one API are taken in the order they were added (FIFO, like librdkafka's mock cluster's
`push_request_errors`). The plan is filled from the test's thread and read on the broker's event
loop, hence the lock; `take` costs one dict lookup for an API without faults.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import threading
from dataclasses import dataclass
from typing import Any

from kohort.errors import ErrorCode
from kohort.protocol.messages import REQUESTS, RESPONSES
from kohort.protocol.schema import Array, _StructType

ERROR = "error"
DELAY = "delay"
DROP = "drop"

PRODUCE = 0
METADATA = 3


def api_keys_by_name() -> dict[str, int]:
    """Kafka's API names ("Produce", "Fetch", "JoinGroup", ...) to their keys, for every API kohort
    has a schema for."""
    return {cls.__name__[: -len("Request")]: key for key, cls in REQUESTS.items()}


def api_key_of(api: str | int) -> int:
    """An API given by Kafka's name or by key, checked."""
    names = api_keys_by_name()
    if isinstance(api, int) and not isinstance(api, bool):
        if api not in REQUESTS:
            raise ValueError(f"unknown API key {api}")
        return api
    if isinstance(api, str) and api in names:
        return names[api]
    raise ValueError(f"unknown API {api!r}; Kafka's API names are: {', '.join(sorted(names))}")


def error_code_of(error: str | int) -> int:
    """An error given by Kafka's ErrorCode name ("NOT_LEADER_OR_FOLLOWER") or number, checked."""
    if isinstance(error, str):
        try:
            return int(ErrorCode[error])
        except KeyError:
            raise ValueError(f"unknown error {error!r}: expected one of Kafka's ErrorCode names, "
                             f"e.g. NOT_LEADER_OR_FOLLOWER") from None
    if isinstance(error, int) and not isinstance(error, bool):
        return int(ErrorCode(error))
    raise ValueError(f"error must be an ErrorCode name or number, got {error!r}")


@dataclass(frozen=True)
class Fault:
    kind: str                 # ERROR, DELAY or DROP
    error_code: int = 0       # ERROR
    delay_s: float = 0.0      # DELAY

    def answer(self, ctx: Any, request: Any) -> Any:
        return error_response(ctx, request, self.error_code)

    async def later(self, result: Any) -> Any:
        """The handler's answer, held back by the delay."""
        if inspect.isawaitable(result):
            result = await result
        await asyncio.sleep(self.delay_s)
        return result


@dataclass
class _Entry:
    fault: Fault
    left: int | None          # requests still to take it; None: every request until cleared


class FaultPlan:
    """Faults per API key, FIFO; an entry with `count=None` applies to every request until cleared."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[int, collections.deque[_Entry]] = {}
        self.taken: collections.Counter[int] = collections.Counter()     # api key -> faults applied

    def add(self, api_key: int, fault: Fault, count: int | None = 1) -> None:
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError(f"count must be a positive integer or None (every request), got {count!r}")
        with self._lock:
            self._queues.setdefault(api_key, collections.deque()).append(_Entry(fault, count))

    def take(self, api_key: int) -> Fault | None:
        """The fault for this request of `api_key`, if any (called on the broker's loop)."""
        if api_key not in self._queues:
            return None
        with self._lock:
            q = self._queues.get(api_key)
            if not q:
                return None
            entry = q[0]
            if entry.left is not None:
                entry.left -= 1
                if entry.left == 0:
                    q.popleft()
                    if not q:
                        del self._queues[api_key]
            self.taken[api_key] += 1
            return entry.fault

    def remaining(self, api_key: int | None = None) -> int:
        """Faults not yet applied (of one API, or of all); an unbounded entry counts as one."""
        with self._lock:
            qs = list(self._queues.values()) if api_key is None else [self._queues.get(api_key, collections.deque())]
            return sum(1 if e.left is None else e.left for q in qs for e in q)

    def clear(self, api_key: int | None = None) -> None:
        with self._lock:
            if api_key is None:
                self._queues.clear()
            else:
                self._queues.pop(api_key, None)


# -- the error answer ------------------------------------------------------------------------------------
# fields that identify an item (a topic, partition, group, member, resource, key); copied from the
# request's item the answer is about
_KEYS = ("name", "topic", "topic_id", "partition_index", "partition", "index", "group_id", "member_id",
         "group_instance_id", "key", "transactional_id", "resource_type", "resource_name", "user")
_KEY_ALIASES = {"partition_index": ("partition", "index"), "partition": ("partition_index",),
                "index": ("partition_index", "partition"), "user": ("name",)}
# a response array answering a request's array of plain values (partition numbers, group ids, ...)
_VALUE_LISTS = {"partitions": ("partition_indexes", "partitions"), "results_by_partition": ("partitions",),
                "coordinators": ("coordinator_keys",), "groups": ("groups", "group_ids"),
                "responses": ("topic_names",), "results": ("groups_names",),
                "transaction_states": ("transactional_ids",)}
# the item field a plain value becomes, first of these whose type fits the value
_VALUE_KEYS = ("partition_index", "partition", "index", "key", "group_id", "transactional_id", "name")
# integer fields an error answer sets to -1 (unknown offset, epoch, node...), as Kafka's error answers do
_MINUS_ONE_SUFFIXES = ("offset", "timestamp", "high_watermark", "node_id", "leader_id", "epoch",
                       "producer_id", "generation_id", "preferred_read_replica", "log_append_time_ms",
                       "controller_id")


def _struct_of(t: Any) -> Any:
    inner = t.item if isinstance(t, Array) else t
    return inner.cls if isinstance(inner, _StructType) else None


def _source_list(resp_field: Any, req_obj: Any, version: int) -> tuple[list[Any] | None, bool]:
    """The request array the response array `resp_field` answers item by item (and whether it holds
    plain values), or None: an array sharing key fields with the answer's items (the most, and the
    same name on a tie), else the request's only array of structs when the answer's items have no
    key, else a known array of plain values."""
    if req_obj is None:
        return None, False
    req_cls = type(req_obj)
    item_cls = _struct_of(resp_field.type)
    keys = {fl.name for fl in item_cls.FIELDS} & set(_KEYS)
    wanted = {n for k in keys for n in (k, *_KEY_ALIASES.get(k, ()))}
    present = [fl for fl in req_cls.FIELDS if isinstance(fl.type, Array) and fl.versions[0] <= version <= fl.versions[1]]
    arrays = [fl for fl in present if _struct_of(fl.type) is not None]
    best, best_score = None, 0
    for fl in arrays:
        common = len(wanted & {s.name for s in _struct_of(fl.type).FIELDS})
        if not common:
            continue
        score = 2 * common + (fl.name == resp_field.name)
        if score > best_score:
            best, best_score = fl.name, score
    if best is None and not keys and len(arrays) == 1:
        best = arrays[0].name
    if best is not None:
        return getattr(req_obj, best) or [], False
    for name in _VALUE_LISTS.get(resp_field.name, ()):
        fl = req_cls._by_name.get(name)
        if fl in present and _struct_of(fl.type) is None:
            return getattr(req_obj, name) or [], True
    return None, False


def _key_source(req_obj: Any, name: str) -> str | None:
    fields = type(req_obj)._by_name
    return next((a for a in (name, *_KEY_ALIASES.get(name, ())) if a in fields), None)


def _value_field(cls: Any, value: Any) -> str | None:
    want = "string" if isinstance(value, str) else "int32"
    return next((n for n in _VALUE_KEYS if n in cls._by_name and cls._by_name[n].type.name == want), None)


def _mirror(cls: Any, req_obj: Any, code: int, version: int, value: Any = None) -> Any:
    out = cls()
    value_field = None if value is None else _value_field(cls, value)
    for fl in cls.FIELDS:
        n, t = fl.name, fl.type
        if n.endswith("error_code"):
            setattr(out, n, code)
        elif _struct_of(t) is not None and isinstance(t, Array):
            src, plain = _source_list(fl, req_obj, version)
            item = _struct_of(t)
            if src is None:
                setattr(out, n, [] if fl.default is not None else None)
            elif plain:
                setattr(out, n, [_mirror(item, None, code, version, v) for v in src])
            else:
                setattr(out, n, [_mirror(item, x, code, version) for x in src])
        elif n == value_field:
            setattr(out, n, value)
        elif req_obj is not None and n in _KEYS and (key_src := _key_source(req_obj, n)) is not None:
            setattr(out, n, getattr(req_obj, key_src))
        elif getattr(t, "name", "") in ("int16", "int32", "int64") and n.endswith(_MINUS_ONE_SUFFIXES):
            setattr(out, n, -1)
    return out


def error_response(ctx: Any, request: Any, code: int) -> Any:
    """A response to `request` (of ctx.api_version) failing with `code` in every error field; for
    Metadata the brokers and cluster id are the real ones, so a client still learns where to go."""
    api_key = type(request).API_KEY
    if api_key == PRODUCE and request.acks == 0:
        from kohort.broker.handlers import NO_RESPONSE
        return NO_RESPONSE
    resp = _mirror(RESPONSES[api_key], request, code, ctx.api_version)
    if api_key == METADATA:
        broker = ctx.broker
        host, port = ctx.advertised()
        resp.brokers = [type(resp).MetadataResponseBroker(node_id=broker.node_id, host=host, port=port, rack=None)]
        resp.cluster_id = broker.cluster_id
        resp.controller_id = broker.node_id
    return resp
