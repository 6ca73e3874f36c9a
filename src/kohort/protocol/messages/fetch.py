"""Fetch (API key 1), v0-v18: read record batches from a partition leader (or follower, KIP-392).

Kafka 4.x accepts only v4+; the schema covers v0-v18. v1 adds throttle_time_ms; v3 max_bytes; v4
isolation_level, last_stable_offset and aborted_transactions (KIP-98); v5 log_start_offset; v7 fetch
sessions and forgotten_topics_data (KIP-227); v9 current_leader_epoch (KIP-320); v10 allows ZStandard
(KIP-110); v11 rack_id and preferred_read_replica (KIP-392); v12 flexible (KIP-482) with last_fetched_epoch,
and the tagged diverging_epoch/current_leader/snapshot_id (KIP-595) and cluster_id; v13 topic IDs (KIP-516);
v14 OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405); v15 replica_state replaces replica_id (KIP-903); v16
node_endpoints (KIP-951); v17 replica_directory_id (KIP-853); v18 high_watermark in the request (KIP-1166).

`read_fetch_request` reads the consumers' common request (v12-v17, no tagged fields) in straight lines
into the same FetchRequest as the schema's decoder (the broker's decode_request tries it first);
`encode_fetch_frame` writes the broker's common answer (v12-v17, no tagged field to write) as the same
frame as the framing encoders (the broker's writer tries it first).

The consumer's side has a straight-line codec beside the schema's, for v4-v18: `fetch_request` makes
the request from the fetcher's partitions with every field set at once (no schema defaults looked up),
`FetchRequest.encode_into` writes requests whose tagged fields are all at their defaults (anything else
through the schema), and `FetchResponse.decode_frame` reads an answer from its whole frame, header
included; a partition carrying tagged fields (diverging_epoch, current_leader, snapshot_id, unknown
ones) is read by the schema's codec of that partition, and an answer with tagged fields above its
partitions (node_endpoints) or anything malformed by the schema's codec as a whole (so its DecodeError
names the problem). Both give equal objects and identical bytes (tests/protocol/test_fetch_codec.py).
"""
import struct
import uuid as _uuid
from operator import itemgetter

from kohort.errors import DecodeError
from kohort.protocol.primitives import ZERO_UUID, Reader, read_uvarint, w_uvarint
from kohort.protocol.records import ExternalRecords, SpliceBuffer
from kohort.protocol.schema import (INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, Array, ArrayOf, Message,
                                    Struct, f)


_new = object.__new__


class FetchRequest(Message):
    API_KEY = 1
    VALID = "0-18"
    FLEXIBLE = "12+"
    SCHEMA = [
        f("cluster_id", STRING, "12+", nullable="12+", tag=0, default=None),
        f("replica_id", INT32, "0-14", default=-1),
        f("replica_state", Struct("ReplicaState", [
            f("replica_id", INT32, "15+", default=-1),
            f("replica_epoch", INT64, "15+", default=-1),
        ]), "15+", tag=1),
        f("max_wait_ms", INT32),
        f("min_bytes", INT32),
        f("max_bytes", INT32, "3+", default=0x7FFFFFFF),
        f("isolation_level", INT8, "4+"),
        f("session_id", INT32, "7+"),
        f("session_epoch", INT32, "7+", default=-1),
        f("topics", ArrayOf("FetchTopic", [
            f("topic", STRING, "0-12"),
            f("topic_id", UUID, "13+"),
            f("partitions", ArrayOf("FetchPartition", [
                f("partition", INT32),
                f("current_leader_epoch", INT32, "9+", default=-1),
                f("fetch_offset", INT64),
                f("last_fetched_epoch", INT32, "12+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("partition_max_bytes", INT32),
                f("replica_directory_id", UUID, "17+", tag=0),
                f("high_watermark", INT64, "18+", tag=1, default=(1 << 63) - 1),
            ])),
        ])),
        f("forgotten_topics_data", ArrayOf("ForgottenTopic", [
            f("topic", STRING, "7-12"),
            f("topic_id", UUID, "13+"),
            f("partitions", Array(INT32), "7+"),
        ]), "7+"),
        f("rack_id", STRING, "11+"),
    ]

    def encode_into(self, out: bytearray, version: int) -> None:
        if 4 <= version <= 18:
            start = len(out)
            if _write_request(out, self, version):
                return
            del out[start:]        # the schema's codec writes it (or names what is wrong with it)
        super().encode_into(out, version)


class FetchResponse(Message):
    API_KEY = 1
    VALID = "0-18"
    FLEXIBLE = "12+"
    SCHEMA = [
        f("throttle_time_ms", INT32, "1+"),
        f("error_code", INT16, "7+"),
        f("session_id", INT32, "7+"),
        f("responses", ArrayOf("FetchableTopicResponse", [
            f("topic", STRING, "0-12"),
            f("topic_id", UUID, "13+"),
            f("partitions", ArrayOf("PartitionData", [
                f("partition_index", INT32),
                f("error_code", INT16),
                f("high_watermark", INT64),
                f("last_stable_offset", INT64, "4+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("diverging_epoch", Struct("EpochEndOffset", [
                    f("epoch", INT32, "12+", default=-1),
                    f("end_offset", INT64, "12+", default=-1),
                ]), "12+", tag=0),
                f("current_leader", Struct("LeaderIdAndEpoch", [
                    f("leader_id", INT32, "12+", default=-1),
                    f("leader_epoch", INT32, "12+", default=-1),
                ]), "12+", tag=1),
                f("snapshot_id", Struct("SnapshotId", [
                    f("end_offset", INT64, default=-1),
                    f("epoch", INT32, default=-1),
                ]), "12+", tag=2),
                f("aborted_transactions", ArrayOf("AbortedTransaction", [
                    f("producer_id", INT64, "4+"),
                    f("first_offset", INT64, "4+"),
                ]), "4+", nullable="4+"),
                f("preferred_read_replica", INT32, "11+", default=-1),
                f("records", RECORDS, nullable="0+"),
            ])),
        ])),
        f("node_endpoints", ArrayOf("NodeEndpoint", [
            f("node_id", INT32, "16+"),
            f("host", STRING, "16+"),
            f("port", INT32, "16+"),
            f("rack", STRING, "16+", nullable="16+", default=None),
        ]), "16+", tag=0),
    ]

    @classmethod
    def decode_frame(cls, payload, version: int):
        """The answer in a response frame's `payload` (the bytes after its size prefix: correlation
        id, the header's tagged fields when flexible, the body) read in one call, as the client's
        answer path wants it: no Reader, no header object; trailing bytes ignored (as
        decode_response_lenient does). None when the general decoder must read it (see the module
        docstring). Record sets are views of `payload`, as the schema's codec makes them."""
        if not 4 <= version <= 18:
            return None
        buf = payload if type(payload) is memoryview else memoryview(payload)
        p = 4
        if version >= 12:          # response header v1: an empty tagged-field section
            if len(buf) < 5 or buf[4] != 0:
                return None
            p = 5
        return _read_response(buf, p, len(buf), version)


# -- the common request read without the schema's per-field codecs ---------------------------------
_HEAD12 = struct.Struct(">iiiibii")     # replica_id (v12-v14), max_wait, min_bytes, max_bytes, isolation, session
_HEAD15 = struct.Struct(">iiibii")
_PART = struct.Struct(">iiqiqi")        # partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
                                        # log_start_offset, partition_max_bytes
_I32 = struct.Struct(">i")
_NO_HWM = (1 << 63) - 1                 # the v18 high_watermark's default


def _uv(buf, p: int) -> tuple[int, int]:
    """An unsigned varint at p -> (value, position after it); _General when cut short or too long."""
    b = buf[p]
    if b < 0x80:
        return b, p + 1
    got = read_uvarint(buf, p, len(buf))
    if got is None:
        raise _General
    return got


def _length(buf, p: int, flexible: bool, fixed) -> tuple[int, int]:
    """An array's or string's length at p (compact: uvarint of n + 1; else the `fixed` struct, int32
    or int16) -> (n, position after it); -1 is null."""
    if flexible:
        n, p = _uv(buf, p)
        return n - 1, p
    return fixed.unpack_from(buf, p)[0], p + fixed.size


def _topic_key(buf, p: int, by_id: bool) -> tuple[str, "_uuid.UUID", int]:
    """A request topic's name (v12) or id (v13+) at p -> (name, topic id, position after it); _General
    for a null name."""
    if by_id:
        return "", _uuid.UUID(bytes=bytes(buf[p:p + 16])), p + 16
    k, p = _uv(buf, p)
    if k == 0:
        raise _General
    return str(buf[p:p + k - 1], "utf-8"), ZERO_UUID, p + k - 1


def read_fetch_request(buf, p: int, version: int) -> "FetchRequest | None":
    """The body of a Fetch v12-v17 request at buf[p:] with no tagged field anywhere (what consumers
    send) -> the FetchRequest the schema's decoder makes of it (the same fields and defaults), read
    with one struct unpack per partition; None for anything else (tagged fields, a null or short
    field, a topic name that is not UTF-8): the schema's decoder then reads it and names what is
    malformed. Trailing bytes after the body are ignored, as the general decoder does."""
    new = object.__new__
    try:
        if version < 15:
            replica_id, max_wait, min_bytes, max_bytes, iso, sid, sepoch = _HEAD12.unpack_from(buf, p)
            p += 25
        else:
            replica_id = -1
            max_wait, min_bytes, max_bytes, iso, sid, sepoch = _HEAD15.unpack_from(buf, p)
            p += 21
        by_id = version >= 13
        n, p = _uv(buf, p)
        if n == 0:
            return None
        topics = []
        for _ in range(n - 1):
            t = new(FetchRequest.FetchTopic)
            name, tid, p = _topic_key(buf, p, by_id)
            k, p = _uv(buf, p)
            if k == 0:
                return None
            parts = []
            for _ in range(k - 1):
                part, cle, off, lfe, lso, pmax = _PART.unpack_from(buf, p)
                if buf[p + 32]:                 # tagged fields
                    return None
                p += 33
                fp = new(FetchRequest.FetchTopic.FetchPartition)
                fp.__dict__.update(partition=part, current_leader_epoch=cle, fetch_offset=off,
                                   last_fetched_epoch=lfe, log_start_offset=lso, partition_max_bytes=pmax,
                                   replica_directory_id=ZERO_UUID, high_watermark=_NO_HWM)
                parts.append(fp)
            if buf[p]:
                return None
            p += 1
            t.__dict__.update(topic=name, topic_id=tid, partitions=parts)
            topics.append(t)
        n, p = _uv(buf, p)
        if n == 0:
            return None
        forgotten = []
        for _ in range(n - 1):
            t = new(FetchRequest.ForgottenTopic)
            name, tid, p = _topic_key(buf, p, by_id)
            k, p = _uv(buf, p)
            if k == 0:
                return None
            ps = [_I32.unpack_from(buf, p + 4 * i)[0] for i in range(k - 1)]
            p += 4 * (k - 1)
            if buf[p]:
                return None
            p += 1
            t.__dict__.update(topic=name, topic_id=tid, partitions=ps)
            forgotten.append(t)
        k, p = _uv(buf, p)
        if k == 0:
            return None
        rack = str(buf[p:p + k - 1], "utf-8")
        p += k - 1
        if p > len(buf) or buf[p]:              # top-level tagged fields
            return None
    except (IndexError, ValueError, struct.error, _General):      # UnicodeDecodeError is a ValueError
        return None
    rs = new(FetchRequest.ReplicaState)
    rs.__dict__.update(replica_id=-1, replica_epoch=-1)
    req = new(FetchRequest)
    req.__dict__.update(replica_id=replica_id, max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=iso, session_id=sid, session_epoch=sepoch, topics=topics,
                        forgotten_topics_data=forgotten, rack_id=rack, replica_state=rs, cluster_id=None)
    return req


# -- the common answer written without the schema's per-field codecs ---------------------------------
_ANSWER_HEAD = struct.Struct(">iiBihi")       # size (patched), correlation id, header tags, throttle, error, session
_ABORTED_OUT = struct.Struct(">qqB")
_NO_DIVERGING = {"epoch": -1, "end_offset": -1}
_NO_LEADER = {"leader_id": -1, "leader_epoch": -1}
_NO_SNAPSHOT = {"end_offset": -1, "epoch": -1}


def encode_fetch_frame(resp: "FetchResponse", version: int, correlation_id: int,
                       spliced: bool) -> "bytearray | None":
    """The whole frame (size prefix, response header v1, body) of a Fetch v12-v17 answer with no
    tagged field to write (no diverging epoch, current leader, snapshot id or node endpoints; what
    the broker answers consumers), the same bytes as framing.encode_response_spliced (`spliced`:
    a SpliceBuffer, ExternalRecords left out as splices) or encode_response_buffer; None for any
    other answer, or one with a value out of its field's range (the general encoders write it or
    name the fault)."""
    if not 12 <= version <= 17:
        return None
    d = resp.__dict__
    if d.get("node_endpoints") or "_tags_seen" in d or "_unknown_tags" in d:
        return None
    try:
        by_id = version >= 13
        out = SpliceBuffer() if spliced else bytearray()
        out += _ANSWER_HEAD.pack(0, correlation_id, 0, resp.throttle_time_ms, resp.error_code, resp.session_id)
        topics = resp.responses
        w_uvarint(out, len(topics) + 1)
        for t in topics:
            if len(t.__dict__) != 3:                # tags seen or unknown
                return None
            if by_id:
                out += t.topic_id.bytes
            else:
                name = t.topic.encode()
                w_uvarint(out, len(name) + 1)
                out += name
            parts = t.partitions
            w_uvarint(out, len(parts) + 1)
            for p in parts:
                pd = p.__dict__
                if (len(pd) != 11 or pd["diverging_epoch"].__dict__ != _NO_DIVERGING
                        or pd["current_leader"].__dict__ != _NO_LEADER or pd["snapshot_id"].__dict__ != _NO_SNAPSHOT):
                    return None
                out += _PART_V5.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                                       p.log_start_offset)
                aborted = p.aborted_transactions
                if aborted is None:
                    out.append(0)
                else:
                    w_uvarint(out, len(aborted) + 1)
                    for a in aborted:
                        if len(a.__dict__) != 2:
                            return None
                        out += _ABORTED_OUT.pack(a.producer_id, a.first_offset, 0)
                out += _I32.pack(p.preferred_read_replica)
                rec = p.records
                if rec is None:
                    out.append(0)
                elif isinstance(rec, ExternalRecords):
                    if spliced:
                        w_uvarint(out, rec.size + 1)
                        out.splices.append((len(out), rec))
                    else:
                        rec = rec.read()
                        w_uvarint(out, len(rec) + 1)
                        out += rec
                else:
                    w_uvarint(out, len(rec) + 1)
                    out += rec
                out.append(0)                       # the partition's tagged fields
            out.append(0)                           # the topic's
        out.append(0)                               # the answer's
    except (struct.error, TypeError, AttributeError, KeyError):    # the general encoder names it
        return None
    _I32.pack_into(out, 0, (out.frame_size if spliced else len(out)) - 4)
    return out


class _General(Exception):
    """Raised inside the straight-line reader: the schema's codec reads the whole answer."""


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_HEAD_V7 = struct.Struct(">ihi")         # throttle_time_ms, error_code, session_id
_PART_V4 = struct.Struct(">ihqq")        # partition_index, error_code, high_watermark, last_stable_offset
_PART_V5 = struct.Struct(">ihqqq")       # + log_start_offset
_ABORTED = struct.Struct(">qq")          # producer_id, first_offset


def _read_response(buf, p: int, end: int, version: int):
    """FetchResponse v4-v18 read from buf[p:end] (a memoryview), or None when the schema's codec must
    read it (see the module docstring)."""
    flexible = version >= 12
    Topic = FetchResponse.FetchableTopicResponse
    Part = Topic.PartitionData
    general = Part._codec(version, flexible)[0]
    try:
        if version >= 7:
            throttle, top_error, session_id = _HEAD_V7.unpack_from(buf, p)
            p += 10
        else:
            throttle = _I32.unpack_from(buf, p)[0]
            top_error = session_id = 0
            p += 4
        count, p = _length(buf, p, flexible, _I32)
        if not 0 <= count <= end - p:
            return None
        topics = []
        for _ in range(count):
            if version >= 13:
                if p + 16 > end:
                    return None
                topic_id = _uuid.UUID(bytes=bytes(buf[p:p + 16]))
                name = ""
                p += 16
            else:
                n, p = _length(buf, p, flexible, _I16)
                if n < 0 or p + n > end:
                    return None
                name = str(buf[p:p + n], "utf-8")
                topic_id = ZERO_UUID
                p += n
            pcount, p = _length(buf, p, flexible, _I32)
            if not 0 <= pcount <= end - p:
                return None
            parts = []
            for _ in range(pcount):
                got = _read_partition(buf, p, end, version, flexible, Part)
                if got is None:
                    r = Reader(buf, p, end)
                    parts.append(general(r))
                    p = r.pos
                else:
                    parts.append(got[0])
                    p = got[1]
            if flexible:
                if buf[p]:
                    return None
                p += 1
            topic = _new(Topic)
            topic.__dict__.update(topic=name, topic_id=topic_id, partitions=parts)
            topics.append(topic)
        if flexible:
            if buf[p]:
                return None
            p += 1
    except (struct.error, IndexError, UnicodeDecodeError, DecodeError, _General):
        return None
    if p > end:
        return None
    obj = _new(FetchResponse)
    obj.__dict__.update(throttle_time_ms=throttle, error_code=top_error, session_id=session_id, responses=topics,
                        node_endpoints=[])
    return obj


def _read_partition(buf, p: int, end: int, version: int, flexible: bool, Part):
    """One PartitionData: (object, next position), or None when it carries tagged fields (its own or
    an aborted transaction's): the schema's codec reads that partition."""
    if version >= 5:
        index, code, hw, lso, start = _PART_V5.unpack_from(buf, p)
        p += 30
    else:
        index, code, hw, lso = _PART_V4.unpack_from(buf, p)
        start = -1
        p += 22
    n, p = _length(buf, p, flexible, _I32)
    if n == -1:
        aborted = None
    elif 0 <= n <= end - p:
        aborted = []
        Aborted = Part.AbortedTransaction
        for _ in range(n):
            pid, first = _ABORTED.unpack_from(buf, p)
            p += 16
            if flexible:
                if buf[p]:
                    return None
                p += 1
            a = _new(Aborted)
            a.__dict__.update(producer_id=pid, first_offset=first)
            aborted.append(a)
    else:
        raise _General
    if version >= 11:
        preferred = _I32.unpack_from(buf, p)[0]
        p += 4
    else:
        preferred = -1
    n, p = _length(buf, p, flexible, _I32)
    if n < 0:
        records = None
    else:
        if p + n > end:
            raise _General
        records = buf[p:p + n]
        p += n
    if flexible:
        if buf[p]:
            return None
        p += 1
    diverging = _new(Part.EpochEndOffset)
    diverging.__dict__.update(epoch=-1, end_offset=-1)
    leader = _new(Part.LeaderIdAndEpoch)
    leader.__dict__.update(leader_id=-1, leader_epoch=-1)
    snapshot = _new(Part.SnapshotId)
    snapshot.__dict__.update(end_offset=-1, epoch=-1)
    part = _new(Part)
    part.__dict__.update(partition_index=index, error_code=code, high_watermark=hw, last_stable_offset=lso,
                         log_start_offset=start, diverging_epoch=diverging, current_leader=leader,
                         snapshot_id=snapshot, aborted_transactions=aborted, preferred_read_replica=preferred,
                         records=records)
    return part, p


def fetch_request(max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int, session_id: int,
                  session_epoch: int, partitions: dict, forgotten: list, topic_ids: dict,
                  rack_id: str) -> FetchRequest:
    """The consumer's FetchRequest: `partitions` {(topic, partition): (fetch_offset, current_leader_epoch,
    last_fetched_epoch, partition_max_bytes)}, `forgotten` [(topic, partition)] (KIP-227), `topic_ids`
    {topic: id or None}, a topic's partitions in the order given; every field set at once as the
    schema's constructors would set it."""
    Topic = FetchRequest.FetchTopic
    Part = Topic.FetchPartition
    by_topic: dict[str, list] = {}
    for (topic, index), (offset, leader_epoch, last_epoch, part_max) in partitions.items():
        part = _new(Part)
        part.__dict__.update(partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset,
                             last_fetched_epoch=last_epoch, log_start_offset=-1, partition_max_bytes=part_max,
                             replica_directory_id=ZERO_UUID, high_watermark=_NO_HWM)
        ps = by_topic.get(topic)
        if ps is None:
            by_topic[topic] = [part]
        else:
            ps.append(part)
    topics = []
    for topic, ps in by_topic.items():
        t = _new(Topic)
        t.__dict__.update(topic=topic, topic_id=topic_ids.get(topic) or ZERO_UUID, partitions=ps)
        topics.append(t)
    forgotten_by: dict[str, list] = {}
    for topic, index in forgotten:
        forgotten_by.setdefault(topic, []).append(index)
    forgotten_topics = []
    for topic, ps in forgotten_by.items():
        t = _new(FetchRequest.ForgottenTopic)
        t.__dict__.update(topic=topic, topic_id=topic_ids.get(topic) or ZERO_UUID, partitions=ps)
        forgotten_topics.append(t)
    state = _new(FetchRequest.ReplicaState)
    state.__dict__.update(replica_id=-1, replica_epoch=-1)
    req = _new(FetchRequest)
    req.__dict__.update(cluster_id=None, replica_id=-1, replica_state=state, max_wait_ms=max_wait_ms,
                        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation_level,
                        session_id=session_id, session_epoch=session_epoch, topics=topics,
                        forgotten_topics_data=forgotten_topics, rack_id=rack_id)
    return req


_DEFAULT_REPLICA_STATE = {"replica_id": -1, "replica_epoch": -1}
_HEAD_V4 = struct.Struct(">iiib")        # max_wait_ms, min_bytes, max_bytes, isolation_level
_TWO_I32 = struct.Struct(">ii")
# a partition's fields by version: v4 partition, fetch_offset, partition_max_bytes; v5 log_start_offset;
# v9 current_leader_epoch; v12 last_fetched_epoch
_REQ_PART = {
    4: (struct.Struct(">iqi"), itemgetter("partition", "fetch_offset", "partition_max_bytes")),
    5: (struct.Struct(">iqqi"), itemgetter("partition", "fetch_offset", "log_start_offset", "partition_max_bytes")),
    9: (struct.Struct(">iiqqi"), itemgetter("partition", "current_leader_epoch", "fetch_offset", "log_start_offset",
                                            "partition_max_bytes")),
    12: (struct.Struct(">iiqiqi"), itemgetter("partition", "current_leader_epoch", "fetch_offset",
                                              "last_fetched_epoch", "log_start_offset", "partition_max_bytes")),
}


def _w_len(out: bytearray, n: int, flexible: bool) -> None:
    """An array's or string's length: compact (uvarint of n + 1) when flexible, else int32."""
    if not flexible:
        out += _I32.pack(n)
        return
    w_uvarint(out, n + 1)


def _w_str(out: bytearray, s: str, flexible: bool) -> None:
    b = s.encode("utf-8")
    if flexible:
        _w_len(out, len(b), True)
    else:
        out += _I16.pack(len(b))
    out += b


def _w_topic_key(out: bytearray, td: dict, version: int, flexible: bool) -> bool:
    """A request topic's id (v13+) or name; False for a topic read with unknown tagged fields."""
    if "_unknown_tags" in td:
        return False
    if version >= 13:
        tid = td["topic_id"]
        out += tid.bytes if tid is not None else bytes(16)
    else:
        _w_str(out, td["topic"], flexible)
    return True


def _write_request(out: bytearray, req, version: int) -> bool:
    """FetchRequest v4-v18 written into `out`; False (something may have been written) when a tagged
    field is not at its default, a struct was read with tagged fields, or a value does not fit: the
    schema's codec writes it then."""
    flexible = version >= 12
    d = req.__dict__
    if "_unknown_tags" in d or "_tags_seen" in d or "_wire" in d:
        return False
    if flexible:
        state = d["replica_state"]
        if d["cluster_id"] is not None or (version >= 15 and (
                type(state) is not FetchRequest.ReplicaState or state.__dict__ != _DEFAULT_REPLICA_STATE)):
            return False
    part_fmt, part_fields = _REQ_PART[12 if version >= 12 else 9 if version >= 9 else 5 if version >= 5 else 4]
    try:
        if version <= 14:
            out += _I32.pack(d["replica_id"])
        out += _HEAD_V4.pack(d["max_wait_ms"], d["min_bytes"], d["max_bytes"], d["isolation_level"])
        if version >= 7:
            out += _TWO_I32.pack(d["session_id"], d["session_epoch"])
        topics = d["topics"]
        _w_len(out, len(topics), flexible)
        for t in topics:
            td = t.__dict__
            if not _w_topic_key(out, td, version, flexible):
                return False
            parts = td["partitions"]
            _w_len(out, len(parts), flexible)
            for part in parts:
                pd = part.__dict__
                out += part_fmt.pack(*part_fields(pd))
                if flexible:
                    if ("_unknown_tags" in pd or "_tags_seen" in pd
                            or version >= 17 and pd["replica_directory_id"] != ZERO_UUID
                            or version >= 18 and pd["high_watermark"] != _NO_HWM):
                        return False
                    out.append(0)
            if flexible:
                out.append(0)
        if version >= 7:
            forgotten = d["forgotten_topics_data"]
            _w_len(out, len(forgotten), flexible)
            for t in forgotten:
                td = t.__dict__
                if not _w_topic_key(out, td, version, flexible):
                    return False
                ps = td["partitions"]
                _w_len(out, len(ps), flexible)
                for index in ps:
                    out += _I32.pack(index)
                if flexible:
                    out.append(0)
        if version >= 11:
            _w_str(out, d["rack_id"], flexible)
        if flexible:
            out.append(0)
    except (struct.error, AttributeError, TypeError, KeyError, ValueError):
        return False
    return True
