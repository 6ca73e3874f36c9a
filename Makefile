# The two commands a new user runs (see README.md):
#   make demo   -- set everything up, then run the main job (embedded broker + sample data + Spark pipeline)
#   make test   -- set everything up, then run the test suite (fast default; `make test-slow` for the rest)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-slow bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py src/kohort/protocol/_crecords.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]'
	@# kcat is a real peer the tests run against; it comes from Debian's packages when we may install them
	@command -v kcat >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -q kcat >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q kcat >/dev/null 2>&1)) ) || true
	touch $@

demo: setup
	$(BIN)/kohort demo

test: setup
	$(BIN)/python -m pytest

test-slow: setup
	$(BIN)/python -m pytest -m slow

bench: setup
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build *.egg-info
