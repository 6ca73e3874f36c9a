"""The console's HTTP server: a small HTTP/1.1 server on the broker's own asyncio loop (standard
library only), one request per connection (`Connection: close`).

    GET  /                         the page (static/index.html; console.js, console.css beside it)
    GET  /api/cluster              broker, listeners, console settings
    GET  /api/topics               topics and partitions with their offsets
    GET  /api/groups               groups: type, state, generation / epoch, members, total lag
    GET  /api/group?id=G           one group: members and assignments, offsets and lag, lag history,
                                   rebalance history (404 when unknown)
    POST /api/group/reset-offsets?id=G   {"to": "earliest"|"latest"|"offset", "offset": N, "topic": T?}
    POST /api/group/delete?id=G

Read-only unless the broker runs with `--console-allow-writes` (`console.allow.writes=true`): the two
POSTs answer 403 otherwise. A write must carry `Content-Type: application/json` and, when the browser
sends one, an Origin naming this console's own host (a cross-site page can do neither without a CORS
preflight, which is never granted). Offsets are reset only for a group without members, as
kafka-consumer-groups.sh --reset-offsets requires; writes go through the group coordinator like an
admin client's OffsetCommit / DeleteGroups and are answered once stored.

`Console` owns the pieces: the coordinator runtime's GroupEvents recorder it reads
(broker/group_events.py; the runtime always keeps one: the broker's log and metrics read it too), the
LagHistory sampler task (console/lag.py) and the server socket; all are closed with the broker.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import urllib.parse

import kohort.broker.console.state as state
from kohort.broker.console.lag import LagHistory
from kohort.broker.group_events import GroupEvents
from kohort.errors import ErrorCode

log = logging.getLogger("kohort.broker.console")

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
MAX_LINE = 8192
MAX_HEADERS = 100
MAX_BODY = 64 * 1024
READ_TIMEOUT = 10.0
SECURITY_HEADERS = (
    "Content-Security-Policy: default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\nCache-Control: no-store\r\n")
REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
           409: "Conflict", 413: "Payload Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Console:
    def __init__(self, broker, *, allow_writes: bool = False, lag_sample_ms: int = 5000) -> None:
        self.broker = broker
        self.allow_writes = allow_writes
        self.lag = LagHistory(lag_sample_ms)
        self.events = GroupEvents()
        self.server: asyncio.base_events.Server | None = None
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        rt = getattr(self.broker, "coordinator", None)
        if rt is not None:
            self.events = rt.events         # the runtime keeps one history (logs and metrics read it too)
        self.server = await asyncio.start_server(self._handle, host, port, reuse_address=True,
                                                 limit=MAX_LINE * 2)
        self.host, self.port = host, self.server.sockets[0].getsockname()[1]
        self.broker.spawn(self.lag.run(self.broker))
        self.broker._closers.append(self.close)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None

    # -- HTTP ------------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                method, target, headers, body = await asyncio.wait_for(self._read_request(reader), READ_TIMEOUT)
            except HttpError as e:
                await self._send_json(writer, e.status, {"error": e.message})
                return
            try:
                status, ctype, payload = await self._route(method, target, headers, body)
            except HttpError as e:
                status, ctype, payload = e.status, "application/json", _json({"error": e.message})
            except Exception:   # noqa: BLE001 - one failed page must not take the broker down
                log.exception("console: %s %s failed", method, target)
                status, ctype, payload = 500, "application/json", _json({"error": "internal error; see the broker log"})
            await self._send(writer, status, ctype, payload, head_only=method == "HEAD")
        except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader):
        try:
            line = await reader.readline()
        except (asyncio.LimitOverrunError, ValueError):
            raise HttpError(400, "request line too long") from None
        if not line:
            raise ConnectionError("closed")
        parts = line.decode("latin-1").rstrip("\r\n").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HttpError(400, "malformed request line")
        method, target = parts[0], parts[1]
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            try:
                h = await reader.readline()
            except (asyncio.LimitOverrunError, ValueError):
                raise HttpError(400, "header line too long") from None
            if h in (b"\r\n", b"\n", b""):
                break
            name, sep, value = h.decode("latin-1").partition(":")
            if not sep:
                raise HttpError(400, "malformed header")
            headers[name.strip().lower()] = value.strip()
        else:
            raise HttpError(400, "too many headers")
        body = b""
        if "transfer-encoding" in headers:
            raise HttpError(400, "chunked bodies are not accepted; send Content-Length")
        length = headers.get("content-length", "0")
        if not length.isdigit():
            raise HttpError(400, "bad Content-Length")
        if int(length) > MAX_BODY:
            raise HttpError(413, f"request body over {MAX_BODY} bytes")
        if int(length):
            body = await reader.readexactly(int(length))
        return method, target, headers, body

    async def _send(self, writer, status: int, ctype: str, payload: bytes, head_only: bool = False) -> None:
        head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(payload)}\r\n{SECURITY_HEADERS}Connection: close\r\n\r\n")
        writer.write(head.encode("latin-1") + (b"" if head_only else payload))
        await writer.drain()

    async def _send_json(self, writer, status: int, obj) -> None:
        await self._send(writer, status, "application/json", _json(obj))

    # -- routes ----------------------------------------------------------------------------------
    async def _route(self, method: str, target: str, headers: dict, body: bytes):
        url = urllib.parse.urlsplit(target)
        path = url.path
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        if method in ("GET", "HEAD"):
            if path in ("/", "/index.html"):
                return self._static("index.html")
            if path.startswith("/static/"):
                return self._static(path[len("/static/"):])
            if path == "/api/cluster":
                return _ok(state.cluster(self.broker, self))
            if path == "/api/topics":
                return _ok(state.topics(self.broker))
            if path == "/api/groups":
                return _ok(state.groups(self.broker, self))
            if path == "/api/group":
                gid = _group_id(query)
                d = state.group(self.broker, gid, self)
                if d is None:
                    raise HttpError(404, f"no group {gid!r}")
                return _ok(d)
            raise HttpError(404, f"no such page: {path}")
        if method == "POST":
            if path not in ("/api/group/reset-offsets", "/api/group/delete"):
                raise HttpError(404, f"no such action: {path}")
            self._check_write(headers)
            gid = _group_id(query)
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                raise HttpError(400, "the body is not JSON") from None
            if not isinstance(req, dict):
                raise HttpError(400, "the body must be a JSON object")
            if path == "/api/group/delete":
                return _ok(await self._delete_group(gid))
            return _ok(await self._reset_offsets(gid, req))
        raise HttpError(405, f"method {method} not allowed")

    def _static(self, name: str):
        if "/" in name or "\\" in name or name.startswith(".") or not name:
            raise HttpError(404, "no such file")
        path = os.path.join(STATIC_DIR, name)
        ext = os.path.splitext(name)[1]
        if ext not in CONTENT_TYPES or not os.path.isfile(path):
            raise HttpError(404, f"no such file: {name}")
        with open(path, "rb") as fh:
            return 200, CONTENT_TYPES[ext], fh.read()

    def _check_write(self, headers: dict) -> None:
        if not self.allow_writes:
            raise HttpError(403, "the console is read-only: start the broker with --console-allow-writes "
                                 "(console.allow.writes=true) to reset offsets or delete groups here")
        if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise HttpError(403, "writes must be sent as application/json")
        origin = headers.get("origin")
        if origin is not None and urllib.parse.urlsplit(origin).netloc != headers.get("host"):
            raise HttpError(403, f"cross-origin write refused (Origin {origin})")

    # -- writes ----------------------------------------------------------------------------------
    def _runtime(self):
        rt = getattr(self.broker, "coordinator", None)
        if rt is None or not rt.groups.active:
            raise HttpError(503, "the group coordinator is not serving (still loading?)")
        return rt

    async def _delete_group(self, gid: str) -> dict:
        rt = self._runtime()
        s = state.group_state(self.broker, gid)
        if s is None:
            raise HttpError(404, f"no group {gid!r}")
        res = await rt.delete_groups([gid])
        code = dict(res.results).get(gid, 0)
        if code:
            raise HttpError(409, f"cannot delete group {gid!r}: {ErrorCode(code).name}")
        return {"group_id": gid, "deleted": True}

    async def _reset_offsets(self, gid: str, req: dict) -> dict:
        from kohort.broker.coordinator.model import CommitPartition, OffsetCommitParams
        rt = self._runtime()
        to = req.get("to")
        if to not in ("earliest", "latest", "offset"):
            raise HttpError(400, "\"to\" must be earliest, latest or offset")
        value = req.get("offset")
        if to == "offset" and (not isinstance(value, int) or isinstance(value, bool)):
            raise HttpError(400, "reset to offset needs an integer \"offset\"")
        topic = req.get("topic")
        s = state.group_state(self.broker, gid)
        if s is None:
            raise HttpError(404, f"no group {gid!r}")
        if s != "Empty":
            raise HttpError(409, f"group {gid!r} is {s}: offsets can only be reset while it has no "
                                 f"members (stop its consumers first), as kafka-consumer-groups.sh requires")
        rows = [r for r in state.group_offsets(self.broker, gid) if topic in (None, r["topic"])]
        storage = self.broker.storage
        plan = []
        for r in rows:
            if not storage.has_topic(r["topic"]):
                continue
            lg = storage.log(r["topic"], r["partition"])
            lo, hi = lg.log_start_offset, lg.high_watermark
            new = lo if to == "earliest" else hi if to == "latest" else value
            plan.append((r["topic"], r["partition"], r["committed_offset"], min(max(new, lo), hi)))
        if not plan:
            raise HttpError(400, f"group {gid!r} has no committed offsets" + (f" on {topic!r}" if topic else ""))
        by_topic: dict[str, list] = {}
        for t, p, _, new in plan:
            by_topic.setdefault(t, []).append(CommitPartition(p, new))
        res = await rt.offset_commit(OffsetCommitParams(
            gid, tuple((t, tuple(ps)) for t, ps in sorted(by_topic.items()))))
        errors = {(t, pr.partition_index): pr.error_code for t, prs in res.topics for pr in prs}
        out = []
        for t, p, old, new in plan:
            code = errors.get((t, p), 0)
            out.append({"topic": t, "partition": p, "old_offset": old, "new_offset": new,
                        "error": ErrorCode(code).name if code else None})
        if any(o["error"] for o in out):
            raise HttpError(409, "reset failed: " + ", ".join(
                f"{o['topic']}-{o['partition']}: {o['error']}" for o in out if o["error"]))
        return {"group_id": gid, "partitions": out}


def _group_id(query: dict) -> str:
    ids = query.get("id")
    if not ids or not ids[0]:
        raise HttpError(400, "missing ?id=GROUP")
    return ids[0]


def _json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _ok(obj):
    return 200, "application/json", _json(obj)


async def serve_console(broker, host: str, port: int, *, allow_writes: bool = False,
                        lag_sample_ms: int = 5000) -> Console:
    """Start the console on host:port (port 0: any free one, then `broker.console.port`) for `broker`, which
    must be started; it stops with the broker."""
    c = Console(broker, allow_writes=allow_writes, lag_sample_ms=lag_sample_ms)
    await c.start(host, port)
    broker.console = c
    return c
