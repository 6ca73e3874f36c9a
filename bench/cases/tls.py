"""Throughput over TLS and SASL vs plaintext (issue 16): kohort's client and confluent-kafka, producing then
consuming the same records through each listener of one kohort broker (and of Apache Kafka 4.3.1 when
its jars are there: `make peers`).

The broker this case starts has three listeners: PLAINTEXT, SSL (server certificate only) and SASL_SSL
with SCRAM-SHA-256; certificates are made with `openssl` in a temporary directory, the SCRAM user with
`kohort users add`. Both clients get the same librdkafka-named settings (security.protocol,
ssl.ca.location, sasl.*), so a row differs from its PLAINTEXT row only by the listener. One job = one
fresh 1-partition topic: produce n records of `size` bytes (acks=all, linger.ms=5, batch.size 1 MB),
flush, then read them back from offset 0 by assign(); MB/s of values for each half.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from cases.common import KAFKA_JVM, create_topic, values
from cases.consumer import size_label

CLIENTS = ["kohort", "confluent-kafka"]
PASSWORD = "bench-Secret-1"
_state: dict = {}


def run(client: str, addr: str, conf: dict, topic: str, n: int, size: int) -> dict:
    """Produce n values of `size` bytes to `topic`, then consume them from offset 0; -> MB/s of both."""
    value = values(size, 1)[0]
    base = {"bootstrap.servers": addr, **conf}
    if client == "kohort":
        from kohort import Consumer, Producer
        p = Producer({**base, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000})
        t = time.perf_counter()
        for _ in range(n):
            p.produce(topic, value=value)
        p.flush()
        produce_s = time.perf_counter() - t
        p.close()
        with Consumer({**base, "auto.offset.reset": "earliest", "max.poll.records": 10000,
                       "fetch.max.wait.ms": 100}) as c:
            c.assign([(topic, 0)])
            got = 0
            t = time.perf_counter()
            while got < n:
                got += len(c.poll(1.0))
            consume_s = time.perf_counter() - t
    elif client == "confluent-kafka":
        from confluent_kafka import Consumer, Producer, TopicPartition
        p = Producer({**base, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                      "queue.buffering.max.messages": 1_000_000})
        t = time.perf_counter()
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.01)
        if p.flush(120):
            raise RuntimeError("confluent-kafka did not deliver everything")
        produce_s = time.perf_counter() - t
        c = Consumer({**base, "group.id": "bench-unused", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        t = time.perf_counter()
        while got < n:
            got += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
        consume_s = time.perf_counter() - t
        c.close()
    else:
        raise ValueError(f"unknown client {client!r}")
    mb = n * size / 1e6
    return {"value": mb / produce_s, "rows": {"produce": mb / produce_s, "consume": mb / consume_s},
            "records": n}


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _pki(d: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=kohort-bench-ca", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=localhost", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as fh:
        fh.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "server.ext", cwd=d)
    with open(os.path.join(d, "server-keystore.pem"), "w") as fh:
        fh.write(open(os.path.join(d, "server.key")).read() + open(os.path.join(d, "server.pem")).read())


def _kohort_broker(d: str) -> dict:
    """Start kohort broker with three listeners -> {protocol: address}."""
    from tests.helpers.brokers import KohortBroker, free_port
    data = os.path.join(d, "data")
    os.makedirs(data)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "users", "add", "--data-dir", data,
                        "--user", "bench", "--mechanism", "SCRAM-SHA-256"], input=PASSWORD + "\n",
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))))
    if r.returncode:
        raise RuntimeError(f"kohort users add: {r.stderr}")
    ports = {p: free_port() for p in ("PLAINTEXT", "SSL", "SASL_SSL")}
    b = KohortBroker(data, port=ports["PLAINTEXT"], config={
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": os.path.join(d, "server-keystore.pem")})
    b.__enter__()
    _state["stops"].append(lambda: b.__exit__(None, None, None))
    return {p: f"127.0.0.1:{port}" for p, port in ports.items()}


def _apache_kafka(d: str) -> dict:
    from tests.helpers.kafka_cluster import KafkaCluster, require_peers
    require_peers()
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ks = os.path.join(d, "server-keystore.pem")
    kc = KafkaCluster(1, jvm=KAFKA_JVM, extra_listeners=[("SSL", "SSL"), ("SASL_SSL", "SASL_SSL")],
                      format_args=["--add-scram", f"SCRAM-SHA-256=[name=bench,password={PASSWORD}]"],
                      extra_config={"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                                    "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
                                    "ssl.keystore.type": "PEM", "ssl.keystore.location": ks})
    kc.__enter__()
    _state["stops"].append(lambda: kc.__exit__(None, None, None))
    node = kc.nodes[0]
    return {"PLAINTEXT": node.address, "SSL": node.listener_address("SSL"),
            "SASL_SSL": node.listener_address("SASL_SSL")}


def build(env, mode: str, profile: set[str]):
    from harness import Job, Section
    quick = mode == "quick"
    size, n = (1024, 20_000) if quick else (1024, 100_000)
    d = tempfile.mkdtemp(prefix="kohort-bench-tls-")
    _state.update(dir=d, stops=[])
    _pki(d)
    ca = os.path.join(d, "ca.pem")
    confs = {"PLAINTEXT": {},
             "SSL": {"security.protocol": "SSL", "ssl.ca.location": ca},
             "SASL_SSL/SCRAM-SHA-256": {"security.protocol": "SASL_SSL", "ssl.ca.location": ca,
                                        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench",
                                        "sasl.password": PASSWORD}}
    sec = Section("tls", f"TLS and SASL vs plaintext ({size_label(size)} values, {n} records)", "MB/s",
                  notes=["Same broker, same client settings except the listener: PLAINTEXT, SSL (TLS 1.3, "
                         "server certificate checked), SASL_SSL with SCRAM-SHA-256. produce = first produce() "
                         "to end of flush (acks=all, linger.ms=5, batch.size 1 MB); consume = assign() to the "
                         "last record. Fresh 1-partition topic per run.",
                         "Apache Kafka (full mode) runs with kafka-server-start.sh's JVM options (1 GB heap, G1, "
                         "C2), as every Apache Kafka of the bench does (cases.common.KAFKA_JVM)."])
    jobs = []
    brokers = {"kohort broker": _kohort_broker}
    if not quick:
        brokers["Apache Kafka 4.3.1"] = _apache_kafka
    for bname, start in brokers.items():
        try:
            addrs, err = start(d), None
        except Exception as e:
            addrs, err = {}, f"{type(e).__name__}: {e}"
        for how, conf in confs.items():
            addr = addrs.get(how.split("/")[0])
            for client in CLIENTS:
                jobs.append(Job("tls", f"{bname} · {how}", client, "cases.tls:run",
                                {"client": client, "addr": addr, "conf": conf, "topic": None, "n": n, "size": size},
                                timeout=240, profile=client in profile, subrows=["produce", "consume"],
                                before=_fresh_topic(addrs.get("PLAINTEXT"), err)))
    return [sec], jobs


_seq = iter(range(1_000_000))


def _fresh_topic(plain_addr, err):
    def before(job, round_no):
        if err is not None or plain_addr is None:
            raise RuntimeError(err or "broker not running")
        topic = f"tls-{next(_seq)}"
        create_topic(plain_addr, topic, 1)
        return {"topic": topic}
    return before


def finish(env) -> None:
    for stop in reversed(_state.get("stops", [])):
        try:
            stop()
        except Exception:
            pass
    if _state.get("dir"):
        shutil.rmtree(_state["dir"], ignore_errors=True)
