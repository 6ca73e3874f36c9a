"""The schema DSL: one declarative definition per Kafka message, covering all its versions.

A message is a class with a SCHEMA list of fields; `f(name, type, versions=..., nullable=..., tag=...,
default=...)` declares one. Types are the primitive constants below, `Array(T)` for arrays of a
primitive, and `Struct("Name", [fields])` / `ArrayOf("Name", [fields])` for nested structs (the
nested class is reachable as an attribute of the message class, e.g. `JoinGroupRequest.Protocol`).

Versions are written like Kafka's specs: "3+", "0-4", "none". In a message's flexible versions
(KIP-482) strings, bytes and arrays switch to compact encodings, every struct ends in a tagged-field
section, and fields declared with `tag=` live in that section. Unknown tags read from the wire are
kept in `obj._unknown_tags` and written back unchanged.

Encoders/decoders are built once per (struct, version) and cached. No I/O here.
"""
from __future__ import annotations

import uuid as _uuid
from typing import Any, Callable

from kohort.errors import DecodeError, EncodeError
from kohort.protocol import primitives as P
from kohort.protocol.primitives import Reader
from kohort.protocol.records import GATHER_MIN, ExternalRecords, GatherBuffer, SpliceBuffer

MISSING = object()
_NEW_STRUCT = object()   # default of a non-nullable nested struct field: a fresh default instance


def _fresh(fld):
    v = fld.default
    if v is _NEW_STRUCT:
        return fld.type.cls()
    if isinstance(v, (list, tuple)):
        return list(v)
    return v


# -- version ranges --------------------------------------------------------------------------------
def parse_versions(spec: str | None) -> tuple[int, int]:
    """'3+' -> (3, big); '0-4' -> (0, 4); '2' -> (2, 2); 'none'/None-> empty range."""
    if spec is None or spec == "none":
        return (1, 0)
    spec = spec.strip()
    if spec.endswith("+"):
        return (int(spec[:-1]), 1 << 15)
    if "-" in spec:
        a, b = spec.split("-")
        return (int(a), int(b))
    return (int(spec), int(spec))


def _in(rng: tuple[int, int], v: int) -> bool:
    return rng[0] <= v <= rng[1]


# -- types -------------------------------------------------------------------------------------------
class Type:
    """A field type: knows its default and builds a (decode, encode) pair for a context."""

    name = "?"
    default: Any = None

    def codec(self, version: int, flexible: bool, nullable: bool) -> tuple[Callable, Callable]:
        raise NotImplementedError


class _Prim(Type):
    def __init__(self, name, default, dec, enc):
        self.name, self.default, self._dec, self._enc = name, default, dec, enc

    def codec(self, version, flexible, nullable):
        return self._dec, self._enc

    def __repr__(self):
        return self.name


INT8 = _Prim("int8", 0, Reader.int8, P.w_int8)
INT16 = _Prim("int16", 0, Reader.int16, P.w_int16)
INT32 = _Prim("int32", 0, Reader.int32, P.w_int32)
INT64 = _Prim("int64", 0, Reader.int64, P.w_int64)
UINT16 = _Prim("uint16", 0, Reader.uint16, P.w_uint16)
UINT32 = _Prim("uint32", 0, Reader.uint32, P.w_uint32)
FLOAT64 = _Prim("float64", 0.0, Reader.float64, P.w_float64)
BOOL = _Prim("bool", False, Reader.bool, P.w_bool)
UUID = _Prim("uuid", P.ZERO_UUID, Reader.uuid, P.w_uuid)


class _Str(Type):
    name = "string"
    default = ""

    def codec(self, version, flexible, nullable):
        if flexible:
            return ((Reader.compact_nullable_string, P.w_compact_nullable_string) if nullable
                    else (Reader.compact_string, P.w_compact_string))
        return ((Reader.nullable_string, P.w_nullable_string) if nullable
                else (Reader.string, P.w_string))


class _Bytes(Type):
    name = "bytes"
    default = b""

    def codec(self, version, flexible, nullable):
        if flexible:
            return ((Reader.compact_nullable_bytes, P.w_compact_nullable_bytes) if nullable
                    else (Reader.compact_bytes, P.w_compact_bytes))
        return ((Reader.nullable_bytes, P.w_nullable_bytes) if nullable
                else (Reader.bytes_, P.w_bytes))


def _read_records(r: Reader, n: int):
    # Records are kept as a zero-copy memoryview slice of the frame; consumers parse it lazily.
    return None if n < 0 else r.view(n)


class _Records(Type):
    """RECORDS: nullable bytes holding RecordBatches; decoded as a memoryview (no copy)."""

    name = "records"
    default = None

    def codec(self, version, flexible, nullable):
        if flexible:
            def dec(r):
                return _read_records(r, r.uvarint() - 1)
            return dec, _records_writer(P.w_compact_nullable_bytes, lambda out, n: P.w_uvarint(out, n + 1))
        return (lambda r: _read_records(r, r.int32())), _records_writer(P.w_nullable_bytes, _w_len32)


def _w_len32(out: bytearray, n: int) -> None:
    out += n.to_bytes(4, "big", signed=True)


def _records_writer(write, write_len):
    """Records given as ExternalRecords (sent with sendfile): into a SpliceBuffer only the length is written
    and the place noted; into any other buffer their bytes are read and written as usual. Records of
    at least GATHER_MIN bytes written into a GatherBuffer: only the length, the bytes noted as a piece."""
    def w(out, v):
        if type(out) is GatherBuffer:
            if isinstance(v, ExternalRecords):
                v = v.read()
            if v is not None and len(v) >= GATHER_MIN:
                write_len(out, len(v))
                out.add_piece(v)
                return
        elif isinstance(v, ExternalRecords):
            if type(out) is SpliceBuffer:
                write_len(out, v.size)
                out.splices.append((len(out), v))
                return
            v = v.read()
        write(out, v)
    return w


STRING = _Str()
# Request header client_id: a nullable STRING that stays non-compact even in header v2.
LEGACY_NULLABLE_STRING = _Prim("nullable_string(non-compact)", None, Reader.nullable_string,
                               P.w_nullable_string)
BYTES = _Bytes()
RECORDS = _Records()


class Array(Type):
    """Array of a primitive (or of a Struct type)."""

    def __init__(self, item: Type):
        self.item = item
        self.name = f"[{item.name}]"
        self.default = ()

    def codec(self, version, flexible, nullable):
        idec, ienc = self.item.codec(version, flexible, False)

        # flexible versions: unsigned varint length + 1 (0 = null); older ones: int32 (-1 = null)
        read_len = Reader.compact_array_len if flexible else Reader.array_len
        null = b"\x00" if flexible else b"\xff\xff\xff\xff"

        def write_len(out, n):
            if flexible:
                P.w_uvarint(out, n + 1)
            else:
                P.w_int32(out, n)

        def dec(r: Reader):
            n = read_len(r)
            if n < 0:
                if nullable:
                    return None
                raise DecodeError(f"null array where {self.name} is required")
            return [idec(r) for _ in range(n)]

        wire_key = (version, flexible)

        def enc(out, v):
            if v is None:
                if not nullable:
                    raise EncodeError(f"{self.name} is not nullable in v{version}")
                out += null
                return
            if type(v) is EncodedOnce:
                wire = v.wire.get(wire_key)
                if wire is None:
                    buf = bytearray()
                    write_len(buf, len(v))
                    for x in v:
                        ienc(buf, x)
                    wire = v.wire[wire_key] = bytes(buf)
                out += wire
                return
            write_len(out, len(v))
            for x in v:
                ienc(out, x)
        return dec, enc


class EncodedOnce(tuple):
    """A read-only array value shared by many messages: its wire bytes are built once per
    (version, flexible) and reused, so an array of thousands of unchanging structs (a wide topic's
    Metadata partitions) is not encoded again for every answer. Its items must never change."""

    wire: dict

    def __new__(cls, items=()):
        self = super().__new__(cls, items)
        self.wire = {}
        return self


class Field:
    __slots__ = ("name", "type", "versions", "nullable", "tag", "default")

    def __init__(self, name, type_, versions, nullable, tag, default):
        self.name = name
        self.type = type_
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tag = tag
        if default is MISSING:
            default = _NEW_STRUCT if isinstance(type_, _StructType) else type_.default
        self.default = default

    def __repr__(self):
        return f"Field({self.name}:{self.type.name})"


def f(name: str, type_: Type, versions: str = "0+", nullable: str | None = None,
      tag: int | None = None, default: Any = MISSING) -> Field:
    """Declare a field. `versions` where present, `nullable` where null is allowed,
    `tag` for tagged fields (present only in flexible versions), `default` when absent."""
    return Field(name, type_, versions, nullable, tag, default)


# -- structs -----------------------------------------------------------------------------------------
class StructBase:
    """Instances of a schema struct: plain attributes named as the fields."""

    FIELDS: list[Field] = []
    FLEXIBLE: str | None = None   # set on top-level messages only; nested structs inherit context
    _codecs: dict

    def __init__(self, **kwargs):
        cls = type(self)
        plan = cls.__dict__.get("_init_plan")
        if plan is None:
            plan = cls._make_init_plan()
        fields, defaults, fresh = plan
        if not kwargs.keys() <= fields.keys():
            k = next(k for k in kwargs if k not in fields)
            raise TypeError(f"{cls.__name__} has no field {k!r}; fields: {', '.join(fields)}")
        d = self.__dict__
        d.update(defaults)          # every field, in schema order
        for name, fld in fresh:     # defaults that are new objects (lists, nested structs) per instance
            if name not in kwargs:
                d[name] = _fresh(fld)
        d.update(kwargs)

    @classmethod
    def _make_init_plan(cls):
        """(fields by name, {name: default} of every field, [(name, field)] of those whose default is
        made anew per instance): what __init__ needs, computed once per class."""
        fields = cls._by_name
        fresh = [(name, fld) for name, fld in fields.items()
                 if fld.default is _NEW_STRUCT or isinstance(fld.default, (list, tuple))]
        made = {name for name, _ in fresh}
        defaults = {name: None if name in made else fld.default for name, fld in fields.items()}
        cls._init_plan = plan = (fields, defaults, fresh)
        return plan

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        a = {k: v for k, v in self.__dict__.items() if k[0] != "_"}
        b = {k: v for k, v in other.__dict__.items() if k[0] != "_"}
        return a == b and self.__dict__.get("_unknown_tags") == other.__dict__.get("_unknown_tags")

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if k[0] != "_")
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict:
        def conv(v):
            if isinstance(v, StructBase):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, memoryview):
                return bytes(v)
            return v
        return {k: conv(v) for k, v in self.__dict__.items() if k[0] != "_"}

    # The codec of this struct for (version, flexible); nested structs are codecs too.
    @classmethod
    def _codec(cls, version: int, flexible: bool):
        key = (version, flexible)
        c = cls.__dict__.get("_codecs")
        if c is None:
            c = {}
            cls._codecs = c
        got = c.get(key)
        if got is None:
            got = c[key] = _build_struct_codec(cls, version, flexible)
        return got


def _build_struct_codec(cls, version: int, flexible: bool):
    plain = []     # (name, dec, enc, nullable)
    tagged = {}    # tag -> (name, dec, enc, default)
    absent = []    # (name, default) for fields not in this version
    for fld in cls.FIELDS:
        present = _in(fld.versions, version)
        if fld.tag is not None:
            if not (flexible and present):
                absent.append(fld)
                continue
            nullable = _in(fld.nullable, version)
            dec, enc = fld.type.codec(version, True, nullable)
            tagged[fld.tag] = (fld.name, dec, enc, fld)
        elif present:
            nullable = _in(fld.nullable, version)
            dec, enc = fld.type.codec(version, flexible, nullable)
            plain.append((fld.name, dec, enc))
        else:
            absent.append(fld)
    tag_order = sorted(tagged)
    new = object.__new__

    def decode(r: Reader):
        obj = new(cls)
        d = obj.__dict__
        for name, dec, _ in plain:
            d[name] = dec(r)
        for fld in absent:
            d[fld.name] = _fresh(fld)
        if flexible:
            n = r.uvarint()
            if n > r.remaining():
                raise DecodeError(f"{n} tagged fields cannot fit in {r.remaining()} bytes")
            last = -1
            for _ in range(n):
                tag = r.uvarint()
                size = r.uvarint()
                if tag <= last:
                    raise DecodeError("tagged fields out of order")
                last = tag
                t = tagged.get(tag)
                if t is None:
                    d.setdefault("_unknown_tags", {})[tag] = r.raw(size)
                else:
                    # remember the tag was on the wire, so re-encoding writes it even when its
                    # value equals the default (byte-exact round trips of peers' frames)
                    d.setdefault("_tags_seen", set()).add(tag)
                    sub = Reader(r.buf, r.pos, r.pos + size)
                    if sub.end > r.end:
                        raise DecodeError("tagged field runs past its struct")
                    d[t[0]] = t[1](sub)
                    if sub.pos != sub.end:
                        raise DecodeError(f"tagged field {t[0]} has {sub.end - sub.pos} stray bytes")
                    r.pos = sub.end
            for tag in tag_order:
                name, _, _, fld = tagged[tag]
                if name not in d:
                    d[name] = _fresh(fld)
        return obj

    def encode(out: bytearray, obj) -> None:
        if isinstance(obj, dict):
            obj = cls(**obj)
        d = obj.__dict__
        try:
            for name, _, enc in plain:
                enc(out, d[name])
        except EncodeError:
            raise
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as e:
            raise EncodeError(f"{cls.__name__}.{name} (v{version}): {e}") from None
        if flexible:
            items = []
            for tag in tag_order:
                name, _, enc, fld = tagged[tag]
                v = d.get(name)
                if _is_default(v, fld) and tag not in d.get("_tags_seen", ()):
                    continue
                buf = bytearray()
                enc(buf, v)
                items.append((tag, buf))
            unknown = d.get("_unknown_tags")
            if unknown:
                items.extend(unknown.items())
                items.sort(key=lambda t: t[0])
            P.w_uvarint(out, len(items))
            for tag, buf in items:
                P.w_uvarint(out, tag)
                P.w_uvarint(out, len(buf))
                out += buf

    return decode, encode


def _is_default(v, fld) -> bool:
    dflt = fld.default
    if dflt is _NEW_STRUCT:
        if v is None:
            return False
        t = fld.type
        if type(v) is t.cls and v.__dict__ == t.default_fields():
            return True         # the common case (e.g. Produce's current_leader) without a new instance
        return v == t.cls()
    if isinstance(v, (list, tuple)) and isinstance(dflt, (list, tuple)):
        return len(v) == 0 and len(dflt) == 0
    return v == dflt


class _StructType(Type):
    """A nested struct used as a field type (single struct, or as the item of an array)."""

    def __init__(self, cls):
        self.cls = cls
        self.name = cls.__name__
        self.default = None
        self._default_fields = None

    def default_fields(self) -> dict:
        """The attributes of a default instance (cached; compared against, never handed out)."""
        d = self._default_fields
        if d is None:
            d = self._default_fields = dict(self.cls().__dict__)
        return d

    def codec(self, version, flexible, nullable):
        dec, enc = self.cls._codec(version, flexible)
        if not nullable:
            return dec, enc

        def ndec(r):
            return None if r.int8() < 0 else dec(r)

        def nenc(out, v):
            if v is None:
                out.append(0xFF)
            else:
                out.append(1)
                enc(out, v)
        return ndec, nenc


def _make_struct(name: str, fields: list[Field]) -> type:
    cls = type(name, (StructBase,), {"FIELDS": fields, "__module__": __name__})
    cls._by_name = {fl.name: fl for fl in fields}
    for fl in fields:
        t = fl.type
        inner = t.item if isinstance(t, Array) else t
        if isinstance(inner, _StructType):
            setattr(cls, inner.cls.__name__, inner.cls)
    return cls


def Struct(name: str, fields: list[Field], default: Any = MISSING) -> Type:
    """A nested struct type. Default of a non-nullable struct field is a fresh default instance."""
    t = _StructType(_make_struct(name, fields))
    return t


def ArrayOf(name: str, fields: list[Field]) -> Array:
    """An array of nested structs named `name`."""
    return Array(_StructType(_make_struct(name, fields)))


# -- messages ----------------------------------------------------------------------------------------
class Message(StructBase):
    """A top-level request or response. Subclasses set API_KEY, VALID, FLEXIBLE, SCHEMA."""

    API_KEY: int = -1
    VALID: str = "0"          # versions this definition covers
    FLEXIBLE: str = "none"    # flexible versions (KIP-482)
    SCHEMA: list[Field] = []

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "SCHEMA" in cls.__dict__:
            cls.FIELDS = cls.SCHEMA
            cls._by_name = {fl.name: fl for fl in cls.SCHEMA}
            cls._codecs = {}
            cls.MIN_VERSION, cls.MAX_VERSION = parse_versions(cls.VALID)
            cls._flex = parse_versions(cls.FLEXIBLE)
            for fl in cls.SCHEMA:
                t = fl.type
                inner = t.item if isinstance(t, Array) else t
                if isinstance(inner, _StructType):
                    setattr(cls, inner.cls.__name__, inner.cls)

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return _in(cls._flex, version)

    @classmethod
    def check_version(cls, version: int) -> None:
        if not (cls.MIN_VERSION <= version <= cls.MAX_VERSION):
            raise EncodeError(f"{cls.__name__} has no version {version} "
                              f"(valid {cls.MIN_VERSION}-{cls.MAX_VERSION})")

    def encode(self, version: int) -> bytes:
        """The body bytes of this message in `version` (no size prefix, no header)."""
        out = bytearray()
        self.encode_into(out, version)
        return bytes(out)

    def encode_into(self, out: bytearray, version: int) -> None:
        cls = type(self)
        cls.check_version(version)
        wire = self.__dict__.get("_wire")
        if wire is None:
            cls._codec(version, cls.is_flexible(version))[1](out, self)
            return
        body = wire.get(version)
        if body is None:
            buf = bytearray()
            cls._codec(version, cls.is_flexible(version))[1](buf, self)
            body = wire[version] = bytes(buf)
        out += body

    def encode_once(self) -> "Message":
        """Declares this message read-only from now on, to be sent many times: its body is encoded
        once per version and those bytes reused by every later encode (an answer shared by many
        requests, e.g. the same Metadata answer to many clients). Returns the message."""
        self.__dict__["_wire"] = {}
        return self

    @classmethod
    def decode(cls, data, version: int, exact: bool = True):
        """Decode a body. With `exact`, trailing bytes are an error. Raises only DecodeError."""
        r = data if isinstance(data, Reader) else Reader(data)
        if not (cls.MIN_VERSION <= version <= cls.MAX_VERSION):
            raise DecodeError(f"{cls.__name__} has no version {version}")
        obj = cls.read(r, version)
        if exact and r.pos != r.end:
            raise DecodeError(f"{cls.__name__} v{version}: {r.end - r.pos} trailing bytes")
        return obj

    @classmethod
    def read(cls, r: Reader, version: int):
        try:
            return cls._codec(version, cls.is_flexible(version))[0](r)
        except DecodeError:
            raise
        except (ValueError, IndexError, OverflowError, TypeError, MemoryError, RecursionError) as e:
            raise DecodeError(f"{cls.__name__} v{version}: {e}") from None


def new_uuid() -> _uuid.UUID:
    return _uuid.uuid4()
