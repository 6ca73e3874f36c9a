"""Entry point of the `kohort` console script: parses the subcommand and dispatches."""
import argparse
import sys

from kohort import __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kohort", description="The Kafka consumer-group system in Python")
    p.add_argument("--version", action="version", version=f"kohort {__version__}")
    p.add_subparsers(dest="command", metavar="COMMAND")
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
