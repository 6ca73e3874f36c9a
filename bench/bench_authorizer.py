"""The authorizer's cost per decision (issue 16): one `Authorizer.authorize` per topic is what an
all-topics Metadata (and every Fetch/Produce topic) pays with ACLs on. Pure CPU, no broker:

    PYTHONPATH=src .venv/bin/python bench/bench_authorizer.py [N_TOPIC_ACLS]

N literal READ ACLs (50 principals) plus N/10 PREFIXED WRITE ACLs; every topic name asked once.
"""
from __future__ import annotations

import sys
import time

from kohort.broker.authorizer import Authorizer
from kohort.protocol.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType


def main(n: int = 2000) -> None:
    acls = [AclBinding(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL, f"User:u{i % 50}", "*",
                       AclOperation.READ, AclPermissionType.ALLOW) for i in range(n)]
    acls += [AclBinding(ResourceType.TOPIC, f"team{i}-", PatternType.PREFIXED, f"User:u{i % 50}", "*",
                        AclOperation.WRITE, AclPermissionType.ALLOW) for i in range(n // 10)]
    a = Authorizer(acls)
    names = [f"topic-{i}" for i in range(n)] + [f"team{i}-x" for i in range(n // 10)]
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for name in names:
            a.authorize("User:u7", "127.0.0.1", AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        best = min(best, time.perf_counter() - t)
    print(f"{len(acls)} ACLs, {len(names)} topics: {best / len(names) * 1e6:.1f} us per decision, "
          f"{best * 1000:.1f} ms per all-topics Metadata (best of 5)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
