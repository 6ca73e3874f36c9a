"""Producer partitioners: Java-compatible murmur2 for keyed records, sticky for null keys (KIP-480).

What lives here:

* `murmur2(data) -> int`: the 32-bit MurmurHash2 variant of Kafka's Java client
  (`org.apache.kafka.common.utils.Utils.murmur2`, seed 0x9747b28c), returned as a signed int32 like Java.
* `partition_for_key(key, num_partitions)`: `toPositive(murmur2(key)) % n` — the same partition the Java
  client's default partitioner and librdkafka's `murmur2_random` / `murmur2` partitioners pick.
* `StickyPartitioner`: for records with no key, stay on one partition until a batch for it is closed
  (KIP-480), then move to another partition chosen at random among those with a leader.
* `DefaultPartitioner(kind)`: keyed → murmur2, null key → sticky, for librdkafka's `partitioner` kinds
  "murmur2_random" (the default), "murmur2" (null keys hash too), "random", "consistent_random" and
  "consistent" (CRC32 like librdkafka). The Producer uses only its sticky part (keyed records are
  hashed inline with `murmur2`); no producer setting selects another kind yet, so the other kinds are
  reachable only by constructing a DefaultPartitioner (a custom one goes in `partitioner.class`).

Pure: no I/O, no clock. The random source can be injected for tests.
"""
from __future__ import annotations

import random as _random
import struct
import zlib

from kohort.errors import ConfigError

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data` as a signed 32-bit int (what Java's Utils.murmur2 returns)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for k in struct.unpack_from(f"<{n4}I", data, 0):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = n4 << 2
    extra = length & 3
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's Utils.toPositive: clear the sign bit (not abs, so MIN_VALUE maps to 0)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition of a keyed record, as Kafka's Java client and librdkafka's murmur2 partitioners pick."""
    if num_partitions <= 0:
        raise ValueError("a topic has at least one partition")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """KIP-480 sticky choice for null-key records: one partition per topic until its batch closes.

    `partition(topic, num_partitions, available)` returns the current sticky partition;
    `on_new_batch(topic, num_partitions, available, prev)` is called by the accumulator when the batch
    for the sticky partition was closed (full or sent) and moves to a different partition.
    `available` is a sequence of partitions that have a leader (may be empty: then any partition).
    """

    def __init__(self, rng: _random.Random | None = None):
        self._rng = rng or _random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available=None) -> int:
        p = self._sticky.get(topic)
        if p is None or p >= num_partitions:
            p = self._pick(num_partitions, available, None)
            self._sticky[topic] = p
        return p

    def on_new_batch(self, topic: str, num_partitions: int, available=None, prev: int | None = None) -> int:
        """Move the sticky partition off `prev` (if it still is the sticky one)."""
        cur = self._sticky.get(topic)
        if cur is None or cur == prev:
            cur = self._pick(num_partitions, available, prev)
            self._sticky[topic] = cur
        return cur

    def _pick(self, n: int, available, avoid: int | None) -> int:
        choices = [p for p in available if p < n] if available else None
        if choices:
            if len(choices) == 1:
                return choices[0]
            while True:
                p = choices[self._rng.randrange(len(choices))]
                if p != avoid:
                    return p
        if n == 1:
            return 0
        while True:
            p = self._rng.randrange(n)
            if p != avoid:
                return p


PARTITIONERS = ("murmur2_random", "murmur2", "random", "consistent_random", "consistent")


class DefaultPartitioner:
    """Picks a partition for a record with no explicit partition.

    The default ("murmur2_random") is what the Java client does since KIP-480 and what librdkafka's
    murmur2_random does for keyed records (Java-compatible hashing); null keys are sticky.
    """

    def __init__(self, kind: str = "murmur2_random", rng: _random.Random | None = None):
        if kind not in PARTITIONERS:
            raise ConfigError(f"partitioner: unknown partitioner {kind!r}; one of {', '.join(PARTITIONERS)}")
        self.kind = kind
        self.sticky = StickyPartitioner(rng)
        self._rng = self.sticky._rng

    def partition(self, topic: str, key, num_partitions: int, available=None) -> int:
        kind = self.kind
        if key is None:
            if kind in ("murmur2_random", "consistent_random", "random"):
                return self.sticky.partition(topic, num_partitions, available)
            key = b""
        if kind in ("murmur2_random", "murmur2"):
            return (murmur2(key) & 0x7FFFFFFF) % num_partitions
        if kind == "random":
            return self.sticky.partition(topic, num_partitions, available)
        return (zlib.crc32(key) & 0xFFFFFFFF) % num_partitions  # librdkafka's consistent (CRC32)


__all__ = ["DefaultPartitioner", "PARTITIONERS", "StickyPartitioner", "murmur2", "partition_for_key",
           "to_positive"]
