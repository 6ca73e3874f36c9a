"""The broker's group configs store and its file: `store_of(broker)` attaches a
`kohort.broker.group_configs.GroupConfigStore` to the broker, kept in `<data dir>/group_configs.json`
(written atomically before IncrementalAlterConfigs answers, as Kafka keeps group configs in its
metadata log; memory only when the broker has no data directory)."""
from __future__ import annotations

import json
import os

from kohort.broker.group_configs import GroupConfigStore
from kohort.storage.fs import write_json_atomic

GROUP_CONFIGS_FILE = "group_configs.json"


def store_of(broker) -> GroupConfigStore:
    """The broker's GroupConfigStore (`broker.group_configs`), made on first use from
    `<data dir>/group_configs.json` when the broker has a data directory."""
    store = getattr(broker, "group_configs", None)
    if store is not None:
        return store
    data_dir = getattr(broker, "data_dir", None)
    if not data_dir:
        store = broker.group_configs = GroupConfigStore(broker.config.values)
        return store
    path = os.path.join(data_dir, GROUP_CONFIGS_FILE)
    try:
        with open(path) as fh:
            groups = json.load(fh)["groups"]
    except FileNotFoundError:
        groups = {}

    def save(groups: dict) -> None:
        write_json_atomic(path, {"version": 1, "groups": groups})
    store = broker.group_configs = GroupConfigStore(broker.config.values, groups, save)
    return store
