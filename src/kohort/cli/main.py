"""Entry point of the `kohort` console script.

Each subcommand lives in its own module of this package (`broker.py`, `topics.py`, ...) exposing
`register(subparsers)` which adds its parser and sets `func`; this module discovers them.
A KohortError reaching the top is printed as one line, never a traceback.
"""
import argparse
import importlib
import pkgutil
import sys

from kohort import __version__

ORDER = ["broker", "produce", "consume", "topics", "groups", "pipeline", "demo"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kohort", description="The Kafka consumer-group system in Python")
    p.add_argument("--version", action="version", version=f"kohort {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    import kohort.cli as pkg
    names = [m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name not in ("main", "common")
             and not m.name.startswith("_")]
    names.sort(key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    for name in names:
        mod = importlib.import_module(f"kohort.cli.{name}")
        if hasattr(mod, "register"):
            mod.register(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from kohort.errors import KohortError
    try:
        return args.func(args) or 0
    except KohortError as e:
        print(f"kohort {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
