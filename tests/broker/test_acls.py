"""Authorization (issue 16): the authorizer's rules (pure), kohort broker with ACLs over SASL_SSL/SCRAM
against kohort's client and CLI, confluent-kafka, kafka-python, aiokafka, kcat and Kafka's Java client and
kafka-acls (AclCommand); kohort's client against Apache Kafka 4.3.1 with StandardAuthorizer (slow).

One broker for the module (fixture `acl_broker`): a SASL_SSL listener with SCRAM-SHA-256 and PLAIN
(kcat 1.7.1 cannot do SCRAM), `authorizer.class.name=StandardAuthorizer`, `super.users=User:admin`.
Principals: admin (super user), alice (producer + consumer on topic `paid`, group `paid-g` and on the
prefix `alice-` for topics and groups), bob (READ on topic `paid` only: no group), mallory (nothing).
The ACLs are added with `kohort acls add` as admin.
"""
from __future__ import annotations

import json
import subprocess
import textwrap
import time
import uuid

import pytest

from tests.helpers.brokers import KohortBroker, free_port
from tests.broker.test_security import PY, _kohort, _x, pki  # noqa: F401 - pki is a fixture used here

from kohort.broker.authorizer import Authorizer, all_operations, parse_super_users
from kohort.errors import ErrorCode as E
from kohort.protocol.acl import (
    AclBinding, AclBindingFilter, AclOperation as Op, AclPermissionType as Perm, InvalidAclError,
    PatternType as Pat, ResourceType as RT,
)

ALLOW, DENY = Perm.ALLOW, Perm.DENY
PASSWORDS = {"admin": "admin-Secret-0", "alice": "alice-Secret-1", "bob": "bob-Secret-2",
             "mallory": "mallory-Secret-3"}
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def acl(rtype, name, op, perm=ALLOW, principal="User:alice", host="*", pattern=Pat.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


# -- the rules, pure ------------------------------------------------------------------------------------
def test_literal_prefixed_and_wildcard_resources():
    a = Authorizer([acl(RT.TOPIC, "orders", Op.READ), acl(RT.TOPIC, "pay-", Op.WRITE, pattern=Pat.PREFIXED),
                    acl(RT.GROUP, "*", Op.READ)])
    ok = lambda op, rt, name: a.authorize("User:alice", "10.0.0.1", op, rt, name)  # noqa: E731
    assert ok(Op.READ, RT.TOPIC, "orders") and not ok(Op.READ, RT.TOPIC, "orders2")
    assert ok(Op.WRITE, RT.TOPIC, "pay-eu") and ok(Op.WRITE, RT.TOPIC, "pay-")
    assert not ok(Op.WRITE, RT.TOPIC, "pay") and not ok(Op.WRITE, RT.TOPIC, "orders")
    assert ok(Op.READ, RT.GROUP, "anything") and not ok(Op.READ, RT.TRANSACTIONAL_ID, "anything")
    # "*" is a wildcard only as a LITERAL name; a PREFIXED "*" matches names starting with "*"
    b = Authorizer([acl(RT.TOPIC, "*", Op.READ, pattern=Pat.PREFIXED)])
    assert not b.authorize("User:alice", "h", Op.READ, RT.TOPIC, "x")
    assert b.authorize("User:alice", "h", Op.READ, RT.TOPIC, "*x")
    # other principals: only the session's and User:*
    assert not a.authorize("User:bob", "h", Op.READ, RT.TOPIC, "orders")
    assert not a.authorize("User:Alice", "h", Op.READ, RT.TOPIC, "orders")       # case-sensitive
    c = Authorizer([acl(RT.TOPIC, "t", Op.READ, principal="User:*")])
    assert c.authorize("User:bob", "h", Op.READ, RT.TOPIC, "t")
    assert c.authorize("User:ANONYMOUS", "h", Op.READ, RT.TOPIC, "t")


def test_implied_operations_only_from_allow():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        a = Authorizer([acl(RT.TOPIC, "t", op)])
        assert a.authorize("User:alice", "h", Op.DESCRIBE, RT.TOPIC, "t"), op
        assert not a.authorize("User:alice", "h", Op.DESCRIBE_CONFIGS, RT.TOPIC, "t")
    for op in (Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        a = Authorizer([acl(RT.TOPIC, "t", op)])
        assert a.authorize("User:alice", "h", Op.DESCRIBE, RT.TOPIC, "t") is False, op
    a = Authorizer([acl(RT.TOPIC, "t", Op.ALTER_CONFIGS)])
    assert a.authorize("User:alice", "h", Op.DESCRIBE_CONFIGS, RT.TOPIC, "t")
    a = Authorizer([acl(RT.TOPIC, "t", Op.ALL)])
    assert all(a.authorize("User:alice", "h", op, RT.TOPIC, "t") for op in Op if op > Op.ALL)
    # DENY READ does not deny DESCRIBE (implied by an ALLOW WRITE); DENY ALL denies everything
    a = Authorizer([acl(RT.TOPIC, "t", Op.WRITE), acl(RT.TOPIC, "t", Op.READ, DENY)])
    assert a.authorize("User:alice", "h", Op.DESCRIBE, RT.TOPIC, "t")
    assert not a.authorize("User:alice", "h", Op.READ, RT.TOPIC, "t")
    a = Authorizer([acl(RT.TOPIC, "t", Op.WRITE), acl(RT.TOPIC, "*", Op.ALL, DENY)])
    assert not a.authorize("User:alice", "h", Op.DESCRIBE, RT.TOPIC, "t")


def test_deny_wins_hosts_super_users_and_the_no_acl_default():
    a = Authorizer([acl(RT.TOPIC, "t", Op.READ), acl(RT.TOPIC, "t", Op.READ, DENY, principal="User:*",
                                                     host="10.0.0.9"),
                    acl(RT.TOPIC, "p-", Op.READ, DENY, pattern=Pat.PREFIXED), acl(RT.TOPIC, "p-x", Op.READ)],
                   super_users=parse_super_users(" User:root ; User:ops"))
    assert a.authorize("User:alice", "10.0.0.1", Op.READ, RT.TOPIC, "t")
    assert not a.authorize("User:alice", "10.0.0.9", Op.READ, RT.TOPIC, "t")      # denied from that host
    assert not a.authorize("User:alice", "h", Op.READ, RT.TOPIC, "p-x")           # prefixed DENY wins
    assert a.authorize("User:root", "10.0.0.9", Op.READ, RT.TOPIC, "p-x")         # super user
    assert a.authorize("User:ops", "h", Op.ALTER, RT.CLUSTER, "kafka-cluster")
    # host ACLs match the address whatever its spelling
    b = Authorizer([acl(RT.TOPIC, "t", Op.READ, host="0:0:0:0:0:0:0:1")])
    assert b.authorize("User:alice", "::1", Op.READ, RT.TOPIC, "t")
    # allow.everyone.if.no.acl.found: only for resources without any ACL
    c = Authorizer([acl(RT.TOPIC, "t", Op.READ, principal="User:bob")], allow_if_no_acl=True)
    assert c.authorize("User:alice", "h", Op.WRITE, RT.TOPIC, "other")
    assert not c.authorize("User:alice", "h", Op.READ, RT.TOPIC, "t")
    assert not Authorizer([]).authorize("User:alice", "h", Op.READ, RT.TOPIC, "t")


def _reference_decision(bindings, supers, allow_if_none, principal, host, op, rtype, name) -> bool:
    """StandardAuthorizerData's rules written out as a scan of every ACL (the oracle for the index)."""
    if principal in supers:
        return True
    cands = [b for b in bindings if b.resource_type == rtype and (
        (b.pattern_type == Pat.LITERAL and b.name in (name, "*"))
        or (b.pattern_type == Pat.PREFIXED and name.startswith(b.name)))]
    implied = {Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
               Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}}

    def applies(b):
        if b.principal not in (principal, "User:*") or b.host not in ("*", host):
            return False
        if b.operation == Op.ALL:
            return True
        if b.permission == ALLOW and op in implied:
            return b.operation in implied[op]
        return b.operation == op
    hits = [b for b in cands if applies(b)]
    if any(b.permission == DENY for b in hits):
        return False
    return bool(hits) or (allow_if_none and not cands)


def test_indexed_decisions_equal_a_scan_of_every_acl():
    import random
    rnd = random.Random(16)
    names = ["a", "ab", "abc", "abd", "b", "ba", "*", "x-1", "x-12"]
    ops = [o for o in Op if o >= Op.ALL]
    for round_ in range(200):
        bindings = {AclBinding(rnd.choice([RT.TOPIC, RT.GROUP]), rnd.choice(names),
                               rnd.choice([Pat.LITERAL, Pat.PREFIXED]), rnd.choice(["User:a", "User:b", "User:*"]),
                               rnd.choice(["*", "10.0.0.1"]), rnd.choice(ops), rnd.choice([ALLOW, DENY]))
                    for _ in range(rnd.randrange(0, 12))}
        allow_if_none = rnd.random() < 0.5
        a = Authorizer(bindings, {"User:root"}, allow_if_none)
        if bindings and rnd.random() < 0.5:      # the index must also follow removals
            victim = rnd.choice(sorted(bindings, key=str))
            a.remove(AclBindingFilter(victim.resource_type, victim.name, victim.pattern_type, victim.principal,
                                      victim.host, victim.operation, victim.permission))
            bindings.discard(victim)
        for _ in range(30):
            q = (rnd.choice(["User:a", "User:b", "User:root"]), rnd.choice(["10.0.0.1", "10.0.0.2"]),
                 rnd.choice(ops[1:]), rnd.choice([RT.TOPIC, RT.GROUP]), rnd.choice(names + ["abcd", "c"]))
            assert a.authorize(*q) == _reference_decision(bindings, {"User:root"}, allow_if_none, *q), (round_, q)


def test_authorize_by_resource_type_kip679():
    any_write = lambda *bs: Authorizer(bs).authorize_by_resource_type(  # noqa: E731
        "User:alice", "h", Op.WRITE, RT.TOPIC)
    assert not any_write()
    assert any_write(acl(RT.TOPIC, "t", Op.WRITE))
    assert any_write(acl(RT.TOPIC, "t", Op.ALL))
    assert not any_write(acl(RT.TOPIC, "t", Op.READ))
    assert not any_write(acl(RT.TOPIC, "t", Op.WRITE), acl(RT.TOPIC, "t", Op.WRITE, DENY))
    assert not any_write(acl(RT.TOPIC, "tx", Op.WRITE), acl(RT.TOPIC, "t", Op.WRITE, DENY, pattern=Pat.PREFIXED))
    assert any_write(acl(RT.TOPIC, "a", Op.WRITE), acl(RT.TOPIC, "t", Op.WRITE, DENY, pattern=Pat.PREFIXED))
    assert not any_write(acl(RT.TOPIC, "*", Op.WRITE), acl(RT.TOPIC, "*", Op.WRITE, DENY))


def test_authorized_operations_bitfield():
    a = Authorizer([acl(RT.TOPIC, "t", Op.READ), acl(RT.GROUP, "g", Op.ALL)])
    assert a.authorized_operations("User:alice", "h", RT.TOPIC, "t") == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert a.authorized_operations("User:alice", "h", RT.GROUP, "g") == all_operations(RT.GROUP)
    assert all_operations(RT.GROUP) == sum(1 << o for o in (Op.READ, Op.DESCRIBE, Op.DELETE,
                                                              Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS))
    assert a.authorized_operations("User:bob", "h", RT.CLUSTER, "kafka-cluster") == 0


def test_filters_match_any_and_validation():
    lit, pre, star = acl(RT.TOPIC, "foo", Op.READ), acl(RT.TOPIC, "fo", Op.READ, pattern=Pat.PREFIXED), \
        acl(RT.TOPIC, "*", Op.READ)
    other = acl(RT.GROUP, "foo", Op.READ, DENY, principal="User:bob")
    a = Authorizer([lit, pre, star, other])
    assert set(a.describe(AclBindingFilter())) == {lit, pre, star, other}
    assert set(a.describe(AclBindingFilter(RT.TOPIC, "foo", Pat.MATCH))) == {lit, pre, star}
    assert set(a.describe(AclBindingFilter(RT.TOPIC, "foo", Pat.ANY))) == {lit}
    assert set(a.describe(AclBindingFilter(RT.TOPIC, "fo", Pat.PREFIXED))) == {pre}
    assert set(a.describe(AclBindingFilter(principal="User:bob", permission=DENY))) == {other}
    assert a.remove(AclBindingFilter(RT.TOPIC, "foo", Pat.MATCH)) and set(a.bindings()) == {other}
    for bad in (acl(RT.ANY, "t", Op.READ), acl(RT.TOPIC, "t", Op.ANY), acl(RT.TOPIC, "", Op.READ),
                acl(RT.TOPIC, "t", Op.READ, pattern=Pat.MATCH), acl(RT.TOPIC, "t", Op.READ, Perm.ANY),
                acl(RT.CLUSTER, "my-cluster", Op.ALTER), acl(RT.TOPIC, "t", Op.READ, principal="alice")):
        with pytest.raises(InvalidAclError):
            bad.validate()
    acl(RT.CLUSTER, "kafka-cluster", Op.ALTER).validate()
    with pytest.raises(InvalidAclError):
        AclBindingFilter(RT.UNKNOWN).validate()


def test_authorizer_config_names():
    from kohort.broker.config import BrokerConfig, BrokerConfigError
    cfg = BrokerConfig.from_properties({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                        "super.users": "User:a;User:b", "allow.everyone.if.no.acl.found": "true"})
    assert cfg["allow.everyone.if.no.acl.found"] is True
    with pytest.raises(BrokerConfigError, match="StandardAuthorizer"):
        BrokerConfig.from_properties({"authorizer.class.name": "com.example.MyAuthorizer"})


# -- kohort broker with ACLs over SASL_SSL ----------------------------------------------------------------
@pytest.fixture(scope="module")
def acl_broker(pki, tmp_path_factory):  # noqa: F811
    data = tmp_path_factory.mktemp("acl-data")
    from kohort.broker.security import ScramStore
    from kohort.protocol.sasl import make_credential
    store = ScramStore(str(data))          # what `kohort users add --data-dir` writes
    for user, pw in PASSWORDS.items():
        store.upsert(user, "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", pw, 4096))
    port = free_port()
    plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
             + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
    config = {
        "listeners": f"SASL_SSL://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "server-keystore.pem"),
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": "20",
        "group.initial.rebalance.delay.ms": "300",
    }
    b = KohortBroker(str(data), port=port, config=config)
    with b:
        b.pki = pki
        b.bs = f"127.0.0.1:{port}"
        _set_up_acls(b)
        yield b


def _set_up_acls(b) -> None:
    """The topics and ACLs every test here starts from, made as admin with kohort's CLI."""
    from kohort.client.admin import Admin
    admin = _x(settings(b, "admin"))
    with Admin(kohort_conf(b, "admin")) as a:
        made = a.create_topics({t: 2 for t in ("paid", "secret", "alice-ck", "alice-kp", "alice-kcat",
                                               "alice-java", "alice-kohort")})
        assert not any(made.values()), made
    for args in (["--allow-principal", "User:alice", "--producer", "--consumer", "--topic", "paid",
                  "--group", "paid-g"],
                 ["--allow-principal", "User:alice", "--producer", "--consumer", "--topic", "alice-",
                  "--group", "alice-", "--resource-pattern-type", "prefixed"],
                 ["--allow-principal", "User:bob", "--operation", "Read", "--topic", "paid"],
                 ["--allow-principal", "User:bob", "--operation", "Describe", "--topic", "bob-new"],
                 ["--allow-principal", "User:alice", "--operation", "Write", "--transactional-id", "alice-tx"]):
        r = _kohort("acls", "add", "-b", b.bs, *admin, *args)
        assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def kafka_acl(pki):  # noqa: F811
    """Apache Kafka 4.3.1 with a SASL_SSL/SCRAM-SHA-256 listener (PEM keystore), StandardAuthorizer and
    the same users, topics and ACLs (the PLAINTEXT listeners of the test bed are ANONYMOUS: super user)."""
    from tests.helpers.kafka_cluster import KafkaCluster
    cfg = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": str(pki / "server-keystore.pem"),
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin;User:ANONYMOUS",
        "auto.create.topics.enable": "true",        # as kohort broker's default (the test bed's is false)
    }
    fmt = []
    for user, pw in PASSWORDS.items():
        fmt += ["--add-scram", f"SCRAM-SHA-256=[name={user},password={pw}]"]
    with KafkaCluster(1, extra_config=cfg, extra_listeners=[("SASL_SSL", "SASL_SSL")], format_args=fmt) as kc:
        kc.pki = pki
        kc.bs = kc.nodes[0].listener_address("SASL_SSL")
        _set_up_acls(kc)
        yield kc


@pytest.fixture(params=["kohort", pytest.param("kafka", marks=pytest.mark.slow)])
def cluster(request):
    """The same checks on kohort broker and (slow) Apache Kafka 4.3.1."""
    return request.getfixturevalue("acl_broker" if request.param == "kohort" else "kafka_acl")


def settings(b, user: str, mech: str = "SCRAM-SHA-256") -> dict:
    """librdkafka-named client settings for `user` on the SASL_SSL listener."""
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": mech, "sasl.username": user,
            "sasl.password": PASSWORDS[user], "ssl.ca.location": str(b.pki / "ca.pem")}


def kohort_conf(b, user: str, **extra) -> dict:
    return {"bootstrap.servers": b.bs, **settings(b, user), **extra}


def test_kohort_acls_cli_lists_adds_and_removes(cluster):
    b = cluster
    admin = _x(settings(b, "admin"))
    r = _kohort("acls", "list", "-b", b.bs, *admin, "--topic", "paid")
    assert r.returncode == 0, r.stderr
    assert "ResourcePattern(resourceType=TOPIC, name=paid, patternType=LITERAL)" in r.stdout
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in r.stdout
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in r.stdout
    r = _kohort("acls", "list", "-b", b.bs, *admin, "--json", "--principal", "User:alice",
                "--group", "alice-x", "--resource-pattern-type", "match")
    assert json.loads(r.stdout) == [{"resource_type": "GROUP", "name": "alice-", "pattern_type": "PREFIXED",
                                     "principal": "User:alice", "host": "*", "operation": "READ",
                                     "permission": "ALLOW"}]
    # add and remove a DENY; a bad cluster name and a non-admin are refused with Kafka's codes
    deny = ["--deny-principal", "User:carl", "--operation", "Describe", "--topic", "tmp-t",
            "--deny-host", "10.1.2.3"]
    assert _kohort("acls", "add", "-b", b.bs, *admin, *deny).returncode == 0
    r = _kohort("acls", "remove", "-b", b.bs, *admin, "--json", "--topic", "tmp-t")
    assert r.returncode == 0 and [x["host"] for x in json.loads(r.stdout)] == ["10.1.2.3"], r.stdout + r.stderr
    r = _kohort("acls", "list", "-b", b.bs, *_x(settings(b, "alice")))
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    r = _kohort("acls", "add", "-b", b.bs, *_x(settings(b, "alice")), "--allow-principal", "User:alice",
                "--operation", "All", "--cluster")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    r = _kohort("acls", "add", "-b", b.bs, *admin, "--allow-principal", "alice", "--operation", "Read",
                "--topic", "x")
    assert r.returncode == 1 and "TYPE:NAME" in r.stderr


# -- every API, by the codes Kafka answers ---------------------------------------------------------------
def _call(b, user: str, request, max_version=None):
    from kohort.client.admin import Admin
    with Admin(kohort_conf(b, user)) as a:
        return a._call(None, request, 20, max_version=max_version)


def test_unauthorized_principal_gets_kafkas_codes_from_each_api(cluster):
    from kohort.protocol.messages import REQUESTS
    b = cluster
    M = {k: REQUESTS[k] for k in REQUESTS}
    Metadata, Produce, Fetch, ListOffsets = M[3], M[0], M[1], M[2]
    # Metadata: all topics hides what mallory may not describe; named -> 29 (existing or not)
    md = _call(b, "mallory", Metadata(topics=None, allow_auto_topic_creation=False))
    assert md.topics == []
    md = _call(b, "alice", Metadata(topics=None, allow_auto_topic_creation=False))
    assert {t.name for t in md.topics} == {"paid", "alice-ck", "alice-kp", "alice-kcat", "alice-java",
                                          "alice-kohort"}
    T = Metadata.MetadataRequestTopic
    md = _call(b, "mallory", Metadata(topics=[T(name="paid"), T(name="nope")], allow_auto_topic_creation=True,
                                      include_topic_authorized_operations=True))
    assert [(t.name, t.error_code, t.partitions) for t in md.topics] == [
        ("paid", E.TOPIC_AUTHORIZATION_FAILED, []), ("nope", E.TOPIC_AUTHORIZATION_FAILED, [])]
    md = _call(b, "alice", Metadata(topics=[T(name="paid")], include_topic_authorized_operations=True,
                                    include_cluster_authorized_operations=True, allow_auto_topic_creation=False),
               max_version=10)
    assert md.topics[0].topic_authorized_operations == sum(1 << o for o in (Op.READ, Op.WRITE, Op.CREATE,
                                                                            Op.DESCRIBE))
    assert md.cluster_authorized_operations == 0
    # alice may DESCRIBE alice-new (prefixed READ/WRITE) and CREATE it: auto-created; bob may not create
    md = _call(b, "alice", Metadata(topics=[T(name="alice-auto")], allow_auto_topic_creation=True))
    # (kohort creates it; Apache Kafka 4.3.1 answered UNKNOWN_TOPIC_OR_PARTITION here, also with
    # auto.create.topics.enable=true: not an authorization error either way)
    assert md.topics[0].error_code in (E.NONE, E.LEADER_NOT_AVAILABLE, E.UNKNOWN_TOPIC_OR_PARTITION)
    # bob may describe bob-new (missing) but not create it: auto-creation needs CREATE -> 29
    md = _call(b, "bob", Metadata(topics=[T(name="bob-new")], allow_auto_topic_creation=True))
    assert md.topics[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    md = _call(b, "bob", Metadata(topics=[T(name="bob-new")], allow_auto_topic_creation=False))
    assert md.topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    # Produce: WRITE per topic
    from kohort.protocol.records import build_batch
    batch = build_batch([(b"k", b"v", [], int(time.time() * 1000))])
    PT = Produce.TopicProduceData
    resp = _call(b, "mallory", Produce(acks=-1, timeout_ms=5000, topic_data=[
        PT(name="paid", partition_data=[PT.PartitionProduceData(index=0, records=batch)])]), max_version=12)
    assert resp.responses[0].partition_responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    resp = _call(b, "bob", Produce(acks=-1, timeout_ms=5000, topic_data=[
        PT(name="paid", partition_data=[PT.PartitionProduceData(index=0, records=batch)])]), max_version=12)
    assert resp.responses[0].partition_responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    # Fetch: READ per topic (nothing read); ListOffsets: DESCRIBE
    FT = Fetch.FetchTopic
    fetch = Fetch(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[
        FT(topic="paid", partitions=[FT.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], session_id=0, session_epoch=-1)
    resp = _call(b, "mallory", fetch, max_version=12)
    p = resp.responses[0].partitions[0]
    assert (p.error_code, p.records) in ((E.TOPIC_AUTHORIZATION_FAILED, b""), (E.TOPIC_AUTHORIZATION_FAILED, None))
    assert _call(b, "bob", fetch, max_version=12).responses[0].partitions[0].error_code == E.NONE
    LT = ListOffsets.ListOffsetsTopic
    resp = _call(b, "mallory", ListOffsets(replica_id=-1, isolation_level=0, topics=[
        LT(name="paid", partitions=[LT.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    assert resp.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    # CreateTopics (CREATE), DeleteTopics (DELETE), DescribeConfigs (DESCRIBE_CONFIGS), CreatePartitions
    CT = M[19]
    resp = _call(b, "mallory", CT(topics=[CT.CreatableTopic(name="m-new", num_partitions=1, replication_factor=1,
                                                             assignments=[], configs=[])], timeout_ms=5000))
    assert resp.topics[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    resp = _call(b, "mallory", M[20](topic_names=["paid"], timeout_ms=5000), max_version=5)
    assert resp.responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    DC = M[32]
    resp = _call(b, "mallory", DC(resources=[DC.DescribeConfigsResource(resource_type=2, resource_name="paid",
                                                                         configuration_keys=None),
                                             DC.DescribeConfigsResource(resource_type=4, resource_name="",
                                                                         configuration_keys=None)]))
    assert [r.error_code for r in resp.results] == [E.TOPIC_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED]
    # groups: FindCoordinator (DESCRIBE group / txn id), JoinGroup, OffsetCommit, OffsetFetch, DescribeGroups,
    # DeleteGroups; InitProducerId (idempotent: 31; transactional: 53); CreateAcls / DescribeAcls (31)
    FC = M[10]
    resp = _call(b, "mallory", FC(key_type=0, coordinator_keys=["paid-g"]))
    assert resp.coordinators[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    resp = _call(b, "mallory", FC(key_type=1, coordinator_keys=["tx"]))
    assert resp.coordinators[0].error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert _join(b, "mallory", "paid-g") == E.GROUP_AUTHORIZATION_FAILED
    assert _commit(b, "mallory", "paid-g", "paid") == E.GROUP_AUTHORIZATION_FAILED
    OF = M[9]
    resp = _call(b, "mallory", OF(group_id="paid-g", topics=None, require_stable=False), max_version=7)
    assert resp.error_code == E.GROUP_AUTHORIZATION_FAILED
    DG = M[15]
    resp = _call(b, "mallory", DG(groups=["paid-g"], include_authorized_operations=True))
    assert resp.groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    resp = _call(b, "mallory", M[42](groups_names=["paid-g"]))
    assert resp.results[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    def init_pid(user, tid):
        deadline = time.monotonic() + 30        # Kafka: COORDINATOR_LOAD_IN_PROGRESS until it has ids
        while True:
            code = _call(b, user, M[22](transactional_id=tid, transaction_timeout_ms=60000)).error_code
            if code not in (E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE) \
                    or time.monotonic() > deadline:
                return code
            time.sleep(0.5)
    assert init_pid("mallory", None) == E.CLUSTER_AUTHORIZATION_FAILED
    assert init_pid("bob", None) == E.CLUSTER_AUTHORIZATION_FAILED       # READ is not WRITE on any topic
    assert init_pid("alice", None) == E.NONE                             # WRITE on some topic (KIP-679)
    assert init_pid("alice", "tx") == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # TxnOffsetCommit: WRITE on the transactional id (53), READ on the group (30), READ on each topic (29);
    # WriteTxnMarkers: CLUSTER_ACTION (31)
    TO = M[28]

    def txn_commit(tid, group, topic):
        resp = _call(b, "alice", TO(transactional_id=tid, group_id=group, producer_id=1, producer_epoch=0,
                                    member_id="", topics=[TO.Topic(name=topic, partitions=[TO.Topic.Partition(
                                        partition_index=0, committed_offset=0, committed_metadata="")])]),
                     max_version=3)
        return {t.name: t.partitions[0].error_code for t in resp.topics}
    assert txn_commit("tx", "alice-g", "alice-kohort") == {"alice-kohort": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    assert txn_commit("alice-tx", "secret-g", "alice-kohort") == {"alice-kohort": E.GROUP_AUTHORIZATION_FAILED}
    assert txn_commit("alice-tx", "alice-g", "secret") == {"secret": E.TOPIC_AUTHORIZATION_FAILED}
    WM = M[27]
    resp = _call(b, "alice", WM(markers=[WM.WritableTxnMarker(
        producer_id=1, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[WM.WritableTxnMarker.WritableTxnMarkerTopic(name="alice-kohort", partition_indexes=[0])])]))
    assert resp.markers[0].topics[0].partitions[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    CA = M[30]
    resp = _call(b, "alice", CA(creations=[CA.AclCreation(resource_type=2, resource_name="paid",
                                                          resource_pattern_type=3, principal="User:alice",
                                                          host="*", operation=Op.ALL, permission_type=ALLOW)]))
    assert resp.results[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    resp = _call(b, "alice", M[29](resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                   principal_filter=None, host_filter=None, operation=1, permission_type=1))
    assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    # KIP-848: READ on the group, DESCRIBE on each subscribed topic (Kafka 4); describe: DESCRIBE on the group
    CGH = M[68]
    hb = lambda user, topics: _call(b, user, CGH(group_id="alice-848", member_id=uuid.uuid4().hex[:22],  # noqa
                                                 member_epoch=0, rebalance_timeout_ms=10000,
                                                 subscribed_topic_names=topics, topic_partitions=[]))
    assert hb("mallory", ["paid"]).error_code == E.GROUP_AUTHORIZATION_FAILED
    assert hb("alice", ["secret"]).error_code == E.TOPIC_AUTHORIZATION_FAILED
    resp = _call(b, "mallory", M[69](group_ids=["alice-848"], include_authorized_operations=True))
    assert resp.groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    # more topic checks: OffsetDelete (DELETE group), DeleteRecords (DELETE), CreatePartitions (ALTER),
    # IncrementalAlterConfigs (ALTER_CONFIGS), OffsetForLeaderEpoch (DESCRIBE), DescribeProducers (READ);
    # transactions (DESCRIBE on the id); SCRAM users (cluster DESCRIBE)
    OD = M[47]
    resp = _call(b, "mallory", OD(group_id="paid-g", topics=[OD.Topic(name="paid", partitions=[
        OD.Topic.Partition(partition_index=0)])]))
    assert resp.error_code == E.GROUP_AUTHORIZATION_FAILED
    DR = M[21]
    resp = _call(b, "alice", DR(topics=[DR.DeleteRecordsTopic(name="paid", partitions=[
        DR.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=5000))
    assert resp.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    CP = M[37]
    resp = _call(b, "alice", CP(topics=[CP.CreatePartitionsTopic(name="paid", count=5, assignments=None)],
                                timeout_ms=5000, validate_only=True))
    assert resp.results[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    IA = M[44]
    resp = _call(b, "alice", IA(resources=[IA.AlterConfigsResource(resource_type=2, resource_name="paid", configs=[
        IA.AlterConfigsResource.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])],
        validate_only=True))
    assert resp.responses[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    OE = M[23]
    resp = _call(b, "mallory", OE(replica_id=-1, topics=[OE.OffsetForLeaderTopic(topic="paid", partitions=[
        OE.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])]))
    assert resp.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    DPR = M[61]
    resp = _call(b, "mallory", DPR(topics=[DPR.TopicRequest(name="paid", partition_indexes=[0])]))
    assert resp.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    resp = _call(b, "mallory", M[65](transactional_ids=["tx"]))
    assert resp.transaction_states[0].error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    resp = _call(b, "mallory", M[50](users=[M[50].UserName(name="alice")]))
    assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    if isinstance(b, KohortBroker):
        # all users (users=null): Apache Kafka 4.3.1 sends mallory no answer at all (20 s timeouts; named
        # users get 31 as above), kohort answers 31
        assert _call(b, "mallory", M[50](users=None)).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    # ListGroups never fails: only the groups one may describe
    _commit(b, "admin", "secret-g", "secret")
    # authorized_operations (KIP-430): DescribeGroups, DescribeCluster
    resp = _call(b, "admin", DG(groups=["secret-g"], include_authorized_operations=True))
    assert resp.groups[0].authorized_operations == all_operations(RT.GROUP)
    DCL = M[60]
    assert _call(b, "admin", DCL(include_cluster_authorized_operations=True)).cluster_authorized_operations == \
        all_operations(RT.CLUSTER)
    assert _call(b, "alice", DCL(include_cluster_authorized_operations=True)).cluster_authorized_operations == 0
    assert "secret-g" not in {g.group_id for g in _call(b, "alice", M[16](states_filter=[])).groups}
    assert "secret-g" in {g.group_id for g in _call(b, "admin", M[16](states_filter=[])).groups}


def _join(b, user, group) -> int:
    """JoinGroup's code, retried while the coordinator loads (Kafka creates __consumer_offsets first)."""
    from kohort.protocol.messages import REQUESTS
    JG = REQUESTS[11]
    # FindCoordinator makes Apache Kafka create __consumer_offsets (until then: NOT_COORDINATOR)
    _call(b, "admin", REQUESTS[10](key_type=0, coordinator_keys=[group]))
    deadline = time.monotonic() + 30
    while True:
        resp = _call(b, user, JG(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                 member_id="", group_instance_id=None, protocol_type="consumer",
                                 protocols=[JG.Protocol(name="range", metadata=b"")]))
        if resp.error_code not in (E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                                   E.NOT_COORDINATOR) or time.monotonic() > deadline:
            return resp.error_code
        time.sleep(0.5)


def _commit(b, user, group, topic) -> int:
    from kohort.protocol.messages import REQUESTS
    OC = REQUESTS[8]
    resp = _call(b, user, OC(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                             group_instance_id=None, retention_time_ms=-1, topics=[OC.Topic(
                                 name=topic, partitions=[OC.Topic.Partition(
                                     partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                     committed_metadata="")])]), max_version=9)
    return resp.topics[0].partitions[0].error_code


def test_a_principal_without_read_on_the_group_gets_group_authorization_failed(cluster):
    """bob may READ topic `paid` but has no ACL on any group: JoinGroup and OffsetCommit answer 30,
    and kohort's consumer raises GroupAuthorizationFailedError from poll() and commit()."""
    from kohort.client.consumer import Consumer
    from kohort.errors import GroupAuthorizationFailedError
    b = cluster
    assert _join(b, "bob", "paid-g") == E.GROUP_AUTHORIZATION_FAILED
    assert _commit(b, "bob", "paid-g", "paid") == E.GROUP_AUTHORIZATION_FAILED
    assert _join(b, "alice", "paid-g") == E.MEMBER_ID_REQUIRED            # authorized: the normal first answer
    c = Consumer(kohort_conf(b, "bob", **{"group.id": "paid-g", "auto.offset.reset": "earliest"}))
    try:
        c.subscribe(["paid"])
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                c.poll(0.5)
    finally:
        c.close()


# -- kohort's client: authorized and not ------------------------------------------------------------------
def test_kohort_client_authorized_produces_consumes_in_a_group_and_commits(cluster):
    from kohort.client.consumer import Consumer
    from kohort.client.producer import Producer
    from kohort.structs import TopicPartition
    b = cluster
    p = Producer(kohort_conf(b, "alice"))
    try:
        for i in range(4):
            p.send("alice-kohort", value=b"v%d" % i, partition=i % 2)
        p.flush(30)
    finally:
        p.close()
    c = Consumer(kohort_conf(b, "alice", **{"group.id": "alice-g1", "auto.offset.reset": "earliest",
                                            "enable.auto.commit": False}))
    try:
        c.subscribe(["alice-kohort"])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.5)]
        c.commit()
        committed = c.committed([TopicPartition("alice-kohort", 0), TopicPartition("alice-kohort", 1)])
    finally:
        c.close()
    assert sorted(got) == [b"v0", b"v1", b"v2", b"v3"]
    assert sorted(o.offset for o in committed.values()) == [2, 2]


def test_kohort_client_unauthorized_fails_fast_with_kafkas_errors(cluster):
    """mallory: the producer's send fails with TopicAuthorizationFailedError at once (Java's
    Metadata.maybeThrowExceptionForTopic; not retried until max.block.ms); a consumer raises
    TopicAuthorizationFailedError from poll() for a topic it may not describe and
    GroupAuthorizationFailedError for a group it may not read (bob), also from commit()."""
    from kohort.client.consumer import Consumer
    from kohort.client.producer import Producer
    from kohort.errors import (
        ClusterAuthorizationFailedError, GroupAuthorizationFailedError, TopicAuthorizationFailedError,
    )
    from kohort.structs import TopicPartition
    b = cluster
    p = Producer(kohort_conf(b, "mallory", **{"max.block.ms": 60000, "enable.idempotence": False}))
    try:
        # may not even describe it: send() raises the authorization error itself, where it used to
        # wait max.block.ms (60 s here) and then report a timeout
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("paid", value=b"x")
    finally:
        p.close()
    p = Producer(kohort_conf(b, "bob", **{"enable.idempotence": False}))     # may describe, not write
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("paid", value=b"x").result(30)
    finally:
        p.close()
    p = Producer(kohort_conf(b, "bob", **{"enable.idempotence": True}))      # InitProducerId: 31, fatal
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            p.send("paid", value=b"x").result(30)
    finally:
        p.close()

    def poll_raises(user, group, topic, exc, match):
        c = Consumer(kohort_conf(b, user, **{"group.id": group, "auto.offset.reset": "earliest"}))
        try:
            c.subscribe([topic])
            with pytest.raises(exc, match=match):
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    assert c.poll(0.5) == []
        finally:
            c.close()
    poll_raises("alice", "alice-g2", "secret", TopicAuthorizationFailedError, "secret")
    poll_raises("bob", "paid-g", "paid", GroupAuthorizationFailedError, "paid-g")
    c = Consumer(kohort_conf(b, "bob", **{"group.id": "paid-g", "auto.offset.reset": "earliest"}))
    try:
        c.assign([TopicPartition("paid", 0)])
        with pytest.raises(GroupAuthorizationFailedError):
            c.commit({TopicPartition("paid", 0): 0})
    finally:
        c.close()


# -- peers: librdkafka (confluent-kafka), kafka-python, kcat, Java ---------------------------------------
CK_SCRIPT = textwrap.dedent("""
    import json, sys, time, confluent_kafka as ck
    conf, topic, group = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    out = {"delivered": 0, "delivery_errors": [], "got": [], "consumer_errors": [], "committed": []}
    def report(err, msg):
        if err is None:
            out["delivered"] += 1
        else:
            out["delivery_errors"].append(err.name())
    p = ck.Producer({**conf, "message.timeout.ms": 20000})
    for i in range(3):
        p.produce(topic, b"ck-%d" % i, on_delivery=report)
    p.flush(30)
    c = ck.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(out["got"]) < 3:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            out["consumer_errors"].append(m.error().name())
            if "AUTHORIZATION" in m.error().name():
                break
            continue
        out["got"].append(m.value().decode())
    if len(out["got"]) == 3:
        c.commit(asynchronous=False)
        out["committed"] = sorted(tp.offset for tp in c.committed(c.assignment(), timeout=10))
    c.close()
    print(json.dumps(out))
""")


def test_confluent_kafka_authorized_and_unauthorized(acl_broker):
    b = acl_broker

    def run(user, topic, group):
        conf = {"bootstrap.servers": b.bs, **settings(b, user)}
        r = subprocess.run([PY, "-c", CK_SCRIPT, json.dumps(conf), topic, group], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])
    ok = run("alice", "alice-ck", "alice-ck-g")
    assert ok["delivered"] == 3 and sorted(ok["got"]) == ["ck-0", "ck-1", "ck-2"], ok
    # committed: the next offset per partition (-1001 = nothing committed for an empty partition)
    assert sum(o for o in ok["committed"] if o >= 0) == 3, ok
    assert not ok["delivery_errors"] and not ok["consumer_errors"], ok
    denied = run("mallory", "paid", "paid-g")
    assert denied["delivered"] == 0 and set(denied["delivery_errors"]) == {"TOPIC_AUTHORIZATION_FAILED"}, denied
    assert denied["got"] == [] and denied["consumer_errors"], denied
    assert set(denied["consumer_errors"]) <= {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"}, denied
    bob = run("bob", "paid", "paid-g")        # may read the topic, not use the group
    assert bob["got"] == [] and "GROUP_AUTHORIZATION_FAILED" in bob["consumer_errors"], bob


KP_SCRIPT = textwrap.dedent("""
    import json, sys, kafka
    kw, topic, group = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    out = {}
    try:
        p = kafka.KafkaProducer(max_block_ms=10000, **kw)
        p.send(topic, b"kp-1").get(20)
        p.close()
        out["produced"] = True
    except Exception as e:
        out["produce_error"] = type(e).__name__
    try:
        c = kafka.KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                consumer_timeout_ms=5000, **kw)
        out["got"] = [m.value.decode() for m in c]
        c.commit()
        c.close()
    except Exception as e:
        out["consume_error"] = type(e).__name__
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_kafka_python_authorized_and_unauthorized(acl_broker):
    b = acl_broker

    def run(user, topic, group):
        kw = {"bootstrap_servers": b.bs, "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
              "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user], "request_timeout_ms": 8000,
              "ssl_cafile": str(b.pki / "ca.pem")}
        r = subprocess.run([PY, "-c", KP_SCRIPT, json.dumps(kw), topic, group], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])
    assert run("alice", "alice-kp", "alice-kp-g") == {"produced": True, "got": ["kp-1"]}
    denied = run("mallory", "paid", "paid-g")
    assert denied["produce_error"] == "TopicAuthorizationFailedError", denied
    assert denied.get("consume_error") in ("TopicAuthorizationFailedError", "GroupAuthorizationFailedError"), denied
    assert run("bob", "paid", "paid-g").get("consume_error") == "GroupAuthorizationFailedError"


AIO_SCRIPT = textwrap.dedent("""
    import asyncio, json, logging, sys
    logging.basicConfig(level=logging.CRITICAL)
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    kw, cafile, topic, group = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    async def main():
        kw["ssl_context"] = create_ssl_context(cafile=cafile)
        out = {}
        p = AIOKafkaProducer(request_timeout_ms=8000, **kw)
        try:
            await p.start()
            await asyncio.wait_for(p.send_and_wait(topic, b"aio-1"), 20)
            out["produced"] = True
        except Exception as e:
            out["produce_error"] = type(e).__name__
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             **kw)
        try:
            await c.start()
            got = []
            for _ in range(40):
                for recs in (await c.getmany(timeout_ms=500)).values():
                    got += [r.value.decode() for r in recs]
                if got:
                    break
            await c.commit()
            out["got"] = got
        except Exception as e:
            out["consume_error"] = type(e).__name__
        finally:
            await c.stop()
        return out
    print(json.dumps(asyncio.run(main())))
""")


def test_aiokafka_authorized_and_unauthorized(acl_broker):
    """aiokafka over SASL_SSL/SCRAM with ACLs: alice produces, consumes in a group and commits; mallory
    (no ACL) and bob (READ on the topic, nothing on the group) get Kafka's authorization errors."""
    from kohort.client.admin import Admin
    b = acl_broker
    with Admin(kohort_conf(b, "admin")) as a:
        assert a.create_topics({"alice-aio": 1})["alice-aio"] is None

    def run(user, topic, group):
        kw = {"bootstrap_servers": b.bs, "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
              "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}
        r = subprocess.run([PY, "-c", AIO_SCRIPT, json.dumps(kw), str(b.pki / "ca.pem"), topic, group],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])
    assert run("alice", "alice-aio", "alice-aio-g") == {"produced": True, "got": ["aio-1"]}
    denied = run("mallory", "paid", "paid-g")
    assert denied["produce_error"] == "TopicAuthorizationFailedError", denied
    assert denied.get("consume_error") in ("TopicAuthorizationFailedError", "GroupAuthorizationFailedError"), denied
    assert run("bob", "paid", "paid-g").get("consume_error") == "GroupAuthorizationFailedError"


def test_kcat_authorized_and_unauthorized(acl_broker):
    """kcat 1.7.1 (librdkafka 2.0.2) cannot do SCRAM with a CVE-2024-56128-fixed broker: PLAIN here."""
    from tests.conftest import require_kcat
    require_kcat()
    b = acl_broker

    def kcat(user, *args, input=None):
        x = _x(settings(b, user, "PLAIN"))
        return subprocess.run(["kcat", "-b", b.bs, *[a.replace("sasl.mechanism=", "sasl.mechanisms=") for a in x],
                               *args], input=input, capture_output=True, text=True, timeout=60)
    r = kcat("alice", "-P", "-t", "alice-kcat", "-p", "0", input="k1\nk2\n")
    assert r.returncode == 0, r.stderr
    r = kcat("alice", "-C", "-t", "alice-kcat", "-p", "0", "-o", "beginning", "-c", "2", "-e")
    assert r.returncode == 0 and r.stdout.split() == ["k1", "k2"], r.stderr
    r = kcat("alice", "-G", "alice-kcat-g", "-o", "beginning", "-c", "2", "-e", "alice-kcat")
    assert r.stdout.split() == ["k1", "k2"], r.stderr
    r = kcat("mallory", "-C", "-t", "paid", "-p", "0", "-o", "beginning", "-e")
    assert r.returncode != 0 and r.stdout == "" and "authorization failed" in r.stderr.lower(), r.stderr
    r = kcat("mallory", "-P", "-t", "paid", "-p", "0", input="m\n")
    assert r.returncode != 0 and "authorization failed" in r.stderr.lower(), r.stderr
    r = kcat("mallory", "-L")
    assert r.returncode == 0 and "paid" not in r.stdout and "secret" not in r.stdout, r.stdout + r.stderr


def _java_props(b, tmp_path, user: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text("\n".join([
        "security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-256",
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
        f'username="{user}" password="{PASSWORDS[user]}";',
        "ssl.truststore.type=PEM", f"ssl.truststore.location={b.pki / 'ca.pem'}", ""]))
    return str(path)


@pytest.mark.slow
def test_java_client_authorized_and_unauthorized(acl_broker, tmp_path):
    """Kafka's console producer/consumer (Java client 4.3.1): alice produces, consumes in a group and
    commits; mallory's consumer ends on TopicAuthorizationException / GroupAuthorizationException with
    nothing read."""
    from tests.helpers.kafka_cluster import CONSOLE_CONSUMER, CONSOLE_PRODUCER, CONSUMER_GROUPS, require_peers, run_tool
    require_peers()
    b = acl_broker
    alice = _java_props(b, tmp_path, "alice")
    run_tool(CONSOLE_PRODUCER, "--bootstrap-server", b.bs, "--topic", "alice-java", "--command-config", alice,
             input="j1\nj2\n", timeout=90)
    r = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", b.bs, "--topic", "alice-java", "--group", "alice-java-g",
                 "--from-beginning", "--max-messages", "2", "--command-config", alice, "--timeout-ms", "20000",
                 timeout=90)
    assert sorted(r.stdout.split()) == ["j1", "j2"]
    r = run_tool(CONSUMER_GROUPS, "--bootstrap-server", b.bs, "--describe", "--group", "alice-java-g",
                 "--command-config", _java_props(b, tmp_path, "admin"), timeout=90)
    rows = [line.split() for line in r.stdout.splitlines() if line.split()[1:2] == ["alice-java"]]
    assert sum(int(row[3]) for row in rows if row[3].isdigit()) == 2, r.stdout
    r = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", b.bs, "--topic", "paid", "--group", "paid-g",
                 "--from-beginning", "--max-messages", "1", "--command-config", _java_props(b, tmp_path, "mallory"),
                 "--timeout-ms", "15000", timeout=90, check=False)
    out = r.stdout + r.stderr
    assert ("TopicAuthorizationException" in out or "GroupAuthorizationException" in out), out[-3000:]
    assert "Processed a total of 0 messages" in out, out[-3000:]
    r = run_tool(CONSOLE_PRODUCER, "--bootstrap-server", b.bs, "--topic", "paid", "--command-config",
                 _java_props(b, tmp_path, "mallory"), input="m\n", timeout=90, check=False)
    assert "TopicAuthorizationException" in r.stdout + r.stderr or "TOPIC_AUTHORIZATION_FAILED" in r.stdout + r.stderr, \
        (r.stdout + r.stderr)[-3000:]


ACL_COMMAND = "org.apache.kafka.tools.AclCommand"


@pytest.mark.slow
def test_kafka_acls_tool_adds_lists_and_removes_acls_on_kohort_broker(acl_broker, tmp_path):
    """Kafka 4.3.1's kafka-acls (org.apache.kafka.tools.AclCommand) against kohort broker; what it adds
    takes effect at the next request (carl may then describe the topic)."""
    from tests.helpers.kafka_cluster import require_peers, run_tool
    require_peers()
    b = acl_broker
    admin = _java_props(b, tmp_path, "admin")
    common = ["--bootstrap-server", b.bs, "--command-config", admin]
    assert _call(b, "mallory", _metadata_all()).topics == []
    run_tool(ACL_COMMAND, *common, "--add", "--allow-principal", "User:mallory", "--operation", "Describe",
             "--topic", "pa", "--resource-pattern-type", "prefixed", timeout=90)
    run_tool(ACL_COMMAND, *common, "--add", "--deny-principal", "User:mallory", "--operation", "Read",
             "--topic", "paid", timeout=90)
    r = run_tool(ACL_COMMAND, *common, "--list", "--topic", "paid", "--resource-pattern-type", "match", timeout=90)
    assert "name=pa, patternType=PREFIXED" in r.stdout and "operation=DESCRIBE, permissionType=ALLOW" in r.stdout
    assert "principal=User:mallory, host=*, operation=READ, permissionType=DENY" in r.stdout, r.stdout
    assert [t.name for t in _call(b, "mallory", _metadata_all()).topics] == ["paid"]
    run_tool(ACL_COMMAND, *common, "--remove", "--force", "--topic", "pa", "--resource-pattern-type", "prefixed",
             timeout=90)
    run_tool(ACL_COMMAND, *common, "--remove", "--force", "--deny-principal", "User:mallory", "--operation", "Read",
             "--topic", "paid", timeout=90)
    r = run_tool(ACL_COMMAND, *common, "--list", "--principal", "User:mallory", timeout=90)
    assert "principal=User:mallory" not in r.stdout, r.stdout
    assert _call(b, "mallory", _metadata_all()).topics == []
    # a non-admin is refused
    r = run_tool(ACL_COMMAND, "--bootstrap-server", b.bs, "--command-config", _java_props(b, tmp_path, "alice"),
                 "--list", timeout=90, check=False)
    assert "ClusterAuthorizationException" in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]


def _metadata_all():
    from kohort.protocol.messages.metadata import MetadataRequest
    return MetadataRequest(topics=None, allow_auto_topic_creation=False)


# -- durability ------------------------------------------------------------------------------------------
def test_acls_survive_a_kill_and_a_damaged_file_stops_the_broker(tmp_path):
    """CreateAcls answers after acls.json is written and fsynced: the ACLs are back after SIGKILL +
    restart and decide at once; an unreadable file refuses to start (no ACLs would deny or, with
    allow.everyone.if.no.acl.found, allow everything)."""
    from kohort.client.admin import Admin
    from kohort.errors import SecurityDisabledError
    plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
             'user_admin="a-pw" user_dora="d-pw";')
    port = free_port()
    config = {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "PLAIN",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain, "authorizer.class.name": STANDARD,
              "super.users": "User:admin"}

    def conf(user, pw):
        return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": pw}
    topic_read = acl(RT.TOPIC, "d-", Op.READ, principal="User:dora", pattern=Pat.PREFIXED)
    deny = acl(RT.GROUP, "*", Op.ALL, DENY, principal="User:dora", host="127.0.0.1")
    b = KohortBroker(str(tmp_path / "data"), port=port, config=config)
    with b:
        with Admin(conf("admin", "a-pw")) as a:
            a.create_topics(["d-one"])
            a.create_acls([topic_read, deny, topic_read])      # a duplicate is a no-op
            assert set(a.describe_acls()) == {topic_read, deny}
        b.kill()
        b.start()
        with Admin(conf("admin", "a-pw")) as a:
            assert set(a.describe_acls()) == {topic_read, deny}
            assert a.describe_acls(AclBindingFilter(RT.GROUP, "g", Pat.MATCH)) == [deny]
        with Admin(conf("dora", "d-pw")) as a:
            assert a.list_topics() == ["d-one"]
        with Admin(conf("admin", "a-pw")) as a:
            assert a.delete_acls([AclBindingFilter(RT.TOPIC)]) == [topic_read]
        with Admin(conf("dora", "d-pw")) as a:
            assert a.list_topics() == []
    (tmp_path / "data" / "acls.json").write_text("{not json")
    with pytest.raises(RuntimeError, match="acls.json"):
        KohortBroker(str(tmp_path / "data"), port=port, config=config).start(timeout=20)
    # without an authorizer the ACL APIs answer SECURITY_DISABLED
    with KohortBroker() as plain_broker:
        with Admin({"bootstrap.servers": plain_broker.bootstrap}) as a:
            with pytest.raises(SecurityDisabledError):
                a.describe_acls()
            with pytest.raises(SecurityDisabledError):
                a.create_acls([topic_read])


def test_kip848_consumer_authorization_errors(cluster):
    """group.protocol=consumer: ConsumerGroupHeartbeat's GROUP_AUTHORIZATION_FAILED is fatal (poll()
    raises it), a subscribed topic the member may not describe raises TopicAuthorizationFailedError;
    an authorized member consumes."""
    from kohort.client.consumer import Consumer
    from kohort.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    b = cluster

    def run(user, group, topic, want=None):
        c = Consumer(kohort_conf(b, user, **{"group.id": group, "group.protocol": "consumer",
                                             "auto.offset.reset": "earliest"}))
        try:
            c.subscribe([topic])
            deadline = time.monotonic() + 30
            if want is not None:
                with pytest.raises(want):
                    while time.monotonic() < deadline:
                        assert c.poll(0.5) == []
                return None
            got = []
            while not got and time.monotonic() < deadline:
                got = c.poll(0.5)
            return got
        finally:
            c.close()
    run("bob", "paid-g", "paid", GroupAuthorizationFailedError)
    run("alice", "alice-848b", "secret", TopicAuthorizationFailedError)
    from kohort.client.producer import Producer
    p = Producer(kohort_conf(b, "alice"))
    try:
        p.send("alice-kohort", value=b"848", partition=0).result(30)
    finally:
        p.close()
    assert run("alice", "alice-848c", "alice-kohort")
    from kohort.protocol.messages import REQUESTS
    resp = _call(b, "alice", REQUESTS[69](group_ids=["alice-848c"], include_authorized_operations=True))
    g = resp.groups[0]
    assert (g.error_code, g.authorized_operations) == (E.NONE, (1 << Op.READ) | (1 << Op.DESCRIBE))
    # KAFKA-18813: a group whose assignments name a topic the describer may not DESCRIBE: 29, no details
    c = Consumer(kohort_conf(b, "admin", **{"group.id": "alice-adm", "group.protocol": "consumer"}))
    try:
        c.subscribe(["secret"])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment()
        for user, code in (("alice", E.TOPIC_AUTHORIZATION_FAILED), ("admin", E.NONE)):
            g = _call(b, user, REQUESTS[69](group_ids=["alice-adm"], include_authorized_operations=False)).groups[0]
            assert (g.error_code, bool(g.members)) == (code, code == E.NONE), (user, g)
    finally:
        c.close()


def test_kohort_cli_names_the_authorization_error(acl_broker):
    b = acl_broker
    mallory = _x(settings(b, "mallory"))
    # idempotent: InitProducerId (31) and the topic's metadata (29) are asked at once, as Java's sender and
    # send() do; whichever answer comes first is the error named
    r = _kohort("produce", "paid", "-b", b.bs, *mallory, input="x\n")
    assert r.returncode == 1 and ("CLUSTER_AUTHORIZATION_FAILED" in r.stderr
                                  or "TOPIC_AUTHORIZATION_FAILED" in r.stderr), r.stderr
    r = _kohort("produce", "paid", "-b", b.bs, *mallory, "-X", "enable.idempotence=false", input="x\n")
    assert r.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    r = _kohort("consume", "paid", "-g", "paid-g", "--from-beginning", "-b", b.bs, *mallory)
    assert r.returncode == 1 and "AUTHORIZATION_FAILED" in r.stderr and r.stdout == "", r.stderr
    r = _kohort("groups", "describe", "paid-g", "-b", b.bs, *_x(settings(b, "bob")))
    assert r.returncode == 1 and "GROUP_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    r = _kohort("topics", "list", "-b", b.bs, *mallory)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


def test_an_acl_change_applies_to_open_connections_at_their_next_request(acl_broker):
    """No per-connection cache (pitfall 8): mallory's open connection sees a new ACL, and its removal,
    at the next request; DENY beats the ALLOW of `User:*`."""
    from kohort.client.admin import Admin
    b = acl_broker
    grant = acl(RT.TOPIC, "secret", Op.DESCRIBE, principal="User:mallory")
    with Admin(kohort_conf(b, "mallory")) as m, Admin(kohort_conf(b, "admin")) as a:
        assert m.list_topics() == []
        a.create_acls([grant])
        assert m.list_topics() == ["secret"]
        a.create_acls([acl(RT.TOPIC, "secret", Op.ALL, DENY, principal="User:*")])
        assert m.list_topics() == []
        gone = a.delete_acls([AclBindingFilter(RT.TOPIC, "secret", Pat.LITERAL)])
        assert len(gone) == 2 and m.list_topics() == []


CK_ADMIN_SCRIPT = textwrap.dedent("""
    import json, sys
    from confluent_kafka import admin as A
    conf = json.loads(sys.argv[1])
    a = A.AdminClient(conf)
    b = A.AclBinding(A.ResourceType.TOPIC, "ck-acl-", A.ResourcePatternType.PREFIXED, "User:erin", "*",
                     A.AclOperation.READ, A.AclPermissionType.ALLOW)
    out = {}
    a.create_acls([b])[b].result(20)
    f = A.AclBindingFilter(A.ResourceType.TOPIC, "ck-acl-x", A.ResourcePatternType.MATCH, None, None,
                           A.AclOperation.ANY, A.AclPermissionType.ANY)
    out["described"] = sorted(f"{x.name}/{x.resource_pattern_type.name}/{x.principal}/{x.operation.name}"
                              for x in a.describe_acls(f).result(20))
    out["deleted"] = [x.principal for x in a.delete_acls([f])[f].result(20)]
    bad = A.AclBinding(A.ResourceType.BROKER, "not-kafka-cluster", A.ResourcePatternType.LITERAL, "User:erin",
                       "*", A.AclOperation.ALTER, A.AclPermissionType.ALLOW)
    try:
        a.create_acls([bad])[bad].result(20)
    except Exception as e:
        out["invalid"] = e.args[0].name()
    print(json.dumps(out))
""")


def test_confluent_kafka_admin_manages_acls_on_kohort_broker(acl_broker):
    """librdkafka's CreateAcls/DescribeAcls/DeleteAcls (MATCH filter, a refused binding)."""
    b = acl_broker
    conf = {"bootstrap.servers": b.bs, **settings(b, "admin")}
    r = subprocess.run([PY, "-c", CK_ADMIN_SCRIPT, json.dumps(conf)], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "described": ["ck-acl-/PREFIXED/User:erin/READ"], "deleted": ["User:erin"], "invalid": "INVALID_REQUEST"}


def test_mutual_tls_principal_is_what_acls_name(pki, tmp_path):  # noqa: F811
    """A client certificate's subject DN (Kafka's order) is the principal ACLs match; without a grant
    it sees nothing. The PLAINTEXT listener's ANONYMOUS is the super user that sets things up."""
    from kohort.client.admin import Admin
    plain, tls = free_port(), free_port()
    config = {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
              "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki / "server-keystore.pem"),
              "ssl.client.auth": "required", "ssl.truststore.type": "PEM",
              "ssl.truststore.location": str(pki / "ca.pem"),
              "authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"}
    me = "User:CN=client-one,O=kohort,C=DE"
    with KohortBroker(str(tmp_path / "data"), port=plain, config=config):
        tls_conf = {"bootstrap.servers": f"127.0.0.1:{tls}", "security.protocol": "SSL",
                    "ssl.ca.location": str(pki / "ca.pem"), "ssl.certificate.location": str(pki / "client.pem"),
                    "ssl.key.location": str(pki / "client.key")}
        with Admin({"bootstrap.servers": f"127.0.0.1:{plain}"}) as su, Admin(tls_conf) as client:
            su.create_topics(["mtls-t", "other"])
            assert client.list_topics() == []
            su.create_acls([acl(RT.TOPIC, "mtls-", Op.READ, principal=me, pattern=Pat.PREFIXED)])
            assert client.list_topics() == ["mtls-t"]
