"""DescribeConfigs (32) v0-v4, AlterConfigs (33) v0-v2, IncrementalAlterConfigs (44) v0-v1.

Topics (resource type 2) describe and alter their configs in kohort.storage; the broker (type 4,
named by its node id or "" for the cluster default) is described from its static .properties and
cannot be altered at run time (INVALID_REQUEST). Groups (type 32) describe and alter their group configs
(kohort.broker.group_configs: consumer.* and share.*; source GROUP_CONFIG, or DEFAULT_CONFIG from the
broker's group.* settings) through DescribeConfigs and IncrementalAlterConfigs (SET and DELETE). DescribeConfigs gives sources (v1+), synonyms when
asked (v1+), config types and documentation when asked (v3+); v0 gets is_default instead.
IncrementalAlterConfigs (KIP-339) supports SET, DELETE, and APPEND/SUBTRACT on list configs
(cleanup.policy); AlterConfigs replaces all of a topic's overrides. validate_only checks without
changing anything. Config errors are INVALID_CONFIG with the reason.
Authorization: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or, for
broker resources, on the cluster (CLUSTER_AUTHORIZATION_FAILED), or on the group
(GROUP_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

import difflib

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.group_config_file import store_of
from kohort.broker.group_configs import GroupConfigError
from kohort.broker.handlers import handles
from kohort.broker.topic_configs import (LIST, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC,
                                         TOPIC_CONFIG_INFO, broker_config_entries, topic_config_entries)
from kohort.errors import ErrorCode
from kohort.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from kohort.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from kohort.protocol.messages.incremental_alter_configs import (IncrementalAlterConfigsRequest,
                                                                IncrementalAlterConfigsResponse)
from kohort.storage import LogConfig, StorageError

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
RESOURCE_GROUP = 32


def _denied(ctx, resource_type: int, name: str, op: AclOperation) -> int:
    """The authorization error for `op` on a config resource, else NONE."""
    if resource_type == RESOURCE_TOPIC:
        ok = ctx.authorize(op, ResourceType.TOPIC, name)
        return ErrorCode.NONE if ok else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        return ErrorCode.NONE if ctx.authorize_cluster(op) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if resource_type == RESOURCE_GROUP:
        ok = ctx.authorize(op, ResourceType.GROUP, name)
        return ErrorCode.NONE if ok else ErrorCode.GROUP_AUTHORIZATION_FAILED
    return ErrorCode.NONE


def _broker_name_ok(broker, name: str) -> bool:
    return name == "" or name == str(broker.node_id)


@handles(DescribeConfigsRequest, "0-4")
def handle_describe_configs(ctx, req):
    broker, v = ctx.broker, ctx.api_version
    results = []
    for r in req.resources:
        base = dict(resource_type=r.resource_type, resource_name=r.resource_name, configs=[])
        denied = _denied(ctx, r.resource_type, r.resource_name, AclOperation.DESCRIBE_CONFIGS)
        if denied:
            results.append(Result(error_code=denied, error_message="Authorization failed.", **base))
            continue
        if r.resource_type == RESOURCE_TOPIC:
            try:
                entries = topic_config_entries(broker, r.resource_name)
            except StorageError as e:
                results.append(Result(error_code=e.error_code, error_message=str(e), **base))
                continue
            read_only = False
        elif r.resource_type == RESOURCE_BROKER:
            if not _broker_name_ok(broker, r.resource_name):
                results.append(Result(error_code=ErrorCode.INVALID_REQUEST,
                                      error_message=f"unexpected broker id {r.resource_name!r}", **base))
                continue
            entries = broker_config_entries(broker)
            read_only = True
        elif r.resource_type == RESOURCE_BROKER_LOGGER:
            results.append(Result(error_code=0, error_message=None, **base))
            continue
        elif r.resource_type == RESOURCE_GROUP:
            entries = [(n, val, src, [(n, val, src)], ctype, None)
                       for n, val, src, ctype in store_of(broker).describe(r.resource_name)]
            read_only = False
        else:
            results.append(Result(error_code=ErrorCode.INVALID_REQUEST,
                                  error_message=f"unsupported resource type {r.resource_type}", **base))
            continue
        keys = None if r.configuration_keys is None else set(r.configuration_keys)
        configs = []
        for name, value, source, synonyms, ctype, doc in entries:
            if keys is not None and name not in keys:
                continue
            configs.append(Entry(
                name=name, value=value, read_only=read_only, config_source=source,
                is_default=source == 5, is_sensitive=False,
                synonyms=[Synonym(name=n, value=val, source=s) for n, val, s in synonyms]
                if req.include_synonyms else [],
                config_type=ctype, documentation=(doc or None) if req.include_documentation else None))
        results.append(Result(error_code=0, error_message=None, **{**base, "configs": configs}))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _alter(broker, resource_type, name, changes_fn, validate_only, incremental):
    """-> (error_code, message). changes_fn(current LogConfig) -> dict of overrides changes."""
    if resource_type == RESOURCE_BROKER:
        return ErrorCode.INVALID_REQUEST, "broker configs are static in kohort; set them in --config"
    if resource_type != RESOURCE_TOPIC:
        return ErrorCode.INVALID_REQUEST, f"unsupported resource type {resource_type}"
    storage = broker.storage
    try:
        info = storage.topic(name)
        changes = changes_fn(info.config)
        if incremental:
            merged = dict(info.config.overrides)
            for k, val in changes.items():
                if val is None:
                    merged.pop(k, None)
                else:
                    merged[k] = val
        else:
            merged = dict(changes)
        LogConfig.from_overrides({**storage.topic_defaults, **merged})
        if not validate_only:
            storage.alter_configs(name, changes, incremental=incremental)
    except StorageError as e:
        return e.error_code, str(e)
    except _ConfigError as e:
        return ErrorCode.INVALID_CONFIG, str(e)
    return ErrorCode.NONE, None


class _ConfigError(Exception):
    pass


def _list_op(current: str, value: str | None, op: int) -> str:
    have = [x for x in current.split(",") if x]
    items = [x.strip() for x in (value or "").split(",") if x.strip()]
    if op == APPEND:
        return ",".join(have + [x for x in items if x not in have])
    return ",".join(x for x in have if x not in items)


def _check_name(seen: dict, name: str) -> None:
    """One change per config, and only topic configs kohort knows (naming the closest on a typo)."""
    if name in seen:
        raise _ConfigError(f"config {name} appears twice")
    if name not in TOPIC_CONFIG_INFO:
        close = difflib.get_close_matches(name, TOPIC_CONFIG_INFO, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise _ConfigError(f"unknown topic config {name!r}{hint}")


def _alter_group(broker, r, validate_only: bool) -> tuple[int, str | None]:
    """IncrementalAlterConfigs of a group's configs: SET and DELETE; a bad key or value is INVALID_CONFIG."""
    changes: dict[str, str | None] = {}
    for c in r.configs:
        if c.name in changes:
            return ErrorCode.INVALID_CONFIG, f"config {c.name} appears twice"
        if c.config_operation == SET:
            changes[c.name] = c.value
        elif c.config_operation == DELETE:
            changes[c.name] = None
        else:
            return ErrorCode.INVALID_CONFIG, f"group configs take SET and DELETE, not operation {c.config_operation}"
    try:
        store_of(broker).alter(r.resource_name, changes, validate_only)
    except GroupConfigError as e:
        return ErrorCode.INVALID_CONFIG, str(e)
    return ErrorCode.NONE, None


@handles(IncrementalAlterConfigsRequest, "0-1")
def handle_incremental_alter_configs(ctx, req):
    R = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    out = []
    for r in req.resources:
        def changes_fn(cfg, r=r):
            ch = {}
            for c in r.configs:
                _check_name(ch, c.name)
                if c.config_operation == SET:
                    ch[c.name] = c.value
                elif c.config_operation == DELETE:
                    ch[c.name] = None
                elif c.config_operation in (APPEND, SUBTRACT):
                    if TOPIC_CONFIG_INFO[c.name][1] != LIST:
                        raise _ConfigError(f"{c.name} is not a list config; APPEND/SUBTRACT do not apply")
                    ch[c.name] = _list_op(str(cfg.get(c.name)), c.value, c.config_operation) or None
                else:
                    raise _ConfigError(f"unknown config operation {c.config_operation}")
            return ch
        code = _denied(ctx, r.resource_type, r.resource_name, AclOperation.ALTER_CONFIGS)
        if code:
            code, msg = code, "Authorization failed."
        elif r.resource_type == RESOURCE_GROUP:
            code, msg = _alter_group(ctx.broker, r, req.validate_only)
        else:
            code, msg = _alter(ctx.broker, r.resource_type, r.resource_name, changes_fn, req.validate_only, True)
        out.append(R(error_code=code, error_message=msg, resource_type=r.resource_type,
                     resource_name=r.resource_name))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out)


@handles(AlterConfigsRequest, "0-2")
def handle_alter_configs(ctx, req):
    R = AlterConfigsResponse.AlterConfigsResourceResponse
    out = []
    for r in req.resources:
        def changes_fn(cfg, r=r):
            ch = {}
            for c in r.configs:
                _check_name(ch, c.name)
                ch[c.name] = c.value
            return ch
        code = _denied(ctx, r.resource_type, r.resource_name, AclOperation.ALTER_CONFIGS)
        code, msg = (code, "Authorization failed.") if code else _alter(
            ctx.broker, r.resource_type, r.resource_name, changes_fn, req.validate_only, False)
        out.append(R(error_code=code, error_message=msg, resource_type=r.resource_type,
                     resource_name=r.resource_name))
    return AlterConfigsResponse(throttle_time_ms=0, responses=out)
