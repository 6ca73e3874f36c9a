"""kohort broker: an embedded single-node Kafka-compatible broker (asyncio)."""
