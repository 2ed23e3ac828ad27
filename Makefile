# kinesis-lake: `make demo` and `make test` are the two commands a fresh clone needs.
# Both install what they need first (scripts/bootstrap.sh says clearly what it cannot).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kinesis-lake-installed
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)

.PHONY: setup demo test test-compat test-tools test-fast dev bench bench-full lint clean fuzz lock simulate simulate-derived package

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock scripts/bootstrap.sh
	PYTHON=$(PYTHON) bash scripts/bootstrap.sh
	touch $(STAMP)

demo: setup
	$(BIN)/kinesis-lake demo

# The Spark compatibility suite (kinesis_lake_tests/spark_compat_suite.txt) on the newest
# PySpark 4.0.x and 4.1.x (requirements-spark-compat.lock), each in a virtualenv of its own:
# the main one's packages with only pyspark changed (scripts/spark_compat.sh), built once and
# again when the lock, the pins or the script change.
SPARK_COMPAT := $(shell sed -n 's/^pyspark==\([^ ]*\) .*/\1/p' requirements-spark-compat.lock)
COMPAT_STAMPS := $(SPARK_COMPAT:%=.venv-spark-%/.kinesis-lake-installed)

# Two pytest workers on the 2 cores CI has: much of the suite waits (JVM starts, endpoints,
# polls), so two files at a time finish sooner. A file's tests stay in one worker, in order.
# Then the Spark compatibility suite on each older PySpark (test-compat). The compatibility
# virtualenvs and the test tools are installed side by side first: each is mostly waiting
# on a download and the disk (a cold 4.1.4 virtualenv: 170 s, 40 s of it CPU).
TEST_WORKERS ?= 2
test: setup
	$(MAKE) --no-print-directory -j3 -Oline test-tools $(COMPAT_STAMPS)
	$(BIN)/python -m pytest kinesis_lake_tests --durations=30 -n $(TEST_WORKERS) --dist loadfile
	$(MAKE) --no-print-directory test-compat

test-tools: setup
	bash scripts/bootstrap.sh --test-tools

.venv-spark-%/.kinesis-lake-installed: $(STAMP) requirements-spark-compat.lock scripts/spark_compat.sh
	bash scripts/spark_compat.sh venv $*

test-compat: setup $(COMPAT_STAMPS)
	set -e; for version in $(SPARK_COMPAT); do \
		TEST_WORKERS=$(TEST_WORKERS) bash scripts/spark_compat.sh test $$version; \
	done

# The tests that need no JVM and start no process of their own (kinesis_lake_tests/tiers.py
# finds each test's kind): a few minutes, for while you work. A fast test that starts a
# process fails, naming the kind to mark it with. `make test` (CI) still runs every kind.
test-fast: setup
	$(BIN)/python -m pytest kinesis_lake_tests -m fast --durations=15 -n $(TEST_WORKERS) --dist loadfile

# DATA_DIR=.data/demo opens the UI on what `make demo` left; default .data/dev.
dev: setup
	$(if $(DATA_DIR),KINESIS_LAKE_DATA_DIR=$(abspath $(DATA_DIR))) $(BIN)/kinesis-lake dev

bench: setup
	$(BIN)/python -m benchmarks.run --quick

bench-full: setup
	$(BIN)/python -m benchmarks.run --full

# Long coverage-guided fuzz run of each target (make test runs each for 20 s); corpus kept
# in .data/fuzz, a crash input saved as .data/fuzz/crash-*. FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 600
fuzz: setup
	mkdir -p .data/fuzz
	for target in kpl arrow parse payloads; do \
		$(BIN)/python -m kinesis_lake_tests.fuzz.targets $$target \
			-max_total_time=$(FUZZ_SECONDS) -artifact_prefix=.data/fuzz/ || exit 1; \
	done

# Issue 31's deterministic simulation for SIM_SECONDS (make test runs it for about 60 s):
# seeded schedules of time, faults and concurrency against the real offset planning,
# shard reading, commit protocol and backlog probe; prints its figures, and each failure's
# seed with a shrunk replay to pin as a regression test.
SIM_SECONDS ?= 600
simulate: setup
	$(BIN)/python -m kinesis_lake_tests.simulation --seconds $(SIM_SECONDS)

# The derived tables' simulation, Spark in the loop (about a minute a schedule): routing,
# dedup, upsert, SQL modes, quarantine, replay, declaration edits, re-created tables,
# failing commits and maintenance racing a commit.
SIM_SCHEDULES ?= 20
simulate-derived: setup
	$(BIN)/python -m kinesis_lake_tests.simulation.derived --schedules $(SIM_SCHEDULES)

# Re-resolve requirements.lock (every extra, every platform, hashed) to the newest versions
# pyproject.toml allows; review the diff, run `make test`, commit both.
lock: setup
	$(BIN)/pip install -q uv
	$(BIN)/uv pip compile pyproject.toml --universal --generate-hashes --python-version 3.11 \
		--extra dev --extra aws --extra postgres --no-header --no-annotate --upgrade -o requirements.lock

# What a Spark cluster takes (docs/operations.md): the wheel, a packed virtualenv for
# spark.archives and the spark-submit entry point, in build/package/ (git ignores build/).
# Rebuilt only when the lock, pyproject.toml or the sources changed (a stamp of their hash).
package: setup
	$(BIN)/python scripts/package.py

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

clean:
	rm -rf .data test-output
