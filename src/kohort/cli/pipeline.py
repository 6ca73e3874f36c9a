"""`kohort pipeline`: run the ready Spark pipeline (JSON events -> windowed aggregates -> Parquet).

    kohort pipeline --config pipeline.toml [--master URL] [-b HOST:PORT] [--duration SECONDS]

The config is described in kohort.spark.pipeline (example: examples/pipeline.toml). The query is
checkpointed: stop it (Ctrl-C) or kill it and run the same command again to continue exactly where it
was. While it runs, one line per micro-batch shows rows, rows/s and the lag behind the topic's end.
"""
from __future__ import annotations

import sys

from kohort.cli.common import positive_number


def run(args) -> int:
    from kohort.spark.pipeline import load_pipeline_config, run as run_pipeline
    cfg = load_pipeline_config(args.config, bootstrap_servers=args.bootstrap, master=args.master)
    print(f"kohort pipeline: {cfg.topic} @ {cfg.bootstrap_servers} -> {cfg.path} "
          f"(checkpoint {cfg.checkpoint}, master {cfg.master})", flush=True)
    run_pipeline(cfg, duration_s=args.duration, out=lambda line: print(line, flush=True))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("pipeline", help="run the Spark pipeline from a TOML config",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, metavar="FILE", help="pipeline TOML file")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master (default: [spark] master of the config, else local[2])")
    p.add_argument("-b", "--bootstrap-server", dest="bootstrap", default=None, metavar="HOST:PORT",
                   help="override [source] bootstrap_servers")
    p.add_argument("--duration", type=positive_number, default=None, metavar="SECONDS",
                   help="stop after this long (default: run until interrupted)")
    from kohort.cli.common import add_log_level
    add_log_level(p)
    p.set_defaults(func=run)


if __name__ == "__main__":      # pragma: no cover
    sys.exit(1)
