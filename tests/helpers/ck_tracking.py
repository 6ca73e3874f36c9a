"""Every confluent-kafka (librdkafka) Consumer and Producer a test opens is closed before the broker under
it stops (issue 11).

A librdkafka Consumer left open and destroyed after its broker is gone (pytest's teardown, garbage
collection at exit) can spin in C with the GIL held (`rd_kafka_destroy_app` in `Consumer_dealloc`), and
then the run never ends. conftest.py calls `install()` before any test imports confluent_kafka: the
module's Consumer and Producer become subclasses that remember their open instances (still the real
librdkafka clients), and the broker fixtures (kohort broker, Tansu, librdkafka's mock cluster, Apache
Kafka) call `close_open_clients()` before they stop their broker. Closing happens on a helper thread
with a time limit, so even a client that does not close cannot stop the fixture.
"""
from __future__ import annotations

import threading
import weakref

_open: "weakref.WeakSet" = weakref.WeakSet()
_lock = threading.Lock()
_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    import confluent_kafka

    base_consumer, base_producer = confluent_kafka.Consumer, confluent_kafka.Producer

    class Consumer(base_consumer):
        __doc__ = base_consumer.__doc__

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with _lock:
                _open.add(self)

        def close(self, *args, **kwargs):
            with _lock:
                _open.discard(self)
            return super().close(*args, **kwargs)

    class Producer(base_producer):
        __doc__ = base_producer.__doc__

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with _lock:
                _open.add(self)

    Consumer.__name__ = Consumer.__qualname__ = "Consumer"
    Producer.__name__ = Producer.__qualname__ = "Producer"
    confluent_kafka.Consumer, confluent_kafka.Producer = Consumer, Producer
    _installed = True


def _close_one(client) -> None:
    try:
        if hasattr(client, "purge"):        # a Producer: drop what is still queued, then let it go
            client.purge()
            client.flush(1)
        else:
            client.close()
    except Exception:                       # already closed, or the broker is already gone
        pass


def close_open_clients(timeout: float = 15.0) -> int:
    """Close every confluent-kafka client still open; returns how many there were."""
    with _lock:
        clients = list(_open)
        _open.clear()
    if not clients:
        return 0
    threads = [threading.Thread(target=_close_one, args=(c,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout / len(threads))
    return len(clients)


def open_count() -> int:
    with _lock:
        return len(_open)
