"""Record layer: codecs, RecordBatch v2, control batches, legacy v0/v1, fuzzing, kafka-python interop."""
import itertools
import os
import random
import struct
import types
import zlib

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafka.codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kohort.errors import DecodeError
from kohort.protocol import compression as comp
from kohort.protocol import records as R

CODECS = [0, 1, 2, 3, 4]


@pytest.fixture
def kp_snappy(monkeypatch):
    """kafka-python's codec module wants python-snappy (not installed); give it raw snappy from
    cramjam so kafka-python's own xerial framing and record code run unchanged."""
    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)
    return shim


def sample_records(n=50, seed=1):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"key-%d" % i
        n = rnd.choice([0, 1, 60, 100, 300, 20000])
        value = None if i % 11 == 5 else rnd.randbytes(n // 4) * 4 + b"x" * (n % 4)
        headers = [] if i % 4 else [("h1", b"v1"), ("ключ", None), ("", b"")]
        out.append((key, value, headers, 1_700_000_000_000 + rnd.randint(-5000, 5000)))
    return out


# -- compression ----------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 1000, 300_000])
def test_codec_round_trip(codec, size):
    data = os.urandom(size // 2) + b"ab" * (size // 4)
    assert comp.decompress(codec, comp.compress(codec, data)) == data


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_is_bounded(codec):
    bomb = comp.compress(codec, bytes(4 << 20))
    assert len(bomb) < 300_000
    with pytest.raises(DecodeError, match="limit"):
        comp.decompress(codec, bomb, max_size=1 << 20)
    assert len(comp.decompress(codec, bomb, max_size=4 << 20)) == 4 << 20


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_truncated_compressed_data(codec):
    blob = comp.compress(codec, os.urandom(5000))
    for cut in (0, 1, len(blob) // 2, len(blob) - 1):
        with pytest.raises(DecodeError):
            comp.decompress(codec, blob[:cut])


def test_unknown_codec():
    with pytest.raises(DecodeError):
        comp.decompress(5, b"abc")


def test_xerial_snappy_hand_built():
    data = os.urandom(40_000) + b"z" * 60_000
    blocks = [data[i:i + 32768] for i in range(0, len(data), 32768)]
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for blk in blocks:
        raw = bytes(cramjam.snappy.compress_raw(blk))
        framed += struct.pack(">i", len(raw)) + raw
    assert comp.decompress(2, framed) == data
    assert comp.decompress(2, comp.xerial_snappy_compress(data)) == data
    # little-endian version ints (some producers) still decode
    assert comp.decompress(2, framed[:8] + struct.pack("<ii", 1, 1) + framed[16:]) == data
    with pytest.raises(DecodeError):
        comp.decompress(2, framed[:-3])
    with pytest.raises(DecodeError):
        comp.decompress(2, framed, max_size=len(data) - 1)


def test_xerial_snappy_from_kafka_python(kp_snappy):
    data = os.urandom(1000) * 70
    framed = kafka.codec.snappy_encode(data)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert comp.decompress(2, framed) == data
    # and kafka-python reads our raw snappy
    assert kafka.codec.snappy_decode(comp.compress(2, data)) == data


# -- RecordBatch v2 -------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS)
def test_batch_round_trip(codec):
    recs = sample_records()
    raw = R.build_batch(recs, base_offset=1000, compression=codec, producer_id=77, producer_epoch=3,
                        base_sequence=500, transactional=True, partition_leader_epoch=9)
    h = R.validate_batch(raw)
    assert h.magic == 2 and h.total_size == len(raw) and h.compression == codec
    assert (h.base_offset, h.last_offset, h.next_offset, h.records_count) == (1000, 1049, 1050, 50)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 500)
    assert h.is_transactional and not h.is_control and h.timestamp_type == R.TIMESTAMP_CREATE_TIME
    assert h.partition_leader_epoch == 9
    assert h.base_timestamp == recs[0][3] and h.max_timestamp == max(r[3] for r in recs)
    h2, got = R.decode_batch(raw)
    assert h2 == h
    for i, (r, (k, v, hs, ts)) in enumerate(zip(got, recs)):
        assert (r.offset, r.key, r.value, r.headers, r.timestamp) == (1000 + i, k, v, hs, ts)
        assert r.leader_epoch == 9 and r.timestamp_type == 0
    fast = list(R.iter_records(raw, check_crc=True))
    assert fast == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got]
    assert list(R.iter_batch_records(bytearray(raw), 0, h)) == fast


def test_record_objects_as_input_and_any_records():
    recs = [R.Record(0, 5, b"k", b"v", [("a", b"b")]), R.Record(0, 6, None, None)]
    raw = R.build_batch(recs, base_offset=3)
    out = list(R.iter_any_records(memoryview(raw)))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in out] == \
        [(3, 5, b"k", b"v", [("a", b"b")]), (4, 6, None, None, [])]


def test_batch_builder_incremental():
    b = R.BatchBuilder(base_offset=0)
    assert b.size_in_bytes == R.BATCH_HEADER_SIZE
    assert b.has_room_for(b"k", b"v" * 10_000, None, 100)     # the first record always fits
    for i in range(20):
        est = R.BatchBuilder.estimate_record_size(b"k", b"v" * i, [("x", b"y")])
        before = b.size_in_bytes
        assert b.append(b"k", b"v" * i, [("x", b"y")], 1000 + i) == i
        assert 0 < b.size_in_bytes - before <= est
    assert not b.has_room_for(b"k", b"v" * 100, None, b.size_in_bytes + 50)
    assert b.has_room_for(b"k", b"v" * 100, None, b.size_in_bytes + 200)
    raw = b.build()
    assert len(raw) == b.size_in_bytes
    assert [r.offset for r in R.decode_batch(raw)[1]] == list(range(20))
    with pytest.raises(Exception):
        R.BatchBuilder().build()
    with pytest.raises(Exception):
        b.append("not bytes", b"v", None, 1)


def test_log_append_time_batch_and_patches():
    raw = bytearray(R.build_batch(sample_records(10), compression=3))
    R.patch_base_offset(raw, 0, 123456)
    R.patch_leader_epoch(raw, 0, 42)
    h = R.validate_batch(raw)                       # CRC still valid
    assert (h.base_offset, h.partition_leader_epoch) == (123456, 42)
    R.set_log_append_time(raw, 0, 99_999)
    h = R.validate_batch(raw)
    assert h.timestamp_type == R.TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == 99_999
    _, got = R.decode_batch(raw)
    assert all(r.timestamp == 99_999 and r.timestamp_type == 1 and r.leader_epoch == 42 for r in got)
    assert [t[1] for t in R.iter_records(raw)] == [99_999] * 10
    with pytest.raises(DecodeError):
        R.patch_base_offset(bytearray(20), 0, 1)


def test_crc_detects_corruption():
    raw = R.build_batch(sample_records(5))
    for i in range(R.ATTRIBUTES_OFFSET, len(raw), 7):
        bad = bytearray(raw)
        bad[i] ^= 0x01
        with pytest.raises(R.CorruptRecordError):
            R.validate_batch(bad)
        with pytest.raises(R.CorruptRecordError):
            list(R.iter_records(bad, check_crc=True))
    with pytest.raises(R.CorruptRecordError):
        R.validate_batch(raw[:-1])
    assert issubclass(R.CorruptRecordError, DecodeError)


def test_iter_batches_and_partial_trailing_batch():
    b1 = R.build_batch([(b"a", b"1", None, 1)], base_offset=0)
    b2 = R.build_batch([(b"b", b"2", None, 2), (b"c", b"3", None, 3)], base_offset=1, compression=1)
    b3 = R.build_batch([(b"d", b"4", None, 4)], base_offset=3)
    payload = b1 + b2 + b3
    assert [p for p, _ in R.iter_batches(payload)] == [0, len(b1), len(b1) + len(b2)]
    for cut in range(len(b1) + len(b2), len(payload)):
        part = payload[:cut]
        assert [h.base_offset for _, h in R.iter_batches(part)] == [0, 1]
        assert [r[0] for r in R.iter_records(part)] == [0, 1, 2]
        assert [r.offset for r in R.iter_any_records(part)] == [0, 1, 2]
    assert list(R.iter_records(b"")) == []
    with pytest.raises(DecodeError):
        R.read_batch_header(b1[:60])
    bad_magic = bytearray(b1)
    bad_magic[16] = 3
    with pytest.raises(DecodeError):
        R.read_batch_header(bad_magic)
    with pytest.raises(DecodeError):
        list(R.iter_batches(bad_magic))


def test_control_batches():
    commit = R.build_control_batch(True, producer_id=5, producer_epoch=1, base_offset=10,
                                   timestamp=1234, coordinator_epoch=7)
    abort = R.build_control_batch(False, producer_id=5, producer_epoch=1, base_offset=11,
                                  timestamp=1235)
    h, (rec,) = R.decode_batch(commit)
    assert h.is_control and h.is_transactional and h.producer_id == 5
    assert R.parse_control_record(rec.key, rec.value) == (R.CONTROL_COMMIT, 7)
    _, (rec2,) = R.decode_batch(abort)
    assert R.parse_control_record(rec2.key, rec2.value) == (R.CONTROL_ABORT, 0)
    data = R.build_batch([(b"k", b"v", None, 1)], base_offset=12)
    assert [t[0] for t in R.iter_records(commit + abort + data)] == [12]
    assert [r.offset for r in R.iter_any_records(commit + data, skip_control=False)] == [10, 12]
    # kafka-python sees them as control records too
    kp = MemoryRecords(commit).next_batch()
    assert kp.is_control_batch and next(iter(kp)).commit
    with pytest.raises(DecodeError):
        R.parse_control_record(b"\x00", b"")
    with pytest.raises(DecodeError):
        R.parse_control_record(rec.key, b"\x00\x00")


def test_large_varints_and_negative_timestamp_deltas():
    recs = [(b"k" * 70_000, b"v" * 200_000, [("h" * 300, b"x" * 70_000)], 10**12),
            (None, b"", None, 10**12 - 10**9), (b"", None, None, 10**12 + 2**40)]
    raw = R.build_batch(recs)
    got = list(R.iter_records(raw, check_crc=True))
    assert [(k, v, hs, ts) for _, ts, k, v, hs in got] == [(k, v, hs or [], ts) for k, v, hs, ts in recs]


# -- legacy MessageSet v0/v1 (hand-built) ---------------------------------------------------------
def legacy_msg(offset, magic, key, value, timestamp=None, attributes=0):
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for f in (key, value):
        body += struct.pack(">i", -1) if f is None else struct.pack(">i", len(f)) + f
    crc = zlib.crc32(body)
    msg = struct.pack(">I", crc) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def test_legacy_v0_v1_hand_built():
    payload = legacy_msg(5, 0, b"k0", b"v0") + legacy_msg(6, 1, None, b"v1", timestamp=777)
    got = list(R.iter_legacy_messages(payload))
    assert [(r.offset, r.key, r.value, r.timestamp, r.timestamp_type) for r in got] == \
        [(5, b"k0", b"v0", -1, -1), (6, None, b"v1", 777, 0)]
    # partial trailing message ends the walk
    assert len(list(R.iter_legacy_messages(payload[:-3]))) == 1
    bad = bytearray(payload)
    bad[-1] ^= 0xFF
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_legacy_messages(bad))
    assert len(list(R.iter_legacy_messages(bad, check_crc=False))) == 2


@pytest.mark.parametrize("codec", CODECS[1:])
def test_legacy_v1_compressed_wrapper_relative_offsets(codec):
    inner = b"".join(legacy_msg(i, 1, b"k%d" % i, b"v%d" % i, timestamp=100 + i) for i in range(3))
    wrapper = legacy_msg(42, 1, None, comp.compress(codec, inner), timestamp=500, attributes=codec)
    got = list(R.iter_legacy_messages(wrapper))
    assert [(r.offset, r.key, r.timestamp) for r in got] == [(40, b"k0", 100), (41, b"k1", 101),
                                                              (42, b"k2", 102)]
    lat = legacy_msg(42, 1, None, comp.compress(codec, inner), timestamp=500, attributes=codec | 8)
    assert [(r.timestamp, r.timestamp_type) for r in R.iter_legacy_messages(lat)] == [(500, 1)] * 3
    v0 = legacy_msg(9, 0, None, comp.compress(codec, b"".join(
        legacy_msg(7 + i, 0, None, b"x") for i in range(3))), attributes=codec)
    assert [r.offset for r in R.iter_legacy_messages(v0)] == [7, 8, 9]


def test_mixed_magic_payload():
    v2 = R.build_batch([(b"k", b"new", None, 9)], base_offset=2)
    payload = legacy_msg(0, 0, None, b"a") + legacy_msg(1, 1, None, b"b", timestamp=8) + v2
    assert [(r.offset, r.value) for r in R.iter_any_records(payload)] == \
        [(0, b"a"), (1, b"b"), (2, b"new")]
    assert [(t[0], t[3]) for t in R.iter_records(payload)] == [(0, b"a"), (1, b"b"), (2, b"new")]


def test_xxh32_against_lz4_frames():
    # lz4.frame writes correct header checksums; our xxh32 must reproduce them
    for kwargs in ({}, {"store_size": True}, {"store_size": False, "block_size": 4}):
        import lz4.frame
        frame = lz4.frame.compress(b"hello" * 50, **kwargs)
        flg = frame[4]
        n = 2 + (8 if flg & 0x08 else 0)
        assert (R._xxh32(frame[4:4 + n]) >> 8) & 0xFF == frame[4 + n]
    assert R._xxh32(b"") == 0x02CC5D05
    assert R._xxh32(b"a" * 40) != R._xxh32(b"a" * 41)


def test_legacy_v0_lz4_broken_header_checksum():
    """Kafka < 0.10 computed the LZ4 frame header checksum over magic+descriptor (KAFKA-3160)."""
    import lz4.frame
    inner = b"".join(legacy_msg(i, 0, None, b"m%d" % i) for i in range(3))
    frame = bytearray(lz4.frame.compress(inner, store_size=False, block_linked=False))
    frame[6] = (R._xxh32(bytes(frame[0:6])) >> 8) & 0xFF      # the old, wrong checksum
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(bytes(frame))
    wrapper = legacy_msg(2, 0, None, bytes(frame), attributes=3)
    assert [r.value for r in R.iter_legacy_messages(wrapper)] == [b"m0", b"m1", b"m2"]


# -- interop with kafka-python's record code ------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_kohort_batches(codec, kp_snappy):
    recs = sample_records(40, seed=codec)
    raw = R.build_batch(recs, base_offset=500, compression=codec)
    batches = list(MemoryRecords(raw + raw[:40]).__iter__())
    assert len(batches) == 1
    batch = batches[0]
    assert batch.validate_crc() and batch.base_offset == 500 and batch.compression_type == codec
    got = [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in batch]
    assert got == [(500 + i, k, v, hs, ts) for i, (k, v, hs, ts) in enumerate(recs)]


@pytest.mark.parametrize("codec", CODECS)
def test_kohort_reads_kafka_python_batches(codec, kp_snappy):
    recs = sample_records(40, seed=10 + codec)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=10**8)
    for i, (k, v, hs, ts) in enumerate(recs):
        assert b.append(i, ts, k, v, hs) is not None
    raw = bytes(b.build())
    h, got = R.decode_batch(raw)
    assert h.compression == codec and h.records_count == 40
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == \
        [(i, k, v, hs, ts) for i, (k, v, hs, ts) in enumerate(recs)]
    assert list(R.iter_records(raw, check_crc=True)) == \
        [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_memory_records_builder(codec, kp_snappy):
    mb = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=10**7, offset=100,
                              transactional=True, producer_id=9, producer_epoch=2, base_sequence=4)
    for i in range(30):
        mb.append(1000 + i, b"k%d" % i, b"v" * i, [("h", b"%d" % i)])
    mb.close()
    h, got = R.decode_batch(mb.buffer())
    assert h.is_transactional and (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 2, 4)
    assert [(r.offset, r.value, r.headers) for r in got] == \
        [(100 + i, b"v" * i, [("h", b"%d" % i)]) for i in range(30)]


LEGACY_CASES = [(m, c) for m in (0, 1) for c in (0, 1, 2, 3) if (m, c) != (0, 3)]


@pytest.mark.parametrize("magic,codec", LEGACY_CASES)
def test_kohort_reads_kafka_python_legacy(magic, codec, kp_snappy):
    # zstd needs magic 2 (KIP-110); kafka-python's v0 lz4 encoder needs xxhash (absent): the
    # KAFKA-3160 v0 lz4 framing is covered by test_legacy_v0_lz4_broken_header_checksum.
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=10**7)
    for i in range(12):
        b.append(i, 5000 + i, None if i == 3 else b"k%d" % i, b"value-%d" % i)
    raw = bytearray(b.build())
    if codec and magic == 1:
        # a broker stamps the wrapper with the absolute offset of the last inner message (KIP-31)
        struct.pack_into(">q", raw, 0, 11)
    raw = bytes(raw)
    got = list(R.iter_legacy_messages(raw))
    assert [(r.offset, r.key, r.value) for r in got] == \
        [(i, None if i == 3 else b"k%d" % i, b"value-%d" % i) for i in range(12)]
    if magic == 1:
        assert [r.timestamp for r in got] == [5000 + i for i in range(12)]
    assert [r.offset for r in R.iter_any_records(raw)] == list(range(12))
    # and kafka-python agrees with itself on these bytes
    assert [r.value for batch in MemoryRecords(raw) for r in batch] == [r.value for r in got]


def test_kafka_python_record_batch_direct(kp_snappy):
    raw = R.build_batch([(b"k", b"v", [("a", None)], 5)], base_offset=7, compression=4)
    batch = DefaultRecordBatch(raw)
    rec = next(iter(batch))
    assert (rec.offset, rec.key, rec.value, list(rec.headers)) == (7, b"k", b"v", [("a", None)])


# -- fuzz: malformed input raises only DecodeError ------------------------------------------------
def _consume_all(data):
    for fn in (lambda: list(R.iter_records(data)),
               lambda: list(R.iter_records(data, check_crc=True)),
               lambda: list(R.iter_any_records(data, check_crc=False, skip_control=False)),
               lambda: list(R.iter_legacy_messages(data, check_crc=False)),
               lambda: R.decode_batch(data, check_crc=False),
               lambda: list(R.iter_batches(data)),
               lambda: R.validate_batch(data)):
        try:
            fn()
        except DecodeError:
            pass


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(data):
    _consume_all(data)
    for codec in CODECS:
        try:
            comp.decompress(codec, data, max_size=1 << 16)
        except DecodeError:
            pass


_SEEDS = [R.build_batch(sample_records(6, seed=c), compression=c) for c in CODECS] + [
    R.build_control_batch(True, 1, 1),
    legacy_msg(0, 0, b"k", b"v") + legacy_msg(1, 1, None, b"w", timestamp=3),
    legacy_msg(3, 1, None, comp.compress(1, legacy_msg(0, 1, b"a", b"b", timestamp=1)),
               timestamp=1, attributes=1),
]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.sampled_from(_SEEDS), rseed=st.integers(0, 2**32))
def test_fuzz_mutated_batches(seed, rseed):
    rnd = random.Random(rseed)
    raw = bytearray(seed)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(4)
        if op == 0:
            raw[rnd.randrange(len(raw))] = rnd.randrange(256)
        elif op == 1:
            del raw[rnd.randrange(len(raw)):]
        elif op == 2:
            i = rnd.randrange(len(raw))
            raw[i:i] = rnd.randbytes(rnd.randint(1, 8))
        else:                                  # mutate inside the record area, header intact
            i = rnd.randrange(min(61, len(raw) - 1), len(raw))
            raw[i] = rnd.randrange(256)
        if not raw:
            break
    _consume_all(bytes(raw))


def test_mutated_record_area_with_fixed_crc_is_caught():
    """Flip record bytes then repair the CRC so decoding must rely on structural checks."""
    base = R.build_batch(sample_records(8, seed=3))
    rnd = random.Random(7)
    outcomes = set()
    for _ in range(300):
        raw = bytearray(base)
        i = rnd.randrange(61, len(raw))
        raw[i] = rnd.randrange(256)
        struct.pack_into(">I", raw, 17, R._crc32c(bytes(raw[21:])))
        try:
            R.decode_batch(raw)
            outcomes.add("ok")
        except DecodeError:
            outcomes.add("err")
    assert "err" in outcomes


def test_hostile_counts_and_lengths():
    raw = bytearray(R.build_batch([(b"k", b"v", None, 1)]))
    struct.pack_into(">i", raw, 57, 2**31 - 1)       # records count cannot fit
    with pytest.raises(DecodeError):
        list(R.iter_records(bytes(raw)))
    struct.pack_into(">i", raw, 57, -1)
    with pytest.raises(DecodeError):
        R.decode_batch(raw, check_crc=False)
    raw = bytearray(R.build_batch([(b"k", b"v", None, 1)]))
    struct.pack_into(">i", raw, 8, 10)               # Length < 49
    with pytest.raises(DecodeError):
        list(R.iter_records(bytes(raw)))
    with pytest.raises(DecodeError):
        list(R.iter_batches(bytes(raw)))
    # zstd bomb inside a batch is refused by the cap
    b = R.BatchBuilder(compression=4)
    b.append(None, bytes(3 << 20), None, 1)
    with pytest.raises(DecodeError):
        list(R.iter_records(b.build(), max_size=1 << 20))


def test_other_stream_shapes_decode():
    """Shapes other writers produce: zstd without content size (Java's streaming writer), several
    zstd/lz4 frames or gzip members back to back."""
    import gzip

    import lz4.frame
    import zstandard
    data = os.urandom(3000) * 50
    nosize = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.frame_content_size(nosize) == -1
    assert comp.decompress(4, nosize) == data
    assert comp.decompress(4, nosize + comp.compress(4, b"tail")) == data + b"tail"
    with pytest.raises(DecodeError):
        comp.decompress(4, nosize, max_size=len(data) - 1)
    with pytest.raises(DecodeError):
        comp.decompress(4, nosize[:-5])
    assert comp.decompress(3, lz4.frame.compress(data) + lz4.frame.compress(b"x")) == data + b"x"
    assert comp.decompress(1, gzip.compress(data) + gzip.compress(b"y")) == data + b"y"
    with pytest.raises(DecodeError):
        comp.decompress(1, gzip.compress(data) + b"junk")


def test_zstd_frames_without_size_are_walked_and_truncation_is_still_refused():
    """zstd frames without a content size (Java's writer) are walked by their block headers, which
    bound their output from above; every truncated prefix, trailing junk and a bomb are refused."""
    import zstandard
    rnd = random.Random(11)
    for case in range(40):
        parts = []
        for _ in range(rnd.randint(1, 3)):                     # one or several frames back to back
            data = rnd.randbytes(rnd.randint(0, 3000)) * rnd.randint(1, 80) + b"x" * rnd.randint(0, 300_000)
            c = zstandard.ZstdCompressor(level=rnd.choice([1, 3, 9]), write_content_size=False,
                                         write_checksum=rnd.random() < 0.5)
            co = c.compressobj()
            parts.append((data, co.compress(data) + co.flush()))
        data = b"".join(d for d, _ in parts)
        frames = b"".join(f for _, f in parts)
        exact, loose = comp._zstd_output_bound(memoryview(frames), 1 << 40)
        assert exact <= len(data) <= exact + loose
        assert comp.decompress(4, frames) == data
        bounds = set(itertools.accumulate(len(f) for _, f in parts))   # cuts there leave whole frames
        for cut in sorted({1, 5, 9, len(frames) // 2, len(frames) - 4, len(frames) - 1} - bounds):
            if 0 < cut < len(frames):
                with pytest.raises(DecodeError, match="truncated|after the last frame"):
                    comp._zstd_output_bound(memoryview(frames[:cut]), 1 << 40)
                with pytest.raises(DecodeError):
                    comp.decompress(4, frames[:cut])
        with pytest.raises(DecodeError):
            comp.decompress(4, frames + b"junk")
        if len(data) > 1:
            with pytest.raises(DecodeError):
                comp.decompress(4, frames, max_size=len(data) - 1)
    co = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    bomb = co.compress(bytes(64 << 20)) + co.flush()
    assert sum(comp._zstd_output_bound(memoryview(bomb), 1 << 40)) >= 64 << 20
    with pytest.raises(DecodeError, match="limit"):
        comp.decompress(4, bomb, max_size=1 << 20)
