"""The Spark source and sink over TLS and SASL (issue 16), with spark-sql-kafka's option names.

One kohort broker with a SASL_SSL listener (SCRAM-SHA-256, and OAUTHBEARER with unsecured JWTs) and an
SSL listener requiring a client certificate. The same `kafka.*` options are given to `format("kohort")`
and to Spark's own connector `format("kafka")` (spark-sql-kafka 4.2.0, Kafka's Java client): both write
and read the same rows, which proves the option names and their meaning match. Certificates come from test_security's `pki` fixture.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tests.helpers.brokers import KohortBroker, free_port
from tests.broker.test_security import pki  # noqa: F401  (the module's certificate fixture)

from kohort.errors import ConfigError
from kohort.spark.options import parse_sink_options, parse_source_options

PY = sys.executable
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="spark" '
              'password="spark-Secret-9";')


@pytest.fixture(scope="module")
def sb(pki, tmp_path_factory):  # noqa: F811
    data = tmp_path_factory.mktemp("spark-sec")
    r = subprocess.run([PY, "-m", "kohort.cli.main", "users", "add", "--data-dir", str(data), "--user", "spark",
                        "--mechanism", "SCRAM-SHA-256"], input="spark-Secret-9\n", capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PYTHONPATH=SRC))
    assert r.returncode == 0, r.stderr
    ports = {"PLAINTEXT": free_port(), "SASL_SSL": free_port(), "SSL": free_port()}
    config = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,OAUTHBEARER",
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredValidatorRequiredScope="spark";',
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki / "server-keystore.pem"),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(pki / "ca.pem"),
    }
    with KohortBroker(str(data), port=ports["PLAINTEXT"], config=config) as b:
        b.ports, b.pki = ports, pki
        yield b


def _scram_opts(b) -> dict:
    return {"kafka.bootstrap.servers": f"127.0.0.1:{b.ports['SASL_SSL']}",
            "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": SCRAM_JAAS,
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(b.pki / "ca.pem")}


def _oauth_opts(b) -> dict:
    """Java's unsecured OAUTHBEARER login (OAuthBearerUnsecuredLoginCallbackHandler's options)."""
    return {**_scram_opts(b), "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                                      'required unsecuredLoginStringClaim_sub="spark-job" '
                                      'unsecuredLoginListClaim_scope=",spark";'}


def _mtls_opts(b) -> dict:
    return {"kafka.bootstrap.servers": f"127.0.0.1:{b.ports['SSL']}", "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(b.pki / "ca.pem"),
            "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": str(b.pki / "client-keystore.pem")}


def _write(spark, fmt, opts, topic, prefix, n):
    df = spark.createDataFrame([(f"k{i}", f"{prefix}-{i}") for i in range(n)], ["key", "value"])
    df.write.format(fmt).options(**opts).option("topic", topic).mode("append").save()


def _read(spark, fmt, opts, topic):
    df = (spark.read.format(fmt).options(**opts).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    return sorted((bytes(r.key).decode(), bytes(r.value).decode(), r.offset) for r in df.collect())


@pytest.mark.parametrize("how", ["SASL_SSL/SCRAM", "SSL/mTLS", "SASL_SSL/OAUTHBEARER"])
def test_kohort_and_spark_kafka_formats_share_security_options(spark, sb, how):
    opts = {"SASL_SSL/SCRAM": _scram_opts, "SSL/mTLS": _mtls_opts, "SASL_SSL/OAUTHBEARER": _oauth_opts}[how](sb)
    topic = f"sec-{how.replace('/', '-').lower()}-{uuid.uuid4().hex[:6]}"
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": sb.bootstrap}) as admin:
        admin.create_topics([topic], num_partitions=2)
    _write(spark, "kohort", opts, topic, "kohort", 20)          # kohort's sink
    _write(spark, "kafka", opts, topic, "kafka", 20)            # spark-sql-kafka's sink, same options
    ours, theirs = _read(spark, "kohort", opts, topic), _read(spark, "kafka", opts, topic)
    assert len(ours) == 40 and ours == theirs
    assert {v for _, v, _ in ours} == {f"{p}-{i}" for p in ("kohort", "kafka") for i in range(20)}


def test_inline_pem_options_and_clear_errors(spark, sb):
    """Inline PEM (kafka.ssl.truststore.certificates, kafka.ssl.keystore.key + .certificate.chain), read
    by the kohort source; unsupported stores are refused naming PEM."""
    pki_dir = sb.pki
    inline = {"kafka.bootstrap.servers": f"127.0.0.1:{sb.ports['SSL']}", "kafka.security.protocol": "SSL",
              "kafka.ssl.truststore.type": "PEM",
              "kafka.ssl.truststore.certificates": (pki_dir / "ca.pem").read_text(),
              "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.key": (pki_dir / "client.key").read_text(),
              "kafka.ssl.keystore.certificate.chain": (pki_dir / "client.pem").read_text()}
    topic = f"sec-inline-{uuid.uuid4().hex[:6]}"
    from kohort.client.admin import Admin
    with Admin({"bootstrap.servers": sb.bootstrap}) as admin:
        admin.create_topics([topic])
    _write(spark, "kohort", inline, topic, "inline", 5)
    assert [v for _, v, _ in _read(spark, "kohort", inline, topic)] == [f"inline-{i}" for i in range(5)]

    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    o = parse_source_options({**base, **_scram_opts(sb), "kafka.bootstrap.servers": "h:1"})
    assert o.client_config["security.protocol"] == "SASL_SSL" and \
        o.client_config["ssl.ca.location"] == str(pki_dir / "ca.pem")
    for bad, message in [
        ({"kafka.ssl.truststore.location": "/x.jks"}, "kafka.ssl.truststore.type=JKS' is not supported: kohort reads PEM"),
        ({"kafka.ssl.keystore.type": "PKCS12", "kafka.ssl.keystore.location": "/x.p12"}, "reads PEM"),
        ({"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/x", "kafka.ssl.truststore.password": "p"},
         "kafka.ssl.truststore.password"),
        ({"kafka.ssl.keystore.type": "PEM"}, "needs kafka.ssl.keystore.location"),
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"}, "sasl.mechanism must be one of"),
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
          "kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "not supported"),
    ]:
        with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
            parse_source_options({**base, **bad})
        with pytest.raises(ConfigError):
            parse_sink_options({**{k: v for k, v in base.items() if k != "subscribe"}, **bad})


@pytest.mark.slow
def test_spark_source_and_sink_against_apache_kafka_sasl_ssl_scram(spark, pki):  # noqa: F811
    """The same spark-sql-kafka options against Apache Kafka 4.3.1 (SASL_SSL, SCRAM-SHA-256 user made by
    kafka-storage --add-scram, PEM keystore): format("kohort") writes and reads, format("kafka") reads
    the same rows."""
    from tests.helpers.kafka_cluster import KafkaCluster
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    cfg = {"sasl.enabled.mechanisms": "SCRAM-SHA-256",
           "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
           "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
           "listener.name.sasl_ssl.ssl.keystore.location": str(pki / "server-keystore.pem")}
    with KafkaCluster(1, extra_config=cfg, extra_listeners=[("SASL_SSL", "SASL_SSL")],
                      format_args=["--add-scram", "SCRAM-SHA-256=[name=spark,password=spark-Secret-9]"]) as kc:
        kc.create_topic("ak-spark-sec", 2)
        opts = {"kafka.bootstrap.servers": kc.nodes[0].listener_address("SASL_SSL"),
                "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
                "kafka.sasl.jaas.config": SCRAM_JAAS, "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.truststore.location": str(pki / "ca.pem")}
        _write(spark, "kohort", opts, "ak-spark-sec", "ak", 30)
        ours, theirs = _read(spark, "kohort", opts, "ak-spark-sec"), _read(spark, "kafka", opts, "ak-spark-sec")
        assert len(ours) == 30 and ours == theirs
