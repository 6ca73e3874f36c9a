"""The consumer: group membership (group), fetching (fetcher), positions and offsets (offsets), and
the public Consumer API (consumer)."""
from kohort.client.consumer.consumer import Consumer, ConsumerClosedError

__all__ = ["Consumer", "ConsumerClosedError"]
