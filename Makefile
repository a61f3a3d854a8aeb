# shardq's single entry point. `make demo` runs the main job on the embedded database;
# `make test` runs the test suite CI runs. Both set up everything they need first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
EXTRAS ?= dev,spark,web

.PHONY: system-deps setup test test-serializable coverage-cockroach test-full test-cockroach test-cockroach-lines conformance reliability demo bench bench-quick lint clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

setup: $(VENV)/.installed-$(EXTRAS)

# Java 17+ and the PostgreSQL JDBC driver for the Spark tests and the demo (apt, when missing).
system-deps:
	./scripts/system-deps.sh

# The CI suite: every behaviour, CLI and migration test against the embedded PostgreSQL
# (CockroachDB variants run too where SHARDQ_TEST_COCKROACH_URL or a Docker engine exists).
test: system-deps setup
	$(BIN)/pytest -q -m "not slow"

# `make test`'s selection with the embedded PostgreSQL at SERIALIZABLE (the isolation CockroachDB
# runs), so every retry path meets real 40001s; the summary says how many retries the run made.
test-serializable: system-deps setup
	SHARDQ_TEST_ISOLATION=serializable $(BIN)/pytest -q -m "not slow"

# Branch coverage of the lines only CockroachDB runs, driven by the recorded-CockroachDB and
# conformance tests (no server): fails under 95 % ([tool.coverage.report] in pyproject.toml), then
# reports the modules both engines share, ungated. docs/cockroachdb.md lists what stays unreached.
SHARED_WITH_COCKROACH := src/shardq/spark/ledger.py,src/shardq/migrations/*,src/shardq/sessions/session.py,src/shardq/sessions/session_async.py,src/shardq/sessions/borrowed.py,src/shardq/engine/common.py,src/shardq/engine/base.py,src/shardq/migrations/apply.py
coverage-cockroach: setup
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest -q -m "recorded or conformance"
	$(BIN)/coverage report
	@echo "== shared with PostgreSQL (not gated): what the recorded CockroachDB reaches"
	$(BIN)/coverage report --include='$(SHARED_WITH_COCKROACH)' --fail-under=0 --skip-covered

# Every statement the CockroachDB engine can send, checked against rules from CockroachDB's source
# (no database; seconds). `make test` runs it too.
conformance: setup
	$(BIN)/pytest -q -m conformance tests/conformance

# The CockroachDB suite against an insecure single node testcontainers starts (a Docker engine),
# or the cluster SHARDQ_TEST_COCKROACH_URL names. COCKROACH=oldest (the 23.1 line) or newest (the
# default), or an image: tests/support/cockroach_container.py.
COCKROACH ?= newest
test-cockroach:
	$(MAKE) setup EXTRAS=dev,cockroach
	SHARDQ_TEST_COCKROACH_IMAGE=$(COCKROACH) $(BIN)/pytest -q -m cockroach

# test-cockroach on the oldest supported line (23.1) and on the newest, one node each (a Docker
# engine). Both run even when the first fails, so one command reports both; it exits non-zero if
# either failed. (With SHARDQ_TEST_COCKROACH_URL set both would run on that one cluster: use
# test-cockroach there.)
test-cockroach-lines:
	@status=0; \
	for line in oldest newest; do \
		echo "== make test-cockroach COCKROACH=$$line"; \
		$(MAKE) test-cockroach COCKROACH=$$line || { status=1; echo "== CockroachDB $$line: FAILED"; }; \
	done; \
	exit $$status

# Everything, including the long crash/fuzz suites.
test-full: system-deps setup
	$(BIN)/pytest -q

# The reliability suites in full (crash, database restart, timeouts, shutdown, fuzzing, secrets;
# the slow ones included), regenerating their report, docs/reliability.md.
reliability: system-deps setup
	SHARDQ_RELIABILITY_REPORT=docs/reliability.md $(BIN)/pytest -q tests/reliability

# Installs Java 17 and the PostgreSQL JDBC driver with apt when missing (as root or with sudo) and
# the `spark` extra, then runs `shardq demo` (ARGS="--tasks 20000" for a shorter run).
demo:
	PYTHON=$(PYTHON) ./scripts/demo.sh $(ARGS)

# Side-by-side benchmarks (raw-SQL bound, shardq, pgqueuer, procrastinate): loadtest/results/.
bench:
	$(MAKE) setup EXTRAS=dev,spark,bench
	$(BIN)/python -m loadtest --out loadtest/results

bench-quick:
	$(MAKE) setup EXTRAS=dev,spark,bench
	$(BIN)/python -m loadtest --quick --out loadtest/results

# ruff (rules in pyproject.toml) and ruff format over every Python file, mypy over the library, the CLI, the
# migrations and the tests, benchmarks, tools and examples (a wrong type handed to shardq anywhere
# fails), and the import contract (layers point down, no cycle: [tool.importlinter] in
# pyproject.toml). Each must report nothing.
lint: setup
	$(BIN)/ruff check src tests loadtest tools examples
	$(BIN)/ruff format --check src tests loadtest tools examples
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
