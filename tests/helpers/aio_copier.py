"""An asyncio transactional copier (kohort.aio) run as a subprocess by tests/aio/test_aio_copier.py (and
in-process by its fast tests through `copy`): reads SRC in a group (read_committed, static member),
writes each record to DST and commits the input offsets in the same transaction (KIP-98/447).
Prints `COMMIT <records>` after each transaction and `ABORT <error>` after each aborted one.

As Kafka's TransactionalMessageCopier: an abortable error (a rebalance under the transaction makes
TxnOffsetCommit answer ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID) aborts the transaction and rewinds
the consumer to the group's committed offsets, then copying goes on; a fatal one (fenced) ends it.

usage: python -m tests.helpers.aio_copier BOOTSTRAP SRC DST GROUP TRANSACTIONAL_ID
"""
from __future__ import annotations

import asyncio
import sys
from typing import Callable

from kohort.aio import AIOConsumer, AIOProducer
from kohort.errors import AbortableTransactionError


async def copy(consumer: AIOConsumer, producer: AIOProducer, dst: str,
               report: Callable[[str], None] = lambda line: print(line, flush=True),
               stop: asyncio.Event | None = None) -> None:
    """Copy transaction by transaction until `stop` is set (forever without one)."""
    while stop is None or not stop.is_set():
        batch = await consumer.getmany(timeout_ms=500, max_records=40)
        if not batch:
            continue
        try:
            await producer.begin_transaction()
            for tp, recs in batch.items():
                for r in recs:
                    await producer.send(dst, r.value, key=r.key, partition=tp.partition)
            await producer.send_offsets_to_transaction({tp: recs[-1].offset + 1 for tp, recs in batch.items()},
                                                       consumer.group_metadata())
            await producer.commit_transaction()
        except AbortableTransactionError as e:
            await producer.abort_transaction()
            await consumer.seek_to_committed()
            report(f"ABORT {e}")
            continue
        report(f"COMMIT {sum(len(r) for r in batch.values())}")


async def main(bs: str, src: str, dst: str, group: str, txid: str) -> None:
    consumer = AIOConsumer(bootstrap_servers=bs, group_id=group, group_instance_id=f"{txid}-member",
                           enable_auto_commit=False, auto_offset_reset="earliest", isolation_level="read_committed",
                           session_timeout_ms=6000, heartbeat_interval_ms=300)
    async with AIOProducer(bs, transactional_id=txid) as producer, consumer:
        consumer.subscribe([src])
        await copy(consumer, producer, dst)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
