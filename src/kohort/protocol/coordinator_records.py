"""Key/value record codec shared by the coordinators' internal topics (`__consumer_offsets`,
`__share_group_state`).

Each record's key and value start with an int16: the key's is the record type (which selects the key
and value schemas), the value's is the value version. Keys of the typed records are encoded at version
0; a null value is a tombstone. `encode_versioned` is the int16-version-then-struct framing both halves
use; `RecordCodec` ties one topic's record types to their key and value schemas.
"""
from __future__ import annotations

from kohort.errors import DecodeError
from kohort.protocol import primitives as P
from kohort.protocol.primitives import Reader
from kohort.protocol.schema import STRING, Message, f


def encode_versioned(obj: Message, version: int) -> bytes:
    """int16 `version` followed by `obj` encoded at that version."""
    out = bytearray()
    P.w_int16(out, version)
    obj.encode_into(out, version)
    return bytes(out)


def string_key(*names: str) -> type[Message]:
    """A key schema of the given STRING fields (version 0 only, not flexible); subclasses set TYPE."""
    class Key(Message):
        VALID = "0"
        FLEXIBLE = "none"
        SCHEMA = [f(n, STRING) for n in names]
    return Key


class RecordCodec:
    """The records of one coordinator topic: `keys` and `values` map record type -> schema.

    `unknown` is the DecodeError text of a record type not in `keys`, formatted with `kind`.
    """

    KEY_VERSION = 0

    def __init__(self, keys: dict[int, type[Message]], values: dict[int, type[Message]], unknown: str,
                 value_version: int = 0) -> None:
        self.keys = keys
        self.values = values
        self.unknown = unknown
        self.value_version = value_version

    def encode_key(self, key: Message) -> bytes:
        """The int16 record type (the key class's TYPE) and the key at version 0."""
        out = bytearray()
        P.w_int16(out, key.TYPE)
        key.encode_into(out, self.KEY_VERSION)
        return bytes(out)

    def encode_value(self, value: Message | None) -> bytes | None:
        """The value at this topic's value version; None (a tombstone) stays None."""
        if value is None:
            return None
        return encode_versioned(value, self.value_version)

    def decode(self, key_bytes, value_bytes) -> tuple[Message, Message | None]:
        """(key, value or None for a tombstone); DecodeError for an unknown type or value version."""
        r = Reader(key_bytes)
        kind = r.int16()
        kcls = self.keys.get(kind)
        if kcls is None:
            raise DecodeError(self.unknown.format(kind=kind))
        key = kcls.decode(r, self.KEY_VERSION)
        if value_bytes is None:
            return key, None
        vr = Reader(value_bytes)
        version = vr.int16()
        if version != self.value_version:
            raise DecodeError(f"{self.values[kind].__name__} version {version} unknown "
                              f"(valid {self.value_version})")
        return key, self.values[kind].decode(vr, version)
