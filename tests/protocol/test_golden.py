"""Golden bytes: frames captured from real clients (confluent-kafka, kafka-python, aiokafka) and from a
real broker (Tansu), decoded by kohort and re-encoded byte for byte. Recapture: tests/protocol/golden/capture.py."""
import json
import os

import pytest

from kohort.protocol.framing import UnsupportedRequestError, decode_request
from kohort.protocol.headers import (
    RequestHeader, ResponseHeader, request_header_version, response_header_version,
)
from kohort.protocol.messages import REQUESTS, RESPONSES
from kohort.protocol.primitives import Reader

FRAMES = [json.loads(line) for line in open(os.path.join(os.path.dirname(__file__), "golden", "frames.jsonl"))]
# KIP-714 client telemetry (api 71) is sent by librdkafka but is not an API kohort implements.
NOT_IMPLEMENTED = {71}


def _id(r):
    return f"{r['client']}-{r['direction']}-{r['api_key']}v{r['api_version']}"


IMPLEMENTED = [r for r in FRAMES if r["api_key"] not in NOT_IMPLEMENTED]


@pytest.mark.parametrize("row", IMPLEMENTED, ids=[_id(r) for r in IMPLEMENTED])
def test_golden_frame(row):
    key, ver, raw = row["api_key"], row["api_version"], bytes.fromhex(row["hex"])
    r = Reader(raw)
    if row["direction"] == "request":
        cls = REQUESTS[key]
        hv = request_header_version(cls, ver)
        header = RequestHeader.read(r, hv)
        assert header.request_api_key == key and header.request_api_version == ver
        body = cls.decode(r, ver)
        again = header.encode(hv) + body.encode(ver)
    else:
        cls = RESPONSES[key]
        hv = response_header_version(key, cls, ver)
        header = ResponseHeader.read(r, hv)
        body = cls.decode(r, ver)
        again = header.encode(hv) + body.encode(ver)
    assert again == raw


def test_frames_of_apis_kohort_lacks_are_refused_as_unsupported():
    """A captured request of an API kohort does not implement is well-framed but unsupported (the
    broker then answers as Kafka does); kohort has no response class for it either."""
    lacking = [r for r in FRAMES if r["api_key"] in NOT_IMPLEMENTED]
    assert {r["direction"] for r in lacking} == {"request", "response"}
    for row in lacking:
        key, ver = row["api_key"], row["api_version"]
        assert key not in REQUESTS and key not in RESPONSES
        if row["direction"] == "request":
            with pytest.raises(UnsupportedRequestError) as ei:
                decode_request(bytes.fromhex(row["hex"]))
            assert (ei.value.api_key, ei.value.api_version, ei.value.client_id) == (key, ver, "rdkafka")


def test_capture_covers_three_clients_and_both_directions():
    seen = {(r["client"], r["direction"]) for r in FRAMES}
    for client in ("confluent-kafka", "kafka-python", "aiokafka"):
        assert (client, "request") in seen and (client, "response") in seen
