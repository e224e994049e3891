# The two commands: `make demo` and `make test`. Each builds .venv on first use and
# reinstalls only when setup.py changes.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# JVM jars (Apache Kafka, Delta, Spark's Kafka source) resolved from jvm/pom.xml; see jvm/pom.xml.
JARS := jvm/target/.resolved
MVN := mvn -q -B -f jvm/pom.xml

.PHONY: demo demo-kafka test check lint bench soak broker kafka jars clean

$(STAMP): setup.py
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 or run make PYTHON=python3"; exit 1; }
	@command -v java >/dev/null || { echo "java not found: Spark needs Java 17"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# compat mode keeps pyspark_sharegroup.py visible to Spark's pkgutil-based discovery
	$(BIN)/pip install --quiet -e '.[test]' --config-settings editable_mode=compat
	touch $(STAMP)

$(JARS): jvm/pom.xml
	@command -v mvn >/dev/null || { echo "mvn not found: install Maven 3.8+ (it resolves the JVM jars in jvm/pom.xml)"; exit 1; }
	@command -v java >/dev/null || { echo "java not found: Apache Kafka and Spark need Java 17"; exit 1; }
	rm -rf jvm/target/kafka jvm/target/spark
	$(MVN) -P kafka dependency:copy-dependencies
	$(MVN) -P spark dependency:copy-dependencies
	touch $@

jars: $(JARS)

demo: $(STAMP)
	$(BIN)/python examples/demo.py $(DEMO_ARGS)

# the same demo on Apache Kafka's own broker, started from the jars of jvm/pom.xml
demo-kafka: $(STAMP) $(JARS)
	$(BIN)/python examples/demo.py --kafka apache

test: $(STAMP) $(JARS)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

# the inner loop, under 5 minutes: lint, types, unit tests and one end-to-end stream, on the embedded broker only
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	SHAREGROUP_TEST_KAFKA=embedded $(BIN)/python -m pytest -q tests/test_options.py tests/test_schema.py \
		tests/test_state_share_partition.py tests/test_acknowledger.py tests/test_batch_size.py \
		tests/test_redaction.py "tests/test_source.py::test_every_record_exactly_once_into_a_file_sink"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP) $(JARS)
	$(BIN)/python -m bench $(BENCH_ARGS)

soak: $(STAMP)
	$(BIN)/python -m soak $(SOAK_ARGS)

broker: $(STAMP)
	$(BIN)/sharegroup broker --topic orders:4

kafka: $(STAMP) $(JARS)
	$(BIN)/sharegroup kafka --topic orders:4

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache jvm/target
