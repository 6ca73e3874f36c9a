"""ApiVersions (API key 18), v0-v4: the versions this broker really serves, derived from the registry.

A too-new ApiVersions request is answered in v0 with UNSUPPORTED_VERSION and still lists the ranges
(KIP-511) so the client can retry with a version we support. The response header is always v0.
"""
from kohort.broker.handlers import HANDLERS, handles
from kohort.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse

UNSUPPORTED_VERSION = 35


def _keys():
    return [ApiVersionsResponse.ApiVersion(api_key=k, min_version=h.advertised_min, max_version=h.max_version)
            for k, h in sorted(HANDLERS.items())]


def unsupported_version_response():
    return ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=_keys())


@handles(ApiVersionsRequest, "0-4")
def handle_api_versions(ctx, req):
    """v3+ also carry the features: transaction.version (0-2 supported; finalized at the broker's
    transaction.version), which Java clients read to choose transactions v2 (KIP-890), and
    share.version (0-1 supported; finalized at the broker's share.version, KIP-932; a level 0
    feature is left out of the finalized ones, as Kafka does)."""
    tv = ctx.broker.config["transaction.version"]
    sv = ctx.broker.config["share.version"]
    R = ApiVersionsResponse
    finalized = [R.FinalizedFeatureKey(name="share.version", max_version_level=sv, min_version_level=sv)] if sv else []
    finalized.append(R.FinalizedFeatureKey(name="transaction.version", max_version_level=tv, min_version_level=tv))
    return R(error_code=0, api_keys=_keys(), throttle_time_ms=0,
             supported_features=[R.SupportedFeatureKey(name="share.version", min_version=0, max_version=1),
                                 R.SupportedFeatureKey(name="transaction.version", min_version=0, max_version=2)],
             finalized_features_epoch=1, finalized_features=finalized)
