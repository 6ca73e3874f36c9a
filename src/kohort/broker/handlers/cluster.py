"""DescribeCluster (API key 60), v0-v2 (KIP-700): this node as the only broker and the controller.
A request for controller endpoints (endpoint_type 2, KIP-919) is UNSUPPORTED_ENDPOINT_TYPE: this
broker has no separate controller listener. No authorization check (as Kafka); the cluster's
authorized_operations (KIP-430) when asked."""
from __future__ import annotations

from kohort.broker.authorizer import CLUSTER_NAME, ResourceType
from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse

ENDPOINT_BROKER = 1


@handles(DescribeClusterRequest, "0-2")
def handle_describe_cluster(ctx, req):
    b = ctx.broker
    if req.endpoint_type != ENDPOINT_BROKER:
        return DescribeClusterResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message="only broker endpoints are served",
                                       endpoint_type=req.endpoint_type, cluster_id=b.cluster_id,
                                       controller_id=-1, brokers=[])
    brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=b.node_id, host=ctx.advertised()[0],
                                                             port=ctx.advertised()[1],
                                                             rack=None, is_fenced=False)]
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                   endpoint_type=ENDPOINT_BROKER, cluster_id=b.cluster_id,
                                   controller_id=b.node_id, brokers=brokers,
                                   cluster_authorized_operations=ctx.authorized_operations(
                                       ResourceType.CLUSTER, CLUSTER_NAME,
                                       req.include_cluster_authorized_operations))
