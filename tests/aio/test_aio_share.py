"""kohort.aio.AIOShareConsumer (KIP-932 share groups on the event loop) against kohort's broker and
Apache Kafka 4.3.1 (one node), each scenario on both (the Kafka runs in the slow suite: tests/conftest.py
SLOW_VARIANTS; the `kshare` fixture and fast share settings of
tests/client/share/test_share_consumer_kafka.py: lock 4 s, heartbeat 0.5 s, member session 6 s,
delivery count limit 3; groups read from the earliest offset): three members accept every record
exactly once, RELEASE redelivers with delivery count 2, REJECT archives, close releases to the other
members, a slow `async for` body keeps its membership, a cancelled poll() loses nothing, a coroutine
acknowledgement callback, and AIOShareConsumer beside the threaded kohort.ShareConsumer in one group."""
from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from kohort import ShareConsumer
from kohort.aio import AIOShareConsumer
from kohort.client.share.consumer import AcknowledgeType, IllegalStateError
from kohort.errors import ConfigError
from kohort.structs import TopicPartition
from tests.client.share.test_share_consumer_kafka import _setup, admin, kshare  # noqa: F401 - fixtures

SESSION_S = 6.0       # group.share.session.timeout.ms of the fixture's brokers


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _aio(kshare, g, t=None, **conf) -> AIOShareConsumer:
    c = AIOShareConsumer(bootstrap_servers=kshare.bootstrap, group_id=g, **conf)
    if t is not None:
        c.subscribe([t])
    return c


async def _poll_until(c: AIOShareConsumer, n: int, timeout: float = 15.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += await c.poll(500)
    return got


# -- configuration (no broker) -------------------------------------------------------------------------
@pytest.mark.parametrize("key,value", [("auto_offset_reset", "earliest"), ("enable_auto_commit", False),
                                       ("group_instance_id", "i"), ("session_timeout_ms", 10000)])
def test_configs_java_rejects_are_rejected(key, value):
    with pytest.raises(ConfigError, match=key.replace("_", r"\.")):
        AIOShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g", **{key: value})
    with pytest.raises(ConfigError, match=key.replace("_", r"\.")):
        AIOShareConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", key.replace("_", "."): value})


def test_bad_settings_and_use_before_start_are_clear_errors():
    with pytest.raises(ConfigError, match="share.acknowledgement.mode"):
        AIOShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g", share_acknowledgement_mode="auto")
    with pytest.raises(ConfigError, match="group.id"):
        AIOShareConsumer(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ConfigError, match="no.such"):
        AIOShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g", no_such=1)

    async def main():
        c = AIOShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g")
        with pytest.raises(Exception, match="not started"):
            await c.poll(0)
        await c.close()
        with pytest.raises(IllegalStateError, match="closed"):
            await c.poll(0)
    run(main())


# -- on kohort broker and Apache Kafka 4.3.1 -----------------------------------------------------------------
def test_three_members_each_record_accepted_once(kshare, admin):
    t, g = _setup(kshare, admin, partitions=3, records=90)
    seen: Counter = Counter()

    async def member(c: AIOShareConsumer, counts: Counter) -> None:
        deadline = time.monotonic() + 25
        while sum(seen.values()) < 90 and time.monotonic() < deadline:
            for r in await c.poll(200):
                assert r.delivery_count == 1
                seen[(r.partition, r.offset)] += 1
                counts[c.member_id] += 1
        assert all(e is None for e in (await c.commit_sync(10000)).values())

    async def main():
        members = [_aio(kshare, g, t) for _ in range(3)]
        counts: Counter = Counter()
        try:
            for c in members:
                await c.start()
            await asyncio.gather(*(member(c, counts) for c in members))
            ids = {c.member_id for c in members}
        finally:
            for c in members:
                await c.close()
        return ids

    ids = run(main())
    assert len(seen) == 90 and set(seen.values()) == {1}, "every record delivered exactly once"
    assert sorted(seen) == sorted((p, o) for p in range(3) for o in range(30))
    assert len(ids) == 3
    offsets = admin.list_share_group_offsets(g)
    assert set(offsets) == {TopicPartition(t, p) for p in range(3)}
    assert all(info.lag == 0 for info in offsets.values()), offsets


def test_release_redelivers_with_delivery_count_2_and_reject_archives(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=6)

    async def main():
        async with _aio(kshare, g, t, share_acknowledgement_mode="explicit") as c:
            first = await _poll_until(c, 6)
            assert [(r.offset, r.delivery_count) for r in first] == [(o, 1) for o in range(6)]
            assert c.acquisition_lock_timeout_ms() == 4000
            with pytest.raises(IllegalStateError, match="not acknowledged"):
                await c.poll(0)
            for r in first:
                c.acknowledge(r, AcknowledgeType.REJECT if r.offset < 2 else AcknowledgeType.RELEASE)
            again = await _poll_until(c, 4)
            assert [(r.offset, r.delivery_count, r.value) for r in again] == \
                [(o, 2, b"v%d" % o) for o in range(2, 6)]       # the REJECTed two never again
            for r in again:
                c.acknowledge(r)
            assert await c.commit_sync(10000) == {TopicPartition(t, 0): None}
            assert await c.poll(1500) == []
    run(main())
    assert admin.list_share_group_offsets(g)[TopicPartition(t, 0)].lag == 0


def test_close_releases_to_the_others(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=6)

    async def main():
        a = _aio(kshare, g, t, share_acknowledgement_mode="explicit")
        b = _aio(kshare, g, t)
        try:
            await a.start()
            held = await _poll_until(a, 6)
            assert [r.delivery_count for r in held] == [1] * 6
            await b.start()
            assert await b.poll(1000) == []             # a holds every record
            await a.close()                             # ShareAcknowledge epoch -1 releases them at once
            got = await _poll_until(b, 6, timeout=3.0)  # well before a's locks (4 s) would expire
            assert sorted((r.offset, r.delivery_count) for r in got) == [(o, 2) for o in range(6)]
        finally:
            await a.close()
            await b.close()
    run(main())


def test_a_slow_async_for_body_keeps_its_membership(kshare, admin):
    """The heartbeat task runs while the application's body awaits: a body longer than the member
    session (6 s) does not expire the member. Its records' locks (4 s) do expire meanwhile, so the
    implicit ACCEPT of the first record is refused and the record comes again (delivery count 2)."""
    t, g = _setup(kshare, admin, partitions=1, records=1)

    async def main():
        async with _aio(kshare, g, t) as c:
            got = []
            async for r in c:
                got.append((r.offset, r.delivery_count))
                if len(got) == 1:
                    beats = c._member._seq
                    await asyncio.sleep(SESSION_S + 1.0)
                    assert c._member._seq >= beats + 8, (beats, c._member._seq)   # every 0.5 s
                    d = admin.describe_share_groups([g])[g]
                    assert [m.member_id for m in d.members] == [c.member_id]
                else:
                    break
            assert got == [(0, 1), (0, 2)]
            assert c._member.member_epoch > 0
    run(main())


def test_cancelled_poll_loses_nothing_and_a_coroutine_callback_is_awaited(kshare, admin):
    t, g = _setup(kshare, admin, partitions=1, records=4)
    done: list = []

    async def callback(offsets, error):
        await asyncio.sleep(0)
        done.append((offsets, error))

    async def main():
        async with _aio(kshare, g, t, acknowledgement_commit_callback=callback) as c:
            recs: list = []
            for _ in range(5):                          # polls cancelled while they wait
                task = asyncio.ensure_future(c.poll(5000))
                await asyncio.sleep(0.05)
                task.cancel()
                try:
                    recs += await task                  # the poll had already returned: those count
                except asyncio.CancelledError:
                    pass
            recs += await _poll_until(c, 4 - len(recs))
            c.commit_async()
            deadline = time.monotonic() + 10
            while sum(len(o) for offs, _ in done for o in offs.values()) < 4 and time.monotonic() < deadline:
                await c.poll(200)
            return recs

    recs = run(main())
    assert [(r.offset, r.delivery_count) for r in recs] == [(o, 1) for o in range(4)]
    assert sorted(o for offs, _ in done for tp, os in offs.items() for o in os if tp == TopicPartition(t, 0)) == \
        [0, 1, 2, 3]
    assert all(err is None for _, err in done)


def test_mixed_with_a_threaded_share_consumer(kshare, admin):
    t, g = _setup(kshare, admin, partitions=3, records=60)
    seen: Counter = Counter()
    by: Counter = Counter()
    stop = threading.Event()
    errors: list = []
    sync = ShareConsumer({"bootstrap.servers": kshare.bootstrap, "group.id": g})
    sync.subscribe([t])

    def sync_loop():
        try:
            while not stop.is_set():
                for r in sync.poll(0.2):
                    seen[(r.partition, r.offset)] += 1
                    by["sync"] += 1
            sync.commit_sync(10)
        except Exception as e:                  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=sync_loop)
    th.start()

    async def main():
        async with _aio(kshare, g, t) as c:
            deadline = time.monotonic() + 25
            while sum(seen.values()) < 60 and time.monotonic() < deadline:
                for r in await c.poll(200):
                    seen[(r.partition, r.offset)] += 1
                    by["aio"] += 1
            await c.commit_sync(10000)
            return c.member_id

    try:
        aio_id = run(main())
    finally:
        stop.set()
        th.join(15)
        sync.close()
    assert not errors
    assert len(seen) == 60 and set(seen.values()) == {1}, (len(seen), by)
    assert aio_id != sync.member_id


def test_unsubscribe_sends_acknowledgements_and_subscribe_rejoins(kshare, admin):
    from kohort import Producer
    t, g = _setup(kshare, admin, partitions=1, records=3)

    async def main():
        async with _aio(kshare, g, t) as c:
            assert len(await _poll_until(c, 3)) == 3
            await c.poll(500)                         # implicit mode: accepts the 3 (on this poll's fetch)
            c.unsubscribe()
            await c.unsubscribe_wait()
            assert c.subscription() == set() and c.assignment() == set()
            with pytest.raises(IllegalStateError, match="not subscribed"):
                await c.poll(0)
            with Producer({"bootstrap.servers": kshare.bootstrap}) as p:
                p.send(t, value=b"late", partition=0)
                p.flush()
            c.subscribe([t])
            return await _poll_until(c, 1)

    got = run(main())
    assert [(r.offset, r.value, r.delivery_count) for r in got] == [(3, b"late", 1)]


def test_one_request_in_flight_per_leader(kshare, admin, monkeypatch):
    """ShareFetch and ShareAcknowledge to one leader never overlap, while the application polls,
    commits asynchronously and synchronously and cancels polls in between."""
    t, g = _setup(kshare, admin, partitions=3, records=60)
    inflight: Counter = Counter()
    most: Counter = Counter()
    fetch, ack = AIOShareConsumer._fetch, AIOShareConsumer._acknowledge_request

    def counted(real):
        async def wrapper(self, lead, *args):
            inflight[lead.node] += 1
            most[lead.node] = max(most[lead.node], inflight[lead.node])
            try:
                await real(self, lead, *args)
            finally:
                inflight[lead.node] -= 1
        return wrapper

    monkeypatch.setattr(AIOShareConsumer, "_fetch", counted(fetch))
    monkeypatch.setattr(AIOShareConsumer, "_acknowledge_request", counted(ack))

    async def main():
        got = 0
        async with _aio(kshare, g, t, max_poll_records=5) as c:
            deadline = time.monotonic() + 20
            while got < 60 and time.monotonic() < deadline:
                task = asyncio.ensure_future(c.poll(300))
                await asyncio.sleep(0.01)
                if got % 2:
                    task.cancel()
                try:
                    recs = await task
                except asyncio.CancelledError:
                    continue
                got += len(recs)
                if recs and got % 10 < 5:
                    c.commit_async()
                elif recs:
                    await c.commit_sync(10000)
        return got

    assert run(main()) == 60
    assert most and max(most.values()) == 1, most
