"""kohort's share-group wire formats checked against Apache Kafka 4.3.1's own generated message classes:
random instances of every share API version and of every share record are encoded by kohort, parsed
by Kafka's classes (tests/interop/share_java/ShareCodec.java, one JVM), re-serialized by Kafka byte for byte,
and Kafka's JSON view of what it parsed must hold kohort's field names, in order, with kohort's values.
Needs the Kafka jars of `make peers` (.peers/kafka-lib)."""
from __future__ import annotations

import base64
import json
import random
import subprocess
import uuid

import pytest

from kohort.protocol import share_group_records as SG
from kohort.protocol import share_state_records as SS
from kohort.protocol.messages import REQUESTS, RESPONSES
from tests.helpers.kafka_cluster import KAFKA_CP, KAFKA_LIB
from tests.protocol.test_messages_data import populate

SRC = __import__("pathlib").Path(__file__).parent / "share_java" / "ShareCodec.java"
MSG = "org.apache.kafka.common.message."
SHARE = "org.apache.kafka.coordinator.share.generated."
GROUP = "org.apache.kafka.coordinator.group.generated."

APIS = {76: ("ShareGroupHeartbeat", (1,)), 77: ("ShareGroupDescribe", (1,)), 78: ("ShareFetch", (1, 2)),
        79: ("ShareAcknowledge", (1, 2)), 90: ("DescribeShareGroupOffsets", (0, 1)),
        91: ("AlterShareGroupOffsets", (0,)), 92: ("DeleteShareGroupOffsets", (0,))}
CASES = [(cls, f"{MSG}{name}{kind}Data", v) for key, (name, versions) in APIS.items()
         for kind, cls in (("Request", REQUESTS[key]), ("Response", RESPONSES[key])) for v in versions]
CASES += [(cls, f"{SHARE}{cls.__name__}", 0) for cls in list(SS.KEYS.values()) + list(SS.VALUES.values())]
CASES += [(cls, f"{GROUP}{cls.__name__}", 0) for cls in list(SG.KEYS.values()) + list(SG.VALUES.values())]
EXAMPLES = 6


@pytest.fixture(scope="module")
def kafka_codec(tmp_path_factory):
    if not any(KAFKA_LIB.glob("kafka-share-coordinator-*.jar")):
        raise RuntimeError(f"Apache Kafka jars missing in {KAFKA_LIB}: run `make peers` (make test does)")
    out = tmp_path_factory.mktemp("sharecodec")
    subprocess.run(["javac", "-cp", KAFKA_CP, "-d", str(out), str(SRC)], check=True, timeout=120)
    lines, expect = [], []
    for cls, java, v in CASES:
        rng = random.Random(f"{cls.__name__}-{v}")
        for i in range(EXAMPLES):
            obj = cls() if i == 0 else populate(cls, v, cls.is_flexible(v), rng)
            data = obj.encode(v)
            lines.append(f"{java} {v} {data.hex()}")
            expect.append((cls, v, obj, data))
    proc = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                           f"{out}:{KAFKA_CP}", "ShareCodec"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=300, check=True)
    answers = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(answers) == len(expect), proc.stderr[-2000:]
    return list(zip(expect, answers))


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def kafka_uuid(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def as_kafka_json(v):
    """kohort's value in the shape of Kafka's JSON converter output."""
    if hasattr(v, "FIELDS"):
        return {camel(f.name): as_kafka_json(getattr(v, f.name)) for f in v.FIELDS if f.name in v.__dict__}
    if isinstance(v, list):
        return [as_kafka_json(x) for x in v]
    if isinstance(v, uuid.UUID):
        return kafka_uuid(v)
    if isinstance(v, (bytes, memoryview)):
        return bytes(v)
    return v


def same(kohort, kafka, path="") -> None:
    if isinstance(kohort, dict):
        assert isinstance(kafka, dict), path
        # Kafka's converter leaves out tagged fields at their default; everything else is written
        assert list(kafka) == [k for k in kohort if k in kafka], f"{path}: field order {list(kafka)} vs {list(kohort)}"
        for k, v in kohort.items():
            if k not in kafka:
                continue
            same(v, kafka[k], f"{path}.{k}")
        return
    if isinstance(kohort, list):
        assert isinstance(kafka, list) and len(kafka) == len(kohort), path
        for i, (a, b) in enumerate(zip(kohort, kafka)):
            same(a, b, f"{path}[{i}]")
        return
    if isinstance(kohort, bytes):
        # Kafka's JSON leaves record sets out (""); their bytes were compared above. Plain bytes: base64
        assert kafka in ("", base64.b64encode(kohort).decode()), path
        return
    assert kohort == kafka, f"{path}: kohort {kohort!r}, Kafka {kafka!r}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}-v{c[2]}")
def test_kafka_parses_and_reserializes_kohorts_bytes(kafka_codec, case):
    cls, _, v = case
    rows = [(e, a) for e, a in kafka_codec if e[0] is cls and e[1] == v]
    assert len(rows) == EXAMPLES
    for (_, _, obj, data), ans in rows:
        assert "error" not in ans, f"{cls.__name__} v{v}: Kafka could not parse kohort's bytes: {ans['error']}"
        assert ans["hex"] == data.hex(), f"{cls.__name__} v{v}: Kafka re-serialized other bytes"
        same(as_kafka_json(obj), ans["json"], cls.__name__)
        if hasattr(cls, "TYPE"):
            assert ans["api_key"] == cls.TYPE
