# Developer and CI entry points. `make help` lists them.
#
# Everything runs from the virtual environment in .venv, installed from constraints.txt.
# Kafka is real: `make test` starts one broker for the session (see tests/conftest.py);
# `make kafka` runs one in the background for development (`make kafka-stop` ends it).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
HOPCHAIN := $(BIN)/hopchain
INSTALLED := $(VENV)/.installed
# Material's banner about MkDocs 2 says nothing about this site.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
PYTEST_ARGS ?=
DEMO_ARGS ?=
CARGO ?= cargo
CORE := --manifest-path core/Cargo.toml
FUZZ := --manifest-path core/fuzz/Cargo.toml
# maturin finds zig (the ziglang package) through the interpreter first on PATH: the venv's.
MATURIN := PATH="$(abspath $(BIN)):$$PATH" VIRTUAL_ENV="$(abspath $(VENV))" $(BIN)/maturin
CORE_EXTENSION := hopchain/_core.abi3.so
CORE_SOURCES := core/Cargo.toml core/Cargo.lock $(wildcard core/src/*.rs)

.DEFAULT_GOAL := help
.PHONY: help venv install lint docs test wheel core-lint core-test core-python core-fuzz core-fuzz-soak soak bench kafka kafka-stop kafka-status demo clean distclean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstalls only when the dependency declarations (or the version, core/Cargo.toml's) change.
# The editable install builds the crate's extension, hopchain/_core.abi3.so, into the checkout
# (one release build); PIP_CONSTRAINT holds the build backend to constraints.txt as well.
$(INSTALLED): pyproject.toml constraints.txt core/Cargo.toml core/Cargo.lock | $(PY)
	PIP_CONSTRAINT=constraints.txt $(PY) -m pip install --quiet -c constraints.txt -e '.[all,dev]'
	@touch $@

# After a change to the crate's sources: the extension rebuilt in place, incrementally.
$(CORE_EXTENSION): $(CORE_SOURCES) | $(INSTALLED)
	$(MATURIN) develop --release --skip-install --quiet
	@touch $@

venv: $(INSTALLED) ## Create .venv and install hopchain (editable) with every extra (all) and the dev tools

install: $(INSTALLED) $(CORE_EXTENSION) ## Install or update .venv; build the crate's extension, hopchain._core, into the checkout

# What users install: glibc 2.17 and later, CPython 3.11 and later (abi3), no Rust needed.
wheel: install ## Build the manylinux2014 abi3 wheel into dist/ (zig as the linker)
	$(MATURIN) build --release --zig --compatibility manylinux2014 --out dist

lint: install core-lint ## core-lint; ruff check, ruff format --check, mypy --strict, the docs site built strictly
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict hopchain tests examples docs/hooks.py
	$(MKDOCS) build --strict --quiet

# The documentation site (mkdocs.yml, pages in docs/), into site/ (ignored by git). Strict: a
# broken link, a missing page or a docstring that does not render fails the build.
docs: install ## Build the documentation site into site/ (MkDocs, Material, API from docstrings)
	$(MKDOCS) build --strict

# HOPCHAIN_CORE_DIFF=1: tests/core holds the built extension to the Python reader's verdicts.
test: install core-test core-fuzz ## core-test, core-fuzz, then the tests; a real Kafka broker is started and stopped by the session
	@start=$$(date +%s); status=0; \
	HOPCHAIN_CORE_DIFF=1 $(BIN)/pytest $(PYTEST_ARGS) || status=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s in total (pytest exit status $$status)"; \
	exit $$status

# The compiled core: the Rust crate hopchain-core in core/ (SPEC.md's reader and writer).
core-lint: ## cargo fmt --check and cargo clippy -D warnings on the crate in core/ (bindings, fuzz targets too)
	$(CARGO) fmt $(CORE) --check
	$(CARGO) clippy $(CORE) --all-targets -- -D warnings
	$(CARGO) clippy $(CORE) --all-targets --features python -- -D warnings
	$(CARGO) fmt $(FUZZ) --check
	$(CARGO) clippy $(FUZZ) --all-targets -- -D warnings

core-test: ## cargo test on the crate in core/ (the vectors, fixtures and proptests)
	$(CARGO) test $(CORE)

# Coverage-guided fuzzing of the crate on stable Rust (libFuzzer; core/fuzz/run.sh): one target
# per input path, seeded from tests/vectors. Exits non-zero on any crash, its input kept in
# core/fuzz/artifacts. FUZZ_SECONDS is per target (5 targets).
FUZZ_SECONDS ?= 4
core-fuzz: ## Fuzz each input path of the crate for FUZZ_SECONDS (4) seconds; fails on a crash
	FUZZ_SECONDS=$(FUZZ_SECONDS) core/fuzz/run.sh

# 10 million executions per target: about 5 minutes for the record reader, 20 in all.
core-fuzz-soak: ## Fuzz each input path of the crate for 10 million executions
	FUZZ_RUNS=10000000 FUZZ_SECONDS=0 core/fuzz/run.sh

# The product does not read through the extension yet; tests/core compares the two readers.
core-python: $(CORE_EXTENSION) ## Rebuild hopchain._core into the checkout after a change to core/ (make install does too)

# The fault suite of tests/reliability (part of `make test` at a small scale) at full scale:
# 20,000-document crash and broker-restart runs, 40,000 hostile records. See RELIABILITY.md.
# And the read-path fuzzers of tests/fuzz at length: 400,000 coverage-guided executions,
# 200,000 mutated records per reader, 20,000 hypothesis examples per test.
soak: install core-fuzz-soak ## core-fuzz-soak; the fault suite and the fuzzers at full scale (HOPCHAIN_SOAK=1); tens of minutes
	@start=$$(date +%s); status=0; \
	HOPCHAIN_SOAK=1 $(BIN)/pytest tests/reliability tests/fuzz $(PYTEST_ARGS) || status=$$?; \
	echo "make soak: $$(( $$(date +%s) - start )) s in total (pytest exit status $$status)"; \
	exit $$status

# Not part of `make test`: minutes of load on a real broker. BENCH_RECORDS=5000 for a quick
# run; the other BENCH_* settings are listed in bench/run.py.
bench: install ## Benchmarks on a real broker (not part of test); writes BENCHMARKS.md
	$(PY) -m bench.run

kafka: install ## Start a development broker in the background (default 127.0.0.1:9092)
	$(HOPCHAIN) dev kafka start

kafka-stop: install ## Stop the development broker
	$(HOPCHAIN) dev kafka stop

kafka-status: install ## Show the development broker's status (exit 3 if not running)
	$(HOPCHAIN) dev kafka status

# The demo starts its own broker (fresh data, free ports) unless HOPCHAIN_KAFKA_BOOTSTRAP is
# set, and stops everything it started however it ends.
demo: install ## The claims pipeline with faults, end to end, on a real Kafka broker
	$(PY) -m examples.claims.demo $(DEMO_ARGS)

# The broker's jars and data live in the user's cache (~/.cache/hopchain, or
# HOPCHAIN_CACHE_DIR), shared by checkouts and installs: clean leaves them.
clean: ## Stop the development broker, remove build and tool caches
	-@test -x $(HOPCHAIN) && $(HOPCHAIN) dev kafka stop
	rm -rf .cache .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist site *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean ## clean, and remove .venv too
	rm -rf $(VENV)
