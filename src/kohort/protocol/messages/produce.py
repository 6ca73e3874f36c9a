"""Produce (API key 0), v0-v13: write record batches to partition leaders.

Kafka 4.x accepts only v3+ but still advertises v0 (KAFKA-18659, for librdkafka); the schema covers v0-v13.
v1 adds throttle_time_ms to the response; v2 log_append_time_ms; v3 transactional_id and the v2 record
format (KIP-98); v5 log_start_offset; v7 allows ZStandard (KIP-110); v8 record_errors/error_message (KIP-467);
v9 flexible (KIP-482); v10 current_leader and node_endpoints tagged fields (KIP-951); v11 may return
TRANSACTION_ABORTABLE and v12 implies AddPartitionsToTxn (KIP-890); v13 topic IDs instead of names (KIP-516).

Both directions of the broker's hot path have a straight-line codec beside the schema's:
`ProduceRequest.read` for v3-v12 requests without tagged fields, `ProduceResponse.encode_into` for
v3-v12 responses whose partitions carry no record errors, no current_leader, no node endpoints and
no tagged fields seen on the wire; so do the producer's: `ProduceRequest.encode_into` for v3-v12
requests without tagged fields whose records are bytes (a GatherBuffer gets large ones as pieces),
`ProduceResponse.read` for v3-v12 responses without record errors, error messages or tagged fields
(`ProduceResponse.decode_frame`: the same from a whole frame, header included), and for an answer
about one partition of one topic `read_one_partition_answer`, a tuple instead of objects
(`OnePartitionProduceResponse`, the producer's response_class). Anything else (and any malformed input, so the schema's
DecodeError names the problem) goes through the schema's codec; both give equal objects and
identical bytes (tests/protocol/test_produce_codec.py compares them).
"""
import struct

from kohort.protocol.primitives import ZERO_UUID, Reader, read_uvarint
from kohort.protocol.records import GATHER_MIN, GatherBuffer
from kohort.protocol.schema import INT16, INT32, INT64, RECORDS, STRING, UUID, ArrayOf, Message, Struct, f

_new = object.__new__
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


class ProduceRequest(Message):
    API_KEY = 0
    VALID = "0-13"
    FLEXIBLE = "9+"
    SCHEMA = [
        f("transactional_id", STRING, "3+", nullable="3+", default=None),
        f("acks", INT16),
        f("timeout_ms", INT32),
        f("topic_data", ArrayOf("TopicProduceData", [
            f("name", STRING, "0-12"),
            f("topic_id", UUID, "13+"),
            f("partition_data", ArrayOf("PartitionProduceData", [
                f("index", INT32),
                f("records", RECORDS, nullable="0+"),
            ])),
        ])),
    ]

    @classmethod
    def read(cls, r: Reader, version: int):
        if 3 <= version <= 12:
            obj = _read_request(cls, r, version)
            if obj is not None:
                return obj
        return super().read(r, version)

    def encode_into(self, out: bytearray, version: int) -> None:
        if not (3 <= version <= 12 and _write_request(out, self, version)):
            super().encode_into(out, version)


def produce_request(transactional_id: str | None, acks: int, timeout_ms: int, topics) -> ProduceRequest:
    """The ProduceRequest carrying `topics`, [(topic name, [(partition index, records)])], made as
    the reader's fast path (`_read_request`) makes one: every field set at once, no schema defaults
    looked up (the producer's send path: a third of the instructions of the constructors)."""
    Topic = ProduceRequest.TopicProduceData
    Part = Topic.PartitionProduceData
    topic_data = []
    for name, partitions in topics:
        parts = []
        for index, records in partitions:
            part = _new(Part)
            part.__dict__.update(index=index, records=records)
            parts.append(part)
        topic = _new(Topic)
        topic.__dict__.update(name=name, topic_id=ZERO_UUID, partition_data=parts)
        topic_data.append(topic)
    req = _new(ProduceRequest)
    req.__dict__.update(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms, topic_data=topic_data)
    return req


class ProduceResponse(Message):
    API_KEY = 0
    VALID = "0-13"
    FLEXIBLE = "9+"
    SCHEMA = [
        f("responses", ArrayOf("TopicProduceResponse", [
            f("name", STRING, "0-12"),
            f("topic_id", UUID, "13+"),
            f("partition_responses", ArrayOf("PartitionProduceResponse", [
                f("index", INT32),
                f("error_code", INT16),
                f("base_offset", INT64),
                f("log_append_time_ms", INT64, "2+", default=-1),
                f("log_start_offset", INT64, "5+", default=-1),
                f("record_errors", ArrayOf("BatchIndexAndErrorMessage", [
                    f("batch_index", INT32, "8+"),
                    f("batch_index_error_message", STRING, "8+", nullable="8+", default=None),
                ]), "8+"),
                f("error_message", STRING, "8+", nullable="8+", default=None),
                f("current_leader", Struct("LeaderIdAndEpoch", [
                    f("leader_id", INT32, "10+", default=-1),
                    f("leader_epoch", INT32, "10+", default=-1),
                ]), "10+", tag=0),
            ])),
        ])),
        f("throttle_time_ms", INT32, "1+"),
        f("node_endpoints", ArrayOf("NodeEndpoint", [
            f("node_id", INT32, "10+"),
            f("host", STRING, "10+"),
            f("port", INT32, "10+"),
            f("rack", STRING, "10+", nullable="10+", default=None),
        ]), "10+", tag=0),
    ]

    def encode_into(self, out: bytearray, version: int) -> None:
        if not (3 <= version <= 12 and _write_response(out, self, version)):
            super().encode_into(out, version)

    @classmethod
    def decode_frame(cls, payload, version: int):
        """The response in a response frame's `payload` (the bytes after its size prefix: correlation
        id, the header's tagged fields when flexible, the body) read in one call, as the client's
        answer path wants it: no Reader, no header object; trailing bytes ignored (as
        decode_response_lenient does). None when the general decoder must read it (see `read`)."""
        if not 3 <= version <= 12:
            return None
        p = 4
        if version >= 9:           # response header v1: an empty tagged-field section
            if len(payload) < 5 or payload[4] != 0:
                return None
            p = 5
        got = _read_response_at(cls, payload, p, len(payload), version)
        return None if got is None else got[0]

    @classmethod
    def read(cls, r: Reader, version: int):
        if 3 <= version <= 12:
            obj = _read_response(cls, r, version)
            if obj is not None:
                return obj
        return super().read(r, version)


class OnePartitionProduceResponse(ProduceResponse):
    """ProduceResponse as the producer decodes the answers to its requests (the `response_class` it
    sends them with): `decode_frame` reads the common answer for one partition of one topic into a
    tuple (`read_one_partition_answer`) instead of three objects; any other answer is read as
    ProduceResponse reads it."""

    @classmethod
    def decode_frame(cls, payload, version: int):
        got = read_one_partition_answer(payload, version)
        return got if got is not None else ProduceResponse.decode_frame(payload, version)



def _read_request(cls, r: Reader, version: int):
    """The common v3-v12 request read straight from the buffer, or None (r untouched) when the
    schema's codec must read it: tagged fields present, a length past the end, bad UTF-8.
    Lengths of flexible versions are varints, nearly always of one byte: read inline."""
    buf, p, end = r.buf, r.pos, r.end
    flexible = version >= 9
    Topic = cls.TopicProduceData
    Part = Topic.PartitionProduceData
    try:
        if flexible:
            n = buf[p]
            if n < 0x80:
                n -= 1
                p += 1
            else:
                got = read_uvarint(buf, p, end)
                if got is None:
                    return None
                n, p = got[0] - 1, got[1]
        else:
            n = _I16.unpack_from(buf, p)[0]
            p += 2
        if n < 0:
            tid = None
        elif p + n > end:
            return None
        else:
            tid = str(buf[p:p + n], "utf-8")
            p += n
        acks, timeout = _ACKS_TIMEOUT.unpack_from(buf, p)
        p += 6
        if flexible:
            count = buf[p]
            if count < 0x80:
                p += 1
            else:
                got = read_uvarint(buf, p, end)
                if got is None:
                    return None
                count, p = got
            if count == 0:                          # a null array: the schema's error
                return None
            count -= 1
        else:
            count = _I32.unpack_from(buf, p)[0]
            p += 4
            if count < 0:
                return None
        if count > end - p:
            return None
        topics = []
        for _ in range(count):
            if flexible:
                n = buf[p]
                if n < 0x80:
                    p += 1
                else:
                    got = read_uvarint(buf, p, end)
                    if got is None:
                        return None
                    n, p = got
                if n == 0:
                    return None
                n -= 1
            else:
                n = _I16.unpack_from(buf, p)[0]
                p += 2
                if n < 0:
                    return None
            if p + n > end:
                return None
            name = str(buf[p:p + n], "utf-8")
            p += n
            if flexible:
                pcount = buf[p]
                if pcount < 0x80:
                    p += 1
                else:
                    got = read_uvarint(buf, p, end)
                    if got is None:
                        return None
                    pcount, p = got
                if pcount == 0:
                    return None
                pcount -= 1
            else:
                pcount = _I32.unpack_from(buf, p)[0]
                p += 4
                if pcount < 0:
                    return None
            if pcount > end - p:
                return None
            parts = []
            for _ in range(pcount):
                index = _I32.unpack_from(buf, p)[0]
                p += 4
                if flexible:
                    got = read_uvarint(buf, p, end)       # a records length: several bytes
                    if got is None:
                        return None
                    n, p = got[0] - 1, got[1]
                else:
                    n = _I32.unpack_from(buf, p)[0]
                    p += 4
                if n < 0:
                    records = None
                elif p + n > end:
                    return None
                else:
                    records = buf[p:p + n]
                    p += n
                if flexible:
                    if p >= end or buf[p] != 0:     # tagged fields: the schema keeps them
                        return None
                    p += 1
                part = _new(Part)
                part.__dict__.update(index=index, records=records)
                parts.append(part)
            if flexible:
                if p >= end or buf[p] != 0:
                    return None
                p += 1
            topic = _new(Topic)
            topic.__dict__.update(name=name, partition_data=parts, topic_id=ZERO_UUID)
            topics.append(topic)
        if flexible:
            if p >= end or buf[p] != 0:
                return None
            p += 1
    except (struct.error, UnicodeDecodeError, IndexError):
        return None
    if p > end:
        return None
    obj = _new(cls)
    obj.__dict__.update(transactional_id=tid, acks=acks, timeout_ms=timeout, topic_data=topics)
    r.pos = p
    return obj


def _read_response(cls, r: Reader, version: int):
    """The common v3-v12 response (the producer's hot path) read straight from the buffer, or None
    (r untouched) when the schema's codec must read it: record errors, an error message, tagged
    fields (current_leader, node_endpoints), a length past the end, bad UTF-8."""
    got = _read_response_at(cls, r.buf, r.pos, r.end, version)
    if got is None:
        return None
    obj, r.pos = got
    return obj


def _read_response_at(cls, buf, p: int, end: int, version: int):
    """`_read_response` on buf[p:end] (bytes or a memoryview): (response, position after it) or None."""
    flexible = version >= 9
    Topic = cls.TopicProduceResponse
    Part = Topic.PartitionProduceResponse
    Leader = Part.LeaderIdAndEpoch
    part_fmt = _PART_V5 if version >= 5 else _PART_V3
    part_size = part_fmt.size
    try:
        if flexible:
            count = buf[p] - 1
            p += 1
        else:
            count = _I32.unpack_from(buf, p)[0]
            p += 4
        if not 0 <= count <= end - p or flexible and count >= 0x7F:
            return None
        topics = []
        for _ in range(count):
            if flexible:
                n = buf[p] - 1
                p += 1
                if not 0 <= n < 0x7F:
                    return None
            else:
                n = _I16.unpack_from(buf, p)[0]
                p += 2
                if n < 0:
                    return None
            if p + n > end:
                return None
            name = str(buf[p:p + n], "utf-8")
            p += n
            if flexible:
                pcount = buf[p] - 1
                p += 1
                if not 0 <= pcount < 0x7F:
                    return None
            else:
                pcount = _I32.unpack_from(buf, p)[0]
                p += 4
                if pcount < 0:
                    return None
            if pcount * part_size > end - p:
                return None
            parts = []
            for _ in range(pcount):
                if version >= 5:
                    index, code, base, append_time, start = part_fmt.unpack_from(buf, p)
                else:
                    index, code, base, append_time = part_fmt.unpack_from(buf, p)
                    start = -1
                p += part_size
                if version >= 8:
                    if flexible:        # empty record_errors, null error_message, no tagged fields
                        if buf[p] != 1 or buf[p + 1] != 0 or buf[p + 2] != 0:
                            return None
                        p += 3
                    else:
                        if buf[p:p + 6] != b"\0\0\0\0\xff\xff":
                            return None
                        p += 6
                leader = _new(Leader)
                leader.__dict__.update(leader_id=-1, leader_epoch=-1)
                part = _new(Part)
                part.__dict__.update(index=index, error_code=code, base_offset=base,
                                     log_append_time_ms=append_time, log_start_offset=start,
                                     record_errors=[], error_message=None, current_leader=leader)
                parts.append(part)
            if flexible:
                if buf[p] != 0:
                    return None
                p += 1
            topic = _new(Topic)
            topic.__dict__.update(name=name, partition_responses=parts, topic_id=ZERO_UUID)
            topics.append(topic)
        throttle = _I32.unpack_from(buf, p)[0]
        p += 4
        if flexible:
            if buf[p] != 0:
                return None
            p += 1
    except (struct.error, UnicodeDecodeError, IndexError):
        return None
    if p > end:
        return None
    obj = _new(cls)
    obj.__dict__.update(responses=topics, throttle_time_ms=throttle, node_endpoints=[])
    return obj, p


_PART_V3 = struct.Struct(">ihqq")        # index, error_code, base_offset, log_append_time_ms
_PART_V5 = struct.Struct(">ihqqq")       # + log_start_offset


def _write_str(out: bytearray, s: str, flexible: bool) -> None:
    b = s.encode("utf-8")
    if flexible:
        _write_uvarint(out, len(b) + 1)
    else:
        out += _I16.pack(len(b))
    out += b


def _write_uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _write_request(out: bytearray, req, version: int) -> bool:
    """The common v3-v12 request (the client's hot path) written straight into `out`; False (nothing
    written) when the schema's codec must write it: tagged fields, records that are not plain bytes,
    a value out of range. Records of GATHER_MIN bytes or more going into a GatherBuffer are noted as
    a piece, not copied, as the schema's RECORDS writer does."""
    d = req.__dict__
    if d.get("_unknown_tags") or d.get("_tags_seen"):
        return False
    flexible = version >= 9
    start = len(out)
    gather = type(out) is GatherBuffer
    pieces = len(out.pieces) if gather else 0
    try:
        tid = d["transactional_id"]
        if tid is None:
            out += b"\0" if flexible else b"\xff\xff"
        else:
            _write_str(out, tid, flexible)
        out += _ACKS_TIMEOUT.pack(d["acks"], d["timeout_ms"])
        topics = d["topic_data"]
        if flexible:
            _write_uvarint(out, len(topics) + 1)
        else:
            out += _I32.pack(len(topics))
        for t in topics:
            td = t.__dict__
            if "_unknown_tags" in td or "_tags_seen" in td:
                raise TypeError
            _write_str(out, td["name"], flexible)
            parts = td["partition_data"]
            if flexible:
                _write_uvarint(out, len(parts) + 1)
            else:
                out += _I32.pack(len(parts))
            for part in parts:
                pd = part.__dict__
                if "_unknown_tags" in pd or "_tags_seen" in pd:
                    raise TypeError
                out += _I32.pack(pd["index"])
                records = pd["records"]
                if records is None:
                    out += b"\0" if flexible else b"\xff\xff\xff\xff"
                else:
                    kind = type(records)
                    if kind is memoryview:
                        if records.itemsize != 1 or not records.c_contiguous:
                            raise TypeError
                    elif kind is not bytes and kind is not bytearray:
                        raise TypeError          # e.g. ExternalRecords: the schema's writer
                    n = len(records)
                    if flexible:
                        _write_uvarint(out, n + 1)
                    else:
                        out += _I32.pack(n)
                    if gather and n >= GATHER_MIN:
                        out.add_piece(records)
                    else:
                        out += records
                if flexible:
                    out.append(0)                   # no tagged fields
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    except (struct.error, AttributeError, KeyError, TypeError, UnicodeEncodeError):
        del out[start:]                  # the schema's codec writes it, or reports what is wrong
        if gather and len(out.pieces) > pieces:
            del out.pieces[pieces:]
        return False
    return True


def _write_response(out: bytearray, resp, version: int) -> bool:
    """The common v3-v12 response written straight into `out`; False (nothing written) when the
    schema's codec must write it."""
    d = resp.__dict__
    if d.get("_unknown_tags") or d.get("_tags_seen") or d.get("node_endpoints"):
        return False
    responses = d["responses"]
    for t in responses:
        td = t.__dict__
        if "_unknown_tags" in td or "_tags_seen" in td:
            return False
        for p in td["partition_responses"]:
            pd = p.__dict__
            if pd["record_errors"] or "_unknown_tags" in pd or "_tags_seen" in pd:
                return False
            cl = pd.get("current_leader")
            if cl is not None and version >= 10:
                cd = cl.__dict__
                if cd["leader_id"] != -1 or cd["leader_epoch"] != -1 or len(cd) != 2:
                    return False
            elif cl is None and version >= 10:
                return False
    flexible = version >= 9
    start = len(out)
    try:
        if flexible:
            _write_uvarint(out, len(responses) + 1)
        else:
            out += _I32.pack(len(responses))
        for t in responses:
            td = t.__dict__
            _write_str(out, td["name"], flexible)
            parts = td["partition_responses"]
            if flexible:
                _write_uvarint(out, len(parts) + 1)
            else:
                out += _I32.pack(len(parts))
            for p in parts:
                pd = p.__dict__
                if version >= 5:
                    out += _PART_V5.pack(pd["index"], pd["error_code"], pd["base_offset"],
                                         pd["log_append_time_ms"], pd["log_start_offset"])
                else:
                    out += _PART_V3.pack(pd["index"], pd["error_code"], pd["base_offset"],
                                         pd["log_append_time_ms"])
                if version >= 8:
                    if flexible:
                        out.append(1)                       # record_errors: empty compact array
                    else:
                        out += b"\0\0\0\0"
                    msg = pd["error_message"]
                    if msg is None:
                        out += b"\0" if flexible else b"\xff\xff"
                    else:
                        _write_str(out, msg, flexible)
                if flexible:
                    out.append(0)                           # no tagged fields
            if flexible:
                out.append(0)
        out += _I32.pack(d["throttle_time_ms"])
        if flexible:
            out.append(0)
    except (struct.error, AttributeError, KeyError, TypeError, UnicodeEncodeError):
        del out[start:]                  # the schema's codec reports it as it always has
        return False
    return True


# -- one partition, straight from and to whole frames (the broker's common Produce request) --------
_REQ_HEAD = struct.Struct(">hhih")          # api key, version, correlation id, client id length
_ONE = struct.Struct(">i")


def read_one_partition(payload) -> tuple | None:
    """A whole request frame's payload (header and body) that is Produce v3-v12 with no
    transactional id, acks -1 or 1, one topic with one partition carrying records, no tagged
    fields and no trailing bytes, read without building the request's objects ->
    (version, correlation_id, client_id, acks, timeout_ms, topic, index, records_start,
    records_end), the records being payload[records_start:records_end]. None for any other
    frame (the general decoder reads it, and names what is malformed)."""
    try:
        api_key, version, corr, n = _REQ_HEAD.unpack_from(payload, 0)
        if api_key != 0 or not 3 <= version <= 12:
            return None
        p = 10
        if n < 0:
            client_id = None
        else:
            client_id = str(payload[p:p + n], "utf-8")
            p += n
        end = len(payload)
        if version >= 9:
            if payload[p] or payload[p + 1]:        # header tagged fields; transactional_id not null
                return None
            acks, timeout = _ACKS_TIMEOUT.unpack_from(payload, p + 2)
            p += 8
            n = payload[p + 1] - 1                  # one topic, a name of up to 126 bytes
            if payload[p] != 2 or n < 0 or n >= 0x7F:
                return None
            p += 2
            topic = str(payload[p:p + n], "utf-8")
            p += n
            if payload[p] != 2:                     # one partition
                return None
            index = _ONE.unpack_from(payload, p + 1)[0]
            got = read_uvarint(payload, p + 5, end)
            if got is None or got[0] < 2:
                return None
            start = got[1]
            stop = start + got[0] - 1
            if stop + 3 != end or payload[stop] or payload[stop + 1] or payload[stop + 2]:
                return None
        else:
            if payload[p] != 0xFF or payload[p + 1] != 0xFF:     # transactional_id not null
                return None
            acks, timeout = _ACKS_TIMEOUT.unpack_from(payload, p + 2)
            p += 8
            if _ONE.unpack_from(payload, p)[0] != 1:
                return None
            n = _I16.unpack_from(payload, p + 4)[0]
            if n < 0:
                return None
            p += 6
            topic = str(payload[p:p + n], "utf-8")
            p += n
            if _ONE.unpack_from(payload, p)[0] != 1:
                return None
            index, size = struct.unpack_from(">ii", payload, p + 4)
            start = p + 12
            stop = start + size
            if size <= 0 or stop != end:
                return None
        if acks != -1 and acks != 1:
            return None
        return (version, corr, client_id, acks, timeout, topic, index, start, stop)
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


def read_one_partition_answer(payload, version: int) -> tuple | None:
    """A response frame's payload (correlation id, header, body: what `decode_frame` reads) answering
    one partition of one topic, v3-v12, with no record errors, no error message and no tagged fields
    -> (topic, index, error_code, base_offset, log_append_time_ms); trailing bytes ignored. The
    counterpart of `encode_one_partition` for the producer's answer path. None for any other answer
    (ProduceResponse reads it)."""
    if not 3 <= version <= 12:
        return None
    try:
        if version >= 9:
            # empty header tags, one topic, its name's length (one byte: names up to 126 bytes)
            n = payload[6] - 1
            if payload[4] or payload[5] != 2 or not 0 <= n < 0x7F:
                return None
            p = 7 + n
            topic = str(payload[7:p], "utf-8")
            if payload[p] != 2:                     # one partition
                return None
            p += 1
        else:
            if _ONE.unpack_from(payload, 4)[0] != 1:
                return None
            n = _I16.unpack_from(payload, 8)[0]
            if n < 0:
                return None
            p = 10 + n
            topic = str(payload[10:p], "utf-8")
            if _ONE.unpack_from(payload, p)[0] != 1:
                return None
            p += 4
        index, code, base, append_time = _PART_V3.unpack_from(payload, p)
        p += _PART_V5.size if version >= 5 else _PART_V3.size
        if version >= 9:
            # no record errors, null error message, partition and topic tags, throttle, tags
            if payload[p:p + 4] != b"\1\0\0\0" or payload[p + 8] != 0:
                return None
        else:
            if version >= 8:
                if payload[p:p + 6] != b"\0\0\0\0\xff\xff":
                    return None
                p += 6
            if len(payload) < p + 4:                # throttle_time_ms
                return None
        return (topic, index, code, base, append_time)
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


def encode_one_partition(version: int, correlation_id: int, topic: str, index: int, error_code: int,
                         base_offset: int, log_append_time_ms: int, log_start_offset: int,
                         error_message: str | None = None) -> bytearray:
    """The response frame (size prefix, header, body) answering one partition of one topic, v3-v12:
    the bytes `encode_response_buffer` writes for the same ProduceResponse (no record errors,
    current_leader unknown, no node endpoints, throttle 0)."""
    flexible = version >= 9
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(correlation_id)
    if flexible:
        out += b"\0\2"                              # header tagged fields; one topic
    else:
        out += b"\0\0\0\1"
    _write_str(out, topic, flexible)
    out += b"\2" if flexible else b"\0\0\0\1"      # one partition
    if version >= 5:
        out += _PART_V5.pack(index, error_code, base_offset, log_append_time_ms, log_start_offset)
    else:
        out += _PART_V3.pack(index, error_code, base_offset, log_append_time_ms)
    if version >= 8:
        out += b"\1" if flexible else b"\0\0\0\0"  # no record errors
        if error_message is None:
            out += b"\0" if flexible else b"\xff\xff"
        else:
            _write_str(out, error_message, flexible)
    out += b"\0\0\0\0\0\0\0" if flexible else b"\0\0\0\0"   # partition and topic tags, throttle, tags
    _I32.pack_into(out, 0, len(out) - 4)
    return out
