"""kohort: the Kafka consumer-group system in Python."""
__version__ = "0.1.0"
