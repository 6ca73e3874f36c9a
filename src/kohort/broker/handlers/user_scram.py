"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the broker's SCRAM users
(KIP-554), kept in the durable store of broker/security.py (the same one `kohort users` writes).

As Kafka: the client sends salt and salted password (PBKDF2 done client-side), the broker keeps
StoredKey/ServerKey; per-user errors DUPLICATE_RESOURCE (a user twice in one request),
UNACCEPTABLE_CREDENTIAL (empty name, iterations outside 4096-16384), UNSUPPORTED_SASL_MECHANISM,
RESOURCE_NOT_FOUND (describing or deleting what does not exist). Authorization: DESCRIBE (Describe) or
ALTER (Alter) on the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level / every user).
"""
from collections import Counter

from kohort.broker.authorizer import AclOperation
from kohort.broker.handlers import handles
from kohort.errors import ErrorCode
from kohort.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
)
from kohort.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
)
from kohort.protocol.sasl import SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS, credential_from_salted

MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODE_OF = {v: k for k, v in MECHANISM_CODES.items()}


@handles(DescribeUserScramCredentialsRequest, "0")
def handle_describe(ctx, req):
    R = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
    Info = R.CredentialInfo
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, results=[],
                                                    error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                    error_message="Cluster authorization failed.")
    known = ctx.broker.scram.describe()
    names = sorted(known) if req.users is None else [u.name for u in req.users]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(R(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                             error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                           f"single request: {name}", credential_infos=[]))
        elif name not in known:
            results.append(R(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                             error_message=f"Attempt to describe nonexistent user: {name}", credential_infos=[]))
        else:
            results.append(R(user=name, error_code=0, error_message=None, credential_infos=[
                Info(mechanism=CODE_OF[m], iterations=it) for m, it in sorted(known[name].items())]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                results=results)


@handles(AlterUserScramCredentialsRequest, "0")
def handle_alter(ctx, req):
    R = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    store = ctx.broker.scram
    users = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            R(user=n, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.")
            for n in dict.fromkeys(users)])
    counts = Counter(users)
    errors: dict[str, tuple[int, str]] = {}
    for name in users:
        if counts[name] > 1:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE,
                            f"A user credential cannot be altered twice in the same request: {name}")
        elif not name:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    for d in req.deletions:
        if d.name in errors:
            continue
        mech = MECHANISM_CODES.get(d.mechanism)
        if mech is None:
            errors[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {d.mechanism}")
        elif not store.delete(d.name, mech):
            errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                              f"Attempt to delete a user credential that does not exist: {d.name} {mech}")
        else:
            errors[d.name] = (0, None)
    for u in req.upsertions:
        if u.name in errors:
            continue
        mech = MECHANISM_CODES.get(u.mechanism)
        if mech is None:
            errors[u.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {u.mechanism}")
        elif not SCRAM_MIN_ITERATIONS <= u.iterations <= SCRAM_MAX_ITERATIONS:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                              f"Iterations {u.iterations} not in {SCRAM_MIN_ITERATIONS}-{SCRAM_MAX_ITERATIONS}")
        elif not u.salt or not u.salted_password:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        else:
            store.upsert(u.name, mech, credential_from_salted(mech, bytes(u.salted_password), bytes(u.salt),
                                                              u.iterations))
            errors[u.name] = (0, None)
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        R(user=name, error_code=errors[name][0], error_message=errors[name][1]) for name in dict.fromkeys(users)])
