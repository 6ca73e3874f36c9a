"""`kohort consume` / `kohort produce` against kcat's flags: the same command line (kohort's spelling of it)
prints the same bytes as kcat on the same topic of a kohort broker.

Covered: -o beginning|end|N|-N|s@ts|e@ts, several topics and a ^regex with -g, -e with -g, raw binary
values, %R (value length as a big-endian int32), -J (kcat's JSON envelope), consume -K/-D delimiters,
produce -k KEY and -Z (empty → null).
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import uuid

import pytest

from tests.conftest import require_kcat

from kohort.client.admin import Admin
from kohort.client.producer import Producer
from tests.helpers.brokers import kohort_broker  # noqa: F401  (fixture)

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
@pytest.fixture(autouse=True)
def _kcat_installed():
    require_kcat()
T0 = 1_700_000_000_000


def kohort(*args, stdin: bytes = b"") -> bytes:
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", *args], input=stdin, capture_output=True,
                       timeout=60, env=dict(os.environ, PYTHONPATH=SRC))
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def kcat(*args, stdin: bytes = b"") -> bytes:
    r = subprocess.run(["kcat", *args], input=stdin, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def _topic(broker, name, parts=2, records=()):
    with Admin({"bootstrap.servers": broker.bootstrap}) as a:
        assert a.create_topics({name: parts})[name] is None
    if records:
        with Producer({"bootstrap.servers": broker.bootstrap}) as p:
            for part, ts, key, value in records:
                p.produce(name, value, key=key, partition=part, timestamp=ts)
    return name


@pytest.fixture
def filled(kohort_broker):
    """10 records over 2 partitions, timestamps T0 + 1000 * i, one binary value, one null."""
    recs = [(i % 2, T0 + 1000 * i, b"k%d" % i, b"v%d" % i) for i in range(10)]
    recs[4] = (0, T0 + 4000, b"bin", bytes(range(256)))
    recs[7] = (1, T0 + 7000, None, None)
    return kohort_broker, _topic(kohort_broker, f"kc-{uuid.uuid4().hex[:6]}", 2, recs)


def _sorted(b: bytes) -> list[bytes]:
    return sorted(b.split(b"\n"))


@pytest.mark.parametrize("offset", ["beginning", "end", "3", "-2", f"s@{T0 + 5000}", f"s@{T0 + 99000}"])
def test_start_offsets_match_kcat(filled, offset):
    b, t = filled
    fmt = "%p %o %T %k %S\\n"
    ours = kohort("consume", t, "-b", b.bootstrap, "-o", offset, "-e", "-f", fmt)
    theirs = kcat("-C", "-b", b.bootstrap, "-t", t, "-o", offset, "-e", "-f", fmt.replace("\\\\", "\\"))
    assert _sorted(ours) == _sorted(theirs)
    if offset == "beginning":
        assert len(ours.splitlines()) == 10
    if offset == "-2":
        assert len(ours.splitlines()) == 4


def test_stop_timestamp_matches_kcat(filled):
    b, t = filled
    fmt = "%p %o %S\\n"
    ours = kohort("consume", t, "-b", b.bootstrap, "-o", "beginning", "-o", f"e@{T0 + 6000}", "-f", fmt)
    theirs = kcat("-C", "-b", b.bootstrap, "-t", t, "-o", "beginning", "-o", f"e@{T0 + 6000}", "-f", fmt)
    assert _sorted(ours) == _sorted(theirs)
    assert len(ours.splitlines()) == 6          # records at T0 .. T0+5000


def test_raw_binary_values_and_R_match_kcat(filled):
    b, t = filled
    ours = kohort("consume", t, "-b", b.bootstrap, "-p", "0", "-o", "beginning", "-e", "-f", "%R%s")
    theirs = kcat("-C", "-b", b.bootstrap, "-t", t, "-p", "0", "-o", "beginning", "-e", "-f", "%R%s")
    assert ours == theirs
    assert struct.pack(">i", 256) + bytes(range(256)) in ours      # no escaping, length prefix


def test_several_topics_and_regex_with_group_and_exit_match_kcat(kohort_broker):
    b = kohort_broker
    prefix = f"kr{uuid.uuid4().hex[:5]}"
    a = _topic(b, f"{prefix}-a", 2, [(i % 2, T0 + i, None, b"a%d" % i) for i in range(5)])
    _topic(b, f"{prefix}-b", 1, [(0, T0 + i, None, b"b%d" % i) for i in range(3)])
    other = _topic(b, f"x{prefix}", 1, [(0, T0, None, b"x")])
    fmt = "%t %p %o %s\\n"
    ours = kohort("consume", f"^{prefix}-.*", other, "-g", f"g1-{prefix}", "-b", b.bootstrap, "-o", "beginning",
                  "-e", "-f", fmt)
    theirs = kcat("-b", b.bootstrap, "-G", f"g2-{prefix}", f"^{prefix}-.*", other, "-o", "beginning", "-e",
                  "-f", fmt)
    assert _sorted(ours) == _sorted(theirs)
    assert len(ours.splitlines()) == 9
    with Admin({"bootstrap.servers": b.bootstrap}) as adm:    # -e -g commits what it printed
        got = adm.list_group_offsets(f"g1-{prefix}")
    assert {(tp.topic, tp.partition): o.offset for tp, o in got.items()} == {
        (a, 0): 3, (a, 1): 2, (f"{prefix}-b", 0): 3, (other, 0): 1}


def _produce_both(b, ours_args, kcat_args, lines: bytes):
    ours_t = _topic(b, f"kz-{uuid.uuid4().hex[:6]}", 1)
    theirs_t = _topic(b, f"kz-{uuid.uuid4().hex[:6]}", 1)
    kohort("produce", ours_t, "-b", b.bootstrap, *ours_args, stdin=lines)
    kcat("-P", "-b", b.bootstrap, "-t", theirs_t, *kcat_args, stdin=lines)
    fmt = "%o %K %S [%k] [%s]\\n"
    return (kcat("-C", "-b", b.bootstrap, "-t", ours_t, "-o", "beginning", "-e", "-f", fmt),
            kcat("-C", "-b", b.bootstrap, "-t", theirs_t, "-o", "beginning", "-e", "-f", fmt))


def test_produce_fixed_key_and_null_for_empty_match_kcat(kohort_broker):
    ours, theirs = _produce_both(kohort_broker, ["-k", "KEY"], ["-k", "KEY"], b"one\nthree\n")
    assert ours == theirs == b"0 3 3 [KEY] [one]\n1 3 5 [KEY] [three]\n"
    lines = b"k1:one\n:\nk3:\n:v4\n"
    ours, theirs = _produce_both(kohort_broker, ["-K", ":", "-Z"], ["-K", ":", "-Z"], lines)
    assert ours == theirs == b"0 2 3 [k1] [one]\n1 -1 -1 [] []\n2 2 -1 [k3] []\n3 -1 2 [] [v4]\n"


def test_produce_null_for_an_empty_line(kohort_broker):
    """-Z on a whole empty line: kohort sends a tombstone (null value); kcat 1.7.1 skips empty lines
    with or without -Z (a deliberate difference: the README's parity table)."""
    b = kohort_broker
    t = _topic(b, f"kz-{uuid.uuid4().hex[:6]}", 1)
    kohort("produce", t, "-b", b.bootstrap, "-k", "K", "-Z", stdin=b"one\n\n")
    kohort("produce", t, "-b", b.bootstrap, stdin=b"\n")
    out = kcat("-C", "-b", b.bootstrap, "-t", t, "-o", "beginning", "-e", "-f", "%o %S [%k]\\n")
    assert out == b"0 3 [K]\n1 -1 [K]\n2 0 []\n"


def test_offset_argument_errors():
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "consume", "t", "-b", "127.0.0.1:1", "-o", "x@1"],
                       capture_output=True, text=True, timeout=30, env=dict(os.environ, PYTHONPATH=SRC))
    assert r.returncode == 2 and "expected beginning, end, stored, N, -N" in r.stderr
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "consume", "^t.*", "-b", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=30, env=dict(os.environ, PYTHONPATH=SRC))
    assert r.returncode != 0 and "needs --group" in r.stderr
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "consume", "t", "-o", "stored", "-b", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=30, env=dict(os.environ, PYTHONPATH=SRC))
    assert r.returncode != 0 and "-o stored needs --group" in r.stderr
    r = subprocess.run([sys.executable, "-m", "kohort.cli.main", "produce", "t", "-k", "a", "-K", ":", "-b",
                        "127.0.0.1:1"], input="x\n", capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PYTHONPATH=SRC))
    assert r.returncode != 0 and "-k/--key and -K/--key-separator" in r.stderr


def test_json_envelope_matches_kcat(kohort_broker):
    """-J: kcat's JSON envelope, byte for byte (headers, null key/value, binary as U+FFFD, non-ASCII,
    escapes, CreateTime and LogAppendTime)."""
    b = kohort_broker
    t = _topic(b, f"kj-{uuid.uuid4().hex[:6]}", 1)
    la = f"kjl-{uuid.uuid4().hex[:6]}"
    with Admin({"bootstrap.servers": b.bootstrap}) as a:
        assert a.create_topics({la: {"num_partitions": 1, "configs": {"message.timestamp.type": "LogAppendTime"}}})[la] is None
    with Producer({"bootstrap.servers": b.bootstrap}) as p:
        for topic in (t, la):
            p.produce(topic, b"v1", key=b"k1", partition=0, timestamp=T0, headers=[("h", b"x"), ("n", None)])
            p.produce(topic, None, key=None, partition=0, timestamp=T0 + 1)
            p.produce(topic, bytes([0, 255, 10, 34, 31, 127, 8, 12, 13, 47]), key=b"\xff", partition=0, timestamp=T0 + 2)
            p.produce(topic, 'é"\\\t'.encode(), key=b"", partition=0, timestamp=T0 + 3)
    for topic in (t, la):
        ours = kohort("consume", topic, "-b", b.bootstrap, "-o", "beginning", "-e", "-J")
        theirs = kcat("-C", "-b", b.bootstrap, "-t", topic, "-o", "beginning", "-e", "-J", "-q")
        assert ours == theirs and ours.count(b"\n") == 4, (ours, theirs)


@pytest.mark.parametrize("flags", [["-K", ":"], ["-K", "\\t", "-D", "\\x1e"]])
def test_key_and_message_delimiters_match_kcat(filled, flags):
    """kcat -K DELIM (key then DELIM before each value) and -D DELIM (after each record) on consume."""
    b, t = filled
    ours = kohort("consume", t, "-b", b.bootstrap, "-p", "0", "-o", "beginning", "-e", *flags)
    theirs = kcat("-C", "-b", b.bootstrap, "-t", t, "-p", "0", "-o", "beginning", "-e", "-q", *flags)
    assert ours == theirs and len(ours) > 20
