"""InitProducerId (API key 22), v0-v5, for idempotent (non-transactional) producers: every call gets
a fresh producer id with epoch 0, as Kafka does when transactional_id is null (a v3+ request naming
its current id/epoch also gets a new id). Ids come in persisted blocks (never reused after a
restart). A transactional_id is refused with INVALID_REQUEST: there is no transaction coordinator."""
from __future__ import annotations

from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse


@handles(InitProducerIdRequest, "0-5")
def handle_init_producer_id(ctx, req):
    if req.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                      producer_id=-1, producer_epoch=-1)
    pid = ctx.broker.producer_ids.allocate()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
