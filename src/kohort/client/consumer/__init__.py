"""The consumer: group membership (membership: the pure state machine; group: its I/O driver),
fetching (fetcher), positions and offsets (offsets), and the public Consumer API (consumer).

`Consumer` is exported lazily, so importing the pure `membership` module loads no network code."""
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:       # what the lazy exports resolve to, for type checkers
    from kohort.client.consumer.consumer import Consumer as Consumer
    from kohort.client.consumer.consumer import ConsumerClosedError as ConsumerClosedError


def __getattr__(name: str) -> Any:
    if name in ("Consumer", "ConsumerClosedError"):
        from kohort.client.consumer import consumer
        return getattr(consumer, name)
    raise AttributeError(f"module 'kohort.client.consumer' has no attribute {name!r}")


__all__ = ["Consumer", "ConsumerClosedError"]
