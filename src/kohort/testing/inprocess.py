"""An in-process kohort broker for tests: `broker()` and its handle, `InProcessBroker`.

The broker is kohort's own (kohort.broker.server.Broker, the full Kafka protocol) running on an
asyncio loop in a daemon thread of the test process (one loop and thread for all its brokers), on an ephemeral loopback port, with in-memory
storage (`storage="memory"`) or a temporary directory (`storage="tmp"`). Any Kafka client connects
to `bootstrap_servers`. Faults are injected per API with Kafka's names (broker/faults.py):

    with broker() as b:
        b.create_topic("orders", partitions=3)
        b.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")   # the next Produce is answered with it
        b.delay("Fetch", 200, count=3)                      # the next 3 Fetch answers 200 ms late
        b.drop_connection("JoinGroup")                      # the next JoinGroup closes its connection
        b.restart()                                          # acknowledged records survive

Configuration uses Kafka's broker config names (`auto.create.topics.enable`, `listeners`,
`listener.security.protocol.map`, `sasl.enabled.mechanisms`, ...), as `kohort broker --config` reads
them. Unless the config says otherwise a test broker has group.initial.rebalance.delay.ms=0 and
offsets.topic.num.partitions=1 (TEST_DEFAULTS).
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from kohort.broker.faults import DELAY, DROP, ERROR, Fault, FaultPlan, api_key_of, error_code_of

if TYPE_CHECKING:
    from kohort.broker.security import Listener
    from kohort.storage.fs import MemoryFileSystem

T = TypeVar("T")

Storage = Literal["memory", "tmp"]


class BrokerFactory(Protocol):
    """What the `kafka_broker_factory` fixture yields: `factory(config=None, *, storage="memory")` -> a
    started broker configured by Kafka's broker config names ("tmp": storage in a temporary directory)."""

    def __call__(self, config: Mapping[str, Any] | None = None, *, storage: Storage = "memory") -> InProcessBroker:
        ...


# Defaults of a test broker, as test set-ups of Kafka commonly choose them (the config given wins):
# groups start at once (a test does not wait 3 s per group) and __consumer_offsets has one partition
# (50 cost start-up time and nothing a single broker under test needs)
TEST_DEFAULTS: dict[str, str] = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}
START_TIMEOUT_S = 30.0


class BrokerNotRunningError(RuntimeError):
    """The handle's broker is stopped (call start())."""


class InProcessBroker:
    """A kohort broker on a thread of this process. Use `broker()` (a context manager) or call
    `start()` and `close()` yourself."""

    def __init__(self, config: Mapping[str, Any] | None = None, *, storage: Storage = "memory",
                 data_dir: str | None = None) -> None:
        if storage not in ("memory", "tmp"):
            raise ValueError(f"storage must be 'memory' or 'tmp', got {storage!r}")
        from kohort.broker.config import BrokerConfig
        self.properties: dict[str, str] = {**TEST_DEFAULTS, **{str(k): _prop(v) for k, v in (config or {}).items()}}
        self.config = BrokerConfig.from_properties(self.properties)      # bad names/values fail here
        self.storage = storage
        self._own_dir = False
        if storage == "tmp" and data_dir is None:
            data_dir = tempfile.mkdtemp(prefix="kohort-test-broker-")
            self._own_dir = True
        self.data_dir = data_dir if storage == "tmp" else None
        self._memory_fs: MemoryFileSystem | None = None
        if storage == "memory":
            from kohort.storage import fs
            self._memory_fs = fs.MemoryFileSystem()  # type: ignore[no-untyped-call]
        self.faults = FaultPlan()
        self._ports: list[int] | None = None     # the bound ports, kept by a restart
        self._broker: Any = None            # kohort.broker.server.Broker while running
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "InProcessBroker":
        """Start the broker (again, after stop(): same port, same storage)."""
        if self._closed:
            raise BrokerNotRunningError("this broker was closed")
        if self._broker is not None:
            return self
        from kohort.broker.server import Broker
        listeners = self._listeners()
        b = Broker(self.config, "127.0.0.1", listeners[0].port, self.data_dir, listeners)
        b.memory_fs = self._memory_fs
        b.faults = self.faults
        self._run(b.start())
        self._broker = b
        self._ports = [lst.port for lst in b.listeners]
        return self

    def stop(self) -> None:
        """Stop the broker as a clean shutdown does: connections closed, storage flushed and closed."""
        b, self._broker = self._broker, None
        if b is not None:
            self._run(b.stop())

    def restart(self) -> "InProcessBroker":
        """Stop and start again: acknowledged records, topics and committed offsets survive, clients
        reconnect to the same address; the leader epoch grows by one, as when Kafka re-elects a node."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the broker, end its thread and remove its temporary directory."""
        if self._closed:
            return
        self._closed = True
        try:
            self.stop()
        finally:
            if self._own_dir and self.data_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "InProcessBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._broker is not None

    # -- addresses ----------------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        """"host:port" of the first listener."""
        return self.listener_address()

    def listener_address(self, name: str | None = None) -> str:
        """"host:port" of the listener named `name` (e.g. "SASL_PLAINTEXT"), else of the first."""
        b = self._require()
        for lst in b.listeners:
            if name is None or lst.name == name.upper():
                host, port = lst.advertised
                return f"{host}:{port}"
        raise KeyError(f"no listener {name!r}; listeners: {', '.join(lst.name for lst in b.listeners)}")

    @property
    def port(self) -> int:
        return int(self._require().listeners[0].port)

    # -- topics -------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> None:
        """Create a topic (topic configs by Kafka's names, e.g. {"cleanup.policy": "compact"}).
        An existing topic, a bad name or a bad config raises the KafkaError a CreateTopics answer
        would carry (kohort.errors: TopicAlreadyExistsError, InvalidTopicError, InvalidConfigError...)."""
        from kohort.errors import for_code
        from kohort.storage.errors import StorageError
        b = self._require()
        configs = {str(k): _prop(v) for k, v in (config or {}).items()}

        async def create() -> None:
            b.storage.create_topic(name, partitions, configs)
        try:
            self._run(create())
        except StorageError as e:
            raise for_code(int(e.error_code))(str(e)) from None

    def topics(self) -> list[str]:
        """The topics' names, without the broker's internal ones (__consumer_offsets, ...)."""
        b = self._require()

        async def names() -> list[str]:
            return sorted(t.name for t in b.storage.topics() if not t.name.startswith("__"))
        return self._run(names())

    # -- faults -------------------------------------------------------------------------------------
    def fail_next(self, api: str | int, error: str | int, count: int = 1) -> None:
        """Answer the next `count` requests of `api` (Kafka's name: "Produce", "Fetch", "JoinGroup",
        "Metadata", ...) with `error` (Kafka's ErrorCode name, e.g. "NOT_LEADER_OR_FOLLOWER") in every
        error field of the answer, without handling them (nothing is appended, joined or committed)."""
        self.faults.add(api_key_of(api), Fault(ERROR, error_code=error_code_of(error)), count)

    def delay(self, api: str | int, ms: float, count: int | None = 1) -> None:
        """Hold back the answers of the next `count` requests of `api` by `ms` milliseconds (count=None:
        every request until clear_faults()). The requests are handled as usual."""
        if ms < 0:
            raise ValueError(f"ms must be >= 0, got {ms}")
        self.faults.add(api_key_of(api), Fault(DELAY, delay_s=ms / 1000), count)

    def drop_connection(self, api: str | int, count: int = 1) -> None:
        """Close the connection instead of answering the next `count` requests of `api` (they are not
        handled; the answers due before them are still sent)."""
        self.faults.add(api_key_of(api), Fault(DROP), count)

    def faults_pending(self, api: str | int | None = None) -> int:
        """Faults not yet applied (of `api`, or of all APIs)."""
        return self.faults.remaining(None if api is None else api_key_of(api))

    def faults_applied(self, api: str | int) -> int:
        """How many requests of `api` got an injected fault so far."""
        return self.faults.taken[api_key_of(api)]

    def clear_faults(self, api: str | int | None = None) -> None:
        self.faults.clear(None if api is None else api_key_of(api))

    # -- internals ----------------------------------------------------------------------------------
    def _require(self) -> Any:
        """The running kohort.broker.server.Broker (typed Any: its components attach their attributes
        when it opens)."""
        if self._broker is None:
            raise BrokerNotRunningError("the broker is stopped; call start()")
        return self._broker

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = START_TIMEOUT_S) -> T:
        return asyncio.run_coroutine_threadsafe(coro, _broker_loop()).result(timeout)

    def _listeners(self) -> list[Listener]:
        from kohort.broker.security import Listener, build_listeners
        if "listeners" in self.properties:
            listeners = build_listeners(self.config)
        else:
            listeners = [Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)]
        if self._ports is not None:             # a restart binds the ports clients know
            for lst, port in zip(listeners, self._ports):
                lst.port = port
        return listeners


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _broker_loop() -> asyncio.AbstractEventLoop:
    """The event loop every in-process broker of this process runs on, on one daemon thread started
    with the first broker (a thread per broker would cost its start-up on every test)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="kohort-test-brokers", daemon=True).start()
            _loop = loop
        return _loop


def _prop(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@contextmanager
def broker(config: Mapping[str, Any] | None = None, *, storage: Storage = "memory",
           data_dir: str | os.PathLike[str] | None = None) -> Iterator[InProcessBroker]:
    """A started in-process broker, closed when the block ends."""
    b = InProcessBroker(config, storage=storage, data_dir=None if data_dir is None else os.fspath(data_dir))
    with b:
        yield b
