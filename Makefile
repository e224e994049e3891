# The two commands: `make demo` and `make test`. Each builds .venv on first use and
# reinstalls only when setup.py changes.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# JVM jars (Apache Kafka, Delta, Spark's Kafka source) resolved from jvm/pom.xml; see jvm/pom.xml. Apache Kafka comes
# twice: the default broker in jvm/target/kafka, the previous release in jvm/target/kafka-<version>
# (SHAREGROUP_KAFKA_VERSION=<version> runs the suite, the bench and `sharegroup kafka` on it).
JARS := jvm/target/.resolved
MVN := mvn -q -B -f jvm/pom.xml
# Node tools the suite starts (Azurite, the Azure Storage emulator), pinned by tools/package-lock.json
TOOLS := tools/node_modules/.installed
# The suite's GCS stand-in (sharegroup-testing/sharegroup_testing/gcs_server.py): fake-gcs-server, built from the Go module proxy
# into .venv/bin at this version (the stamp's name carries it, so a new version rebuilds)
FAKE_GCS_VERSION := v1.56.1
FAKE_GCS := $(VENV)/.fake-gcs-server-$(FAKE_GCS_VERSION)
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)

# Spark discovers format("sharegroup") by listing top-level pyspark_* modules (pkgutil), which an
# editable install's import hook does not show: a .pth line puts the checkout itself on sys.path, and a second one
# sharegroup-testing/ (setuptools' default editable mode, plus these lines; its editable_mode=compat is announced
# to go). The second distribution, sharegroup-testing (the local brokers and test servers, kept out of the
# connector's wheel), goes in beside it without its dependencies: the extra of $(2) holds the ones each venv needs.
DEV_PTH := sharegroup-source-checkout.pth
TESTING := sharegroup-testing
define dev_install
	$(1)/python -c "import sysconfig; open(sysconfig.get_paths()['purelib'] + '/$(DEV_PTH)', 'w').write('$(CURDIR)\n$(CURDIR)/$(TESTING)\n')"
	$(1)/pip install --quiet --upgrade pip
	$(1)/pip install --quiet -e '.[$(2)]' $(3)
	$(1)/pip install --quiet --no-deps -e ./$(TESTING)
endef

# The compatibility slice: every other supported Spark minor, each in its own venv under .venv/compat, with the
# Python its runtimes ship (4.0: Databricks Runtime 17.3 LTS's 3.12; 4.1: Spark's own images' 3.10, so the slice
# also covers Python 3.10; 4.3: 3.13, the newest), tests marked `compat` on Apache Kafka, but for those marked
# `primary_spark` (a coordinator's variant: the primary Spark, in make test's own pytest run, runs them).
COMPAT_SPARKS := 4.0.5 4.1.4 4.3.0
COMPAT_PYTHON_4.0 := 3.12
COMPAT_PYTHON_4.1 := 3.10
COMPAT_PYTHON_4.3 := 3.13
COMPAT := $(VENV)/compat
COMPAT_TESTS := tests/test_compat.py tests/test_spark_connect.py
COMPAT_VENVS := $(foreach v,$(COMPAT_SPARKS),$(COMPAT)/spark-$(v)/.installed)

# pytest-xdist workers of make test: the suite mostly waits (brokers, acquisition locks, Spark's triggers): with two
# workers a 2-core machine sat 25-45% idle once the compatibility lane had ended (vmstat, 2026-12-06), so three;
# each starts its own Apache Kafka and SparkSession (tests/conftest.py keeps the three-node cluster, the secured
# broker and the previous Kafka on one worker each)
TEST_WORKERS ?= 3

# Debian's Chromium: tests/test_docs.py opens the built documentation site in it, headless
CHROMIUM := /usr/bin/chromium

.PHONY: demo demo-kafka test suite compat-lane compat check lint wheel bench soak soak-long broker kafka jars tools gcs chromium clean

$(STAMP): setup.py $(TESTING)/setup.py
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 or run make PYTHON=python3"; exit 1; }
	@command -v java >/dev/null || { echo "java not found: Spark needs Java 17"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(call dev_install,$(BIN),test)
	touch $(STAMP)

# one venv per Spark version: `basename` of 4.0.5 is 4.0, the minor that picks the Python
$(COMPAT)/spark-%/.installed: setup.py $(TESTING)/setup.py
	@py=$$(python$(COMPAT_PYTHON_$(basename $*)) -V >/dev/null 2>&1 \
		&& echo python$(COMPAT_PYTHON_$(basename $*)) || ls $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(COMPAT_PYTHON_$(basename $*)).*/bin/python$(COMPAT_PYTHON_$(basename $*)) 2>/dev/null | tail -1); \
		test -n "$$py" || { echo "python$(COMPAT_PYTHON_$(basename $*)) not found: the Spark $* slice runs on it"; exit 1; }; \
		test -x $(COMPAT)/spark-$*/bin/python || $$py -m venv $(COMPAT)/spark-$*
	$(call dev_install,$(COMPAT)/spark-$*/bin,compat-test,'pyspark[connect]==$*')
	touch $@

# the slices, one after another under make test (its lane runs beside the main pytest run); `make -j3 compat` runs
# them at once
compat: $(foreach v,$(COMPAT_SPARKS),compat-$(v))
# a venv's stamp is made through the pattern rule: not an intermediate file make may delete
.PRECIOUS: $(COMPAT)/spark-%/.installed

compat-%: $(STAMP) $(JARS) $(COMPAT)/spark-%/.installed
	@python=$(COMPAT)/spark-$*/bin/python; \
		echo "== compatibility slice: Spark $*, $$($$python -V)"; \
		start=$$(date +%s); \
		SHAREGROUP_TEST_KAFKA=apache $$python -m pytest -p no:cacheprovider -q -m "compat and not primary_spark" \
			$(COMPAT_TESTS) || exit 1; \
		echo "== Spark $* slice took $$(( $$(date +%s) - start )) s"

# the wheel the deployment page's Databricks and spark-submit recipes install (docs/deployment.md): dist/sharegroup_source-<version>-py3-none-any.whl
wheel: $(STAMP)
	rm -rf build/lib
	$(BIN)/pip wheel --quiet --no-deps -w dist . ./$(TESTING)
	@ls dist/sharegroup_source-*.whl dist/sharegroup_testing-*.whl

$(JARS): jvm/pom.xml
	@command -v mvn >/dev/null || { echo "mvn not found: install Maven 3.8+ (it resolves the JVM jars in jvm/pom.xml)"; exit 1; }
	@command -v java >/dev/null || { echo "java not found: Apache Kafka and Spark need Java 17"; exit 1; }
	rm -rf jvm/target/kafka jvm/target/kafka-* jvm/target/spark
	$(MVN) -P kafka dependency:copy-dependencies
	$(MVN) -P kafka-previous dependency:copy-dependencies
	$(MVN) -P spark dependency:copy-dependencies
	touch $@

jars: $(JARS)

$(TOOLS): tools/package.json tools/package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: install Node.js 20+ (the suite's Azure emulator, Azurite, is an npm package)"; exit 1; }
	npm ci --prefix tools --no-audit --no-fund
	touch $@

tools: $(TOOLS)

$(FAKE_GCS):
	@test -x $(GO) || { echo "go not found: install Go 1.26+ (the suite's GCS stand-in, fake-gcs-server, is a Go module)"; exit 1; }
	mkdir -p $(BIN)
	GOBIN=$(CURDIR)/$(BIN) $(GO) install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION)
	touch $@

gcs: $(FAKE_GCS)

# installed once, with apt (the machine runs as root; sudo otherwise); where there is no apt the browser test skips
chromium:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif command -v apt-get >/dev/null; then \
		sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium: $(CHROMIUM) is missing and there is no apt-get to install it: tests/test_docs.py skips its browser check"; fi

demo: $(STAMP)
	$(BIN)/python examples/demo.py $(DEMO_ARGS)

# the same demo on Apache Kafka's own broker, started from the jars of jvm/pom.xml
demo-kafka: $(STAMP) $(JARS)
	$(BIN)/python examples/demo.py --kafka apache

# Setup first, its parts at once (pip, Maven and npm each wait on the network and the disk more than on a core), but
# only what the main pytest run needs. Beside that run goes the compatibility lane: the other Sparks' venvs and lint
# at the lowest CPU priority (nice 19: they take the cores the suite leaves while it waits on brokers, locks and
# triggers), then the slices one after another. The lane's output is kept in one piece and printed when it ends;
# either side failing fails make test.
test:
	$(MAKE) --no-print-directory -j4 $(STAMP) $(JARS) $(TOOLS) $(FAKE_GCS) chromium
	$(MAKE) --no-print-directory -j2 suite compat-lane

suite: $(STAMP) $(JARS) $(TOOLS) $(FAKE_GCS)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

COMPAT_LOG := $(COMPAT)/lane.log
compat-lane: $(STAMP) $(JARS)
	@mkdir -p $(COMPAT); start=$$(date +%s); \
		{ nice -n 19 $(MAKE) --no-print-directory -j3 $(COMPAT_VENVS) lint && $(MAKE) --no-print-directory compat; } \
			> $(COMPAT_LOG) 2>&1; status=$$?; \
		echo; echo "== compatibility lane (venvs and lint at nice 19, then the slices), $$(( $$(date +%s) - start )) s:"; \
		cat $(COMPAT_LOG); exit $$status

# the inner loop, under 5 minutes: lint, types, the documentation site (warnings, broken links and anchors are
# errors), unit tests and one end-to-end stream, on the embedded broker only
check: $(STAMP) $(JARS) chromium
	$(BIN)/ruff check .
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	SHAREGROUP_TEST_KAFKA=embedded $(BIN)/python -m pytest -q tests/test_options.py tests/test_docs.py tests/test_schema.py \
		tests/test_state_share_partition.py tests/test_group_member.py tests/test_acknowledger.py tests/test_batch_size.py \
		tests/test_redaction.py tests/test_kafka_errors.py "tests/test_source.py::test_every_record_exactly_once_into_a_file_sink"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP) $(JARS)
	$(BIN)/python -m bench $(BENCH_ARGS)

soak: $(STAMP) $(JARS)
	$(BIN)/python -m soak $(SOAK_ARGS)

# two hours of both coordinators on three Apache Kafka brokers under their faults, sampled every 10 minutes
# (soak/long): bench/results/soak-long.json and .png, markdown tables for docs/benchmarks.md; exits 1 unless flat
soak-long: $(STAMP) $(JARS)
	$(BIN)/python -m soak.long $(SOAK_LONG_ARGS)

broker: $(STAMP)
	$(BIN)/sharegroup broker --topic orders:4

kafka: $(STAMP) $(JARS)
	$(BIN)/sharegroup kafka --topic orders:4

clean:
	rm -rf $(VENV) build *.egg-info $(TESTING)/build $(TESTING)/*.egg-info .pytest_cache jvm/target tools/node_modules
