"""kohort: the Kafka consumer-group system in Python."""
from typing import TYPE_CHECKING, Any

from kohort.version import __version__  # noqa: F401  (kohort.__version__)

if TYPE_CHECKING:       # what the lazy exports below resolve to, for type checkers
    from kohort.client.admin import Admin as Admin
    from kohort.client.consumer.consumer import Consumer as Consumer
    from kohort.client.producer import Producer as Producer
    from kohort.client.share.consumer import ShareConsumer as ShareConsumer


def __getattr__(name: str) -> Any:
    # Lazy exports: `from kohort import Consumer` without importing the client at package import.
    if name == "Consumer":
        from kohort.client.consumer import Consumer
        return Consumer
    if name == "Producer":
        from kohort.client.producer import Producer
        return Producer
    if name == "ShareConsumer":
        from kohort.client.share.consumer import ShareConsumer
        return ShareConsumer
    if name == "Admin":
        from kohort.client.admin import Admin
        return Admin
    raise AttributeError(f"module 'kohort' has no attribute {name!r}")
