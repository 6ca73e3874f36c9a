"""kohort: the Kafka consumer-group system in Python."""
__version__ = "0.1.0"


def __getattr__(name):
    # Lazy exports: `from kohort import Consumer` without importing the client at package import.
    if name == "Consumer":
        from kohort.client.consumer import Consumer
        return Consumer
    raise AttributeError(f"module 'kohort' has no attribute {name!r}")
