"""kohort.testing's fault seam (broker/faults.py) on a real in-process broker over a raw socket: every
API kohort serves, at every version, answers an injected error with a well-formed response of that
version carrying the code in every error field and mirroring the request's topics/partitions/groups;
delays hold answers back in order; a dropped connection handles nothing; bad names fail clearly."""
from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from kohort.broker.faults import api_key_of, error_code_of
from kohort.broker.handlers import load_all
from kohort.errors import ErrorCode
from kohort.protocol.framing import decode_response, encode_request
from kohort.protocol.messages import REQUESTS
from kohort.protocol.records import build_batch
from kohort.protocol.schema import Array, StructBase, _StructType
from kohort.testing import broker

CODE = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


class Raw:
    """One blocking Kafka-protocol connection (kohort.protocol framing over a real socket)."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.corr = 0

    def send(self, req, version: int) -> int:
        self.corr += 1
        self.sock.sendall(encode_request(req, version, self.corr))
        return self.corr

    def recv(self, api_key: int, version: int):
        size = struct.unpack(">i", self._exactly(4))[0]
        return decode_response(self._exactly(size), api_key, version)

    def call(self, req, version: int):
        corr = self.send(req, version)
        got, resp = self.recv(type(req).API_KEY, version)
        assert got == corr
        return resp

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def _populate(cls, depth: int = 0):
    """A request with two items in every array (topics "t0"/"t1", partitions 0/1, keys "k0"/"k1")."""
    obj = cls()
    for fl in cls.FIELDS:
        t = fl.type
        inner = t.item if isinstance(t, Array) else t
        if isinstance(t, Array) and isinstance(inner, _StructType):
            items = [_populate(inner.cls, depth + 1) for _ in range(2)]
            for i, it in enumerate(items):
                for key in ("name", "topic", "group_id", "member_id", "key", "transactional_id"):
                    if key in inner.cls._by_name and inner.cls._by_name[key].type.name == "string":
                        setattr(it, key, f"{key[0]}{i}")
                for key in ("partition", "partition_index", "index"):
                    if key in inner.cls._by_name:
                        setattr(it, key, i)
                if "topic_id" in inner.cls._by_name:
                    setattr(it, "topic_id", uuid.UUID(int=i + 1))
            setattr(obj, fl.name, items)
        elif isinstance(t, Array) and inner.name == "int32":
            setattr(obj, fl.name, [0, 1])
        elif isinstance(t, Array) and inner.name == "string":
            setattr(obj, fl.name, ["k0", "k1"])
    return obj


def _error_fields(obj, version: int, flexible: bool, path="") -> list[tuple[str, int]]:
    """(path, code) of every error field present on the wire in this version."""
    out = []
    for fl in type(obj).FIELDS:
        if not (fl.versions[0] <= version <= fl.versions[1]) or (fl.tag is not None and not flexible):
            continue
        k, v = fl.name, getattr(obj, fl.name)
        if k.endswith("error_code"):
            out.append((f"{path}.{k}", v))
        elif isinstance(v, StructBase):
            out += _error_fields(v, version, flexible, f"{path}.{k}")
        elif isinstance(v, list):
            for i, x in enumerate(v):
                if isinstance(x, StructBase):
                    out += _error_fields(x, version, flexible, f"{path}.{k}[{i}]")
    return out


def test_every_api_every_version_answers_an_injected_error_well_formed():
    handlers = load_all()
    checked = 0
    with broker() as b:
        raw = Raw(b.bootstrap_servers)
        try:
            for key, h in sorted(handlers.items()):
                for v in range(h.min_version, h.max_version + 1):
                    req = _populate(REQUESTS[key])
                    if key == 0:
                        req.acks = -1
                    b.fail_next(key, CODE)
                    resp = raw.call(req, v)       # decodes strictly as this API and version
                    errors = _error_fields(resp, v, type(resp).is_flexible(v))
                    assert errors, f"{type(resp).__name__} v{v}: no error field"
                    assert {c for _, c in errors} == {CODE}, f"{type(resp).__name__} v{v}: {errors}"
                    checked += 1
            assert b.faults_pending() == 0
        finally:
            raw.close()
    assert len(handlers) >= 40 and checked == sum(h.max_version - h.min_version + 1 for h in handlers.values())


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_produce_error_mirrors_topics_and_partitions_and_appends_nothing(version):
    with broker() as b:
        b.create_topic("t", partitions=2)
        raw = Raw(b.bootstrap_servers)
        req = REQUESTS[0](acks=-1, timeout_ms=5000, topic_data=[REQUESTS[0].TopicProduceData(
            name="t", partition_data=[REQUESTS[0].TopicProduceData.PartitionProduceData(index=i, records=build_batch(
                [(None, b"v", [], 1_700_000_000_000)])) for i in (0, 1)])])
        if version >= 13:
            from kohort.protocol.messages.metadata import MetadataRequest
            md = raw.call(MetadataRequest(topics=None), 12)
            req.topic_data[0].topic_id = md.topics[0].topic_id
        b.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")
        resp = raw.call(req, version)
        (topic,) = resp.responses
        assert topic.name == "t"
        assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == \
            [(0, CODE, -1), (1, CODE, -1)]
        ok = raw.call(req, version)            # the fault was used up: this one is appended
        assert [p.base_offset for p in ok.responses[0].partition_responses] == [0, 0]
        raw.close()


def test_fetch_and_metadata_errors_keep_what_a_client_needs():
    from kohort.protocol.messages.fetch import FetchRequest
    from kohort.protocol.messages.metadata import MetadataRequest
    with broker() as b:
        b.create_topic("t", partitions=2)
        raw = Raw(b.bootstrap_servers)
        b.fail_next("Metadata", "LEADER_NOT_AVAILABLE")
        md = raw.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 12)
        port = int(b.bootstrap_servers.rsplit(":", 1)[1])
        assert [(x.host, x.port) for x in md.brokers] == [("127.0.0.1", port)]
        assert [(t.name, t.error_code, t.partitions) for t in md.topics] == [("t", 5, [])]
        b.fail_next("Fetch", "NOT_LEADER_OR_FOLLOWER")
        fr = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_epoch=-1, topics=[
            FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in (0, 1)])])
        resp = raw.call(fr, 11)
        assert resp.error_code == CODE
        assert [(p.partition_index, p.error_code, p.high_watermark) for p in resp.responses[0].partitions] == \
            [(0, CODE, -1), (1, CODE, -1)]
        raw.close()


def test_produce_with_acks_0_gets_no_answer_and_nothing_is_appended():
    from kohort.protocol.messages.metadata import MetadataRequest
    with broker() as b:
        b.create_topic("t")
        raw = Raw(b.bootstrap_servers)
        req = REQUESTS[0](acks=0, timeout_ms=5000, topic_data=[REQUESTS[0].TopicProduceData(
            name="t", partition_data=[REQUESTS[0].TopicProduceData.PartitionProduceData(index=0, records=build_batch(
                [(None, b"v", [], 1_700_000_000_000)]))])])
        b.fail_next("Produce", "INVALID_RECORD")
        raw.send(req, 9)
        md = raw.call(MetadataRequest(topics=None), 12)      # the next answer is Metadata's
        assert "t" in {t.name for t in md.topics}
        assert b.faults_applied("Produce") == 1
        raw.close()


def test_delay_holds_answers_back_in_request_order():
    from kohort.protocol.messages.api_versions import ApiVersionsRequest
    from kohort.protocol.messages.metadata import MetadataRequest
    with broker() as b:
        raw = Raw(b.bootstrap_servers)
        raw.call(MetadataRequest(topics=None), 12)
        b.delay("Metadata", 300)
        t0 = time.monotonic()
        c1 = raw.send(MetadataRequest(topics=None), 12)
        c2 = raw.send(ApiVersionsRequest(), 3)
        assert raw.recv(3, 12)[0] == c1
        assert raw.recv(18, 3)[0] == c2
        assert time.monotonic() - t0 >= 0.3
        t0 = time.monotonic()
        raw.call(MetadataRequest(topics=None), 12)               # only the next one was delayed
        assert time.monotonic() - t0 < 0.25
        raw.close()


def test_drop_connection_closes_after_earlier_answers_and_handles_nothing():
    from kohort.protocol.messages.create_topics import CreateTopicsRequest
    from kohort.protocol.messages.metadata import MetadataRequest
    with broker() as b:
        raw = Raw(b.bootstrap_servers)
        b.drop_connection("CreateTopics")
        c1 = raw.send(MetadataRequest(topics=None), 12)
        raw.send(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="dropped", num_partitions=1, replication_factor=1)], timeout_ms=1000), 7)
        assert raw.recv(3, 12)[0] == c1
        with pytest.raises(ConnectionError):
            raw.recv(19, 7)
        raw.close()
        assert b.topics() == []


def test_faults_by_unknown_names_fail_clearly():
    assert api_key_of("JoinGroup") == 11 and error_code_of("REBALANCE_IN_PROGRESS") == 27
    with broker() as b:
        with pytest.raises(ValueError, match="unknown API 'Produe'.*Produce"):
            b.fail_next("Produe", "NOT_LEADER_OR_FOLLOWER")
        with pytest.raises(ValueError, match="unknown error 'NOT_LEADER'"):
            b.fail_next("Produce", "NOT_LEADER")
        with pytest.raises(ValueError, match="count"):
            b.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER", count=0)
        assert b.faults_pending() == 0


def test_unbounded_delay_until_cleared():
    from kohort.protocol.messages.metadata import MetadataRequest
    with broker() as b:
        raw = Raw(b.bootstrap_servers)
        b.delay("Metadata", 150, count=None)
        for _ in range(3):
            t0 = time.monotonic()
            raw.call(MetadataRequest(topics=None), 12)
            assert time.monotonic() - t0 >= 0.15
        assert b.faults_applied("Metadata") == 3 and b.faults_pending("Metadata") == 1
        b.clear_faults("Metadata")
        assert b.faults_pending() == 0
        t0 = time.monotonic()
        raw.call(MetadataRequest(topics=None), 12)
        assert time.monotonic() - t0 < 0.15
        raw.close()


def test_bad_config_and_topics_fail_clearly_and_leave_the_broker_usable():
    from kohort.broker.config import BrokerConfigError
    from kohort.errors import KafkaError, TopicAlreadyExistsError
    from kohort.testing import InProcessBroker
    with pytest.raises(BrokerConfigError, match="did you mean 'auto.create.topics.enable'"):
        InProcessBroker({"auto.create.topic.enable": "false"})
    with pytest.raises(ValueError, match="storage must be 'memory' or 'tmp'"):
        InProcessBroker(storage="disk")   # type: ignore[arg-type]
    with broker() as b:
        b.create_topic("t", partitions=2, config={"cleanup.policy": "compact"})
        with pytest.raises(TopicAlreadyExistsError):
            b.create_topic("t")
        with pytest.raises(KafkaError, match="cleanup.policy"):
            b.create_topic("u", config={"cleanup.policy": "sideways"})
        assert b.topics() == ["t"]
