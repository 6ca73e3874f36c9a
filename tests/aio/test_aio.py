"""kohort.aio against a real kohort broker on loopback: produce/consume (assign, classic and KIP-848
groups, headers, keys), admin, transactions (read_committed sees commits only), cancellation (no
half-sent request, no stuck member) and the event loop's worst stall while consuming and producing."""
from __future__ import annotations

import asyncio
import gc
import random
import statistics
import time
import uuid

import pytest

from kohort.aio import AIOAdmin, AIOConsumer, AIOProducer, open_connection
from kohort.aio.client import parse_bootstrap
from kohort.errors import KafkaConnectionError, UnknownTopicOrPartitionError
from kohort.protocol.messages.metadata import MetadataRequest
from kohort.structs import TopicPartition
from tests.helpers.brokers import KohortBroker

BROKER_CONFIG = {"group.min.session.timeout.ms": 1000, "group.consumer.session.timeout.ms": 3000,
                 "group.consumer.min.session.timeout.ms": 1000, "group.consumer.heartbeat.interval.ms": 500,
                 "group.consumer.min.heartbeat.interval.ms": 100, "group.initial.rebalance.delay.ms": 0}


@pytest.fixture(scope="module")
def broker():
    with KohortBroker(config=BROKER_CONFIG) as b:
        yield b


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def create(bs: str, topic: str, partitions: int) -> None:
    async with AIOAdmin(bs) as admin:
        res = await admin.create_topics({topic: partitions})
        assert res == {topic: None}


def test_produce_then_consume_assigned_keys_headers_and_metadata(broker):
    topic = name("aio-rt")

    async def main():
        await create(broker.bootstrap, topic, 3)
        async with AIOProducer(broker.bootstrap, linger_ms=2) as p:
            futs = [await p.send(topic, f"v{i}".encode(), key=f"k{i % 5}".encode(),
                                 headers=[("h", str(i).encode())]) for i in range(3000)]
            await p.flush()
            mds = [f.result() for f in futs]
            assert sorted(await p.partitions_for(topic)) == [0, 1, 2]
        # keyed records of one key land in one partition, offsets are dense per partition
        by_key = {}
        for i, md in enumerate(mds):
            by_key.setdefault(i % 5, set()).add(md.partition)
        assert all(len(ps) == 1 for ps in by_key.values())
        for part in range(3):
            offs = sorted(md.offset for md in mds if md.partition == part)
            assert offs == list(range(len(offs)))
        async with AIOConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, p) for p in range(3)])
            got = []
            while len(got) < 3000:
                batch = await c.getmany(timeout_ms=5000)
                assert batch, f"stalled at {len(got)} records"
                for tp, recs in batch.items():
                    got += recs
            assert sorted(int(r.value[1:]) for r in got) == list(range(3000))
            assert all(r.headers == [("h", r.value[1:])] and r.key == b"k%d" % (int(r.value[1:]) % 5) for r in got)
            assert c.highwater(TopicPartition(topic, 0)) == sum(1 for md in mds if md.partition == 0)
            ends = await c.end_offsets([TopicPartition(topic, p) for p in range(3)])
            assert sum(ends.values()) == 3000
            assert await c.getmany(timeout_ms=0) == {}
    run(main())


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_member_commits_and_a_second_member_takes_half(broker, protocol):
    topic, group = name("aio-grp"), name("g")

    async def main():
        await create(broker.bootstrap, topic, 4)
        async with AIOProducer(broker.bootstrap) as p:
            for i in range(400):
                await p.send(topic, b"%d" % i, partition=i % 4)
            await p.flush()
        events = []

        class Listener:
            async def on_partitions_revoked(self, revoked):
                await asyncio.sleep(0.01)           # a coroutine listener is awaited
                events.append(("revoked", frozenset(revoked)))

            async def on_partitions_assigned(self, assigned):
                events.append(("assigned", frozenset(assigned)))

        kw = dict(bootstrap_servers=broker.bootstrap, group_id=group, group_protocol=protocol,
                  auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=300)
        async with AIOConsumer(**kw) as a:
            a.subscribe([topic], listener=Listener())
            seen = []
            async for r in a:
                seen.append(int(r.value))
                if len(seen) == 400:
                    break
            assert sorted(seen) == list(range(400))
            await a.commit()
            assert await a.committed(TopicPartition(topic, 0)) == 100
            assert events[0] == ("assigned", frozenset(TopicPartition(topic, p) for p in range(4)))
            async with AIOConsumer(**kw) as b:
                b.subscribe([topic])
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    await a.getmany(timeout_ms=50)
                    await b.getmany(timeout_ms=50)
                    if len(a.assignment()) == 2 and len(b.assignment()) == 2:
                        break
                assert len(a.assignment()) == 2 and len(b.assignment()) == 2, (a.assignment(), b.assignment())
                assert a.assignment() | b.assignment() == {TopicPartition(topic, p) for p in range(4)}
                assert any(e[0] == "revoked" for e in events)
    run(main())


def test_admin_topics_groups_and_offsets(broker):
    topic, group = name("aio-adm"), name("g")

    async def main():
        async with AIOAdmin(broker.bootstrap) as admin:
            assert (await admin.create_topics({topic: 2}))[topic] is None
            again = await admin.create_topics([topic])
            assert type(again[topic]).__name__ == "TopicAlreadyExistsError"
            assert topic in await admin.list_topics()
            (d,) = await admin.describe_topics([topic])
            assert d.name == topic and [p.partition for p in d.partitions] == [0, 1]
            await admin.alter_group_offsets(group, {TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0})
            assert await admin.list_group_offsets(group) == {
                TopicPartition(topic, 0): (0, "", None), TopicPartition(topic, 1): (0, "", None)}
            assert group in [g.group_id for g in await admin.list_groups()]
            (gd,) = await admin.describe_groups([group])
            assert gd.group_id == group and gd.members == []
            assert (await admin.list_offsets({TopicPartition(topic, 0): -1})) == {TopicPartition(topic, 0): 0}
            assert (await admin.delete_groups([group]))[group] is None
            assert (await admin.delete_topics([topic]))[topic] is None
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.describe_topics([topic])
    run(main())


def test_transactions_commit_visible_abort_invisible(broker):
    topic = name("aio-txn")

    async def main():
        await create(broker.bootstrap, topic, 1)
        async with AIOProducer(broker.bootstrap, transactional_id=name("tx")) as p:
            await p.begin_transaction()
            for i in range(10):
                await p.send(topic, b"c%d" % i)
            await p.commit_transaction()
            await p.begin_transaction()
            for i in range(10):
                await p.send(topic, b"a%d" % i)
            await p.abort_transaction()
            await p.begin_transaction()
            await p.send(topic, b"last")
            await p.send_offsets_to_transaction({TopicPartition(topic, 0): 5}, name("g"))
            await p.commit_transaction()
        async with AIOConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                               isolation_level="read_committed") as c:
            c.assign([TopicPartition(topic, 0)])
            got = []
            while not got or got[-1] != b"last":
                batch = await c.getmany(timeout_ms=5000)
                assert batch
                got += [r.value for recs in batch.values() for r in recs]
            assert got == [b"c%d" % i for i in range(10)] + [b"last"]
    run(main())


def test_cancelled_requests_leave_no_half_sent_request_and_the_connection_usable(broker):
    """Tasks cancelled at random points while their requests are written or answered: every later
    request on the same connection is answered with its own answer, nothing stays in flight."""
    host, port = parse_bootstrap(broker.bootstrap)[0]

    async def main():
        conn = await open_connection(host, port)
        rng = random.Random(7)
        for _ in range(20):
            tasks = [asyncio.ensure_future(conn.request(MetadataRequest(topics=None))) for _ in range(20)]
            await asyncio.sleep(rng.random() * 0.002)
            for t in tasks:
                if rng.random() < 0.5:
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        answers = await asyncio.gather(*(conn.request(MetadataRequest(topics=None)) for _ in range(10)))
        assert all(len(a.brokers) == 1 for a in answers)
        for _ in range(100):
            if conn.proto.in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert conn.proto.in_flight == 0 and conn.is_open
        conn.close()
        with pytest.raises(KafkaConnectionError):
            await conn.request(MetadataRequest(topics=None))
    run(main())


def test_large_requests_go_out_in_pieces_in_order_through_a_full_socket(broker):
    """Two Produce requests of ~700 KB each, a Metadata request between them and a caller cancelled
    mid-write, on a connection whose socket takes 8 KiB at a time (the transport pauses writing):
    each large request leaves the loop in WRITE_CHUNK pieces over several turns, frames stay whole
    and in order (the broker checks every batch's CRC) and the cancelled caller's request still
    lands."""
    import socket

    from kohort.aio.connection import WRITE_CHUNK
    from kohort.protocol.messages.produce import ProduceRequest
    from kohort.protocol.records import build_batch

    topic = name("aio-pieces")
    host, port = parse_bootstrap(broker.bootstrap)[0]
    n = 700
    batches = [build_batch([(None, bytes([i]) * 1000, None, 1000 + j) for j in range(n)]) for i in (1, 2)]
    assert len(batches[0]) > 4 * WRITE_CHUNK

    def produce(batch):
        PD = ProduceRequest.TopicProduceData
        return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
            PD(name=topic, partition_data=[PD.PartitionProduceData(index=0, records=batch)])])

    async def main():
        await create(broker.bootstrap, topic, 1)
        conn = await open_connection(host, port)
        conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        first = asyncio.ensure_future(conn.request(produce(batches[0])))
        await asyncio.sleep(0)          # first's request is handed over: part written, the rest queued
        assert conn._queue
        first.cancel()
        meta = asyncio.ensure_future(conn.request(MetadataRequest(topics=None)))
        second = asyncio.ensure_future(conn.request(produce(batches[1])))
        await asyncio.gather(first, return_exceptions=True)
        answer = await second
        pr = answer.responses[0].partition_responses[0]
        assert (pr.error_code, pr.base_offset) == (0, n)
        assert len((await meta).brokers) == 1
        assert not conn._queue and conn.is_open
        async with AIOConsumer(bootstrap_servers=broker.bootstrap) as c:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            got = []
            while len(got) < 2 * n:
                for recs in (await c.getmany(timeout_ms=2000)).values():
                    got += [r.value for r in recs]
        assert got == [b"\x01" * 1000] * n + [b"\x02" * 1000] * n
        conn.close()
    run(main())


def test_cancelled_reader_and_commit_leave_the_member_heartbeating(broker):
    """Cancel getmany() and commit() mid-flight: the member stays in the group (its heartbeats go on
    from their own task), a second member joins and both rebalance to a 1/1 split."""
    topic, group = name("aio-cancel"), name("g")

    async def main():
        await create(broker.bootstrap, topic, 2)
        kw = dict(bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                  session_timeout_ms=3000, heartbeat_interval_ms=200)
        async with AIOConsumer(**kw) as a:
            a.subscribe([topic])
            while not a.assignment():
                await a.getmany(timeout_ms=100)
            t = asyncio.ensure_future(a.getmany(timeout_ms=10000))
            await asyncio.sleep(0.05)
            t.cancel()
            c = asyncio.ensure_future(a.commit({TopicPartition(topic, 0): 0}))
            await asyncio.sleep(0)
            c.cancel()
            await asyncio.gather(t, c, return_exceptions=True)
            # the application goes on with CPU-bound code that does not read records for 4 s
            # (longer than the session timeout): heartbeats are a task of their own
            gen = a.group.generation.generation_id
            await asyncio.sleep(4)
            assert a.group.generation.generation_id == gen and a.group.in_group()
            async with AIOConsumer(**kw) as b:
                b.subscribe([topic])
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and not (len(a.assignment()) == 1 and len(b.assignment()) == 1):
                    await asyncio.gather(a.getmany(timeout_ms=50), b.getmany(timeout_ms=50))
                assert len(a.assignment()) == 1 and len(b.assignment()) == 1
                await a.commit()
    run(main())


async def _ticker(lat: list, cpu: list, stop: asyncio.Event) -> None:
    """A 1 ms periodic task. `lat`: how late it ran (wall clock: includes the time the OS gave other
    processes); `cpu`: CPU time the loop's thread spent between two of its runs, i.e. the work run
    on the loop in one go, which a busy machine does not inflate."""
    while not stop.is_set():
        t, c = time.perf_counter(), time.thread_time()
        await asyncio.sleep(0.001)
        lat.append((time.perf_counter() - t - 0.001) * 1000)
        cpu.append((time.thread_time() - c) * 1000)


def _summary(xs: list) -> tuple[float, float]:
    return statistics.quantiles(xs, n=100, method="inclusive")[98], max(xs)


@pytest.mark.slow   # a timing measurement: bench/bench_aio.py reports it beside aiokafka's; not a default-suite check
def test_loop_stall_while_consuming_and_producing(broker):
    """The loop's worst stall (a 1 ms ticker) while producing then consuming 200k x 100 B and
    20k x 1 KiB at full speed: the CPU time run on the loop in one go stays within the issue's
    bounds (p99 <= 5 ms, max <= 20 ms) both ways (the producer keeps no per-record object alive
    while records wait for their answer, so full garbage collections stay rare and short). The
    wall-clock lateness is printed (-s) beside it and depends on what else the machine runs."""
    topic = name("aio-stall")

    async def measured(label, work, n, out):
        gc.collect()            # what the previous phase left is not this phase's collection
        lat, cpu, stop = [], [], asyncio.Event()
        tick = asyncio.ensure_future(_ticker(lat, cpu, stop))
        t0 = time.perf_counter()
        await work()
        dt = time.perf_counter() - t0
        stop.set()
        await tick
        out[label] = (*_summary(cpu), *_summary(lat), n / dt)

    async def main():
        await create(broker.bootstrap, topic, 1)
        out = {}
        for label, n, size in (("100B", 200_000, 100), ("1KiB", 20_000, 1024)):
            value = b"x" * size

            async def produce():
                async with AIOProducer(broker.bootstrap, linger_ms=5) as p:
                    for _ in range(n):
                        await p.send(topic, value)
                    await p.flush()

            async def consume():
                async with AIOConsumer(bootstrap_servers=broker.bootstrap) as c:
                    tp = TopicPartition(topic, 0)
                    c.assign([tp])
                    c.seek(tp, (await c.end_offsets([tp]))[tp] - n)
                    got = 0
                    while got < n:
                        batch = await c.getmany(timeout_ms=5000)
                        assert batch
                        got += sum(len(v) for v in batch.values())
            await measured(f"produce {n} x {label}", produce, n, out)
            await measured(f"consume {n} x {label}", consume, n, out)
        return out

    out = run(main(), 120)
    for k, (cp99, cmax, wp99, wmax, rate) in out.items():
        print(f"{k}: loop CPU in one go p99 {cp99:.2f} ms, max {cmax:.2f} ms; ticker lateness p99 {wp99:.2f} ms, "
              f"max {wmax:.2f} ms; {rate:,.0f} records/s")
    for k, (cp99, cmax, *_rest) in out.items():
        assert cp99 <= 5 and cmax <= 20, (k, cp99, cmax)


def test_record_futures_work_with_await_gather_wait_and_callbacks(broker):
    """send()'s RecordFuture (one shared future per batch) as an asyncio future: awaited, gathered,
    waited on, with done callbacks; each record's metadata is its own (offset, timestamp); a failed
    batch fails each record's future with the batch's error."""
    topic = name("aio-recfut")

    async def main():
        await create(broker.bootstrap, topic, 1)
        async with AIOProducer(broker.bootstrap, linger_ms=50) as p:
            futs = [await p.send(topic, b"v%d" % i, partition=0, timestamp_ms=1_000 + i) for i in range(5)]
            seen = []
            futs[3].add_done_callback(lambda f: seen.append((f is futs[3], f.result().offset)))
            assert not futs[0].done() and futs[0].cancel() is False
            mds = await asyncio.gather(*futs[:2])
            done, pending = await asyncio.wait(futs[2:4])
            assert not pending and {f.result().offset for f in done} == {2, 3}
            last = await futs[4]
            await asyncio.sleep(0)
            assert [m.offset for m in mds] == [0, 1] and last.offset == 4 and last.timestamp == 1_004
            assert mds[1].timestamp == 1_001 and mds[1].timestamp_type == 0 and mds[0].topic == topic
            assert seen == [(True, 3)] and futs[4].exception() is None
            f = await p.send(topic, b"x" * 2_000_000, partition=0)      # over the broker's message.max.bytes
            with pytest.raises(Exception) as e1:
                await f
            assert f.done() and f.exception() is e1.value
    run(main())


def _decoded(payload, fetch_offset=7, aborted=None, isolation="read_uncommitted", **kw):
    """What AIOConsumer hands out of one answer's records, one decode step per _take: ((records,
    bytes counted, next offset) per step, buffered bytes after all were taken, records handed out);
    no broker: the consumer is not started."""
    from kohort.aio.consumer import AIOConsumer, _Chunk, _PState
    from kohort.protocol.records import DecompressionBudget, scan_batches

    c = AIOConsumer(bootstrap_servers="127.0.0.1:1", isolation_level=isolation, **kw)
    tp = TopicPartition("t", 0)
    st = c._parts[tp] = _PState()
    st.position = st.fetch_offset = fetch_offset
    view = memoryview(payload)
    nxt, _ep, legacy = scan_batches(view, fetch_offset, True)
    st.buffered = len(view)
    chunks, got = [], []

    def recorded(steps):
        for recs, next_offset, nbytes in steps:
            chunks.append((len(recs), nbytes, next_offset))
            yield recs, next_offset, nbytes
    ch = _Chunk(tp, (), None, 0, 0, sent=(fetch_offset, 0))
    ch.steps = recorded(c._steps(ch, st, view, nxt, legacy, aborted, DecompressionBudget()))
    c._chunks.append(ch)
    while c._chunks:
        took = c._take(set(), None).get(tp, [])
        assert len(took) == chunks[-1][0]         # one step per call
        got += took
    assert st.position == nxt
    return chunks, st.buffered, got


def test_decode_steps_cover_every_record_once():
    """A fetch payload of small batches, a large uncompressed one, a large compressed one and a big
    record decodes, step by bounded step, to exactly what one decode of the whole gives; every fetched
    byte is counted once."""
    from kohort.aio.consumer import DECODE_SLICE_BYTES, DECODE_STEP_RECORDS, _step
    from kohort.protocol.records import build_batch, decode_records_list
    from kohort.structs import ConsumerRecord

    def batch(base, n, size, codec=0):
        return build_batch([(None, b"%d" % i + b"x" * size, None, 1000 + i) for i in range(n)], base_offset=base,
                           compression=codec)
    payload = batch(0, 10, 100) + batch(10, 3000, 100) + batch(3010, 5, 10) + batch(3015, 2000, 100, codec=1) \
        + batch(5015, 1, 200_000)
    whole = decode_records_list(payload, min_offset=7, record_factory=ConsumerRecord, prefix=("t", 0))
    step, total = _step(memoryview(payload), 5016, False)
    assert total == 5016 and step == min(DECODE_STEP_RECORDS, total * DECODE_SLICE_BYTES // len(payload))
    chunks, left, got = _decoded(payload)
    assert got == whole and len(got) == 5016 - 7
    assert len(chunks) >= len(whole) // step and all(n <= step for n, _b, _o in chunks)
    assert sum(b for _n, b, _o in chunks) == len(payload) and left == 0
    assert [o for _n, _b, o in chunks] == [None] * (len(chunks) - 1) + [5016]
    # deserializers apply to every step
    _c, _l, got = _decoded(payload, value_deserializer=len)
    assert [r.value for r in got] == [len(r.value) for r in whole]


def test_decode_steps_read_committed_and_legacy():
    """read_committed drops an aborted transaction's batches (and every control batch) through the
    stepped decoder, as the threaded consumer's decode_partition; legacy entries decode alike."""
    from kohort.client.consumer.fetcher import decode_partition
    from kohort.protocol.records import build_batch, build_control_batch
    from tests.protocol.test_records import legacy_msg

    def txn(base, n, pid, codec=0):
        return build_batch([(None, b"p%d-%d" % (pid, i), None, 5) for i in range(n)], base_offset=base,
                           producer_id=pid, producer_epoch=0, transactional=True, compression=codec)
    payload = (build_batch([(None, b"plain", None, 1)] * 3)
               + txn(3, 2000, 7) + txn(2003, 40, 8, codec=2) + build_control_batch(False, 7, 0, 2043)
               + build_control_batch(True, 8, 0, 2044) + txn(2045, 900, 7) + build_control_batch(True, 7, 0, 2945))
    aborted = [type("A", (), {"producer_id": 7, "first_offset": 3})()]
    want = decode_partition("t", 0, payload, 1, aborted=aborted, read_committed=True)[0]
    assert len(want) == 2 + 40 + 900
    chunks, left, got = _decoded(payload, 1, aborted, "read_committed")
    assert got == want and left == 0 and sum(b for _n, b, _o in chunks) == len(payload)
    _c, _l, got = _decoded(payload, 1, None, "read_committed")
    assert got == decode_partition("t", 0, payload, 1)[0] and len(got) == 2 + 2000 + 40 + 900
    old = legacy_msg(0, 1, b"k", b"v", timestamp=3) + legacy_msg(1, 1, None, b"w", timestamp=4)
    legacy = old + build_batch([(None, b"x", None, 9)] * 600, base_offset=2)
    _c, _l, got = _decoded(legacy, 1)
    assert got == decode_partition("t", 0, legacy, 1)[0] and len(got) == 601


def test_sasl_plain_listener_and_a_wrong_password():
    """SASL/PLAIN through ClientProtocol's handshake: produce and consume on a SASL_PLAINTEXT listener;
    a wrong password fails with the broker's SASL_AUTHENTICATION_FAILED, not a retry loop."""
    from kohort.errors import SaslAuthenticationFailedError
    from tests.helpers.brokers import free_port

    plain, sasl = free_port(), free_port()
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_alice="alice-secret";')
    config = {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
              "sasl.enabled.mechanisms": "PLAIN",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas}
    topic = name("aio-sasl")

    async def main(bs):
        auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="alice")
        async with AIOProducer(bs, sasl_plain_password="alice-secret", **auth) as p:
            md = await p.send_and_wait(topic, b"secret record")
        async with AIOConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                               sasl_plain_password="alice-secret", **auth) as c:
            c.assign([TopicPartition(topic, md.partition)])
            got = await c.getmany(timeout_ms=5000)
            assert [r.value for rs in got.values() for r in rs] == [b"secret record"]
        with pytest.raises(SaslAuthenticationFailedError):
            async with AIOProducer(bs, sasl_plain_password="wrong", **auth):
                pass

    with KohortBroker(port=plain, config=config) as b:
        run(main(f"127.0.0.1:{sasl}"))


def test_fetch_session_incremental_forgets_paused_partitions_and_starts_over_when_lost(kafka_broker):
    """The consumer fetches in one incremental fetch session per broker (KIP-227): after the first
    full Fetch the session has an id and its epoch moves on; pausing two partitions (forgotten by
    the session) and resuming them reads every record once; a FETCH_SESSION_ID_NOT_FOUND answer
    starts a new session and nothing is lost or read twice."""
    kafka_broker.create_topic("sess", partitions=4)
    bs = kafka_broker.bootstrap_servers
    tps = [TopicPartition("sess", p) for p in range(4)]

    async def produce(p, start, n):
        for i in range(start, start + n):
            await p.send("sess", b"%d" % i, partition=i % 4)
        await p.flush()

    async def read(c, n):
        out = []
        deadline = time.monotonic() + 20
        while len(out) < n and time.monotonic() < deadline:
            for recs in (await c.getmany(timeout_ms=500)).values():
                out += [int(r.value) for r in recs]
        return out

    async def main():
        async with AIOProducer(bs) as p, AIOConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                                                     fetch_max_wait_ms=100) as c:
            c.assign(tps)
            await produce(p, 0, 400)
            got = await read(c, 400)
            (session,) = c._sessions.values()
            first_id, first_epoch = session.session_id, session.epoch
            assert first_id > 0 and first_epoch >= 1
            c.pause(tps[0], tps[1])
            await produce(p, 400, 400)
            got += await read(c, 200)
            assert sorted(got) == list(range(400)) + [i for i in range(400, 800) if i % 4 >= 2]
            deadline = time.monotonic() + 5           # a fetch out before the pause still names all four
            while set(session.sent) != {tps[2], tps[3]} and time.monotonic() < deadline:
                got += [int(r.value) for rs in (await c.getmany(timeout_ms=50)).values() for r in rs]
            assert set(session.sent) == {tps[2], tps[3]}         # the paused ones were forgotten
            c.resume(tps[0], tps[1])
            got += await read(c, 200)
            assert sorted(got) == list(range(800))
            assert session.session_id == first_id and session.epoch > first_epoch
            kafka_broker.fail_next("Fetch", "FETCH_SESSION_ID_NOT_FOUND")
            await produce(p, 800, 400)
            got += await read(c, 400)
            got += [int(r.value) for rs in (await c.getmany(timeout_ms=300)).values() for r in rs]    # none twice
            assert sorted(got) == list(range(1200))
            assert kafka_broker.faults_applied("Fetch") == 1
            assert session.session_id > 0
    run(main())


def test_send_appends_at_the_call_and_returns_a_completed_future(broker):
    """send() of a known topic with room appends the record at the call and returns an already
    completed future of its RecordFuture (no coroutine); a new topic's first send returns a coroutine
    that waits for its metadata; a tight loop of `await send()` still lets other tasks run."""
    topic = name("aio-send")

    async def main():
        await create(broker.bootstrap, topic, 1)
        async with AIOProducer(broker.bootstrap, linger_ms=50) as p:
            first = p.send(topic, b"first", partition=0)
            assert asyncio.iscoroutine(first) or not first.done()       # metadata of a new topic: waits
            rf0 = await first
            queued = p._queued
            pending = p.send(topic, b"not awaited", partition=0)
            assert asyncio.isfuture(pending) and pending.done() and not asyncio.iscoroutine(pending)
            assert p._queued == queued + 1                            # appended at the call
            turns = 0

            async def other():
                nonlocal turns
                while True:
                    turns += 1
                    await asyncio.sleep(0)
            t = asyncio.ensure_future(other())
            await asyncio.sleep(0)
            before = turns
            futs = [await p.send(topic, b"%d" % i, partition=0) for i in range(1000)]
            assert turns - before >= 1000 // 64 - 1                    # the loop got its turns
            t.cancel()
            await p.flush()
            assert (await rf0).offset == 0 and pending.result().result().offset == 1
            assert [f.result().offset for f in futs] == list(range(2, 1002))
            with pytest.raises(UnknownTopicOrPartitionError):
                p.send(topic, b"x", partition=7)
        with pytest.raises(Exception, match="closed"):
            await p.send(topic, b"late", partition=0)
    run(main())


def test_record_callbacks_of_a_batch_run_in_slices_and_one_failing_does_not_stop_the_rest(broker):
    """Done callbacks of the records of one batch wait in one list and run CALLBACK_SLICE at a time,
    with turns of the loop between; a callback that raises goes to the loop's exception handler and
    the others still run, each with its own record's metadata."""
    from kohort.aio.record_future import CALLBACK_SLICE
    topic = name("aio-cb")
    n = 4 * CALLBACK_SLICE + 10

    async def main():
        await create(broker.bootstrap, topic, 1)
        loop = asyncio.get_running_loop()
        errors = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx.get("exception")))
        turns = 0

        async def other():
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)
        async with AIOProducer(broker.bootstrap, linger_ms=200) as p:
            seen = []

            def cb(f):
                seen.append((turns, f.result().offset))
                if len(seen) == 5:
                    raise ValueError("callback five")
            futs = [await p.send(topic, b"%d" % i, partition=0) for i in range(n)]
            for f in futs:
                f.add_done_callback(cb)
            t = asyncio.ensure_future(other())
            await p.flush()
            while len(seen) < n:
                await asyncio.sleep(0.01)
            t.cancel()
        assert [o for _t, o in seen] == list(range(n))
        assert len(errors) == 1 and str(errors[0]) == "callback five"
        assert seen[-1][0] - seen[0][0] >= n // CALLBACK_SLICE        # slices with turns of the loop between
        late = []
        futs[0].add_done_callback(late.append)                    # already done: called soon
        await asyncio.sleep(0)
        assert late == [futs[0]]
    run(main())


def test_send_encodes_records_as_the_one_record_encoder(broker):
    """send()'s inlined common shape (no key, no headers, small timestamp delta and value) writes the
    bytes records.append_record writes, and every other shape goes through append_record itself,
    behind the header's room; sealed in place they are the bytes write_batch_buffer gives."""
    from kohort.protocol.records import BATCH_HEADER_SIZE, append_record, seal_batch_in_place, write_batch_buffer
    topic = name("aio-enc")
    shapes = [(None, b"v" * vl, None, 1000 + tsd) for tsd in (0, 1, 63, 64, -1) for vl in (0, 1, 63, 64, 7999, 8000)]
    shapes += [(b"k", b"v", None, 1000), (None, None, None, 1000), (None, b"v", [("h", b"1")], 1000),
               (b"", b"", [("h", None)], 1000 + 5000)]

    async def main():
        await create(broker.bootstrap, topic, 1)
        async with AIOProducer(broker.bootstrap, linger_ms=10_000, batch_size=1 << 20) as p:
            for key, value, headers, ts in shapes:
                await p.send(topic, value, key=key, partition=0, timestamp_ms=ts, headers=headers)
            got = bytes(p._open[(topic, 0)].buf)
            assert got[:BATCH_HEADER_SIZE] == bytes(BATCH_HEADER_SIZE)
            got = got[BATCH_HEADER_SIZE:]
            futs = [await p.send(topic, b"again", partition=0)]
            await p.flush()
            assert futs[0].result().offset == len(shapes)
        want = bytearray()
        for i, (key, value, headers, ts) in enumerate(shapes):
            append_record(want, i, ts - 1000, key, value, headers)
        assert got == bytes(want)
        ids = {"producer_id": 7, "producer_epoch": 1, "base_sequence": 42, "attributes": 0x10}
        assert seal_batch_in_place(bytearray(BATCH_HEADER_SIZE) + want, len(shapes), 1000, 6000, **ids) == \
            write_batch_buffer(want, len(shapes), 1000, 6000, **ids)
        async with AIOConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, 0)])
            recs = []
            while len(recs) < len(shapes) + 1:
                for rs in (await c.getmany(timeout_ms=2000)).values():
                    recs += rs
        assert [(r.key, r.value, r.timestamp) for r in recs[:-1]] == [(k, v, ts) for k, v, _h, ts in shapes]
    run(main())


def test_compiled_send_appends_partitions_and_counts_as_the_python_send(kafka_broker):
    """With the C extension, send()'s common case is `_crecords.AIOSend`: the same records sent
    through it and through the Python send alone (keys hashed, null keys sticky, explicit partitions,
    None values, headers and bytearrays that the compiled call hands to Python, batches filling up)
    give the same batches byte for byte, the same partitions, offset deltas and timestamps per record,
    and the same queued-records and buffered-bytes counts."""
    import os

    from kohort.aio import producer as aio_producer
    from kohort.client.partitioner import DefaultPartitioner
    assert aio_producer._COMPILED_SEND or os.environ.get("KOHORT_NO_EXT"), "the C extension is not built"
    for t in ("cmp-c", "cmp-py"):
        kafka_broker.create_topic(t, partitions=3)
    rng = random.Random(7)
    shapes = []
    for i in range(3000):
        kind = i % 7
        key = None if kind in (0, 1, 2) else b"k%d" % rng.randrange(40)
        value = None if kind == 6 and i % 2 else b"v" * rng.randrange(0, 300)
        partition = 1 if kind == 1 else None
        headers = [("h", b"1")] if i % 97 == 0 else None
        if i % 89 == 0 and value is not None:
            value = bytearray(value)
        ts = 1_000_000 + i // 5 - (3 if i % 50 == 0 else 0)
        shapes.append((key, value, partition, headers, ts))

    async def fill(topic: str, compiled: bool):
        p = AIOProducer(kafka_broker.bootstrap_servers, linger_ms=60_000, batch_size=4096,
                        partitioner=DefaultPartitioner(rng=random.Random(3)))
        await p.start()
        try:
            assert (type(p.send).__name__ == "AIOSend") == aio_producer._COMPILED_SEND
            if not compiled:
                p.__dict__.pop("send", None)          # the Python send alone
            await p.partitions_for(topic)
            # no await between the sends: the sender task does not run, every batch stays queued
            futs = [p.send(topic, v, key=k, partition=part, timestamp_ms=ts, headers=h)
                    for k, v, part, h, ts in shapes]
            batches = {tp[1]: [(bytes(b.buf), b.count, b.base_ts, b.max_ts) for b in dq]
                       for tp, dq in p._ready.items()}
            for tp, b in p._open.items():
                batches.setdefault(tp[1], []).append((bytes(b.buf), b.count, b.base_ts, b.max_ts))
            counts = p._queued, p._buffered
            recs = []
            for f in futs:                            # every 64th completes on the loop's next turn
                rf = await f
                recs.append((rf._tp[1], rf._delta, rf._ts))
            return recs, batches, *counts
        finally:
            await p.stop()

    async def main():
        return await fill("cmp-c", True), await fill("cmp-py", False)

    (rc, bc, qc, uc), (rp, bp, qp, up) = run(main())
    assert rc == rp
    assert bc == bp
    assert (qc, uc) == (qp, up) and qc == len(shapes)
    assert sum(len(v) for v in bc.values()) > 30            # batches filled up and were closed
    assert len({p for p, _d, _t in rc}) == 3


def test_null_key_records_move_to_another_partition_when_the_sticky_batch_closes(broker):
    """Null-key records stick to one partition until its batch closes (KIP-480, as the sync
    producer): full batches send the records that follow to another partition, and each partition's
    records are contiguous runs of the sent sequence, a run ending where its batch did."""
    topic = name("aio-sticky")

    async def main():
        await create(broker.bootstrap, topic, 3)
        async with AIOProducer(broker.bootstrap, linger_ms=60_000, batch_size=2048) as p:
            await p.partitions_for(topic)
            futs = [p.send(topic, b"v%03d" % i + b"." * 96) for i in range(200)]
            parts = [(await f)._tp[1] for f in futs]
            await p.flush()
            return parts, [(await f).result() for f in futs]

    parts, metas = run(main())
    runs = [1]
    for a, b in zip(parts, parts[1:]):
        if a == b:
            runs[-1] += 1
        else:
            runs.append(1)
    assert len(set(parts)) == 3 and len(runs) >= 9
    assert all(r == runs[0] for r in runs[:-1])             # every full batch holds the same count
    assert all(m.partition == pt for m, pt in zip(metas, parts))


def test_a_failed_first_batch_keeps_the_batches_behind_it_from_landing_first(kafka_broker):
    """The broker appends any sequence from a producer id it has no state for on a partition (as
    Kafka's ProducerAppendInfo), so while the partition has acknowledged nothing of the producer id
    only one batch is in flight: the first batch failing (NOT_LEADER_OR_FOLLOWER, not appended) with
    a dozen batches queued behind it still gives every record once, in order, no error."""
    kafka_broker.create_topic("first", partitions=1)
    kafka_broker.create_topic("first-w", partitions=1)
    bs = kafka_broker.bootstrap_servers
    n = 400

    async def main():
        async with AIOProducer(bs, batch_size=8192, linger_ms=0) as p:
            await p.partitions_for("first")
            await p.send_and_wait("first-w", b"warm")     # the leader's connection and producer id ready
            # the next answer is held back, and every answer behind it on the connection (the first
            # batch's NOT_LEADER_OR_FOLLOWER too): a batch behind the first one is written before it
            kafka_broker.delay("Produce", 400)
            kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
            held = await p.send("first-w", b"held")
            await asyncio.sleep(0.05)
            futs = []
            for i in range(n):
                futs.append(await p.send("first", b"%06d" % i + b"x" * 200, partition=0))
                if i % 37 == 0:
                    await asyncio.sleep(0.005)
            await p.flush()
        assert held.exception() is None
        assert [f.exception() for f in futs] == [None] * n
        assert [f.result().offset for f in futs] == list(range(n))
        async with AIOConsumer(bootstrap_servers=bs, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("first", 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=500)).values():
                    got += [int(r.value[:6]) for r in recs]
        return got

    got = run(main())
    assert kafka_broker.faults_applied("Produce") == 2
    assert got == list(range(n))


def test_batches_in_flight_keep_their_order_through_a_failed_batch_and_a_dropped_connection(kafka_broker):
    """An idempotent producer keeps several batches of a partition in flight; when one fails
    (NOT_LEADER_OR_FOLLOWER, not appended) the broker refuses those behind it with
    OUT_OF_ORDER_SEQUENCE_NUMBER and they are sent again after it; when the connection drops with
    batches in flight they all go out again in sequence order. Every record lands once, in order."""
    from kohort.aio.producer import MAX_IN_FLIGHT
    kafka_broker.create_topic("pipe", partitions=1)
    bs = kafka_broker.bootstrap_servers
    n = 6000

    async def main():
        most = 0
        futs = []
        async with AIOProducer(bs, batch_size=8192, linger_ms=0) as p:
            async def watch():
                nonlocal most
                while True:
                    most = max(most, p._in_flight.get(("pipe", 0), 0))
                    await asyncio.sleep(0)
            watcher = asyncio.create_task(watch())
            dropped = False
            for i in range(n):
                if i == 1000:
                    kafka_broker.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
                if not dropped and (i == n - 1 or i >= 3500 and kafka_broker.faults_applied("Produce") == 1
                                    and p._in_flight.get(("pipe", 0), 0) >= 3):
                    kafka_broker.drop_connection("Produce")      # while batches are in flight
                    dropped = True
                futs.append(await p.send("pipe", b"%06d" % i + b"x" * 200, partition=0))
                if i == 0:
                    # the partition acknowledges a batch first: from then on several are in flight
                    await futs[0]
            await p.flush()
            watcher.cancel()
        assert 2 <= most <= MAX_IN_FLIGHT
        assert [f.exception() for f in futs] == [None] * n
        assert [f.result().offset for f in futs] == list(range(n))
        async with AIOConsumer(bootstrap_servers=bs, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("pipe", 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=500)).values():
                    got += [int(r.value[:6]) for r in recs]
            got += [int(r.value[:6]) for rs in (await c.getmany(timeout_ms=300)).values() for r in rs]
        return got

    got = run(main())
    assert kafka_broker.faults_applied("Produce") == 2
    assert got == list(range(n))
