"""`kohort topics list|create|describe|delete|alter-partitions|config`: topic administration.

Shaped like kafka-topics.sh: aligned tables by default, `--json` for scripts. `describe --configs` shows
every topic config with its source as kafka-configs.sh --describe --all names it (DYNAMIC_TOPIC_CONFIG is
an override set on the topic); `--overrides` keeps only those.
"""
from __future__ import annotations

import sys

from kohort.cli.common import add_connection_args, admin_client, parse_kv, print_json, table
from kohort.errors import KohortError


def register(subparsers) -> None:
    p = subparsers.add_parser("topics", help="list, create, describe, delete topics",
                              description="Topic administration (like kafka-topics.sh).")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True

    s = sub.add_parser("list", help="list topics with partition counts")
    s.add_argument("--internal", action="store_true", help="include internal topics")
    add_connection_args(s)
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("create", help="create topics")
    s.add_argument("topics", nargs="+", metavar="TOPIC")
    s.add_argument("-p", "--partitions", type=int, default=1)
    s.add_argument("-r", "--replication-factor", type=int, default=-1,
                   help="replicas per partition (default: the broker's default.replication.factor)")
    s.add_argument("-c", "--config", dest="topic_config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic config, e.g. -c cleanup.policy=compact (repeatable)")
    s.add_argument("--if-not-exists", action="store_true", help="no error when a topic already exists")
    add_connection_args(s)
    s.set_defaults(func=cmd_create)

    s = sub.add_parser("describe", help="partitions, leaders, replicas and ISR of topics")
    s.add_argument("topics", nargs="*", metavar="TOPIC", help="(default: every topic)")
    s.add_argument("--configs", action="store_true",
                   help="also show the topic configs with their source (DYNAMIC_TOPIC_CONFIG: set on the topic; "
                        "STATIC_BROKER_CONFIG: the broker's --config; DEFAULT_CONFIG: Kafka's default)")
    s.add_argument("--overrides", action="store_true",
                   help="with --configs: only the configs set on the topic (what kafka-topics --describe lists)")
    add_connection_args(s)
    s.set_defaults(func=cmd_describe)

    s = sub.add_parser("delete", help="delete topics")
    s.add_argument("topics", nargs="+", metavar="TOPIC")
    s.add_argument("--if-exists", action="store_true", help="no error when a topic does not exist")
    add_connection_args(s)
    s.set_defaults(func=cmd_delete)

    s = sub.add_parser("alter-partitions", help="grow a topic to a number of partitions")
    s.add_argument("topic", metavar="TOPIC")
    s.add_argument("-p", "--partitions", type=int, required=True)
    add_connection_args(s)
    s.set_defaults(func=cmd_alter_partitions)

    s = sub.add_parser("config", help="set or delete topic configs (incremental)")
    s.add_argument("topic", metavar="TOPIC")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--delete", action="append", default=[], metavar="KEY")
    add_connection_args(s)
    s.set_defaults(func=cmd_config)


def cmd_list(args) -> int:
    with admin_client(args) as a:
        descs = a.describe_topics(None if not args.internal else a.list_topics(True), timeout=args.timeout)
    rows = [(d.name, len(d.partitions), max((len(p.replicas) for p in d.partitions), default=0))
            for d in descs]
    if args.json:
        print_json([{"topic": n, "partitions": c, "replication_factor": r} for n, c, r in rows])
    elif rows:
        print(table(["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"], rows))
    return 0


def cmd_create(args) -> int:
    cfg = parse_kv(args.topic_config, "-c/--config")
    if args.partitions < 1:
        raise KohortError(f"--partitions must be >= 1, got {args.partitions}")
    with admin_client(args) as a:
        res = a.create_topics(args.topics, num_partitions=args.partitions,
                              replication_factor=args.replication_factor, configs=cfg, timeout=args.timeout)
    return _report(args, res, "created", "TOPIC_ALREADY_EXISTS" if args.if_not_exists else None)


def cmd_delete(args) -> int:
    with admin_client(args) as a:
        res = a.delete_topics(args.topics, timeout=args.timeout)
    return _report(args, res, "deleted", "UNKNOWN_TOPIC_OR_PARTITION" if args.if_exists else None)


def cmd_alter_partitions(args) -> int:
    with admin_client(args) as a:
        res = a.create_partitions({args.topic: args.partitions}, timeout=args.timeout)
    return _report(args, res, f"now has {args.partitions} partitions", None)


def cmd_config(args) -> int:
    changes = parse_kv(args.set, "--set")
    changes.update({k: None for k in args.delete})
    if not changes:
        raise KohortError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    with admin_client(args) as a:
        a.alter_configs(("topic", args.topic), changes, timeout=args.timeout)
    if args.json:
        print_json({"topic": args.topic, "changed": changes})
    else:
        print(f"topic {args.topic}: " + ", ".join(f"{k}={'(deleted)' if v is None else v}"
                                                  for k, v in changes.items()))
    return 0


def _report(args, res: dict, verb: str, tolerated: str | None) -> int:
    failed = {n: e for n, e in res.items() if e is not None and getattr(e, "name", None) != tolerated}
    if args.json:
        print_json([{"topic": n, "error": None if res[n] is None else str(res[n])} for n in res])
    else:
        for n, e in res.items():
            if e is None:
                print(f"topic {n} {verb}")
            elif n not in failed:
                print(f"topic {n}: {e.name} (ignored)")
    for n, e in failed.items():
        print(f"kohort topics: topic {n}: {e}", file=sys.stderr)
    return 1 if failed else 0


# DescribeConfigs config_source (Kafka's ConfigEntry.ConfigSource)
CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                  3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                  6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
DYNAMIC_TOPIC_CONFIG = 1


def config_source(code) -> str:
    return CONFIG_SOURCES.get(code, str(code))


def cmd_describe(args) -> int:
    with admin_client(args) as a:
        descs = a.describe_topics(args.topics or None, timeout=args.timeout)
        configs = a.describe_configs([("topic", d.name) for d in descs], timeout=args.timeout) \
            if args.configs and descs else {}
    if args.json:
        out = []
        for d in descs:
            item = {"topic": d.name, "topic_id": d.topic_id, "internal": d.is_internal,
                    "partitions": [p._asdict() for p in d.partitions]}
            if args.configs:
                item["configs"] = {k: {"value": v.value, "source": config_source(v.source),
                                       "override": v.source == DYNAMIC_TOPIC_CONFIG, "read_only": v.read_only,
                                       "sensitive": v.is_sensitive}
                                   for k, v in sorted(configs.get((2, d.name), {}).items())}
            out.append(item)
        print_json(out)
        return 0
    rows = [(d.name, p.partition, p.leader, p.replicas, p.isr) for d in descs for p in d.partitions]
    print(table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"], rows))
    if args.configs:
        crow = [(d.name, k, v.value, config_source(v.source))
                for d in descs for k, v in sorted(configs.get((2, d.name), {}).items())
                if not args.overrides or v.source == DYNAMIC_TOPIC_CONFIG]
        if crow:
            print()
            print(table(["TOPIC", "CONFIG", "VALUE", "SOURCE"], crow))
    return 0
