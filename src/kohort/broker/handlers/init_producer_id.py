"""InitProducerId (API key 22), v0-v5. A null transactional_id is an idempotent producer: a fresh
producer id with epoch 0 from the persisted id blocks (a v3+ request naming its current id/epoch also
gets a new id). A transactional_id goes to the transaction coordinator (kohort.broker.txn), which
allocates or bumps the epoch, fences a previous producer and aborts its open transaction (answering
CONCURRENT_TRANSACTIONS, which the client retries). v6 (KIP-939, two-phase commit) is not served."""
from __future__ import annotations

from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse


@handles(InitProducerIdRequest, "0-5")
async def handle_init_producer_id(ctx, req):
    if req.transactional_id is None:
        pid = ctx.broker.producer_ids.allocate()
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
    v = ctx.api_version
    r = await ctx.broker.txn.call(
        "init_producer_id", req.transactional_id, req.transaction_timeout_ms,
        expected_pid=req.producer_id if v >= 3 else -1, expected_epoch=req.producer_epoch if v >= 3 else -1,
        version=v)
    if r.error:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=r.error, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=r.producer_id,
                                  producer_epoch=r.producer_epoch)
