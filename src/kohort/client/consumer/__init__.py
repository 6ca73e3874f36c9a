"""The consumer: group membership (membership: the pure state machine; group: its I/O driver),
fetching (fetcher), positions and offsets (offsets), and the public Consumer API (consumer).

`Consumer` is exported lazily, so importing the pure `membership` module loads no network code."""


def __getattr__(name):
    if name in ("Consumer", "ConsumerClosedError"):
        from kohort.client.consumer import consumer
        return getattr(consumer, name)
    raise AttributeError(f"module 'kohort.client.consumer' has no attribute {name!r}")


__all__ = ["Consumer", "ConsumerClosedError"]
