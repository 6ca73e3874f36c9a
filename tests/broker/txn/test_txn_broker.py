"""Transactions on a real kohort broker over the wire (loopback): InitProducerId with a
transactional.id, AddPartitionsToTxn, transactional Produce and its guards, EndTxn with COMMIT/ABORT
markers, the last stable offset and aborted transactions in read_committed Fetch and ListOffsets,
zombie fencing, the timeout abort, and all of it after a restart."""
from __future__ import annotations

import asyncio
import time

from kohort.broker.producer_state import PartitionProducers
from kohort.errors import ErrorCode as E
from kohort.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from kohort.protocol.messages.end_txn import EndTxnRequest
from kohort.protocol.messages.fetch import FetchRequest
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from kohort.protocol.records import build_batch, iter_batches
from tests.helpers.broker_wire import Wire, batch, running_broker
from tests.broker.test_broker_protocol import create, produce

FT = FetchRequest.FetchTopic
LT = ListOffsetsRequest.ListOffsetsTopic


def run(coro):
    return asyncio.run(coro)


async def init(w, tid="tx", timeout=60_000, version=4):
    r = await w.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout), version)
    return r.error_code, r.producer_id, r.producer_epoch


async def add(w, pid, ep, topic="t", parts=(0,), tid="tx", version=3):
    T = AddPartitionsToTxnRequest.Topic
    r = await w.call(AddPartitionsToTxnRequest(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                               v3_and_below_producer_epoch=ep,
                                               v3_and_below_topics=[T(name=topic, partitions=list(parts))]), version)
    return {p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


async def end(w, pid, ep, commit, tid="tx", version=3):
    r = await w.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=ep, committed=commit), version)
    return r.error_code


async def fetch(w, offset=0, isolation=1, topic="t", pmax=1 << 20):
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation,
                       session_id=0, session_epoch=-1, topics=[FT(topic=topic, partitions=[
                           FT.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=pmax)])],
                       forgotten_topics_data=[], rack_id="")
    p = (await w.call(req, 12)).responses[0].partitions[0]
    offsets = [(h.base_offset, h.is_control) for _, h in iter_batches(bytes(p.records or b""))]
    aborted = None if p.aborted_transactions is None else [(a.producer_id, a.first_offset)
                                                            for a in p.aborted_transactions]
    return p.high_watermark, p.last_stable_offset, offsets, aborted


async def latest(w, isolation):
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[LT(name="t", partitions=[
        LT.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    return (await w.call(req, 5)).topics[0].partitions[0].offset


def tx_batch(pid, ep, seq, n=2, ts=None):
    # current timestamps: old ones would make the log roll a segment (segment.ms) before the marker
    now = int(time.time() * 1000) if ts is None else ts
    return build_batch([(b"k", b"v%d" % i, [], now) for i in range(n)], producer_id=pid, producer_epoch=ep,
                       base_sequence=seq, transactional=True)


def test_abort_commit_lso_and_restart(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "t")
            err, pid, ep = await init(w)
            assert (err, ep) == (E.NONE, 0)
            # not added yet: INVALID_TXN_STATE up to Produce v10, TRANSACTION_ABORTABLE from v11
            assert (await produce(w, "t", tx_batch(pid, ep, 0), version=9)).error_code == E.INVALID_TXN_STATE
            assert (await produce(w, "t", tx_batch(pid, ep, 0), version=11)).error_code == E.TRANSACTION_ABORTABLE
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 0))).base_offset == 0
            # a non-transactional batch while the transaction is open
            plain = build_batch([(b"k", b"v", [], int(time.time() * 1000))], producer_id=pid, producer_epoch=ep, base_sequence=2)
            assert (await produce(w, "t", plain)).error_code == E.INVALID_TXN_STATE
            assert (await latest(w, 0), await latest(w, 1)) == (2, 0)
            assert await fetch(w, isolation=1) == (2, 0, [], [])
            assert (await fetch(w, isolation=0))[2:] == ([(0, False)], None)
            assert await end(w, pid, ep, False) == E.NONE                       # abort: marker at 2
            assert await fetch(w, isolation=1) == (3, 3, [(0, False), (2, True)], [(pid, 0)])
            assert await end(w, pid, ep, False) == E.NONE                       # retry
            assert await end(w, pid, ep, True) == E.INVALID_TXN_STATE
            # a committed transaction: no aborted entry for it
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 2))).base_offset == 3
            assert await latest(w, 1) == 3
            assert await end(w, pid, ep, True) == E.NONE
            assert await fetch(w, offset=3) == (6, 6, [(3, False), (5, True)], [])
            assert await latest(w, 1) == 6
            # an open transaction left across the restart
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 4))).base_offset == 6
            # the live producer state equals a full replay of the log (what a restart rebuilds)
            lg = b.storage.log("t", 0)
            live, replayed = b.producers.partition("t", 0, lg), PartitionProducers()
            replayed.recover(lg)
            assert (replayed.ongoing, replayed.aborted) == (live.ongoing, live.aborted) == ({pid: 6}, [(pid, 0, 2, 3)])
            assert {k: (e.epoch, list(e.batches)) for k, e in replayed.entries.items()} == \
                {k: (e.epoch, list(e.batches)) for k, e in live.entries.items()}
            await w.close()
        async with running_broker(tmp_path) as b:    # state replayed from __transaction_state and the log
            w = await Wire.connect(b)
            assert await fetch(w, isolation=1) == (8, 6, [(0, False), (2, True), (3, False), (5, True)], [(pid, 0)])
            assert b.txn.coordinator.txns["tx"].state.name == "ONGOING"
            # a new producer with the id fences the old one: its transaction is aborted
            assert (await init(w))[0] == E.CONCURRENT_TRANSACTIONS
            assert await fetch(w, offset=6) == (9, 9, [(6, False), (8, True)], [(pid, 6)])
            err, pid2, ep2 = await init(w)
            assert (err, pid2, ep2) == (E.NONE, pid, ep + 2)
            assert (await produce(w, "t", tx_batch(pid, ep, 6))).error_code == E.INVALID_PRODUCER_EPOCH
            assert await add(w, pid, ep) == {E.PRODUCER_FENCED}
            assert await end(w, pid, ep, True) == E.PRODUCER_FENCED
            await w.close()
    run(main())


def test_timeout_abort(tmp_path):
    async def main():
        props = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 50}
        async with running_broker(tmp_path, props) as b:
            w = await Wire.connect(b)
            await create(w, "t")
            err, pid, ep = await init(w, timeout=100)
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 0))).base_offset == 0
            for _ in range(100):
                if b.txn.coordinator.txns["tx"].state.name == "COMPLETE_ABORT":
                    break
                await asyncio.sleep(0.05)
            assert await fetch(w) == (3, 3, [(0, False), (2, True)], [(pid, 0)])
            assert await end(w, pid, ep, True) == E.PRODUCER_FENCED
            assert (await init(w))[2] == ep + 2
            await w.close()
    run(main())


def test_admin_describe_list_and_producers(tmp_path):
    from kohort.protocol.messages.describe_producers import DescribeProducersRequest
    from kohort.protocol.messages.describe_transactions import DescribeTransactionsRequest
    from kohort.protocol.messages.list_transactions import ListTransactionsRequest

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "t")
            assert not b.storage.has_topic("__transaction_state")    # created on first use, as Kafka
            _, pid, ep = await init(w)
            assert b.storage.topic("__transaction_state").num_partitions == 50
            _, pid2, _ = await init(w, tid="other")
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 0, n=3))).base_offset == 0
            d = (await w.call(DescribeTransactionsRequest(transactional_ids=["tx", "nope"]), 0)).transaction_states
            assert (d[0].error_code, d[0].transaction_state, d[0].producer_id, d[0].producer_epoch) == (0, "Ongoing", pid, ep)
            assert [(t.name, t.partition_indexes) for t in d[0].topics] == [("t", [0])]
            assert d[1].error_code == E.TRANSACTIONAL_ID_NOT_FOUND

            async def ls(**kw):
                r = await w.call(ListTransactionsRequest(**{"state_filters": [], "producer_id_filters": [], **kw}), 2)
                return r.unknown_state_filters, [(s.transactional_id, s.transaction_state) for s in r.transaction_states]
            assert await ls() == ([], [("other", "Empty"), ("tx", "Ongoing")])
            assert await ls(state_filters=["Ongoing", "Bogus"]) == (["Bogus"], [("tx", "Ongoing")])
            assert await ls(producer_id_filters=[pid2]) == ([], [("other", "Empty")])
            assert await ls(transactional_id_pattern="o.*") == ([], [("other", "Empty")])
            assert await ls(duration_filter=3_600_000) == ([], [])
            DP = DescribeProducersRequest.TopicRequest
            r = await w.call(DescribeProducersRequest(topics=[DP(name="t", partition_indexes=[0, 5])]), 0)
            p0, p5 = r.topics[0].partitions
            assert [(s.producer_id, s.producer_epoch, s.last_sequence, s.current_txn_start_offset)
                    for s in p0.active_producers] == [(pid, ep, 2, 0)]
            assert p5.error_code == E.UNKNOWN_TOPIC_OR_PARTITION
            await w.close()
    run(main())


def test_failed_marker_write_is_driven_again(tmp_path):
    """A storage error while writing markers leaves the transaction in PrepareCommit (EndTxn answers
    COORDINATOR_NOT_AVAILABLE, its retry CONCURRENT_TRANSACTIONS); the abort scan drives it again."""
    from kohort.storage import StorageError

    async def main():
        props = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 50}
        async with running_broker(tmp_path, props) as b:
            w = await Wire.connect(b)
            await create(w, "t")
            _, pid, ep = await init(w)
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 0))).base_offset == 0
            real = b.txn.write_marker
            failures = []

            def failing(topic, p, m, *rest):     # the disk fails for the first marker write only
                if not failures:
                    failures.append(1)
                    raise StorageError("injected write failure")
                return real(topic, p, m, *rest)
            b.txn.write_marker = failing
            assert await end(w, pid, ep, True) == E.COORDINATOR_NOT_AVAILABLE
            for _ in range(100):
                code = await end(w, pid, ep, True)
                if code != E.CONCURRENT_TRANSACTIONS:
                    break
                await asyncio.sleep(0.05)
            assert code == E.NONE and b.txn.coordinator.txns["tx"].state.name == "COMPLETE_COMMIT"
            assert await fetch(w) == (3, 3, [(0, False), (2, True)], [])
            await w.close()
    run(main())


def test_read_committed_bounds(tmp_path):
    """Aborted transactions are listed only when they overlap the returned batches, and a
    read_committed timestamp lookup never answers an offset at or past the LSO."""
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "t")
            _, pid, ep = await init(w)
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 0))).base_offset == 0
            assert await end(w, pid, ep, True) == E.NONE                         # commit: 0-1, marker 2
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 2))).base_offset == 3
            assert await end(w, pid, ep, False) == E.NONE                        # abort: 3-4, marker 5
            assert await add(w, pid, ep) == {E.NONE}
            later = int(time.time() * 1000) + 10_000
            assert (await produce(w, "t", tx_batch(pid, ep, 4, ts=later))).base_offset == 6  # open: 6-7
            assert await fetch(w, offset=0) == (8, 6, [(0, False), (2, True), (3, False), (5, True)], [(pid, 3)])
            assert await fetch(w, offset=6) == (8, 6, [], [])
            # a fetch whose data ends before the aborted transaction does not list it
            assert await fetch(w, offset=0, pmax=1) == (8, 6, [(0, False)], [])
            assert await fetch(w, offset=2, pmax=1) == (8, 6, [(2, True)], [])
            assert await fetch(w, offset=3, pmax=1) == (8, 6, [(3, False)], [(pid, 3)])
            LP = LT.ListOffsetsPartition
            async def at(ts, isolation):
                req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[LT(name="t", partitions=[
                    LP(partition_index=0, current_leader_epoch=-1, timestamp=ts)])])
                return (await w.call(req, 5)).topics[0].partitions[0].offset
            ts = int(time.time() * 1000) - 60_000
            assert (await at(ts, 0), await at(ts, 1)) == (0, 0)
            assert (await at(later - 1, 0), await at(later - 1, 1)) == (6, -1)   # only the open batch is that late
            await w.close()
    run(main())


def test_prepare_commit_without_markers_is_completed_at_restart(tmp_path):
    """The broker stops after PrepareCommit is persisted but before any marker (as a crash there
    would leave it): the restart replays PrepareCommit, writes the markers and completes."""
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "t", partitions=2)
            _, pid, ep = await init(w)
            assert await add(w, pid, ep, parts=(0, 1)) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 0))).base_offset == 0
            r = b.txn.coordinator.end_txn("tx", pid, ep, True, int(time.time() * 1000))
            b.txn._persist(r.records)            # PrepareCommit on disk, no marker written
            await b.sync.wait_synced()
            assert await fetch(w) == (2, 0, [], [])
            await w.close()
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            assert b.txn.coordinator.txns["tx"].state.name == "COMPLETE_COMMIT"
            assert await fetch(w) == (3, 3, [(0, False), (2, True)], [])
            lg1 = b.storage.log("t", 1)
            assert lg1.log_end_offset == 1             # the marker went to the other partition too
            assert await end(w, pid, ep, True) == E.NONE      # the client's retry
            await w.close()
    run(main())


def test_abort_scan_does_not_drive_a_transaction_being_ended(tmp_path):
    """EndTxn's PrepareCommit is waiting for its fsync when the abort scan runs: the scan must not
    write the markers too (twice-written markers, the second one closing the producer's next
    transaction early, and an EndTxn failing on Complete -> Complete)."""
    async def main():
        props = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 20}
        async with running_broker(tmp_path, props) as b:
            w = await Wire.connect(b)
            await create(w, "t")
            _, pid, ep = await init(w)
            assert await add(w, pid, ep) == {E.NONE}
            assert (await produce(w, "t", tx_batch(pid, ep, 0))).base_offset == 0
            real = b.sync.wait_synced

            async def slow_sync():             # a slow disk: the scan gets several turns meanwhile
                await asyncio.sleep(0.2)
                await real()
            b.sync.wait_synced = slow_sync
            assert await end(w, pid, ep, True) == E.NONE
            b.sync.wait_synced = real
            assert await fetch(w) == (3, 3, [(0, False), (2, True)], [])      # one marker
            assert b.txn.coordinator.txns["tx"].state.name == "COMPLETE_COMMIT"
            await w.close()
    run(main())


def test_transactions_v2_implicit_add_and_epoch_bump(tmp_path):
    """Transactions v2 on the wire: Produce v12 adds its partition itself, EndTxn v5 bumps the epoch
    (the old epoch's late data is then INVALID_PRODUCER_EPOCH), and two pipelined Produce requests of
    a new transaction keep their order while the first one's implicit add is being made durable."""
    from kohort.protocol.messages.produce import ProduceRequest

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "t")
            _, pid, ep = await init(w, version=5)
            PT = ProduceRequest.TopicProduceData

            def req(batch):
                return ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=5000, topic_data=[
                    PT(name="t", partition_data=[PT.PartitionProduceData(index=0, records=batch)])])
            r = await w.call(req(tx_batch(pid, ep, 0)), 12)
            assert (r.responses[0].partition_responses[0].error_code,
                    r.responses[0].partition_responses[0].base_offset) == (0, 0)
            m = b.txn.coordinator.txns["tx"]
            assert (m.state.name, m.partitions, m.client_tv) == ("ONGOING", {("t", 0)}, 2)
            e = await w.call(EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=ep, committed=True), 5)
            assert (e.error_code, e.producer_id, e.producer_epoch) == (0, pid, ep + 1)
            assert await fetch(w) == (3, 3, [(0, False), (2, True)], [])
            late = await w.call(req(tx_batch(pid, ep, 2)), 12)
            assert late.responses[0].partition_responses[0].error_code == E.INVALID_PRODUCER_EPOCH
            real = b.sync.wait_synced

            async def slow_sync():             # the implicit add's fsync is slow
                await asyncio.sleep(0.2)
                await real()
            b.sync.wait_synced = slow_sync
            await w.send(req(tx_batch(pid, ep + 1, 0)), 12, expect_response=False)
            await asyncio.sleep(0.05)          # the second arrives while the add is being synced
            await w.send(req(tx_batch(pid, ep + 1, 2)), 12, expect_response=False)
            got = [(await w.recv(ProduceRequest.API_KEY, 12))[1].responses[0].partition_responses[0]
                   for _ in range(2)]
            b.sync.wait_synced = real
            assert [(p.error_code, p.base_offset) for p in got] == [(0, 3), (0, 5)]
            e = await w.call(EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=ep + 1,
                                           committed=False), 5)
            assert (e.error_code, e.producer_epoch) == (0, ep + 2)
            assert await fetch(w, offset=3) == (8, 8, [(3, False), (5, False), (7, True)], [(pid, 3)])
            await w.close()
    run(main())


def test_transactions_v2_next_transaction_keeps_its_order_across_the_markers(tmp_path):
    """Java's producer with 5 requests in flight: the next transaction's first batch (sequence 0)
    arrives while the previous transaction's markers are being written and, its add retried for
    add.partitions.to.txn.retry.backoff.max.ms, is answered CONCURRENT_TRANSACTIONS; its second batch
    (sequence 2) arrives after the markers. The second must be OUT_OF_ORDER_SEQUENCE_NUMBER (the new
    epoch has no batch, so only sequence 0 follows), else the first one's retry could never be
    appended. On a partition the previous transaction did not touch, the verification entry of the
    first batch does the same."""
    from kohort.protocol.messages.produce import ProduceRequest
    PT = ProduceRequest.TopicProduceData

    def req(batches):
        return ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=5000, topic_data=[
            PT(name="t", partition_data=[PT.PartitionProduceData(index=p, records=b) for p, b in batches])])

    async def main():
        async with running_broker(tmp_path) as b:
            w, w2 = await Wire.connect(b), await Wire.connect(b)
            await create(w, "t", 2)
            _, pid, ep = await init(w, version=5)

            async def send(*batches):          # (partition, batch) -> error codes
                r = await w2.call(req(batches), 12)
                return [p.error_code for p in r.responses[0].partition_responses]
            assert await send((0, tx_batch(pid, ep, 0))) == [E.NONE]
            real = b.sync.wait_synced

            async def slow_sync():             # EndTxn's markers take a while
                await asyncio.sleep(0.2)
                await real()
            b.sync.wait_synced = slow_sync
            ending = asyncio.ensure_future(w.call(EndTxnRequest(transactional_id="tx", producer_id=pid,
                                                                producer_epoch=ep, committed=True), 5))
            await asyncio.sleep(0.05)
            first = await send((0, tx_batch(pid, ep + 1, 0)), (1, tx_batch(pid, ep + 1, 0)))
            assert first == [E.CONCURRENT_TRANSACTIONS] * 2
            assert (await ending).error_code == E.NONE
            b.sync.wait_synced = real
            second = await send((0, tx_batch(pid, ep + 1, 2)), (1, tx_batch(pid, ep + 1, 2)))
            assert second == [E.OUT_OF_ORDER_SEQUENCE_NUMBER] * 2
            # the retries, in order
            assert await send((0, tx_batch(pid, ep + 1, 0)), (1, tx_batch(pid, ep + 1, 0))) == [E.NONE] * 2
            assert await send((0, tx_batch(pid, ep + 1, 2)), (1, tx_batch(pid, ep + 1, 2))) == [E.NONE] * 2
            assert await fetch(w, isolation=0) == (7, 3, [(0, False), (2, True), (3, False), (5, False)], None)
            lg = b.storage.log("t", 0)             # a restart's replay of the log rebuilds the same state
            live, replayed = b.producers.partition("t", 0, lg), PartitionProducers()
            replayed.recover(lg)
            assert {k: (e.epoch, list(e.batches)) for k, e in replayed.entries.items()} == \
                {k: (e.epoch, list(e.batches)) for k, e in live.entries.items()} != {}
            await w.close()
            await w2.close()
    run(main())
