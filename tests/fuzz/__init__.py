"""Coverage-guided fuzz targets (atheris), one module per target; `python -m tests.fuzz.run` drives them
and tests/fuzz/test_fuzz_regressions.py replays their corpora and every input that once failed."""
