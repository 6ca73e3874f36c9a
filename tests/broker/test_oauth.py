"""SASL/OAUTHBEARER (RFC 7628, KIP-255) with unsecured JWTs (issue 16).

The validator sans I/O against a fake clock (every check of Kafka's
OAuthBearerUnsecuredValidatorCallbackHandler and its JSON error statuses), then one kohort broker whose
SASL_PLAINTEXT listener enables OAUTHBEARER with `unsecuredValidatorRequiredScope="kafka"` (and PLAIN, to
show mechanisms side by side), reached by kohort's client (librdkafka's unsecured JWT settings, an
`oauth_cb` callback, Java's OAuthBearerLoginModule options), confluent-kafka's `oauth_cb` and the Java
console tools (OAuthBearerUnsecuredLoginCallbackHandler); and kohort's client against Apache Kafka 4.3.1
configured the same way. Rejected tokens (expired, missing scope) fail fast with the server's JSON
status. Re-authentication (KIP-368): the broker's rules sans I/O, sessions ended at token expiry,
kohort's client, librdkafka and the Java client re-authenticating on the same connection (kohort's
also against Apache Kafka).
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers.brokers import KohortBroker, free_port

from kohort.errors import ErrorCode, KafkaError
from kohort.protocol.sasl import (
    OAuthBearerServer, OAuthTokenSource, SaslClient, SaslFailure, UnsecuredTokenSpec, UnsecuredValidator,
    oauth_initial, OAuthToken,
)

PY = sys.executable
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
# unsecuredLoginStringClaim_sub: Apache Kafka logs itself in at start (kohort's broker ignores it)
VALIDATOR_JAAS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                  'unsecuredValidatorRequiredScope="kafka" unsecuredLoginStringClaim_sub="broker";')
NOW = 1_800_000_000.0


def _b64(obj) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def jwt(claims: dict, header=None, signature="") -> str:
    return f"{_b64({'alg': 'none'} if header is None else header)}.{_b64(claims)}.{signature}"


def good_claims(**kw) -> dict:
    c = {"sub": "alice", "iat": NOW - 10, "exp": NOW + 600, "scope": ["kafka", "other"]}
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


# -- sans I/O ------------------------------------------------------------------------------------------
def _exchange(token: str, validator=UnsecuredValidator(required_scope=("kafka",)), now=NOW):
    server = OAuthBearerServer(validator, lambda: int(now * 1000))
    reply, done = server.step(oauth_initial(OAuthToken(token, now + 1)))
    return server, reply, done


def test_a_good_token_authenticates_its_sub_claim_with_extensions():
    server = OAuthBearerServer(UnsecuredValidator(), lambda: int(NOW * 1000))
    tok = OAuthToken(jwt(good_claims()), NOW + 600, "alice", (("traceId", "t-1"), ("logicalCluster", "lkc")))
    assert server.step(oauth_initial(tok)) == (b"", True)
    assert server.principal == "alice" and server.extensions == {"traceId": "t-1", "logicalCluster": "lkc"}
    # the principal claim can be renamed
    v = UnsecuredValidator(principal_claim="client_id")
    s, reply, done = _exchange(jwt(good_claims(sub=None, client_id="svc")), v)
    assert done and s.principal == "svc"


@pytest.mark.parametrize("token,why", [
    (jwt(good_claims(exp=NOW - 1)), "expired"),
    (jwt(good_claims(exp=NOW)), "expires exactly now"),
    (jwt(good_claims(exp=None)), "no exp"),
    (jwt(good_claims(exp="soon")), "exp not a number"),
    (jwt(good_claims(sub=None)), "no sub"),
    (jwt(good_claims(sub="  ")), "blank sub"),
    (jwt(good_claims(sub=7)), "sub not a string"),
    (jwt(good_claims(iat=NOW + 5)), "issued in the future"),
    (jwt(good_claims(iat=NOW + 700, exp=NOW + 600)), "exp before iat"),
    (jwt(good_claims(), header={"alg": "HS256"}), "alg is not none"),
    (jwt(good_claims(), header={}), "no alg"),
    (jwt(good_claims(), signature="c2ln"), "signed"),
    (jwt(good_claims()) + ".x", "four parts"),
    ("a..b", "empty part"),
    ("notbase64!.x.", "bad base64"),
    (base64.urlsafe_b64encode(b"[1]").decode() + "." + _b64(good_claims()) + ".", "header not an object"),
])
def test_invalid_tokens_get_invalid_token_then_fail_on_the_clients_0x01(token, why):
    try:
        s, reply, done = _exchange(token)
    except SaslFailure:
        # not even a well-formed client message ("a..b" passes; "notbase64!" has a '!' the token
        # grammar of RFC 7628 refuses): failed at once
        assert why == "bad base64"
        return
    assert not done and reply == b'{"status":"invalid_token"}', why
    with pytest.raises(SaslFailure) as e:
        s.step(b"\x01")
    assert str(e.value) == '{"status":"invalid_token"}'


def test_scope_and_clock_skew_as_kafka():
    v = UnsecuredValidator(required_scope=("kafka", "admin"))
    s, reply, done = _exchange(jwt(good_claims()), v)
    assert reply == b'{"status":"insufficient_scope", "scope":"[kafka, admin]"}' and not done
    # a string scope claim is one element, as Kafka's OAuthBearerUnsecuredJws (not split on spaces)
    assert not _exchange(jwt(good_claims(scope="kafka admin")), v)[2]
    assert _exchange(jwt(good_claims(scope="kafka")))[2]
    # clock skew: expired 1 s ago but 2 s are allowed
    skew = UnsecuredValidator(clock_skew_ms=2000)
    assert _exchange(jwt(good_claims(exp=NOW - 1)), skew)[2]
    assert not _exchange(jwt(good_claims(exp=NOW - 3)), skew)[2]
    with pytest.raises(Exception, match="negative"):
        UnsecuredValidator.from_jaas({"unsecuredValidatorAllowableClockSkewMs": "-1"})


def test_malformed_client_messages_fail_at_once():
    v = UnsecuredValidator()
    for msg in (b"", b"\xff\xfe", b"n,,auth=Bearer x", b"n,,\x01auth=Basic abc\x01\x01", b"y,,\x01auth=Bearer a\x01\x01",
                b"n,,\x01\x01", b"n,,\x01auth=Bearer a\x01bad key=1\x01\x01",
                b"n,a=bob,\x01auth=Bearer " + jwt(good_claims()).encode() + b"\x01\x01"):
        with pytest.raises(SaslFailure):
            OAuthBearerServer(v, lambda: int(NOW * 1000)).step(msg)


def test_client_side_token_sources():
    clock = [NOW]
    spec = UnsecuredTokenSpec.from_librdkafka("principal=bob scope=kafka,x lifeSeconds=100 extension_traceId=abc")
    src = OAuthTokenSource.unsecured(spec, lambda: clock[0])
    t1 = src.current()
    s, reply, done = _exchange(t1.value)
    assert done and s.principal == "bob" and t1.extensions == (("traceId", "abc"),)
    assert src.current() is t1
    clock[0] += 81                  # past 80 % of the lifetime: a new token for the next connection
    assert src.current() is not t1
    calls = []

    def cb(config):
        calls.append(config)
        return jwt(good_claims(exp=NOW - 5)), NOW - 5       # already expired
    c = SaslClient("OAUTHBEARER", oauth=OAuthTokenSource.from_callback(cb, "cfg", lambda: NOW))
    with pytest.raises(KafkaError) as e:
        c.initial()
    assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED and "expired" in str(e.value) and calls == ["cfg"]
    with pytest.raises(KafkaError, match="callback failed: RuntimeError: no idp"):
        SaslClient("OAUTHBEARER", oauth=OAuthTokenSource.from_callback(
            lambda _c: (_ for _ in ()).throw(RuntimeError("no idp")), None, lambda: NOW)).initial()
    jspec = UnsecuredTokenSpec.from_jaas({"unsecuredLoginStringClaim_sub": "carol",
                                          "unsecuredLoginListClaim_scope": "|kafka|x",
                                          "unsecuredLoginNumberClaim_n": "7", "unsecuredLoginExtension_e": "v"})
    tok = jspec.make(NOW)
    claims = json.loads(base64.urlsafe_b64decode(tok.value.split(".")[1] + "=="))
    assert claims == {"sub": "carol", "iat": int(NOW), "exp": int(NOW) + 3600, "scope": ["kafka", "x"], "n": 7}
    with pytest.raises(Exception, match="StringClaim_sub"):
        UnsecuredTokenSpec.from_jaas({})


# -- a kohort broker with OAUTHBEARER --------------------------------------------------------------------
@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory):
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port()}
    config = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": VALIDATOR_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_pat="pat-pw";',
        "connection.failed.authentication.delay.ms": "20",
    }
    b = KohortBroker(str(tmp_path_factory.mktemp("oauth-data")), port=ports["PLAINTEXT"], config=config,
                     extra_args=["--log-level", "debug"])
    with b:
        b.sasl = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
        yield b


def _kohort(*args, input=None, timeout=60):
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run([PY, "-m", "kohort.cli.main", *args], input=input, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _x(settings: dict) -> list[str]:
    return [a for k, v in settings.items() for a in ("-X", f"{k}={v}")]


UNSECURED = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
             "enable.sasl.oauthbearer.unsecure.jwt": "true"}


def test_kohort_cli_with_librdkafkas_unsecured_jwt(oauth_broker):
    x = _x({**UNSECURED, "sasl.oauthbearer.config": "principal=alice scope=kafka"})
    bs = oauth_broker.sasl
    assert _kohort("topics", "create", "oauth-cli", "-b", bs, *x).returncode == 0
    r = _kohort("produce", "oauth-cli", "-b", bs, *x, input="o1\no2\n")
    assert r.returncode == 0, r.stderr
    r = _kohort("consume", "oauth-cli", "-g", "g-oauth-cli", "--from-beginning", "--count", "2", "-b", bs, *x)
    assert r.returncode == 0 and r.stdout.split() == ["o1", "o2"], r.stderr
    # no "kafka" scope: refused with the broker's JSON status, not retried until a timeout
    r = _kohort("topics", "list", "-b", bs, *_x({**UNSECURED, "sasl.oauthbearer.config": "principal=alice"}))
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr, r.stderr
    assert '{"status":"insufficient_scope", "scope":"[kafka]"}' in r.stderr and "cannot reach" not in r.stderr, r.stderr
    # PLAIN still works beside it on the same listener
    r = _kohort("topics", "list", "-b", bs, *_x({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                                 "sasl.username": "pat", "sasl.password": "pat-pw"}))
    assert r.returncode == 0, r.stderr
    # tokens are never logged by the broker (it logs at debug here)
    assert not any("eyJ" in line for line in oauth_broker.log_lines)


def test_kohort_client_oauth_cb_and_java_style_jaas(oauth_broker):
    from kohort import Consumer, Producer
    from kohort.client.admin import Admin
    calls = []

    def oauth_cb(config):
        calls.append(config)
        now = time.time()
        return jwt({"sub": "svc-1", "iat": int(now), "exp": int(now) + 60, "scope": "kafka"}), now + 60

    cb_conf = {"bootstrap.servers": oauth_broker.sasl, "security.protocol": "SASL_PLAINTEXT",
               "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb, "sasl.oauthbearer.config": "idp=test"}
    with Admin(cb_conf) as admin:
        admin.create_topics(["oauth-api"])
    with Producer(cb_conf) as p:
        for i in range(5):
            p.produce("oauth-api", value=b"v%d" % i)
        p.flush()
    jaas = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="svc-2" unsecuredLoginListClaim_scope=",kafka";')
    conf2 = {"bootstrap.servers": oauth_broker.sasl, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": jaas, "group.id": "g-oauth-api",
             "auto.offset.reset": "earliest"}
    got = []
    with Consumer(conf2) as c:
        c.subscribe(["oauth-api"])
        deadline = time.monotonic() + 60
        while len(got) < 5 and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.5)]
        c.commit()
    assert sorted(got) == [b"v%d" % i for i in range(5)]
    assert calls and set(calls) == {"idp=test"}

    def expired_cb(config):
        return jwt({"sub": "svc-1", "exp": int(time.time()) - 1, "scope": "kafka"}), time.time() + 60
    with pytest.raises(KafkaError) as e:        # the refusal itself, not a timeout after retries
        with Admin({**cb_conf, "oauth_cb": expired_cb}) as admin:
            admin.list_topics(timeout=20)
    assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED and '{"status":"invalid_token"}' in str(e.value)


CK_OAUTH = textwrap.dedent("""
    import base64, json, sys, time, confluent_kafka as ck
    bs, topic, scope = sys.argv[1], sys.argv[2], sys.argv[3]
    seen = []
    def b64(o):
        return base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b"=").decode()
    def oauth_cb(config):
        seen.append(config)
        now = time.time()
        claims = {"sub": "ck-user", "iat": int(now), "exp": int(now) + 300, "scope": [scope]}
        return b64({"alg": "none"}) + "." + b64(claims) + ".", now + 300
    errors = []
    conf = {"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.config": "from-test", "oauth_cb": oauth_cb,
            "error_cb": lambda e: errors.append(e.name())}
    p = ck.Producer(conf)
    for i in range(3):
        p.produce(topic, b"ck-%d" % i)
    for _ in range(100):
        if p.flush(0.1) == 0 or errors:
            break
    left = len(p)
    got = []
    if not left and not errors:
        c = ck.Consumer({**conf, "group.id": "ck-" + topic, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
        c.subscribe([topic])
        for _ in range(60):
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value().decode())
                if len(got) == 3:
                    c.commit(asynchronous=False)
                    break
        committed = [tp.offset for tp in c.committed([ck.TopicPartition(topic, 0)], 10)]
        c.close()
    else:
        committed = []
    print(json.dumps({"unflushed": left, "got": got, "errors": sorted(set(errors)), "committed": committed,
                      "cb_config": sorted(set(seen))}))
""")


def _ck_oauth(bs, topic, scope):
    r = subprocess.run([PY, "-c", CK_OAUTH, bs, topic, scope], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_confluent_kafka_oauth_cb_produces_consumes_and_commits(oauth_broker):
    out = _ck_oauth(oauth_broker.sasl, "ck-oauth", "kafka")
    assert out == {"unflushed": 0, "got": ["ck-0", "ck-1", "ck-2"], "errors": [], "committed": [3],
                   "cb_config": ["from-test"]}
    bad = _ck_oauth(oauth_broker.sasl, "ck-oauth", "not-kafka")
    assert bad["unflushed"] == 3 and "_AUTHENTICATION" in bad["errors"], bad


@pytest.mark.slow
def test_java_console_tools_with_the_unsecured_login_handler(oauth_broker, tmp_path):
    from tests.helpers.kafka_cluster import CONSOLE_CONSUMER, CONSOLE_PRODUCER, require_peers, run_tool
    require_peers()

    def props(scope):
        path = tmp_path / f"oauth-{scope}.properties"
        path.write_text("\n".join([
            "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=OAUTHBEARER",
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="java-user" unsecuredLoginListClaim_scope=",{scope}";', ""]))
        return str(path)

    good = props("kafka")
    bs = oauth_broker.sasl
    run_tool(CONSOLE_PRODUCER, "--bootstrap-server", bs, "--topic", "java-oauth", "--command-config", good,
             input="j1\nj2\n", timeout=90)
    r = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", bs, "--topic", "java-oauth", "--group", "java-oauth-g",
                 "--from-beginning", "--max-messages", "2", "--command-config", good, "--timeout-ms", "20000",
                 timeout=90)
    assert r.stdout.split() == ["j1", "j2"]
    r = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", bs, "--topic", "java-oauth", "--from-beginning",
                 "--max-messages", "1", "--command-config", props("other"), "--timeout-ms", "10000",
                 timeout=90, check=False)
    out = r.stdout + r.stderr
    assert "SaslAuthenticationException" in out and "insufficient_scope" in out, out[-3000:]


@pytest.mark.slow
def test_kohort_client_against_apache_kafka_oauthbearer_unsecured(caplog):
    from tests.helpers.kafka_cluster import KafkaCluster
    cfg = {"sasl.enabled.mechanisms": "OAUTHBEARER",
           "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": VALIDATOR_JAAS}
    with KafkaCluster(1, extra_config=cfg, extra_listeners=[("SASL_PLAINTEXT", "SASL_PLAINTEXT")]) as kc:
        bs = kc.nodes[0].listener_address("SASL_PLAINTEXT")
        x = _x({**UNSECURED, "sasl.oauthbearer.config": "principal=alice scope=kafka"})
        r = _kohort("topics", "create", "ak-oauth", "-b", bs, *x)
        assert r.returncode == 0, r.stderr
        r = _kohort("produce", "ak-oauth", "-b", bs, *x, input="a\nb\n")
        assert r.returncode == 0, r.stderr
        r = _kohort("consume", "ak-oauth", "-g", "g-ak-oauth", "--from-beginning", "--count", "2", "-b", bs, *x)
        assert r.returncode == 0 and r.stdout.split() == ["a", "b"], r.stderr
        r = _kohort("groups", "describe", "g-ak-oauth", "-b", bs, *x)
        assert r.returncode == 0 and "ak-oauth" in r.stdout, r.stderr
        # Kafka's own answer to a token without the required scope, and to an expired one
        r = _kohort("topics", "list", "-b", bs, *_x({**UNSECURED, "sasl.oauthbearer.config": "principal=alice"}))
        assert r.returncode == 1 and '{"status":"insufficient_scope", "scope":"[kafka]"}' in r.stderr, r.stderr
        from kohort.client.admin import Admin
        conf = {"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda _c: (jwt({"sub": "a", "exp": int(time.time()) - 5, "scope": "kafka"}),
                                        time.time() + 60)}
        with pytest.raises(KafkaError) as e:
            with Admin(conf) as admin:
                admin.list_topics(timeout=20)
        assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED and '{"status":"invalid_token"}' in str(e.value)
        _reauthenticating_consumer_on(bs, caplog)


def _reauthenticating_consumer_on(bs: str, caplog) -> None:
    """4 s unsecured tokens: Apache Kafka ends each session at its token's expiry; kohort's consumer
    re-authenticates on its connections (KIP-368) and keeps reading what another client writes."""
    import logging
    from kohort import Consumer, Producer
    short = {"bootstrap.servers": bs, **UNSECURED, "sasl.oauthbearer.config": "principal=alice scope=kafka lifeSeconds=4"}
    long_ = {"bootstrap.servers": bs, **UNSECURED, "sasl.oauthbearer.config": "principal=alice scope=kafka"}
    caplog.set_level(logging.DEBUG, logger="kohort.client")
    got, sent = [], 0
    with Producer(long_) as p, Consumer({**short, "group.id": "g-ak-reauth", "auto.offset.reset": "earliest",
                                          "fetch.max.wait.ms": 200}) as c:
        p.produce("ak-oauth", value=b"warm-up")
        p.flush()
        c.subscribe(["ak-oauth"])
        t_end = time.monotonic() + 10
        while time.monotonic() < t_end:
            p.produce("ak-oauth", value=b"r%d" % sent)
            p.flush()
            sent += 1
            got += [r.value for r in c.poll(0.2)]
        deadline = time.monotonic() + 30
        while len([v for v in got if v.startswith(b"r")]) < sent and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.5)]
    assert sorted((v for v in got if v.startswith(b"r")), key=lambda v: int(v[1:])) == [b"r%d" % i for i in range(sent)]
    assert sum("re-authenticating" in r.getMessage() for r in caplog.records) >= 2


def test_oauthbearer_fuzz_keeps_the_broker_serving(oauth_broker):
    """Random and mutated OAUTHBEARER messages over SaslHandshake v0 and v1, something other than %x01
    after the JSON error, a token above sasl.server.max.receive.size: each connection ends with an
    answer or a close; the broker keeps serving a good client."""
    import random
    import socket
    import struct
    from kohort.protocol.framing import decode_response, encode_request
    from kohort.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from kohort.protocol.messages.sasl_handshake import SaslHandshakeRequest

    host, port = oauth_broker.sasl.rsplit(":", 1)
    rnd = random.Random(255)

    def recv_frame(s):
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        n, body = struct.unpack(">i", head)[0], b""
        while len(body) < n:
            chunk = s.recv(n - len(body))
            if not chunk:
                return None
            body += chunk
        return body

    def session(first: bytes, then: bytes | None = None, version: int = 1):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(encode_request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), version, 1, "fuzz"))
            assert decode_response(recv_frame(s), 17, version)[1].error_code == 0
            for i, tok in enumerate(t for t in (first, then) if t is not None):
                if version:
                    s.sendall(encode_request(SaslAuthenticateRequest(auth_bytes=tok), 1, 2 + i, "fuzz"))
                else:
                    s.sendall(struct.pack(">i", len(tok)) + tok)
                if recv_frame(s) is None:
                    return

    good = jwt({"sub": "f", "exp": int(time.time()) + 60, "scope": "kafka"})
    for _ in range(40):
        kind = rnd.choice(["bytes", "mutated", "jwt"])
        if kind == "bytes":
            msg = bytes(rnd.getrandbits(8) for _ in range(rnd.choice([0, 1, 5, 80])))
        elif kind == "mutated":
            msg = bytearray(oauth_initial(OAuthToken(good, 0)))
            for i in rnd.sample(range(len(msg)), 3):
                msg[i] = rnd.getrandbits(8)
            msg = bytes(msg)
        else:
            msg = oauth_initial(OAuthToken(jwt({"sub": rnd.choice(["x", 5, ""]),
                                                "exp": rnd.choice([1, "x", time.time() + 60])}), 0))
        session(msg, rnd.choice([None, b"\x01", b"\x02", msg]), rnd.choice([0, 1]))
    # a JSON error then not %x01 but another (good) token: still refused, as the exchange has failed
    session(oauth_initial(OAuthToken(jwt({"sub": "f", "exp": 1}), 0)), oauth_initial(OAuthToken(good, 0)))
    # a token above sasl.server.max.receive.size (524288): closed before it is read
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, 1, "fuzz"))
        recv_frame(s)
        s.sendall(struct.pack(">i", 600_000) + b"n,,\x01auth=Bearer " + b"a" * 1000)
        assert recv_frame(s) is None
    assert oauth_broker.proc.poll() is None
    r = _kohort("topics", "list", "-b", oauth_broker.sasl,
                *_x({**UNSECURED, "sasl.oauthbearer.config": "principal=alice scope=kafka"}))
    assert r.returncode == 0, r.stderr


def test_librdkafkas_own_unsecured_jwt_through_kcat(oauth_broker):
    """librdkafka's built-in unsecured JWT (kcat -X enable.sasl.oauthbearer.unsecure.jwt=true) is
    accepted by kohort broker's validator; without the required scope it is refused."""
    from tests.conftest import require_kcat
    require_kcat()
    x = _x({**UNSECURED, "sasl.oauthbearer.config": "principal=kcat-user scope=kafka,extra"})
    bs = oauth_broker.sasl
    r = subprocess.run(["kcat", "-b", bs, *x, "-P", "-t", "kcat-oauth"], input="k1\nk2\n", capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["kcat", "-b", bs, *x, "-C", "-t", "kcat-oauth", "-o", "beginning", "-c", "2", "-e"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["k1", "k2"], r.stderr
    bad = _x({**UNSECURED, "sasl.oauthbearer.config": "principal=kcat-user scope=other"})
    r = subprocess.run(["kcat", "-b", bs, *bad, "-L", "-m", "5"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "insufficient_scope" in r.stderr, r.stderr


# -- re-authentication (KIP-368) ---------------------------------------------------------------------
def test_session_lifetime_and_reauthentication_rules_sans_io():
    """The broker's Authenticator on a fake clock: the lifetime sent in SaslAuthenticate v1+ is
    min(connections.max.reauth.ms, token life) as Kafka's SaslServerAuthenticator (the token's life
    even when connections.max.reauth.ms is 0); re-authentication keeps mechanism and principal, at most
    once a second; without a lifetime a late handshake is not a re-authentication."""
    from kohort.broker.security import DONE, FAIL, RESPOND, Authenticator, Listener
    from kohort.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from kohort.protocol.messages.sasl_handshake import SaslHandshakeRequest
    clock = [NOW]
    lst = Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 0, mechanisms=("OAUTHBEARER", "PLAIN"),
                   plain_users={"pat": "pw"}, oauth=UnsecuredValidator(), max_reauth_ms={"PLAIN": 5000})

    def login(a, mech, token, version=2):
        assert a.on_request(17, 1, SaslHandshakeRequest(mechanism=mech))[0] == RESPOND
        return a.on_request(36, version, SaslAuthenticateRequest(auth_bytes=token))

    def bearer(sub, life):
        return oauth_initial(OAuthToken(jwt({"sub": sub, "exp": clock[0] + life}), 0))

    a = Authenticator(lst, None, clock=lambda: clock[0])
    verdict, resp, _ = login(a, "OAUTHBEARER", bearer("alice", 60))
    assert verdict == RESPOND and a.state == DONE and resp.session_lifetime_ms == 60_000
    assert not a.session_expired()
    clock[0] += 30
    assert a.begin_reauthentication()
    assert login(a, "OAUTHBEARER", bearer("alice", 120))[1].session_lifetime_ms == 120_000
    clock[0] += 0.5                      # a second re-authentication within 1 s: not one
    assert not a.begin_reauthentication() and a.state == DONE
    clock[0] += 1
    assert a.begin_reauthentication()    # another principal: refused
    verdict, resp, _ = login(a, "OAUTHBEARER", bearer("mallory", 60))
    assert verdict == FAIL and resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    b = Authenticator(lst, None, clock=lambda: clock[0])
    login(b, "OAUTHBEARER", bearer("alice", 10))
    clock[0] += 2
    assert b.begin_reauthentication()    # another mechanism: refused
    verdict, resp, _ = b.on_request(17, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert verdict == FAIL and resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    c = Authenticator(lst, None, clock=lambda: clock[0])
    login(c, "OAUTHBEARER", bearer("alice", 10))
    clock[0] += 10
    assert c.session_expired()
    # PLAIN: no credential expiry, connections.max.reauth.ms=5000 for it on this listener
    d = Authenticator(lst, None, clock=lambda: clock[0])
    assert login(d, "PLAIN", b"\0pat\0pw")[1].session_lifetime_ms == 5000
    assert login(Authenticator(lst, None, clock=lambda: clock[0]), "PLAIN", b"\0pat\0pw", version=0)[1] \
        .session_lifetime_ms == 0          # v0 has no such field
    lst0 = Listener("L", "SASL_PLAINTEXT", "127.0.0.1", 0, mechanisms=("PLAIN",), plain_users={"pat": "pw"})
    e = Authenticator(lst0, None, clock=lambda: clock[0])
    assert login(e, "PLAIN", b"\0pat\0pw")[1].session_lifetime_ms == 0
    assert not e.begin_reauthentication() and not e.session_expired()


@pytest.mark.slow
def test_kohorts_client_reauthenticates_before_its_oauth_sessions_end(oauth_broker):
    """Tokens of 3 s: the broker ends each session at its token's expiry (as Kafka); kohort's producer
    (caller-driven I/O) and consumer (I/O thread) re-authenticate on the same connection at 85-95 % of
    the session (KIP-368) with a fresh token, so the broker never has to close a connection, and
    nothing is lost."""
    from kohort import Consumer, Producer
    from kohort.client.admin import Admin
    calls = []

    def oauth_cb(_config):
        now = time.time()
        calls.append(now)
        return jwt({"sub": "short", "exp": now + 3, "scope": "kafka"}), now + 3

    conf = {"bootstrap.servers": oauth_broker.sasl, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
    with Admin(conf) as admin:
        admin.create_topics(["oauth-short"])
    before = len(oauth_broker.log_lines)
    got, sent = [], 0
    with Producer(conf) as p, Consumer({**conf, "group.id": "g-oauth-short", "auto.offset.reset": "earliest",
                                         "fetch.max.wait.ms": 200}) as c:
        c.subscribe(["oauth-short"])
        t_end = time.monotonic() + 8
        while time.monotonic() < t_end:
            p.produce("oauth-short", value=b"r%d" % sent)
            p.flush()
            sent += 1
            got += [r.value for r in c.poll(0.2)]
        deadline = time.monotonic() + 30
        while len(got) < sent and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.5)]
        c.commit()
    assert sorted(got, key=lambda v: int(v[1:])) == [b"r%d" % i for i in range(sent)]
    assert len(calls) >= 3, calls
    assert not any("SASL session expired" in line for line in oauth_broker.log_lines[before:]), \
        oauth_broker.log_lines[before:]


@pytest.mark.slow
def test_confluent_kafka_reauthenticates_when_its_token_expires(oauth_broker):
    """librdkafka (>= 2.2) re-authenticates on the same connection (KIP-368) before the session the
    broker announced ends: a producer with 10 s tokens keeps delivering for 14 s without an error.
    (With 4 s tokens librdkafka re-authenticates with its old token, then again 0.3 s later, which
    the broker refuses as Kafka does: at most one re-authentication per second.)"""
    script = textwrap.dedent("""
        import base64, json, sys, time, confluent_kafka as ck
        def b64(o):
            return base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b"=").decode()
        calls = []
        def oauth_cb(_c):
            now = time.time()
            calls.append(now)
            return b64({"alg": "none"}) + "." + b64({"sub": "ck", "exp": now + 10, "scope": "kafka"}) + ".", now + 10
        errors = []
        p = ck.Producer({"bootstrap.servers": sys.argv[1], "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb,
                         "error_cb": lambda e: errors.append(str(e))})
        delivered = []
        t_end = time.time() + 14
        i = 0
        while time.time() < t_end:
            p.produce("ck-reauth", b"%d" % i, on_delivery=lambda e, m: delivered.append(e is None))
            i += 1
            p.poll(0.1)
        p.flush(20)
        print(json.dumps({"sent": i, "ok": sum(delivered), "errors": errors, "tokens": len(calls)}))
    """)
    before = len(oauth_broker.log_lines)
    r = subprocess.run([PY, "-c", script, oauth_broker.sasl], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] == out["sent"] and out["errors"] == [] and out["tokens"] >= 2, out
    assert "SASL session expired" not in "\n".join(oauth_broker.log_lines[before:])


@pytest.mark.slow
def test_java_client_reauthenticates_under_connections_max_reauth_ms(tmp_path):
    """connections.max.reauth.ms=2000 on a PLAIN listener: Kafka's console consumer (Java client)
    re-authenticates every ~2 s while it polls for 9 s and is never disconnected."""
    from tests.helpers.kafka_cluster import CONSOLE_CONSUMER, require_peers, run_tool
    require_peers()
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port()}
    config = {"listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
              "sasl.enabled.mechanisms": "PLAIN", "connections.max.reauth.ms": "2000",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                  'org.apache.kafka.common.security.plain.PlainLoginModule required user_jo="jo-pw";'}
    props = tmp_path / "plain.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     'username="jo" password="jo-pw";\n')
    with KohortBroker(str(tmp_path / "data"), port=ports["PLAINTEXT"], config=config,
                      extra_args=["--log-level", "info"]) as b:
        bs = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
        r = _kohort("produce", "java-reauth", "-b", b.bootstrap, input="a\nb\nc\n")
        assert r.returncode == 0, r.stderr
        t0 = time.monotonic()
        r = run_tool(CONSOLE_CONSUMER, "--bootstrap-server", bs, "--topic", "java-reauth", "--from-beginning",
                     "--max-messages", "4", "--command-config", str(props), "--timeout-ms", "9000",
                     timeout=90, check=False)
        out = r.stdout + r.stderr
        assert r.stdout.splitlines()[:3] == ["a", "b", "c"] and "Processed a total of 3 messages" in out, out[-3000:]
        assert time.monotonic() - t0 > 9
        assert "Exception" not in out.replace("TimeoutException", ""), out[-3000:]
        assert not any("SASL session expired" in line for line in b.log_lines), b.log_lines[-20:]


PY_OAUTH = textwrap.dedent("""
    import asyncio, base64, json, sys, time
    which, bs, topic, scope = sys.argv[1:5]
    def b64(o):
        return base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b"=").decode()
    def make():
        now = int(time.time())
        return b64({"alg": "none"}) + "." + b64({"sub": which, "iat": now, "exp": now + 300, "scope": [scope]}) + "."
    kw = dict(bootstrap_servers=bs, security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER")
    if which == "kafka-python":
        import kafka
        from kafka.net.sasl.oauth import AbstractTokenProvider
        class P(AbstractTokenProvider):
            def token(self):
                return make()
        kw["sasl_oauth_token_provider"] = P()
        try:
            p = kafka.KafkaProducer(max_block_ms=8000, request_timeout_ms=6000, **kw)
            p.send(topic, b"kp-1").get(15)
            p.close()
            c = kafka.KafkaConsumer(topic, group_id="g-" + topic, auto_offset_reset="earliest",
                                    enable_auto_commit=False, consumer_timeout_ms=4000, **kw)
            got = [m.value.decode() for m in c]
            c.commit()
            c.close()
            out = {"got": got}
        except Exception as e:
            out = {"error": type(e).__name__}
    else:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.abc import AbstractTokenProvider
        class P(AbstractTokenProvider):
            async def token(self):
                return make()
        kw["sasl_oauth_token_provider"] = P()
        async def main():
            p = AIOKafkaProducer(request_timeout_ms=6000, **kw)
            try:
                await p.start()
                await p.send_and_wait(topic, b"aio-1")
            except Exception as e:
                return {"error": type(e).__name__}
            finally:
                await p.stop()
            c = AIOKafkaConsumer(topic, group_id="g-" + topic, auto_offset_reset="earliest",
                                 enable_auto_commit=False, **kw)
            await c.start()
            try:
                m = await asyncio.wait_for(c.getone(), 30)
                await c.commit()
            finally:
                await c.stop()
            return {"got": [m.value.decode()]}
        out = asyncio.run(main())
    print(json.dumps(out))
""")


@pytest.mark.parametrize("which", [pytest.param("kafka-python", marks=pytest.mark.slow), "aiokafka"])
def test_python_clients_token_providers(oauth_broker, which):
    """kafka-python's and aiokafka's OAUTHBEARER (sasl_oauth_token_provider): produce, consume in a group,
    commit; a token without the required scope is refused."""
    topic = f"py-oauth-{which}"
    r = subprocess.run([PY, "-c", PY_OAUTH, which, oauth_broker.sasl, topic, "kafka"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"got": ["kp-1" if which == "kafka-python" else "aio-1"]}
    r = subprocess.run([PY, "-c", PY_OAUTH, which, oauth_broker.sasl, topic, "nope"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "error" in json.loads(r.stdout.strip().splitlines()[-1])
