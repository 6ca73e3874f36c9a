"""Hypothesis strategies that build a valid instance of any schema message for a given version."""
from __future__ import annotations

from hypothesis import strategies as st

from kohort.protocol import schema as S


def _prim(t):
    return {
        "int8": st.integers(-2**7, 2**7 - 1),
        "int16": st.integers(-2**15, 2**15 - 1),
        "int32": st.integers(-2**31, 2**31 - 1),
        "int64": st.integers(-2**63, 2**63 - 1),
        "uint16": st.integers(0, 2**16 - 1),
        "uint32": st.integers(0, 2**32 - 1),
        "float64": st.floats(allow_nan=False),
        "bool": st.booleans(),
        "uuid": st.uuids(),
        "nullable_string(non-compact)": st.none() | st.text(max_size=8),
    }.get(t.name)


def value_strategy(t, version: int, nullable: bool, flexible: bool, depth: int = 0):
    base = None
    if isinstance(t, S._Str):
        base = st.text(max_size=8)
    elif isinstance(t, S._Bytes):
        base = st.binary(max_size=8)
    elif isinstance(t, S._Records):
        return st.none() | st.binary(max_size=16)
    elif isinstance(t, S.Array):
        base = st.lists(value_strategy(t.item, version, False, flexible, depth + 1), max_size=2 if depth else 3)
    elif isinstance(t, S._StructType):
        base = struct_strategy(t.cls, version, flexible, depth + 1)
    else:
        base = _prim(t)
        assert base is not None, t
    return (st.none() | base) if nullable else base


def struct_strategy(cls, version: int, flexible: bool, depth: int = 0):
    """Values for the fields present in `version`; tagged fields exist only in flexible versions."""
    kw = {}
    for fld in cls.FIELDS:
        if not S._in(fld.versions, version) or (fld.tag is not None and not flexible):
            continue
        kw[fld.name] = value_strategy(fld.type, version, S._in(fld.nullable, version), flexible, depth)
    return st.builds(cls, **kw)


def message_strategy(cls, version: int):
    return struct_strategy(cls, version, cls.is_flexible(version))
