"""An asyncio transactional copier (kohort.aio) run as a subprocess by tests/test_aio_copier.py: reads
SRC in a group (read_committed, static member), writes each record to DST and commits the input
offsets in the same transaction (KIP-98/447). Prints `COMMIT <records>` after each transaction.

usage: python -m tests.aio_copier BOOTSTRAP SRC DST GROUP TRANSACTIONAL_ID
"""
from __future__ import annotations

import asyncio
import sys

from kohort.aio import AIOConsumer, AIOProducer


async def main(bs: str, src: str, dst: str, group: str, txid: str) -> None:
    consumer = AIOConsumer(bootstrap_servers=bs, group_id=group, group_instance_id=f"{txid}-member",
                           enable_auto_commit=False, auto_offset_reset="earliest", isolation_level="read_committed",
                           session_timeout_ms=6000, heartbeat_interval_ms=300)
    async with AIOProducer(bs, transactional_id=txid) as producer, consumer:
        consumer.subscribe([src])
        while True:
            batch = await consumer.getmany(timeout_ms=500, max_records=40)
            if not batch:
                continue
            await producer.begin_transaction()
            for tp, recs in batch.items():
                for r in recs:
                    await producer.send(dst, r.value, key=r.key, partition=tp.partition)
            await producer.send_offsets_to_transaction({tp: recs[-1].offset + 1 for tp, recs in batch.items()},
                                                       consumer.group_metadata())
            await producer.commit_transaction()
            print(f"COMMIT {sum(len(r) for r in batch.values())}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
