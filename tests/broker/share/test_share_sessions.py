"""Share sessions, both sides, pure: the client's ShareSession (client/share/session.py) builds
ShareFetch/ShareAcknowledge requests, which travel as bytes to the broker's ShareSessionCache
(broker/share/sessions.py): epochs, added and forgotten partitions, acknowledgements refused at epoch
0, restarts after SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH, close at -1, the session
limit, RENEW fetching nothing, connection close."""
from __future__ import annotations

import uuid

import pytest

from kohort.broker.share.sessions import INT32_MAX, ShareSessionCache
from kohort.client.share.acknowledgements import ACCEPT, RENEW, AckBatch
from kohort.client.share.session import FetchLimits, ShareSession, next_epoch
from kohort.errors import ErrorCode
from kohort.protocol.messages.share_acknowledge import ShareAcknowledgeRequest
from kohort.protocol.messages.share_fetch import ShareFetchRequest

T = uuid.UUID(int=9)
P0, P1, P2 = (T, 0), (T, 1), (T, 2)


def over_the_wire(req, version=2):
    return type(req).decode(req.encode(version), version)


def serve_fetch(cache, req, conn="c1"):
    """What a ShareFetch handler asks the cache, from the decoded request."""
    added = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
    forgotten = [(f.topic_id, p) for f in req.forgotten_topics_data for p in f.partitions]
    acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
    return cache.fetch(req.group_id, req.member_id, req.share_session_epoch, added, forgotten, acks, conn)


def test_a_session_opens_grows_shrinks_and_closes():
    client, cache = ShareSession("g", "m"), ShareSessionCache()
    built = client.build_fetch([P0, P1], {})
    req = over_the_wire(built.request)
    assert req.share_session_epoch == 0 and req.max_records == 500 and req.share_acquire_mode == 0
    res = serve_fetch(cache, req)
    assert res.error is None and res.partitions == {P0, P1}
    client.handle_response(0)
    assert client.epoch == 1
    # epoch 1: P2 added, P0 forgotten, an acknowledgement for P1 rides along
    built = client.build_fetch([P1, P2], {P1: [AckBatch(0, 4, (ACCEPT,))]})
    req = over_the_wire(built.request)
    assert [(p.partition_index, len(p.acknowledgement_batches)) for p in req.topics[0].partitions] == [(1, 1), (2, 0)]
    assert [(f.topic_id, f.partitions) for f in req.forgotten_topics_data] == [(T, [0])]
    res = serve_fetch(cache, req)
    assert res.error is None and res.partitions == {P1, P2}
    client.handle_response(0)
    # a quiet fetch lists nothing and still fetches the whole session
    req = over_the_wire(client.build_fetch([P1, P2], {}).request)
    assert req.topics == [] and req.forgotten_topics_data == []
    assert serve_fetch(cache, req).partitions == {P1, P2}
    client.handle_response(0)
    # commit_sync: ShareAcknowledge at the current epoch
    built = client.build_acknowledge({P2: [AckBatch(7, 7, (ACCEPT,))]})
    areq = over_the_wire(built.request)
    assert areq.share_session_epoch == 3
    assert cache.acknowledge(areq.group_id, areq.member_id, areq.share_session_epoch).error is None
    client.handle_response(0, fetch=False)
    assert client.epoch == 4
    # close: epoch -1 releases
    areq = over_the_wire(client.build_acknowledge({}, closing=True).request)
    assert areq.share_session_epoch == -1
    res = cache.acknowledge("g", "m", -1)
    assert res.release and not cache.has_sessions("g")
    client.closed()
    assert client.epoch == 0


def test_acknowledgements_at_epoch_zero_fail_locally():
    client = ShareSession("g", "m")
    built = client.build_fetch([P0], {P0: [AckBatch(0, 0, (ACCEPT,))]})
    assert built.failed == {P0: [AckBatch(0, 0, (ACCEPT,))]} and built.acks == {}
    assert all(not p.acknowledgement_batches for t in built.request.topics for p in t.partitions)
    assert client.build_acknowledge({P0: [AckBatch(0, 0, (ACCEPT,))]}).failed == {P0: [AckBatch(0, 0, (ACCEPT,))]}
    assert client.build_acknowledge({}).request is None


def test_broker_refuses_what_kafka_refuses():
    cache = ShareSessionCache(max_sessions=1)
    assert cache.fetch("g", "m", 0, [P0], [], True).error == ErrorCode.INVALID_REQUEST
    assert cache.fetch("g", "m", 3, [P0], [], False).error == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert cache.fetch("g", "m", -1, [], [], False).error == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert cache.acknowledge("g", "m", 0).error == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge("g", "m", 1).error == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert cache.fetch("g", "m", 0, [P0], [], False).error is None
    assert cache.fetch("g", "other", 0, [P0], [], False).error == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert cache.fetch("g", "m", 2, [], [], False).error == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledge("g", "m", 5).error == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    # reopening at epoch 0 replaces the session without releasing
    res = cache.fetch("g", "m", 0, [P1], [], False)
    assert res.error is None and not res.release and res.partitions == {P1}
    with pytest.raises(ValueError):
        ShareSessionCache(0)


def test_client_restarts_the_session_after_session_errors():
    for code, fetch in ((ErrorCode.SHARE_SESSION_NOT_FOUND, True), (ErrorCode.INVALID_SHARE_SESSION_EPOCH, False),
                        (ErrorCode.SHARE_SESSION_LIMIT_REACHED, True)):
        client = ShareSession("g", "m")
        client.build_fetch([P0], {})
        client.handle_response(0)
        client.handle_response(code, fetch=fetch)
        assert (client.epoch, client.partitions) == (0, set())
    client = ShareSession("g", "m")
    client.build_fetch([P0], {})
    client.handle_response(0)
    client.handle_response(ErrorCode.SHARE_SESSION_LIMIT_REACHED, fetch=False)    # not a restart for acks
    client.handle_response(ErrorCode.GROUP_AUTHORIZATION_FAILED)                  # other errors: unchanged
    assert client.epoch == 1


def test_epochs_wrap_to_one():
    assert next_epoch(INT32_MAX) == 1 and next_epoch(5) == 6
    cache = ShareSessionCache()
    cache.fetch("g", "m", 0, [], [], False)
    cache.sessions[("g", "m")].epoch = INT32_MAX
    assert cache.fetch("g", "m", INT32_MAX, [], [], False).error is None
    assert cache.sessions[("g", "m")].epoch == 1


def test_renew_fetches_nothing_and_needs_v2():
    client = ShareSession("g", "m")
    client.build_fetch([P0], {})
    client.handle_response(0)
    req = client.build_fetch([P0], {P0: [AckBatch(3, 3, (RENEW,))]}, FetchLimits(acquire_mode=1)).request
    assert req.is_renew_ack and (req.max_wait_ms, req.min_bytes, req.max_bytes, req.max_records) == (0, 0, 0, 0)
    assert req.share_acquire_mode == 1
    assert over_the_wire(req).is_renew_ack
    v1 = ShareSession("g", "m", version=1)
    v1.build_fetch([P0], {})
    v1.handle_response(0)
    with pytest.raises(ValueError):
        v1.build_fetch([P0], {P0: [AckBatch(3, 3, (RENEW,))]})
    req = v1.build_fetch([P0], {}, FetchLimits(acquire_mode=1)).request
    assert req.share_acquire_mode == 0
    ShareFetchRequest.decode(req.encode(1), 1)
    with pytest.raises(ValueError):
        ShareSession("g", "m", version=3)


def test_connection_close_ends_its_sessions():
    cache = ShareSessionCache()
    cache.fetch("g", "a", 0, [P0], [], False, connection="c1")
    cache.fetch("g", "b", 0, [P0], [], False, connection="c2")
    assert cache.connection_closed("c1") == [("g", "a")]
    assert cache.has_sessions("g") and not cache.has_sessions("h")
    assert ShareAcknowledgeRequest.decode(
        ShareSession("g", "b").build_acknowledge({}, closing=True).request.encode(1), 1).share_session_epoch == -1
