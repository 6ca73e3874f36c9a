"""kohort: the Kafka consumer-group system in Python."""
from kohort.version import __version__  # noqa: F401  (kohort.__version__)


def __getattr__(name):
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
