"""kohort's asyncio API: `AIOProducer`, `AIOConsumer`, `AIOShareConsumer` (share groups, KIP-932),
`AIOAdmin`, driven by the running event loop.

Connections are `asyncio.BufferedProtocol`s around the sans-I/O `ClientProtocol` (`connection.py`),
shared metadata and coordinator lookup live in `client.py`, and the group members are the same pure
machines the threaded consumer drives (`client/consumer/membership*.py`)."""
from kohort.aio.admin import AIOAdmin
from kohort.aio.client import AIOClient, ClientSettings
from kohort.aio.connection import AIOConnection, open_connection
from kohort.aio.consumer import AIOConsumer, ConsumerStoppedError
from kohort.aio.producer import AIOProducer, RecordMetadata
from kohort.aio.share_consumer import AIOShareConsumer

__all__ = ["AIOAdmin", "AIOClient", "AIOConnection", "AIOConsumer", "AIOShareConsumer", "ConsumerStoppedError", "AIOProducer", "ClientSettings", "RecordMetadata", "open_connection"]
