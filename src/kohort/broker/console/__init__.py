"""The broker's web console, off by default: `kohort broker --console HOST:PORT`
(`console.listener=HOST:PORT`). Topics and partitions with their offsets; groups (classic and KIP-848)
with state, members, assignments, per-partition lag and lag over time; each group's rebalance history
with reasons. Read-only unless `--console-allow-writes`.

* `server.py`  the HTTP server on the broker's event loop and its JSON API; `serve_console(broker, ...)`
* `state.py`   the JSON views, read directly from storage and the group coordinator runtime
* `lag.py`     the lag sampler and its per-group ring buffers
* `static/`    the one page (HTML, JS, CSS; no external resources)
The group events come from kohort.broker.group_events, attached to the coordinator runtime by the console.
"""
from kohort.broker.console.server import Console, serve_console

__all__ = ["Console", "serve_console"]
