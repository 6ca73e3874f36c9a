"""The pytest plugin of kohort.testing (entry point `pytest11`: `kohort = "kohort.testing.plugin"`).

Fixtures, all synchronous (the broker runs on its own thread, so no async plugin is needed):

* `kafka_broker`          a fresh in-memory broker per test;
* `kafka_broker_session`  one broker for the whole session (its topics, records and any faults not
                          yet used carry over from test to test: `clear_faults()`);
* `kafka_broker_factory`  `factory(config=None, *, storage="memory"|"tmp")` -> a started broker with
                          Kafka's config names; every broker it made is closed when the test ends.

pytest loads this module on every run of every project that has kohort installed, so it imports
nothing heavy at import time: the broker is imported when a fixture is first used. Opt out with
`-p no:kohort`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kohort.testing.inprocess import BrokerFactory, InProcessBroker, Storage


def _factory(tmp_path_factory: pytest.TempPathFactory) -> tuple[BrokerFactory, Callable[[], None]]:
    from kohort.testing.inprocess import InProcessBroker
    made: list[InProcessBroker] = []

    def make(config: Mapping[str, Any] | None = None, *, storage: Storage = "memory") -> InProcessBroker:
        data_dir = str(tmp_path_factory.mktemp("kohort-broker")) if storage == "tmp" else None
        b = InProcessBroker(config, storage=storage, data_dir=data_dir)
        made.append(b)
        return b.start()

    def close_all() -> None:
        while made:
            made.pop().close()
    return make, close_all


@pytest.fixture
def kafka_broker() -> Iterator[InProcessBroker]:
    """A fresh in-process Kafka broker (kohort) for this test: in-memory, on an ephemeral loopback port."""
    from kohort.testing.inprocess import InProcessBroker
    with InProcessBroker() as b:
        yield b


@pytest.fixture(scope="session")
def kafka_broker_session() -> Iterator[InProcessBroker]:
    """One in-process Kafka broker (kohort) shared by the whole test session."""
    from kohort.testing.inprocess import InProcessBroker
    with InProcessBroker() as b:
        yield b


@pytest.fixture
def kafka_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerFactory]:
    """factory(config=None, *, storage="memory"|"tmp"): in-process Kafka brokers (kohort) configured by
    Kafka's broker config names; all closed at the end of the test."""
    make, close_all = _factory(tmp_path_factory)
    try:
        yield make
    finally:
        close_all()
