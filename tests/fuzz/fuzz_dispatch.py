"""Fuzz target `dispatch`: the broker's handlers fed decoded but hostile requests, in process. A real
kohort Broker (kohort.testing's InProcessBroker, memory storage, one topic `fz` of 2 partitions with
a few records) answers every request the fuzzer's bytes decode to, through the same table and
RequestContext as broker/connection.py uses (no socket: the handler is called on the broker's loop).

Input layout: as the `requests` target (two bytes choose a served (api_key, version), the rest is
the body, decoded leniently as the broker does). Waits a request may ask for (max_wait_ms,
timeout_ms, rebalance_timeout_ms, session_timeout_ms) are cut to 200 ms, and the broker's session
limits lowered to match, so every input is answered quickly.

Invariants: the handler returns (an exception would close the client's connection: Kafka answers
with an error code instead), within 5 s, and its answer encodes in the request's version.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any

from kohort.broker.connection import decode_request as broker_decode
from kohort.broker.context import RequestContext
from kohort.broker.handlers import HANDLERS, NO_RESPONSE
from kohort.errors import DecodeError
from kohort.protocol.framing import encode_response_buffer, encode_response_spliced
from kohort.protocol.messages import REQUESTS
from kohort.protocol.messages.produce import ProduceRequest
from kohort.protocol.records import build_batch
from kohort.testing.inprocess import InProcessBroker, _broker_loop
from tests.fuzz.common import Finding, default_bodies, index_of, request_payload, served_versions, split

NAME = "dispatch"
TABLE = served_versions()
TOPIC = "fz"
WAIT_FIELDS = ("max_wait_ms", "timeout_ms", "rebalance_timeout_ms", "session_timeout_ms")
WAIT_CAP_MS = 200
ANSWER_WITHIN_S = 5.0
CONFIG = {"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": WAIT_CAP_MS,
          "auto.create.topics.enable": "true"}

_broker: InProcessBroker | None = None


def broker() -> Any:
    """The running kohort.broker.server.Broker every input is dispatched to (started once)."""
    global _broker
    if _broker is None:
        _broker = InProcessBroker(CONFIG).start()
        _broker.create_topic(TOPIC, partitions=2)
        _call(_produce_seed_records())
    return _broker._require()


def close() -> None:
    global _broker
    if _broker is not None:
        _broker.close()
        _broker = None


async def _produce_seed_records() -> None:
    PT = ProduceRequest.TopicProduceData
    req = ProduceRequest(acks=1, timeout_ms=100, topic_data=[PT(name=TOPIC, partition_data=[
        PT.PartitionProduceData(index=0, records=build_batch([(b"k", b"v", [], 1000)] * 3))])])
    await _dispatch(_broker._require(), 0, 9, req)


def seeds() -> list[bytes]:
    from tests.fuzz.test_broker_fuzz import _seeds
    out = default_bodies(TABLE, REQUESTS)
    for frame in _seeds():              # size prefix, then a header of client id "fuzzer"
        from kohort.protocol.framing import decode_request
        header, req = decode_request(frame[4:])
        k, v = header.request_api_key, header.request_api_version
        if (k, v) in TABLE:
            out.append(index_of(TABLE, k, v) + req.encode(v))
    return out


def _clamp(req) -> None:
    for f in WAIT_FIELDS:
        v = getattr(req, f, None)
        if isinstance(v, int) and v > WAIT_CAP_MS:
            setattr(req, f, WAIT_CAP_MS)


async def _dispatch(b, api_key: int, version: int, req):
    ctx = RequestContext(b, api_key, version, 7, "fuzz", "127.0.0.1", 1, listener=b.listeners[0])
    result = HANDLERS[api_key].fn(ctx, req)
    if inspect.isawaitable(result):
        result = await result
    return result


def _call(coro):
    return asyncio.run_coroutine_threadsafe(coro, _broker_loop()).result(ANSWER_WITHIN_S)


def check(data: bytes) -> None:
    k, v, body = split(data, TABLE)
    try:
        _, req = broker_decode(request_payload(k, v, body))
    except DecodeError:
        return
    _clamp(req)
    b = broker()
    try:
        resp = _call(_dispatch(b, k, v, req))
    except TimeoutError:
        raise Finding(f"api_key {k} v{v}: no answer within {ANSWER_WITHIN_S} s") from None
    if resp is NO_RESPONSE:
        return
    (encode_response_spliced if k == 1 else encode_response_buffer)(resp, v, 7)
