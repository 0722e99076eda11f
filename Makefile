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
PYTEST_ARGS ?=
DEMO_DATA_DIR := .cache/kafka/demo

.DEFAULT_GOAL := help
.PHONY: help venv install lint test kafka kafka-stop kafka-status demo clean distclean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstalls only when the dependency declarations change.
$(INSTALLED): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,otlp]'
	@touch $@

venv: $(INSTALLED) ## Create .venv and install hopchain (editable) with dev and otlp extras

install: $(INSTALLED) ## Install or update the dependencies in .venv

lint: install ## ruff check, ruff format --check, mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict hopchain tests examples

test: install ## Run the tests; a real Kafka broker is started and stopped by the session
	@start=$$(date +%s); status=0; \
	$(BIN)/pytest $(PYTEST_ARGS) || status=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s in total (pytest exit status $$status)"; \
	exit $$status

kafka: install ## Start a development broker in the background (default 127.0.0.1:9092)
	$(HOPCHAIN) dev kafka start

kafka-stop: install ## Stop the development broker
	$(HOPCHAIN) dev kafka stop

kafka-status: install ## Show the development broker's status (exit 3 if not running)
	$(HOPCHAIN) dev kafka status

# The demo gets a broker of its own (fresh data, free ports), stopped however the demo ends.
demo: install ## Start Kafka, run a visible 20-record round trip through FastStream, stop Kafka
	@export HOPCHAIN_KAFKA_DATA_DIR=$(DEMO_DATA_DIR); \
	trap '$(HOPCHAIN) dev kafka stop' EXIT; \
	trap 'exit 130' INT TERM; \
	$(HOPCHAIN) dev kafka start --fresh --port 0 --controller-port 0 && \
	$(PY) examples/roundtrip.py

clean: ## Stop brokers, remove caches (resolved Kafka jars, broker data, tool caches)
	-@test -x $(HOPCHAIN) && $(HOPCHAIN) dev kafka stop
	-@test -x $(HOPCHAIN) && $(HOPCHAIN) dev kafka stop --data-dir $(DEMO_DATA_DIR)
	rm -rf .cache .mypy_cache .ruff_cache .pytest_cache .hypothesis build dist *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean ## clean, and remove .venv too
	rm -rf $(VENV)
