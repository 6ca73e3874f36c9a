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
"""
import struct
import uuid as _uuid

from kohort.protocol.records import ExternalRecords, SpliceBuffer
from kohort.protocol.schema import (INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, Array, ArrayOf, Message,
                                    Struct, f)


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



# -- the common request read without the schema's per-field codecs ---------------------------------
_HEAD12 = struct.Struct(">iiiibii")     # replica_id (v12-v14), max_wait, min_bytes, max_bytes, isolation, session
_HEAD15 = struct.Struct(">iiibii")
_PART = struct.Struct(">iiqiqi")        # partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
                                        # log_start_offset, partition_max_bytes
_I32 = struct.Struct(">i")
_ZERO_UUID = _uuid.UUID(int=0)
_NO_HWM = (1 << 63) - 1                 # the v18 high_watermark's default


def _uv(buf, p: int) -> tuple[int, int]:
    """An unsigned varint of at most 4 bytes at p -> (value, position after it); IndexError past the end."""
    b = buf[p]
    if b < 0x80:
        return b, p + 1
    v, shift = b & 0x7F, 7
    for q in range(p + 1, p + 4):
        b = buf[q]
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, q + 1
        shift += 7
    raise IndexError("long varint")


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
            if by_id:
                name, tid = "", _uuid.UUID(bytes=bytes(buf[p:p + 16]))
                p += 16
            else:
                k, p = _uv(buf, p)
                if k == 0:
                    return None
                name, tid = str(buf[p:p + k - 1], "utf-8"), _ZERO_UUID
                p += k - 1
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
                                   replica_directory_id=_ZERO_UUID, high_watermark=_NO_HWM)
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
            if by_id:
                name, tid = "", _uuid.UUID(bytes=bytes(buf[p:p + 16]))
                p += 16
            else:
                k, p = _uv(buf, p)
                if k == 0:
                    return None
                name, tid = str(buf[p:p + k - 1], "utf-8"), _ZERO_UUID
                p += k - 1
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
    except (IndexError, ValueError, struct.error):      # UnicodeDecodeError is a ValueError
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
_PART_HEAD = struct.Struct(">ihqqq")          # partition, error, high watermark, last stable, log start
_ABORTED = struct.Struct(">qqB")
_NO_DIVERGING = {"epoch": -1, "end_offset": -1}
_NO_LEADER = {"leader_id": -1, "leader_epoch": -1}
_NO_SNAPSHOT = {"end_offset": -1, "epoch": -1}


def _w_uv(out: bytearray, v: int) -> None:
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


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
        _w_uv(out, len(topics) + 1)
        for t in topics:
            if len(t.__dict__) != 3:                # tags seen or unknown
                return None
            if by_id:
                out += t.topic_id.bytes
            else:
                name = t.topic.encode()
                _w_uv(out, len(name) + 1)
                out += name
            parts = t.partitions
            _w_uv(out, len(parts) + 1)
            for p in parts:
                pd = p.__dict__
                if (len(pd) != 11 or pd["diverging_epoch"].__dict__ != _NO_DIVERGING
                        or pd["current_leader"].__dict__ != _NO_LEADER or pd["snapshot_id"].__dict__ != _NO_SNAPSHOT):
                    return None
                out += _PART_HEAD.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset,
                                       p.log_start_offset)
                aborted = p.aborted_transactions
                if aborted is None:
                    out.append(0)
                else:
                    _w_uv(out, len(aborted) + 1)
                    for a in aborted:
                        if len(a.__dict__) != 2:
                            return None
                        out += _ABORTED.pack(a.producer_id, a.first_offset, 0)
                out += _I32.pack(p.preferred_read_replica)
                rec = p.records
                if rec is None:
                    out.append(0)
                elif isinstance(rec, ExternalRecords):
                    if spliced:
                        _w_uv(out, rec.size + 1)
                        out.splices.append((len(out), rec))
                    else:
                        rec = rec.read()
                        _w_uv(out, len(rec) + 1)
                        out += rec
                else:
                    _w_uv(out, len(rec) + 1)
                    out += rec
                out.append(0)                       # the partition's tagged fields
            out.append(0)                           # the topic's
        out.append(0)                               # the answer's
    except (struct.error, TypeError, AttributeError, KeyError):    # the general encoder names it
        return None
    _I32.pack_into(out, 0, (out.frame_size if spliced else len(out)) - 4)
    return out
