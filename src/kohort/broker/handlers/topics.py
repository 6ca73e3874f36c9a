"""CreateTopics (19) v0-v7, DeleteTopics (20) v0-v6, CreatePartitions (37) v0-v3.

CreateTopics: num_partitions / replication_factor -1 take the broker defaults (KIP-464, v4+);
replication factor must be 1 here (one broker) else INVALID_REPLICATION_FACTOR; manual assignments
must name this node and come with num_partitions -1; configs are validated (INVALID_CONFIG); an
existing topic is TOPIC_ALREADY_EXISTS; a name twice in one request is INVALID_REQUEST; validate_only
checks everything and creates nothing. v5+ answers with the partition count, replication factor and
configs (KIP-525), v7 with the topic id.
DeleteTopics: by name, or from v6 by name or topic id (UNKNOWN_TOPIC_ID); TOPIC_DELETION_DISABLED when
delete.topic.enable=false. Waiting fetches on the topic are woken.
CreatePartitions: grows a topic; the count must increase (INVALID_PARTITIONS).
Authorization (Kafka's; checked before existence): CreateTopics CREATE on the cluster or the topic (and
DESCRIBE_CONFIGS on it for the v5+ configs, else topic_config_error_code), DeleteTopics DELETE (by id:
DESCRIBE first, else no name is revealed), CreatePartitions ALTER; else TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from collections import Counter

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers.metadata import INTERNAL_TOPICS
from kohort.broker.handlers import handles
from kohort.broker.handlers._util import now_ms
from kohort.broker.topic_configs import topic_config_entries
from kohort.errors import ErrorCode
from kohort.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from kohort.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from kohort.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from kohort.storage import LogConfig, StorageError, validate_topic_name

CTResult = CreateTopicsResponse.CreatableTopicResult
CTConfig = CTResult.CreatableTopicConfigs


DENIED = "Authorization failed."


class _Reject(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _check_max(broker, count: int) -> None:
    limit = broker.config["kohort.topic.max.partitions"]
    if count > limit:
        raise _Reject(ErrorCode.INVALID_PARTITIONS,
                      f"{count} partitions exceed kohort.topic.max.partitions={limit}")


def _check_create(broker, t) -> tuple[int, dict]:
    """-> (partition count, config overrides) or raises _Reject/StorageError."""
    validate_topic_name(t.name)
    if broker.storage.has_topic(t.name):
        raise _Reject(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists")
    rf = t.replication_factor
    if t.assignments:
        if t.num_partitions != -1 or rf != -1:
            raise _Reject(ErrorCode.INVALID_REQUEST,
                          "with manual assignments, num_partitions and replication_factor must be -1")
        idx = sorted(a.partition_index for a in t.assignments)
        if idx != list(range(len(idx))):
            raise _Reject(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partition indexes must be 0..n-1")
        for a in t.assignments:
            if list(a.broker_ids) != [broker.node_id]:
                raise _Reject(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"replicas must be [{broker.node_id}], the only broker")
        count = len(idx)
        _check_max(broker, count)
    else:
        count = broker.config["num.partitions"] if t.num_partitions == -1 else t.num_partitions
        if count < 1:
            raise _Reject(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {count}")
        _check_max(broker, count)
        if rf == -1:
            rf = broker.config["default.replication.factor"]
        if rf < 1:
            raise _Reject(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"replication factor must be at least 1, got {rf}")
        if rf > 1:
            raise _Reject(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"replication factor {rf} is larger than the number of brokers (1)")
    configs = {}
    for c in t.configs:
        if c.name in configs:
            raise _Reject(ErrorCode.INVALID_CONFIG, f"config {c.name} given twice")
        configs[c.name] = c.value
    configs = {k: v for k, v in configs.items() if v is not None}
    LogConfig.from_overrides({**broker.storage.topic_defaults, **configs})
    return count, configs


@handles(CreateTopicsRequest, "0-7")
def handle_create_topics(ctx, req):
    broker, v = ctx.broker, ctx.api_version
    storage = broker.storage
    counts = Counter(t.name for t in req.topics)
    out = []
    cluster_create = ctx.authorize_cluster(AclOperation.CREATE)
    for t in req.topics:
        res = CTResult(name=t.name, error_code=0, error_message=None, num_partitions=-1,
                       replication_factor=-1, configs=None)
        if counts[t.name] > 1:
            res.error_code = ErrorCode.INVALID_REQUEST
            res.error_message = f"topic {t.name!r} appears more than once in the request"
            out.append(res)
            continue
        if not (cluster_create or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, t.name)):
            res.error_code, res.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, DENIED
            out.append(res)
            continue
        try:
            count, configs = _check_create(broker, t)
            if not req.validate_only:
                res.topic_id = storage.create_topic(t.name, count, configs, now_ms=now_ms())
            res.num_partitions, res.replication_factor = count, 1
            if v >= 5 and not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, t.name):
                res.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif v >= 5:
                if req.validate_only:
                    res.configs = []
                else:
                    res.configs = [CTConfig(name=n, value=val, read_only=False, config_source=src,
                                            is_sensitive=False)
                                   for n, val, src, _, _, _ in topic_config_entries(broker, t.name)]
        except _Reject as e:
            res.error_code, res.error_message = e.code, str(e)
        except StorageError as e:
            res.error_code, res.error_message = e.error_code, str(e)
        out.append(res)
    return CreateTopicsResponse(throttle_time_ms=0, topics=out)


def _delete(broker, name: str) -> None:
    broker.storage.delete_topic(name)
    broker.producers.forget_topic(name)
    broker.waiters.notify_topic(name)


@handles(DeleteTopicsRequest, "0-6")
def handle_delete_topics(ctx, req):
    broker, v = ctx.broker, ctx.api_version
    storage = broker.storage
    R = DeleteTopicsResponse.DeletableTopicResult
    wanted = ([(t.name, t.topic_id) for t in req.topics] if v >= 6
              else [(n, None) for n in req.topic_names])
    out = []
    for name, tid in wanted:
        res = R(name=name, error_code=0, error_message=None)
        if tid is not None:
            res.topic_id = tid
        try:
            if name is None:
                if tid is None or tid.int == 0:
                    raise _Reject(ErrorCode.INVALID_REQUEST, "neither a topic name nor a topic id")
                try:
                    name = storage.topic_name(tid)
                except StorageError:
                    raise _Reject(ErrorCode.UNKNOWN_TOPIC_ID, f"unknown topic id {tid}") from None
                if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    raise _Reject(ErrorCode.TOPIC_AUTHORIZATION_FAILED, DENIED)
                res.name = name
            if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
                raise _Reject(ErrorCode.TOPIC_AUTHORIZATION_FAILED, DENIED)
            if name in INTERNAL_TOPICS:
                raise _Reject(ErrorCode.INVALID_TOPIC_EXCEPTION, f"internal topic {name} cannot be deleted")
            if not broker.config["delete.topic.enable"]:
                raise _Reject(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")
            info = storage.topic(name)
            if v >= 6:
                res.topic_id = info.topic_id
            _delete(broker, name)
        except _Reject as e:
            res.error_code, res.error_message = e.code, str(e)
        except StorageError as e:
            res.error_code, res.error_message = e.error_code, str(e)
        out.append(res)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=out)


@handles(CreatePartitionsRequest, "0-3")
def handle_create_partitions(ctx, req):
    broker = ctx.broker
    storage = broker.storage
    R = CreatePartitionsResponse.CreatePartitionsTopicResult
    counts = Counter(t.name for t in req.topics)
    out = []
    for t in req.topics:
        res = R(name=t.name, error_code=0, error_message=None)
        try:
            if counts[t.name] > 1:
                raise _Reject(ErrorCode.INVALID_REQUEST, f"topic {t.name!r} appears more than once")
            if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, t.name):
                raise _Reject(ErrorCode.TOPIC_AUTHORIZATION_FAILED, DENIED)
            if t.name in INTERNAL_TOPICS:
                raise _Reject(ErrorCode.INVALID_TOPIC_EXCEPTION,
                              f"internal topic {t.name} cannot get more partitions")
            info = storage.topic(t.name)
            if t.count <= info.num_partitions:
                raise _Reject(ErrorCode.INVALID_PARTITIONS,
                              f"topic has {info.num_partitions} partitions; {t.count} is not an increase")
            _check_max(broker, t.count)
            if t.assignments is not None:
                if len(t.assignments) != t.count - info.num_partitions:
                    raise _Reject(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  "one assignment per new partition is required")
                if any(list(a.broker_ids) != [broker.node_id] for a in t.assignments):
                    raise _Reject(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  f"replicas must be [{broker.node_id}], the only broker")
            if not req.validate_only:
                storage.create_partitions(t.name, t.count, now_ms=now_ms())
        except _Reject as e:
            res.error_code, res.error_message = e.code, str(e)
        except StorageError as e:
            res.error_code, res.error_message = e.error_code, str(e)
        out.append(res)
    return CreatePartitionsResponse(throttle_time_ms=0, results=out)
