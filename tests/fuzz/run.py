"""Drive one fuzz target with atheris (libFuzzer for Python), or minimise its corpus.

    python -m tests.fuzz.run TARGET --seconds N     # fuzz N seconds from its corpus and seeds
    python -m tests.fuzz.run TARGET --merge         # rewrite tests/fuzz/corpus/TARGET minimised
    python -m tests.fuzz.run --list

Fuzzing: kohort's modules are instrumented as they are imported; the inputs of corpus/TARGET and the
target's seeds start it; new inputs go to a work directory (.fuzz-work/TARGET, ignored by git). An
input that breaks the target's invariant (a Finding or any exception its check lets through) is
saved under .fuzz-work/TARGET/findings/ once per distinct failure (exception type and the kohort
line that raised it) and fuzzing goes on; a hang is libFuzzer's -timeout (per input), an
allocation beyond the limits is the address-space limit set after warm-up (RLIMIT_AS: a MemoryError
is a finding) or libFuzzer's -rss_limit_mb. libFuzzer's final statistics (executions, cov/ft) are
printed at the end.

Minimising (--merge): every input of the work directory, the corpus and the seeds is run under a
line tracer over kohort's sources (on every thread); a greedy set cover keeps the inputs that add
lines, at most MAX_CORPUS of them.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import resource
import sys
import threading
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TARGETS = ("requests", "responses", "handshake", "dispatch", "records", "compression")
MAX_CORPUS = 40
WORK = ROOT / ".fuzz-work"
HEADROOM_AS = 2 << 30          # address space allowed above what the warmed-up process maps


def corpus_dir(target: str) -> Path:
    return HERE / "corpus" / target


def regressions_dir(target: str) -> Path:
    return HERE / "regressions" / target


def load(target: str, instrument: bool):
    if target not in TARGETS:
        raise SystemExit(f"unknown target {target!r}; targets: {', '.join(TARGETS)}")
    name = f"tests.fuzz.fuzz_{target}"
    if instrument:
        import atheris
        with atheris.instrument_imports(include=["kohort"]):
            return importlib.import_module(name)
    return importlib.import_module(name)


def inputs_of(*dirs: Path) -> list[bytes]:
    out = []
    for d in dirs:
        if d.is_dir():
            out += [p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()]
    return out


def _signature(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/kohort/" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "target"
    return f"{type(exc).__name__}@{where}"


def fuzz(target: str, seconds: int) -> int:
    mod = load(target, instrument=True)
    import atheris
    work = WORK / target
    found = work / "findings"
    found.mkdir(parents=True, exist_ok=True)
    seed_dir = work / "seeds"
    seed_dir.mkdir(exist_ok=True)
    for s in mod.seeds():
        (seed_dir / hashlib.sha1(s).hexdigest()).write_bytes(s)
    for s in inputs_of(seed_dir, corpus_dir(target)):
        try:
            mod.check(s)               # warm-up (the dispatch target starts its broker here)
        except Exception:
            pass
    vm = _vm_size()
    resource.setrlimit(resource.RLIMIT_AS, (vm + HEADROOM_AS, resource.RLIM_INFINITY))
    seen: set[str] = set()

    def one(data: bytes) -> None:
        try:
            mod.check(data)
        except Exception as e:          # a finding: kept once per signature, fuzzing goes on
            sig = _signature(e)
            if sig not in seen:
                seen.add(sig)
                path = found / f"{sig.replace('/', '_')}-{hashlib.sha1(data).hexdigest()[:12]}"
                path.write_bytes(data)
                print(f"FINDING {sig}: {type(e).__name__}: {str(e)[:300]} -> {path}", flush=True)

    out_dir = work / "corpus"
    out_dir.mkdir(exist_ok=True)
    corpus_dir(target).mkdir(parents=True, exist_ok=True)
    args = [sys.argv[0], f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=2048",
            "-max_len=4096", "-print_final_stats=1", f"-artifact_prefix={work}/",
            str(out_dir), str(corpus_dir(target)), str(seed_dir)]
    atheris.Setup(args, one)
    try:
        atheris.Fuzz()
    finally:
        print(f"findings: {len(seen)} {sorted(seen)}", flush=True)
    return 0


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def merge(target: str) -> int:
    mod = load(target, instrument=False)
    work = WORK / target
    cands = {hashlib.sha1(d).hexdigest(): d for d in
             inputs_of(work / "corpus", corpus_dir(target)) + list(mod.seeds())}
    src = str(ROOT / "src" / "kohort")
    current: list[set] = [set()]

    def tracer(frame, event, arg):     # lines of kohort's sources run, on any thread (dispatch's broker)
        if not frame.f_code.co_filename.startswith(src):
            return None
        if event == "line":
            current[0].add((frame.f_code.co_filename, frame.f_lineno))
        return tracer
    threading.settrace(tracer)          # threads started from here on (the dispatch target's broker loop)
    arcs: dict[str, set] = {}
    for h, data in cands.items():
        current[0] = set()
        sys.settrace(tracer)
        try:
            mod.check(data)
        except Exception:
            pass
        finally:
            sys.settrace(None)
        arcs[h] = current[0]
    threading.settrace(None)
    keep: list[str] = []
    covered: set = set()
    while len(keep) < MAX_CORPUS:
        best = max((h for h in arcs if h not in keep), key=lambda h: (len(arcs[h] - covered), -len(cands[h])),
                   default=None)
        if best is None or not arcs[best] - covered:
            break
        keep.append(best)
        covered |= arcs[best]
    d = corpus_dir(target)
    d.mkdir(parents=True, exist_ok=True)
    for p in d.iterdir():
        p.unlink()
    for h in keep:
        (d / h).write_bytes(cands[h])
    total = set().union(*arcs.values()) if arcs else set()
    print(f"{target}: {len(cands)} inputs -> {len(keep)} kept, {len(covered)} of {len(total)} lines covered")
    if hasattr(mod, "close"):
        mod.close()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", nargs="?")
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--merge", action="store_true")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list or not a.target:
        print("\n".join(TARGETS))
        return 0
    return merge(a.target) if a.merge else fuzz(a.target, a.seconds)


if __name__ == "__main__":
    sys.exit(main())
