"""Growth curves for the `scale` case (bench/cases/scale.py): one PNG per dimension, one panel per
measured quantity, one line per broker, log-log axes (a straight line's slope is the growth order:
1 = linear). Reads the points the workers appended to bench/out/scale-points.jsonl (one JSON object
per (dimension, broker, size): {"dimension", "column", "size", "rows": {name: value}}); medians when
a point was measured more than once.
"""
from __future__ import annotations

import json
import os
import statistics

TITLES = {"group-classic": "one group of N members, classic protocol (JoinGroup/SyncGroup)",
          "group-consumer": "one group of N members, consumer protocol (KIP-848)",
          "partitions": "one topic of P partitions", "connections": "C open client connections"}
XLABEL = {"group-classic": "members", "group-consumer": "members", "partitions": "partitions",
          "connections": "connections"}


def load(points_path: str) -> dict:
    """{dimension: {row: {column: {size: median value}}}}"""
    raw: dict = {}
    with open(points_path) as fh:
        for line in fh:
            if not line.strip():
                continue
            p = json.loads(line)
            for row, v in p["rows"].items():
                raw.setdefault(p["dimension"], {}).setdefault(row, {}).setdefault(
                    p["column"], {}).setdefault(p["size"], []).append(float(v))
    return {d: {r: {c: {s: statistics.median(vs) for s, vs in sizes.items()} for c, sizes in cols.items()}
                for r, cols in rows.items()} for d, rows in raw.items()}


def _unit(row: str) -> str:
    if "RSS" in row:
        return "MB"
    if "ms/s" in row:
        return "CPU ms per s"
    if "CPU" in row:
        return "CPU ms"
    return "ms"


def plot_scale(points_path: str, out_dir: str) -> list[str]:
    """Write out_dir/scale-<dimension>.png for every dimension with points; -> the paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker
    data = load(points_path)
    paths = []
    for dim, rows in data.items():
        names = list(rows)
        cols = 3 if len(names) > 4 else 2
        nrows = (len(names) + cols - 1) // cols
        fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
        for ax, row in zip(axes.flat, names):
            for column, pts in sorted(rows[row].items()):
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], marker="o", label=column)
            ax.set_xscale("log")
            if all(v > 0 for pts in rows[row].values() for v in pts.values()):
                ax.set_yscale("log")
            plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")     # plain numbers, not 10^x
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            ax.set_xticks(sorted({x for pts in rows[row].values() for x in pts}))
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)                      # short spans have no decade tick
            ax.yaxis.set_tick_params(which="minor", labelsize=7)
            ax.set_title(row, fontsize=10)
            ax.set_xlabel(XLABEL.get(dim, "size"))
            ax.set_ylabel(_unit(row))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        for ax in list(axes.flat)[len(names):]:
            ax.set_visible(False)
        fig.suptitle(f"scale: {TITLES.get(dim, dim)}")
        fig.tight_layout()
        path = os.path.join(out_dir, f"scale-{dim}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths
