"""The broker's ACLs on disk and the authorizer's start-up (the I/O around broker/authorizer.py).

Enabled by Kafka's `authorizer.class.name` (StandardAuthorizer or the old AclAuthorizer name; empty =
no authorizer: every request is allowed and the ACL APIs answer SECURITY_DISABLED), with `super.users`
and `allow.everyone.if.no.acl.found`. ACLs live in `<data dir>/acls.json`, written atomically (temp
file, fsync, rename, fsync of the directory) before CreateAcls/DeleteAcls answer; in memory only when
the broker has no data directory. An unreadable file stops the broker at start (it must not come up
with no ACLs, which could mean "allow everyone").
"""
from __future__ import annotations

import json
import os

from kohort.broker.authorizer import AUTHORIZER_CLASSES, AclBinding, Authorizer, parse_super_users
from kohort.errors import KohortError
from kohort.storage.fs import write_json_atomic

ACL_FILE = "acls.json"


class AclStore:
    """The authorizer plus its file: `save()` after every change."""

    def __init__(self, authorizer: Authorizer, path: str | None):
        self.authorizer, self.path = authorizer, path

    def save(self) -> None:
        if self.path is None:
            return
        data = {"version": 1, "acls": [b.to_json() for b in self.authorizer.bindings()]}
        write_json_atomic(self.path, data)


def load_bindings(path: str) -> list[AclBinding]:
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
        return [AclBinding.from_json(d) for d in raw["acls"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise KohortError(f"{path}: cannot read the broker's ACLs ({e}); refusing to start without them") from None


def open_acl_store(config, data_dir: str | None) -> AclStore | None:
    """The ACL store when `authorizer.class.name` turns the authorizer on, else None."""
    cls = config["authorizer.class.name"].strip()
    if not cls:
        return None
    if cls not in AUTHORIZER_CLASSES:
        raise KohortError(f"authorizer.class.name={cls!r} is not supported; use {AUTHORIZER_CLASSES[0]}")
    path = os.path.join(data_dir, ACL_FILE) if data_dir else None
    bindings = load_bindings(path) if path else []
    auth = Authorizer(bindings, parse_super_users(config["super.users"]),
                      config["allow.everyone.if.no.acl.found"])
    return AclStore(auth, path)
