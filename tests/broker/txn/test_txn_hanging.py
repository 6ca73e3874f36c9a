"""Hanging transactions (facts sheet §6 traps; KIP-890 part 1, KIP-664) on kohort broker:

* late writes of a finished transaction (KAFKA-12671) are refused by the verification: a data batch
  (INVALID_TXN_STATE / TRANSACTION_ABORTABLE from Produce v11) and a TxnOffsetCommit (INVALID_TXN_STATE /
  TRANSACTION_ABORTABLE from v4), so nothing opens a transaction no marker will close;
* producer state with an open transaction never expires (KAFKA-9144);
* a transaction that hangs anyway (data written without verification -- injected into the log as an
  older broker would have let it in) is found by `kohort transactions find-hanging` and by Kafka's own
  kafka-transactions.sh (TransactionsCommand), and closed by `kohort transactions abort` or by Kafka's
  `abort` (WriteTxnMarkers): the last stable offset moves on and read_committed skips the data.
Also `kohort transactions list / describe / describe-producers` on a live transaction."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from kohort.broker.producer_state import PartitionProducers
from kohort.errors import ErrorCode as E
from kohort.protocol.records import build_batch
from tests.helpers.broker_wire import Wire, running_broker
from tests.broker.test_broker_protocol import create, produce
from kohort.protocol.messages.list_offsets import ListOffsetsRequest
from tests.broker.txn.test_txn_broker import add, end, fetch, init, tx_batch
from tests.broker.coordinator.test_txn_offsets_broker import Txn

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), "src")


def kohort(b, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run([sys.executable, "-m", "kohort.cli.main", "transactions", *args, "-b",
                           f"127.0.0.1:{b.port}", "--json"], capture_output=True, text=True, timeout=60, env=env)


async def cli(b, *args):
    r = await asyncio.to_thread(kohort, b, *args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return json.loads(r.stdout)


async def latest(w, isolation, topic="h"):
    LT = ListOffsetsRequest.ListOffsetsTopic
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[LT(name=topic, partitions=[
        LT.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    return (await w.call(req, 5)).topics[0].partitions[0].offset


def inject_hanging(b, topic: str, pid: int, minutes_ago: int = 30) -> int:
    """Append a transactional batch of a producer id no coordinator knows, as an older broker without
    verification would have let a late write in; -> its offset."""
    ts = int(time.time() * 1000) - minutes_ago * 60_000
    lg = b.storage.log(topic, 0)
    res = lg.append(build_batch([(b"k", b"hanging", [], ts)], producer_id=pid, producer_epoch=3, base_sequence=0,
                                transactional=True), leader_epoch=b.leader_epoch, now_ms=int(time.time() * 1000))
    b.producers.partition(topic, 0, lg).update(pid, 3, 0, 0, res.base_offset, ts, transactional=True)
    return res.base_offset


def test_late_writes_of_a_finished_transaction_are_refused(tmp_path):
    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "t")
            _, pid, ep = await init(w)
            t = Txn(w, "tx", "g", "t")
            t.pid, t.epoch = pid, ep
            assert await add(w, pid, ep) == {E.NONE} and await t.add_offsets() == 0
            assert (await produce(w, "t", tx_batch(pid, ep, 0))).base_offset == 0
            assert await t.txn_commit(1) == 0
            assert await end(w, pid, ep, False) == E.NONE            # abort: marker at 2
            # the same transaction's late data / offsets (same epoch: transactions v1) are refused
            assert (await produce(w, "t", tx_batch(pid, ep, 2), version=9)).error_code == E.INVALID_TXN_STATE
            assert (await produce(w, "t", tx_batch(pid, ep, 2), version=11)).error_code == E.TRANSACTION_ABORTABLE
            assert await t.txn_commit(1, version=3) == E.INVALID_TXN_STATE
            assert await t.txn_commit(1, version=4) == E.TRANSACTION_ABORTABLE
            # nothing was opened: LSO = high watermark, no pending offset
            assert await latest(w, 1, "t") == await latest(w, 0, "t") == 3
            assert await t.fetch(True) == (0, -1)
            assert b.producers.partition("t", 0, b.storage.log("t", 0)).ongoing == {}
            await w.close()
    asyncio.run(main())


def test_open_transactions_never_expire():
    ps = PartitionProducers()
    ps.update(7, 0, 0, 0, 10, 1_000, append_ms=1_000, transactional=True)
    ps.update(8, 0, 0, 0, 11, 1_000, append_ms=1_000)
    assert ps.expire(10_000_000, 1_000) == 1            # producer 8 goes, 7's transaction stays
    assert set(ps.entries) == {7} and ps.ongoing == {7: 10}


@pytest.mark.slow
def test_hanging_transaction_found_and_aborted(tmp_path):
    from tests.helpers.kafka_cluster import run_tool

    def kafka_tool(b, *args):
        r = run_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", f"127.0.0.1:{b.port}",
                     *args, check=False, timeout=60)
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
        return [line.split() for line in r.stdout.splitlines()[1:] if line.strip()]

    async def main():
        async with running_broker(tmp_path) as b:
            w = await Wire.connect(b)
            await create(w, "h")
            # a live transaction: listed, described, not hanging
            _, pid, ep = await init(w, "tx-live")
            assert await add(w, pid, ep, topic="h", tid="tx-live") == {E.NONE}
            assert (await produce(w, "h", tx_batch(pid, ep, 0))).base_offset == 0
            listed = await cli(b, "list")
            assert {"transactional_id": "tx-live", "producer_id": pid, "state": "Ongoing", "node": 0} in listed
            assert await cli(b, "list", "--state", "CompleteCommit") == []
            d = await cli(b, "describe", "--transactional-id", "tx-live")
            assert (d["state"], d["producer_id"], d["partitions"]) == ("Ongoing", pid, ["h-0"])
            assert await end(w, pid, ep, True, tid="tx-live") == E.NONE     # committed: marker at 2
            # a hanging one: producer 999 at offset 3, then plain data
            first = inject_hanging(b, "h", 999)
            plain = build_batch([(b"k", b"plain", [], int(time.time() * 1000))])
            assert (await produce(w, "h", plain)).base_offset == first + 1
            assert (await latest(w, 1), await latest(w, 0)) == (first, first + 2)   # LSO stuck
            prods = await cli(b, "describe-producers", "--topic", "h", "--partition", "0")
            assert [(p["producer_id"], p["txn_start_offset"]) for p in prods if p["producer_id"] == 999] == [(999, first)]
            hanging = await cli(b, "find-hanging", "--topic", "h")
            assert [(x["producer_id"], x["start_offset"]) for x in hanging] == [(999, first)]
            # Kafka's own tool sees it too (find-hanging by broker), and kohort's CLI aborts it
            rows = await asyncio.to_thread(kafka_tool, b, "find-hanging", "--broker-id", "0")
            assert [(r[0], r[1], r[2]) for r in rows] == [("h", "0", "999")], rows
            bad = await asyncio.to_thread(kohort, b, "abort", "--topic", "h", "--partition", "0", "--start-offset", "1")
            assert bad.returncode != 0 and "no open transaction starts at offset 1" in bad.stderr
            done = await cli(b, "abort", "--topic", "h", "--partition", "0", "--start-offset", str(first))
            assert done["aborted"] and done["producer_id"] == 999
            assert (await latest(w, 1), await latest(w, 0)) == (first + 3, first + 3)
            hw, lso, _, aborted = await fetch(w, offset=0, topic="h")
            assert (hw, lso, aborted) == (first + 3, first + 3, [(999, first)])
            assert await cli(b, "find-hanging", "--topic", "h") == []
            # another one, closed by Kafka's kafka-transactions.sh abort (Admin.abortTransaction)
            second = inject_hanging(b, "h", 1234)
            assert await latest(w, 1) == second
            await asyncio.to_thread(kafka_tool, b, "abort", "--topic", "h", "--partition", "0",
                                    "--start-offset", str(second))
            assert await latest(w, 1) == await latest(w, 0) == second + 2
            # an epoch below the producer's is refused (INVALID_PRODUCER_EPOCH), the state unchanged
            bad = await asyncio.to_thread(kohort, b, "abort", "--topic", "h", "--partition", "0", "--producer-id",
                                          "1234", "--producer-epoch", "1", "--coordinator-epoch", "0")
            assert bad.returncode != 0 and "INVALID_PRODUCER_EPOCH" in bad.stderr.upper().replace(" ", "_"), bad.stderr
            await w.close()
        async with running_broker(tmp_path) as b:        # the aborts are in the log: a restart agrees
            w = await Wire.connect(b)
            assert await latest(w, 1) == await latest(w, 0) == second + 2
            assert (await fetch(w, offset=0, topic="h"))[3] == [(999, first), (1234, second)]
            await w.close()
    asyncio.run(main())
