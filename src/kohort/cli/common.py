"""Shared pieces of the `kohort` subcommands: connection options, aligned tables, progress bars, --json.

* `add_connection_args(parser)`: `-b/--bootstrap-server` (default $KOHORT_BOOTSTRAP or localhost:9092),
  `-X key=value` (any Kafka client setting, as kcat), `--timeout SECONDS`, `--json`.
* `client_config(args, extra)` → the dict for Producer/Admin/Consumer; `admin_client(args)` → an Admin.
* `table(headers, rows)` → text with columns aligned (numbers right-aligned), "-" for None.
* `Progress`: a one-line progress bar on stderr when it is a terminal (`--progress` forces it),
  redrawn at most 10 times a second; silent otherwise.
* `print_json(obj)`: one JSON document on stdout (named tuples become objects).
* `add_log_level(parser)` (every subcommand has `--log-level`), `setup_logging(level, fmt)`: text or JSON
  lines (`JsonLogFormatter`) on stderr; `--command-config FILE` (a .properties file of client settings).
* `positive_number`, `non_negative_number`, `positive_int`: argparse types for seconds, rates and counts
  (a NaN, negative or zero value is a usage error naming the option).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time

from kohort.errors import KohortError

DEFAULT_BOOTSTRAP = "localhost:9092"


def default_bootstrap() -> str:
    return os.environ.get("KOHORT_BOOTSTRAP") or DEFAULT_BOOTSTRAP


def _number(text: str, kind, minimum, inclusive: bool):
    try:
        v = kind(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a {'whole ' if kind is int else ''}number, got {text!r}")
    if v < minimum or (v == minimum and not inclusive):
        raise argparse.ArgumentTypeError(f"must be {'at least' if inclusive else 'above'} {minimum}, got {text}")
    return v


def positive_number(text: str) -> float:
    return _number(text, float, 0, False)


def non_negative_number(text: str) -> float:
    return _number(text, float, 0, True)


def positive_int(text: str) -> int:
    return _number(text, int, 1, True)


def add_connection_args(p, timeout: float = 10.0) -> None:
    p.add_argument("-b", "--bootstrap-server", dest="bootstrap", default=None, metavar="HOST:PORT[,...]",
                   help=f"broker(s) to bootstrap from (default $KOHORT_BOOTSTRAP or {DEFAULT_BOOTSTRAP})")
    p.add_argument("-X", dest="config", action="append", default=[], metavar="KEY=VALUE",
                   help="any Kafka client setting, e.g. -X linger.ms=20 (repeatable)")
    p.add_argument("--timeout", type=positive_number, default=timeout, metavar="SECONDS",
                   help=f"give up waiting for the cluster after this long (default {timeout:g})")
    p.add_argument("--command-config", metavar="FILE",
                   help="a .properties file of client settings (Kafka tools' --command-config; -X wins)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")
    add_log_level(p)


LOG_LEVELS = ("debug", "info", "warning", "error")


def add_log_level(p, default: str = "warning") -> None:
    """`--log-level` (every subcommand): what kohort's loggers print on stderr."""
    p.add_argument("--log-level", default=default, choices=LOG_LEVELS,
                   help=f"log messages of this level and above on stderr (default {default})")


def setup_logging(level: str, fmt: str = "text") -> None:
    """kohort's loggers (`kohort.*`) print on stderr from `level` up: `text` lines (time level logger:
    message) or `json` lines (`JsonLogFormatter`). Only the `kohort` logger is configured (one handler,
    replaced when called again), so an application's or pytest's root handlers stay as they are."""
    log = logging.getLogger("kohort")
    for h in [h for h in log.handlers if getattr(h, "_kohort_cli", False)]:
        log.removeHandler(h)
    handler = _Stderr()
    handler._kohort_cli = True
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    lv = getattr(logging, level.upper(), logging.INFO)
    handler.setLevel(lv)
    log.addHandler(handler)
    if lv < log.getEffectiveLevel():      # let more through; never silence what others asked for
        log.setLevel(lv)


class _Stderr(logging.StreamHandler):
    """A StreamHandler writing to whatever sys.stderr is at the time of the record (so a command run
    in-process with stderr redirected, then restored, never writes to a closed stream)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


class JsonLogFormatter(logging.Formatter):
    """One JSON object per log record (JSON lines): ts, level, logger, msg, and the fields a record
    carries as `extra={"event": {...}}` (group events, connections) merged in as they are."""

    def format(self, record) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name,
               "msg": record.getMessage()}
        ev = getattr(record, "event", None)
        if isinstance(ev, dict):
            out.update({k: v for k, v in ev.items() if k not in out})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def parse_kv(items, what: str = "-X") -> dict:
    out = {}
    for item in items or ():
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise KohortError(f"{what} expects KEY=VALUE, got {item!r}")
        out[k.strip()] = v
    return out


def client_config(args, extra: dict | None = None) -> dict:
    cfg = {"bootstrap.servers": args.bootstrap or default_bootstrap(),
           "client.id": f"kohort-cli-{args.command}"}
    t_ms = int(args.timeout * 1000)
    cfg["default.api.timeout.ms"] = t_ms
    cfg["request.timeout.ms"] = max(1000, min(30000, t_ms))
    cfg.update(extra or {})
    if getattr(args, "command_config", None):
        from kohort.broker.config import load_properties
        if not os.path.isfile(args.command_config):
            raise KohortError(f"--command-config {args.command_config}: no such file")
        cfg.update(load_properties(args.command_config))
    cfg.update(parse_kv(args.config))
    return cfg


def admin_client(args, *, admin_keys_only: bool = False):
    """An Admin for the command's connection options. With `admin_keys_only`, -X settings that are
    not admin settings (a consumer's, say) are left out instead of being an error."""
    from kohort.client.admin import Admin
    from kohort.client.config import ROLES
    cfg = client_config(args)
    if admin_keys_only:
        cfg = {k: v for k, v in cfg.items() if k in ROLES["admin"]}
    return Admin(cfg)


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def table(headers, rows) -> str:
    """Columns aligned; numeric columns right-aligned (as kafka-consumer-groups.sh prints them)."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [len(h) for h in headers]
    numeric = [True] * len(headers)
    for r, raw in zip(cells, rows):
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
            if raw[i] is not None and not isinstance(raw[i], int):
                numeric[i] = False
    lines = []
    for r in [list(headers)] + cells:
        parts = [c.rjust(widths[i]) if numeric[i] and r is not headers else c.ljust(widths[i])
                 for i, c in enumerate(r)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _jsonable(o):
    if hasattr(o, "_asdict"):
        return {k: _jsonable(v) for k, v in o._asdict().items()}
    if isinstance(o, dict):
        return {(str(k) if not isinstance(k, str) else k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple, set)):
        return [_jsonable(v) for v in o]
    if isinstance(o, (bytes, bytearray)):
        return o.decode("utf-8", "replace")
    if isinstance(o, BaseException):
        return str(o)
    return o


def print_json(obj, out=None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(_jsonable(obj), sort_keys=False) + "\n")
    out.flush()


class Progress:
    """`Progress(total, label)`; `.update(done)`; `.close()`. Draws only on a terminal (or force=True)."""

    def __init__(self, total: int | None, label: str = "", unit: str = "records", force: bool = False,
                 stream=None):
        self.stream = stream or sys.stderr
        self.enabled = force or (hasattr(self.stream, "isatty") and self.stream.isatty())
        self.total = total
        self.label = label
        self.unit = unit
        self.start = time.monotonic()
        self._last = 0.0
        self.done = 0
        self._drawn = False

    def update(self, done: int, force: bool = False) -> None:
        self.done = done
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        self.stream.write("\r" + self.render(now) + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def render(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        head = f"{self.label} " if self.label else ""
        if self.total:
            frac = min(1.0, self.done / self.total)
            width = 30
            fill = int(frac * width)
            bar = "#" * fill + "." * (width - fill)
            return f"{head}[{bar}] {frac * 100:5.1f}% {self.done}/{self.total} {self.unit} {rate:,.0f}/s"
        return f"{head}{self.done} {self.unit} {rate:,.0f}/s"

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.update(self.done, force=True)
            self.stream.write("\n")
            self.stream.flush()


__all__ = ["DEFAULT_BOOTSTRAP", "JsonLogFormatter", "Progress", "add_connection_args", "add_log_level", "admin_client", "client_config", "default_bootstrap",
           "non_negative_number", "parse_kv", "positive_int", "positive_number", "print_json", "setup_logging", "table"]
