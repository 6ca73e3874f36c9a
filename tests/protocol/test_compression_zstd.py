"""zstd through cramjam (protocol/compression.py): frames of every writer kohort meets decode (content
size declared or not, several frames, checksums, skippable frames), what kohort writes reads back in
python-zstandard, and the safety of the frame walk and of the bounded output: every truncated
prefix, trailing bytes, damage under a checksum, bombs of RLE and of compressed blocks, and frames
whose block headers promise far more than they hold, all with a real libzstd on both sides."""
from __future__ import annotations

import os
import random
import struct

import cramjam
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kohort.errors import DecodeError
from kohort.protocol import compression as comp

ZSTD = comp.COMPRESSION_ZSTD


def json_records(n: int, seed: int = 3) -> bytes:
    """n records of about 1 KiB of JSON-ish text with varied fields (what a batch really holds)."""
    rnd = random.Random(seed)
    words = ["".join(rnd.choice("abcdefghijklmnop") for _ in range(rnd.randint(3, 9))) for _ in range(800)]
    out = []
    for i in range(n):
        text = " ".join(rnd.choice(words) for _ in range(rnd.randint(60, 110)))
        out.append(('{"id": %d, "user": "%s", "score": %.3f, "text": "%s"}' % (
            i, rnd.choice(words), rnd.uniform(0, 1000), text)).encode()[:1024])
    return b"".join(out)


def stream_frame(data: bytes, level: int = 3) -> bytes:
    """One frame without a content size, as Java's streaming writer (zstd-jni) leaves it."""
    c = cramjam.zstd.Compressor(level=level)
    c.compress(data)
    return bytes(c.finish())


def header_len(frame: bytes) -> int:
    """Bytes of a zstd frame's header (magic, descriptor, window, dictionary id, content size)."""
    fhd = frame[4]
    single = fhd & 0x20
    return 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + (1 if single else 0, 2, 4, 8)[fhd >> 6]


WRITERS = {
    "kohort": lambda d: comp.compress(ZSTD, d),
    "cramjam-stream": stream_frame,
    "zstandard": lambda d: zstandard.ZstdCompressor(level=3).compress(d),
    "zstandard-no-size-checksum": lambda d: zstandard.ZstdCompressor(
        level=1, write_content_size=False, write_checksum=True).compress(d),
}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("size", [0, 1, 1000, 16 << 10, (1 << 20) + 7, 3 << 20])
def test_every_writer_decodes(writer, size):
    data = json_records(size // 1024 + 1)[:size]
    frame = WRITERS[writer](data)
    got = comp.decompress(ZSTD, frame)
    assert type(got) is bytes and got == data
    assert comp.decompress(ZSTD, memoryview(b"xx" + frame + b"yy")[2:-2]) == data
    assert comp.decompress(ZSTD, bytearray(frame)) == data


@pytest.mark.parametrize("level", [-5, 1, 3, 19, None])
def test_kohort_frames_declare_their_size_and_read_back_elsewhere(level):
    data = json_records(40)
    frame = comp.compress(ZSTD, data, level=level)
    assert zstandard.frame_content_size(frame) == len(data)
    assert zstandard.ZstdDecompressor().decompress(frame) == data
    assert comp.decompress(ZSTD, frame) == data


def test_several_frames_and_skippable_frames():
    parts = [json_records(5, seed=s) for s in range(4)]
    skip = struct.pack("<II", 0x184D2A5E, 6) + b"ignore"
    frames = (skip + WRITERS["kohort"](parts[0]) + stream_frame(parts[1]) + skip
              + WRITERS["zstandard-no-size-checksum"](parts[2]) + WRITERS["zstandard"](parts[3]) + skip)
    assert comp.decompress(ZSTD, frames) == b"".join(parts)
    with pytest.raises(DecodeError, match="truncated skippable"):
        comp.decompress(ZSTD, frames[:-3])


def test_every_truncated_prefix_and_trailing_bytes_are_refused():
    data = json_records(300)                              # several blocks per frame
    frames = stream_frame(data[:100_000]) + comp.compress(ZSTD, data[100_000:])
    whole = len(stream_frame(data[:100_000]))
    for cut in range(len(frames)):
        if cut == whole:                                  # the first frame alone is whole
            assert comp.decompress(ZSTD, frames[:cut]) == data[:100_000]
            continue
        with pytest.raises(DecodeError):
            comp.decompress(ZSTD, frames[:cut])
    for junk in (b"\x00", b"junk", b"\x28\xb5\x2f", b"\x28\xb5\x2f\xfd", bytes(9), frames[:7]):
        with pytest.raises(DecodeError):
            comp.decompress(ZSTD, frames + junk)


def test_damage_under_a_checksum_is_refused():
    data = json_records(30)
    frame = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(data)
    rnd = random.Random(5)
    for pos in sorted(rnd.sample(range(header_len(frame), len(frame)), 200)):
        damaged = bytearray(frame)
        damaged[pos] ^= 1 << rnd.randrange(8)
        with pytest.raises(DecodeError):
            comp.decompress(ZSTD, bytes(damaged))


@pytest.mark.parametrize("writer", ["kohort", "cramjam-stream"])
def test_bombs_are_capped(writer):
    zeros = WRITERS[writer](bytes(64 << 20))              # RLE blocks: their size is exact
    assert len(zeros) < 100_000
    with pytest.raises(DecodeError, match="limit"):
        comp.decompress(ZSTD, zeros, max_size=1 << 20)
    pattern = WRITERS[writer](b"0123456789abcdef" * (4 << 20))   # compressed blocks
    with pytest.raises(DecodeError, match="limit"):
        comp.decompress(ZSTD, pattern, max_size=1 << 20)
    assert len(comp.decompress(ZSTD, pattern)) == 64 << 20


def test_a_bomb_of_compressed_blocks_is_stopped_past_the_cap_not_refused_by_its_bound():
    """Without a content size, compressed blocks only bound the output (128 KiB each): a bound above
    max_size is no proof of a bomb, so the output is decoded into a buffer of max_size + 1."""
    data = b"0123456789abcdef" * (4 << 20)
    bomb = stream_frame(data)
    exact, loose = comp._zstd_output_bound(memoryview(bomb), 1 << 40)
    assert exact < 1 << 20 < exact + loose
    assert comp.decompress(ZSTD, bomb, max_size=len(data)) == data
    with pytest.raises(DecodeError, match="limit"):
        comp.decompress(ZSTD, bomb, max_size=len(data) - 1)


def _tiny_blocks_frame(n: int) -> bytes:
    """A frame without a content size of n compressed blocks of one literal 'A' each: block headers
    that promise 128 KiB apiece (n * 128 KiB) for n bytes of output."""
    block = bytes([1 << 3, 0x41, 0])        # raw literals section of 1 byte, 'A', no sequences
    out = bytearray(struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38]))   # window 128 KiB
    for i in range(n):
        out += (len(block) << 3 | 2 << 1 | (i == n - 1)).to_bytes(3, "little") + block
    return bytes(out)


def test_blocks_promising_more_than_the_cap_still_decode_what_they_hold():
    frame = _tiny_blocks_frame(2100)                      # promises 262 MiB, holds 2100 bytes
    assert sum(comp._zstd_output_bound(memoryview(frame), 1 << 40)) > comp.DEFAULT_MAX_SIZE
    assert comp.decompress(ZSTD, frame) == b"A" * 2100
    assert comp.decompress(ZSTD, frame, max_size=2100) == b"A" * 2100
    with pytest.raises(DecodeError, match="limit"):
        comp.decompress(ZSTD, frame, max_size=2099)


def test_frame_walk_refusals():
    frame = comp.compress(ZSTD, json_records(3))
    with pytest.raises(DecodeError, match="empty"):
        comp.decompress(ZSTD, b"")
    with pytest.raises(DecodeError, match="no frame magic"):
        comp.decompress(ZSTD, b"\x00" + frame)
    reserved = bytearray(frame)
    reserved[4] |= 0x08
    with pytest.raises(DecodeError, match="reserved bit"):
        comp.decompress(ZSTD, bytes(reserved))
    # a declared content size larger than the blocks can hold is refused before any allocation
    liar = bytearray(stream_frame(b"abc" * 100))
    assert liar[4] & 0xE3 == 0                           # no content size, window byte, no dictionary
    liar[4] |= 0x80                                      # FCS field of 4 bytes...
    liar[6:6] = struct.pack("<I", 200 << 20)             # ...declaring 200 MiB (after the window byte)
    with pytest.raises(DecodeError, match="more than its blocks hold"):
        comp.decompress(ZSTD, bytes(liar))
    rtype = bytearray(frame)
    rtype[header_len(frame)] |= 0b110                    # the first block's type: 3
    with pytest.raises(DecodeError, match="reserved block type"):
        comp.decompress(ZSTD, bytes(rtype))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_mutated_frames(draw):
    data = draw.draw(st.binary(max_size=3000)) * draw.draw(st.integers(1, 30))
    frame = bytearray(draw.draw(st.sampled_from(list(WRITERS.values())))(data))
    for _ in range(draw.draw(st.integers(1, 4))):
        frame[draw.draw(st.integers(0, len(frame) - 1))] = draw.draw(st.integers(0, 255))
    try:
        out = comp.decompress(ZSTD, bytes(frame), max_size=1 << 16)
    except DecodeError:
        return
    assert type(out) is bytes and len(out) <= 1 << 16


def test_random_bytes_behind_a_magic_are_refused_or_bounded():
    rnd = random.Random(9)
    for _ in range(300):
        blob = struct.pack("<I", 0xFD2FB528) + rnd.randbytes(rnd.randint(0, 64))
        try:
            out = comp.decompress(ZSTD, blob, max_size=1 << 12)
        except DecodeError:
            continue
        assert len(out) <= 1 << 12


def test_large_batches_round_trip_through_the_lazily_committed_buffer():
    data = os.urandom(1 << 16) * 40 + json_records(2000)   # > 1 MiB: past the bytearray size
    for frame in (comp.compress(ZSTD, data), stream_frame(data)):
        assert comp.decompress(ZSTD, frame) == data
        assert comp.decompress(ZSTD, frame, max_size=len(data)) == data
        with pytest.raises(DecodeError, match="limit"):
            comp.decompress(ZSTD, frame, max_size=len(data) - 1)


def test_declared_size_fast_path_refuses_what_the_walk_refuses():
    """A first frame declaring its size is decoded without the walk; what follows it or cuts it short
    still ends in DecodeError, and more frames after it still decode (through the walk)."""
    data = json_records(200)
    frame = comp.compress(ZSTD, data)
    assert comp._zstd_declared_size(memoryview(frame)) == len(data)
    for cut in range(len(frame)):
        with pytest.raises(DecodeError):
            comp.decompress(ZSTD, frame[:cut])
    for junk in (b"\x00", b"\x00" * 3, b"\x00" * 4, b"junk", b"\x28\xb5\x2f\xfd", frame[:9]):
        with pytest.raises(DecodeError):
            comp.decompress(ZSTD, frame + junk)
    skip = struct.pack("<II", 0x184D2A50, 2) + b"ok"
    assert comp.decompress(ZSTD, frame + skip) == data
    assert comp.decompress(ZSTD, frame + frame) == data + data
    assert comp.decompress(ZSTD, frame + stream_frame(b"tail")) == data + b"tail"
    assert comp.decompress(ZSTD, frame + comp.compress(ZSTD, b"")) == data
    with pytest.raises(DecodeError, match="limit"):
        comp.decompress(ZSTD, frame + frame, max_size=len(data) + 1)
    with pytest.raises(DecodeError, match="limit"):
        comp.decompress(ZSTD, frame, max_size=len(data) - 1)
    # a size declared smaller than the content: libzstd refuses the frame, and so does the walk
    for content in (b"x" * 600, json_records(1)[:600]):     # an RLE block; a compressed block
        liar = bytearray(comp.compress(ZSTD, content))
        assert liar[4] & 0xE3 == 0x60 and comp._zstd_declared_size(memoryview(liar)) == 600  # 2-byte size
        liar[5:7] = (300 - 256).to_bytes(2, "little")
        assert comp._zstd_declared_size(memoryview(liar)) == 300
        with pytest.raises(DecodeError):
            comp.decompress(ZSTD, bytes(liar))


def test_threads_decode_side_by_side():
    """Threads decoding at once each take their own scratch buffer from the pool: outputs never mix."""
    from concurrent.futures import ThreadPoolExecutor
    inputs = [json_records(n, seed=n) for n in (1, 16, 300, 1100, 3000)]
    frames = [f(d) for d in inputs for f in (WRITERS["kohort"], stream_frame)]
    expected = [d for d in inputs for _ in range(2)]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            assert list(pool.map(lambda f: comp.decompress(ZSTD, f), frames * 3)) == expected * 3


def test_a_bomb_of_rle_blocks_is_refused_from_its_block_headers():
    """1 MiB of RLE block headers claiming 32 GiB: refused by the walk once the exact sizes pass the
    cap, before any output is allocated."""
    rle = ((128 << 10) << 3 | 1 << 1).to_bytes(3, "little") + b"A"
    last = ((128 << 10) << 3 | 1 << 1 | 1).to_bytes(3, "little") + b"A"
    bomb = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38]) + rle * 262_000 + last
    with pytest.raises(DecodeError, match="limit of 268435456 bytes"):
        comp.decompress(ZSTD, bomb)
    small = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38]) + rle * 3 + last
    assert comp.decompress(ZSTD, small) == b"A" * (4 << 17)
