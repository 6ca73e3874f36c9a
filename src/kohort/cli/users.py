"""`kohort users`: SCRAM credentials of a kohort broker (like kafka-configs.sh --entity-type users).

    kohort users add    (-b HOST:PORT [-X ...] | --data-dir DIR) --user NAME [--mechanism M] [--iterations N]
    kohort users remove (-b HOST:PORT [-X ...] | --data-dir DIR) --user NAME [--mechanism M]
    kohort users list   (-b HOST:PORT [-X ...] | --data-dir DIR)

The password is read from stdin (one line), never from the command line. With -b the change goes
through AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554: works with Apache Kafka too;
the salted password is derived here). With --data-dir (a kohort broker's data directory, the broker may
be running) the credential (salt, StoredKey, ServerKey, iterations) is written to
`<DIR>/scram-credentials.json`, which the broker rereads at the next login. No password is stored.
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


def _password() -> str:
    line = sys.stdin.readline()
    password = line[:-1] if line.endswith("\n") else line
    if not password:
        raise KohortError("no password on stdin")
    return password


def run_online(args) -> int:
    from kohort.cli.common import admin_client
    with admin_client(args, admin_keys_only=True) as admin:
        if args.action == "add":
            admin.alter_user_scram_credentials([(args.user, args.mechanism, _password(), args.iterations)],
                                               timeout=args.timeout)
            print(f"{args.mechanism} credential for {args.user} stored ({args.iterations} iterations)")
        elif args.action == "remove":
            admin.alter_user_scram_credentials(deletions=[(args.user, args.mechanism)], timeout=args.timeout)
            print(f"{args.mechanism} credential for {args.user} removed")
        else:
            for user, mechs in sorted(admin.describe_user_scram_credentials(timeout=args.timeout).items()):
                for mech, it in sorted(mechs.items()):
                    print(f"{user}\t{mech}\titerations={it}")
    return 0


def run(args) -> int:
    from kohort.protocol.sasl import make_credential
    if args.data_dir is None:
        return run_online(args)
    store = _store(args)
    if args.action == "add":
        password = _password()
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
    p.add_argument("--data-dir", metavar="DIR", help="a kohort broker's data directory (instead of -b)")
    p.add_argument("--user", help="user name (add, remove)")
    p.add_argument("--mechanism", default="SCRAM-SHA-256", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"])
    p.add_argument("--iterations", type=int, default=4096)
    from kohort.cli.common import add_connection_args
    add_connection_args(p)
    p.set_defaults(func=_checked)


def _checked(args) -> int:
    if args.action in ("add", "remove") and not args.user:
        raise KohortError(f"users {args.action} needs --user")
    if args.data_dir is not None and (args.bootstrap or args.config):
        raise KohortError("give --data-dir or -b/-X, not both")
    return run(args)
