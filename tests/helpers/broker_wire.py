"""Test helpers: an in-process kohort Broker on a free port and a raw Kafka-protocol connection to it
(kohort.protocol framing over a real socket), for exact error codes and protocol corners."""
from __future__ import annotations

import asyncio
import contextlib
import struct

from kohort.broker.config import BrokerConfig
from kohort.broker.server import Broker
from kohort.protocol.framing import decode_response, encode_request
from kohort.protocol.records import build_batch


class Wire:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.corr = 0

    @classmethod
    async def connect(cls, broker) -> "Wire":
        r, w = await asyncio.open_connection(getattr(broker, "listen_host", broker.host),
                                             getattr(broker, "listen_port", broker.port))
        return cls(r, w)

    async def send(self, req, version: int, expect_response: bool = True):
        self.corr += 1
        self.writer.write(encode_request(req, version, self.corr))
        await self.writer.drain()
        if not expect_response:
            return None
        return await self.recv(type(req).API_KEY, version)

    async def recv(self, api_key: int, version: int, timeout: float = 10):
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), timeout))[0]
        payload = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        corr, resp = decode_response(payload, api_key, version)
        return corr, resp

    async def call(self, req, version: int):
        corr, resp = await self.send(req, version)
        assert corr == self.corr
        return resp

    async def close(self):
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


@contextlib.asynccontextmanager
async def running_broker(data_dir, props: dict | None = None):
    b = Broker(BrokerConfig.from_properties(props or {}), "127.0.0.1", 0, str(data_dir))
    await b.start()
    try:
        yield b
    finally:
        await b.stop()


def batch(n: int = 3, *, prefix: str = "v", **kw) -> bytes:
    return build_batch([(f"k{i}".encode(), f"{prefix}{i}".encode(), [], 1_700_000_000_000 + i)
                        for i in range(n)], **kw)
