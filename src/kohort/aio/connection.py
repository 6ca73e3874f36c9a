"""One Kafka connection on the running asyncio loop: an `asyncio.BufferedProtocol` around the
sans-I/O `protocol.framing.ClientProtocol`.

The loop receives straight into the ClientProtocol's buffer (`get_buffer`/`buffer_updated`), the
ClientProtocol cuts the frames, matches answers to requests in order and runs the ApiVersions and
SASL handshake; this module only moves bytes and turns answers into futures.

Cancellation never leaves a half-sent request: a request's bytes are handed to the connection before
the caller can be suspended (no await between its writes), so a request is either not sent at all or
sent whole. They are the request as its protocol's list of buffers, a Produce request's record
batches by reference. A request of up to WRITE_CHUNK bytes with nothing queued before it is written at
once: one `writelines` where asyncio writes with sendmsg (3.12+) or the request is small; before 3.12
`writelines` joins its buffers into one fresh bytes object, so there a request of LARGE_REQUEST bytes
or more is written buffer by buffer (`transport.write` sends each from where it lies and copies only
what the socket did not take; measured with 1 MB Produce requests on a busy 2-core machine: the
producer's longest loop turns about 0.5 ms shorter at p99 than joined, its CPU within noise; the
fresh allocation's page faults cost more than the copy). A larger
request (a producer's 1 MB batch) goes into the connection's write queue, by reference, and the
connection writes it WRITE_CHUNK bytes per turn of the loop, whoever its caller was and whatever
became of it; while the transport holds more than its high-water mark unsent (`pause_writing`) the
queue waits for `resume_writing` rather than have the transport copy it. Every later write goes behind
the queue, so frames stay in order. Written whole, a 1 MB request would hold the loop for one send
of 1 MB, about 0.3 ms on loopback and several ms when the kernel's work for it is preempted, and
every other task on the loop would wait behind it (the longest turns of bench_aio.py's 1 KiB produce
run); 128 KiB pieces cost the sender about the same CPU per MB.
A caller cancelled while waiting for the answer cancels only its future; the answer still arrives,
is matched with its request and dropped. A request that gets no answer within its timeout closes
the connection (as Kafka's clients do: the in-order matching of later answers cannot be trusted),
failing the other requests in flight with `KafkaConnectionError`.
"""
from __future__ import annotations

import asyncio
import ssl as _ssl
import sys
from collections import deque
from typing import Any

from kohort.protocol.framing import Versioned
from kohort.errors import ConnectionClosedError, KafkaConnectionError, KafkaTimeoutError
from kohort.protocol.framing import ClientProtocol, ProtocolViolation

DEFAULT_REQUEST_TIMEOUT_MS = 30000
# asyncio's transports join writelines()'s buffers before Python 3.12 (then: sendmsg)
_WRITELINES_JOINS = sys.version_info < (3, 12)
LARGE_REQUEST = 64 * 1024           # bytes from which a request's buffers are written one by one there
WRITE_CHUNK = 128 * 1024            # bytes of a queued request written per turn of the loop


class AIOConnection(asyncio.BufferedProtocol):
    """A connection to one broker; `await open_connection(...)` makes a ready one."""

    def __init__(self, client_id: str, sasl: tuple | None = None, max_frame: int | None = None,
                 software_version: str = "0"):
        kw = {} if max_frame is None else {"max_frame": max_frame}
        self.proto = ClientProtocol(client_id, sasl=sasl, software_name="kohort-aio",
                                    software_version=software_version, **kw)
        self._loop = asyncio.get_running_loop()
        self.ready: asyncio.Future = self._loop.create_future()
        self.closed: asyncio.Future = self._loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.node_id: int | None = None
        self._queue: deque = deque()     # buffers still to write, oldest first (memoryviews of bytes)
        self._scheduled = False          # a _write_queued is due on the loop's next turn
        self._paused = False             # the transport holds more than its high-water mark unsent

    # -- asyncio.BufferedProtocol ------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.proto.initiate()
        transport.write(self.proto.data_to_send())

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.proto.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            answers = self.proto.buffer_updated(nbytes)
        except ProtocolViolation as e:
            self._deliver(e.completed)
            self._fail(KafkaConnectionError(f"protocol violation: {e}"))
            return
        except Exception as e:        # the handshake failed (HandshakeError, SASL's KafkaError)
            self._fail(e)
            return
        more = self.proto.data_to_send()
        if more:
            self._write([more])
        if not self.ready.done() and self.proto.ready:
            self.ready.set_result(None)
        self._deliver(answers)

    def eof_received(self) -> bool:
        return False

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._queue and not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._write_queued)

    def connection_lost(self, exc) -> None:
        err = ConnectionClosedError("the broker closed the connection") if exc is None else \
            KafkaConnectionError(f"connection lost: {exc}")
        self._fail(err)

    # -- requests ----------------------------------------------------------------------------------
    @staticmethod
    def _deliver(answers) -> None:
        for a in answers:
            fut = a.handle
            if fut is not None and not fut.done():
                fut.set_result(a.response)

    def _fail(self, err: BaseException) -> None:
        for fut in self.proto.connection_lost():
            if fut is not None and not fut.done():
                fut.set_exception(err)
        if not self.ready.done():
            self.ready.set_exception(err)
            self.ready.exception()        # retrieved: nobody else may be waiting on it
        if not self.closed.done():
            self.closed.set_result(err)
        self._queue.clear()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    @property
    def is_open(self) -> bool:
        return not self.closed.done() and self.transport is not None and not self.transport.is_closing()

    def versions(self) -> dict[int, tuple[int, int]]:
        return self.proto.versions

    def pick(self, api_key: int, cap: int | None = None, floor: int | None = None) -> int:
        return self.proto.pick(api_key, cap, floor)

    def send(self, request, *, max_version: int | None = None, min_version: int | None = None,
             expect_response: bool = True, response_class=None) -> tuple[int, asyncio.Future | None]:
        """Write one request now -> (version sent, future of its answer; None without answer)."""
        if not self.is_open:
            raise KafkaConnectionError("connection is closed")
        cap = max_version
        if isinstance(request, Versioned):
            if request.max_version is not None:
                cap = request.max_version if cap is None else min(cap, request.max_version)
            version = self.proto.pick(request.API_KEY, cap, min_version)
            request = request.build(version)
        else:
            version = self.proto.pick(type(request).API_KEY, cap, min_version)
        fut = None
        if expect_response:
            fut = self._loop.create_future()
            fut.add_done_callback(_retrieve)
        _, bufs = self.proto.send_request_buffers(request, version, expect_response=expect_response, handle=fut,
                                                  response_class=response_class)
        self._write(bufs)
        return version, fut

    def _write(self, bufs: list) -> None:
        """Write a frame's buffers now, or queue them behind what is queued (see the module docstring)."""
        if not self._queue:
            size = sum(map(len, bufs))
            if size <= WRITE_CHUNK:
                if _WRITELINES_JOINS and len(bufs) > 1 and size >= LARGE_REQUEST:
                    write = self.transport.write
                    for b in bufs:
                        write(b)
                else:
                    self.transport.writelines(bufs)
                return
        self._queue.extend(memoryview(b).cast("B") for b in bufs)
        if not self._scheduled:
            self._write_queued()

    def _write_queued(self) -> None:
        """Write up to WRITE_CHUNK bytes of the queue; the rest on a later turn of the loop."""
        self._scheduled = False
        if self.transport is None or self.transport.is_closing():
            self._queue.clear()
            return
        if self._paused:
            return                      # resume_writing goes on
        q, budget, out = self._queue, WRITE_CHUNK, []
        while q and budget > 0:
            b = q[0]
            if len(b) <= budget:
                out.append(q.popleft())
                budget -= len(b)
            else:
                out.append(b[:budget])
                q[0] = b[budget:]
                budget = 0
        if _WRITELINES_JOINS:
            for b in out:
                self.transport.write(b)
        else:
            self.transport.writelines(out)
        if q and not self._paused:
            self._scheduled = True
            self._loop.call_soon(self._write_queued)

    async def request(self, request, *, timeout_ms: int | None = DEFAULT_REQUEST_TIMEOUT_MS,
                      max_version: int | None = None, min_version: int | None = None,
                      response_class=None) -> Any:
        """Send `request` (a message or a `Versioned`) and wait for its answer."""
        _, fut = self.send(request, max_version=max_version, min_version=min_version,
                           response_class=response_class)
        if timeout_ms is None:
            return await fut
        # the caller awaits the answer's own future, its timeout a timer: the caller resumes on the
        # loop's next turn after the answer is read (asyncio.wait_for(asyncio.shield(...)) takes three)
        timer = self._loop.call_later(timeout_ms / 1000, self._timed_out, fut, type(request).__name__, timeout_ms)
        try:
            return await fut
        finally:
            timer.cancel()

    def _timed_out(self, fut: asyncio.Future, what: str, timeout_ms: int) -> None:
        """A request's timer fired before its answer came: fail it, and close the connection."""
        if fut.done():
            return
        fut.set_exception(KafkaTimeoutError(f"request {what} got no answer within {timeout_ms} ms"))
        self._fail(KafkaTimeoutError(f"no answer within {timeout_ms} ms; connection closed"))

    def close(self) -> None:
        self._fail(ConnectionClosedError("connection closed by the client"))


def _retrieve(fut: asyncio.Future) -> None:
    """Mark an abandoned answer's error as seen (its caller was cancelled or timed out)."""
    if not fut.cancelled():
        fut.exception()


async def open_connection(host: str, port: int, *, client_id: str = "kohort-aio", ssl: _ssl.SSLContext | None = None,
                          sasl: tuple | None = None, timeout_ms: int = 10000) -> AIOConnection:
    """Connect, run the ApiVersions (and SASL) handshake, return the ready connection."""
    loop = asyncio.get_running_loop()
    try:
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: AIOConnection(client_id, sasl), host, port, ssl=ssl,
                                   server_hostname=host if ssl is not None else None),
            timeout_ms / 1000)
    except (OSError, asyncio.TimeoutError) as e:
        raise KafkaConnectionError(f"cannot connect to {host}:{port}: {e or 'timed out'}") from None
    try:
        await asyncio.wait_for(asyncio.shield(conn.ready), timeout_ms / 1000)
    except asyncio.TimeoutError:
        conn.close()
        raise KafkaConnectionError(f"{host}:{port}: no ApiVersions answer within {timeout_ms} ms") from None
    except BaseException:
        conn.close()
        raise
    return conn


__all__ = ["AIOConnection", "DEFAULT_REQUEST_TIMEOUT_MS", "open_connection"]
