"""Transactional offset commits over the wire: one scripted raw-protocol conversation
(InitProducerId, AddOffsetsToTxn, TxnOffsetCommit, OffsetCommit, OffsetFetch with and without
require_stable, EndTxn, fencing) answered alike -- error codes and offsets -- by kohort broker and
Apache Kafka 4.3.1; and on kohort broker the pending offsets across a restart (live state = replay of
`__consumer_offsets`)."""
from __future__ import annotations

import asyncio
import time
import types
import uuid

from kohort.errors import ErrorCode as E
from kohort.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from kohort.protocol.messages.end_txn import EndTxnRequest
from kohort.protocol.messages.find_coordinator import FindCoordinatorRequest
from kohort.protocol.messages.init_producer_id import InitProducerIdRequest
from kohort.protocol.messages.offset_commit import OffsetCommitRequest
from kohort.protocol.messages.offset_fetch import OffsetFetchRequest
from kohort.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from tests.helpers.broker_wire import Wire, running_broker
from tests.broker.test_broker_protocol import create

RETRY = {E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR,
         E.CONCURRENT_TRANSACTIONS}


async def retrying(call, deadline_s: float = 30):
    """Run `call()` (-> (code, ...)) until its code is not a transient coordinator one."""
    deadline = time.monotonic() + deadline_s
    while True:
        r = await call()
        code = r[0] if isinstance(r, tuple) else r
        if code not in RETRY or time.monotonic() > deadline:
            return r
        await asyncio.sleep(0.1)


class Txn:
    """A raw transactional producer + group client over one connection (a one-node cluster)."""

    def __init__(self, w: Wire, tid: str, group: str, topic: str) -> None:
        self.w, self.tid, self.group, self.topic = w, tid, group, topic
        self.pid, self.epoch = -1, -1

    async def find(self, key: str, key_type: int) -> int:
        async def once():
            r = await self.w.call(FindCoordinatorRequest(key=key, key_type=key_type), 3)
            return r.error_code
        return await retrying(once, 60)

    async def init(self) -> int:
        async def once():
            r = await self.w.call(InitProducerIdRequest(transactional_id=self.tid, transaction_timeout_ms=60_000), 4)
            if r.error_code == 0:
                self.pid, self.epoch = r.producer_id, r.producer_epoch
            return r.error_code
        return await retrying(once)

    async def add_offsets(self, group=None) -> int:
        async def once():
            return (await self.w.call(AddOffsetsToTxnRequest(
                transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch,
                group_id=group or self.group), 3)).error_code
        return await retrying(once)

    async def txn_commit(self, offset: int, *, version=3, epoch=None, group=None, generation=-1, member="",
                         partition=0) -> int:
        T = TxnOffsetCommitRequest.Topic
        r = await self.w.call(TxnOffsetCommitRequest(
            transactional_id=self.tid, group_id=group or self.group, producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch, generation_id=generation, member_id=member,
            group_instance_id=None, topics=[T(name=self.topic, partitions=[T.Partition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata="")])]), version)
        return r.topics[0].partitions[0].error_code

    async def end(self, commit: bool, version: int = 3) -> int:
        """EndTxn; v5 (transactions v2) takes the producer id/epoch it answers."""
        async def once():
            r = await self.w.call(EndTxnRequest(transactional_id=self.tid, producer_id=self.pid,
                                                producer_epoch=self.epoch, committed=commit), version)
            if version >= 5 and r.error_code == 0:
                self.pid, self.epoch = r.producer_id, r.producer_epoch
            return r.error_code
        return await retrying(once)

    async def commit(self, offset: int) -> int:
        T = OffsetCommitRequest.Topic
        r = await self.w.call(OffsetCommitRequest(group_id=self.group, generation_id_or_member_epoch=-1, member_id="",
                                                  topics=[T(name=self.topic, partitions=[T.Partition(
                                                      partition_index=0, committed_offset=offset,
                                                      committed_metadata="")])]), 8)
        return r.topics[0].partitions[0].error_code

    async def fetch(self, stable: bool, version=7):
        """(error code, offset) of partition 0, as OffsetFetch v7 (one group) or v8 (groups)."""
        if version >= 8:
            G = OffsetFetchRequest.Group
            r = await self.w.call(OffsetFetchRequest(groups=[G(group_id=self.group, topics=[G.Topics(
                name=self.topic, partition_indexes=[0])])], require_stable=stable), version)
            p = r.groups[0].topics[0].partitions[0]
        else:
            T = OffsetFetchRequest.Topic
            r = await self.w.call(OffsetFetchRequest(group_id=self.group, topics=[T(name=self.topic,
                                                                                     partition_indexes=[0])],
                                                     require_stable=stable), version)
            p = r.topics[0].partitions[0]
        return p.error_code, p.committed_offset

    async def fetch_all(self, stable: bool):
        """(error code, offset) of partition 0 in OffsetFetch v7 for every committed offset (no topics)."""
        r = await self.w.call(OffsetFetchRequest(group_id=self.group, topics=None, require_stable=stable), 7)
        p = next(p for t in r.topics if t.name == self.topic for p in t.partitions if p.partition_index == 0)
        return p.error_code, p.committed_offset

    async def settled(self):
        """OffsetFetch(require_stable) once the markers are written (Kafka writes them after EndTxn's
        answer): the first answer that is not UNSTABLE_OFFSET_COMMIT."""
        deadline = time.monotonic() + 30
        while True:
            r = await self.fetch(True)
            if r[0] != E.UNSTABLE_OFFSET_COMMIT or time.monotonic() > deadline:
                return r
            await asyncio.sleep(0.1)


async def conversation(w: Wire, topic: str) -> list:
    """The scripted sequence; returns what each step answered (codes by name, offsets)."""
    tag = uuid.uuid4().hex[:8]
    t = Txn(w, f"tx-{tag}", f"g-{tag}", topic)
    out = []

    def note(step, value):
        out.append((step, E(value).name if isinstance(value, int) and not isinstance(value, bool) else
                    (E(value[0]).name, value[1]) if isinstance(value, tuple) else value))
    await t.find(t.tid, 1)
    await t.find(t.group, 0)
    note("init", await t.init())
    note("plain commit 5", await t.commit(5))
    note("txn commit before AddOffsets v3", await t.txn_commit(9, version=3))
    note("txn commit before AddOffsets v4", await t.txn_commit(9, version=4))
    note("add offsets", await t.add_offsets())
    note("txn commit, unknown member on an existing group", await t.txn_commit(9, generation=3, member="m"))
    note("add offsets, unknown group", await t.add_offsets(group=f"nog-{tag}"))
    note("txn commit, unknown group, generation 3", await t.txn_commit(9, group=f"nog-{tag}", generation=3,
                                                                       member="m"))
    note("txn commit, unknown partition", await t.txn_commit(9, partition=7))
    note("txn commit 10", await t.txn_commit(10))
    note("fetch stable v7", await t.fetch(True))
    note("fetch all stable v7", await t.fetch_all(True))
    note("fetch v7", await t.fetch(False))
    note("fetch stable v8", await t.fetch(True, version=8))
    note("commit", await t.end(True))
    note("after commit", await t.settled())
    note("add offsets 2", await t.add_offsets())
    note("txn commit 20 v2", await t.txn_commit(20, version=2))
    note("fetch stable", await t.fetch(True))
    note("abort", await t.end(False))
    note("after abort", await t.settled())
    # a plain commit written after the transactional one wins at COMMIT
    note("add offsets 3", await t.add_offsets())
    note("txn commit 30", await t.txn_commit(30))
    note("plain commit 31", await t.commit(31))
    note("commit 3", await t.end(True))
    note("after commit 3", await t.settled())
    # fencing: a new InitProducerId aborts the open transaction; the old epoch is fenced
    old = t.epoch
    note("add offsets 4", await t.add_offsets())
    note("txn commit 40", await t.txn_commit(40))
    note("re-init", await t.init())
    note("after fence", await t.settled())
    note("txn commit, old epoch", await t.txn_commit(41, epoch=old))
    note("txn commit, new epoch, not added v4", await t.txn_commit(41, version=4))
    note("epoch bumped", t.epoch > old)
    return out


async def conversation_v2(w: Wire, topic: str) -> list:
    """Transactions v2 (KIP-890 part 2): TxnOffsetCommit v5 adds the offsets partition itself, EndTxn
    v5 bumps the epoch each time; the previous epoch is then fenced."""
    tag = uuid.uuid4().hex[:8]
    t = Txn(w, f"tx2-{tag}", f"g2-{tag}", topic)
    out = []

    def note(step, value):
        out.append((step, E(value).name if isinstance(value, int) and not isinstance(value, bool) else
                    (E(value[0]).name, value[1]) if isinstance(value, tuple) else value))
    await t.find(t.tid, 1)
    await t.find(t.group, 0)
    note("init", await t.init())
    e0 = t.epoch
    note("txn commit v5, no AddOffsets", await t.txn_commit(10, version=5))
    note("fetch stable", await t.fetch(True))
    note("commit v5", await t.end(True, version=5))
    note("epoch bumped by commit", f"+{t.epoch - e0}")
    note("after commit", await t.settled())
    note("txn commit v5, old epoch", await t.txn_commit(11, version=5, epoch=e0))
    note("txn commit v5 20", await t.txn_commit(20, version=5))
    note("abort v5", await t.end(False, version=5))
    note("epoch bumped by abort", f"+{t.epoch - e0}")
    note("after abort", await t.settled())
    note("commit v5 with nothing open", await t.end(True, version=5))
    return out


EXPECTED_V2 = [
    ("init", "NONE"), ("txn commit v5, no AddOffsets", "NONE"), ("fetch stable", ("UNSTABLE_OFFSET_COMMIT", -1)),
    ("commit v5", "NONE"), ("epoch bumped by commit", "+1"), ("after commit", ("NONE", 10)),
    ("txn commit v5, old epoch", "INVALID_PRODUCER_EPOCH"), ("txn commit v5 20", "NONE"),
    ("abort v5", "NONE"), ("epoch bumped by abort", "+2"), ("after abort", ("NONE", 10)),
    ("commit v5 with nothing open", "INVALID_TXN_STATE"),
]

EXPECTED = [
    ("init", "NONE"), ("plain commit 5", "NONE"),
    ("txn commit before AddOffsets v3", "INVALID_TXN_STATE"),
    ("txn commit before AddOffsets v4", "TRANSACTION_ABORTABLE"),
    ("add offsets", "NONE"),
    ("txn commit, unknown member on an existing group", "UNKNOWN_MEMBER_ID"),
    ("add offsets, unknown group", "NONE"),
    ("txn commit, unknown group, generation 3", "ILLEGAL_GENERATION"),
    ("txn commit, unknown partition", "UNKNOWN_TOPIC_OR_PARTITION"),
    ("txn commit 10", "NONE"),
    ("fetch stable v7", ("UNSTABLE_OFFSET_COMMIT", -1)),
    ("fetch all stable v7", ("UNSTABLE_OFFSET_COMMIT", -1)), ("fetch v7", ("NONE", 5)),
    ("fetch stable v8", ("UNSTABLE_OFFSET_COMMIT", -1)),
    ("commit", "NONE"), ("after commit", ("NONE", 10)),
    ("add offsets 2", "NONE"), ("txn commit 20 v2", "NONE"), ("fetch stable", ("UNSTABLE_OFFSET_COMMIT", -1)),
    ("abort", "NONE"), ("after abort", ("NONE", 10)),
    ("add offsets 3", "NONE"), ("txn commit 30", "NONE"), ("plain commit 31", "NONE"), ("commit 3", "NONE"),
    ("after commit 3", ("NONE", 31)),
    ("add offsets 4", "NONE"), ("txn commit 40", "NONE"), ("re-init", "NONE"), ("after fence", ("NONE", 31)),
    ("txn commit, old epoch", "INVALID_PRODUCER_EPOCH"),
    ("txn commit, new epoch, not added v4", "TRANSACTION_ABORTABLE"),
    ("epoch bumped", True),
]


def test_conversation_on_kohort_broker(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            assert (await create(w, "in")).error_code == 0
            got = await conversation(w, "in"), await conversation_v2(w, "in")
            await w.close()
            return got
    got, got2 = asyncio.run(main())
    assert got == EXPECTED
    assert got2 == EXPECTED_V2


def test_conversation_on_apache_kafka(kafka1):
    kafka1.create_topic("txo-in", 1)
    host, port = kafka1.bootstrap.split(",")[0].rsplit(":", 1)

    async def main():
        w = await Wire.connect(types.SimpleNamespace(host=host, port=int(port)))
        try:
            return await conversation(w, "txo-in"), await conversation_v2(w, "txo-in")
        finally:
            await w.close()
    got, got2 = asyncio.run(main())
    assert got == EXPECTED
    assert got2 == EXPECTED_V2


def test_pending_offsets_survive_restart(tmp_path):
    """An open transaction's offset stays pending across a restart and its COMMIT afterwards
    materialises it; a committed one is there at once; live state equals the replayed state."""
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "in")
            t = Txn(w, "tx", "g", "in")
            assert await t.init() == 0
            assert await t.commit(5) == 0
            assert await t.add_offsets() == 0 and await t.txn_commit(10) == 0
            assert await t.end(True) == 0
            assert await t.add_offsets() == 0 and await t.txn_commit(20) == 0
            u = Txn(w, "tx2", "g", "in")                 # a second producer, aborted before the restart
            assert await u.init() == 0
            assert await u.add_offsets() == 0 and await u.txn_commit(99) == 0
            assert await u.end(False) == 0
            live = b.coordinator.groups.classic
            before = ({g: dict(live.offsets.of(g)) for g in live.groups}, dict(live.pending_txn.by_producer))
            assert await t.fetch(True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
            pid, epoch = t.pid, t.epoch
            await w.close()
        async with running_broker(tmp_path) as b:
            c = b.coordinator.groups.classic
            after = ({g: dict(c.offsets.of(g)) for g in c.groups}, dict(c.pending_txn.by_producer))

            def strip(state):      # record_seq is the write order: same order, other numbers
                groups, pending = state
                return ({g: {k: (co.offset, co.metadata) for k, co in o.items()} for g, o in groups.items()},
                        {p: {k: co.offset for k, co in o.items()} for p, o in pending.items()})
            assert strip(after) == strip(before) == ({"g": {("in", 0): (10, "")}}, {pid: {("g", "in", 0): 20}})
            w = await Wire.connect(b)
            t = Txn(w, "tx", "g", "in")
            t.pid, t.epoch = pid, epoch
            assert await t.fetch(True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
            assert await t.fetch(False) == (0, 10)
            assert await t.end(True) == 0
            assert await t.fetch(True) == (0, 20)
            await w.close()
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            t = Txn(w, "tx", "g", "in")
            assert await t.fetch(True) == (0, 20)
            await w.close()
    asyncio.run(main())


def test_prepare_commit_with_offsets_completed_at_restart(tmp_path):
    """PrepareCommit of a transaction holding the group's `__consumer_offsets` partition is on disk but
    no marker was written (a crash there): the restart writes the marker before the group coordinator
    loads, and the load materialises the offset; a marker write the group coordinator fails leaves
    the transaction in PrepareCommit, driven again by the abort scan."""
    from kohort.storage import StorageError

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "in")
            t = Txn(w, "tx", "g", "in")
            assert await t.init() == 0
            assert await t.add_offsets() == 0 and await t.txn_commit(10) == 0
            r = b.txn.coordinator.end_txn("tx", t.pid, t.epoch, True, int(time.time() * 1000))
            b.txn._persist(r.records)            # PrepareCommit on disk, no marker written
            await b.sync.wait_synced()
            assert await t.fetch(True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
            pid, epoch = t.pid, t.epoch
            await w.close()
        props = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 50}
        async with running_broker(tmp_path, props) as b:
            assert b.txn.coordinator.txns["tx"].state.name == "COMPLETE_COMMIT"
            w = await Wire.connect(b)
            t = Txn(w, "tx", "g", "in")
            t.pid, t.epoch = pid, epoch
            assert await t.fetch(True) == (0, 10)
            # the next transaction's marker fails once in the group coordinator
            assert await t.add_offsets() == 0 and await t.txn_commit(20) == 0
            gc = b.coordinator
            real, failures = gc.write_txn_marker, []

            async def failing(*a):
                if not failures:
                    failures.append(1)
                    raise RuntimeError("group coordinator closed")
                return await real(*a)
            gc.write_txn_marker = failing
            r = await w.call(EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                           committed=True), 3)
            assert r.error_code == E.COORDINATOR_NOT_AVAILABLE
            assert b.txn.coordinator.txns["tx"].state.name == "PREPARE_COMMIT"
            assert await t.settled() == (0, 20)        # the abort scan drove it again
            assert b.txn.coordinator.txns["tx"].state.name == "COMPLETE_COMMIT"
            await w.close()
    asyncio.run(main())


def test_kohort_transactions_cli_on_apache_kafka(kafka1):
    """`kohort transactions list / describe / describe-producers` read Apache Kafka 4.3.1's transaction
    state like kafka-transactions.sh: an open transaction holding a data partition and the group's
    `__consumer_offsets` partition."""
    import json
    import os
    import subprocess
    import sys
    from kohort.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
    from kohort.protocol.messages.produce import ProduceRequest
    from kohort.protocol.records import build_batch

    kafka1.create_topic("txcli", 1)
    host, port = kafka1.bootstrap.split(",")[0].rsplit(":", 1)
    tag = uuid.uuid4().hex[:8]
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "src")

    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "transactions", *args, "-b", kafka1.bootstrap,
                            "--json"], capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=src))
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        return json.loads(r.stdout)

    async def main():
        w = await Wire.connect(types.SimpleNamespace(host=host, port=int(port)))
        t = Txn(w, f"cli-{tag}", f"cg-{tag}", "txcli")
        try:
            await t.find(t.tid, 1)
            await t.find(t.group, 0)
            assert await t.init() == 0
            T = AddPartitionsToTxnRequest.Topic
            r = await w.call(AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=t.tid, v3_and_below_producer_id=t.pid,
                v3_and_below_producer_epoch=t.epoch, v3_and_below_topics=[T(name="txcli", partitions=[0])]), 3)
            assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            PT = ProduceRequest.TopicProduceData
            batch = build_batch([(b"k", b"v", [], int(time.time() * 1000))], producer_id=t.pid,
                                producer_epoch=t.epoch, base_sequence=0, transactional=True)
            request = ProduceRequest(transactional_id=t.tid, acks=-1, timeout_ms=5000, topic_data=[
                PT(name="txcli", partition_data=[PT.PartitionProduceData(index=0, records=batch)])])
            for _ in range(50):     # a topic just created may not have its leader yet (NOT_LEADER_OR_FOLLOWER)
                pr = await w.call(request, 9)
                if pr.responses[0].partition_responses[0].error_code != 6:
                    break
                await asyncio.sleep(0.2)
            assert pr.responses[0].partition_responses[0].error_code == 0
            assert await t.add_offsets() == 0
            listed = await asyncio.to_thread(cli, "list", "--pattern", f"cli-{tag}")
            assert [(x["transactional_id"], x["producer_id"], x["state"]) for x in listed] == \
                [(t.tid, t.pid, "Ongoing")]
            d = await asyncio.to_thread(cli, "describe", "--transactional-id", t.tid)
            assert d["state"] == "Ongoing" and d["producer_epoch"] == t.epoch
            assert "txcli-0" in d["partitions"] and any(p.startswith("__consumer_offsets-") for p in d["partitions"])
            prods = await asyncio.to_thread(cli, "describe-producers", "--topic", "txcli", "--partition", "0")
            start = pr.responses[0].partition_responses[0].base_offset
            assert [(p["producer_id"], p["txn_start_offset"]) for p in prods if p["producer_id"] == t.pid] == \
                [(t.pid, start)]
        finally:
            await t.end(False)
            await w.close()
    asyncio.run(main())


def test_console_group_events_follow_transactional_offsets(tmp_path, caplog):
    """With the console's group event recorder attached, TxnOffsetCommit and the markers written
    through the group coordinator are observed without errors (a marker belongs to no group)."""
    from kohort.broker.group_events import GroupEvents

    async def main():
        async with running_broker(tmp_path) as b:
            ev = GroupEvents()
            ev.baseline(b.coordinator)
            b.coordinator.events = ev
            w = await Wire.connect(b)
            await create(w, "in")
            t = Txn(w, "tx", "g", "in")
            assert await t.init() == 0
            assert await t.add_offsets() == 0 and await t.txn_commit(10) == 0
            assert await t.end(True) == 0
            assert await t.fetch(True) == (0, 10)
            await w.close()
    with caplog.at_level("ERROR", logger="kohort"):
        asyncio.run(main())
    assert not [r for r in caplog.records if "group events" in r.getMessage()], caplog.text
