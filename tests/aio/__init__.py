"""Tests of kohort.aio: the asyncio clients."""
