"""Metadata (API key 3), v0-v13: this node as the only broker, controller and every partition's
leader (leader epoch 0); topic ids (v10+); auto-creation when auto.create.topics.enable and the
request allows it (always for v0-v3, `allow_auto_topic_creation` from v4). A null topic list (v1+)
or an empty one in v0 means all topics. A v10-v11 request naming a topic by id (or with a null name)
is answered INVALID_REQUEST for each topic, as Kafka does (ids are usable from v12).

Authorization (KIP-430 and Kafka's KafkaApis): the all-topics list leaves out topics the principal may
not DESCRIBE; a named one it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether or not it exists;
auto-creating a missing one needs CREATE on the cluster or the topic, else TOPIC_AUTHORIZATION_FAILED.
authorized_operations are filled in when asked (topics v8+, cluster v8-v10).

Shared answers: without an authorizer, a request whose topics all exist (or that asks for all
topics) gets an answer fully determined by its version, the authorized_operations flags, the
advertised address, cluster id, node id, leader epoch and each answered topic's (name, id,
partition count). That tuple is the key of a small cache of answers built once and encoded once per
key (Message.encode_once): 1,000 clients asking the same question cost one encode, not 1,000. Any
change to a topic, a partition count or the broker's identity is a different key, never a stale
answer."""
from __future__ import annotations

import collections
import functools
import uuid

from kohort.broker.authorizer import AclOperation, ResourceType
from kohort.broker.handlers import handles
from kohort.broker.handlers._util import auto_create
from kohort.errors import ErrorCode
from kohort.protocol.messages.metadata import MetadataRequest, MetadataResponse
from kohort.protocol.schema import EncodedOnce
from kohort.storage import StorageError, validate_topic_name

ZERO_UUID = uuid.UUID(int=0)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})  # Kafka's Topic.INTERNAL_TOPICS
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition


@functools.lru_cache(maxsize=256)
def _partitions(count: int, node: int, leader_epoch: int) -> EncodedOnce:
    """The partition entries of a topic of `count` partitions (all alike on this single node), built
    once per (count, node, epoch) and shared, read-only, by every answer, and encoded once per
    version: a full Metadata request for a topic of 10,000 partitions neither builds nor encodes
    10,000 structs each time. A new count, node or leader epoch is a new cache key."""
    return EncodedOnce(Partition(error_code=0, partition_index=p, leader_id=node, leader_epoch=leader_epoch,
                           replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
                 for p in range(count))


def topic_entry(broker, info, version: int) -> Topic:
    return Topic(error_code=0, name=info.name, topic_id=info.topic_id,
                 is_internal=info.name in INTERNAL_TOPICS,
                 partitions=_partitions(info.num_partitions, broker.node_id, broker.leader_epoch))


_SHARED: collections.OrderedDict = collections.OrderedDict()   # key -> answer (see the header)
SHARED_MAX = 64


def _shared_key(ctx, req: MetadataRequest, v: int, host: str, port: int) -> tuple | None:
    """The key of a shareable answer to `req`, or None when the answer must be built for this
    request alone (an authorizer, a topic named by id or missing: auto-creation, errors)."""
    if ctx._authorizer() is not None:
        return None
    broker, storage = ctx.broker, ctx.broker.storage
    if req.topics is None or (v == 0 and not req.topics):
        infos = tuple((i.name, i.topic_id, i.num_partitions) for i in storage.topics())
    else:
        if v < 12 and any(t.topic_id != ZERO_UUID for t in req.topics):
            return None
        infos = []
        for t in req.topics:
            if t.name is None or not storage.has_topic(t.name):
                return None
            i = storage.topic(t.name)
            infos.append((i.name, i.topic_id, i.num_partitions))
        infos = tuple(infos)
    return (v, req.topics is None, host, port, broker.cluster_id, broker.node_id, broker.leader_epoch,
            v >= 8 and bool(req.include_topic_authorized_operations),
            8 <= v <= 10 and bool(req.include_cluster_authorized_operations), infos)


@handles(MetadataRequest, "0-13")
def handle_metadata(ctx, req: MetadataRequest) -> MetadataResponse:
    v = ctx.api_version
    host, port = ctx.advertised()
    key = _shared_key(ctx, req, v, host, port)
    if key is None:
        return _answer(ctx, req, v, host, port)
    resp = _SHARED.get(key)
    if resp is None:
        resp = _SHARED[key] = _answer(ctx, req, v, host, port).encode_once()
        if len(_SHARED) > SHARED_MAX:
            _SHARED.popitem(last=False)
    else:
        _SHARED.move_to_end(key)
    return resp


def _answer(ctx, req: MetadataRequest, v: int, host: str, port: int) -> MetadataResponse:
    broker = ctx.broker
    storage = broker.storage
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=broker.node_id, host=host, port=port, rack=None)]
    topics: list[Topic] = []
    if v < 12 and req.topics and any(t.name is None or t.topic_id != ZERO_UUID for t in req.topics):
        # topic ids in v10-v11 requests are unusable (the response has no nullable name before v12):
        # Kafka refuses the request as INVALID_REQUEST for every topic named, a null name as ""
        topics = [Topic(error_code=ErrorCode.INVALID_REQUEST, name=t.name or "", topic_id=t.topic_id, partitions=[])
                  for t in req.topics]
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=broker.cluster_id,
                                controller_id=broker.node_id, topics=topics, error_code=0)
    if req.topics is None or (v == 0 and not req.topics):
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in storage.topics()))
        topics = [topic_entry(broker, info, v) for info in storage.topics() if info.name in visible]
    else:
        allow = broker.config["auto.create.topics.enable"] and (v < 4 or req.allow_auto_topic_creation)
        for t in req.topics:
            name = t.name
            if name is None:
                tid = t.topic_id
                try:
                    name = storage.topic_name(tid)
                except StorageError:
                    topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=tid,
                                        partitions=[]))
                    continue
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                by_id = t.name is None      # asked by id: the name is not revealed
                topics.append(Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None if by_id else name,
                                    topic_id=t.topic_id if by_id else ZERO_UUID, partitions=[]))
                continue
            if not storage.has_topic(name):
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                try:
                    validate_topic_name(name)
                except StorageError:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                else:
                    if allow and not (ctx.authorize_cluster(AclOperation.CREATE)
                                      or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)):
                        code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    elif allow:
                        code = auto_create(broker, name)
                if code != ErrorCode.NONE or not storage.has_topic(name):
                    topics.append(Topic(error_code=code, name=name, topic_id=ZERO_UUID, partitions=[]))
                    continue
            topics.append(topic_entry(broker, storage.topic(name), v))
    if v >= 8:
        for t in topics:
            if t.error_code == ErrorCode.NONE:
                t.topic_authorized_operations = ctx.authorized_operations(
                    ResourceType.TOPIC, t.name, req.include_topic_authorized_operations)
    cluster_ops = ctx.authorized_operations(ResourceType.CLUSTER, "kafka-cluster",
                                            8 <= v <= 10 and req.include_cluster_authorized_operations)
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=broker.cluster_id,
                            controller_id=broker.node_id, topics=topics, error_code=0,
                            cluster_authorized_operations=cluster_ops)
