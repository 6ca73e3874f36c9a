"""Log compaction (cleanup.policy=compact): keep the latest record per key.

`compact(log, now_ms)` cleans every segment but the active one (and only segments whose greatest
timestamp is at least min.compaction.lag.ms old), when the dirty part of the log — what was
appended since the last cleaning — is at least min.cleanable.dirty.ratio of it, or always with
`force=True`:

* a map key -> offset of its latest record is built over the cleanable segments;
* each batch is rewritten keeping only records that are the latest for their key; a tombstone
  (null value) is also dropped once `record timestamp + delete.retention.ms <= now` (a simplified
  delete horizon: Kafka >= 3.1 stamps the horizon into the batch, KIP-534); records with a null key
  are kept;
* a batch whose records all survive is copied byte for byte; a partly kept batch is re-encoded
  with the same base offset, last offset delta, timestamps, producer id/epoch, base sequence,
  attributes and compression, so offsets of surviving records and producer metadata stay; an
  emptied batch is kept as an empty header only when it is the last batch of its producer id (so
  idempotent-producer state can be rebuilt), otherwise dropped;
* control batches (transaction markers) are kept as they are; aborted transactional data is not
  removed (not implemented).

Crash safety, consecutive segments are cleaned in groups no larger than segment.bytes:
the group is written to `<base>.log.cleaned` (+ indexes) and fsynced, renamed to `.swap`, the old
segments are deleted (renamed `.deleted`, then removed) oldest first, and the `.swap` is renamed to
`.log`. On load (Log._load): `.cleaned` files are deleted (the originals are intact); a `.swap`
replaces the `.log` segments whose base offset lies within its offset range, then is renamed.
"""
from __future__ import annotations

import struct

from crc32c import crc32c

from kohort.protocol.compression import COMPRESSION_NONE, compress
from kohort.protocol.primitives import w_varint, w_varlong
from kohort.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    LOG_OVERHEAD,
    BatchHeader,
    decode_batch,
    read_batch_header,
)
from kohort.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, Segment

_HDR = struct.Struct(">qiibIhiqqqhii")


def _encode_records(h: BatchHeader, records) -> bytes:
    """Record bodies keeping each record's own offset delta (unlike a producer's batch)."""
    out = bytearray()
    for r in records:
        body = bytearray(b"\x00")
        w_varlong(body, r.timestamp - h.base_timestamp if h.timestamp_type == 0 else 0)
        w_varint(body, r.offset - h.base_offset)
        for v in (r.key, r.value):
            if v is None:
                w_varint(body, -1)
            else:
                w_varint(body, len(v))
                body += v
        w_varint(body, len(r.headers))
        for hk, hv in r.headers:
            kb = hk.encode() if isinstance(hk, str) else bytes(hk)
            w_varint(body, len(kb))
            body += kb
            if hv is None:
                w_varint(body, -1)
            else:
                w_varint(body, len(hv))
                body += hv
        w_varint(out, len(body))
        out += body
    return bytes(out)


def rebuild_batch(h: BatchHeader, records) -> bytes:
    """A batch with header `h`'s offsets, timestamps and producer metadata but only `records`."""
    codec = h.attributes & ATTR_COMPRESSION_MASK if records else COMPRESSION_NONE
    body = _encode_records(h, records)
    if codec != COMPRESSION_NONE:
        body = compress(codec, body)
    attributes = (h.attributes & ~ATTR_COMPRESSION_MASK) | codec
    out = bytearray(BATCH_HEADER_SIZE)
    out += body
    _HDR.pack_into(out, 0, h.base_offset, len(out) - LOG_OVERHEAD, h.partition_leader_epoch,
                   h.magic, 0, attributes, h.last_offset_delta, h.base_timestamp, h.max_timestamp,
                   h.producer_id, h.producer_epoch, h.base_sequence, len(records))
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def _cleanable(log, now_ms: int) -> list[Segment]:
    lag = log.config.min_compaction_lag_ms
    out = []
    for seg in log.segments[:-1]:
        if lag > 0 and seg.max_timestamp >= 0 and now_ms - seg.max_timestamp < lag:
            break
        out.append(seg)
    return out


def dirty_ratio(log, now_ms: int) -> float:
    segs = _cleanable(log, now_ms)
    total = sum(s.size for s in segs)
    if not total:
        return 0.0
    dirty = sum(s.size for s in segs if s.next_offset > log.first_dirty_offset)
    return dirty / total


def compact(log, now_ms: int, force: bool = False) -> int:
    """Clean `log` if it is due; returns the number of bytes removed."""
    log._check_usable()
    if not log.config.compact:
        return 0
    segs = _cleanable(log, now_ms)
    if not segs:
        return 0
    if not force and dirty_ratio(log, now_ms) < log.config.min_cleanable_dirty_ratio:
        return 0

    latest: dict[bytes, int] = {}
    last_batch_of_producer: dict[int, int] = {}
    for seg in segs:
        for pos, h in seg.scan():
            if h.producer_id >= 0:
                last_batch_of_producer[h.producer_id] = h.base_offset
            if h.is_control:
                continue
            _, records = decode_batch(seg.read(pos, h.total_size), 0, check_crc=False)
            for r in records:
                if r.key is not None:
                    latest[bytes(r.key)] = r.offset
    horizon = now_ms - log.config.delete_retention_ms

    def keep(r) -> bool:
        if r.key is None:
            return True
        if latest.get(bytes(r.key)) != r.offset:
            return False
        return r.value is not None or r.timestamp > horizon

    groups: list[list[Segment]] = []
    for seg in segs:
        if groups and sum(s.size for s in groups[-1]) + seg.size <= log.config.segment_bytes \
                and groups[-1][0].can_hold(seg.next_offset - 1):
            groups[-1].append(seg)
        else:
            groups.append([seg])

    removed = 0
    for group in groups:
        removed += _clean_group(log, group, keep, last_batch_of_producer)
    log.first_dirty_offset = max(log.first_dirty_offset, segs[-1].next_offset)
    return removed


def _clean_group(log, group: list[Segment], keep, last_batch_of_producer) -> int:
    fs, d = log.fs, log.directory
    before = sum(s.size for s in group)
    cleaned = Segment(fs, d, group[0].base_offset, log.config.index_interval_bytes,
                      suffix=CLEANED_SUFFIX)
    cleaned.log.truncate(0)
    cleaned.offset_index.reset()
    cleaned.time_index.reset()
    cleaned.size = 0
    for seg in group:
        for pos, h in seg.scan():
            raw = seg.read(pos, h.total_size)
            if h.is_control:
                out = raw
            else:
                _, records = decode_batch(raw, 0, check_crc=False)
                kept = [r for r in records if keep(r)]
                if len(kept) == len(records):
                    out = raw
                elif kept or (h.producer_id >= 0
                              and last_batch_of_producer.get(h.producer_id) == h.base_offset):
                    out = rebuild_batch(h, kept)
                else:
                    continue
            cleaned.append(out, [(0, read_batch_header(out))])
    if cleaned.empty:
        # nothing survives: delete the originals oldest first (safe to stop half way: what is
        # left is a suffix whose records are superseded by later ones or are expired tombstones)
        cleaned.close()
        for p in (cleaned.log_path, cleaned.offset_index.path, cleaned.time_index.path):
            if fs.exists(p):
                fs.remove(p)
        for seg in group:
            log._delete_segment(seg)
        fs.fsync_dir(d)
        return before
    cleaned.flush()
    cleaned.change_suffix(SWAP_SUFFIX)
    fs.fsync_dir(d)
    at = log.segments.index(group[0])
    for seg in group:
        log._delete_segment(seg)
    cleaned.change_suffix("")
    fs.fsync_dir(d)
    log.segments.insert(at, cleaned)
    return before - cleaned.size
