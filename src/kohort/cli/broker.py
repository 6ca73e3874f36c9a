"""`kohort broker`: run the embedded single-node Kafka-compatible broker.

    kohort broker [--listen HOST:PORT] [--data-dir DIR] [--config FILE] [--metrics HOST:PORT]
                  [--console HOST:PORT [--console-allow-writes]]

--config is a Kafka .properties file with broker settings and topic defaults by Kafka's names
(num.partitions, log.retention.ms, ...). Its `listeners` (PLAINTEXT/SSL/SASL_PLAINTEXT/SASL_SSL, with
listener.security.protocol.map, ssl.keystore.* PEM, sasl.enabled.mechanisms, sasl.jaas.config; see
broker/security.py) replace --listen; one line per listener is printed before the ready line. Prints `kohort broker ready on HOST:PORT` once accepting
connections; SIGTERM/SIGINT stop it cleanly (storage writes its clean-shutdown marker).
The port is bound before the data directory is touched; a directory another broker holds (its
`.lock`) or a --data-dir that is a file is one line naming it.
"""
from __future__ import annotations

import asyncio
import os
import sys

from kohort.cli.common import add_log_level
from kohort.errors import KohortError

DEFAULT_DATA_DIR = "~/.kohort/data"


def _hostport(s: str, what: str) -> tuple[str, int]:
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise KohortError(f"{what} must be HOST:PORT, got {s!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def run(args) -> int:
    from kohort.broker.config import BrokerConfig, load_properties
    from kohort.broker.server import run_broker
    if args.config and not os.path.isfile(args.config):
        raise KohortError(f"--config {args.config}: no such file")
    props = load_properties(args.config) if args.config else {}
    config = BrokerConfig.from_properties(props)
    for line in config.notices:      # Kafka settings with no meaning for one node: one line each
        print(f"kohort broker: {line}", file=sys.stderr, flush=True)
    listeners = None
    if "listeners" in props:
        if args.listen is not None:
            raise KohortError("--listen and `listeners` in --config both given; use one")
        from kohort.broker.security import build_listeners
        listeners = build_listeners(config)
        controller = {n.strip().upper() for n in props.get("controller.listener.names", "").split(",") if n.strip()}
        for lst in listeners:
            if lst.name in controller:
                print(f"kohort broker: listener {lst.name} ({lst.host}:{lst.port}) not opened: it is a "
                      f"controller listener (controller.listener.names)", file=sys.stderr, flush=True)
        listeners = [lst for lst in listeners if lst.name not in controller]
        if not listeners:
            raise KohortError("listeners: only controller listeners (controller.listener.names); "
                              "add a client listener such as PLAINTEXT://:9092")
    host, port = _hostport(args.listen or "127.0.0.1:9092", "--listen")
    data_dir = args.data_dir
    if data_dir is None:   # Kafka's log.dirs (first entry) / log.dir from --config, else the default
        configured = (config["log.dirs"] or config["log.dir"]).split(",")[0].strip()
        data_dir = configured or DEFAULT_DATA_DIR
    data_dir = os.path.expanduser(data_dir)
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise KohortError(f"--data-dir {data_dir}: exists and is not a directory")
    if args.metrics:
        _hostport(args.metrics, "--metrics")
    for name, addr in (("--console", args.console), ("console.listener", config["console.listener"])):
        if addr:
            _hostport(addr, name)
    if args.console_allow_writes and not (args.console or config["console.listener"]):
        raise KohortError("--console-allow-writes needs --console HOST:PORT")
    try:
        asyncio.run(run_broker(host, port, data_dir, config, metrics_addr=args.metrics, listeners=listeners,
                               console_addr=args.console, console_writes=args.console_allow_writes))
    except OSError as e:
        if e.filename:             # the data directory (or a file in it), not the socket
            raise KohortError(f"cannot start: {e.filename}: {e.strerror}") from None
        raise KohortError(f"cannot start: {e}") from None
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("broker", help="run the embedded Kafka-compatible broker",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", default=None, metavar="HOST:PORT",
                   help="PLAINTEXT address to accept Kafka clients on (default 127.0.0.1:9092; "
                        "`listeners` in --config replaces it)")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="log directory (default: log.dirs from --config, else ~/.kohort/data)")
    p.add_argument("--config", metavar="FILE", help="Kafka .properties file (broker and topic defaults)")
    p.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics on HOST:PORT")
    p.add_argument("--console", metavar="HOST:PORT",
                   help="serve the web console on HOST:PORT (off by default; read-only)")
    p.add_argument("--console-allow-writes", action="store_true",
                   help="let the console reset offsets of empty groups and delete groups")
    add_log_level(p, default="info")
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="log lines as text (default) or JSON lines (one object per line)")
    p.set_defaults(func=run)
