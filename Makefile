# The two commands: `make demo` and `make test`. Each builds .venv on first use and
# reinstalls only when setup.py changes.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench soak broker clean

$(STAMP): setup.py
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 or run make PYTHON=python3"; exit 1; }
	@command -v java >/dev/null || { echo "java not found: Spark needs Java 17"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# compat mode keeps pyspark_sharegroup.py visible to Spark's pkgutil-based discovery
	$(BIN)/pip install --quiet -e '.[test]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m sharegroup_source.demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

soak: $(STAMP)
	$(BIN)/python -m soak $(SOAK_ARGS)

broker: $(STAMP)
	$(BIN)/sharegroup broker --topic orders:4

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
