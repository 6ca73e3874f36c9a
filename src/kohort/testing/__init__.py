"""kohort.testing: a real Kafka broker in the test process, for any Kafka client.

    from kohort.testing import broker
    with broker() as b:                       # in-memory, ephemeral loopback port, ready in milliseconds
        b.create_topic("orders")
        Producer({"bootstrap.servers": b.bootstrap_servers})...

`broker()` / `InProcessBroker` live in kohort/testing/broker.py; the pytest plugin (fixtures
`kafka_broker`, `kafka_broker_session`, `kafka_broker_factory`) in kohort/testing/plugin.py, registered
as the `kohort` pytest11 entry point.
"""
from __future__ import annotations

from kohort.testing.broker import BrokerNotRunningError, InProcessBroker, broker

__all__ = ["broker", "InProcessBroker", "BrokerNotRunningError"]
