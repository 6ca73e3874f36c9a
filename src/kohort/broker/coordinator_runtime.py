"""The hook kohort.broker.components looks for: `open(broker)` attaches the group coordinator
runtime (kohort.broker.coordinator.runtime) as `broker.coordinator`."""
from __future__ import annotations

from kohort.broker.coordinator.runtime import open_coordinator


async def open(broker):   # noqa: A001 - the name components.py calls
    return await open_coordinator(broker)
