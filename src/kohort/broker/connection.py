"""One client connection of the broker: an asyncio BufferedProtocol that cuts request frames out of
the received bytes and answers them in request order.

Reading: the socket receives into one fixed buffer (`get_buffer`); every complete frame in it is
copied out once and dispatched at once (handlers may wait, e.g. fetch long polls, JoinGroup, the
fsync round of acks=all). The 4-byte size prefix is checked against socket.request.max.bytes (on a
SASL listener before authentication: sasl.server.max.receive.size) before any of the body is read;
a frame too large for the buffer is received straight into a buffer of its own (allocated as its
bytes arrive, of the frame's whole size once a quarter of it is in, taken from a small pool of such
buffers that nothing refers to any more when one fits). A read that
ends with a few bytes of a frame still to come hands the receive buffer back and keeps those bytes
in a small one (PARTIAL_MOVE, SMALL_BUFFER), so slow senders cannot pin a receive buffer each. A malformed
frame closes this connection only, with one log line. The common Produce request (one partition, no
transactional id; on a connection without SASL, authorizer or injected faults) goes straight to
handlers/produce.produce_one, read from the frame without request objects; its answer is its
encoded frame (a bytearray, written as it is). Consumers' Fetch requests (v12-v17, no tagged fields)
are read by protocol/messages/fetch.read_fetch_request instead of the schema's codecs (the same
FetchRequest), and their answers without tagged fields written by encode_fetch_frame (the same
bytes as the framing encoders). An unknown API key or version closes the
connection as Kafka does, except ApiVersions, which is answered with UNSUPPORTED_VERSION and the
supported ranges (KIP-511).

Answering: `_pending` holds the answers (done or still being worked on) in request order. `_pump`
encodes every answer that is ready from the head, joins the small ones (up to COALESCE_BYTES) into
one transport write and stops at the first answer still being worked on (a done-callback resumes it).
It runs after every frame, so an answer ready at once is written before the next frame of the same
read is worked on (answers that complete together, e.g. one fsync round, still go out in one write).
Fetch answers on connections without TLS carry their large record sets as FileSlices, written with
sendfile between the encoded parts of the frame: at once while the socket takes them (`_splice_now`:
os.sendfile to the socket while the transport has nothing buffered), else by a task that waits for
the socket (`_send_spliced`); nothing else is written meanwhile.

Back-pressure, as Kafka mutes a channel: the connection is not read while the transport's unsent
bytes are above WRITE_HIGH_WATER (pause_writing) or queued.max.requests answers are pending; frames
already received wait in the buffer until there is room again.

SASL listeners: the connection first goes through its `Authenticator` (broker/security.py: only
ApiVersions and the SASL exchange); the principal it ends with is on every RequestContext of the
connection; KIP-368 re-authentication and session expiry are checked per request.

Injected faults (tests only): when `broker.faults` holds a FaultPlan (broker/faults.py), each request
takes its API's next fault before the handler runs: an error answer instead of the handler's, the
handler's answer held back, or the connection closed instead of answering.
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import logging
import os
import socket
import sys
import time

from kohort.broker.context import RequestContext
from kohort.broker.faults import DELAY, DROP
from kohort.broker.handlers import HANDLERS, NO_RESPONSE
from kohort.broker.handlers.produce import produce_one
from kohort.broker.security import ANONYMOUS, CLOSE, FAIL, Authenticator, Listener, tls_principal
from kohort.errors import DecodeError
from kohort.protocol.framing import (
    FrameTooLargeError, UnsupportedRequestError, encode_response_buffer, encode_response_spliced, frame_size,
    peek_request_header,
)
from kohort.protocol.headers import RequestHeader, request_header_version
from kohort.protocol.messages import REQUESTS
from kohort.protocol.messages.fetch import encode_fetch_frame, read_fetch_request
from kohort.protocol.messages.produce import read_one_partition
from kohort.protocol.primitives import Reader

log = logging.getLogger("kohort.broker")
conn_log = logging.getLogger("kohort.broker.connections")
_conn_ids = itertools.count(1)
RECV_BUFFER = 256 * 1024       # a receive buffer (as asyncio's streams read); frames over half of it
                               # get a buffer of their own
_BYTEARRAY_HEAD = bytearray().__sizeof__()   # a bytearray's size less its allocation
BIG_WHOLE_FRACTION = 4         # a large frame gets its whole-size buffer once 1/4 of it is in
_BIG_POOL: list = []           # large frames' buffers, reused when nothing refers to them any more
_BIG_POOL_MAX = 6              # (the newest; up to 6 x BIG_POOL_FRAME bytes held)
BIG_POOL_FRAME = 2 << 20       # larger frames' buffers are not kept
_POOL: list = []               # free receive buffers (bytearray, memoryview), shared by the connections
_POOL_MAX = 16
PARTIAL_MOVE = 1024            # a partial frame of at most this many bytes leaves the receive buffer
SMALL_BUFFER = 8 * 1024        # ... for a buffer of this size
WRITE_HIGH_WATER = 1 << 20     # unsent answer bytes after which a connection is not read
COALESCE_BYTES = 64 * 1024     # ready answers joined into one write up to this size
FETCH = 1                      # the API whose record sets may be FileSlices (sent with sendfile)
_CLOSE = object()              # a pending entry: close once the answers before it are written


def decode_request(payload):
    """framing.decode_request, but trailing bytes after the body are ignored as Kafka's broker does
    (it never checks for leftovers; librdkafka 2.16 sends 3 extra bytes in Metadata v13)."""
    api_key, version, corr = peek_request_header(payload)
    cls = REQUESTS.get(api_key)
    if cls is None or not (cls.MIN_VERSION <= version <= cls.MAX_VERSION):
        client_id = None
        try:
            client_id = Reader(payload, 8).nullable_string()
        except DecodeError:
            pass
        raise UnsupportedRequestError(api_key, version, corr, client_id)
    r = Reader(payload)
    header = RequestHeader.read(r, request_header_version(cls, version))
    if api_key == FETCH and 12 <= version <= 17:
        req = read_fetch_request(payload, r.pos, version)      # a consumer's Fetch, without the codecs
        if req is not None:
            return header, req
    return header, cls.read(r, version)       # decode(exact=False) less the version check made above


class Connection(asyncio.BufferedProtocol):
    def __init__(self, broker, listener: Listener):
        self.broker = broker
        self.listener = listener
        self.conn_id = next(_conn_ids)
        self.transport = None
        self.loop = asyncio.get_event_loop()
        # the receive buffer, taken from _POOL when bytes arrive and given back once every byte in
        # it is cut into frames: idle connections hold none, a burst of pipelined requests arrives
        # in one read (they then share one fsync round)
        self._buf: bytearray | None = None
        self._view: memoryview | None = None
        self._start = 0             # first byte not yet cut into a frame
        self._end = 0               # end of the received bytes
        self._big: bytearray | None = None     # a large frame's own buffer, being filled
        self._big_got = 0
        self._big_size = 0
        self._pending: collections.deque = collections.deque()
        self._waiting_on = None     # the head answer a done-callback was put on
        self._sending = None        # the task writing a spliced Fetch answer
        self._paused_writing = False
        self._closing = False       # nothing more is read; the pending answers go out, then close
        self._closed = False
        self._busy = False          # in _advance (re-entrancy guard)
        self._max_queued = broker.config["queued.max.requests"]
        self.last_active = self.loop.time()
        self.auth = Authenticator(listener, broker.scram) if listener.sasl else None
        self._sasl_max = min(broker.max_request, broker.config["sasl.server.max.receive.size"])
        self.principal = ANONYMOUS
        self._splice = False
        self._fd = -1               # the socket's descriptor, for os.sendfile (no TLS)
        self.host = "?"
        self.peer_text = "?"
        self.ev: dict = {}
        self._t_open = 0.0

    # -- what the idle reaper and stop() use ------------------------------------------------------
    def idle(self) -> bool:
        """Nothing being answered (a half-received frame does not count: it is reaped too)."""
        return not self._pending and self._sending is None

    def close(self) -> None:
        """Close now: answers still pending are abandoned (as Kafka drops them when a channel
        closes); work already done (appends) stands. A sendfile under way is cancelled first and
        the transport closed once it has stopped (closing under it upsets asyncio's sendfile)."""
        if self.transport is None or self._closed:
            return
        self._abandon()
        if self._sending is not None:
            self._sending.cancel()          # _on_sent closes the transport
        else:
            self.transport.close()

    # -- asyncio callbacks ------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        b = self.broker
        b._conn_states[self.conn_id] = self
        peer = transport.get_extra_info("peername")
        self.host = peer[0] if peer else "?"
        self.peer_text = f"{self.host}:{peer[1]}" if peer and len(peer) > 1 else self.host
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        # record bytes of Fetch answers go out with sendfile where the OS can send them (no TLS)
        self._splice = transport.get_extra_info("sslcontext") is None and sock is not None
        self._fd = sock.fileno() if self._splice else -1
        if b.metrics:
            b.metrics.connection_opened()
        self._t_open = self.loop.time()
        lst = self.listener
        if lst.protocol == "SSL":
            self.principal = tls_principal(transport.get_extra_info("peercert"), lst.principal_mapper)
        self.ev = {"conn": self.conn_id, "peer": self.peer_text, "listener": lst.name, "client_id": None,
                   "principal": self.principal, "requests": 0}
        conn_log.debug("connection %d accepted from %s on listener %s", self.conn_id, self.peer_text, lst.name,
                       extra={"event": {"event": "connection-accepted", **self.ev}})
        if self.principal is None:  # no ssl.principal.mapping.rules rule applies: Kafka fails it too
            log.warning("closing connection %d from %s: no ssl.principal.mapping.rules rule applies to "
                        "its client certificate", self.conn_id, self.host)
            self.close()

    def connection_lost(self, exc) -> None:
        self._abandon()
        self._release_buffer()          # not kept until the cycle collector runs
        self._big = None
        b = self.broker
        b._conn_states.pop(self.conn_id, None)
        if b.metrics:
            b.metrics.connection_closed()
        ev, now = self.ev, self.loop.time()
        conn_log.log(logging.INFO if ev["requests"] else logging.DEBUG,
                     "connection %d closed from %s on listener %s: client id %s, principal %s, %d requests, "
                     "open %.1f s", self.conn_id, self.peer_text, self.listener.name, ev["client_id"],
                     self.principal, ev["requests"], now - self._t_open,
                     extra={"event": {"event": "connection-closed", **ev, "principal": self.principal,
                                      "seconds": round(now - self._t_open, 3)}})

    def _refuse(self) -> None:
        """A protocol error on this connection: the answers already ready go out, the rest are
        abandoned, the connection is closed."""
        if not self._closed:
            self._closing = True
            self._pump()
            self.close()

    def _abandon(self) -> None:
        self._closed = True
        self._closing = True
        while self._pending:
            item = self._pending.popleft()
            if item is not _CLOSE and isinstance(item[0], asyncio.Future):
                item[0].cancel()

    def pause_writing(self) -> None:
        self._paused_writing = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._paused_writing = False
        self._advance()

    def eof_received(self):
        return False                # close the transport

    def get_buffer(self, sizehint: int):
        if self._big is not None:
            if self._big_got == len(self._big):     # grows as bytes arrive, never ahead of them
                grown = self._big_buffer(self._big_got, 2 * len(self._big))
                grown[:self._big_got] = self._big
                self._big = grown
            return memoryview(self._big)[self._big_got:]
        if self._buf is None:
            if _POOL:
                self._buf, self._view = _POOL.pop()
            else:
                self._buf = bytearray(RECV_BUFFER)
                self._view = memoryview(self._buf)
        elif self._end == len(self._buf):
            self._make_room()
        return self._view[self._end:]

    def _make_room(self) -> None:
        """Move the bytes not yet cut into frames to the front of the buffer (a copy first: the
        regions may overlap); with none cut yet, a buffer twice the size (frames waiting for room in
        the queue while the TLS layer still delivers)."""
        n = self._end - self._start
        rest = self._view[self._start:self._end].tobytes()
        if self._start == 0 and n:
            self._buf = bytearray(2 * len(self._buf))
            self._view = memoryview(self._buf)
        self._buf[:n] = rest
        self._start, self._end = 0, n

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:           # read and dropped: unread bytes would turn the close into a reset
            self._big = None
            self._start = self._end = 0
            return
        self.last_active = self.loop.time()
        if self._big is not None:
            self._big_got += nbytes
            size = self._big_size
            if self._big_got == size:
                payload, self._big = self._big, None      # exactly the frame's size by now
                self._on_frame(payload)
                if size <= BIG_POOL_FRAME:         # reused once nothing refers to it any more
                    if len(_BIG_POOL) == _BIG_POOL_MAX:
                        del _BIG_POOL[0]
                    _BIG_POOL.append(payload)
        else:
            self._end += nbytes
        self._advance()

    # -- reading ----------------------------------------------------------------------------------
    def _can_take(self) -> bool:
        return not self._closing and len(self._pending) < self._max_queued

    def _parse(self) -> None:
        """Dispatch every complete frame in the buffer while there is room in the queue."""
        view, buf = self._view, self._buf
        if buf is None:
            return
        while self._can_take() and self._big is None:
            start, end = self._start, self._end
            if end - start < 4:
                break
            auth = self.auth
            limit = self.broker.max_request if auth is None or auth.complete else self._sasl_max
            try:
                size = frame_size(buf[start:start + 4], limit)
            except FrameTooLargeError as e:
                log.warning("closing connection %d from %s: request of %d bytes exceeds "
                            "socket.request.max.bytes=%d", self.conn_id, self.host, e.size, e.limit)
                self._refuse()
                return
            except DecodeError as e:
                log.warning("closing connection %d from %s: malformed frame: %s", self.conn_id, self.host, e)
                self._refuse()
                return
            body = start + 4
            if end - body >= size:
                self._start = body + size
                self._on_frame(view[body:body + size])
                # its answer goes out now if it is ready, before the next frame is worked on: a
                # pipelining client (5 Produce requests in flight) gets each answer while the broker
                # works on the rest, so the two overlap instead of going in lockstep rounds
                self._pump()
                continue
            if size > len(buf) // 2:        # received into a buffer of its own, no second copy
                got = end - body
                # allocated as the bytes come (a size prefix alone must not cost memory)
                self._big_size = size
                self._big = self._big_buffer(got, max(2 * got, len(buf)))
                self._big[:got] = view[body:end]
                self._big_got = got
                self._start = self._end = 0
            elif body + size > len(buf):    # room for the rest of this frame
                self._make_room()
            break
        if self._start == self._end:
            self._start = self._end = 0
            self._release_buffer()
        elif self._big is None and self._end - self._start <= PARTIAL_MOVE and len(self._buf) == RECV_BUFFER:
            self._keep_partial()

    def _big_buffer(self, got: int, step: int) -> bytearray:
        """The next buffer of a large frame holding `got` bytes so far: the frame's whole size once
        at least 1/BIG_WHOLE_FRACTION of it has arrived (or it is at most `step` bytes), else `step`
        bytes. Memory stays bounded by the bytes received (at most BIG_WHOLE_FRACTION times them),
        and a frame arriving at full speed is allocated once, its first bytes copied once. A
        whole-frame buffer comes from _BIG_POOL when one there is free and fits."""
        size = self._big_size
        if got * BIG_WHOLE_FRACTION < size and step < size:
            return bytearray(step)
        pool = _BIG_POOL
        for i in range(len(pool)):
            buf = pool[i]
            # three references: the pool's, `buf` and getrefcount's argument; a view of the buffer
            # kept by a handler or the log (until its write or fsync round is done) holds another
            if sys.getrefcount(buf) == 3 and size < buf.__sizeof__() - _BYTEARRAY_HEAD <= 2 * size:
                del pool[i]
                n = len(buf)        # resized within its allocation: CPython moves nothing, no new pages
                if n > size:
                    del buf[size:]
                elif n < size:
                    buf += bytes(size - n)
                return buf
        return bytearray(size)

    def _keep_partial(self) -> None:
        """The few bytes of a frame still arriving move to a small buffer of their own and the
        receive buffer goes back to the pool: a slow sender (a byte a second) holds SMALL_BUFFER
        bytes, not RECV_BUFFER, while its frame comes in (it grows as _make_room doubles it)."""
        rest = self._view[self._start:self._end].tobytes()
        self._release_buffer()
        self._buf = bytearray(SMALL_BUFFER)
        self._view = memoryview(self._buf)
        self._buf[:len(rest)] = rest
        self._start, self._end = 0, len(rest)

    def _release_buffer(self) -> None:
        if self._buf is not None and len(self._buf) == RECV_BUFFER and len(_POOL) < _POOL_MAX:
            _POOL.append((self._buf, self._view))
        self._buf = self._view = None

    def _update_reading(self) -> None:
        """Read only while the queue has room and the client takes its answers (back-pressure).
        Not touched while sendfile runs (the loop pauses reading for it and restores it)."""
        t = self.transport
        if self._closed or self._sending is not None or t is None or t.is_closing():
            return
        want = self._closing or (not self._paused_writing and self._can_take())
        if want != t.is_reading():
            if want:
                t.resume_reading()
            else:
                t.pause_reading()

    def _advance(self) -> None:
        """Cut frames, write the answers that are ready; again while writing made room for frames
        already received."""
        if self._busy:
            return
        self._busy = True
        try:
            while not self._closed:
                self._parse()
                before = len(self._pending)
                self._pump()
                if (len(self._pending) == before or self._big is not None
                        or self._end - self._start < 4 or not self._can_take()):
                    break
        finally:
            self._busy = False
        self._update_reading()

    def _on_frame(self, payload) -> None:
        """One request: decode it and queue its answer (or what closes the connection). The
        payload is writable: the Produce path patches a batch's BaseOffset and PartitionLeaderEpoch
        in it and writes it to the log without copying it again. A memoryview of the receive
        buffer serves the common Produce request, which is done with it before this returns
        (produce_one: appended, answered from a new frame); every other request gets the frame's
        own copy (a bytearray: handlers and answers may keep the request past this call)."""
        t0 = time.perf_counter()
        size = len(payload)
        auth, pending = self.auth, self._pending
        cid, host = self.conn_id, self.host
        broker = self.broker
        if auth is None and size > 8 and not payload[1] and not payload[0] and broker.faults is None \
                and broker.acls is None:
            # the common Produce request (one partition, no transactional id): read, appended and
            # answered without the request's and answer's objects (handlers/produce.produce_one)
            got = read_one_partition(payload)
            if got is not None:
                result = produce_one(broker, payload, got)
                if result is not None:
                    self._count_request(got[2])
                    pending.append((result, got[0], got[1], 0, t0, size))
                    return
        if type(payload) is memoryview:
            payload = bytearray(payload)
        if auth is not None and auth.raw:      # SaslHandshake v0: a raw token, no header
            verdict, raw, reason = auth.on_raw_token(bytes(payload))
            if verdict == CLOSE:
                log.info("closing connection %d from %s: SASL authentication failed (%s)", cid, host, reason)
                self._refuse()
                return
            pending.append((raw, 0, 0, 17, t0, size))
            if auth.complete:
                self.principal = auth.principal
            return
        try:
            header, req = decode_request(payload)
        except UnsupportedRequestError as e:
            if e.api_key == 18:
                from kohort.broker.handlers.api_versions import unsupported_version_response
                pending.append((unsupported_version_response(), 0, e.correlation_id, 18, t0, 0))
                return
            log.warning("closing connection %d from %s: unsupported request api_key=%d version=%d",
                        cid, host, e.api_key, e.api_version)
            self._refuse()
            return
        except DecodeError as e:
            log.warning("closing connection %d from %s: malformed request: %s", cid, host, e)
            self._refuse()
            return
        api_key = header.request_api_key
        version = header.request_api_version
        if auth is not None and auth.complete:         # KIP-368 (broker/security.py)
            if api_key == 17 and auth.begin_reauthentication():
                pass                                   # the SASL exchange below, again
            elif api_key != 17 and auth.session_expired():
                log.info("closing connection %d from %s: SASL session expired (KIP-368)", cid, host)
                self._close_after_pending(0)           # answers already due still go out first
                return
        if auth is not None and not auth.complete:
            if api_key == 18 and auth.allows_api_versions():
                auth.on_api_versions()           # answered below like any ApiVersions
            else:
                verdict, resp, reason = auth.on_request(api_key, version, req)
                if verdict == CLOSE:
                    log.warning("closing connection %d from %s: %s before authentication", cid, host, reason)
                    self._close_after_pending(0)
                    return
                pending.append((resp, version, header.correlation_id, api_key, t0, size))
                if verdict == FAIL:
                    log.info("closing connection %d from %s: %s", cid, host, reason)
                    self._close_after_pending(
                        self.broker.config["connection.failed.authentication.delay.ms"] / 1000)
                    return
                if auth.complete:
                    self.principal = auth.principal
                return
        h = HANDLERS.get(api_key)
        if h is None or not (h.min_version <= version <= h.max_version):
            if api_key == 18:
                from kohort.broker.handlers.api_versions import unsupported_version_response
                pending.append((unsupported_version_response(), 0, header.correlation_id, 18, t0, size))
                return
            log.warning("closing connection %d from %s: api_key=%d version=%d not served",
                        cid, host, api_key, version)
            self._refuse()
            return
        self._count_request(header.client_id)
        principal = self.principal
        ctx = RequestContext(self.broker, api_key, version, header.correlation_id, header.client_id,
                             host, cid, principal, self.listener)
        faults = self.broker.faults      # broker/faults.py: None unless a test injects faults
        fault = faults.take(api_key) if faults is not None else None
        if fault is not None and fault.kind != DELAY:
            if fault.kind == DROP:
                log.info("closing connection %d from %s instead of answering api_key=%d (injected fault)",
                         cid, host, api_key)
                self._close_after_pending(0)
            else:
                pending.append((fault.answer(ctx, req), version, header.correlation_id, api_key, t0, size))
            return
        try:
            result = h.fn(ctx, req)
        except Exception:
            log.exception("handler for api_key=%d v%d failed; closing connection %d", api_key, version, cid)
            self._refuse()
            return
        if fault is not None:
            result = fault.later(result)
        # a Future (an acks=all Produce answer waiting for its fsync round) is kept as it is;
        # coroutines become tasks
        if not isinstance(result, asyncio.Future) and inspect.isawaitable(result):
            result = asyncio.ensure_future(result)
        pending.append((result, version, header.correlation_id, api_key, t0, size))

    def _count_request(self, client_id: str | None) -> None:
        """One more request served; the first (and the first after a new principal) is logged."""
        ev, principal = self.ev, self.principal
        ev["requests"] += 1
        if ev["requests"] == 1 or ev["principal"] != principal:
            ev["client_id"], ev["principal"] = client_id, principal
            conn_log.info("connection %d %s from %s on listener %s: client id %s, principal %s", self.conn_id,
                          "opened" if ev["requests"] == 1 else "authenticated", self.peer_text,
                          self.listener.name, client_id, principal,
                          extra={"event": {"event": "connection-opened" if ev["requests"] == 1
                                           else "connection-authenticated", **ev}})

    def _close_after_pending(self, delay: float) -> None:
        """Read nothing more; close once the answers queued before now are written (after `delay`
        seconds: connection.failed.authentication.delay.ms)."""
        self._closing = True
        self._pending.append((_CLOSE, delay))

    # -- answering --------------------------------------------------------------------------------
    def _on_ready(self, fut) -> None:
        if self._waiting_on is fut:
            self._waiting_on = None
            self.last_active = self.loop.time()
            self._advance()

    def _on_sent(self, task) -> None:
        self._sending = None
        self.last_active = self.loop.time()
        if self._closed:
            self.transport.close()
            return
        if not task.cancelled() and task.exception() is not None:
            e = task.exception()
            if not isinstance(e, ConnectionError):
                log.error("closing connection %d: writing a fetch answer failed: %r", self.conn_id, e)
            self.close()
            return
        self._advance()

    def _pump(self) -> None:
        """Write every answer that is ready, in request order, up to the first still being worked on."""
        pending, t = self._pending, self.transport
        m = self.broker.metrics
        out = bytearray()
        try:
            while pending and self._sending is None and not self._paused_writing and not self._closed:
                item = pending[0]
                result = item[0]
                if result is _CLOSE:
                    pending.popleft()
                    if out:
                        t.write(out)
                        out = bytearray()
                    if item[1] > 0:
                        self.loop.call_later(item[1], self.close)
                    else:
                        self.close()
                    return
                if isinstance(result, asyncio.Future):
                    if not result.done():
                        if self._waiting_on is not result:
                            self._waiting_on = result
                            result.add_done_callback(self._on_ready)
                        break
                    pending.popleft()
                    if result.cancelled() or result.exception() is not None:
                        if out:
                            t.write(out)
                            out = bytearray()
                        exc = None if result.cancelled() else result.exception()
                        log.error("handler for api_key=%d failed; closing connection %d", item[3], self.conn_id,
                                  exc_info=exc)
                        self.close()
                        return
                    result = result.result()
                else:
                    pending.popleft()
                _, version, corr, api_key, t0, in_bytes = item
                if isinstance(result, bytes):      # a raw SASL token (SaslHandshake v0)
                    out += result
                    continue
                if type(result) is bytearray:      # an answer frame encoded by its handler (produce_one)
                    out += result
                    if m:
                        m.observe(api_key, time.perf_counter() - t0, in_bytes, len(result), version)
                    if len(out) >= COALESCE_BYTES:
                        t.write(out)
                        out = bytearray()
                    continue
                if result is NO_RESPONSE or result is None:
                    if m:
                        m.observe(api_key, time.perf_counter() - t0, in_bytes, 0, version)
                    continue
                if self._splice and api_key == FETCH:
                    data = (encode_fetch_frame(result, version, corr, True)
                            or encode_response_spliced(result, version, corr))
                    if data.splices:
                        if out:
                            t.write(out)
                            out = bytearray()
                        if m:
                            m.observe(api_key, time.perf_counter() - t0, in_bytes, data.frame_size, version)
                        rest = _splice_now(self._fd, t, data)
                        if rest is None:
                            continue
                        self._sending = self.loop.create_task(_send_spliced(self.loop, t, data, *rest))
                        self._sending.add_done_callback(self._on_sent)
                        break
                elif api_key == FETCH:
                    data = (encode_fetch_frame(result, version, corr, False)
                            or encode_response_buffer(result, version, corr))
                else:
                    data = encode_response_buffer(result, version, corr)
                if m:
                    m.observe(api_key, time.perf_counter() - t0, in_bytes, len(data), version)
                if len(data) >= COALESCE_BYTES:
                    if out:
                        t.write(out)
                        out = bytearray()
                    # a view: what the socket does not take at once is copied into the
                    # transport's buffer without first slicing (copying) the rest of the frame
                    t.write(memoryview(data))
                else:
                    out += data
                    if len(out) >= COALESCE_BYTES:
                        t.write(out)
                        out = bytearray()
        finally:
            if out and not self._closed:
                t.write(out)


def _splice_now(fd: int, transport, data) -> tuple[int, int, int] | None:
    """Send a frame whose record sets are FileSlices as far as the socket takes it without waiting:
    the encoded parts through the transport, each slice with os.sendfile straight to the socket while
    the transport has nothing buffered (so the bytes stay in order). Most answers go out whole here
    (the kernel's send buffer takes a 1 MiB slice on loopback): no task, no wait for writability.
    -> None when all of it went out (the slices are closed), else where `_send_spliced` resumes:
    (index of the slice, end of the encoded bytes written, bytes of that slice already sent)."""
    view = memoryview(data)
    prev = 0
    for i, (pos, recs) in enumerate(data.splices):
        transport.write(view[prev:pos])
        prev = pos
        try:
            src = recs.fileno()
        except (AttributeError, OSError):           # not a file descriptor (in-memory storage)
            transport.write(recs.read())
            continue
        if fd < 0 or transport.get_write_buffer_size():
            return i, prev, 0
        sent = 0
        try:
            while sent < recs.size:
                n = os.sendfile(fd, src, recs.position + sent, recs.size - sent)
                if n == 0:          # the file ends early: _send_spliced finds it and ends the connection
                    break
                sent += n
        except OSError:             # would block, or a failure the transport then reports
            pass
        if sent < recs.size:
            return i, prev, sent
    transport.write(view[prev:])
    for _, recs in data.splices:
        recs.close()
    return None


async def _send_spliced(loop, transport, data, first: int = 0, prev: int = 0, done: int = 0) -> None:
    """One frame whose record sets are FileSlices, from where `_splice_now` stopped (slice `first`,
    encoded bytes up to `prev` written, `done` bytes of that slice sent): the encoded parts are
    written, each slice is sent by the OS (loop.sendfile: os.sendfile once the transport's buffer is
    empty). A slice that cannot be sent whole (its file shrank) ends the connection: the frame's
    size prefix already promised those bytes."""
    view = memoryview(data)
    try:
        for pos, recs in data.splices[first:]:
            transport.write(view[prev:pos])
            prev = pos
            try:
                recs.fileno()
            except (AttributeError, OSError):       # not a file descriptor (in-memory storage)
                transport.write(recs.read())
                continue
            left = recs.size - done
            sent = await loop.sendfile(transport, recs, recs.position + done, left, fallback=False)
            if sent != left:
                raise ConnectionError(f"sent {done + sent} of {recs.size} record bytes: the segment shrank")
            done = 0
        transport.write(view[prev:])
    finally:
        for _, recs in data.splices:
            recs.close()
