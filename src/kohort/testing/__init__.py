"""kohort.testing: a real Kafka broker in the test process, for any Kafka client.

    from kohort.testing import broker
    with broker() as b:                       # in-memory, ephemeral loopback port, ready in milliseconds
        b.create_topic("orders")
        Producer({"bootstrap.servers": b.bootstrap_servers})...

`broker()` / `InProcessBroker` live in kohort/testing/inprocess.py; the pytest plugin (fixtures
`kafka_broker`, `kafka_broker_session`, `kafka_broker_factory`) in kohort/testing/plugin.py, registered
as the `kohort` pytest11 entry point. For annotating tests: a fixture broker is an `InProcessBroker`,
`kafka_broker_factory` a `BrokerFactory`. pytest imports this package on every run of a project that has
kohort installed, so its names are imported on first use, not here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kohort.testing.inprocess import BrokerFactory, BrokerNotRunningError, InProcessBroker, Storage, broker

__all__ = ["broker", "InProcessBroker", "BrokerNotRunningError", "BrokerFactory", "Storage"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib
        value = getattr(importlib.import_module("kohort.testing.inprocess"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kohort.testing' has no attribute {name!r}")
