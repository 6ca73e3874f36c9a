"""A TCP proxy that injects network faults between clients and one broker (the test bed's fault harness).

    with FaultProxy(("127.0.0.1", broker_port)) as proxy:      # listens on 127.0.0.1:proxy.port
        proxy.delay(200)                  # every byte, both directions, held 200 ms (order kept)
        proxy.pause("c2s")                # stop forwarding client -> broker; bytes queue up
        proxy.resume()                    # ... and are delivered, in order (a healed partition)
        proxy.blackhole()                 # bytes read and thrown away; connections stay open, silent
        proxy.heal()                      # no fault for connections made from now on
        proxy.reset()                     # every open connection closed with RST, both sides
        proxy.connections()[0].blackhole("s2c")     # faults per connection too

Directions are "c2s" (client to broker), "s2c" (broker to client) and "both". A fault set on the proxy
applies to its open connections and to those accepted later; a fault set on one `Conn` applies to it
alone. `heal()` clears the proxy's faults and those of its open connections, but a connection that was
black-holed has lost bytes mid-stream: heal(reset_blackholed=True) (the default) resets those, as a
peer whose retransmissions were never acknowledged eventually gives up; with False they hang on, a
connection that hangs without closing. `refuse()` resets every new connection at once.

A broker behind it must advertise the proxy's address (`advertised.listeners`), or clients connect to
the broker directly after their first Metadata answer. One thread, a selector, non-blocking sockets;
each direction holds at most `max_buffer` bytes before it stops reading (back-pressure, as TCP).
"""
from __future__ import annotations

import collections
import selectors
import socket
import struct
import threading
import time

DIRECTIONS = ("c2s", "s2c")


def _dirs(direction: str) -> tuple[str, ...]:
    if direction == "both":
        return DIRECTIONS
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'c2s', 's2c' or 'both', not {direction!r}")
    return (direction,)


class _Fault:
    """What happens to the bytes of one direction."""

    __slots__ = ("delay_ms", "paused", "blackholed")

    def __init__(self) -> None:
        self.delay_ms = 0
        self.paused = False
        self.blackholed = False

    def copy_from(self, other: "_Fault") -> None:
        self.delay_ms, self.paused, self.blackholed = other.delay_ms, other.paused, other.blackholed


class _Pipe:
    """One direction of a connection: bytes read from `src`, queued with their release time, written to `dst`."""

    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src, self.dst = src, dst
        self.fault = _Fault()
        self.queue: collections.deque = collections.deque()     # (release at, bytes)
        self.queued = 0
        self.eof = False            # src closed its side; dst is shut down once the queue is written
        self.forwarded = 0
        self.discarded = 0


class Conn:
    """One proxied connection (client socket <-> broker socket)."""

    def __init__(self, proxy: "FaultProxy", client: socket.socket, upstream: socket.socket, cid: int) -> None:
        self._proxy = proxy
        self.id = cid
        self.client, self.upstream = client, upstream
        self.pipes = {"c2s": _Pipe(client, upstream), "s2c": _Pipe(upstream, client)}
        self.closed = False
        self.was_blackholed = False

    # faults of this connection alone (thread-safe: applied under the proxy's lock)
    def delay(self, ms: int, direction: str = "both") -> None:
        with self._proxy._lock:
            for d in _dirs(direction):
                self.pipes[d].fault.delay_ms = int(ms)
        self._proxy._wake()

    def pause(self, direction: str = "both") -> None:
        with self._proxy._lock:
            for d in _dirs(direction):
                self.pipes[d].fault.paused = True

    def resume(self, direction: str = "both") -> None:
        with self._proxy._lock:
            for d in _dirs(direction):
                self.pipes[d].fault.paused = False
        self._proxy._wake()

    def blackhole(self, direction: str = "both") -> None:
        with self._proxy._lock:
            for d in _dirs(direction):
                p = self.pipes[d]
                p.fault.blackholed = True
                p.discarded += p.queued
                self._proxy.discarded_bytes += p.queued
                p.queue.clear()
                p.queued = 0
            self.was_blackholed = True

    def reset(self) -> None:
        with self._proxy._lock:
            self._proxy._close(self, rst=True)

    @property
    def bytes_forwarded(self) -> dict:
        return {d: p.forwarded for d, p in self.pipes.items()}


class FaultProxy:
    """See the module docstring."""

    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0,
                 max_buffer: int = 8 << 20) -> None:
        self.target = target
        self.max_buffer = max_buffer
        self._lock = threading.RLock()
        self._faults = {d: _Fault() for d in DIRECTIONS}
        self._refusing = False
        self._conns: dict[int, Conn] = {}
        self._next_id = 0
        self.accepted = 0
        self.discarded_bytes = 0      # thrown away by black holes
        self.delayed_chunks = 0       # held for a delay > 0
        self.resets = 0               # connections closed with RST (reset, heal of black holes, refuse)
        self._sel = selectors.DefaultSelector()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(128)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, ("accept", None))
        self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=f"fault-proxy-{self.port}", daemon=True)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "FaultProxy":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(5)
        with self._lock:
            for c in list(self._conns.values()):
                self._close(c, rst=False)
        self._sel.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- faults of the whole proxy (open connections and later ones) ---------------------------------
    def connections(self) -> list[Conn]:
        with self._lock:
            return [c for c in self._conns.values() if not c.closed]

    def delay(self, ms: int, direction: str = "both") -> None:
        with self._lock:
            for d in _dirs(direction):
                self._faults[d].delay_ms = int(ms)
            for c in self._conns.values():
                c.delay(ms, direction)

    def pause(self, direction: str = "both") -> None:
        with self._lock:
            for d in _dirs(direction):
                self._faults[d].paused = True
            for c in self._conns.values():
                c.pause(direction)

    def resume(self, direction: str = "both") -> None:
        with self._lock:
            for d in _dirs(direction):
                self._faults[d].paused = False
            for c in self._conns.values():
                c.resume(direction)

    def blackhole(self, direction: str = "both") -> None:
        with self._lock:
            for d in _dirs(direction):
                self._faults[d].blackholed = True
            for c in self._conns.values():
                c.blackhole(direction)

    def refuse(self, on: bool = True) -> None:
        """Reset every connection accepted from now on (a broker host that answers RST)."""
        with self._lock:
            self._refusing = on

    def reset(self) -> int:
        """Close every open connection with RST; returns how many."""
        with self._lock:
            conns = [c for c in self._conns.values() if not c.closed]
            for c in conns:
                self._close(c, rst=True)
        return len(conns)

    def heal(self, reset_blackholed: bool = True) -> None:
        """No fault any more: queued bytes are delivered; black-holed connections are reset (or, with
        reset_blackholed=False, left hanging)."""
        with self._lock:
            self._refusing = False
            for d in DIRECTIONS:
                self._faults[d] = _Fault()
            for c in list(self._conns.values()):
                if c.was_blackholed:
                    if reset_blackholed:
                        self._close(c, rst=True)
                    continue
                for p in c.pipes.values():
                    p.fault = _Fault()
        self._wake()

    # -- the loop ---------------------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        while not self._stop:
            timeout = self._next_release()
            try:
                events = self._sel.select(timeout)
            except (OSError, ValueError):
                return
            with self._lock:
                for key, mask in events:
                    kind, conn = key.data
                    if kind == "accept":
                        self._accept()
                    elif kind == "wake":
                        try:
                            self._wake_r.recv(4096)
                        except OSError:
                            pass
                    elif not conn.closed:
                        if mask & selectors.EVENT_READ:
                            self._read(conn, key.fileobj)
                        if mask & selectors.EVENT_WRITE and not conn.closed:
                            self._flush(conn)
                for conn in list(self._conns.values()):
                    if not conn.closed:
                        self._flush(conn)
                        self._update_interest(conn)

    def _next_release(self) -> float:
        with self._lock:
            now = time.monotonic()
            soonest = None
            for c in self._conns.values():
                for p in c.pipes.values():
                    if p.queue and not p.fault.paused:
                        t = p.queue[0][0]
                        soonest = t if soonest is None else min(soonest, t)
            return 0.5 if soonest is None else max(0.0, min(0.5, soonest - now))

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        self.accepted += 1
        if self._refusing:
            self.resets += 1
            _rst_close(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _rst_close(client)      # the broker is down: the client sees its connection reset
            return
        for s in (client, upstream):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_id += 1
        conn = Conn(self, client, upstream, self._next_id)
        for d in DIRECTIONS:
            conn.pipes[d].fault.copy_from(self._faults[d])
        conn.was_blackholed = any(self._faults[d].blackholed for d in DIRECTIONS)
        self._conns[conn.id] = conn
        self._sel.register(client, selectors.EVENT_READ, ("conn", conn))
        self._sel.register(upstream, selectors.EVENT_READ, ("conn", conn))

    def _read(self, conn: Conn, sock: socket.socket) -> None:
        pipe = conn.pipes["c2s" if sock is conn.client else "s2c"]
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn, rst=True)
            return
        if not data:
            pipe.eof = True
            if pipe.fault.blackholed:
                return      # a black hole never tells the other side
            if not pipe.queue:
                self._shutdown_dst(conn, pipe)
            return
        if pipe.fault.blackholed:
            pipe.discarded += len(data)
            self.discarded_bytes += len(data)
            return
        if pipe.fault.delay_ms:
            self.delayed_chunks += 1
        pipe.queue.append((time.monotonic() + pipe.fault.delay_ms / 1000.0, data))
        pipe.queued += len(data)

    def _flush(self, conn: Conn) -> None:
        now = time.monotonic()
        for pipe in conn.pipes.values():
            if pipe.fault.paused:
                continue
            while pipe.queue and pipe.queue[0][0] <= now:
                at, data = pipe.queue[0]
                try:
                    n = pipe.dst.send(data)
                except BlockingIOError:
                    break
                except OSError:
                    self._close(conn, rst=True)
                    return
                pipe.forwarded += n
                pipe.queued -= n
                if n < len(data):
                    pipe.queue[0] = (at, data[n:])
                    break
                pipe.queue.popleft()
            if pipe.eof and not pipe.queue:
                self._shutdown_dst(conn, pipe)
                if conn.closed:
                    return

    def _shutdown_dst(self, conn: Conn, pipe: _Pipe) -> None:
        other = conn.pipes["s2c" if pipe is conn.pipes["c2s"] else "c2s"]
        if other.eof and not other.queue:
            self._close(conn, rst=False)
            return
        try:
            pipe.dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _update_interest(self, conn: Conn) -> None:
        for sock, out_pipe, in_pipe in ((conn.client, conn.pipes["s2c"], conn.pipes["c2s"]),
                                        (conn.upstream, conn.pipes["c2s"], conn.pipes["s2c"])):
            mask = 0
            if not in_pipe.eof and in_pipe.queued < self.max_buffer:
                mask |= selectors.EVENT_READ
            if out_pipe.queue and not out_pipe.fault.paused and out_pipe.queue[0][0] <= time.monotonic():
                mask |= selectors.EVENT_WRITE
            data = ("conn", conn)
            try:
                if mask:
                    try:
                        self._sel.modify(sock, mask, data)
                    except KeyError:
                        self._sel.register(sock, mask, data)
                else:
                    try:
                        self._sel.unregister(sock)
                    except KeyError:
                        pass
            except (ValueError, OSError):
                pass

    def _close(self, conn: Conn, rst: bool) -> None:
        if conn.closed:
            return
        conn.closed = True
        if rst:
            self.resets += 1
        for s in (conn.client, conn.upstream):
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            if rst:
                _rst_close(s)
            else:
                s.close()
        self._conns.pop(conn.id, None)


def _rst_close(s: socket.socket) -> None:
    """Close with RST (SO_LINGER 0) rather than FIN."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()


__all__ = ["Conn", "FaultProxy"]
