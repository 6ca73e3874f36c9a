"""Entry point of the `kohort` console script.

Each subcommand lives in its own module of this package (`broker.py`, `topics.py`, ...) exposing
`register(subparsers)` which adds its parser and sets `func`; this module discovers them.
A KohortError reaching the top is printed as one line, never a traceback. A reader that goes away
(`kohort consume ... | head -3`) ends any command quietly with status 141 (128 + SIGPIPE, what a
shell reports for a tool killed by SIGPIPE): stdout is pointed at /dev/null so the interpreter's
final flush cannot raise again (the pattern of Python's `signal` documentation, "Note on SIGPIPE").
"""
import argparse
import importlib
import os
import pkgutil
import select
import sys

from kohort.version import __version__

ORDER = ["broker", "produce", "consume", "topics", "groups", "share_groups", "transactions", "pipeline", "demo"]


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


def parse(parser, argv=None) -> argparse.Namespace:
    """argv → arguments; kafka-consumer-groups.sh's and kafka-share-groups.sh's spelling (`groups
    --describe --group G`, `share-groups --list`) is turned into kohort's first (cli/groups.py kafka_style)."""
    from kohort.errors import KohortError
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["groups"], ["share-groups"]):
        from kohort.cli.groups import kafka_style
        from kohort.cli.share_groups import ACTIONS as SHARE_ACTIONS
        try:
            argv = argv[:1] + (kafka_style(argv[1:]) if argv[0] == "groups" else
                               kafka_style(argv[1:], SHARE_ACTIONS))
        except KohortError as e:
            parser.error(str(e))
    return parser.parse_args(argv)


def main(argv=None) -> int:
    parser = build_parser()
    from kohort.errors import KohortError
    args = parse(parser, argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    if getattr(args, "log_level", None):
        from kohort.cli.common import setup_logging
        setup_logging(args.log_level, getattr(args, "log_format", "text"))
    try:
        rc = args.func(args) or 0
        sys.stdout.flush()            # a closed pipe shows up here rather than at interpreter exit
        return rc
    except BrokenPipeError as e:
        if not _stdout_gone():
            print(f"kohort {args.command}: connection broken: {e}", file=sys.stderr)
            return 1
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KohortError as e:
        print(f"kohort {args.command}: {e}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as e:
        if e.name not in ("pyspark", "pyarrow"):        # the spark extra is optional; the rest is a bug
            raise
        print(f"kohort {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


EXIT_BROKEN_PIPE = 141


def _stdout_gone() -> bool:
    """True when stdout is a pipe or socket whose reader has gone (a BrokenPipeError can also come
    from a socket to a broker, which is a different story)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    p = select.poll()
    p.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
