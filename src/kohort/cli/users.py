"""`kohort users`: SCRAM credentials of a kohort broker (like kafka-configs.sh --entity-type users).

    kohort users add    --data-dir DIR --user NAME [--mechanism SCRAM-SHA-256] [--iterations 4096]
    kohort users remove --data-dir DIR --user NAME [--mechanism SCRAM-SHA-256]
    kohort users list   --data-dir DIR

The password is read from stdin (one line), never from the command line. The credential (salt,
StoredKey, ServerKey, iterations) goes to `<DIR>/scram-credentials.json`, which a running broker rereads
at the next login; the password itself is not stored.
"""
from __future__ import annotations

import os
import sys

from kohort.errors import KohortError


def _store(args):
    from kohort.broker.security import ScramStore
    d = os.path.expanduser(args.data_dir)
    if not os.path.isdir(d):
        raise KohortError(f"--data-dir {d}: not a directory")
    return ScramStore(d)


def run(args) -> int:
    from kohort.protocol.sasl import make_credential
    store = _store(args)
    if args.action == "add":
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if not password:
            raise KohortError("no password on stdin")
        store.upsert(args.user, args.mechanism, make_credential(args.mechanism, password, args.iterations))
        print(f"{args.mechanism} credential for {args.user} stored ({args.iterations} iterations)")
    elif args.action == "remove":
        if not store.delete(args.user, args.mechanism):
            raise KohortError(f"no {args.mechanism} credential for {args.user}")
        print(f"{args.mechanism} credential for {args.user} removed")
    else:
        for user, mechs in sorted(store.describe().items()):
            for mech, it in sorted(mechs.items()):
                print(f"{user}\t{mech}\titerations={it}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("users", help="manage the broker's SCRAM users",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["add", "remove", "list"])
    p.add_argument("--data-dir", required=True, metavar="DIR", help="the broker's data directory")
    p.add_argument("--user", help="user name (add, remove)")
    p.add_argument("--mechanism", default="SCRAM-SHA-256", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"])
    p.add_argument("--iterations", type=int, default=4096)
    p.set_defaults(func=_checked)


def _checked(args) -> int:
    if args.action in ("add", "remove") and not args.user:
        raise KohortError(f"users {args.action} needs --user")
    return run(args)
