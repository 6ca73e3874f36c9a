"""Replays every fuzz target's corpus (tests/fuzz/corpus/<target>/) and every input that once broke
a target (tests/fuzz/regressions/<target>/) through the target's own check, without atheris: each
must pass its invariants, within a time bound, allocating a bounded amount (tracemalloc peak)."""
from __future__ import annotations

import importlib
import time
import tracemalloc
from pathlib import Path

import pytest

from tests.fuzz.run import TARGETS, corpus_dir, regressions_dir

PEAK_BYTES = 64 << 20          # per input
SECONDS = 2.0                  # per input


def _cases():
    for t in TARGETS:
        for d in (corpus_dir(t), regressions_dir(t)):
            if d.is_dir():
                for p in sorted(d.iterdir()):
                    yield pytest.param(t, p, id=f"{t}/{d.parent.name}/{p.name[:24]}")


def test_every_target_has_a_corpus():
    for t in TARGETS:
        assert corpus_dir(t).is_dir() and any(corpus_dir(t).iterdir()), t


@pytest.fixture(scope="module", autouse=True)
def _close_dispatch_broker():
    yield
    importlib.import_module("tests.fuzz.fuzz_dispatch").close()


@pytest.mark.parametrize("target,path", list(_cases()))
def test_replay(target: str, path: Path):
    mod = importlib.import_module(f"tests.fuzz.fuzz_{target}")
    data = path.read_bytes()
    if target == "dispatch":
        mod.broker()               # started once, outside the measured input
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        mod.check(data)
    finally:
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < SECONDS, f"{elapsed:.2f} s"
    assert peak < PEAK_BYTES, f"peak {peak} bytes"


def test_metadata_v11_naming_a_topic_by_id_is_invalid_request():
    """What the dispatch target found: Metadata v10-v11 with a null topic name (a topic id) is refused
    as Kafka refuses it (INVALID_REQUEST for each topic, a null name answered as ""), not answered
    with a response v11 cannot encode."""
    import uuid

    from kohort.protocol.messages.metadata import MetadataRequest
    from tests.fuzz import fuzz_dispatch as d
    b = d.broker()
    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(topics=[T(name=None, topic_id=uuid.uuid4()), T(name=d.TOPIC)],
                          allow_auto_topic_creation=False)
    for v in (10, 11):
        resp = d._call(d._dispatch(b, 3, v, req))
        assert [(t.error_code, t.name) for t in resp.topics] == [(42, ""), (42, d.TOPIC)]
        resp.encode(v)
    resp = d._call(d._dispatch(b, 3, 12, req))          # v12: ids are usable
    assert [t.error_code for t in resp.topics] == [100, 0]
