"""InitProducerId (API key 22), v0-v5. A null transactional_id is an idempotent producer: a fresh
producer id with epoch 0 from the persisted id blocks (a v3+ request naming its current id/epoch also
gets a new id). A transactional_id goes to the transaction coordinator (kohort.broker.txn), which
allocates or bumps the epoch, fences a previous producer and aborts its open transaction (answering
CONCURRENT_TRANSACTIONS, which the client retries). v6 (KIP-939, two-phase commit) is not served.
Authorization: WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; without one,
IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED."""
from __future__ import annotations

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse


@handles(InitProducerIdRequest, "0-5")
async def handle_init_producer_id(ctx, req):
    denied = _denied(ctx, req.transactional_id)
    if denied:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=denied, producer_id=-1, producer_epoch=-1)
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


def _denied(ctx, transactional_id: str | None) -> int:
    if transactional_id is not None:
        ok = ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
        return ErrorCode.NONE if ok else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    ok = ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE) or ctx.authorize_any(AclOperation.WRITE,
                                                                                   ResourceType.TOPIC)
    return ErrorCode.NONE if ok else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
